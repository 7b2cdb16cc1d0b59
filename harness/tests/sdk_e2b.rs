//! E2B's official Python SDK (e2b-code-interpreter, pinned in harness/tests/sdk/
//! requirements.txt) runs its own flow against `sandbox-matrix emulate e2b`, the binary:
//! create from the reference template, `run_code("1+1")` gives 2, `commands.run("echo hi")`,
//! kill; and the killed sandbox's container is gone. Whatever the SDK sends that the
//! emulator refuses is an emulator bug, and fails here.
//!
//! The template is named as each side names it: by its name (what an SDK user writes) and
//! by `<templateID>:<buildID>` (the project's client's artifact; the SDK sends it verbatim).
//!
//! Needs Docker and the SDK venv (`SANDBOX_MATRIX_SDK_VENV`, default `target/sdk-venv`; the
//! .ci/run step "Provider SDKs" makes it). Without the venv it skips, except under CI=true.
//! `cargo test -p sandbox-matrix --test sdk_e2b`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_providers::api::network::CA_FILE_VAR;

/// The SDK the venv must hold, as the requirements file pins it.
const SDK: &str = "e2b-code-interpreter";
/// How long one run of the flow may take (a sandbox starts in seconds here).
const FLOW_DEADLINE: Duration = Duration::from_secs(180);

/// The venv's python when it holds the pinned SDK; otherwise why not.
fn sdk_python() -> Result<PathBuf, String> {
    let root = common::root();
    let venv = std::env::var_os("SANDBOX_MATRIX_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/sdk-venv"));
    let requirements = root.join("harness/tests/sdk/requirements.txt");
    let pins = std::fs::read_to_string(&requirements).expect("the SDK requirements file");
    let pinned = pins
        .lines()
        .filter_map(|l| l.split('#').next())
        .find_map(|l| {
            l.trim()
                .strip_prefix(SDK)?
                .strip_prefix("==")
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("{} pins no {SDK}", requirements.display()))
        .to_owned();
    let python = venv.join("bin/python");
    if !python.exists() {
        return Err(format!("no venv at {}", venv.display()));
    }
    let out = Command::new(&python)
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version('{SDK}'))"),
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let installed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || installed != pinned {
        return Err(format!(
            "{} holds {SDK} {installed:?}, not the pinned {pinned}",
            venv.display()
        ));
    }
    Ok(python)
}

/// The `emulate e2b` child and the settings it printed. Dropped, even by a failed
/// assertion, it gets SIGTERM by pid and is waited for (it removes what it made).
struct Emulate {
    child: Child,
    settings: BTreeMap<String, String>,
}

impl Emulate {
    fn start(ca_file: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["emulate", "e2b", "--port", "0", "--template", "reference"])
            // The SDK's resolver sends every name under .localhost to loopback: no pin.
            .args(["--domain", "e2b.localhost", "--ca-out"])
            .arg(ca_file)
            .arg("--root")
            .arg(common::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox-matrix emulate e2b starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut emulate = Self {
            child,
            settings: BTreeMap::new(),
        };
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line of settings");
            if let Some((name, value)) = line.split_once('=') {
                emulate.settings.insert(name.to_owned(), value.to_owned());
            }
            // The CA file comes last: once it is printed, the emulator serves.
            if line.starts_with(CA_FILE_VAR) {
                break;
            }
        }
        assert!(
            emulate.settings.contains_key(CA_FILE_VAR),
            "emulate e2b --template reference did not start serving: {:?}",
            emulate.settings
        );
        emulate
    }

    fn get(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("emulate printed no {name}: {:?}", self.settings))
    }

    /// SIGTERM by pid, then its exit status (None: still running after 60 s, then killed).
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Emulate {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the SDK's flow from an empty folder with `template`; fails unless every step is ok.
fn run_flow(python: &Path, emulate: &Emulate, template: &str, run_id: &str, dir: &Path) {
    let cwd = dir.join(format!("cwd-{run_id}"));
    std::fs::create_dir_all(&cwd).expect("an empty working folder");
    let (out_file, err_file) = (
        dir.join(format!("{run_id}.out")),
        dir.join(format!("{run_id}.err")),
    );
    let ca = emulate.get(CA_FILE_VAR);
    let mut command = Command::new(python);
    command
        .arg(common::root().join("harness/tests/sdk/e2b_flow.py"))
        .current_dir(&cwd)
        .env(
            "SANDBOX_MATRIX_EMULATOR_URL",
            format!("https://{}", emulate.get("E2B_DOMAIN")),
        )
        .env("SANDBOX_MATRIX_TEMPLATE", template)
        .env("SANDBOX_MATRIX_CA_FILE", ca)
        .env("SSL_CERT_FILE", ca)
        .env("SANDBOX_MATRIX_RUN_ID", run_id)
        .stdout(std::fs::File::create(&out_file).expect("the flow's stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("the flow's stderr file"));
    for name in [
        "E2B_API_URL",
        "E2B_SANDBOX_URL",
        "E2B_DOMAIN",
        "E2B_DEBUG",
        "E2B_API_KEY",
    ] {
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
            panic!("the SDK flow with {template} ran over {FLOW_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out_file).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_file).unwrap_or_default();
    eprintln!(
        "SDK flow with {template} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let steps: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a step line ({e}): {l}")))
        .collect();
    let named: Vec<(&str, bool)> = steps
        .iter()
        .map(|s| (s["step"].as_str().unwrap_or("?"), s["ok"] == true))
        .collect();
    assert!(
        status.success()
            && named
                == [
                    ("create", true),
                    ("run_code", true),
                    ("command", true),
                    ("kill", true),
                ],
        "the SDK flow with {template} ({status}):\n{stdout}\n{stderr}"
    );
}

#[test]
fn the_e2b_sdk_runs_its_flow_against_emulate_e2b() {
    let python = match sdk_python() {
        Ok(python) => python,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "sdk_e2b: CI=true requires the SDK venv ({reason}); make it as .ci/run's step \
             \"Provider SDKs\" does"
        ),
        Err(reason) => {
            eprintln!(
                "skipped sdk_e2b: {reason}; make the venv as .ci/run's step \"Provider SDKs\" \
                 does, or set SANDBOX_MATRIX_SDK_VENV"
            );
            return;
        }
    };
    if !common::docker_or_skip("sdk_e2b") {
        return;
    }
    let dir = common::out_dir("sdk-e2b");
    let mut emulate = Emulate::start(&dir.join("ca.pem"));
    let seeded = emulate.get("E2B_TEMPLATE").to_owned();
    let build = emulate.get("E2B_TEMPLATE_BUILD").to_owned();
    let run_id = sandbox_matrix::run::runner::new_run_id();
    for (form, template) in [("name", &seeded), ("build", &build)] {
        let run = format!("{run_id}-{form}");
        run_flow(&python, &emulate, template, &run, &dir);
        // Killed through the SDK, the sandbox is gone while the emulator still serves.
        let left = common::left_by_run(&run);
        assert!(
            left.is_empty(),
            "the SDK killed the sandbox (from {template}), yet {left:?} of it is left"
        );
    }
    let status = emulate.stop();
    assert!(
        status.is_some_and(|s| s.success()),
        "emulate e2b exited with {status:?}"
    );
    // The template it built for the run goes with it (its build is labelled by its name).
    let left = common::left_by_run(&seeded);
    assert!(
        left.is_empty(),
        "emulate left {left:?} of template {seeded}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
