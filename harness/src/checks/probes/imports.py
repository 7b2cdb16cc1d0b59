# sandbox-contract/v1, check 5: each locked distribution's installed version and whether it imports.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import importlib as _sm_il, importlib.metadata as _sm_md, re as _sm_re
_sm_norm = lambda _sm_v: _sm_re.sub(r'[-_.]+', '-', _sm_v).lower()
_sm_modules = {}
for _sm_mod, _sm_dists in _sm_md.packages_distributions().items():
    for _sm_d in _sm_dists:
        if not _sm_mod.startswith('_'):
            _sm_modules.setdefault(_sm_norm(_sm_d), []).append(_sm_mod)
_sm_out = {}
for _sm_dist in _sm_args['names']:
    _sm_entry = {'version': None, 'imported': None, 'error': None}
    try:
        _sm_entry['version'] = _sm_md.version(_sm_dist)
    except _sm_md.PackageNotFoundError:
        _sm_entry['error'] = 'not installed'
    for _sm_mod in sorted(_sm_modules.get(_sm_dist, []), key=len)[:1] or [_sm_dist.replace('-', '_')]:
        try:
            _sm_il.import_module(_sm_mod)
            _sm_entry['imported'] = _sm_mod
        except Exception as _sm_error:
            _sm_entry['error'] = type(_sm_error).__name__ + ': ' + str(_sm_error)
    _sm_out[_sm_dist] = _sm_entry
