//! `run --emulated --record`: a scenario file outside `scenarios/`, with an environment
//! that adds a COPY and a RUN to the reference one, runs on every cloud variant against the
//! emulators the run starts itself, with no credential in the environment. Every output
//! names the mode `emulated`, `gate` holds the variants unless the policy allows emulated
//! results, the cassettes it wrote say which emulator authored them, hold none of the
//! emulators' fake credentials, and replay; nothing the run started is left.
//!
//! Needs Docker (required under CI=true): `cargo test -p sandbox-matrix --test engine run_emulated::`.

use crate::common;

use std::path::Path;
use std::process::Command;

/// The cloud variants, each with the emulator it runs against.
const CLOUD: [(&str, &str); 4] = [
    ("e2b", "E2B"),
    ("daytona", "Daytona"),
    ("modal", "Modal"),
    ("datalayer-runtimes", "Datalayer"),
];

/// The reference environment with a COPY and a RUN added: the RUN fails the build unless
/// the COPY's file is there, so a build that passes ran both.
fn environment(dir: &Path) {
    let reference = common::root().join("fixtures/environments/reference");
    std::fs::create_dir_all(dir).expect("environment folder");
    std::fs::copy(
        reference.join("environment.json"),
        dir.join("environment.json"),
    )
    .expect("environment.json");
    let dockerfile = std::fs::read_to_string(reference.join("Dockerfile")).expect("Dockerfile");
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "{dockerfile}COPY added.txt /opt/added/added.txt\nRUN test -s /opt/added/added.txt && cp /opt/added/added.txt /tmp/added-by-run\n"
        ),
    )
    .expect("Dockerfile");
    std::fs::write(
        dir.join("added.txt"),
        "added by the scenario's environment\n",
    )
    .expect("file");
}

