//! The modal variant through the CLI against `sandbox-matrix emulate modal`, the binary,
//! with exactly the settings it prints: `--live`, labelled emulated (the emulator names
//! itself in its answers), the extended tier's four contexts run at
//! once on four real kernels (replay runs them one after another); recorded, the
//! lifecycle's cassette written by `run --record` replays with no credential in the
//! environment; and no value of the emulator's token reaches any file.
//!
//! Needs Docker (required under CI=true): `cargo test -p sandbox-matrix --test engine modal_cli::`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::emulate::Emulate;
use sandbox_providers::modal::{Connection, ModalProvider};
use sandbox_providers::{BaseImage, BuildRequest, Housekeeping as _, Provider, RunLabels, Secret};

/// `sandbox-matrix run ARGS` with the emulator's settings (or none), its exit code and
/// output.
fn run(emulate: Option<&Emulate>, args: &[&str], out: &Path) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .arg("run")
        .args(args)
        .arg("--root")
        .arg(common::root())
        .arg("--out")
        .arg(out)
        .env_remove("MODAL_TOKEN_ID")
        .env_remove("MODAL_TOKEN_SECRET")
        .env_remove("MODAL_SERVER_URL");
    if let Some(emulate) = emulate {
        command
            .env("SANDBOX_MATRIX_MODAL_URL", emulate.get("MODAL_SERVER_URL"))
            .env("MODAL_TOKEN_ID", emulate.get("MODAL_TOKEN_ID"))
            .env("MODAL_TOKEN_SECRET", emulate.get("MODAL_TOKEN_SECRET"));
    }
    let output = command.output().expect("sandbox-matrix runs");
    (
        output.status.code(),
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn results(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("latest/results.json")).expect("results.json");
    serde_json::from_str(&text).expect("results.json parses")
}

pub fn modal_runs_live_records_and_replays_through_the_cli() {
    let emulate = Emulate::start("modal", &["--port", "0"]);
    let out = common::out_dir("modal-cli");

    // Live: four contexts answer at once, each its own kernel.
    let live = out.join("live");
    let (code, log) = run(
        Some(&emulate),
        &[
            "--live",
            "--variant",
            "modal",
            "--scenario",
            "extended-tier",
        ],
        &live,
    );
    assert_eq!(code, Some(0), "{log}");
    let live_results = results(&live);
    let scenario = &live_results["scenarios"][0];
    // `--live` with the settings `emulate` printed reached our emulator, which said so in
    // its answers: the result is emulated, never taken for Modal's.
    assert_eq!(scenario["mode"], "emulated", "{scenario}");
    assert!(
        scenario["emulator"]
            .as_str()
            .is_some_and(|e| e.contains("Modal emulator")),
        "{scenario}"
    );
    let concurrent = scenario["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["step"] == "extended-14-concurrent-kernels")
        .expect("check 14 ran");
    assert_eq!(concurrent["status"], "passed", "{concurrent}");
    assert_eq!(concurrent["data"]["answered"], 4, "{concurrent}");

    // Recorded, then replayed from what was written, with no credential set.
    let cassettes = out.join("cassettes");
    let cassettes_arg = cassettes.display().to_string();
    let lifecycle = [
        "--cassettes",
        &cassettes_arg,
        "--variant",
        "modal",
        "--scenario",
        "lifecycle",
    ];
    let (code, log) = run(
        Some(&emulate),
        &[&["--record"], &lifecycle[..]].concat(),
        &out.join("record"),
    );
    assert_eq!(code, Some(0), "{log}");
    let cassette = cassettes.join("modal/lifecycle.yaml");
    assert!(
        cassette.is_file(),
        "no cassette at {}: {log}",
        cassette.display()
    );
    let (code, log) = run(None, &lifecycle, &out.join("replay"));
    assert_eq!(code, Some(0), "the recording replays: {log}");
    let replayed = results(&out.join("replay"));
    let scenario = &replayed["scenarios"][0];
    assert_eq!(scenario["mode"], "replay", "{scenario}");
    let check = scenario["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["step"] == "replay")
        .expect("the replay's own step");
    assert_eq!(check["status"], "passed", "{check}");
    assert!(
        check["log"]
            .to_string()
            .contains("every call served as recorded"),
        "{check}"
    );

    // The emulator's token (fakes) is in no cassette and no report; nor is the run's
    // canary, which the build got in a Secret: the cassette names it by placeholder.
    let token = [
        Secret::new("MODAL_TOKEN_ID", emulate.get("MODAL_TOKEN_ID")),
        Secret::new("MODAL_TOKEN_SECRET", emulate.get("MODAL_TOKEN_SECRET")),
    ];
    common::assert_no_value_in_tree(&out, &token);
    let recorded = std::fs::read_to_string(&cassette).expect("the cassette reads");
    assert!(
        recorded.contains("through sandbox-matrix") && !recorded.contains("recorded live"),
        "the cassette's origin names the emulator it was authored through"
    );
    assert!(
        recorded.contains("REGISTRY_TOKEN: <redacted:REGISTRY_TOKEN>"),
        "the build's Secret holds the canary's placeholder"
    );
    assert!(
        !recorded.contains("sm-fake-canary-"),
        "a canary value (they all start sm-fake-canary-) is in the cassette"
    );

    // A killed run's sandbox: made here and left running; sweep finds it by its tags.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let credentials = sandbox_providers::modal::client::Credentials {
        token_id: token[0].clone(),
        token_secret: token[1].clone(),
    };
    // Its channel connects lazily, which needs the runtime it is made in.
    let provider = runtime.block_on(async {
        ModalProvider::new(
            emulate.get("MODAL_SERVER_URL"),
            credentials,
            Connection::Live,
            Default::default(),
        )
        .expect("a modal client")
    });
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let labels = RunLabels {
        run_id: run_id.clone(),
        variant: "modal".to_owned(),
        scenario: "killed".to_owned(),
    };
    let (artifact, sandbox) = runtime.block_on(async {
        let request = BuildRequest {
            environment_dir: common::root().join("fixtures/environments/reference"),
            base: BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
            registry_credential: None,
            build_secrets: Vec::new(),
            labels: labels.clone(),
        };
        let artifact = provider
            .build(&request, &|_: &str| {})
            .await
            .expect("a build");
        let (sandbox, _) = provider.launch(&artifact, &labels).await.expect("a launch");
        (artifact, sandbox)
    });
    let swept = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--variant", "modal", "--run", &run_id, "--out"])
        .arg(out.join("sweep"))
        .current_dir(common::root())
        .env("SANDBOX_MATRIX_MODAL_URL", emulate.get("MODAL_SERVER_URL"))
        .env("MODAL_TOKEN_ID", emulate.get("MODAL_TOKEN_ID"))
        .env("MODAL_TOKEN_SECRET", emulate.get("MODAL_TOKEN_SECRET"))
        .output()
        .expect("sweep runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&swept.stdout),
        String::from_utf8_lossy(&swept.stderr)
    );
    assert_eq!(swept.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&sandbox.0),
        "sweep names the sandbox it removed: {said}"
    );
    runtime.block_on(async {
        let left = provider
            .list_labelled(Some(&run_id))
            .await
            .expect("a listing");
        assert!(left.is_empty(), "sweep left {left:?}");
        // Modal lists no images by label: a run finds its image through its ledger.
        let image = provider.artifact_resource(&artifact).expect("an image");
        provider
            .delete_resource(&image)
            .await
            .expect("the image is deleted");
    });
    emulate.stop();
    let _ = std::fs::remove_dir_all(&out);
}
