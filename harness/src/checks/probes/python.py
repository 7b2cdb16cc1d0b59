# sandbox-contract/v1, check 3: the Python version and the installers on PATH.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
import shutil as _sm_shutil, sys as _sm_sys
_sm_out = {'version': '%d.%d' % _sm_sys.version_info[:2], 'full': _sm_sys.version.split()[0], 'executable': _sm_sys.executable, 'pip': _sm_shutil.which('pip') or _sm_shutil.which('pip3'), 'uv': _sm_shutil.which('uv')}
