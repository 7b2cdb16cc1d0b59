//! Each violating image fails exactly the conformance checks its breach targets and no
//! other: the core tier (scenarios/core-tier.yaml) runs against every image under
//! fixtures/images/violations/ on the docker variant, and the failures are compared with
//! the table below. Images that leak the canary also run the `secrets-scan` step, and both
//! it and check 9 must name the form and the place of the leak; the image's doctor scans
//! each one but the image that has none, which the Python probe scans. The table as
//! measured is printed, and cleanup must leave nothing.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::{ScenarioResult, StepStatus};
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::{Expectation, Scenario, Step, StepKind};
use sandbox_matrix::run::variants;
use tokio_util::sync::CancellationToken;

/// Image → the core checks it must fail (short names), and the doctor rows among them.
const EXPECTED: &[(&str, &[&str], &[&str])] = &[
    (
        "runs-as-root",
        &["doctor", "identity", "filesystem"],
        &["user", "uid", "gid", "reserved_path"],
    ),
    ("uid-1001", &["doctor", "identity"], &["user", "uid"]),
    ("wrong-workdir", &["identity"], &[]),
    ("no-init", &["doctor", "shutdown"], &["init"]),
    ("ignores-sigterm", &["shutdown"], &[]),
    // How PID 1 ends on a stop is no core check's: the lifecycle's `shutdown` step fails
    // on these (breakage.rs).
    ("exits-3-on-sigterm", &[], &[]),
    ("exits-on-its-own", &[], &[]),
    (
        "reserved-writable",
        &["doctor", "filesystem"],
        &["reserved_path"],
    ),
    // The doctor goes with the folder: check 6 alone says the reserved path is missing.
    ("reserved-missing", &["doctor", "filesystem"], &[]),
    ("canary-in-file", &["secrets"], &[]),
    ("canary-in-env", &["secrets"], &[]),
    ("canary-base64-in-share", &["secrets"], &[]),
    ("canary-in-var-lib", &["secrets"], &[]),
    (
        "ipykernel-missing",
        &["doctor", "kernel", "imports", "restart"],
        &["kernel"],
    ),
    ("locale-unset", &["doctor"], &["locale"]),
    ("timezone-not-utc", &["doctor"], &["timezone"]),
    ("doctor-missing", &["doctor"], &[]),
];

/// Image → what the secrets check and the `secrets-scan` step must both report (the form
/// and the place); these images also run the step.
const FINDINGS: &[(&str, &str)] = &[
    ("canary-in-file", "REGISTRY_TOKEN at /home/datalayer/.netrc"),
    ("canary-in-env", "REGISTRY_TOKEN at artifact metadata.env["),
    (
        "canary-base64-in-share",
        "REGISTRY_TOKEN (base64) at /usr/local/share/build-auth/auth.b64",
    ),
    (
        "canary-in-var-lib",
        "REGISTRY_TOKEN at /var/lib/build-cache/state.json",
    ),
];

/// How many images are built and checked at once.
const PARALLEL: usize = 2;

struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: &RunEvent) {}
}

