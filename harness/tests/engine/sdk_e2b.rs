//! E2B's official Python SDK (e2b-code-interpreter, pinned in harness/tests/sdk/
//! requirements.txt) runs its own flow against `sandbox-matrix emulate e2b`, the binary,
//! on the reference environment built twice, as each start command makes it:
//! - as is (a Jupyter Server on port 49999, what the project's client speaks to): create
//!   with public traffic off, the Jupyter Server answers at the SDK's host for port 49999
//!   with the sandbox's traffic access token and refuses without it, `commands.run`, kill;
//! - with E2B's code-interpreter start command (`emulate --start-cmd`): create,
//!   `run_code("1+1")` gives 2, `commands.run("echo hi")`, kill.
//!
//! Each time the killed sandbox's container is gone. Whatever the SDK sends that the
//! emulator refuses is an emulator bug, and fails here.
//!
//! The template is named as each side names it: by its name (what an SDK user writes) and
//! by `<templateID>:<buildID>` (the project's client's artifact; the SDK sends it verbatim).
//!
//! Needs Docker and the SDK venv (`SANDBOX_MATRIX_SDK_VENV`, default `target/sdk-venv`; the
//! .ci/run step "Provider SDKs" makes it). Without the venv it skips, except under CI=true.
//! `cargo test -p sandbox-matrix --test engine sdk_e2b::`.

use crate::common;

use std::path::Path;

use common::emulate::Emulate;
use sandbox_providers::api::network::CA_FILE_VAR;

/// The SDK the venv must hold, as the requirements file pins it.
pub const SDK: &str = "e2b-code-interpreter";

/// E2B's code-interpreter template's start command: what makes the emulator serve
/// `/execute` on port 49999.
const INTERPRETER_START: &str = "/root/.jupyter/start-up.sh";

/// Runs the SDK's flow from an empty folder with `template`, whose port 49999 serves
/// `channel` (`jupyter` or `interpreter`); fails unless every step is ok.
fn run_flow(
    python: &Path,
    emulate: &Emulate,
    (template, channel): (&str, &str),
    run_id: &str,
    dir: &Path,
) {
    let ca = emulate.get(CA_FILE_VAR);
    let url = format!("https://{}", emulate.get("E2B_DOMAIN"));
    common::sdk::run_flow(
        python,
        "e2b_flow.py",
        &dir.join(format!("cwd-{run_id}")),
        &[
            ("SANDBOX_MATRIX_EMULATOR_URL", &url),
            ("SANDBOX_MATRIX_TEMPLATE", template),
            ("SANDBOX_MATRIX_CA_FILE", ca),
            ("SSL_CERT_FILE", ca),
            ("SANDBOX_MATRIX_RUN_ID", run_id),
            ("SANDBOX_MATRIX_CODE_CHANNEL", channel),
        ],
        &[
            "E2B_API_URL",
            "E2B_SANDBOX_URL",
            "E2B_DOMAIN",
            "E2B_DEBUG",
            "E2B_API_KEY",
        ],
        template,
        &[
            "create",
            if channel == "jupyter" {
                "jupyter"
            } else {
                "run_code"
            },
            "command",
            "kill",
        ],
    );
}

pub fn the_e2b_sdk_runs_its_flow_against_emulate_e2b() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let dir = common::out_dir("sdk-e2b");
    let run_id = sandbox_matrix::run::runner::new_run_id();
    for (channel, start) in [("jupyter", None), ("interpreter", Some(INTERPRETER_START))] {
        let ca_file = dir.join(format!("ca-{channel}.pem")).display().to_string();
        let mut args = vec![
            "--port",
            "0",
            "--template",
            "reference",
            // The SDK's resolver sends every name under .localhost to loopback: no pin.
            "--domain",
            "e2b.localhost",
            "--ca-out",
            &ca_file,
        ];
        if let Some(start) = start {
            args.extend(["--start-cmd", start]);
        }
        let emulate = Emulate::start("e2b", &args);
        let seeded = emulate.get("E2B_TEMPLATE").to_owned();
        let build = emulate.get("E2B_TEMPLATE_BUILD").to_owned();
        for (form, template) in [("name", &seeded), ("build", &build)] {
            let run = format!("{run_id}-{channel}-{form}");
            run_flow(&python, &emulate, (template, channel), &run, &dir);
            // Killed through the SDK, the sandbox is gone while the emulator still serves.
            let left = common::left_by_run(&run);
            assert!(
                left.is_empty(),
                "the SDK killed the sandbox (from {template}), yet {left:?} of it is left"
            );
        }
        emulate.stop();
        // The template it built for the run goes with it (its build is labelled by its name).
        let left = common::left_by_run(&seeded);
        assert!(
            left.is_empty(),
            "emulate left {left:?} of template {seeded}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
