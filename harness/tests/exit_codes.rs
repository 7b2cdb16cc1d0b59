//! Each command's exit codes are the ones its `--help` documents, for the cases that need
//! no engine and no network: 0 done, 1 a failed step / a hold / a refusal, 2 bad input,
//! 3 reports that cannot be written.

mod common;

use std::path::Path;
use std::process::Command;

/// Runs `sandbox-matrix` from the checkout and returns its exit code and stderr.
fn code(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(args)
        .current_dir(common::root())
        .env_remove("E2B_API_KEY")
        .env_remove("DAYTONA_API_KEY")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("sandbox-matrix runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn every_command_exits_as_its_help_says() {
    let dir = common::out_dir("exit-codes");
    std::fs::create_dir_all(&dir).expect("a folder");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writable");
        path
    };
    let results = common::root().join("examples/gate/results.json");
    let missing = dir.join("missing.json");
    let blocker = write("not-a-folder", "a file\n");
    let reports = dir.join("reports");
    let refused = write("Dockerfile.refused", "FROM debian:trixie-slim\nUSER root\n");
    let clean = write(
        "Dockerfile.clean",
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\n",
    );
    let shipping = write("ship.yaml", "success_rate: 0\n");
    let holding = write("hold.yaml", "success_rate: 1\n");
    let (unwritable_out, merged, page, unwritable_page) = (
        blocker.join("x"),
        dir.join("merged"),
        dir.join("r.html"),
        blocker.join("r.html"),
    );
    let cases: Vec<(&str, Vec<&str>, i32)> = vec![
        // run: 0 passed (a replay), 2 bad input, 3 reports that cannot be written.
        (
            "run passes",
            vec![
                "run",
                "--variant",
                "e2b",
                "--scenario",
                "lifecycle",
                "--out",
                s(&reports),
            ],
            0,
        ),
        (
            "run of an unknown variant",
            vec!["run", "--variant", "nope"],
            2,
        ),
        (
            "run into a file",
            vec![
                "run",
                "--variant",
                "e2b",
                "--scenario",
                "lifecycle",
                "--out",
                s(&unwritable_out),
            ],
            3,
        ),
        // list: 0, 2 on a named cloud scenario it cannot run.
        ("list", vec!["list", "--variant", "docker"], 0),
        (
            "list of what run refuses",
            vec!["list", "--variant", "e2b", "--scenario", "burst"],
            2,
        ),
        // lint: 0 nothing refused, 1 something refused, 2 a file it cannot read.
        ("lint of a clean file", vec!["lint", s(&clean)], 0),
        ("lint of a refused file", vec!["lint", s(&refused)], 1),
        ("lint of a missing file", vec!["lint", s(&missing)], 2),
        // gate: 0 every variant ships, 1 one holds, 2 a file it cannot use.
        (
            "gate ships",
            vec!["gate", "--policy", s(&shipping), s(&results)],
            0,
        ),
        (
            "gate holds",
            vec!["gate", "--policy", s(&holding), s(&results)],
            1,
        ),
        (
            "gate of a missing file",
            vec!["gate", "--policy", s(&shipping), s(&missing)],
            2,
        ),
        // compare: 0 whatever changed, 2 a file it cannot use.
        (
            "compare",
            vec!["compare", "--baseline", s(&results), s(&results)],
            0,
        ),
        (
            "compare of a missing file",
            vec!["compare", "--baseline", s(&results), s(&missing)],
            2,
        ),
        // merge and report: 2 when a results file cannot be read.
        (
            "merge of a missing file",
            vec!["merge", "--out", s(&merged), s(&missing)],
            2,
        ),
        (
            "report of a missing file",
            vec!["report", "--out", s(&page), s(&missing)],
            2,
        ),
        (
            "report into a file",
            vec!["report", "--out", s(&unwritable_page), s(&results)],
            3,
        ),
        // preflight: 2 on bad input.
        (
            "preflight of a base by tag",
            vec!["preflight", "--base", "foo:latest", "--variant", "e2b"],
            2,
        ),
        (
            "preflight of an unknown variant",
            vec!["preflight", "--variant", "nope"],
            2,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, args, expected) in cases {
        let (got, stderr) = code(&args);
        if got != Some(expected) {
            wrong.push(format!("{what}: exit {got:?}, not {expected}\n{stderr}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
