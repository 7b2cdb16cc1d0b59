//! When a step after launch fails, the failure says what happened to the sandbox, as the
//! engine tells: a sandbox killed during first-result reads `the sandbox stopped during
//! first-result: killed (exit 137)` with its last log lines, a paused one `the sandbox
//! stopped answering during first-result (paused…)`; what the step itself saw (a reset
//! connection, a budget) stays in its log. Cleanup leaves nothing either way. The cloud
//! variants say it through their providers' APIs, shown against their emulators. The
//! docker cases stop the sandbox during first-result, restart and the secrets scan.

use crate::common;

use common::emulate::Emulate;
use sandbox_matrix::model::results;
use sandbox_matrix::report::terminal;

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

/// A scenario that answers 1+1, then restarts (within 10 s) and scans for secrets: the
/// steps after the first result, to stop or pause the sandbox in as soon as they start.
fn restart_then_scan(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("a folder");
    let path = dir.join("restart-then-scan.yaml");
    std::fs::write(
        &path,
        format!(
            "name: restart-then-scan\nenvironment: {}\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 90s\n  - step: first-result\n    budget: 60s\n  - step: restart\n    budget: 10s\n  - step: secrets-scan\n    budget: 2m\n  - step: cleanup\n    budget: 2m\n",
            common::root().join("fixtures/environments/reference").display()
        ),
    )
    .expect("writable");
    path
}

/// When and how a test interferes with a run's sandbox: `docker <action>` once `step` has
/// started and `after` has passed.
#[derive(Clone, Copy)]
struct Interference {
    step: &'static str,
    action: &'static str,
    after: std::time::Duration,
}

/// Into the slow first result, once the kernel has had a moment to take the code.
fn into_first_result(action: &'static str) -> Interference {
    Interference {
        step: "first-result",
        action,
        after: std::time::Duration::from_secs(2),
    }
}

/// Runs the slow scenario on the docker variant with `--verbose`, does `docker <action>` to
/// its sandbox once first-result has started, and returns the run id, the failed step of
/// results.json and the terminal's lines for it; asserts that `--verbose` printed what the
/// step itself saw under it.
fn interfered(test: &str, action: &'static str) -> (String, serde_json::Value, String) {
    let dir = common::out_dir(test);
    let scenario = slow_first_result(&dir);
    let out = dir.join("reports");
    let mut run = common::docker_run(&scenario, &out);
    run.arg("--verbose");
    let (run_id, step, terminal, printed) =
        interfered_run(&dir, run, &out, into_first_result(action));
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("    · what the step saw: ")),
        "--verbose prints the failed step's own log: {printed:#?}"
    );
    (run_id, step, terminal)
}

/// Runs restart-then-scan on the docker variant and does `docker <action>` to its sandbox
/// as soon as `step` starts; the failed step and the terminal's lines for it.
fn interfered_at(
    test: &str,
    step: &'static str,
    action: &'static str,
) -> (serde_json::Value, String) {
    let dir = common::out_dir(test);
    let scenario = restart_then_scan(&dir);
    let out = dir.join("reports");
    let run = common::docker_run(&scenario, &out);
    let at = Interference {
        step,
        action,
        after: std::time::Duration::ZERO,
    };
    let (_, failed, terminal, _) = interfered_run(&dir, run, &out, at);
    (failed, terminal)
}

/// Runs the slow scenario live on cloud variant `variant` against its emulator (started
/// here, with the settings it prints and a fake key where the variant needs one), kills
/// the emulator's container of the sandbox once first-result has started, and returns the
/// first-result step of results.json.
fn killed_in_emulator(variant: &str) -> (serde_json::Value, String) {
    let extra: &[&str] = if variant == "modal" {
        &["--port", "0"]
    } else {
        &[]
    };
    let emulate = Emulate::start(variant, extra);
    let dir = common::out_dir(&format!("state-{variant}"));
    let scenario = slow_first_result(&dir);
    let out = dir.join("reports");
    let mut run = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    run.args(["run", "--live", "--variant", variant, "--scenario"])
        .arg(&scenario)
        .arg("--root")
        .arg(common::root())
        .arg("--out")
        .arg(&out)
        .envs(&emulate.settings)
        // Fakes: the emulators check only that a key is sent.
        .env("E2B_API_KEY", "e2b_fake_state_key_0000")
        .env("DAYTONA_API_KEY", "dtn_fake_state_key_0000");
    if variant == "modal" {
        run.env("SANDBOX_MATRIX_MODAL_URL", emulate.get("MODAL_SERVER_URL"));
    }
    let (_, step, terminal, _) = interfered_run(&dir, run, &out, into_first_result("kill"));
    emulate.stop();
    (step, terminal)
}

