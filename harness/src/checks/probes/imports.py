# sandbox-contract/v1, check 5: each locked distribution's installed version and whether it imports.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import importlib as _sm_il, importlib.metadata as _sm_md, inspect as _sm_inspect


def _sm_top_level(_sm_dist):
    """The modules a distribution provides, as importlib.metadata.packages_distributions
    finds them (declared in top_level.txt, else inferred from its RECORD), for this one
    distribution only: reading every installed one's metadata takes a third of a second."""
    try:
        _sm_d = _sm_md.distribution(_sm_dist)
    except _sm_md.PackageNotFoundError:
        return []
    _sm_text = _sm_d.read_text('top_level.txt')
    if _sm_text:
        _sm_names = _sm_text.split()
    else:
        _sm_names = {
            _sm_f.parts[0] if len(_sm_f.parts) > 1 else (_sm_inspect.getmodulename(str(_sm_f)) or str(_sm_f))
            for _sm_f in _sm_d.files or ()
        }
    return [_sm_m for _sm_m in _sm_names if '.' not in _sm_m and not _sm_m.startswith('_')]


_sm_out = {}
for _sm_dist in _sm_args['names']:
    _sm_entry = {'version': None, 'imported': None, 'error': None}
    try:
        _sm_entry['version'] = _sm_md.version(_sm_dist)
    except _sm_md.PackageNotFoundError:
        _sm_entry['error'] = 'not installed'
    for _sm_mod in sorted(_sm_top_level(_sm_dist), key=len)[:1] or [_sm_dist.replace('-', '_')]:
        try:
            _sm_il.import_module(_sm_mod)
            _sm_entry['imported'] = _sm_mod
        except Exception as _sm_error:
            _sm_entry['error'] = type(_sm_error).__name__ + ': ' + str(_sm_error)
    _sm_out[_sm_dist] = _sm_entry
