//! `sandbox-matrix sweep` removes what a killed run left, found by its run label, and only
//! that run's; an age sweep leaves a run that is still going alone, wherever it writes its
//! reports. Needs Docker (required under CI=true).

mod common;

use std::process::Command;
use std::sync::Mutex;

/// Held by each test here: an age sweep would take another test's leftovers.
static ENGINE: Mutex<()> = Mutex::new(());

fn engine() -> std::sync::MutexGuard<'static, ()> {
    ENGINE.lock().unwrap_or_else(|p| p.into_inner())
}

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

pub fn sweep_removes_a_killed_runs_leftovers_and_nothing_else() {
    let _engine = engine();
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

pub fn sweep_finds_a_scenario_from_outside_scenarios_without_being_told_it() {
    let _engine = engine();
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

pub fn sweep_without_a_run_takes_dead_runs_ledgers_and_dry_run_removes_nothing() {
    let _engine = engine();
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

pub fn an_age_sweep_leaves_a_live_run_alone_wherever_it_writes_and_the_run_passes() {
    let _engine = engine();
    let dir = common::out_dir("sweep-live-run");
    // The reference environment whose server starts 25 s late: by first-result, its
    // container and image are older than the sweep's --older-than.
    let env = dir.join("environment");
    std::fs::create_dir_all(&env).expect("environment folder");
    std::fs::write(
        env.join("Dockerfile"),
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\nENTRYPOINT [\"/bin/sh\", \"-c\", \"sleep 25; exec \\\"$@\\\"\", \"slow-start\"]\n",
    )
    .expect("Dockerfile written");
    let scenario = dir.join("live.yaml");
    std::fs::write(
        &scenario,
        "name: live-run\nenvironment: environment\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 3m\n  - step: first-result\n    budget: 2m\n    code: \"import time; time.sleep(10); 1+1\"\n    expect: \"2\"\n  - step: cleanup\n    budget: 2m\n",
    )
    .expect("scenario written");
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .args(["run", "--variant", "docker", "--scenario"])
        .arg(&scenario)
        .arg("--root")
        .arg(common::root())
        .arg("--out")
        .arg(dir.join("reports"));
    let mut run = common::StartedRun::start(command);
    let run_id = run.until_step("first-result");
    let before = common::left_by_run(&run_id);
    // From the checkout, with its own reports folder: the run's ledger is not under it.
    let swept = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--older-than", "20s", "--variant", "docker"])
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&swept.stdout),
        String::from_utf8_lossy(&swept.stderr)
    );
    let during = common::left_by_run(&run_id);
    let (status, seen) = run.finish();
    let after = common::left_by_run(&run_id);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(before.len(), 2, "a container and an image: {before:?}");
    assert_eq!(swept.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("run {run_id}: left alone: its process")),
        "{said}"
    );
    assert!(!said.contains(&format!("run {run_id}: docker")), "{said}");
    assert_eq!(during, before, "the sweep took from the live run: {said}");
    assert_eq!(status.code(), Some(0), "the run passes: {seen:#?}");
    assert!(after.is_empty(), "{after:?}");
}

fn main() {
    use common::trials::Need;
    let args = libtest_mimic::Arguments::from_args();
    let trials = trials![
        Need::Docker => [
            sync sweep_removes_a_killed_runs_leftovers_and_nothing_else,
            sync sweep_finds_a_scenario_from_outside_scenarios_without_being_told_it,
            sync sweep_without_a_run_takes_dead_runs_ledgers_and_dry_run_removes_nothing,
            sync an_age_sweep_leaves_a_live_run_alone_wherever_it_writes_and_the_run_passes,
        ];
    ];
    libtest_mimic::run(&args, trials).exit();
}
