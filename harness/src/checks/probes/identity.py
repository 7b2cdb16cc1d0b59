# sandbox-contract/v1, check 2: the user, uid, gid, home and working directory the code runs as.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
import os as _sm_os
try:
    import pwd as _sm_pwd
    _sm_user = _sm_pwd.getpwuid(_sm_os.getuid()).pw_name
except (ImportError, KeyError):
    _sm_user = None
_sm_out = {'user': _sm_user, 'uid': _sm_os.getuid(), 'gid': _sm_os.getgid(), 'home': _sm_os.environ.get('HOME'), 'cwd': _sm_os.getcwd()}
