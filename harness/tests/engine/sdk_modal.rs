//! Modal's official Python client (`modal`, pinned in harness/tests/sdk/requirements.txt)
//! runs its own sandbox flow against `sandbox-matrix emulate modal`, the binary, reached
//! through the client's documented settings (MODAL_SERVER_URL, MODAL_TOKEN_ID,
//! MODAL_TOKEN_SECRET; plain gRPC on loopback, as the client allows there):
//! a token the emulator did not issue is refused; `App.lookup`; a sandbox from
//! `Image.from_registry(<the reference base>)` with a Dockerfile step (a docker build the
//! client follows through `ImageJoinStreaming`), its first `SandboxCreate` answered
//! `Unavailable` (`--unavailable-once`), which the client retries;
//! `exec("python", "-c", "print(1+1)")` prints 2 through the task command router; an exec
//! runs as root in the workdir asked for; `terminate`, then `wait` reports the end, and `terminate` again is a no-op; a
//! sandbox from an image whose build fails raises `ImageBuildError` quoting the failing
//! step's output.
//!
//! Once terminated, the sandbox's container is gone while the emulator still serves; once
//! the emulator has stopped, so is the image it built. Whatever the client sends that the
//! emulator cannot serve is an emulator bug, and fails here.
//!
//! Needs Docker and the SDK venv (`SANDBOX_MATRIX_SDK_VENV`, default `target/sdk-venv`; the
//! .ci/run step "Provider SDKs" makes it). Without the venv it skips, except under CI=true.
//! `cargo test -p sandbox-matrix --test engine sdk_modal::`.

use crate::common;

use common::emulate::Emulate;

/// The client the venv must hold, as the requirements file pins it.
pub const SDK: &str = "modal";

pub fn the_modal_client_runs_its_sandbox_flow_against_emulate_modal() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let dir = common::out_dir("sdk-modal");
    let run_id = sandbox_matrix::run::runner::new_run_id();
    // The first SandboxCreate answers Unavailable, as a live control plane may: the client
    // retries it (modal_emulator shows the emulator does inject it).
    let emulate = Emulate::start(
        "modal",
        &["--port", "0", "--unavailable-once", "SandboxCreate"],
    );
    let builds = emulate.get("SANDBOX_MATRIX_EMULATOR_RUN").to_owned();
    common::sdk::run_flow(
        &python,
        "modal_flow.py",
        &dir.join("cwd"),
        &[
            ("MODAL_SERVER_URL", emulate.get("MODAL_SERVER_URL")),
            ("MODAL_TOKEN_ID", emulate.get("MODAL_TOKEN_ID")),
            ("MODAL_TOKEN_SECRET", emulate.get("MODAL_TOKEN_SECRET")),
            (
                "SANDBOX_MATRIX_IMAGE",
                sandbox_providers::docker::base::BASE_IMAGE,
            ),
            ("SANDBOX_MATRIX_RUN_ID", &run_id),
        ],
        &[
            "MODAL_PROFILE",
            "MODAL_ENVIRONMENT",
            "MODAL_CONFIG_PATH",
            "MODAL_SANDBOX_V2",
            "MODAL_IMAGE_BUILDER_VERSION",
        ],
        "the reference base",
        &[
            "refused",
            "create",
            "exec",
            "exec_user_workdir",
            "terminate",
            "terminate_again",
            "build_fails",
        ],
    );
    // Terminated through the client, the sandbox is gone while the emulator still serves.
    let left = common::left_by_run(&run_id);
    assert!(
        left.is_empty(),
        "the client terminated the sandbox, yet {left:?} of it is left"
    );
    assert!(
        !common::left_by_run(&builds).is_empty(),
        "the emulator's build of the client's image is not labelled {builds}"
    );
    emulate.stop();
    // The image it built for the client goes with it.
    let left = common::left_by_run(&builds);
    assert!(left.is_empty(), "emulate modal left {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
