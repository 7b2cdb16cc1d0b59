# sandbox-contract/v1, check 6: the workdir is writable, the reserved path is there and is not.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import os as _sm_os, uuid as _sm_uuid
_sm_out = {'write': False, 'read': False, 'delete': False, 'reservedExists': False,
           'reservedWritable': None, 'error': None}
_sm_path = _sm_os.path.join(_sm_args['workdir'], '.sandbox-matrix-' + _sm_uuid.uuid4().hex)
try:
    with open(_sm_path, 'w') as _sm_f:
        _sm_f.write('ok')
    _sm_out['write'] = True
    with open(_sm_path) as _sm_f:
        _sm_out['read'] = _sm_f.read() == 'ok'
    _sm_os.remove(_sm_path)
    _sm_out['delete'] = not _sm_os.path.exists(_sm_path)
except OSError as _sm_error:
    _sm_out['error'] = str(_sm_error)
_sm_out['reservedExists'] = _sm_os.path.isdir(_sm_args['reserved'])
if _sm_out['reservedExists']:
    _sm_reserved = _sm_os.path.join(_sm_args['reserved'], '.sandbox-matrix-' + _sm_uuid.uuid4().hex)
    try:
        with open(_sm_reserved, 'w') as _sm_f:
            _sm_f.write('no')
        _sm_os.remove(_sm_reserved)
        _sm_out['reservedWritable'] = True
    except OSError:
        _sm_out['reservedWritable'] = False
