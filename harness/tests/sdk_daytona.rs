//! Daytona's official Python SDK (daytona==0.226.1) runs its own flow against
//! `sandbox-matrix emulate daytona`, the binary: create from the reference snapshot, the
//! interpreter's `run_code("print(1+1)")` prints 2, `process.code_run` prints 2,
//! `process.exec("echo hi")` prints hi, delete; then no container of the emulator's is
//! left. Whatever the SDK sends that the emulator refuses, or the emulator answers that the
//! SDK cannot read, is an emulator bug and fails here.
//!
//! The SDK resolves names through the system resolver, which cannot be pinned: it calls
//! `https://localhost:<port>/api`, which the emulator serves beside its live forms, and
//! trusts the test CA through `SSL_CERT_FILE`. The snapshot is named both ways Daytona
//! takes it: by its name (what an SDK user writes) and by its id.
//!
//! Needs Docker and the SDK venv (`SANDBOX_MATRIX_SDK_VENV`, default `target/sdk-venv`;
//! .ci/run's step "Provider SDKs" makes it). Without the venv it skips, except under
//! CI=true. `cargo test -p sandbox-matrix --test sdk_daytona`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_providers::api::network::CA_FILE_VAR;

/// The SDK's distribution and the version the test is written against.
const SDK: &str = "daytona";
const PINNED: &str = "0.226.1";
/// How long one run of the flow may take (a sandbox starts in seconds here).
const FLOW_DEADLINE: Duration = Duration::from_secs(180);
/// The variant label on everything the emulator builds and starts for a client that
/// labels nothing of its own (the SDK labels its sandboxes `code-toolbox-language` only).
const EMULATOR_VARIANT: &str = "daytona-emulator";

/// The venv's python when it holds the pinned SDK; otherwise why not.
fn sdk_python() -> Result<PathBuf, String> {
    let root = common::root();
    // Once the shared requirements file exists, it must pin what this test is written for.
    let requirements = root.join("harness/tests/sdk/requirements.txt");
    if let Ok(pins) = std::fs::read_to_string(&requirements) {
        let pin = format!("{SDK}=={PINNED}");
        assert!(
            pins.lines()
                .any(|l| l.split('#').next().unwrap_or_default().trim() == pin),
            "{} does not pin {pin}",
            requirements.display()
        );
    }
    let venv = std::env::var_os("SANDBOX_MATRIX_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/sdk-venv"));
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
    if !out.status.success() || installed != PINNED {
        return Err(format!(
            "{} holds {SDK} {installed:?}, not the pinned {PINNED}",
            venv.display()
        ));
    }
    Ok(python)
}

/// The `emulate daytona --snapshot reference` child and the settings it printed. Dropped,
/// even by a failed assertion, it gets SIGTERM by pid and is waited for (it removes what it
/// made).
struct Emulate {
    child: Child,
    settings: BTreeMap<String, String>,
}

impl Emulate {
    fn start(ca_file: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args([
                "emulate",
                "daytona",
                "--port",
                "0",
                "--snapshot",
                "reference",
            ])
            .arg("--ca-out")
            .arg(ca_file)
            .arg("--root")
            .arg(common::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox-matrix emulate daytona starts");
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
            "emulate daytona --snapshot reference did not start serving: {:?}",
            emulate.settings
        );
        emulate
    }

