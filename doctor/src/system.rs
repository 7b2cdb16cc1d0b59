//! [`SystemHost`]: the machine the doctor runs on, read through the C library and `/proc`.

use std::ffi::{CStr, CString, c_char};
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::{mem, process, ptr};

use crate::Host;

/// How long `python3` has to answer.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(15);

/// How long the shell that leaves an orphan has to exit.
const ORPHAN_SHELL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the orphan may stay a zombie after it exits (it sleeps 0.1 s) before PID 1
/// is judged not to reap it.
const REAP_GRACE: Duration = Duration::from_millis(600);

/// How often a child is polled.
const POLL: Duration = Duration::from_millis(10);

/// The most of a child's output that is read.
const OUTPUT_LIMIT: u64 = 1 << 20;

/// The largest buffer `getpwuid_r` is given.
const PASSWD_BUFFER_LIMIT: usize = 1 << 20;

/// Seconds in half a year: a time of the other season, for the standard zone name.
const HALF_YEAR_SECS: i64 = 182 * 24 * 3600;

/// The machine this process runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemHost;

impl Host for SystemHost {
    fn system(&self) -> Option<String> {
        uname().map(|(system, _)| system)
    }

    fn machine(&self) -> Option<String> {
        uname().map(|(_, machine)| machine)
    }

    fn read_file(&self, path: &str) -> Option<String> {
        fs::read(path)
            .ok()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }

    fn read_link(&self, path: &str) -> Option<String> {
        fs::read_link(path)
            .ok()
            .map(|target| target.to_string_lossy().into_owned())
    }

    fn uid(&self) -> u32 {
        // SAFETY: getuid has no preconditions and cannot fail.
        unsafe { libc::getuid() }
    }

    fn gid(&self) -> u32 {
        // SAFETY: getgid has no preconditions and cannot fail.
        unsafe { libc::getgid() }
    }

    fn user_name(&self, uid: u32) -> Option<String> {
        let mut size = 1024;
        loop {
            let mut buffer: Vec<c_char> = vec![0; size];
            // SAFETY: passwd is plain data; all-zero is a valid value for it.
            let mut entry: libc::passwd = unsafe { mem::zeroed() };
            let mut found: *mut libc::passwd = ptr::null_mut();
            // SAFETY: every pointer is valid for the call, and `buffer.len()` is its size.
            let status = unsafe {
                libc::getpwuid_r(
                    uid,
                    &mut entry,
                    buffer.as_mut_ptr(),
                    buffer.len(),
                    &mut found,
                )
            };
            if status == libc::ERANGE && size < PASSWD_BUFFER_LIMIT {
                size *= 4;
                continue;
            }
            if status != 0 || found.is_null() || entry.pw_name.is_null() {
                return None;
            }
            // SAFETY: on success pw_name points at a NUL-terminated string inside `buffer`,
            // which is still alive.
            let name = unsafe { CStr::from_ptr(entry.pw_name) };
            return Some(name.to_string_lossy().into_owned());
        }
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
    }

    fn cwd(&self) -> Option<String> {
        std::env::current_dir()
            .ok()
            .map(|dir| dir.to_string_lossy().into_owned())
    }

    fn is_dir(&self, path: &str) -> bool {
        Path::new(path).is_dir()
    }

    fn is_executable(&self, path: &str) -> bool {
        fs::metadata(path).is_ok_and(|meta| !meta.is_dir()) && access(path, libc::X_OK)
    }

    fn file_len(&self, path: &str) -> Option<u64> {
        fs::metadata(path)
            .ok()
            .filter(fs::Metadata::is_file)
            .map(|meta| meta.len())
    }

