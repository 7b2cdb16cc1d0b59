//! The secrets scan: looks for build-time credentials without sending them to the sandbox.
//!
//! Each secret is searched in several forms (see [`forms`]): its value, and its base64,
//! URL-encoded and hex encodings. The sandbox receives each form's fingerprint (a
//! [`Target`]: name, length, rolling hash and character class) and reports where a window
//! of its files, process environments or command lines hashes the same. Two scanners
//! answer alike: the image's doctor (`datalayer-sandbox scan-secrets`, native and
//! parallel), run through exec where the variant can, and a Python probe (the fallback,
//! and the scanner on variants that only run code through the kernel). The artifact's
//! metadata is read on the host and searched for every form directly.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
pub use doctor::scan::{Finding, ScanReport, Target};
use doctor::scan::{class_of, rolling_hash};
use sandbox_providers::Secret;

/// The probe's Python source; `probe_code` appends the call.
const SCAN_SCRIPT: &str = include_str!("probes/secrets_scan.py");

/// How the base64 fragments of a secret are named, after the secret's name.
const BASE64_FORM: &str = " (base64)";

/// What the sandbox is told about `form` (a secret or one of its [`forms`]): never its
/// value.
///
/// Scanning every byte of `/usr` for every window is slow, so the scanners first find the
/// runs of bytes of the form's class at least its length long, and hash only those. The
/// class is one of seven fixed alphabets, which says next to nothing about the value (for
/// the encoded forms, the encoding already says it). A hash of a short prefix would have
/// served as a cheaper first filter too, but it would give the prefix away: anyone can
/// hash every 4-byte string and look the answer up.
pub fn fingerprint(form: &Secret) -> Target {
    let bytes = form.expose().as_bytes();
    Target {
        name: form.name().to_owned(),
        len: bytes.len(),
        hash: rolling_hash(bytes),
        class: class_of(bytes).to_owned(),
        wrapped: is_base64(form),
    }
}

/// Whether `form` is one of the base64 fragments of [`forms`]: base64 is often wrapped at
/// 64 or 76 characters, so line breaks inside a run are ignored for it.
fn is_base64(form: &Secret) -> bool {
    form.name().ends_with(BASE64_FORM)
}

/// The forms `secret` is searched in, each a [`Secret`] named for its form: the value
/// (`REGISTRY_TOKEN`), `REGISTRY_TOKEN (base64)` three times, `(url-encoded)`, `(hex)`
/// and `(hex, upper case)`.
///
/// Base64 turns each 3 bytes into 4 characters of 6 bits, so what a secret becomes inside
/// a larger encoded blob depends on where it starts within a 3-byte group: at offset 0, 1
/// or 2. For each offset `o`, the secret of `n` bytes is encoded behind `o` filler bytes
/// and only the characters whose 6 bits all come from the secret are kept, characters
/// `ceil(8o/6)` up to `floor(8(o+n)/6)`: those are the same whatever bytes surround the
/// secret, so any base64 text that encodes it holds one of the three, line breaks aside
/// (the search ignores them inside base64). Hex and URL encoding map each byte on its own
/// and need no such care.
///
/// A form shorter than the value (the empty fragment of a one-byte value) is dropped, and
/// a form equal to an earlier one (the URL encoding of a value with nothing to escape) is
/// kept once.
pub fn forms(secret: &Secret) -> Vec<Secret> {
    let value = secret.expose().as_bytes();
    let name = secret.name();
    let mut candidates = vec![(name.to_owned(), secret.expose().to_owned())];
    for offset in 0..3 {
        let mut padded = vec![0u8; offset];
        padded.extend_from_slice(value);
        let encoded = BASE64.encode(&padded);
        let (from, to) = ((8 * offset).div_ceil(6), 8 * (offset + value.len()) / 6);
        candidates.push((format!("{name}{BASE64_FORM}"), encoded[from..to].to_owned()));
    }
    candidates.push((format!("{name} (url-encoded)"), url_encode(value)));
    let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
    let upper = hex.to_uppercase();
    candidates.push((format!("{name} (hex)"), hex));
    candidates.push((format!("{name} (hex, upper case)"), upper));
    let mut kept: Vec<Secret> = Vec::new();
    for (form, text) in candidates {
        if text.len() >= value.len() && !kept.iter().any(|k| k.expose() == text) {
            kept.push(Secret::new(form, text));
        }
    }
    kept
}