fn sandbox_matrix(args: &[&str], out: &Path) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command.args(args);
    if args[0] == "run" {
        command
            .arg("--root")
            .arg(common::root())
            .arg("--out")
            .arg(out);
    }
    // No credential: the run must need none.
    for var in [
        "E2B_API_KEY",
        "E2B_DOMAIN",
        "E2B_API_URL",
        "DAYTONA_API_KEY",
        "DAYTONA_API_URL",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "MODAL_SERVER_URL",
        "DATALAYER_API_KEY",
        "SANDBOX_MATRIX_CA_FILE",
        "SANDBOX_MATRIX_RESOLVE",
    ] {
        command.env_remove(var);
    }
    let output = command.output().expect("sandbox-matrix runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub fn a_scenario_outside_scenarios_runs_emulated_on_every_cloud_variant() {
    let out = common::out_dir("run-emulated");
    environment(&out.join("mine/env"));
    let scenario = out.join("mine/my-lifecycle.yaml");
    let lifecycle = std::fs::read_to_string(common::root().join("scenarios/lifecycle.yaml"))
        .expect("lifecycle");
    std::fs::write(
        &scenario,
        lifecycle
            .replace("name: lifecycle", "name: my-lifecycle")
            .replace("../fixtures/environments/reference", "env"),
    )
    .expect("scenario");
    let reports = out.join("reports");
    let cassettes = out.join("cassettes");
    let selection = {
        let mut selection = vec!["--scenario", scenario.to_str().expect("utf-8")];
        for (variant, _) in CLOUD {
            selection.extend(["--variant", variant]);
        }
        selection.extend(["--cassettes", cassettes.to_str().expect("utf-8")]);
        selection
    };
    let args = [&["run", "--emulated", "--record"], &selection[..]].concat();
    let (code, table, log) = sandbox_matrix(&args, &reports);
    let all = format!("{table}\n{log}");
    assert_eq!(code, Some(0), "{all}");

    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(reports.join("latest/results.json")).expect("results.json"),
    )
    .expect("results.json parses");
    let run_id = results["provenance"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    let scenarios = results["scenarios"].as_array().expect("scenarios");
    assert_eq!(scenarios.len(), CLOUD.len(), "{all}");
    for (variant, provider) in CLOUD {
        let result = scenarios
            .iter()
            .find(|s| s["variant"] == variant)
            .unwrap_or_else(|| panic!("no result for {variant}: {all}"));
        assert_eq!(result["mode"], "emulated", "{result}");
        let emulator = result["emulator"].as_str().unwrap_or_default();
        assert!(
            emulator.contains(&format!("{provider} emulator"))
                && emulator.ends_with(&format!("not {provider}")),
            "{variant}: {emulator}"
        );
        let steps = result["steps"].as_array().expect("steps");
        for step in [
            "launch",
            "first-result",
            "restart",
            "secrets-scan",
            "shutdown",
            "cleanup",
        ] {
            let status = steps
                .iter()
                .find(|s| s["step"] == step)
                .map(|s| s["status"].clone());
            assert_eq!(
                status
                    .as_ref()
                    .and_then(|s| s["status"].as_str().or(s.as_str())),
                Some("passed"),
                "{variant} {step}: {status:?}\n{all}"
            );
        }
        // The client builds on e2b, daytona and modal; datalayer-runtimes launches the
        // environment the emulator built from the scenario's folder, by name.
        let build = steps
            .iter()
            .find(|s| s["step"] == "build")
            .expect("build step");
        let built = build.to_string();
        if variant == "datalayer-runtimes" {
            assert!(!built.contains("\"failed\""), "{variant} build: {built}");
        } else {
            assert!(built.contains("passed"), "{variant} build: {built}\n{all}");
        }
    }
    // Every output names the mode.
    assert!(
        table.contains(" · emulated"),
        "the table names no emulated column: {table}"
    );
    let junit = std::fs::read_to_string(reports.join("latest/junit.xml")).expect("junit.xml");
    for suite in [
        "e2b · emulated",
        "daytona · emulated",
        "modal · emulated",
        "datalayer-runtimes · emulated",
    ] {
        assert!(
            junit.contains(&format!("name=\"{suite}\"")),
            "no suite {suite}: {junit}"
        );
    }
    assert!(log.contains("my-lifecycle · emulated"), "{log}");

    // gate: emulated results alone never ship, unless the policy says they may.
    let results_file = reports.join("latest/results.json");
    let policy = out.join("policy.yaml");
    std::fs::write(&policy, "required:\n  - my-lifecycle/first-result\n").expect("policy");
    let (held, verdicts, gate_log) = sandbox_matrix(
        &[
            "gate",
            "--policy",
            policy.to_str().unwrap(),
            results_file.to_str().unwrap(),
        ],
        &out,
    );
    assert_eq!(held, Some(1), "{verdicts}\n{gate_log}");
    assert!(verdicts.contains("allow_emulated"), "{verdicts}");
    std::fs::write(
        &policy,
        // Daytona's and Datalayer's scans are partial (no root); accepted here by name.
        "required:\n  - my-lifecycle/first-result\nship_partial_scans: true\nallow_emulated: true\n",
    )
    .expect("policy");
    let (shipped, verdicts, gate_log) = sandbox_matrix(
        &[
            "gate",
            "--policy",
            policy.to_str().unwrap(),
            results_file.to_str().unwrap(),
        ],
        &out,
    );
    assert_eq!(shipped, Some(0), "{verdicts}\n{gate_log}");
    assert!(verdicts.contains("emulated only"), "{verdicts}");

    // The cassettes say which emulator authored them, hold none of the emulators' fake
    // credentials (`*_sm_fake_emulator_key_*`, modal's `sm-fake-ak-`/`sm-fake-as-`) and
    // replay with nothing running.
    for (variant, provider) in CLOUD {
        let cassette = std::fs::read_to_string(cassettes.join(variant).join("my-lifecycle.yaml"))
            .unwrap_or_else(|e| panic!("{variant}'s cassette: {e}\n{all}"));
        // The header, its folded lines joined: everything before `written:`.
        let header = cassette.split("\nwritten:").next().unwrap_or_default();
        let origin = header.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            origin.contains("authored") && origin.contains(&format!("{provider} emulator")),
            "{variant}: {origin}"
        );
    }
    // Recorded URLs name no machine-specific port: the pin carries it.
    for variant in ["e2b", "daytona", "datalayer-runtimes"] {
        let cassette = std::fs::read_to_string(cassettes.join(variant).join("my-lifecycle.yaml"))
            .expect("cassette");
        let with_port = cassette
            .split(|c: char| c.is_whitespace() || c == '"')
            .find(|word| {
                word.split_once(".test:")
                    .is_some_and(|(_, port)| port.starts_with(|c: char| c.is_ascii_digit()))
            });
        assert_eq!(
            with_port, None,
            "{variant}'s cassette names the emulator's port"
        );
    }
    for fake in ["_sm_fake_emulator_key_", "sm-fake-ak-", "sm-fake-as-"] {
        let found = Command::new("grep")
            .args(["-rl", fake])
            .arg(&out)
            .output()
            .expect("grep runs");
        assert!(
            found.stdout.is_empty(),
            "a fake credential ({fake}…) was written: {}",
            String::from_utf8_lossy(&found.stdout)
        );
    }
    let replayed = out.join("replayed");
    let (code, table, log) = sandbox_matrix(&[&["run"], &selection[..]].concat(), &replayed);
    assert_eq!(
        code,
        Some(0),
        "the authored cassettes replay: {table}\n{log}"
    );
    assert!(table.contains("e2b · replay"), "{table}");

    // Nothing the run started is left: no container or image with its label, no scratch.
    assert_eq!(common::left_by_run(&run_id), Vec::<String>::new(), "{all}");
    assert!(
        !sandbox_matrix::run::variants::run_scratch(&run_id).exists(),
        "the run's scratch folder is left"
    );
    let _ = std::fs::remove_dir_all(&out);
}