    /// Permission bits say nothing of a read-only mount or a full disk, so a writable-looking
    /// directory is confirmed by creating, and removing, a file in it.
    fn can_write(&self, dir: &str) -> bool {
        if !Path::new(dir).is_dir() || !access(dir, libc::W_OK) {
            return false;
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let probe = Path::new(dir).join(format!(".datalayer-doctor-{}-{nanos}", process::id()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .and_then(|mut file| file.write_all(b"ok"));
        written.is_ok() && fs::remove_file(&probe).is_ok()
    }

    fn run_python(&self, python3: &str, script: &str, args: &[&str]) -> Result<String, String> {
        let mut command = Command::new(python3);
        // From `/`, so no file in the working directory can shadow a module the probe imports.
        command.arg("-c").arg(script).args(args).current_dir("/");
        run_bounded(command, python3, PYTHON_TIMEOUT)
    }

    fn local_zone_name(&self) -> Option<String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since| i64::try_from(since.as_secs()).ok())?;
        let mut first = None;
        for time in [now, now - HALF_YEAR_SECS] {
            let (name, daylight_saving) = local_zone_at(time)?;
            if !daylight_saving {
                return Some(name);
            }
            first.get_or_insert(name);
        }
        first
    }

    fn orphan_zombies(&self) -> Option<u32> {
        if !Path::new("/proc/1").is_dir() {
            return None;
        }
        // The shell prints its background `sleep`'s pid and exits at once; the `sleep`,
        // orphaned, exits 0.1 s later and is then a zombie until something reaps it.
        let mut shell = Command::new("sh")
            .args(["-c", "sleep 0.1 & echo $!"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + ORPHAN_SHELL_TIMEOUT;
        loop {
            match shell.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
                _ => {
                    let _ = shell.kill();
                    let _ = shell.wait();
                    return None;
                }
            }
        }
        let mut pid = String::new();
        shell.stdout.take()?.read_to_string(&mut pid).ok()?;
        let stat = format!("/proc/{}/stat", pid.trim().parse::<u32>().ok()?);
        // Judged from the orphan's own exit, not from a fixed time after the shell's: on a
        // loaded machine the `sleep` can exit late, just before a fixed look, and be
        // counted as a zombie that PID 1 was about to reap.
        let mut zombie_since: Option<Instant> = None;
        loop {
            let Ok(text) = fs::read_to_string(&stat) else {
                return Some(0);
            };
            match state_and_parent(&text) {
                Some(('Z', _))
                    if zombie_since.get_or_insert_with(Instant::now).elapsed() >= REAP_GRACE =>
                {
                    return Some(1);
                }
                _ if Instant::now() >= deadline + ORPHAN_SHELL_TIMEOUT => return None,
                _ => {}
            }
            thread::sleep(POLL);
        }
    }
}

/// `uname`'s system and machine names.
fn uname() -> Option<(String, String)> {
    // SAFETY: utsname is plain data; all-zero is a valid value for it.
    let mut names: libc::utsname = unsafe { mem::zeroed() };
    // SAFETY: `names` is a valid, writable utsname.
    if unsafe { libc::uname(&mut names) } != 0 {
        return None;
    }
    Some((c_field(&names.sysname), c_field(&names.machine)))
}

/// A NUL-terminated fixed-size C string field, lossily as UTF-8.
fn c_field(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `access(2)` grants `mode` on `path`.
fn access(path: &str, mode: libc::c_int) -> bool {
    let Ok(path) = CString::new(path) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::access(path.as_ptr(), mode) == 0 }
}

/// The local zone's abbreviation at `time` (seconds since the epoch), and whether it is
/// daylight saving time then.
fn local_zone_at(time: i64) -> Option<(String, bool)> {
    let time = libc::time_t::try_from(time).ok()?;
    // SAFETY: tm is plain data; all-zero is a valid value for it.
    let mut local: libc::tm = unsafe { mem::zeroed() };
    // SAFETY: both pointers are valid; localtime_r is the reentrant form.
    if unsafe { libc::localtime_r(&time, &mut local) }.is_null() || local.tm_zone.is_null() {
        return None;
    }
    // SAFETY: on success tm_zone points at a NUL-terminated string the C library keeps.
    let name = unsafe { CStr::from_ptr(local.tm_zone) };
    Some((name.to_string_lossy().into_owned(), local.tm_isdst > 0))
}

/// A `/proc/<pid>/stat` line's state and parent pid. The command name, in parentheses, may
/// hold spaces and parentheses itself, so the fields are read after its last `)`.
fn state_and_parent(stat: &str) -> Option<(char, u32)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    let mut state_chars = state.chars();
    match (state_chars.next(), state_chars.next()) {
        (Some(state), None) => Some((state, parent)),
        _ => None,
    }
}

/// Runs `command` with no input and returns its stdout, or why it gave none: it could not
/// start, it exited unsuccessfully, or it (or a child still holding its output) ran past
/// `timeout`, in which case its whole process group is killed.
fn run_bounded(mut command: Command, name: &str, timeout: Duration) -> Result<String, String> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|error| format!("{name} could not be run: {error}"))?;
    let (sender, receiver) = mpsc::channel();
    for (is_stdout, pipe) in [
        (
            true,
            child
                .stdout
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
        ),
        (
            false,
            child
                .stderr
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
        ),
    ] {
        let Some(pipe) = pipe else { continue };
        let sender = sender.clone();
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.take(OUTPUT_LIMIT).read_to_end(&mut bytes);
            // The receiver is gone only when the command already timed out.
            let _ = sender.send((is_stdout, bytes));
        });
    }
    drop(sender);

    let deadline = Instant::now() + timeout;
    let (mut stdout, mut stderr, mut status) = (None, None, None);
    while stdout.is_none() || stderr.is_none() || status.is_none() {
        if Instant::now() >= deadline {
            kill_group(&mut child);
            return Err(format!(
                "{name} gave no answer within {} s",
                timeout.as_secs_f32()
            ));
        }
        match receiver.recv_timeout(POLL) {
            Ok((true, bytes)) => stdout = Some(bytes),
            Ok((false, bytes)) => stderr = Some(bytes),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Both readers are done; whatever they did not send stays empty.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                stdout.get_or_insert_with(Vec::new);
                stderr.get_or_insert_with(Vec::new);
                if status.is_none() {
                    thread::sleep(POLL);
                }
            }
        }
        if status.is_none() {
            match child.try_wait() {
                Ok(found) => status = found,
                Err(error) => {
                    kill_group(&mut child);
                    return Err(format!("{name} could not be waited for: {error}"));
                }
            }
        }
    }
    let (stdout, stderr, status) = (
        stdout.unwrap_or_default(),
        stderr.unwrap_or_default(),
        status.ok_or_else(|| format!("{name} did not exit"))?,
    );
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
        return Err(match last {
            Some(line) => format!("{name} failed ({status}): {}", line.trim()),
            None => format!("{name} failed ({status})"),
        });
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Kills `child`'s process group (it leads one) and reaps `child`.
fn kill_group(child: &mut Child) {
    if let Ok(group) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill has no memory preconditions; the group is the one `child` leads.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn stat_lines_give_state_and_parent_even_with_odd_names() {
        assert_eq!(
            state_and_parent("42 (sleep) Z 1 42 42 0 -1"),
            Some(('Z', 1))
        );
        assert_eq!(state_and_parent("7 (a (b) c) S 3 7 7 0 -1"), Some(('S', 3)));
        assert_eq!(state_and_parent("garbage"), None);
        assert_eq!(state_and_parent("1 (x) ZZ 1"), None);
        assert_eq!(state_and_parent("1 (x) Z notanumber"), None);
    }

    #[test]
    fn a_bounded_command_returns_its_stdout() {
        let answer = run_bounded(
            shell("echo hello; echo noise >&2"),
            "sh",
            Duration::from_secs(5),
        );
        assert_eq!(answer.as_deref(), Ok("hello\n"));
    }

    #[test]
    fn a_hanging_command_and_its_children_are_killed_at_the_deadline() {
        let started = Instant::now();
        // The shell forks `sleep`, which holds the output pipe: both must go.
        let answer = run_bounded(
            shell("sleep 30; echo late"),
            "python3",
            Duration::from_millis(300),
        );
        assert_eq!(
            answer.err().as_deref(),
            Some("python3 gave no answer within 0.3 s")
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_failing_command_reports_its_status_and_last_error_line() {
        let answer = run_bounded(
            shell("echo first >&2; echo 'last words' >&2; exit 3"),
            "python3",
            Duration::from_secs(5),
        );
        assert_eq!(
            answer.err().as_deref(),
            Some("python3 failed (exit status: 3): last words")
        );
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_panic() {
        let answer = SystemHost.run_python("/nonexistent/python3", "print(1)", &[]);
        let error = answer.err().unwrap();
        assert!(
            error.starts_with("/nonexistent/python3 could not be run: "),
            "{error}"
        );
    }

    #[test]
    fn the_real_host_reads_this_machine_without_failing() {
        let host = SystemHost;
        assert_eq!(host.system().as_deref(), Some("Linux"));
        assert!(host.machine().is_some_and(|machine| !machine.is_empty()));
        assert!(host.is_dir("/"));
        assert!(!host.is_dir("/nonexistent"));
        assert!(host.is_executable("/bin/sh"));
        assert!(!host.is_executable("/"));
        assert!(!host.can_write("/nonexistent"));
        assert!(!host.can_write("/proc"));
        assert_eq!(host.file_len("/nonexistent"), None);
        assert_eq!(host.read_file("bad\0path"), None);
        assert!(!host.can_write("bad\0path"));
        assert!(host.local_zone_name().is_some());
        let temp = std::env::temp_dir();
        let temp = temp.to_str().unwrap();
        assert!(host.can_write(temp));
        // The probe file is gone again.
        let left: Vec<_> = fs::read_dir(temp)
            .unwrap()
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&format!(".datalayer-doctor-{}-", process::id()))
            })
            .collect();
        assert!(left.is_empty());
    }
}