    fn get(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("emulate printed no {name}: {:?}", self.settings))
    }

    /// The API URL on `localhost`, at the port of the printed live-form URL.
    fn localhost_api_url(&self) -> String {
        let live = self.get("DAYTONA_API_URL");
        let url = reqwest::Url::parse(live).expect("DAYTONA_API_URL is a URL");
        let port = url
            .port()
            .expect("DAYTONA_API_URL names the emulator's port");
        format!("https://localhost:{port}{}", url.path())
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

/// What the docker CLI lists (`args`, ids) of the emulator process `pid`'s own labels: its
/// run id is `emulator-<pid>-<random>`.
fn emulator_left(pid: u32, kind: &str) -> Vec<String> {
    let variant = format!(
        "label={}={EMULATOR_VARIANT}",
        sandbox_providers::VARIANT_LABEL
    );
    let listed = match kind {
        "container" => vec!["ps", "-aq", "--filter", &variant],
        _ => vec!["images", "-q", "--filter", &variant],
    };
    let out = Command::new("docker")
        .args(&listed)
        .output()
        .expect("docker CLI runs");
    assert!(out.status.success(), "docker {listed:?}");
    let ids = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("emulator-{pid}-");
    let mut left = Vec::new();
    for id in ids.split_whitespace() {
        let format = format!(
            "{{{{index .Config.Labels \"{}\"}}}}",
            sandbox_providers::RUN_LABEL
        );
        let run = Command::new("docker")
            .args(["inspect", "--format", &format, id])
            .output()
            .expect("docker CLI runs");
        if String::from_utf8_lossy(&run.stdout)
            .trim()
            .starts_with(&prefix)
        {
            left.push(format!("{kind} {id}"));
        }
    }
    left
}

/// Runs the SDK's flow from an empty folder with `snapshot`; fails unless every step is ok.
fn run_flow(python: &Path, emulate: &Emulate, snapshot: &str, cwd: &Path) {
    std::fs::create_dir_all(cwd).expect("an empty working folder");
    let (out_file, err_file) = (cwd.with_extension("out"), cwd.with_extension("err"));
    let ca = emulate.get(CA_FILE_VAR);
    let mut command = Command::new(python);
    command
        .arg(common::root().join("harness/tests/sdk/daytona_flow.py"))
        .current_dir(cwd)
        .env("SANDBOX_MATRIX_EMULATOR_URL", emulate.localhost_api_url())
        .env("SANDBOX_MATRIX_SNAPSHOT", snapshot)
        .env("SANDBOX_MATRIX_CA_FILE", ca)
        .env("SSL_CERT_FILE", ca)
        .stdout(std::fs::File::create(&out_file).expect("the flow's stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("the flow's stderr file"));
    for name in [
        "DAYTONA_API_URL",
        "DAYTONA_API_KEY",
        "DAYTONA_TARGET",
        "DAYTONA_JWT_TOKEN",
        "DAYTONA_ORGANIZATION_ID",
        "DAYTONA_USE_DEPRECATED_POLLING",
        "DAYTONA_OTEL_ENABLED",
        "SSL_CERT_DIR",
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
            panic!("the SDK flow with {snapshot} ran over {FLOW_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out_file).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_file).unwrap_or_default();
    eprintln!(
        "SDK flow with {snapshot} took {:.1} s",
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
                    ("code_run", true),
                    ("command", true),
                    ("delete", true),
                ],
        "the SDK flow with {snapshot} ({status}):\n{stdout}\n{stderr}"
    );
}

#[test]
fn the_daytona_sdk_runs_its_flow_against_emulate_daytona() {
    let python = match sdk_python() {
        Ok(python) => python,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "sdk_daytona: CI=true requires the SDK venv ({reason}); make it as .ci/run's step \
             \"Provider SDKs\" does"
        ),
        Err(reason) => {
            eprintln!(
                "skipped sdk_daytona: {reason}; make the venv as .ci/run's step \"Provider \
                 SDKs\" does, or set SANDBOX_MATRIX_SDK_VENV"
            );
            return;
        }
    };
    if !common::docker_or_skip("sdk_daytona") {
        return;
    }
    let dir = common::out_dir("sdk-daytona");
    let mut emulate = Emulate::start(&dir.join("ca.pem"));
    let pid = emulate.child.id();
    let by_name = emulate.get("DAYTONA_SNAPSHOT").to_owned();
    let by_id = emulate.get("DAYTONA_SNAPSHOT_ID").to_owned();
    assert_ne!(by_name, by_id, "the snapshot's name and id are the same");
    for (form, snapshot) in [("name", &by_name), ("id", &by_id)] {
        run_flow(&python, &emulate, snapshot, &dir.join(form));
        // Deleted through the SDK, the sandbox's container is gone while the emulator serves.
        let left = emulator_left(pid, "container");
        assert!(
            left.is_empty(),
            "the SDK deleted the sandbox (from the snapshot's {form}), yet {left:?} is left"
        );
    }
    // The query above sees the emulator's labels: its seeded snapshot is there until it stops.
    let seeded = emulator_left(pid, "image");
    assert!(
        !seeded.is_empty(),
        "no image of the emulator's seeded snapshot"
    );
    let status = emulate.stop();
    assert!(
        status.is_some_and(|s| s.success()),
        "emulate daytona exited with {status:?}"
    );
    let left = [emulator_left(pid, "container"), emulator_left(pid, "image")].concat();
    assert!(left.is_empty(), "emulate daytona left {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
