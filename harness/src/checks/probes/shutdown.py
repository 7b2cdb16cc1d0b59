# sandbox-contract/v1, check 8: a process group that traps SIGTERM exits within the grace period, and an
# orphan does not stay a zombie under PID 1.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
import os as _sm_os, signal as _sm_signal, subprocess as _sm_sp, time as _sm_time
_sm_out = {'exited': None, 'seconds': None, 'pid1': None, 'pid1Sigterm': None, 'orphanZombies': None}
_sm_proc = _sm_sp.Popen(['sh', '-c', 'trap "exit 0" TERM; sleep 30 & wait'], start_new_session=True)
_sm_time.sleep(0.3)
_sm_start = _sm_time.monotonic()
_sm_os.killpg(_sm_proc.pid, _sm_signal.SIGTERM)
try:
    _sm_proc.wait(timeout=_sm_args['grace'])
    _sm_out['exited'] = True
    _sm_out['seconds'] = round(_sm_time.monotonic() - _sm_start, 3)
except _sm_sp.TimeoutExpired:
    _sm_out['exited'] = False
    _sm_os.killpg(_sm_proc.pid, _sm_signal.SIGKILL)
try:
    with open('/proc/1/comm') as _sm_f:
        _sm_out['pid1'] = _sm_f.read().strip()
    with open('/proc/1/status') as _sm_f:
        _sm_masks = dict(_sm_l.split(':', 1) for _sm_l in _sm_f if _sm_l.startswith(('SigIgn', 'SigCgt', 'SigBlk')))
    _sm_bit = 1 << (_sm_signal.SIGTERM - 1)
    if int(_sm_masks['SigIgn'], 16) & _sm_bit:
        _sm_out['pid1Sigterm'] = 'ignored'
    elif (int(_sm_masks['SigCgt'], 16) | int(_sm_masks['SigBlk'], 16)) & _sm_bit:
        _sm_out['pid1Sigterm'] = 'caught'
    else:
        _sm_out['pid1Sigterm'] = 'default'
except (OSError, KeyError, ValueError):
    pass
if _sm_os.path.isdir('/proc/1'):
    _sm_sp.Popen(['sh', '-c', 'sleep 0.1 &']).wait(timeout=5)
    _sm_deadline = _sm_time.monotonic() + 2.0
    while True:
        _sm_zombies = 0
        for _sm_pid in _sm_os.listdir('/proc'):
            if not _sm_pid.isdigit():
                continue
            try:
                with open('/proc/' + _sm_pid + '/stat') as _sm_f:
                    _sm_fields = _sm_f.read().rsplit(')', 1)[-1].split()
            except OSError:
                continue
            if len(_sm_fields) >= 2 and _sm_fields[0] == 'Z' and _sm_fields[1] == '1':
                _sm_zombies += 1
        if _sm_zombies == 0 and _sm_time.monotonic() > _sm_start + 0.6 or _sm_time.monotonic() > _sm_deadline:
            break
        _sm_time.sleep(0.1)
    _sm_out['orphanZombies'] = _sm_zombies
