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
//! CI=true. `cargo test -p sandbox-matrix --test engine sdk_daytona::`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::emulate::Emulate;
use sandbox_providers::api::network::CA_FILE_VAR;

/// The SDK's distribution and the version the test is written against.
pub const SDK: &str = "daytona";
const PINNED: &str = "0.226.1";
/// The variant label on everything the emulator builds and starts for a client that
/// labels nothing of its own (the SDK labels its sandboxes `code-toolbox-language` only).
const EMULATOR_VARIANT: &str = "daytona-emulator";

/// The API URL on `localhost`, at the port of the printed live-form URL.
fn localhost_api_url(emulate: &Emulate) -> String {
    let live = emulate.get("DAYTONA_API_URL");
    let url = reqwest::Url::parse(live).expect("DAYTONA_API_URL is a URL");
    let port = url
        .port()
        .expect("DAYTONA_API_URL names the emulator's port");
    format!("https://localhost:{port}{}", url.path())
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
    let ca = emulate.get(CA_FILE_VAR);
    common::sdk::run_flow(
        python,
        "daytona_flow.py",
        cwd,
        &[
            ("SANDBOX_MATRIX_EMULATOR_URL", &localhost_api_url(emulate)),
            ("SANDBOX_MATRIX_SNAPSHOT", snapshot),
            ("SANDBOX_MATRIX_CA_FILE", ca),
            ("SSL_CERT_FILE", ca),
        ],
        &[
            "DAYTONA_API_URL",
            "DAYTONA_API_KEY",
            "DAYTONA_TARGET",
            "DAYTONA_JWT_TOKEN",
            "DAYTONA_ORGANIZATION_ID",
            "DAYTONA_USE_DEPRECATED_POLLING",
            "DAYTONA_OTEL_ENABLED",
            "SSL_CERT_DIR",
        ],
        snapshot,
        &["create", "run_code", "code_run", "command", "delete"],
    );
}

pub fn the_daytona_sdk_runs_its_flow_against_emulate_daytona() {
    // The shared requirements file must pin what this test is written for.
    assert_eq!(
        common::sdk::pinned(SDK),
        PINNED,
        "harness/tests/sdk/requirements.txt does not pin {SDK}=={PINNED}"
    );
    let python = common::sdk::required_python(SDK, PINNED);
    let dir = common::out_dir("sdk-daytona");
    let ca_file = dir.join("ca.pem").display().to_string();
    let emulate = Emulate::start(
        "daytona",
        &[
            "--port",
            "0",
            "--snapshot",
            "reference",
            "--ca-out",
            &ca_file,
        ],
    );
    let pid = emulate.pid();
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
    emulate.stop();
    let left = [emulator_left(pid, "container"), emulator_left(pid, "image")].concat();
    assert!(left.is_empty(), "emulate daytona left {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
