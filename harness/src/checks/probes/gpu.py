# sandbox-contract/v1, check 11: the GPUs nvidia-smi sees, the driver's CUDA and the toolkit's.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
import os as _sm_os, re as _sm_re, shutil as _sm_sh, subprocess as _sm_sp
_sm_out = {'exit': None, 'gpus': [], 'driver': None, 'cuda': None, 'error': None}
try:
    _sm_run = _sm_sp.run(['nvidia-smi'], capture_output=True, text=True, timeout=30)
    _sm_out['exit'] = _sm_run.returncode
    _sm_m = _sm_re.search(r'CUDA Version:\s*([0-9.]+)', _sm_run.stdout)
    _sm_out['driver'] = _sm_m.group(1) if _sm_m else None
    _sm_names = _sm_sp.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'], capture_output=True, text=True, timeout=30)
    _sm_out['gpus'] = [_sm_l.strip() for _sm_l in _sm_names.stdout.splitlines() if _sm_l.strip()]
except (OSError, _sm_sp.SubprocessError) as _sm_error:
    _sm_out['error'] = str(_sm_error)
try:
    _sm_run = _sm_sp.run([_sm_sh.which('nvcc') or '/usr/local/cuda/bin/nvcc', '--version'], capture_output=True, text=True, timeout=30)
    _sm_m = _sm_re.search(r'release ([0-9.]+),', _sm_run.stdout)
    _sm_out['cuda'] = _sm_m.group(1) if _sm_m else None
except (OSError, _sm_sp.SubprocessError):
    pass
_sm_out['cuda'] = _sm_out['cuda'] or _sm_os.environ.get('CUDA_VERSION')
