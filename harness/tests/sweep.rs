//! `sandbox-matrix sweep` removes what a killed run left, found by its run label, and only
//! that run's. Needs Docker (required under CI=true).

mod common;

use std::process::Command;

/// A stopped container labelled as if run `run_id` had been killed while it existed.
fn leftover(run_id: &str) -> String {
    let out = Command::new("docker")
        .args([
            "create",
            "--label",
            &format!("sandbox-matrix.run={run_id}"),
            "--label",
            "sandbox-matrix.variant=docker",
            "--label",
            "sandbox-matrix.scenario=lifecycle",
            "sandbox-matrix/contract-base:v1",
            "true",
        ])
        .output()
        .expect("docker CLI runs");
    assert!(
        out.status.success(),
        "docker create (is the base image bootstrapped?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn sweep_removes_a_killed_runs_leftovers_and_nothing_else() {
    if !common::docker_or_skip("sweep_removes_a_killed_runs_leftovers_and_nothing_else") {
        return;
    }
    let killed = sandbox_matrix::run::runner::new_run_id();
    let other = sandbox_matrix::run::runner::new_run_id();
    let id = leftover(&killed);
    let kept = leftover(&other);
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--run", &killed, "--variant", "docker"])
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("docker::lifecycle: removed container {id}")),
        "{stdout}"
    );
    assert!(
        common::left_by_run(&killed).is_empty(),
        "the killed run's container is still there"
    );
    assert_eq!(
        common::left_by_run(&other).len(),
        1,
        "another run's container was removed"
    );
    let removed = Command::new("docker")
        .args(["rm", "-f", &kept])
        .output()
        .expect("docker CLI runs");
    assert!(removed.status.success());
}
