//! `sandbox-matrix sweep` removes what a killed run left, found by its run label, and only
//! that run's. Needs Docker (required under CI=true).

mod common;

use std::process::Command;

/// A stopped container labelled as if run `run_id` had been killed while it existed.
fn leftover(run_id: &str) -> String {
    leftover_of(run_id, "lifecycle")
}

/// A stopped container labelled as if scenario `scenario` of run `run_id` had been killed
/// while it existed.
fn leftover_of(run_id: &str, scenario: &str) -> String {
    let out = Command::new("docker")
        .args([
            "create",
            "--label",
            &format!("sandbox-matrix.run={run_id}"),
            "--label",
            "sandbox-matrix.variant=docker",
            "--label",
            &format!("sandbox-matrix.scenario={scenario}"),
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

#[test]
fn sweep_finds_a_scenario_from_outside_scenarios_without_being_told_it() {
    if !common::docker_or_skip("sweep_finds_a_scenario_from_outside_scenarios") {
        return;
    }
    let killed = sandbox_matrix::run::runner::new_run_id();
    // A scenario loaded from a path: its name is in no file under scenarios/.
    let id = leftover_of(&killed, "from-elsewhere");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--run", &killed, "--variant", "docker"])
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let left = common::left_by_run(&killed);
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("docker::from-elsewhere: removed container {id}")),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(left.is_empty(), "left: {left:?}");
}

#[test]
fn sweep_without_a_run_takes_dead_runs_ledgers_and_dry_run_removes_nothing() {
    if !common::docker_or_skip("sweep_without_a_run_takes_dead_runs_ledgers") {
        return;
    }
    let out = common::out_dir("sweep-dead-ledgers");
    let dead = sandbox_matrix::run::runner::new_run_id();
    let alive = sandbox_matrix::run::runner::new_run_id();
    let dead_id = leftover_of(&dead, "from-elsewhere");
    let alive_id = leftover_of(&alive, "from-elsewhere");
    // The dead run's process is gone: a pid that is no process's (above pid_max).
    std::fs::create_dir_all(out.join(&dead)).expect("run folder");
    std::fs::write(
        out.join(&dead).join("ledger.jsonl"),
        format!(
            "{{\"event\":\"run\",\"run_id\":\"{dead}\",\"pid\":4294967295,\"started_at\":\"x\"}}\n"
        ),
    )
    .expect("ledger written");
    // The live run is this test's own process.
    sandbox_matrix::run::ledger::Ledger::create(&out.join(&alive), &alive).expect("ledger");
    let sweep = |extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["sweep", "--variant", "docker", "--out"])
            .arg(&out)
            .args(extra)
            .current_dir(common::root())
            .output()
            .expect("sandbox-matrix runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (dry_code, dry) = sweep(&["--dry-run"]);
    let after_dry = common::left_by_run(&dead).len();
    let (code, swept) = sweep(&[]);
    let dead_left = common::left_by_run(&dead);
    let alive_left = common::left_by_run(&alive);
    let _ = Command::new("docker")
        .args(["rm", "-f", &dead_id, &alive_id])
        .output();
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(dry_code, Some(0), "{dry}");
    assert!(
        dry.contains(&format!("would remove container {dead_id}")),
        "{dry}"
    );
    assert_eq!(after_dry, 1, "--dry-run removed something");
    assert_eq!(code, Some(0), "{swept}");
    assert!(
        swept.contains(&format!("removed container {dead_id}")),
        "{swept}"
    );
    assert!(dead_left.is_empty(), "the dead run's container is left");
    assert_eq!(alive_left.len(), 1, "a live run's container was removed");
}
