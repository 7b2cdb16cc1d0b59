//! Ctrl-C in the middle of a step stops it, cleanup still runs, and the run exits 130
//! with the results it had measured written.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_matrix::model::results::{RunResults, StepStatus};

pub fn ctrl_c_mid_step_still_removes_the_container() {
    let root = common::root();
    let out = common::out_dir("interrupt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", "docker", "--scenario"])
        .arg(root.join("fixtures/scenarios/interrupted.yaml"))
        .arg("--root")
        .arg(&root)
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandbox-matrix starts");
    let stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut lines = stderr.lines().map_while(Result::ok);
    let started = Instant::now();
    // Wait until the long step has started, then give it a moment to be mid-way.
    for line in lines.by_ref() {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "first-result never started"
        );
        if line.trim() == "▸ first-result" {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill runs")
            .success()
    );
    let rest: Vec<String> = lines.collect();
    let status = child.wait().expect("sandbox-matrix exits");
    assert_eq!(status.code(), Some(130), "stderr after Ctrl-C: {rest:#?}");

    let text =
        std::fs::read_to_string(out.join("latest/results.json")).expect("results.json written");
    let results: RunResults = serde_json::from_str(&text).expect("results.json parses");
    let scenario = &results.scenarios[0];
    assert_eq!(
        scenario.step("build").map(|s| &s.status),
        Some(&StepStatus::Passed),
        "build's result is kept"
    );
    assert_eq!(
        scenario.step("first-result").map(|s| &s.status),
        Some(&StepStatus::Failed {
            reason: "interrupted by Ctrl-C".into()
        })
    );
    assert_eq!(
        scenario.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed)
    );
    let left = common::left_by_run(&results.provenance.run_id);
    assert!(
        left.is_empty(),
        "still listed under the run label: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
}