/// Runs `run`, does `docker <action>` to the run's container once first-result has
/// started, and returns the run id and the first-result step of results.json.
fn interfered_run(
    dir: &Path,
    mut run: Command,
    out: &Path,
    at: Interference,
) -> (String, serde_json::Value, String, Vec<String>) {
    let started = format!("▸ {}", at.step);
    let mut child = run
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
        let reached = line.trim() == started;
        seen.push(line);
        if reached {
            break;
        }
    }
    let run_id = run_id.unwrap_or_else(|| panic!("no run id: {seen:#?}"));
    assert!(
        seen.last().is_some_and(|l| l.trim() == started),
        "the run ended before {}: {seen:#?}",
        at.step
    );
    std::thread::sleep(at.after);
    let action = at.action;
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
        .find(|s| s["step"] == at.step)
        .unwrap_or_else(|| panic!("a {} step", at.step))
        .clone();
    let loaded = results::load(&out.join(&run_id).join("results.json")).expect("it loads");
    let terminal = failed_step_lines(&terminal::transcript(&loaded));
    assert!(
        common::left_by_run(&run_id).is_empty(),
        "cleanup left the sandbox of run {run_id}"
    );
    let _ = std::fs::remove_dir_all(dir);
    (run_id, step, terminal, seen)
}

/// The terminal's lines of the step that failed: its line and the log lines under it.
pub fn failed_step_lines(transcript: &[String]) -> String {
    let at = transcript
        .iter()
        .position(|l| l.starts_with("  ✗ "))
        .unwrap_or_else(|| panic!("no step failed: {transcript:#?}"));
    transcript[at..]
        .iter()
        .take_while(|l| l.starts_with("  ✗ ") || l.starts_with("    | "))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

/// `terminal` against the snapshot `name` (under `engine/snapshots/`), with what changes
/// from run to run filtered: durations, the number of log lines and the lines themselves.
pub fn assert_terminal(name: &str, terminal: &str) {
    // No Rust form a user would have to decode in our words (the sandbox's own log lines
    // under them are its own).
    let headline = terminal.lines().next().unwrap_or_default();
    for form in ["Some(", "None", "Err(", "Ok(", " { "] {
        assert!(
            !headline.contains(form),
            "`{form}` in what a user reads:\n{terminal}"
        );
    }
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r" +\d+\.\d+ s\b", " [secs] s");
    settings.add_filter(r"\b\d{8}T\d{6}Z-[0-9a-f]{6}\b", "[run-id]");
    settings.add_filter(r"its last \d+ log lines", "its last [n] log lines");
    settings.add_filter(r"(?m)^    \| .*$", "    | [log line]");
    settings.add_filter(r"(\n    \| \[log line\])+", "\n    | [log line] …");
    settings.bind(|| insta::assert_snapshot!(name, terminal));
}

pub fn a_sandbox_killed_during_a_step_is_said_killed_with_its_last_log_lines() {
    let (_, step, terminal) = interfered("state-killed", "kill");
    assert_terminal("docker_killed", &terminal);
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
    let (_, step, terminal) = interfered("state-paused", "pause");
    assert_terminal("docker_paused", &terminal);
    assert_eq!(
        step["reason"],
        "the sandbox stopped answering during first-result (paused: it answers nothing until it is resumed)",
        "{step}"
    );
}

/// A cloud sandbox killed during a step is said ended in its provider's words, through the
/// provider's own API (E2B's sandbox and logs, Daytona's sandbox state as its runner
/// deduces it, Modal's `SandboxWait`), each against its emulator.
pub fn a_cloud_sandbox_killed_during_a_step_is_said_ended_by_its_provider() {
    for (variant, said) in [
        (
            "e2b",
            "the sandbox stopped during first-result: E2B no longer has it (it was killed, ran out of memory or passed its timeout); its last ",
        ),
        (
            "daytona",
            "the sandbox stopped during first-result: Daytona says it is `stopped`",
        ),
        (
            "modal",
            "the sandbox stopped during first-result: Modal says it failed (exit 137)",
        ),
    ] {
        let (step, terminal) = killed_in_emulator(variant);
        assert_terminal(&format!("{variant}_killed"), &terminal);
        let reason = step["reason"].as_str().expect("a reason");
        assert!(reason.starts_with(said), "{variant}: {step}");
        let log = step["log"].as_array().expect("a log");
        assert!(
            log.iter().any(|l| l
                .as_str()
                .is_some_and(|l| l.starts_with("what the step saw: "))),
            "{variant}: what the step saw stays in its log: {step}"
        );
    }
}

/// The table's other cases: a sandbox killed as its kernel restarts or as its secrets scan
/// runs, and one paused as its kernel restarts.
pub fn a_sandbox_stopped_during_restart_or_the_secrets_scan_is_said_so() {
    for (test, step, action, said, snapshot) in [
        (
            "state-restart-killed",
            "restart",
            "kill",
            "the sandbox stopped during restart: killed (exit 137)",
            "docker_killed_in_restart",
        ),
        (
            "state-scan-killed",
            "secrets-scan",
            "kill",
            "the sandbox stopped during secrets-scan: killed (exit 137)",
            "docker_killed_in_secrets_scan",
        ),
        (
            "state-restart-paused",
            "restart",
            "pause",
            "the sandbox stopped answering during restart (paused: it answers nothing until it is resumed)",
            "docker_paused_in_restart",
        ),
    ] {
        let (failed, terminal) = interfered_at(test, step, action);
        let reason = failed["reason"].as_str().expect("a reason");
        assert!(reason.starts_with(said), "{step} {action}: {failed}");
        assert_terminal(snapshot, &terminal);
    }
}
