//! When a step after launch fails, the failure says what happened to the sandbox, as the
//! engine tells: a sandbox killed during first-result reads `the sandbox stopped during
//! first-result: killed (exit 137)` with its last log lines, a paused one `the sandbox
//! stopped answering during first-result (paused…)`; what the step itself saw (a reset
//! connection, a budget) stays in its log. Cleanup leaves nothing either way.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;

/// A scenario whose first result takes 20 s, inside a 12 s budget, so that the sandbox can
/// be stopped or paused while the step waits on it.
fn slow_first_result(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("a folder");
    let path = dir.join("slow-first-result.yaml");
    std::fs::write(
        &path,
        format!(
            "name: slow-first-result\nenvironment: {}\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 90s\n  - step: first-result\n    budget: 12s\n    code: \"__import__('time').sleep(20) or 1+1\"\n    expect: \"2\"\n  - step: cleanup\n    budget: 2m\n",
            common::root().join("fixtures/environments/reference").display()
        ),
    )
    .expect("writable");
    path
}

/// Runs the slow scenario on the docker variant, does `docker <action>` to its sandbox once
/// first-result has started, and returns the run id and the first-result step of
/// results.json.
fn interfered(test: &str, action: &str) -> (String, serde_json::Value) {
    let dir = common::out_dir(test);
    let scenario = slow_first_result(&dir);
    let out = dir.join("reports");
    let mut child = common::docker_run(&scenario, &out)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sandbox-matrix starts");
    let stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut run_id = None;
    let mut seen = Vec::new();
    let mut lines = stderr.lines().map_while(Result::ok);
    for line in lines.by_ref() {
        if let Some(rest) = line.strip_prefix("run ") {
            run_id = rest.split(':').next().map(str::to_owned);
        }
        let reached = line.trim() == "▸ first-result";
        seen.push(line);
        if reached {
            break;
        }
    }
    let run_id = run_id.unwrap_or_else(|| panic!("no run id: {seen:#?}"));
    assert!(
        seen.last().is_some_and(|l| l.trim() == "▸ first-result"),
        "the run ended before first-result: {seen:#?}"
    );
    // The kernel is given a moment to take the code.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let filter = format!("label=sandbox-matrix.run={run_id}");
    let listed = Command::new("docker")
        .args(["ps", "-q", "--filter", &filter])
        .output()
        .expect("docker ps");
    let container = String::from_utf8_lossy(&listed.stdout).trim().to_owned();
    assert!(!container.is_empty(), "no running sandbox of run {run_id}");
    let done = Command::new("docker")
        .args([action, &container])
        .output()
        .expect("docker CLI");
    assert!(done.status.success(), "docker {action}: {done:?}");
    seen.extend(lines);
    let status = child.wait().expect("the run ends");
    assert_eq!(status.code(), Some(1), "a step failed: {seen:#?}");
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join(&run_id).join("results.json")).expect("results.json"),
    )
    .expect("JSON");
    let step = results["scenarios"][0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["step"] == "first-result")
        .expect("a first-result step")
        .clone();
    assert!(
        common::left_by_run(&run_id).is_empty(),
        "cleanup left the sandbox of run {run_id}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    (run_id, step)
}

pub fn a_sandbox_killed_during_a_step_is_said_killed_with_its_last_log_lines() {
    let (_, step) = interfered("state-killed", "kill");
    let reason = step["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with("the sandbox stopped during first-result: killed (exit 137); its last "),
        "{step}"
    );
    assert!(
        reason.contains("\n    | "),
        "its log lines follow: {reason}"
    );
    assert!(!reason.contains("Some("), "{reason}");
    let log = step["log"].as_array().expect("a log");
    assert!(
        log.iter().any(|l| l
            .as_str()
            .is_some_and(|l| l.starts_with("what the step saw: "))),
        "what the step saw stays in its log: {step}"
    );
}

pub fn a_paused_sandbox_is_said_to_have_stopped_answering() {
    let (_, step) = interfered("state-paused", "pause");
    assert_eq!(
        step["reason"],
        "the sandbox stopped answering during first-result (paused, frozen by its engine)",
        "{step}"
    );
}
