//! The command line with cloud variants: replay by default, live only when asked, and a
//! missing credential or cassette is an error naming it. No Docker, no network.

mod common;

use std::process::{Command, Output};

fn sandbox_matrix(args: &[&str]) -> Output {
    common::sandbox_matrix_without_credentials(args)
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
fn replay_runs_the_cloud_variants_green_and_reports_each_replay_and_region() {
    let out = common::out_dir("cli-replay");
    let output = sandbox_matrix(&[
        "run",
        "--variant",
        "e2b",
        "--variant",
        "daytona",
        "--variant",
        "modal",
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
    assert_eq!(scenarios.len(), 6);
    for scenario in scenarios {
        let replay = scenario["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["step"] == "replay")
            .expect("a replay step");
        assert_eq!(replay["status"], "passed", "{scenario}");
        // Where the sandbox ran, as the recorded answers say: Daytona's sandbox record names
        // its `target`, a Modal sandbox its `MODAL_REGION`; E2B's API names no region.
        let region = match scenario["variant"].as_str() {
            Some("daytona" | "modal") => serde_json::json!("us"),
            _ => serde_json::Value::Null,
        };
        assert_eq!(scenario["region"], region, "{scenario}");
    }
    let summary = std::fs::read_to_string(out.join("latest/summary.md")).expect("summary.md");
    assert!(
        summary.contains("- ran in region `us`, as the provider said"),
        "{summary}"
    );
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
    assert!(err.contains(&format!("{}:6:", cassette.display())), "{err}");
    assert!(!dir.join("out").exists(), "nothing should run");
}

/// True when `text` holds a duration such as `0.01 s` or `12.3 s`.
fn holds_seconds(text: &str) -> bool {
    text.match_indices(" s").any(|(at, _)| {
        text[..at].ends_with(|c: char| c.is_ascii_digit())
            && text[at + 2..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric())
    })
}

#[test]
fn a_replayed_run_names_its_mode_and_prints_no_bare_timing() {
    let out = common::out_dir("cli-replay-provenance");
    let output = sandbox_matrix(&[
        "run",
        "--variant",
        "e2b",
        "--variant",
        "daytona",
        "--scenario",
        "lifecycle",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(
        err.lines()
            .next()
            .is_some_and(|l| l.ends_with("cloud variants replayed from ./fixtures/cassettes")),
        "{err}"
    );
    assert!(
        err.contains("e2b · lifecycle · replay of fixtures/cassettes/e2b/lifecycle.yaml"),
        "{err}"
    );
    let steps: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("  ✓ ") || l.starts_with("  ✗ "))
        .collect();
    assert!(!steps.is_empty(), "{err}");
    for line in &steps {
        assert!(
            line.trim_end().ends_with("replayed") && !holds_seconds(line),
            "a replayed step shows a bare duration: {line}"
        );
    }

    let summary = std::fs::read_to_string(out.join("latest/summary.md")).expect("summary.md");
    let header = summary
        .lines()
        .find(|l| l.starts_with("|  "))
        .expect("a table");
    assert!(
        header.contains("| e2b · replay ") && header.contains("| daytona · replay "),
        "{summary}"
    );
    for label in [
        "Build",
        "Create to first 1+1",
        "Floor: python3 in a fresh container",
        "Floor: kernel's first answer",
        "Burst: create to first 1+1",
        "Restart",
        "Shutdown",
    ] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {label} ")))
            .unwrap_or_else(|| panic!("no row {label} in\n{summary}"));
        assert!(!holds_seconds(row), "a bare timing: {row}");
    }
    assert!(
        summary.contains("| Build ") && summary.contains("| replayed "),
        "{summary}"
    );
    for variant in ["e2b", "daytona"] {
        let cassette = std::fs::read_to_string(
            common::root().join(format!("fixtures/cassettes/{variant}/lifecycle.yaml")),
        )
        .expect("the cassette");
        let cassette = sandbox_providers::api::Cassette::parse(&cassette).expect("parses");
        let written = cassette.written.expect("a written date");
        // The table gives the day the cassette was written.
        let (origin, written) = (cassette.origin, &written[..10]);
        assert!(
            summary.contains(&format!(
                "{variant} · replay: replayed, not measured, from:\n- `fixtures/cassettes/{variant}/lifecycle.yaml`, written {written}, instant pace, timings read `replayed`: {origin}"
            )),
            "{summary}"
        );
    }

    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("latest/results.json")).expect("results.json"),
    )
    .expect("results.json parses");
    assert_eq!(results["schema_version"], "sandbox-matrix/results/v2");
    for scenario in results["scenarios"].as_array().expect("scenarios") {
        let variant = scenario["variant"].as_str().expect("a variant");
        assert_eq!(scenario["mode"], "replay", "{scenario}");
        let replay = &scenario["replay"];
        assert_eq!(
            replay["cassette"],
            format!("fixtures/cassettes/{variant}/lifecycle.yaml")
        );
        let cassette = sandbox_providers::api::Cassette::load(
            &common::root().join(format!("fixtures/cassettes/{variant}/lifecycle.yaml")),
        )
        .expect("the cassette");
        assert_eq!(replay["written"], cassette.written.expect("a written date"));
        assert_eq!(replay["pace"], "instant");
        assert!(
            replay["origin"]
                .as_str()
                .is_some_and(|o| o.starts_with("authored from ")),
            "{replay}"
        );
    }
    let junit = std::fs::read_to_string(out.join("latest/junit.xml")).expect("junit.xml");
    assert!(
        junit.contains(r#"<property name="mode" value="replay"/>"#)
            && junit
                .contains(r#"<property name="lifecycle.cassette-origin" value="authored from "#),
        "{junit}"
    );
}

/// The recorded daytona scans run as uid 1000 with 8 files they cannot read: a secret
/// readable only by root would not be seen. The shipped scenarios accept that partial scan
/// by name, in lifecycle's secrets-scan step and core-tier's check 9; the same scenarios
/// without `accept_partial` fail the step, saying how partial.
#[test]
fn a_partial_secrets_scan_fails_unless_the_scenario_accepts_it_for_the_variant() {
    let root = common::root();
    for (name, step) in [
        ("lifecycle", "secrets-scan"),
        ("core-tier", "core-9-secrets"),
    ] {
        let shipped = std::fs::read_to_string(root.join(format!("scenarios/{name}.yaml")))
            .expect("the shipped scenario");
        assert!(shipped.contains("accept_partial: [daytona, datalayer-runtimes]"));
        let dir = common::out_dir(&format!("cli-partial-scan-{name}"));
        let scenarios = dir.join("scenarios");
        std::fs::create_dir_all(&scenarios).expect("a scenarios folder");
        let unaccepted: String = shipped
            .lines()
            .filter(|line| !line.contains("accept_partial"))
            .map(|line| {
                line.replace(
                    "environment: ../fixtures/environments/reference",
                    &format!(
                        "environment: {}",
                        root.join("fixtures/environments/reference").display()
                    ),
                ) + "\n"
            })
            .collect();
        let path = scenarios.join(format!("{name}.yaml"));
        std::fs::write(&path, unaccepted).expect("writable");
        let run = |scenario: &str| {
            let out = dir.join("out");
            let output = sandbox_matrix(&[
                "run",
                "--variant",
                "daytona",
                "--scenario",
                scenario,
                "--out",
                out.to_str().expect("utf-8 path"),
            ]);
            let results =
                std::fs::read_to_string(out.join("latest/results.json")).expect("results");
            let results: serde_json::Value = serde_json::from_str(&results).expect("JSON");
            (output, results["scenarios"][0].clone())
        };
        let (output, scenario) = run(path.to_str().expect("utf-8 path"));
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let result = scenario["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["step"] == step)
            .expect("the scanning step")
            .clone();
        assert_eq!(result["status"], "failed", "{result}");
        assert!(
            result["reason"]
                .as_str()
                .expect("a reason")
                .contains("the secrets scan was partial (uid 1000, 8 unreadable)"),
            "{result}"
        );
        assert_eq!(scenario["secrets_scan"]["uid"], 1000, "{scenario}");
        assert_eq!(scenario["secrets_scan"]["unreadable"], 8, "{scenario}");
        let (output, scenario) = run(name);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            scenario["secrets_scan"]["files_scanned"]
                .as_u64()
                .is_some_and(|n| n > 0),
            "{scenario}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A live E2B build from this engine's local base would fail inside E2B's builder, minutes
/// in: `run --live` refuses it before anything is created, naming the variable to set.
/// An emulator on this machine (E2B_DOMAIN on loopback) can serve the local base, so it is
/// not refused there (the record-against-emulator tests run that way).
#[test]
fn a_live_cloud_build_from_the_local_base_is_refused_before_any_request() {
    let out = common::out_dir("cli-live-local-base");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args([
            "run",
            "--live",
            "--variant",
            "e2b",
            "--scenario",
            "lifecycle",
            "--out",
        ])
        .arg(&out)
        .current_dir(common::root())
        // A fake key: nothing may be sent with it.
        .env("E2B_API_KEY", "e2b_fake_key_for_a_refused_run")
        .env_remove("E2B_DOMAIN")
        .env_remove("SANDBOX_MATRIX_BASE")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("sandbox-matrix runs");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot build live from the local base")
            && stderr(&output).contains("set SANDBOX_MATRIX_BASE="),
        "{}",
        stderr(&output)
    );
    assert!(
        !out.exists() || std::fs::read_dir(&out).expect("out dir").next().is_none(),
        "nothing ran, nothing was written"
    );
}

/// `list` says what `run` with the same arguments would do: a cloud scenario without a
/// cassette is refused when asked for by name (exit 2, as `run` refuses it), left out with a
/// note otherwise, and listed with --live.
#[test]
fn list_matches_what_run_would_run() {
    let named = sandbox_matrix(&["list", "--variant", "e2b", "--scenario", "burst"]);
    assert_eq!(named.status.code(), Some(2), "{}", stderr(&named));
    assert!(
        stderr(&named).contains("no cassette for e2b × burst"),
        "{}",
        stderr(&named)
    );
    let all = sandbox_matrix(&["list", "--variant", "e2b"]);
    let listed = String::from_utf8_lossy(&all.stdout);
    assert_eq!(all.status.code(), Some(0));
    assert!(listed.contains("e2b::lifecycle::build"), "{listed}");
    assert!(!listed.contains("e2b::burst::"), "{listed}");
    assert!(
        stderr(&all).contains("e2b::burst: not run: no cassette"),
        "{}",
        stderr(&all)
    );
    let live = sandbox_matrix(&["list", "--live", "--variant", "e2b", "--scenario", "burst"]);
    assert_eq!(live.status.code(), Some(0), "{}", stderr(&live));
    assert!(String::from_utf8_lossy(&live.stdout).contains("e2b::burst::burst"));
}
