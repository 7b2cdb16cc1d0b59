# sandbox-contract/v1, check 12: 64 MiB written and synced in the workdir, in MiB/s.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import os as _sm_os, time as _sm_time, uuid as _sm_uuid
_sm_path = _sm_os.path.join(_sm_args['workdir'], '.sandbox-matrix-throughput-' + _sm_uuid.uuid4().hex)
_sm_chunk = bytes(1024 * 1024)
_sm_start = _sm_time.monotonic()
try:
    with open(_sm_path, 'wb') as _sm_f:
        for _sm_i in range(64):
            _sm_f.write(_sm_chunk)
        _sm_f.flush()
        _sm_os.fsync(_sm_f.fileno())
    _sm_out = {'mibPerSecond': round(64 / max(_sm_time.monotonic() - _sm_start, 1e-6), 1), 'error': None}
except OSError as _sm_error:
    _sm_out = {'mibPerSecond': 0.0, 'error': str(_sm_error)}
finally:
    if _sm_os.path.exists(_sm_path):
        _sm_os.remove(_sm_path)
