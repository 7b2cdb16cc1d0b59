# sandbox-contract/v1, check 8: a process group that traps SIGTERM exits within the grace
# period, and an orphan does not stay a zombie under PID 1.
# Runs in the sandbox's kernel (or python3): binds `_sm_out`; answer.py prints it.
# `_sm_args` is bound before it by sandbox-matrix.
#
# It waits on what it observes rather than for fixed times: SIGTERM is sent once /proc
# shows the shell's trap set (at most 0.3 s), and the orphan check ends as soon as the
# orphan is reaped and no zombie is left under PID 1 (at most 2 s).
import os as _sm_os, signal as _sm_signal, subprocess as _sm_sp, time as _sm_time
_sm_out = {'exited': None, 'seconds': None, 'pid1': None, 'pid1Sigterm': None, 'orphanZombies': None}
_sm_bit = 1 << (_sm_signal.SIGTERM - 1)


def _sm_masks(_sm_pid):
    """The SigIgn, SigCgt and SigBlk masks of a process, from /proc; {} when unreadable."""
    try:
        with open('/proc/%d/status' % _sm_pid) as _sm_f:
            return {_sm_k: int(_sm_v, 16) for _sm_k, _sm_v in
                    (_sm_l.split(':', 1) for _sm_l in _sm_f if _sm_l.startswith(('SigIgn', 'SigCgt', 'SigBlk')))}
    except (OSError, ValueError):
        return {}


def _sm_state(_sm_pid):
    """A process's state letter and parent pid from /proc, or None once it is gone."""
    try:
        with open('/proc/%d/stat' % _sm_pid) as _sm_f:
            _sm_fields = _sm_f.read().rsplit(')', 1)[-1].split()
        return _sm_fields[0], _sm_fields[1]
    except (OSError, IndexError):
        return None


_sm_proc = _sm_sp.Popen(['sh', '-c', 'trap "exit 0" TERM; sleep 30 & wait'], start_new_session=True)
_sm_trap_by = _sm_time.monotonic() + 0.3
while _sm_time.monotonic() < _sm_trap_by and not _sm_masks(_sm_proc.pid).get('SigCgt', 0) & _sm_bit:
    _sm_time.sleep(0.002)
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
    _sm_m = _sm_masks(1)
    if _sm_m['SigIgn'] & _sm_bit:
        _sm_out['pid1Sigterm'] = 'ignored'
    elif (_sm_m['SigCgt'] | _sm_m['SigBlk']) & _sm_bit:
        _sm_out['pid1Sigterm'] = 'caught'
    else:
        _sm_out['pid1Sigterm'] = 'default'
except (OSError, KeyError):
    pass
if _sm_os.path.isdir('/proc/1'):
    # The shell exits at once and leaves its background sleep to PID 1.
    _sm_shell = _sm_sp.Popen(['sh', '-c', 'sleep 0.05 & echo $!'], stdout=_sm_sp.PIPE)
    _sm_orphan = int(_sm_shell.communicate(timeout=5)[0])
    _sm_deadline = _sm_time.monotonic() + 2.0
    while True:
        _sm_zombies = 0
        for _sm_pid in _sm_os.listdir('/proc'):
            if _sm_pid.isdigit() and _sm_state(int(_sm_pid)) == ('Z', '1'):
                _sm_zombies += 1
        if _sm_zombies == 0 and _sm_state(_sm_orphan) is None or _sm_time.monotonic() > _sm_deadline:
            break
        _sm_time.sleep(0.01)
    _sm_out['orphanZombies'] = _sm_zombies
