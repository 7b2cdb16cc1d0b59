//! A sandbox whose container neither exits nor becomes ready (its start command sleeps
//! forever, so nothing serves the code channel) fails launch at the step's budget, naming
//! what launch waited for, and cleanup still removes its container and image. Needs Docker
//! (required under CI=true).

use crate::common;

use std::time::Duration;

use sandbox_matrix::model::results::{RunResults, StepStatus};

/// The launch step's budget, kept short: the wait has no other end.
const LAUNCH_BUDGET: Duration = Duration::from_secs(10);

pub fn a_sandbox_that_hangs_without_exiting_fails_launch_at_its_budget_and_is_removed() {
    let dir = common::out_dir("launch-hang");
    let env = dir.join("environment");
    std::fs::create_dir_all(&env).expect("environment folder");
    std::fs::write(
        env.join("Dockerfile"),
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\nENTRYPOINT [\"/bin/sh\", \"-c\", \"exec sleep infinity\"]\n",
    )
    .expect("Dockerfile written");
    let scenario = dir.join("scenario.yaml");
    std::fs::write(
        &scenario,
        "name: launch-hang\nenvironment: environment\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 10s\n  - step: cleanup\n    budget: 2m\n",
    )
    .expect("scenario written");
    let out = dir.join("reports");
    let output = common::docker_run(&scenario, &out)
        .output()
        .expect("sandbox-matrix runs");
    let text = std::fs::read_to_string(out.join("latest/results.json"));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let results: RunResults =
        serde_json::from_str(&text.expect("results.json written")).expect("it parses");
    let scenario = &results.scenarios[0];
    let launch = scenario.step("launch").expect("launch ran");
    let StepStatus::Failed { reason } = &launch.status else {
        panic!("launch did not fail: {launch:?}");
    };
    assert_eq!(
        reason,
        "exceeded its budget of 10s waiting for the sandbox to run and its code channel to answer (it neither answered nor exited)"
    );
    assert!(
        launch.duration >= LAUNCH_BUDGET && launch.duration < LAUNCH_BUDGET * 2,
        "{:?}",
        launch.duration
    );
    assert_eq!(
        scenario.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed),
        "{stderr}"
    );
    assert!(
        common::left_by_run(&results.provenance.run_id).is_empty(),
        "the hung container (or its image) is left"
    );
}
