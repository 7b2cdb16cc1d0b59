//! The command line with cloud variants: replay by default, live only when asked, and a
//! missing credential or cassette is an error naming it. No Docker, no network.

mod common;

use std::process::{Command, Output};

fn sandbox_matrix(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(args)
        .current_dir(common::root())
        // No credential may come from the environment the tests run in.
        .env_remove("E2B_API_KEY")
        .env_remove("DAYTONA_API_KEY")
        .env_remove("DAYTONA_JWT_TOKEN")
        .env_remove("DAYTONA_ORGANIZATION_ID")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("sandbox-matrix runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn live_without_a_credential_is_an_error_naming_the_variable() {
    let out = common::out_dir("cli-live");
    for (variant, variable) in [("e2b", "E2B_API_KEY"), ("daytona", "DAYTONA_API_KEY")] {
        let output = sandbox_matrix(&[
            "run",
            "--live",
            "--variant",
            variant,
            "--scenario",
            "lifecycle",
            "--out",
            out.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(variable), "{}", stderr(&output));
    }
    assert!(
        std::fs::read_dir(&out).expect("out dir").next().is_none(),
        "nothing should run, nor be written"
    );
}

#[test]
fn a_chosen_cloud_variant_without_a_cassette_is_an_error_naming_the_path() {
    let empty = common::out_dir("cli-no-cassettes");
    let output = sandbox_matrix(&[
        "run",
        "--variant",
        "e2b",
        "--scenario",
        "lifecycle",
        "--cassettes",
        empty.to_str().expect("utf-8 path"),
        "--out",
        empty.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let expected = empty.join("e2b").join("lifecycle.yaml");
    assert!(
        stderr(&output).contains(&expected.display().to_string()),
        "{}",
        stderr(&output)
    );
}

#[test]
fn replay_runs_both_cloud_variants_green_and_reports_each_replay() {
    let out = common::out_dir("cli-replay");
    let output = sandbox_matrix(&[
        "run",
        "--variant",
        "e2b",
        "--variant",
        "daytona",
        "--scenario",
        "lifecycle",
        "--scenario",
        "core-tier",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("latest/results.json")).expect("results.json"),
    )
    .expect("results.json parses");
    let scenarios = results["scenarios"].as_array().expect("scenarios");
    assert_eq!(scenarios.len(), 4);
    for scenario in scenarios {
        let replay = scenario["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["step"] == "replay")
            .expect("a replay step");
        assert_eq!(replay["status"], "passed", "{scenario}");
    }
    let junit = std::fs::read_to_string(out.join("latest/junit.xml")).expect("junit.xml");
    assert!(junit.contains("name=\"replay\""), "{junit}");
}

#[test]
fn a_cassette_that_does_not_parse_is_bad_input_naming_file_and_line() {
    let dir = common::out_dir("cli-bad-cassette");
    std::fs::create_dir_all(dir.join("e2b")).expect("dir");
    let cassette = dir.join("e2b").join("lifecycle.yaml");
    std::fs::write(
        &cassette,
        "origin: written by this test\nvariant: e2b\nscenario: lifecycle\nexchanges:\n  - request: {method: GET, path: /a}\n    response: {status: \"two hundred\"}\n",
    )
    .expect("cassette written");
    let output = sandbox_matrix(&[
        "run",
        "--variant",
        "e2b",
        "--cassettes",
        dir.to_str().expect("utf-8 path"),
        "--out",
        dir.join("out").to_str().expect("utf-8 path"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&cassette.display().to_string()) && err.contains("line 6"),
        "{err}"
    );
    assert!(!dir.join("out").exists(), "nothing should run");
}
