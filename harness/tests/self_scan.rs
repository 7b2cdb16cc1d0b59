//! The run's self-scan through the CLI: a provider that echoes the API key back in an error
//! (as some do) puts it into the step's failure message. The run must still write every
//! report, scrubbed, fail with exit 3 naming each file that held the key and the form, and
//! leave the value in no file. No Docker: the e2b variant replays a cut lifecycle cassette.

mod common;

use std::process::Command;

use sandbox_providers::Secret;
use sandbox_providers::api::cassette::Body;

/// A fake E2B key, shaped like no real one: what the provider "echoes back".
const FAKE_KEY: &str = "sm-fake-e2b-key-echoed-0123456789";

#[test]
fn a_credential_echoed_into_a_report_is_scrubbed_and_fails_the_run() {
    let root = common::root();
    let work = common::out_dir("self-scan");
    let cassettes = work.join("cassettes");
    let out = work.join("reports");
    std::fs::create_dir_all(cassettes.join("e2b")).unwrap();

    let mut cassette = common::e2b_lifecycle();
    let create = cassette
        .exchanges
        .iter()
        .position(|e| e.request.method == "POST" && e.request.path == "/sandboxes")
        .expect("the lifecycle cassette creates a sandbox");
    let answer = &mut cassette.exchanges[create].response;
    answer.status = 401;
    answer.body = Some(Body::Json(serde_json::json!({
        "code": 401,
        "message": format!("invalid API key {FAKE_KEY}"),
    })));
    cassette.exchanges.truncate(create + 1);
    cassette
        .save(&cassettes.join("e2b/lifecycle.yaml"))
        .expect("cassette written");

    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", "e2b", "--scenario", "lifecycle"])
        .arg("--root")
        .arg(&root)
        .arg("--cassettes")
        .arg(&cassettes)
        .arg("--out")
        .arg(&out)
        .env("E2B_API_KEY", FAKE_KEY)
        .output()
        .expect("sandbox-matrix runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the run's own files held a credential")
            && stderr.contains("results.json held E2B_API_KEY (scrubbed)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(FAKE_KEY) || stderr.contains("<redacted"),
        "{stderr}"
    );
    assert!(!stdout.contains(FAKE_KEY), "{stdout}");

    let results = std::fs::read_to_string(out.join("latest/results.json")).unwrap();
    assert!(
        results.contains("invalid API key <redacted:E2B_API_KEY>"),
        "the failure is kept, the key scrubbed: {results}"
    );
    common::assert_no_value_in_tree(&out, &[Secret::new("E2B_API_KEY", FAKE_KEY)]);
    std::fs::remove_dir_all(&work).unwrap();
}
