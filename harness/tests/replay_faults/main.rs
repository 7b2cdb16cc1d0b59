//! Faults through the whole harness, on replayed cloud variants: a variant's recorded
//! lifecycle cassette with one exchange broken, or with what the variant's emulator
//! recorded under a fault put in its place, run by the runner as `run` runs it. Each test
//! checks what the runner does with the fault: which step fails and why, within its
//! budget, that cleanup still reaches the provider, and that the replay went exactly as
//! the cut cassette says (every exchange used, in order), which is how a retry, a poll
//! or a delete the runner must make is shown to have been made. No Docker.

#[path = "../common/mod.rs"]
mod common;

mod datalayer_runtimes;
mod daytona;
mod e2b;
mod modal;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandbox_matrix::model::results::{
    Provenance, RESULTS_SCHEMA_VERSION, RunResults, ScenarioResult, StepStatus,
};
use sandbox_matrix::report;
use sandbox_matrix::run::variants::{self, CloudMode};
use sandbox_providers::api::replay::Pace;

/// The scenario the datalayer-runtimes and modal faults run: build (skipped on
/// datalayer-runtimes, whose platform builds), launch within 2 s, 1+1, shut down, clean up.
const STEPS: &str = "  - step: build\n    budget: 60s\n  - step: launch\n    budget: 2s\n  - step: first-result\n    budget: 10s\n  - step: shutdown\n    budget: 30s\n    within: 10s\n  - step: cleanup\n    budget: 30s\n";

/// Every step the faults' scenarios run, and the replay's check: what a run that met its
/// fault and recovered passes.
const EVERY_STEP: &[&str] = &[
    "build",
    "launch",
    "first-result",
    "shutdown",
    "cleanup",
    "replay",
];

/// A run with `result` as its only scenario.
fn one_run(result: &ScenarioResult) -> RunResults {
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.into(),
        provenance: Provenance {
            run_id: "faults".into(),
            harness_version: env!("CARGO_PKG_VERSION").into(),
            host: "test".into(),
            started_at: "2026-11-29T00:00:00Z".into(),
            base: None,
            shards: Vec::new(),
            partition: None,
        },
        scenarios: vec![result.clone()],
        orphans: Vec::new(),
    }
}

/// The run's JUnit with `result` as its only scenario.
fn junit(result: &ScenarioResult) -> String {
    report::junit::render(&one_run(result))
}

/// The terminal's lines for `result`, as a run prints them, against the snapshot `name`
/// (under `replay_faults/snapshots/`): the words a user reads for each fault. What changes
/// from run to run is filtered: temporary folders and durations.
fn assert_terminal(name: &str, result: &ScenarioResult) {
    let lines = sandbox_matrix::report::terminal::transcript(&one_run(result)).join("\n");
    // No Rust form a user would have to decode.
    for form in ["Some(", "None", "Err(", "Ok(", " { "] {
        assert!(
            !lines.contains(form),
            "`{form}` in what a user reads:\n{lines}"
        );
    }
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"/tmp/sandbox-matrix-[A-Za-z0-9-]+", "[tmp]");
    settings.add_filter(r" +\d+\.\d+ s\b", " [secs] s");
    settings.add_filter(r"\b\d{8}T\d{6}Z-[0-9a-f]{6}\b", "[run-id]");
    settings.bind(|| insta::assert_snapshot!(name, lines));
}

/// Why `step` failed; panics when it did not.
fn reason(result: &ScenarioResult, step: &str) -> String {
    match &result.step(step).expect("the step ran").status {
        StepStatus::Failed { reason } => reason.clone(),
        other => panic!("{step} should have failed: {other:?}"),
    }
}

/// Asserts that every step of `steps` passed, naming the ones that did not.
fn assert_passed(result: &ScenarioResult, steps: &[&str]) {
    for step in steps {
        assert_eq!(
            result.step(step).map(|s| &s.status),
            Some(&StepStatus::Passed),
            "{step} did not pass; failures: {:?}",
            common::failures(result)
        );
    }
}

/// Asserts that every step of `steps` was skipped.
fn assert_skipped(result: &ScenarioResult, steps: &[&str]) {
    for step in steps {
        let status = result.step(step).map(|s| &s.status);
        assert!(
            matches!(status, Some(StepStatus::Skipped { .. })),
            "{step} should have been skipped: {status:?}"
        );
    }
}

/// Runs [`STEPS`] as scenario `lifecycle` of cloud variant `variant`, replaying the
/// cassette `write` puts at the path given to it, at `pace`, as `run --cassettes` does;
/// the result and how long the run took.
async fn replay(
    variant: &str,
    test: &str,
    pace: Pace,
    write: impl FnOnce(PathBuf),
) -> (ScenarioResult, Duration) {
    let dir = common::out_dir(&format!("replay-faults-{test}"));
    write(variants::cassette_path(&dir, variant, "lifecycle"));
    let scenario = common::temp_scenario("lifecycle", STEPS);
    let cloud = variants::cloud(variant).expect("a cloud variant");
    let started = Instant::now();
    let result = common::run_cloud(
        &common::quiet_runner(),
        cloud,
        &scenario,
        &CloudMode::Replay {
            dir: dir.to_path_buf(),
            pace,
        },
    )
    .await;
    (result, started.elapsed())
}
