# sandbox-contract/v1, check 1: runs the doctor and hands back its exit code and output.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import subprocess as _sm_sp
try:
    _sm_run = _sm_sp.run([_sm_args['doctor'], 'doctor', '--json'], capture_output=True, text=True, timeout=120)
    _sm_out = {'exit': _sm_run.returncode, 'stdout': _sm_run.stdout[-65536:], 'stderr': _sm_run.stderr[-4096:]}
except (OSError, _sm_sp.SubprocessError) as _sm_error:
    _sm_out = {'exit': None, 'stdout': '', 'stderr': type(_sm_error).__name__ + ': ' + str(_sm_error)}
