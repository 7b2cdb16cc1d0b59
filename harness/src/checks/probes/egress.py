# sandbox-contract/v1, check 10: which host:port targets a TCP connection reaches.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import socket as _sm_socket
_sm_out = {}
for _sm_target in _sm_args['targets']:
    _sm_host, _, _sm_port = _sm_target.rpartition(':')
    try:
        _sm_socket.create_connection((_sm_host, int(_sm_port)), timeout=3).close()
        _sm_out[_sm_target] = True
    except (OSError, ValueError):
        _sm_out[_sm_target] = False
