//! The `lifetime` step against `sandbox-matrix emulate`, the binary, through live settings:
//! a sandbox asked to end after a few seconds answers just before and is gone just after
//! (E2B's `timeout`, which the emulator keeps); with the emulator's `--kill-after` fault it
//! dies early and the step fails saying so, on E2B's and on Daytona's emulator (whose limit
//! is `autoStopInterval`, in minutes). Every output names the result emulated.
//!
//! Needs Docker (required under CI=true): `cargo test -p sandbox-matrix --test engine lifetime::`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::emulate::Emulate;
use serde_json::Value;

/// A scenario building the reference environment, then `lifetime` with `timeout` and
/// `within`, written under `dir`.
fn scenario(dir: &Path, timeout: &str, within: &str) -> String {
    let path = dir.join("lifetime-test.yaml");
    std::fs::write(
        &path,
        format!(
            "name: lifetime-test\n\
             description: a short lifetime\n\
             environment: {}\n\
             steps:\n  \
               - step: build\n    budget: 10m\n  \
               - step: lifetime\n    timeout: {timeout}\n    within: {within}\n    budget: 5m\n  \
               - step: cleanup\n    budget: 2m\n",
            common::root()
                .join("fixtures/environments/reference")
                .display()
        ),
    )
    .expect("scenario written");
    path.display().to_string()
}

/// Runs `scenario` on `variant` with the emulator's printed settings; the exit code, the
/// table and log, the results and the lifetime step's result.
fn run(
    emulate: &Emulate,
    variant: &str,
    scenario: &str,
    out: &Path,
) -> (Option<i32>, String, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args([
            "run",
            "--live",
            "--variant",
            variant,
            "--scenario",
            scenario,
            "--out",
        ])
        .arg(out)
        .arg("--root")
        .arg(common::root())
        .envs(&emulate.settings)
        .output()
        .expect("sandbox-matrix runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("latest/results.json"))
            .unwrap_or_else(|e| panic!("no results.json ({e}): {text}")),
    )
    .expect("results.json parses");
    let result = results["scenarios"][0].clone();
    assert_eq!(result["mode"], "emulated", "{text}");
    (output.status.code(), text, result)
}

fn lifetime_step(result: &Value) -> Value {
    result["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["step"] == "lifetime")
        .cloned()
        .expect("a lifetime step")
}

pub fn an_e2b_sandbox_answers_before_its_timeout_and_is_gone_after() {
    let out = common::out_dir("lifetime-e2b");
    let scenario = scenario(&out, "6s", "20s");
    let emulate = Emulate::start("e2b", &[]);
    let (code, text, result) = run(&emulate, "e2b", &scenario, &out.join("reports"));
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(lifetime_step(&result)["status"], "passed", "{text}");
    let seen = &result["lifetime"];
    assert_eq!(seen["counts_from"], "create", "{seen}");
    assert_eq!(seen["early"], false, "{seen}");
    let (alive, gone) = (
        seen["alive_at"].as_f64().expect("seen alive"),
        seen["gone_at"].as_f64().expect("seen gone"),
    );
    // Alive at 6 s − 2 s, gone after 6 s and by 6 s + 20 s past create's answer.
    assert!(
        alive >= 3_900.0
            && gone > 6_000.0
            && gone < 27_000.0 + seen["created"].as_f64().unwrap_or_default(),
        "{seen}"
    );
    assert!(
        text.contains("6 s from create · gone at"),
        "the table has no lifetime row: {text}"
    );
    emulate.stop();
    let _ = std::fs::remove_dir_all(&out);
}

/// `run --emulated` on Modal and Datalayer: each sandbox ends at its limit (Modal's
/// `timeout_secs`, Datalayer's `credits_limit` at the burning rate), seen alive before.
pub fn modal_and_datalayer_sandboxes_end_at_their_limits_under_run_emulated() {
    let out = common::out_dir("lifetime-emulated");
    // Long enough for Modal's first answer (a kernel starting) to come before the look,
    // and for the look's answer to come within its margin (a tenth: 6 s) on a loaded
    // machine; at 20 s it took 6.6 s there, and the step said "not seen alive".
    let scenario = scenario(&out, "60s", "30s");
    let reports = out.join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--emulated", "--scenario", &scenario])
        .args([
            "--variant",
            "modal",
            "--variant",
            "datalayer-runtimes",
            "--out",
        ])
        .arg(&reports)
        .arg("--root")
        .arg(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "{text}");
    let results: Value = serde_json::from_str(
        &std::fs::read_to_string(reports.join("latest/results.json")).expect("results.json"),
    )
    .expect("results.json parses");
    for result in results["scenarios"].as_array().expect("scenarios") {
        assert_eq!(lifetime_step(result)["status"], "passed", "{text}");
        let seen = &result["lifetime"];
        assert_eq!(seen["early"], false, "{seen}");
        assert!(
            seen["gone_at"].as_f64().is_some_and(|g| g > 60_000.0),
            "{seen}"
        );
    }
    assert!(!text.contains("could not be removed"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A sandbox the emulator kills `--kill-after 12` seconds into a lifetime of `timeout`
/// (after its launch, which a kill would fail instead): the step fails as an early death,
/// and the table says so.
fn dies_early(variant: &str, timeout: &str, asked_ms: f64, counts_from: &str) {
    let out = common::out_dir(&format!("lifetime-{variant}-early"));
    let scenario = scenario(&out, timeout, "30s");
    let emulate = Emulate::start(variant, &["--kill-after", "12"]);
    let (code, text, result) = run(&emulate, variant, &scenario, &out.join("reports"));
    assert_eq!(code, Some(1), "{text}");
    let step = lifetime_step(&result);
    assert_eq!(step["status"], "failed", "{step}");
    let reason = step["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("died early: gone at"), "{step}");
    let seen = &result["lifetime"];
    assert_eq!(seen["early"], true, "{seen}");
    assert_eq!(seen["asked"].as_f64(), Some(asked_ms), "{seen}");
    assert_eq!(seen["counts_from"], counts_from, "{seen}");
    let gone = seen["gone_at"].as_f64().expect("seen gone");
    assert!(gone > 12_000.0 && gone < asked_ms, "{seen}");
    assert!(text.contains("died early at"), "{text}");
    // Cleanup still passes: the killed sandbox left nothing.
    assert_eq!(
        result["leaked_resources"].as_array().map(Vec::len),
        Some(0),
        "{result}"
    );
    emulate.stop();
    let _ = std::fs::remove_dir_all(&out);
}

pub fn an_e2b_sandbox_killed_early_fails_the_step_as_an_early_death() {
    dies_early("e2b", "20s", 20_000.0, "create");
}

pub fn a_daytona_sandbox_killed_early_fails_the_step_as_an_early_death() {
    // Daytona's unit is a minute: 8 s is asked as 60 s of no activity.
    dies_early("daytona", "8s", 60_000.0, "last activity");
}
