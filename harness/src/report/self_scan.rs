//! The run's self-scan: before a run ends, every file it wrote (the run folder's reports,
//! ledger and logs; the cassettes it recorded) is searched for every credential value the
//! run used, in each of the secrets scan's forms (raw, base64 at every alignment even when
//! wrapped, URL-encoded, hex). A hit is scrubbed from the file in place, replaced by
//! `<redacted:NAME>`, and fails the run naming the file and the form, never the value.

use std::path::{Path, PathBuf};

use sandbox_providers::Secret;

use crate::checks::secrets;

/// Environment variables holding credentials a run may use: provider keys and tokens, the
/// AWS session, the registry passwords. Their values join the run's own secrets (its canary,
/// its registry token) in the self-scan.
pub const CREDENTIAL_VARS: &[&str] = &[
    "E2B_API_KEY",
    "E2B_ACCESS_TOKEN",
    "DAYTONA_API_KEY",
    "DAYTONA_JWT_TOKEN",
    "MODAL_TOKEN_SECRET",
    "DATALAYER_API_KEY",
    "SANDBOX_MATRIX_DATALAYER_PUSH_PASSWORD",
    "SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "SANDBOX_MATRIX_REGISTRY_PASSWORD",
];

/// A value shorter than this is not searched for: a credential that short is no
/// credential, and scrubbing it would deface every report.
const MIN_SECRET_BYTES: usize = 8;

/// Files larger than this are not read whole; their size is reported instead.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// One file that held a form of a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The file, now scrubbed.
    pub path: PathBuf,
    /// The forms it held, such as `E2B_API_KEY (base64)`.
    pub forms: Vec<String>,
}

impl std::fmt::Display for Hit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} held {} (scrubbed)",
            self.path.display(),
            self.forms.join(", ")
        )
    }
}

/// The credentials named by [`CREDENTIAL_VARS`] that are set, as secrets named for their
/// variable.
pub fn environment_credentials() -> Vec<Secret> {
    CREDENTIAL_VARS
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .map(|value| Secret::new(*name, value))
        })
        .collect()
}

/// Replaces every form of every secret in `text` by `<redacted:NAME>` (NAME the secret's,
/// never the form's value); returns the names of the forms found. Base64 forms are also
/// found across line breaks, and the whole wrapped span is replaced.
pub fn scrub(text: &str, secrets: &[Secret]) -> (String, Vec<String>) {
    let mut text = text.to_owned();
    let mut found = Vec::new();
    for secret in secrets
        .iter()
        .filter(|s| s.expose().len() >= MIN_SECRET_BYTES)
    {
        let placeholder = format!("<redacted:{}>", secret.name());
        for form in secrets::forms(secret) {
            let wrapped = form.name().ends_with(" (base64)");
            let (scrubbed, hits) = replace(&text, form.expose(), &placeholder, wrapped);
            if hits > 0 {
                text = scrubbed;
                if !found.iter().any(|f| f == form.name()) {
                    found.push(form.name().to_owned());
                }
            }
        }
    }
    (text, found)
}

/// Replaces each occurrence of `needle` in `text` by `placeholder`; with `across_breaks`,
/// an occurrence may be cut by `\r` and `\n`, which are dropped with it. Returns the text
/// and how many were replaced.
fn replace(text: &str, needle: &str, placeholder: &str, across_breaks: bool) -> (String, usize) {
    if needle.is_empty() {
        return (text.to_owned(), 0);
    }
    if !across_breaks {
        let hits = text.matches(needle).count();
        return (text.replace(needle, placeholder), hits);
    }
    // The byte offsets of every character but line breaks, and the text without them.
    let kept: Vec<usize> = text
        .char_indices()
        .filter(|(_, c)| !matches!(c, '\r' | '\n'))
        .map(|(i, _)| i)
        .collect();
    let unwrapped: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    let offsets: Vec<usize> = unwrapped.char_indices().map(|(i, _)| i).collect();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    let mut hits = 0;
    for (start, _) in unwrapped.match_indices(needle) {
        // Character positions in `unwrapped` of the match's first and last characters.
        let first = offsets.partition_point(|&o| o < start);
        let last = offsets.partition_point(|&o| o < start + needle.len()) - 1;
        let (begin, end_char) = (kept[first], kept[last]);
        let end = end_char + text[end_char..].chars().next().map_or(0, char::len_utf8);
        if begin < from {
            continue;
        }
        out.push_str(&text[from..begin]);
        out.push_str(placeholder);
        from = end;
        hits += 1;
    }
    out.push_str(&text[from..]);
    (out, hits)
}

