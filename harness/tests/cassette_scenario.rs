//! A cassette's `scenario:` is checked against the scenario replaying it, as its
//! `variant:` is: a cassette recorded for another scenario is refused at load, exit 2,
//! naming the file, the line of the field and both scenarios, before any step runs.
//! No Docker, no network.

mod common;

use std::process::Command;

#[test]
fn a_cassette_for_another_scenario_is_refused_at_load() {
    let dir = common::out_dir("cassette-scenario");
    let cassettes = dir.join("cassettes");
    std::fs::create_dir_all(cassettes.join("e2b")).expect("cassettes folder");
    // The core-tier recording, put where the lifecycle's belongs.
    let core =
        std::fs::read_to_string(common::root().join("fixtures/cassettes/e2b/core-tier.yaml"))
            .expect("the core-tier cassette");
    let line = core
        .lines()
        .position(|l| l.starts_with("scenario:"))
        .expect("a scenario line")
        + 1;
    let cassette = cassettes.join("e2b/lifecycle.yaml");
    std::fs::write(&cassette, core).expect("cassette written");
    let reports = dir.join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", "e2b", "--scenario", "lifecycle"])
        .arg("--cassettes")
        .arg(&cassettes)
        .arg("--out")
        .arg(&reports)
        .current_dir(common::root())
        .env_remove("E2B_API_KEY")
        .output()
        .expect("sandbox-matrix runs");
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:{line}:1: scenario: the cassette is for the `core-tier` scenario, and the `lifecycle` scenario cannot replay it",
            cassette.display()
        )),
        "{err}"
    );
    assert!(!err.contains("▸ build"), "a step ran: {err}");
    assert!(!reports.exists(), "nothing runs, nothing is written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_recorded_cassettes_name_the_scenario_they_are_filed_under() {
    let root = common::root().join("fixtures/cassettes");
    for variant in ["e2b", "daytona"] {
        for scenario in ["lifecycle", "core-tier"] {
            let path = root.join(variant).join(format!("{scenario}.yaml"));
            sandbox_matrix::run::variants::load_cassette(&path, variant, scenario)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
