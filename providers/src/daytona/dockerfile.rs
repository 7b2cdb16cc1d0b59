//! The Dockerfile a snapshot build is sent: the environment's own, with each `COPY` of a
//! small text file from the build context inlined as a heredoc.
//!
//! Daytona takes a build context as objects uploaded to its object storage and named by
//! hash in `buildInfo.contextHashes`; this client does not upload, so the context has to
//! travel inside the Dockerfile. Anything it cannot inline is refused with a reason.

use std::path::Path;

use sandbox_contract::dockerfile::parse::parse;

use crate::{ErrorKind, ProviderError, Result};

/// Largest context file inlined into the Dockerfile.
const MAX_INLINE_BYTES: usize = 64 * 1024;

/// Reads `dir/Dockerfile` and returns it with every context `COPY` inlined; every other
/// line stays as written.
pub fn inline_context(dir: &Path) -> Result<String> {
    let path = dir.join("Dockerfile");
    let text = crate::read_dockerfile(dir)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len());
    // Lines before this index are in `out` or replaced.
    let mut copied = 0;
    let mut inlined = 0usize;
    for instruction in parse(&text) {
        let is_copy = matches!(instruction.keyword.as_str(), "COPY" | "ADD");
        let from_stage = instruction.flags.iter().any(|f| f.name == "from");
        if !is_copy || from_stage || !instruction.heredocs.is_empty() {
            continue;
        }
        let refuse = |why: &str| {
            ProviderError::new(
                ErrorKind::Config,
                format!("{}:{}: {why}", path.display(), instruction.line),
            )
            .context("inlining the build context")
        };
        if instruction.keyword == "ADD" {
            return Err(refuse("ADD cannot be inlined; use COPY"));
        }
        let (source, dest) = match instruction.args.words() {
            [source, dest] if !dest.contains(char::is_whitespace) => (source, dest),
            _ => return Err(refuse("only `COPY <file> <destination>` can be inlined")),
        };
        let content = read_context_file(dir, source).map_err(|why| refuse(&why))?;
        let dest = if dest.ends_with('/') {
            let name = Path::new(source)
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| refuse("the source has no file name"))?;
            format!("{dest}{name}")
        } else {
            dest.clone()
        };
        let delimiter = format!("SANDBOX_MATRIX_CONTEXT_{inlined}");
        if content.lines().any(|l| l == delimiter) {
            return Err(refuse("the file contains the heredoc delimiter"));
        }
        inlined += 1;
        let start = (instruction.line - 1).min(lines.len());
        for line in &lines[copied.min(start)..start] {
            out.push_str(line);
            out.push('\n');
        }
        copied = instruction.last_line;
        let mut copy = vec!["COPY".to_owned()];
        copy.extend(instruction.flags.iter().map(|f| f.raw.clone()));
        copy.push(format!("<<'{delimiter}'"));
        copy.push(dest);
        out.push_str(&copy.join(" "));
        out.push('\n');
        out.push_str(&content);
        out.push_str(&delimiter);
        out.push('\n');
    }
    for line in lines.iter().skip(copied) {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// The registry host the Dockerfile's first base image is pulled from, if it names one.
pub fn base_registry(dockerfile: &str) -> Option<String> {
    let from = parse(dockerfile)
        .into_iter()
        .find(|instruction| instruction.keyword == "FROM")?;
    let (host, _) = from.args.words().first()?.split_once('/')?;
    (host.contains(['.', ':']) || host == "localhost").then(|| host.to_owned())
}

/// Reads one context file, refusing what a heredoc cannot carry unchanged.
fn read_context_file(dir: &Path, source: &str) -> Result<String, String> {
    if source.contains(['*', '?', '[']) {
        return Err(format!("`{source}` is a pattern; name one file"));
    }
    let path = crate::context::resolve(dir, source)?;
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() > MAX_INLINE_BYTES {
        return Err(format!(
            "{} is {} bytes, over the {MAX_INLINE_BYTES} bytes inlined; context upload is not implemented",
            path.display(),
            bytes.len()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not UTF-8 text and cannot be inlined", path.display()))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(format!(
            "{} does not end with a newline; a heredoc would add one",
            path.display()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(dockerfile: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sm-daytona-df-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn copies_of_context_files_become_heredocs() {
        let dir = env(
            "FROM base:v1\nCOPY --chmod=644 a.json /etc/a.json\nCOPY b.txt /opt/\nRUN true\n",
            &[("a.json", "{\"x\": 1}\n"), ("b.txt", "hello\n")],
        );
        let out = inline_context(&dir).unwrap();
        assert_eq!(
            out,
            "FROM base:v1\n\
             COPY --chmod=644 <<'SANDBOX_MATRIX_CONTEXT_0' /etc/a.json\n{\"x\": 1}\nSANDBOX_MATRIX_CONTEXT_0\n\
             COPY <<'SANDBOX_MATRIX_CONTEXT_1' /opt/b.txt\nhello\nSANDBOX_MATRIX_CONTEXT_1\n\
             RUN true\n"
        );
    }

    #[test]
    fn what_cannot_be_inlined_is_refused_with_the_line() {
        let dir = env("FROM x\nCOPY . /app\n", &[]);
        let e = inline_context(&dir).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.message.contains("Dockerfile:2"), "{e}");
        let dir = env("FROM x\nCOPY a b c/\n", &[]);
        assert!(inline_context(&dir).is_err());
        let dir = env("FROM x\nCOPY ../secret /x\n", &[]);
        assert!(inline_context(&dir).unwrap_err().message.contains("leaves"));
        let dir = env("FROM x\nCOPY n /x\n", &[("n", "no newline")]);
        assert!(
            inline_context(&dir)
                .unwrap_err()
                .message
                .contains("newline")
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_of_the_environment_is_refused_with_the_copy_line() {
        // A fake secret outside the environment folder: not a real credential.
        let outside = env("FROM x\n", &[("secret", "sm-fake-daytona-secret\n")]);
        let dir = env(
            "FROM x\nCOPY inside.txt /a\nCOPY leak.txt /b\n",
            &[("real.txt", "ok\n")],
        );
        std::os::unix::fs::symlink("real.txt", dir.join("inside.txt")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("leak.txt")).unwrap();
        let e = inline_context(&dir).unwrap_err();
        assert!(
            e.message.contains("Dockerfile:3:") && e.message.contains("outside the environment"),
            "{e}"
        );
        assert!(!e.to_string().contains("sm-fake-daytona-secret"), "{e}");
        std::fs::remove_file(dir.join("leak.txt")).unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM x\nCOPY inside.txt /a\n").unwrap();
        assert!(inline_context(&dir).unwrap().contains("ok\n"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn the_base_registry_is_the_first_from_host() {
        assert_eq!(
            base_registry("# c\nFROM --platform=linux/amd64 registry.example:5000/a/b:1 AS x\n"),
            Some("registry.example:5000".to_owned())
        );
        assert_eq!(
            base_registry("FROM sandbox-matrix/contract-base:v1\n"),
            None
        );
        assert_eq!(base_registry("RUN x\n"), None);
        assert_eq!(
            base_registry("RUN <<EOF\nFROM a.io/b\nEOF\nFROM \\\n  localhost/b\n"),
            Some("localhost".to_owned())
        );
    }

    #[test]
    fn copies_between_stages_stay() {
        let dir = env("FROM x AS a\nFROM y\nCOPY --from=a /o /o\n", &[]);
        assert_eq!(
            inline_context(&dir).unwrap(),
            "FROM x AS a\nFROM y\nCOPY --from=a /o /o\n"
        );
    }

    #[test]
    fn instructions_are_read_whole() {
        // A COPY over continuation lines is replaced whole; a heredoc body that looks like
        // a COPY, and a COPY's own heredoc, stay as written.
        let dockerfile = "FROM base:v1\n\
                          COPY \\\n  # the file\n  a.json \\\n  /etc/a.json\n\
                          RUN <<EOF\nCOPY missing /x\nEOF\n\
                          COPY <<EOF /etc/b\nb\nEOF\n";
        let dir = env(dockerfile, &[("a.json", "{}\n")]);
        assert_eq!(
            inline_context(&dir).unwrap(),
            "FROM base:v1\n\
             COPY <<'SANDBOX_MATRIX_CONTEXT_0' /etc/a.json\n{}\nSANDBOX_MATRIX_CONTEXT_0\n\
             RUN <<EOF\nCOPY missing /x\nEOF\n\
             COPY <<EOF /etc/b\nb\nEOF\n"
        );
        let dir = env(
            "FROM x\nRUN true\nCOPY a.json \\\n  \"/a b\"\n",
            &[("a.json", "{}\n")],
        );
        let e = inline_context(&dir).unwrap_err();
        assert!(e.message.contains("Dockerfile:3: only `COPY"), "{e}");
    }

    /// The Dockerfile recorded in the daytona lifecycle cassette, which replay checks body
    /// for body: the reference environment's inlined Dockerfile must stay exactly that.
    #[test]
    fn the_reference_dockerfile_is_the_recorded_one() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        // As the build sends it: the base argument resolved to the local base.
        let inlined = sandbox_contract::dockerfile::resolve_base_arg(
            &inline_context(&fixtures.join("environments/reference")).unwrap(),
            crate::BASE_ARG,
            crate::docker::base::BASE_IMAGE,
        );
        let text =
            std::fs::read_to_string(fixtures.join("cassettes/daytona/lifecycle.yaml")).unwrap();
        let cassette: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let recorded = cassette["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|exchange| &exchange["request"])
            .find(|r| r["method"] == "POST" && r["path"] == "/snapshots")
            .unwrap();
        assert_eq!(
            recorded["body"]["json"]["buildInfo"]["dockerfileContent"],
            inlined.as_str()
        );
    }
}
