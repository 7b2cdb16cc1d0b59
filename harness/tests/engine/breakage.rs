//! Each lifecycle check fails on a sandbox that breaks it, and cleanup still leaves nothing:
//! a wrong expected answer, PID 1 ignoring SIGTERM, exiting 3 on it, or exiting on its own
//! before the stop, a build secret left in a file. One run
//! of the real CLI on the docker variant; JUnit is read back with an XML parser.

use crate::common;

use std::process::Command;

use sandbox_matrix::model::results::{RunResults, StepStatus};

fn reason(results: &RunResults, scenario: &str, step: &str) -> String {
    let s = results
        .scenarios
        .iter()
        .find(|s| s.scenario == scenario)
        .unwrap_or_else(|| panic!("no {scenario}"));
    match &s
        .step(step)
        .unwrap_or_else(|| panic!("{scenario} has no {step}"))
        .status
    {
        StepStatus::Failed { reason } => reason.clone(),
        other => panic!("{scenario}::{step} should have failed, was {other:?}"),
    }
}

pub fn violations_fail_their_step_and_leave_nothing_behind() {
    let root = common::root();
    let out = common::out_dir("breakage");
    let scenarios = [
        "expect-three",
        "ignores-sigterm",
        "exits-3-on-sigterm",
        "exits-on-its-own",
        "canary-in-file",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    cmd.arg("run")
        .arg("--variant")
        .arg("docker")
        .arg("--root")
        .arg(&root)
        .arg("--out")
        .arg(&out);
    for s in scenarios {
        cmd.arg("--scenario")
            .arg(root.join(format!("fixtures/scenarios/{s}.yaml")));
    }
    let status = cmd.status().expect("sandbox-matrix runs");
    assert_eq!(status.code(), Some(1), "a failed step exits 1");

    let text = std::fs::read_to_string(out.join("latest/results.json")).expect("results.json");
    let results: RunResults = serde_json::from_str(&text).expect("results.json parses");

    let wrong = reason(&results, "expect-three", "first-result");
    assert!(wrong.contains("should answer `3`, got `2`"), "{wrong}");
    let killed = reason(&results, "ignores-sigterm", "shutdown");
    assert!(
        killed.starts_with("killed after the grace period") && killed.contains("exit code 137"),
        "{killed}"
    );
    let unclean = reason(&results, "exits-3-on-sigterm", "shutdown");
    assert!(
        unclean.starts_with("exited on SIGTERM with a code neither 0 nor SIGTERM's 143, exit code 3: not a clean exit"),
        "{unclean}"
    );
    let gone = reason(&results, "exits-on-its-own", "shutdown");
    assert!(
        gone.starts_with("the sandbox had already exited before the stop was sent, exit code 5"),
        "{gone}"
    );
    let leak = reason(&results, "canary-in-file", "secrets-scan");
    assert!(
        leak.contains("REGISTRY_TOKEN at /home/datalayer/.netrc"),
        "{leak}"
    );
    assert!(leak.contains("artifact metadata.history"), "{leak}");

    for s in &results.scenarios {
        assert_eq!(
            s.step("cleanup").map(|c| &c.status),
            Some(&StepStatus::Passed),
            "{} cleanup",
            s.scenario
        );
        assert!(
            s.leaked_resources.is_empty(),
            "{} leaked {:?}",
            s.scenario,
            s.leaked_resources
        );
    }
    let left = common::left_by_run(&results.provenance.run_id);
    assert!(
        left.is_empty(),
        "still listed under the run label: {left:?}"
    );

    // The canary's value never reaches a report, though the leak was found.
    let canary_hits: Vec<_> = ["results.json", "junit.xml", "summary.md"]
        .iter()
        .filter(|f| {
            std::fs::read_to_string(out.join("latest").join(f))
                .unwrap()
                .contains("sm-fake-canary-")
        })
        .collect();
    assert!(canary_hits.is_empty(), "canary value in {canary_hits:?}");

    // A standard XML parser reads the JUnit back with the right counts.
    let xml = std::fs::read_to_string(out.join("latest/junit.xml")).expect("junit.xml");
    let doc = roxmltree::Document::parse(&xml).expect("junit.xml is XML");
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a testsuite");
    assert_eq!(suite.attribute("name"), Some("docker · live"));
    // exits-on-its-own's checks pass or fail by when its PID 1 went: not counted here.
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .filter(|n| n.attribute("classname") != Some("docker.exits-on-its-own"))
        .collect();
    let count = |tag: &str| {
        cases
            .iter()
            .filter(|c| c.children().any(|n| n.has_tag_name(tag)))
            .count()
    };
    // expect-three: 6 steps, 1 failed, 2 skipped; ignores-sigterm and exits-3-on-sigterm:
    // 4 steps, 1 failed; canary-in-file: 5 steps, 1 failed, 1 skipped.
    assert_eq!(
        (cases.len(), count("failure"), count("skipped")),
        (19, 4, 3)
    );
    // The suite's own counts agree with its cases, exits-on-its-own's 8 included.
    let all: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let all_with = |tag: &str| {
        all.iter()
            .filter(|c| c.children().any(|n| n.has_tag_name(tag)))
            .count()
            .to_string()
    };
    assert_eq!(suite.attribute("tests"), Some("27"));
    assert_eq!(
        suite.attribute("failures"),
        Some(all_with("failure").as_str())
    );
    assert_eq!(
        suite.attribute("skipped"),
        Some(all_with("skipped").as_str())
    );
    let _ = std::fs::remove_dir_all(&out);
}
