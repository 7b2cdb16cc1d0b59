//! The providers' official Python SDKs, pinned in harness/tests/sdk/requirements.txt, in a
//! venv (`SANDBOX_MATRIX_SDK_VENV`, default `target/sdk-venv`; .ci/run's step "Provider
//! SDKs" makes it), and a flow script run with it that prints one JSON line per step.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one run of a flow may take (a sandbox starts in seconds here).
const FLOW_DEADLINE: Duration = Duration::from_secs(180);

/// The version harness/tests/sdk/requirements.txt pins `sdk` at; panics when it pins none.
pub fn pinned(sdk: &str) -> String {
    let requirements = super::root().join("harness/tests/sdk/requirements.txt");
    let pins = std::fs::read_to_string(&requirements).expect("the SDK requirements file");
    pins.lines()
        .filter_map(|l| l.split('#').next())
        .find_map(|l| {
            l.trim()
                .strip_prefix(sdk)?
                .strip_prefix("==")
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("{} pins no {sdk}", requirements.display()))
        .to_owned()
}

/// The venv's python when it holds `sdk` at `version`; otherwise why not.
fn python(sdk: &str, version: &str) -> Result<PathBuf, String> {
    let venv = std::env::var_os("SANDBOX_MATRIX_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::root().join("target/sdk-venv"));
    let python = venv.join("bin/python");
    if !python.exists() {
        return Err(format!("no venv at {}", venv.display()));
    }
    let out = Command::new(&python)
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version('{sdk}'))"),
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let installed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || installed != version {
        return Err(format!(
            "{} holds {sdk} {installed:?}, not the pinned {version}",
            venv.display()
        ));
    }
    Ok(python)
}

/// The venv's python holding `sdk` at `version`; panics without it. The test's
/// registration (`common::trials::Need::Sdk`) has checked this before the test ran.
pub fn required_python(sdk: &str, version: &str) -> PathBuf {
    python(sdk, version).unwrap_or_else(|reason| panic!("{reason}"))
}

/// Why `sdk`, at its pinned version, cannot be used here, if it cannot.
pub fn missing(sdk: &str) -> Option<String> {
    python(sdk, &pinned(sdk)).err().map(|reason| {
        format!(
            "needs the SDK venv ({reason}); make it as .ci/run's step \"Provider SDKs\" does, \
             or set SANDBOX_MATRIX_SDK_VENV"
        )
    })
}

/// Runs `script` (under harness/tests/sdk/) with `python` from the empty folder `cwd`, with
/// `env` set and `cleared` removed, its output kept beside `cwd`; fails unless it exits 0
/// within 3 minutes having printed exactly `steps`, each ok, and returns the lines it
/// printed. `what` names the run.
pub fn run_flow(
    python: &Path,
    script: &str,
    cwd: &Path,
    env: &[(&str, &str)],
    cleared: &[&str],
    what: &str,
    steps: &[&str],
) -> Vec<serde_json::Value> {
    run_flow_with(Command::new(python), script, cwd, env, cleared, what, steps)
}

/// `python` to run in a mount namespace of its own where the system's CA bundle
/// (`/etc/ssl/certs/ca-certificates.crt`) is `ca_file`, for [`run_flow_with`]: for an SDK
/// client that trusts only that bundle (Daytona's object storage client, which the SDK
/// builds with the environment cleared, so no `SSL_CERT_FILE` reaches it). The machine's
/// bundle is untouched; it needs `unshare` and the right to mount (root), as CI has.
pub fn with_system_ca(ca_file: &Path, python: &Path) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/ssl/certs/ca-certificates.crt && exec "$@""#)
        .arg(ca_file)
        .arg(python);
    command
}

/// As [`run_flow`], with `command` (a python, or what execs one last) in place of
/// `python`; the script is its last argument.
pub fn run_flow_with(
    mut command: Command,
    script: &str,
    cwd: &Path,
    env: &[(&str, &str)],
    cleared: &[&str],
    what: &str,
    steps: &[&str],
) -> Vec<serde_json::Value> {
    std::fs::create_dir_all(cwd).expect("an empty working folder");
    let output = |ext: &str| PathBuf::from(format!("{}.{ext}", cwd.display()));
    let (out_file, err_file) = (output("out"), output("err"));
    command
        .arg(super::root().join("harness/tests/sdk").join(script))
        .current_dir(cwd)
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out_file).expect("the flow's stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("the flow's stderr file"));
    for name in cleared {
        command.env_remove(name);
    }
    let started = Instant::now();
    let mut child = command.spawn().expect("the venv's python runs");
    let status = loop {
        if let Some(status) = child.try_wait().expect("the flow's status") {
            break status;
        }
        if started.elapsed() > FLOW_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the SDK flow with {what} ran over {FLOW_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out_file).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_file).unwrap_or_default();
    eprintln!(
        "SDK flow with {what} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let printed: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a step line ({e}): {l}")))
        .collect();
    let named: Vec<(&str, bool)> = printed
        .iter()
        .map(|s| (s["step"].as_str().unwrap_or("?"), s["ok"] == true))
        .collect();
    let expected: Vec<(&str, bool)> = steps.iter().map(|&s| (s, true)).collect();
    assert!(
        status.success() && named == expected,
        "the SDK flow with {what} ({status}):\n{stdout}\n{stderr}"
    );
    printed
}
