//! Hashes the doctor's sources (the doctor crate and the contract it reads) so the docker
//! variant rebuilds its base image when the doctor changes, and only then; and sets
//! `cfg(host_python3)` when this machine's `python3` answers, or under `CI=true` where the
//! unit tests that run the probes with it are required (without it they are reported
//! ignored, with the reason).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Sets `cfg(host_python3)` when the probe tests can run here, or must (`CI=true`).
fn host_python3() {
    println!("cargo::rustc-check-cfg=cfg(host_python3)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    let required = std::env::var("CI").is_ok_and(|v| v == "true");
    let answers = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if required || answers {
        println!("cargo:rustc-cfg=host_python3");
    }
}

fn main() {
    host_python3();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths = Vec::new();
    for dir in ["doctor/src", "contract/src"] {
        println!("cargo:rerun-if-changed=../{dir}");
        files(&root.join(dir), &mut paths);
    }
    println!("cargo:rerun-if-changed=../doctor/Cargo.toml");
    paths.push(root.join("doctor/Cargo.toml"));
    paths.sort();
    let mut hasher = Sha256::new();
    for path in &paths {
        let relative = path.strip_prefix(&root).unwrap_or(path);
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(path).unwrap_or_default());
    }
    let hash: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=SANDBOX_MATRIX_DOCTOR_SOURCE_HASH={hash}");
}
