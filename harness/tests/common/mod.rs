//! Shared by the Docker-backed tests: whether the engine is there, and what a run left.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The project checkout (the workspace root).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// True when a Docker engine answers. Without one, `CI=true` makes this panic (the tests
/// are required there); elsewhere it prints why the caller skips and returns false.
pub fn docker_or_skip(test: &str) -> bool {
    let answer = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    let reason = match answer {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        Err(e) => format!("cannot run the docker CLI: {e}"),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: CI=true requires a Docker engine, and none answers: {reason}");
    }
    eprintln!(
        "skipped {test}: no Docker engine answers ({reason}); set CI=true to make this a failure"
    );
    false
}

/// Ids of containers and images still carrying the run's label, asked of the docker CLI
/// (not of the code under test).
pub fn left_by_run(run_id: &str) -> Vec<String> {
    let filter = format!("label=sandbox-matrix.run={run_id}");
    let mut left = Vec::new();
    for args in [
        vec!["ps", "-aq", "--filter", &filter],
        vec!["images", "-aq", "--filter", &filter],
    ] {
        let out = Command::new("docker")
            .args(&args)
            .output()
            .expect("docker CLI runs");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    left
}

/// A fresh, empty folder for one test's reports.
pub fn out_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sandbox-matrix-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
