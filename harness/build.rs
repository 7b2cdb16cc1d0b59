//! Hashes the doctor's sources (the doctor crate and the contract it reads) so the docker
//! variant rebuilds its base image when the doctor changes, and only then.

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

fn main() {
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
