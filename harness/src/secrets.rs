//! The secrets scan: looks for build-time credentials without sending them to the sandbox.
//!
//! The sandbox receives each secret's name, length and rolling hash, and reports where a
//! window of its files, process environments or command lines hashes the same. The
//! artifact's metadata is read on the host and searched for the values directly.

use sandbox_providers::Secret;
use serde::{Deserialize, Serialize};

/// The probe's Python source; `probe_code` appends the call.
const SCAN_SCRIPT: &str = include_str!("probes/secrets_scan.py");

const BASE: u128 = 257;
const MODULUS: u128 = (1 << 61) - 1;

/// What the sandbox is told about one secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretFingerprint {
    /// The secret's name.
    pub name: String,
    /// Its length in bytes.
    pub len: usize,
    /// Polynomial rolling hash of its bytes (base 257, modulo 2^61 − 1).
    pub hash: u64,
}

impl SecretFingerprint {
    /// The fingerprint of `secret`.
    pub fn of(secret: &Secret) -> Self {
        Self {
            name: secret.name().to_owned(),
            len: secret.expose().len(),
            hash: rolling_hash(secret.expose().as_bytes()),
        }
    }
}

/// The rolling hash the probe computes over every window.
pub fn rolling_hash(bytes: &[u8]) -> u64 {
    let h = bytes
        .iter()
        .fold(0u128, |h, &b| (h * BASE + u128::from(b)) % MODULUS);
    u64::try_from(h).expect("reduced modulo 2^61 - 1")
}

/// Python code that scans the sandbox for `secrets` and prints one marked JSON line.
pub fn probe_code(secrets: &[Secret]) -> String {
    let fingerprints: Vec<SecretFingerprint> = secrets.iter().map(SecretFingerprint::of).collect();
    let targets = serde_json::to_string(&fingerprints).expect("fingerprints serialize");
    let literal = serde_json::to_string(&targets).expect("a string serializes");
    format!("{SCAN_SCRIPT}\nmain({literal})\n")
}

/// A place where a secret was found.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Finding {
    /// The secret's name.
    pub name: String,
    /// Where: a path, `process N environ`, or a metadata field.
    #[serde(rename = "where")]
    pub location: String,
}

/// The probe's report.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ScanReport {
    /// Every match.
    pub found: Vec<Finding>,
    /// Files read.
    pub files_scanned: u64,
    /// Files that could not be read (permissions, size).
    pub unreadable: u64,
    /// The uid the probe ran as.
    pub uid: u32,
}

/// Parses the probe's report out of `stdout` (the marked line every probe answers on).
pub fn parse_report(stdout: &str) -> Result<ScanReport, String> {
    let answer = crate::conformance::parse_answer(stdout)?;
    serde_json::from_value(answer)
        .map_err(|e| format!("the secrets probe's report is not valid: {e}"))
}

/// Searches the artifact's metadata (JSON from the provider) for the secrets' values,
/// naming the JSON path of each hit.
pub fn scan_metadata(metadata: &str, secrets: &[Secret]) -> Vec<Finding> {
    let mut found = Vec::new();
    match serde_json::from_str::<serde_json::Value>(metadata) {
        Ok(value) => walk(&value, "image metadata", secrets, &mut found),
        Err(_) => {
            for s in secrets.iter().filter(|s| metadata.contains(s.expose())) {
                found.push(Finding {
                    name: s.name().to_owned(),
                    location: "image metadata".into(),
                });
            }
        }
    }
    found
}

fn walk(value: &serde_json::Value, path: &str, secrets: &[Secret], found: &mut Vec<Finding>) {
    match value {
        serde_json::Value::String(text) => {
            for s in secrets.iter().filter(|s| text.contains(s.expose())) {
                found.push(Finding {
                    name: s.name().to_owned(),
                    location: path.to_owned(),
                });
            }
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{i}]"), secrets, found);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                walk(v, &format!("{path}.{k}"), secrets, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> Secret {
        // A fake canary made up for this test, not a credential.
        Secret::new("REGISTRY_TOKEN", "sm-fake-canary-0123456789abcdef")
    }

    #[test]
    fn probe_code_carries_the_fingerprint_not_the_value() {
        let code = probe_code(&[fake()]);
        assert!(!code.contains("sm-fake-canary-0123456789abcdef"));
        assert!(code.contains(&rolling_hash(b"sm-fake-canary-0123456789abcdef").to_string()));
    }

    #[test]
    fn the_python_probe_finds_the_window_the_rust_hash_describes() {
        let Ok(python) = which_python() else {
            eprintln!("skipped: no python3 on PATH to run the probe");
            return;
        };
        let dir = std::env::temp_dir().join(format!("sm-secrets-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(
            dir.join("clean.txt"),
            "nothing here, sm-fake-canary-0123456789abcdeX",
        )
        .unwrap();
        std::fs::write(
            dir.join("sub/leak.conf"),
            "token = \"xx sm-fake-canary-0123456789abcdef yy\"\n",
        )
        .unwrap();
        let targets = serde_json::to_string(&[SecretFingerprint::of(&fake())]).unwrap();
        let code = format!(
            "{SCAN_SCRIPT}\nmain({}, roots=[{}], processes=False)\n",
            serde_json::to_string(&targets).unwrap(),
            serde_json::to_string(dir.to_str().unwrap()).unwrap()
        );
        let out = std::process::Command::new(python)
            .arg("-c")
            .arg(code)
            .output()
            .unwrap();
        let report = parse_report(&String::from_utf8_lossy(&out.stdout)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let leak = dir.join("sub/leak.conf").to_string_lossy().into_owned();
        assert_eq!(
            report.found,
            vec![Finding {
                name: "REGISTRY_TOKEN".into(),
                location: leak
            }]
        );
        assert_eq!(report.files_scanned, 2);
    }

    fn which_python() -> Result<&'static str, ()> {
        std::process::Command::new("python3")
            .arg("--version")
            .output()
            .map(|_| "python3")
            .map_err(|_| ())
    }

    #[test]
    fn metadata_hits_name_their_json_path() {
        let meta = r#"{"env":["PATH=/usr/bin"],"history":["RUN x","|1 REGISTRY_TOKEN=sm-fake-canary-0123456789abcdef /bin/sh -c echo"]}"#;
        let found = scan_metadata(meta, &[fake()]);
        assert_eq!(
            found,
            vec![Finding {
                name: "REGISTRY_TOKEN".into(),
                location: "image metadata.history[1]".into()
            }]
        );
        assert!(scan_metadata(r#"{"env":[]}"#, &[fake()]).is_empty());
    }

    #[test]
    fn report_parses_behind_the_marker_and_errors_name_what_came() {
        let out = "noise\nSANDBOX_MATRIX_PROBE {\"found\":[{\"name\":\"T\",\"where\":\"/etc/x\"}],\"files_scanned\":3,\"unreadable\":0,\"uid\":0}\n";
        let report = parse_report(out).unwrap();
        assert_eq!(report.found[0].location, "/etc/x");
        assert!(
            parse_report("Traceback ...")
                .unwrap_err()
                .contains("Traceback")
        );
    }
}
