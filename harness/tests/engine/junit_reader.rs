//! An independent reader of our junit.xml: junitparser (PyPI, pinned in the SDK venv), not
//! our own parser, must see one suite per variant and mode, named `<variant> · <mode>`, so a
//! CI dashboard never shows a replay as the provider's result: a live docker lifecycle
//! beside two replayed ones.

use crate::common;

use std::process::Command;

/// The SDK venv's distribution this test reads JUnit with.
pub const SDK: &str = "junitparser";

pub fn junitparser_sees_suites_named_by_variant_and_mode() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let out = common::out_dir("junit-reader");
    let run = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args([
            "run",
            "--variant",
            "docker",
            "--variant",
            "e2b",
            "--variant",
            "modal",
            "--scenario",
            "lifecycle",
        ])
        .arg("--root")
        .arg(common::root())
        .arg("--out")
        .arg(&out)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("sandbox-matrix runs");
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let read = Command::new(python)
        .args([
            "-c",
            "import json, sys\nfrom junitparser import JUnitXml\nprint(json.dumps([[s.name, s.tests, s.failures, s.skipped] for s in JUnitXml.fromfile(sys.argv[1])]))",
        ])
        .arg(out.join("latest/junit.xml"))
        .output()
        .expect("the venv's python runs");
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let suites: Vec<(String, u64, u64, u64)> =
        serde_json::from_slice(&read.stdout).expect("junitparser's answer");
    let _ = std::fs::remove_dir_all(&out);
    let names: Vec<&str> = suites.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        names,
        ["docker · live", "e2b · replay", "modal · replay"],
        "{suites:?}"
    );
    assert!(
        suites
            .iter()
            .all(|(_, tests, failures, _)| *tests > 0 && *failures == 0),
        "{suites:?}"
    );
}
