//! Launch watches the sandbox container: one that exits while Jupyter Server should be
//! starting fails launch with its exit code and last log lines, not with a readiness poll's
//! `connection refused`; one whose server hangs fails at the step's budget, not at a
//! client timeout. Needs Docker (required under CI=true).

use crate::common;

use std::process::Output;

use sandbox_matrix::model::results::{RunResults, StepStatus};

/// Runs, on the docker variant, a scenario named `name` with `steps` over an environment
/// of `files` (a `Dockerfile` among them) in a fresh folder, which it removes; returns the
/// command's output and its `results.json`.
fn run_environment(name: &str, files: &[(&str, &str)], steps: &str) -> (Output, RunResults) {
    let dir = common::out_dir(name);
    let env = dir.join("environment");
    std::fs::create_dir_all(&env).expect("environment folder");
    for (file, text) in files {
        std::fs::write(env.join(file), text).expect("environment file written");
    }
    let scenario = dir.join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!("name: {name}\nenvironment: environment\nsteps:\n{steps}"),
    )
    .expect("scenario written");
    let out = dir.join("reports");
    let output = common::docker_run(&scenario, &out)
        .output()
        .expect("sandbox-matrix runs");
    let text = std::fs::read_to_string(out.join("latest/results.json"));
    let _ = std::fs::remove_dir_all(&dir);
    let results = match text {
        Ok(text) => serde_json::from_str(&text).expect("it parses"),
        Err(e) => panic!(
            "results.json not written ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    };
    (output, results)
}

pub fn a_sandbox_that_exits_fails_launch_with_its_exit_code_and_last_log_lines() {
    let (output, results) = run_environment(
        "launch-exit",
        &[(
            "Dockerfile",
            "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\nENTRYPOINT [\"/bin/sh\", \"-c\", \"sleep 3; echo sm-last-words-before-exit >&2; exit 7\"]\n",
        )],
        "  - step: build\n    budget: 10m\n  - step: launch\n    budget: 3m\n  - step: cleanup\n    budget: 2m\n",
    );
    crate::sandbox_state::assert_terminal(
        "docker_exited_at_launch",
        &crate::sandbox_state::failed_step_lines(&sandbox_matrix::report::terminal::transcript(
            &results,
        )),
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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

/// A sandbox whose server answers `GET /api` (so launch passes) and then never answers a
/// kernel start, as a paused or hung one does: first-result must fail at its own budget
/// (65 s here), never at a shorter timeout hidden in the client (before, 60 s).
pub fn a_hung_kernel_start_fails_first_result_at_the_step_budget() {
    // A server on Jupyter's port: `GET /api` answers, anything else hangs.
    let server = [
        "import http.server, time",
        "class Handler(http.server.BaseHTTPRequestHandler):",
        "    def do_GET(self):",
        "        self.send_response(200)",
        "        self.send_header('content-type', 'application/json')",
        "        self.end_headers()",
        "        self.wfile.write(b'{\"version\": \"2.14.2\"}')",
        "    def do_POST(self):",
        "        time.sleep(86400)",
        "http.server.ThreadingHTTPServer(('0.0.0.0', 8888), Handler).serve_forever()",
    ]
    .join("\n")
        + "\n";
    let (output, results) = run_environment(
        "hung-kernel-start",
        &[
            ("server.py", &server),
            (
                "Dockerfile",
                "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\nCOPY server.py /tmp/server.py\nENTRYPOINT [\"python3\", \"/tmp/server.py\"]\n",
            ),
        ],
        "  - step: build\n    budget: 10m\n  - step: launch\n    budget: 3m\n  - step: first-result\n    budget: 65s\n  - step: cleanup\n    budget: 2m\n",
    );
    crate::sandbox_state::assert_terminal(
        "docker_hung_kernel",
        &crate::sandbox_state::failed_step_lines(&sandbox_matrix::report::terminal::transcript(
            &results,
        )),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let scenario = &results.scenarios[0];
    assert_eq!(
        scenario.step("launch").map(|s| &s.status),
        Some(&StepStatus::Passed),
        "{stderr}"
    );
    let first = scenario.step("first-result").expect("first-result ran");
    let StepStatus::Failed { reason } = &first.status else {
        panic!("first-result did not fail: {first:?}");
    };
    // The sandbox runs and never answers: that is the headline; the budget that ended the
    // step (not a client timeout) stays in the step's log.
    assert_eq!(
        reason,
        "the sandbox stopped answering during first-result (running, no reply for 1m 5s)"
    );
    assert!(
        first
            .log
            .iter()
            .any(|l| l.starts_with("what the step saw: exceeded its budget of 1m 5s")),
        "ended by the step's budget, not a client timeout: {:?}",
        first.log
    );
    assert!(
        first.duration >= std::time::Duration::from_secs(65),
        "{:?}",
        first.duration
    );
    assert_eq!(
        scenario.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed)
    );
}