/// Scans every regular file under `roots` (symlinks are not followed, so the run folder's
/// `latest` link and anything outside are left alone) for `secrets`, scrubs each file that
/// holds one, and returns the hits. A file that cannot be read or written is a hit too,
/// with the reason in place of a form, so that nothing unchecked passes as clean.
pub fn scan(roots: &[&Path], secrets: &[Secret]) -> Vec<Hit> {
    let mut hits = Vec::new();
    if secrets.iter().all(|s| s.expose().len() < MIN_SECRET_BYTES) {
        return hits;
    }
    let mut pending: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            match std::fs::read_dir(&path) {
                Ok(entries) => pending.extend(entries.filter_map(|e| e.ok()).map(|e| e.path())),
                Err(e) => hits.push(Hit {
                    path,
                    forms: vec![format!("unreadable folder: {e}")],
                }),
            }
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE_BYTES {
            hits.push(Hit {
                path,
                forms: vec![format!("not scanned: {} bytes", meta.len())],
            });
            continue;
        }
        if let Some(hit) = scan_file(&path, secrets) {
            hits.push(hit);
        }
    }
    hits.sort_by(|a, b| a.path.cmp(&b.path));
    hits
}

fn scan_file(path: &Path, secrets: &[Secret]) -> Option<Hit> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Some(Hit {
                path: path.to_path_buf(),
                forms: vec![format!("unreadable: {e}")],
            });
        }
    };
    // Reports, ledgers, logs and cassettes are text; a byte that is not UTF-8 is kept as
    // is by scrubbing the lossy text only where a form was found.
    let text = String::from_utf8_lossy(&bytes);
    let (scrubbed, forms) = scrub(&text, secrets);
    if forms.is_empty() {
        return None;
    }
    let forms = match std::fs::write(path, scrubbed) {
        Ok(()) => forms,
        Err(e) => vec![format!("{} (could not scrub: {e})", forms.join(", "))],
    };
    Some(Hit {
        path: path.to_path_buf(),
        forms,
    })
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;

    use super::*;

    /// A fake credential for these tests, shaped like no real key.
    fn fake() -> Secret {
        Secret::new("E2B_API_KEY", "sm-fake-e2b-key-0123456789")
    }

    #[test]
    fn every_form_is_scrubbed_and_named_never_the_value() {
        let value = fake().expose().to_owned();
        let b64 = BASE64.encode(format!("user:{value}"));
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let text = format!("raw {value}\nauth {b64}\nhex {hex}\nurl sm%2Dfake\n");
        let (scrubbed, forms) = scrub(&text, &[fake()]);
        assert!(!scrubbed.contains(&value), "{scrubbed}");
        assert!(!scrubbed.contains(&hex), "{scrubbed}");
        assert!(
            !secrets::forms(&fake())
                .iter()
                .any(|f| scrubbed.contains(f.expose()))
        );
        assert!(
            scrubbed.contains("raw <redacted:E2B_API_KEY>"),
            "{scrubbed}"
        );
        assert!(forms.contains(&"E2B_API_KEY".to_owned()), "{forms:?}");
        assert!(
            forms.contains(&"E2B_API_KEY (base64)".to_owned()),
            "{forms:?}"
        );
        assert!(forms.contains(&"E2B_API_KEY (hex)".to_owned()), "{forms:?}");
        assert!(forms.iter().all(|f| !f.contains(&value)));
    }

    #[test]
    fn base64_wrapped_across_lines_is_found_and_the_whole_span_scrubbed() {
        let encoded = BASE64.encode(format!("xx{}", fake().expose()));
        let (head, tail) = encoded.split_at(12);
        let text = format!("before\n{head}\n{tail}\nafter\n");
        let (scrubbed, forms) = scrub(&text, &[fake()]);
        assert_eq!(forms, ["E2B_API_KEY (base64)"]);
        assert!(scrubbed.starts_with("before\n") && scrubbed.ends_with("\nafter\n"));
        let unwrapped = scrubbed.replace('\n', "");
        assert!(
            !secrets::forms(&fake())
                .iter()
                .any(|f| unwrapped.contains(f.expose())),
            "{scrubbed}"
        );
    }

    #[test]
    fn clean_text_and_short_values_are_left_alone() {
        let text = "nothing to see: sm-fake-e2b-key-01234 is a near miss\n";
        assert_eq!(scrub(text, &[fake()]), (text.to_owned(), Vec::new()));
        let short = Secret::new("E2B_API_KEY", "abc");
        assert_eq!(scrub("abc abc", &[short]).1, Vec::<String>::new());
    }

    #[test]
    fn scan_scrubs_files_in_place_and_skips_symlinks() {
        let dir = std::env::temp_dir().join(format!("sm-self-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let run = dir.join("run");
        std::fs::create_dir_all(run.join("logs")).unwrap();
        std::fs::write(run.join("results.json"), "{\"ok\": true}\n").unwrap();
        let log = run.join("logs/build.log");
        std::fs::write(&log, format!("token={}\n", fake().expose())).unwrap();
        let outside = dir.join("outside.txt");
        std::fs::write(&outside, fake().expose()).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&outside, run.join("latest")).unwrap();
        let hits = scan(&[&run], &[fake()]);
        assert_eq!(
            hits,
            [Hit {
                path: log.clone(),
                forms: vec!["E2B_API_KEY".into()]
            }]
        );
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "token=<redacted:E2B_API_KEY>\n"
        );
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            fake().expose(),
            "a symlink's target is not the run's file"
        );
        assert!(
            scan(&[&run], &[fake()]).is_empty(),
            "scrubbed files are clean"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
