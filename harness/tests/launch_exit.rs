//! Launch watches the sandbox container: one that exits while Jupyter Server should be
//! starting fails launch with its exit code and last log lines, not with a readiness poll's
//! `connection refused`. Needs Docker (required under CI=true).

mod common;

use std::process::Command;

use sandbox_matrix::report::results::{RunResults, StepStatus};

#[test]
fn a_sandbox_that_exits_fails_launch_with_its_exit_code_and_last_log_lines() {
    if !common::docker_or_skip("a_sandbox_that_exits_fails_launch") {
        return;
    }
    let dir = common::out_dir("launch-exit");
    let env = dir.join("environment");
    std::fs::create_dir_all(&env).expect("environment folder");
    std::fs::write(
        env.join("Dockerfile"),
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\nENTRYPOINT [\"/bin/sh\", \"-c\", \"sleep 3; echo sm-last-words-before-exit >&2; exit 7\"]\n",
    )
    .expect("Dockerfile written");
    let scenario = dir.join("exits.yaml");
    std::fs::write(
        &scenario,
        "name: launch-exit\nenvironment: environment\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 3m\n  - step: cleanup\n    budget: 2m\n",
    )
    .expect("scenario written");
    let out = dir.join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", "docker", "--scenario"])
        .arg(&scenario)
        .arg("--root")
        .arg(common::root())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("sandbox-matrix runs");
    let text = std::fs::read_to_string(out.join("latest/results.json"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: RunResults =
        serde_json::from_str(&text.expect("results.json written")).expect("it parses");
    let scenario = &results.scenarios[0];
    let Some(StepStatus::Failed { reason }) = scenario.step("launch").map(|s| &s.status) else {
        panic!("launch did not fail: {:?}", scenario.step("launch"));
    };
    assert!(
        reason.contains("exited with code 7") && reason.contains("sm-last-words-before-exit"),
        "{reason}"
    );
    assert_eq!(
        scenario.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed)
    );
    assert!(common::left_by_run(&results.provenance.run_id).is_empty());
}
