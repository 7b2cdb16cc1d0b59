//! What a cloud build creates part-way is in the run ledger as soon as it exists: the e2b
//! template before its build runs, the Daytona registry entry the build makes. Replayed
//! from the recorded failed-build cassettes, so the build ends without an artifact and only
//! the ledger's `created` line names what was made (these cassettes end with the failed
//! build, so the cleanup after it is not replayed: `cli_cloud` replays the full lifecycle,
//! where cleanup must ask nothing the recording lacks). No Docker, no network.

mod common;

use std::path::Path;
use std::process::Command;

use sandbox_matrix::run::ledger::{LEDGER_FILE, LedgerView};
use sandbox_providers::api::Cassette;
use sandbox_providers::api::cassette::Body;

/// The id the cassette's `method path` exchange answered with in `field`.
fn answered_id(cassette: &Cassette, method: &str, path: &str, field: &str) -> String {
    let exchange = cassette
        .exchanges
        .iter()
        .find(|e| e.request.method == method && e.request.path == path)
        .unwrap_or_else(|| panic!("the cassette has {method} {path}"));
    match &exchange.response.body {
        Some(Body::Json(json)) => json[field].as_str().expect("an id").to_owned(),
        other => panic!("{method} {path} answered {other:?}"),
    }
}

/// Replays `fault` (under fixtures/cassettes/<variant>/faults/) as the lifecycle; returns
/// the run's ledger.
fn replay_failed_build(variant: &str, fault: &str) -> (Cassette, LedgerView) {
    let source = common::root()
        .join("fixtures/cassettes")
        .join(variant)
        .join("faults")
        .join(fault);
    let cassette = Cassette::load(&source).expect("the fault cassette");
    let dir = common::out_dir(&format!("ledger-build-{variant}"));
    let cassettes = dir.join("cassettes");
    std::fs::create_dir_all(cassettes.join(variant)).expect("cassettes folder");
    std::fs::copy(&source, cassettes.join(variant).join("lifecycle.yaml")).expect("copied");
    let out = dir.join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", variant, "--scenario", "lifecycle"])
        .arg("--cassettes")
        .arg(&cassettes)
        .arg("--out")
        .arg(&out)
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "the build fails: {stderr}");
    let ledger = ledger_in(&out);
    let _ = std::fs::remove_dir_all(&dir);
    (cassette, ledger)
}

/// The one run's ledger under `out`.
fn ledger_in(out: &Path) -> LedgerView {
    let run = std::fs::read_dir(out)
        .expect("reports folder")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(LEDGER_FILE))
        .find(|p| p.is_file())
        .expect("a run folder with a ledger");
    LedgerView::read(&run).expect("the ledger reads")
}

#[test]
fn a_failed_e2b_build_leaves_its_template_in_the_ledger() {
    let (cassette, ledger) = replay_failed_build("e2b", "build-fails.yaml");
    let template = answered_id(&cassette, "POST", "/v3/templates", "templateID");
    let created = ledger.created("e2b", Some("lifecycle"));
    assert!(
        created
            .iter()
            .any(|r| r.kind == "template" && r.id == template),
        "{created:?}"
    );
}

#[test]
fn a_failed_daytona_build_leaves_its_registry_entry_in_the_ledger() {
    let (cassette, ledger) = replay_failed_build("daytona", "build-failed.yaml");
    let entry = answered_id(&cassette, "POST", "/docker-registry", "id");
    let created = ledger.created("daytona", Some("lifecycle"));
    assert!(
        created
            .iter()
            .any(|r| r.kind == "docker-registry" && r.id == entry),
        "{created:?}"
    );
}