/// Percent-encodes every byte but RFC 3986's unreserved ones, as `encodeURIComponent` does.
fn url_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The fingerprints of every form of every secret, in a fixed order.
pub fn fingerprints(secrets: &[Secret]) -> Vec<Target> {
    secrets
        .iter()
        .flat_map(forms)
        .map(|form| fingerprint(&form))
        .collect()
}

/// The command that has the image's doctor scan for every form of `secrets`.
pub fn doctor_command(secrets: &[Secret]) -> Vec<String> {
    let targets = serde_json::to_string(&fingerprints(secrets)).expect("fingerprints serialize");
    vec![
        sandbox_contract::IDENTITY.doctor.to_owned(),
        "scan-secrets".to_owned(),
        targets,
    ]
}

/// Parses the doctor's report: one JSON line on stdout.
pub fn parse_doctor_report(stdout: &str) -> Result<ScanReport, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line).map_err(|e| {
        format!(
            "the doctor's scan report is not valid ({e}); stdout: {}",
            sandbox_providers::quoted(sandbox_providers::tail(stdout, 300))
        )
    })
}

/// Python code that scans the sandbox for every form of `secrets` and prints one marked
/// JSON line.
pub fn probe_code(secrets: &[Secret]) -> String {
    let targets = serde_json::to_string(&fingerprints(secrets)).expect("fingerprints serialize");
    let literal = serde_json::to_string(&targets).expect("a string serializes");
    format!("{SCAN_SCRIPT}\nmain({literal})\n")
}

/// Parses the probe's report out of `stdout` (the marked line every probe answers on).
pub fn parse_report(stdout: &str) -> Result<ScanReport, String> {
    let answer = crate::checks::conformance::parse_answer(stdout)?;
    serde_json::from_value(answer)
        .map_err(|e| format!("the secrets probe's report is not valid: {e}"))
}

/// Searches the artifact's metadata (JSON from the provider) for every form of the
/// secrets, naming the form and the JSON path of each hit.
pub fn scan_metadata(metadata: &str, secrets: &[Secret]) -> Vec<Finding> {
    let forms: Vec<Secret> = secrets.iter().flat_map(forms).collect();
    let mut found = Vec::new();
    match serde_json::from_str::<serde_json::Value>(metadata) {
        Ok(value) => walk(&value, "artifact metadata", &forms, &mut found),
        Err(_) => search(metadata, "artifact metadata", &forms, &mut found),
    }
    found
}

/// Adds a finding for each form name `text` holds, once per name; base64 fragments are
/// also looked for with line breaks removed.
fn search(text: &str, path: &str, forms: &[Secret], found: &mut Vec<Finding>) {
    let unwrapped = text.replace(['\r', '\n'], "");
    for form in forms
        .iter()
        .filter(|f| text.contains(f.expose()) || (is_base64(f) && unwrapped.contains(f.expose())))
    {
        let finding = Finding {
            name: form.name().to_owned(),
            location: path.to_owned(),
        };
        if !found.contains(&finding) {
            found.push(finding);
        }
    }
}

