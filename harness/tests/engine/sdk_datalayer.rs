//! Datalayer's own Python client (datalayer-core, pinned in harness/tests/sdk/requirements.txt,
//! with the jupyter-kernel-client it was released against) runs its runtime flow against
//! `sandbox-matrix emulate datalayer`, the binary, reached at its plain loopback address as
//! the client's run, IAM and runtimes URL: create a runtime of the environment, get it by
//! its pod_name, list it, start a kernel at its ingress with its token, `1+1` → `2`, stop
//! (DELETE by pod_name), and it is gone. The emulator is written from what this client
//! sends and reads, so this is the proof that the two agree, by code this project did not
//! write. Needs Docker and the SDK venv (both required under CI=true).
//! `cargo test -p sandbox-matrix --test engine sdk_datalayer::`.

use crate::common;

use std::process::Command;

use common::emulate::Emulate;

/// The client's distribution and the version the test is written against: the newest
/// datalayer-core that still creates runtimes itself (later ones moved that elsewhere).
pub const SDK: &str = "datalayer-core";
const PINNED: &str = "1.1.40";

/// Containers and images the emulator on `port` made, by its run label
/// (`datalayer-emulator-<port>…`).
fn emulator_left(port: u16) -> Vec<String> {
    let prefix = format!("datalayer-emulator-{port}");
    let mut left = Vec::new();
    for listed in [
        vec![
            "ps",
            "-aq",
            "--filter",
            "label=sandbox-matrix.variant=datalayer-emulator",
        ],
        vec![
            "images",
            "-q",
            "--filter",
            "label=sandbox-matrix.variant=datalayer-emulator",
        ],
    ] {
        let out = Command::new("docker")
            .args(&listed)
            .output()
            .expect("docker CLI runs");
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let run = Command::new("docker")
                .args([
                    "inspect",
                    "--format",
                    "{{index .Config.Labels \"sandbox-matrix.run\"}}",
                    id,
                ])
                .output()
                .expect("docker CLI runs");
            if String::from_utf8_lossy(&run.stdout)
                .trim()
                .starts_with(&prefix)
            {
                left.push(format!("{} {id}", listed[0]));
            }
        }
    }
    left
}

pub fn datalayers_client_runs_its_runtime_flow_against_emulate_datalayer() {
    assert_eq!(
        common::sdk::pinned(SDK),
        PINNED,
        "harness/tests/sdk/requirements.txt does not pin {SDK}=={PINNED}"
    );
    let python = common::sdk::required_python(SDK, PINNED);
    let dir = common::out_dir("sdk-datalayer");
    let ca_file = dir.join("ca.pem").display().to_string();
    let emulate = Emulate::start("datalayer", &["--port", "0", "--ca-out", &ca_file]);
    let port = reqwest::Url::parse(emulate.get("DATALAYER_RUNTIMES_URL"))
        .expect("DATALAYER_RUNTIMES_URL is a URL")
        .port()
        .expect("it names the emulator's port");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("an empty HOME");
    common::sdk::run_flow(
        &python,
        "datalayer_flow.py",
        &dir.join("flow"),
        &[
            (
                "SANDBOX_MATRIX_DATALAYER_PLAIN_URL",
                emulate.get("SANDBOX_MATRIX_DATALAYER_PLAIN_URL"),
            ),
            (
                "SANDBOX_MATRIX_ENVIRONMENT",
                emulate.get("SANDBOX_MATRIX_DATALAYER_ENVIRONMENT"),
            ),
            ("HOME", &home.display().to_string()),
            // No keyring backend may answer for the token.
            ("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring"),
        ],
        &[
            "DATALAYER_RUN_URL",
            "DATALAYER_URL",
            "DATALAYER_IAM_URL",
            "DATALAYER_RUNTIMES_URL",
            "DATALAYER_API_KEY",
            "TEST_DATALAYER_API_KEY",
            "DATALAYER_EXTERNAL_TOKEN",
        ],
        "datalayer-core",
        &["create", "get", "list", "execute", "delete"],
    );
    // Deleted through the client: only the emulator's environment build is left.
    let running: Vec<String> = emulator_left(port)
        .into_iter()
        .filter(|r| r.starts_with("ps "))
        .collect();
    assert!(
        running.is_empty(),
        "the client deleted its runtime, yet {running:?} is left"
    );
    emulate.stop();
    let left = emulator_left(port);
    assert!(left.is_empty(), "emulate datalayer left {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