/// The short names of the core checks that failed, and the doctor rows that failed.
fn failures(result: &ScenarioResult) -> (Vec<String>, Vec<String>) {
    let checks = result
        .steps
        .iter()
        .filter(|s| s.step.starts_with("core-") && matches!(s.status, StepStatus::Failed { .. }))
        .map(|s| s.step.splitn(3, '-').nth(2).unwrap_or(&s.step).to_owned())
        .collect();
    let rows = result
        .step("core-1-doctor")
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d["report"]["rows"].as_array())
        .map(|rows| {
            rows.iter()
                .filter(|r| r["ok"] != true)
                .filter_map(|r| r["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (checks, rows)
}

pub async fn each_violating_image_fails_what_it_breaks_and_nothing_else() {
    let root = common::root();
    let core =
        Scenario::load(&root.join("scenarios/core-tier.yaml")).expect("core-tier.yaml loads");
    let provider = variants::connect_docker(&root, Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")))
        .await
        .expect("the docker variant connects");
    let run_id = new_run_id();
    let runner = Arc::new(Runner::new(
        run_id.clone(),
        fake_canary(),
        Arc::new(Quiet),
        CancellationToken::new(),
    ));
    runner
        .prepare(&provider)
        .await
        .expect("the base image is ready");

    let permits = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut tasks = tokio::task::JoinSet::new();
    for (image, _, _) in EXPECTED {
        let mut scenario = core.clone();
        scenario.name = format!("core-tier-{image}");
        scenario.environment = root.join("fixtures/images/violations").join(image);
        if FINDINGS.iter().any(|(i, _)| i == image) {
            let cleanup = scenario.steps.len() - 1;
            assert_eq!(scenario.steps[cleanup].kind, StepKind::Cleanup);
            scenario.steps.insert(
                cleanup,
                Step {
                    kind: StepKind::SecretsScan,
                    budget: Duration::from_secs(120),
                    expect: Expectation::Default,
                },
            );
        }
        let (runner, provider, permits) = (runner.clone(), provider.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire().await.expect("semaphore open");
            (*image, runner.run_scenario(provider, &scenario, None).await)
        });
    }
    let mut measured: BTreeMap<&str, ScenarioResult> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (image, result) = joined.expect("a scenario task finishes");
        measured.insert(image, result);
    }

    let mut table =
        String::from("| image | failed core checks | failed doctor rows |\n|---|---|---|\n");
    let mut wrong = Vec::new();
    for (image, checks, rows) in EXPECTED {
        let result = &measured[image];
        for step in ["build", "launch", "cleanup"] {
            if let Some(StepStatus::Failed { reason }) = result.step(step).map(|s| &s.status) {
                wrong.push(format!("{image}: {step} failed: {reason}"));
            }
        }
        let (failed_checks, failed_rows) = failures(result);
        table.push_str(&format!(
            "| {image} | {} | {} |\n",
            failed_checks.join(", "),
            failed_rows.join(", ")
        ));
        if failed_checks != *checks || failed_rows != *rows {
            let reasons = common::failures(result);
            wrong.push(format!("{image}: expected {checks:?} / rows {rows:?}, got {failed_checks:?} / rows {failed_rows:?}\n    {}", reasons.join("\n    ")));
        }
    }
    for (image, finding) in FINDINGS {
        let result = &measured[image];
        let check = result
            .step("core-9-secrets")
            .and_then(|s| s.data.as_ref())
            .map(|d| d["found"].to_string())
            .unwrap_or_default();
        if !check.contains(finding) {
            wrong.push(format!("{image}: check 9 found {check}, not `{finding}`"));
        }
        match result.step("secrets-scan").map(|s| &s.status) {
            Some(StepStatus::Failed { reason }) if reason.contains(finding) => {}
            other => wrong.push(format!(
                "{image}: secrets-scan should fail naming `{finding}`: {other:?}"
            )),
        }
    }
    // The image's doctor scans where it can; an image without one (or without the folder
    // that holds it) is scanned by the Python probe, and says why.
    for (image, _, _) in EXPECTED {
        let log = measured[image]
            .step("core-9-secrets")
            .map(|s| s.log.join("\n"))
            .unwrap_or_default();
        let no_doctor = matches!(*image, "doctor-missing" | "reserved-missing");
        let scanned_by = if no_doctor {
            "the Python probe scanned"
        } else {
            "the image's doctor scanned"
        };
        if !log.contains(scanned_by) {
            wrong.push(format!(
                "{image}: check 9's log does not say `{scanned_by}`:\n{log}"
            ));
        }
        if no_doctor && !log.contains("the image's doctor cannot scan (") {
            wrong.push(format!(
                "{image}: check 9's log does not say why the doctor could not scan:\n{log}"
            ));
        }
    }
    println!("{table}");
    let left = common::left_by_run(&run_id);
    assert!(
        left.is_empty(),
        "still listed under the run label: {left:?}"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