fn walk(value: &serde_json::Value, path: &str, forms: &[Secret], found: &mut Vec<Finding>) {
    match value {
        serde_json::Value::String(text) => search(text, path, forms, found),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{i}]"), forms, found);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                walk(v, &format!("{path}.{k}"), forms, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake canary made up for these tests, not a credential.
    const FAKE: &str = "sm-fake-canary-0123456789abcdef";
    /// `FAKE` with one byte in the middle changed: a near miss, also fake.
    const NEAR_MISS: &str = "sm-fake-canary-0123456X89abcdef";
    /// A fake value with bytes URL encoding escapes and a space (class `any`), not a
    /// credential.
    const FAKE_ODD: &str = "fake/canary+0123456789=abc def";

    fn fake() -> Secret {
        Secret::new("REGISTRY_TOKEN", FAKE)
    }

    fn odd() -> Secret {
        Secret::new("OTHER_TOKEN", FAKE_ODD)
    }

    /// `text` cut into lines of 16 characters, as `base64` and PEM wrap theirs.
    fn wrap(text: &str) -> Vec<u8> {
        text.as_bytes()
            .chunks(16)
            .flat_map(|line| [line, b"\r\n"].concat())
            .collect()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn forms_are_the_value_its_base64_fragments_url_encoding_and_hex() {
        let named: Vec<(String, String)> = forms(&odd())
            .iter()
            .map(|f| (f.name().to_owned(), f.expose().to_owned()))
            .collect();
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "OTHER_TOKEN",
                "OTHER_TOKEN (base64)",
                "OTHER_TOKEN (base64)",
                "OTHER_TOKEN (base64)",
                "OTHER_TOKEN (url-encoded)",
                "OTHER_TOKEN (hex)",
                "OTHER_TOKEN (hex, upper case)",
            ]
        );
        assert_eq!(named[4].1, "fake%2Fcanary%2B0123456789%3Dabc%20def");
        assert_eq!(named[5].1, hex(FAKE_ODD.as_bytes()));
        assert_eq!(named[6].1, hex(FAKE_ODD.as_bytes()).to_uppercase());
        // At offset 0 the fragment is the encoding of the value without its last,
        // partly filled character.
        let whole = BASE64.encode(FAKE_ODD);
        assert_eq!(named[1].1, whole[..FAKE_ODD.len() * 8 / 6]);
        // Nothing to escape: the URL encoding is the value itself and is kept once.
        let plain: Vec<String> = forms(&fake()).iter().map(|f| f.name().to_owned()).collect();
        assert!(
            !plain.iter().any(|n| n.contains("url-encoded")),
            "{plain:?}"
        );
        assert_eq!(plain.len(), 6);
        // A form shorter than the value is dropped: a one-byte value has no base64
        // character of its own at offset 1.
        let short: Vec<String> = forms(&Secret::new("T", "z"))
            .iter()
            .map(|f| f.expose().to_owned())
            .collect();
        assert_eq!(short, ["z", "e", "6", "7a", "7A"]);
    }

    #[test]
    fn classes_are_the_narrowest_that_hold_every_byte() {
        assert_eq!(class_of(b"0123abcDEF"), "hex");
        assert_eq!(class_of(FAKE.as_bytes()), "lowercase");
        assert_eq!(class_of(b"c20tZmFrZS1j"), "alnum");
        assert_eq!(class_of(b"c20t_ZmFrZS1j"), "base64url");
        assert_eq!(class_of(b"c20tZmFrZS1j+/=="), "base64");
        assert_eq!(class_of(b"a.b/c%20"), "token");
        assert_eq!(class_of(b"a:b@c"), "graph");
        assert_eq!(class_of(FAKE_ODD.as_bytes()), "any");
        assert_eq!(class_of("é".as_bytes()), "any");
    }

    #[test]
    fn a_base64_blob_holds_the_secret_at_every_alignment_and_not_a_near_miss() {
        for lead in 0..6 {
            let blob = |value: &str| {
                let mut bytes = b"user:x\n".repeat(3)[..lead].to_vec();
                bytes.extend_from_slice(value.as_bytes());
                bytes.extend_from_slice(b"\ntrailing bytes");
                let encoded = BASE64.encode(&bytes);
                let wrapped = String::from_utf8(wrap(&encoded)).unwrap();
                serde_json::json!({ "labels": { "auth": encoded, "pem": wrapped } }).to_string()
            };
            assert_eq!(
                scan_metadata(&blob(FAKE), &[fake()]),
                ["auth", "pem"]
                    .map(|label| Finding {
                        name: "REGISTRY_TOKEN (base64)".into(),
                        location: format!("artifact metadata.labels.{label}"),
                    })
                    .to_vec(),
                "secret at offset {} of a 3-byte group",
                lead % 3
            );
            assert!(
                scan_metadata(&blob(NEAR_MISS), &[fake()]).is_empty(),
                "near miss at offset {}",
                lead % 3
            );
        }
    }

    #[test]
    fn probe_code_carries_fingerprints_not_values() {
        let code = probe_code(&[fake(), odd()]);
        for form in [fake(), odd()].iter().flat_map(forms) {
            assert!(!code.contains(form.expose()), "{} in clear", form.name());
            assert!(code.contains(&format!(
                "\\\"hash\\\":{}",
                rolling_hash(form.expose().as_bytes())
            )));
        }
        assert_eq!(fingerprints(&[fake(), odd()]).len(), 13);
    }

    /// A folder of files holding the fake secrets in their forms, near misses and files
    /// too short to hold any; the findings both scanners must report in it.
    fn leaky_tree(dir: &std::path::Path) -> (usize, Vec<(String, String)>) {
        let files: Vec<(&str, Vec<u8>)> = vec![
            (
                "clean.txt",
                format!("nothing here, {NEAR_MISS}").into_bytes(),
            ),
            ("tiny", b"ab".to_vec()),
            (
                "sub/leak.conf",
                format!("token = \"xx {FAKE} yy\"\n").into_bytes(),
            ),
            ("b64/0", BASE64.encode(format!("{FAKE}:rest")).into_bytes()),
            ("b64/1", BASE64.encode(format!("u{FAKE}:rest")).into_bytes()),
            (
                "b64/2",
                BASE64.encode(format!("us{FAKE}:rest")).into_bytes(),
            ),
            (
                "b64/near",
                BASE64.encode(format!("u{NEAR_MISS}")).into_bytes(),
            ),
            (
                "b64/wrapped",
                wrap(&BASE64.encode(format!("line\n{FAKE}\n"))),
            ),
            (
                "hex.bin",
                format!("\0\0{}\0", hex(FAKE.as_bytes()).to_uppercase()).into_bytes(),
            ),
            (
                "url",
                b"q=fake%2Fcanary%2B0123456789%3Dabc%20def&x".to_vec(),
            ),
            ("odd", format!("a\n{FAKE_ODD}\n").into_bytes()),
        ];
        for (name, bytes) in &files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        std::os::unix::fs::symlink(dir.join("sub/leak.conf"), dir.join("link")).unwrap();
        let at = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let mut expected = vec![
            (at("b64/0"), "REGISTRY_TOKEN (base64)".to_owned()),
            (at("b64/1"), "REGISTRY_TOKEN (base64)".to_owned()),
            (at("b64/2"), "REGISTRY_TOKEN (base64)".to_owned()),
            (at("b64/wrapped"), "REGISTRY_TOKEN (base64)".to_owned()),
            (at("hex.bin"), "REGISTRY_TOKEN (hex, upper case)".to_owned()),
            (at("odd"), "OTHER_TOKEN".to_owned()),
            (at("sub/leak.conf"), "REGISTRY_TOKEN".to_owned()),
            (at("url"), "OTHER_TOKEN (url-encoded)".to_owned()),
        ];
        expected.sort();
        // Every file but the one shorter than any form; the symlink is not followed.
        (files.len() - 1, expected)
    }

    fn sorted_findings(report: &ScanReport) -> Vec<(String, String)> {
        let mut found: Vec<(String, String)> = report
            .found
            .iter()
            .map(|f| (f.location.clone(), f.name.clone()))
            .collect();
        found.sort();
        found
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn the_python_probe_and_the_doctor_find_every_form_the_fingerprints_describe() {
        let dir = std::env::temp_dir().join(format!("sm-secrets-{}", std::process::id()));
        let (files, expected) = leaky_tree(&dir);
        let targets = fingerprints(&[fake(), odd()]);
        let native = |deadline: f64| {
            let options = doctor::scan::Options {
                roots: vec![dir.clone()],
                processes: false,
                deadline: std::time::Duration::from_secs_f64(deadline),
                home_and_cwd: false,
                ..doctor::scan::Options::default()
            };
            doctor::scan::scan(&targets, &options).unwrap()
        };
        let doctor = native(60.0);
        let doctor_stopped = native(0.0);
        let python = {
            let python = "python3";
            let run = |deadline: &str| {
                let json = serde_json::to_string(&targets).unwrap();
                let code = format!(
                    "{SCAN_SCRIPT}\nmain({}, roots=[{}], processes=False, deadline={deadline})\n",
                    serde_json::to_string(&json).unwrap(),
                    serde_json::to_string(dir.to_str().unwrap()).unwrap()
                );
                // Home and working directory inside the root: nothing else is walked.
                let out = std::process::Command::new(python)
                    .arg("-c")
                    .arg(code)
                    .env("HOME", &dir)
                    .current_dir(&dir)
                    .output()
                    .unwrap_or_else(|e| {
                        panic!("this test runs the probe with python3 on PATH: {e}")
                    });
                parse_report(&String::from_utf8_lossy(&out.stdout)).unwrap()
            };
            (run("60"), run("0"))
        };
        std::fs::remove_dir_all(&dir).unwrap();
        let root = [dir.to_string_lossy()];
        assert_eq!(sorted_findings(&doctor), expected, "the doctor");
        assert_eq!(doctor.files_scanned, files as u64);
        assert_eq!(doctor.roots, root);
        assert!(doctor.stopped_at.is_none());
        // Readers that had a file in hand when the time ran out finish it.
        assert!((1..=files as u64).contains(&doctor_stopped.files_scanned));
        assert!(doctor_stopped.stopped_at.is_some());
        let (python, python_stopped) = python;
        assert_eq!(sorted_findings(&python), expected, "the Python probe");
        assert_eq!(python.files_scanned, files as u64);
        assert_eq!(python.roots, root);
        assert!(python.stopped_at.is_none());
        assert_eq!(python_stopped.files_scanned, 1);
        assert!(python_stopped.stopped_at.is_some());
    }

    #[test]
    fn metadata_hits_name_their_form_and_json_path() {
        let meta = format!(
            r#"{{"env":["PATH=/usr/bin"],"history":["RUN x","|1 REGISTRY_TOKEN={FAKE} /bin/sh -c echo"],"labels":{{"x":"{}"}}}}"#,
            hex(FAKE.as_bytes()).to_uppercase()
        );
        let found = scan_metadata(&meta, &[fake()]);
        assert_eq!(
            found,
            vec![
                Finding {
                    name: "REGISTRY_TOKEN".into(),
                    location: "artifact metadata.history[1]".into()
                },
                Finding {
                    name: "REGISTRY_TOKEN (hex, upper case)".into(),
                    location: "artifact metadata.labels.x".into()
                }
            ]
        );
        assert!(scan_metadata(r#"{"env":[]}"#, &[fake()]).is_empty());
        let text = format!("not json: {}", hex(FAKE.as_bytes()));
        assert_eq!(
            scan_metadata(&text, &[fake()]),
            vec![Finding {
                name: "REGISTRY_TOKEN (hex)".into(),
                location: "artifact metadata".into()
            }]
        );
    }

    #[test]
    fn report_parses_behind_the_marker_and_errors_name_what_came() {
        let out = "noise\nSANDBOX_MATRIX_PROBE {\"found\":[{\"name\":\"T\",\"where\":\"/etc/x\"}],\"files_scanned\":3,\"unreadable\":0,\"uid\":0,\"roots\":[\"/\"],\"home\":\"/root\",\"cwd\":\"/\",\"skipped\":[\"/proc\"],\"seconds\":0.5,\"stopped_at\":null}\n";
        let report = parse_report(out).unwrap();
        assert_eq!(report.found[0].location, "/etc/x");
        assert_eq!(report.skipped, ["/proc"]);
        assert!(
            parse_report("Traceback ...")
                .unwrap_err()
                .contains("Traceback")
        );
    }
}
