//! The Dockerfile linter: reads a Dockerfile the way BuildKit's parser does (through
//! [`sandbox_contract::dockerfile::parse`], which says what that covers) and reports every
//! instruction sandbox-contract/v1 refuses ([`Refusal`]), by file and line, before any build.
//!
//! What is refused, beyond the instructions `VOLUME`, `ONBUILD` and `STOPSIGNAL`:
//! - `FROM`: a base that is neither in [`dockerfile::APPROVED_BASES`] nor an earlier stage of
//!   the file (stage names compare case-insensitively); any `$` in the base but one: exactly
//!   `$BASE_IMAGE` or `${BASE_IMAGE}` ([`BASE_ARG`]) when `ARG BASE_IMAGE=<default>` is
//!   declared before the first `FROM` and its default is an approved base (the run resolves
//!   the argument and checks what it resolves to against the approved digests, see
//!   [`crate::checks::approved`]); a `--platform` other than [`dockerfile::PLATFORM`], or
//!   with a `$` (it cannot be checked).
//! - `RUN`: `--network=host`, `--security=insecure`, `--privileged` anywhere in the
//!   instruction or its heredoc bodies; a `$` in the network or security value.
//! - `RUN --mount`: a source or target naming `docker.sock`, whatever the mount type; and a
//!   host bind mount, as follows.
//!
//! Host bind mounts. In BuildKit a `type=bind` mount (the default type) without `from=`
//! binds from the build context, and its `source` is resolved inside the context: BuildKit
//! itself cannot bind a host path. But the context is handed over differently by each
//! provider's builder, and a `source` that is absolute (`source=/etc`), climbs out with `..`,
//! or holds a variable says the author means a path outside the context. A builder that
//! resolved it as written would expose the build host, and one that scopes it would bind
//! something other than what the author expects. So a bind mount with no `from=` (or an
//! empty one) is refused when its `source` is absolute, leaves the context through `..`, or
//! contains `$`; a relative source inside the context, or no source (the context root), is
//! allowed. With `from=` (a stage or an image) the source is a path inside that filesystem
//! and is allowed. Other mount types (`cache`, `tmpfs`, `secret`, `ssh`) bind nothing from
//! the host. A mount of `docker.sock` is reported as `docker-socket` only.

use std::fmt;
use std::path::{Path, PathBuf};

use sandbox_contract::dockerfile::parse::{Instruction, parse};
use sandbox_contract::dockerfile::{self, Refusal};
use sandbox_providers::BASE_ARG;

/// Longest instruction excerpt a rendered finding shows, in characters.
const EXCERPT_CHARS: usize = 80;

/// One refused instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The Dockerfile.
    pub path: PathBuf,
    /// 1-based line where the instruction starts.
    pub line: usize,
    /// What is refused.
    pub refusal: Refusal,
    /// The instruction with its continuations joined and whitespace collapsed, without
    /// heredoc bodies.
    pub instruction: String,
}

impl fmt::Display for Finding {
    /// `path:line: <refusal id>: <reason> (<instruction excerpt>)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {} (",
            self.path.display(),
            self.line,
            self.refusal.id(),
            self.refusal.reason()
        )?;
        let mut chars = self.instruction.chars();
        let excerpt: String = chars.by_ref().take(EXCERPT_CHARS).collect();
        f.write_str(&excerpt)?;
        if chars.next().is_some() {
            f.write_str("…")?;
        }
        f.write_str(")")
    }
}

/// Why a Dockerfile could not be linted.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The file could not be read.
    #[error("cannot read Dockerfile {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a Dockerfile at all: empty, binary, or without a `FROM`.
    #[error("{}: {why}", path.display())]
    NotADockerfile {
        /// The file, with `:line:column` where there is one.
        path: PathBuf,
        /// Why, for a person.
        why: String,
    },
}

/// Lints the Dockerfile at `path`. A file that is empty (or only comments), binary (a NUL
/// byte), or has no `FROM` is refused: nothing in it could be checked. Other bytes that are
/// not UTF-8 are read as U+FFFD.
pub fn lint_file(path: &Path) -> Result<Vec<Finding>, LintError> {
    let bytes = std::fs::read(path).map_err(|source| LintError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let refuse = |at: String, why: &str| LintError::NotADockerfile {
        path: PathBuf::from(format!("{}{at}", path.display())),
        why: why.to_owned(),
    };
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        let before = &bytes[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = at
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        return Err(refuse(
            format!(":{line}:{column}"),
            "a binary file (a NUL byte), not a Dockerfile",
        ));
    }
    let text = String::from_utf8_lossy(&bytes);
    let instructions = parse(&text);
    if instructions.is_empty() {
        return Err(refuse(
            String::new(),
            "empty: no instruction to check; a Dockerfile starts with `FROM <base>`",
        ));
    }
    if !instructions.iter().any(|i| i.keyword == "FROM") {
        return Err(refuse(
            format!(":{}", instructions[0].line),
            "no `FROM` instruction; a Dockerfile builds from a base, `FROM <base>`",
        ));
    }
    Ok(lint_str(path, &text))
}

/// Lints Dockerfile `text`, naming `path` in the findings. Findings come in file order, at
/// most one per refusal and instruction.
pub fn lint_str(path: &Path, text: &str) -> Vec<Finding> {
    let mut scope = Scope::default();
    let mut findings = Vec::new();
    for instruction in &parse(text) {
        for refusal in check(instruction, &mut scope) {
            findings.push(Finding {
                path: path.to_path_buf(),
                line: instruction.line,
                refusal,
                instruction: instruction
                    .text
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            });
        }
    }
    findings
}

/// What the instructions read so far declared.
#[derive(Default)]
struct Scope {
    /// The lowercased stage names declared so far; a `FROM ... AS name` adds one.
    stages: Vec<String>,
    /// The default of [`BASE_ARG`] as the `ARG`s before the first `FROM` left it: `None`
    /// when undeclared, `Some(None)` when declared without a default.
    base_arg: Option<Option<String>>,
    /// Whether a `FROM` was read: an `ARG` after it cannot name a base.
    seen_from: bool,
}

/// The refusals of one instruction, each once, in the order found.
fn check(instruction: &Instruction, scope: &mut Scope) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    match instruction.keyword.as_str() {
        "VOLUME" => refusals.push(Refusal::Volume),
        "ONBUILD" => refusals.push(Refusal::Onbuild),
        "STOPSIGNAL" => refusals.push(Refusal::Stopsignal),
        "ARG" if !scope.seen_from => {
            for word in instruction.args.words() {
                let (name, default) = match word.split_once('=') {
                    Some((name, default)) => (name, Some(default.to_owned())),
                    None => (word.as_str(), None),
                };
                if name == BASE_ARG {
                    scope.base_arg = Some(default);
                }
            }
        }
        "FROM" => {
            check_from(instruction, scope, &mut refusals);
            scope.seen_from = true;
        }
        "RUN" => check_run(instruction, &mut refusals),
        _ => {}
    }
    let mut unique = Vec::new();
    for refusal in refusals {
        if !unique.contains(&refusal) {
            unique.push(refusal);
        }
    }
    unique
}

/// `FROM [--platform=P] base [AS name]`.
fn check_from(instruction: &Instruction, scope: &mut Scope, refusals: &mut Vec<Refusal>) {
    let stages = &mut scope.stages;
    for flag in &instruction.flags {
        if flag.name == "platform"
            && (flag.value.contains('$') || !flag.value.eq_ignore_ascii_case(dockerfile::PLATFORM))
        {
            refusals.push(Refusal::Platform);
        }
    }
    let words = instruction.args.words();
    match words.first() {
        Some(base) if *base == format!("${BASE_ARG}") || *base == format!("${{{BASE_ARG}}}") => {
            match &scope.base_arg {
                Some(Some(default)) if dockerfile::is_approved_base(default) => {}
                Some(Some(_)) => refusals.push(Refusal::UnapprovedBase),
                Some(None) | None => refusals.push(Refusal::BaseFromBuildArg),
            }
        }
        Some(base) if base.contains('$') => refusals.push(Refusal::BaseFromBuildArg),
        Some(base) => {
            if !stages.contains(&base.to_lowercase()) && !dockerfile::is_approved_base(base) {
                refusals.push(Refusal::UnapprovedBase);
            }
        }
        None => refusals.push(Refusal::UnapprovedBase),
    }
    if let [_, keyword, name, ..] = words
        && keyword.eq_ignore_ascii_case("as")
    {
        stages.push(name.to_lowercase());
    }
}

/// `RUN [--network=N] [--security=S] [--mount=M]... command`.
fn check_run(instruction: &Instruction, refusals: &mut Vec<Refusal>) {
    for flag in &instruction.flags {
        let value = &flag.value;
        let unknown = value.contains('$');
        match flag.name.as_str() {
            "network" if unknown || value.eq_ignore_ascii_case("host") => {
                refusals.push(Refusal::NetworkHost);
            }
            "security" if unknown || value.eq_ignore_ascii_case("insecure") => {
                refusals.push(Refusal::Privileged);
            }
            "mount" => refusals.extend(mount_refusal(value)),
            _ => {}
        }
    }
    if mentions_privileged(&instruction.text)
        || instruction
            .heredocs
            .iter()
            .any(|heredoc| mentions_privileged(&heredoc.body))
    {
        refusals.push(Refusal::Privileged);
    }
}

/// What a `--mount` value is refused for, if anything (see the module's notes).
fn mount_refusal(spec: &str) -> Option<Refusal> {
    let mut kind = "bind".to_string();
    let mut from = String::new();
    let mut source = None;
    let mut target = None;
    for field in csv_fields(spec) {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key.to_ascii_lowercase().as_str() {
            "type" => kind = value.to_ascii_lowercase(),
            "from" => from = value.to_string(),
            "source" | "src" => source = Some(value.to_string()),
            "target" | "dst" | "destination" => target = Some(value.to_string()),
            _ => {}
        }
    }
    if [&source, &target]
        .into_iter()
        .flatten()
        .any(|path| path.to_ascii_lowercase().contains("docker.sock"))
    {
        return Some(Refusal::DockerSocket);
    }
    let binds = kind == "bind" || kind.contains('$');
    (binds && from.is_empty() && source.is_some_and(|source| outside_context(&source)))
        .then_some(Refusal::HostBindMount)
}

/// Whether a bind source without `from=` means a path outside the build context.
fn outside_context(source: &str) -> bool {
    if source.starts_with('/') || source.contains('$') {
        return true;
    }
    let mut depth = 0usize;
    for component in source.split('/') {
        match component {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// Comma-separated fields as Go's `encoding/csv` reads one record: a field opening with `"`
/// is quoted, `""` inside it is a quote.
fn csv_fields(spec: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut at_start = true;
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            if c != '"' {
                field.push(c);
            } else if chars.next_if_eq(&'"').is_some() {
                field.push('"');
            } else {
                quoted = false;
            }
        } else if c == ',' {
            fields.push(std::mem::take(&mut field));
            at_start = true;
            continue;
        } else if c == '"' && at_start {
            quoted = true;
        } else {
            field.push(c);
        }
        at_start = false;
    }
    fields.push(field);
    fields
}

/// Whether `text` holds the word `--privileged` (any case, optionally `=value`).
fn mentions_privileged(text: &str) -> bool {
    const WORD: &str = "--privileged";
    let text = text.to_ascii_lowercase();
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(WORD).any(|(at, _)| {
        !text[..at].ends_with(is_word_char) && !text[at + WORD.len()..].starts_with(is_word_char)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nine lines: directives, comments, a FROM spread over continuations with a comment
    /// and a blank line inside, and a two-line RUN. What a test appends starts at line 10.
    const PRELUDE: &str = "\
# syntax=docker/dockerfile:1
# A base named over continuation lines.
FROM \\
    # a comment inside the continuation
    sandbox-matrix/contract-base:v1 \\

    AS base
RUN echo one \\
    && echo two
";

    fn found(text: &str) -> Vec<(usize, &'static str)> {
        lint_str(Path::new("Dockerfile"), text)
            .iter()
            .map(|finding| (finding.line, finding.refusal.id()))
            .collect()
    }

    fn after_prelude(text: &str) -> Vec<(usize, &'static str)> {
        found(&format!("{PRELUDE}{text}"))
    }

    fn after_prelude_findings(text: &str) -> Vec<Finding> {
        lint_str(Path::new("Dockerfile"), &format!("{PRELUDE}{text}"))
    }

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
    }

    #[test]
    fn prelude_alone_is_clean() {
        assert_eq!(found(PRELUDE), []);
    }

    #[test]
    fn volume() {
        assert_eq!(after_prelude("VOLUME [\"/data\"]\n"), [(10, "volume")]);
    }

    #[test]
    fn onbuild() {
        // Only ONBUILD is reported; the heredoc of its RUN is read as a body.
        assert_eq!(
            after_prelude("ONBUILD RUN --network=host <<EOF\nVOLUME /x\nEOF\nSTOPSIGNAL 9\n"),
            [(10, "onbuild"), (13, "stopsignal")]
        );
    }

    #[test]
    fn stopsignal() {
        assert_eq!(
            after_prelude("STOPSIGNAL \\\n    SIGINT\n"),
            [(10, "stopsignal")]
        );
    }

    #[test]
    fn unapproved_base() {
        let text = "\
FROM debian:trixie AS other
FROM scratch
FROM base
FROM OTHER
FROM later
FROM sandbox-matrix/contract-base:v1 AS later
FROM \"sandbox-matrix/contract-base:v1\"
FROM sandbox-matrix/contract-rootfs:trixie
";
        assert_eq!(
            after_prelude(text),
            [
                (10, "unapproved-base"),
                (11, "unapproved-base"),
                (14, "unapproved-base"),
                (17, "unapproved-base"),
            ]
        );
    }

    #[test]
    fn base_from_build_arg() {
        let text = "\
# syntax=docker/dockerfile:1
ARG BASE=sandbox-matrix/contract-base:v1 \\
    # the default is approved, but the argument can name anything
    TAG=v1
FROM $BASE
FROM ${BASE} AS b
FROM sandbox-matrix/contract-base:${TAG}
";
        assert_eq!(
            found(text),
            [
                (5, "base-from-build-arg"),
                (6, "base-from-build-arg"),
                (7, "base-from-build-arg"),
            ]
        );
    }

    #[test]
    fn the_base_argument_with_an_approved_default_is_accepted() {
        let accepted = "\
# syntax=docker/dockerfile:1
ARG OTHER=1 BASE_IMAGE=sandbox-matrix/contract-base:v1
FROM ${BASE_IMAGE} AS one
FROM $BASE_IMAGE
FROM one
";
        assert_eq!(found(accepted), []);
        let text = "\
ARG BASE_IMAGE=debian:trixie
FROM $BASE_IMAGE
ARG BASE_IMAGE=sandbox-matrix/contract-base:v1
FROM ${BASE_IMAGE}
";
        // The default is unapproved; an ARG after the first FROM names no base.
        assert_eq!(
            found(text),
            [(2, "unapproved-base"), (4, "unapproved-base")]
        );
        let text = "\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
FROM ${BASE_IMAGE:-sandbox-matrix/contract-base:v1}
FROM $BASE_IMAGE_2
FROM ${base_image}
";
        assert_eq!(
            found(text),
            [
                (2, "base-from-build-arg"),
                (3, "base-from-build-arg"),
                (4, "base-from-build-arg"),
                (5, "base-from-build-arg"),
            ]
        );
        // Declared only after the first FROM: not a global argument.
        let late = "FROM sandbox-matrix/contract-base:v1\nARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM $BASE_IMAGE\n";
        assert_eq!(found(late), [(3, "base-from-build-arg")]);
    }

    #[test]
    fn platform() {
        let text = "\
FROM --platform=linux/amd64 base
FROM --platform=linux/arm64 sandbox-matrix/contract-base:v1
FROM --platform=$BUILDPLATFORM base
FROM --platform linux/arm64 base
FROM --platform=\"linux/amd64\" base
";
        assert_eq!(
            after_prelude(text),
            [(11, "platform"), (12, "platform"), (13, "platform")]
        );
    }

    #[test]
    fn privileged() {
        let text = "\
RUN --security=insecure make
RUN docker run --privileged img
RUN [\"docker\", \"run\", \"--privileged\", \"img\"]
RUN <<EOF
docker run --privileged=true img
EOF
RUN echo --privileged-mode
RUN --security=sandbox true
";
        assert_eq!(
            after_prelude(text),
            [
                (10, "privileged"),
                (11, "privileged"),
                (12, "privileged"),
                (13, "privileged"),
            ]
        );
    }

    #[test]
    fn network_host() {
        let text = "\
RUN --mount=type=cache,target=/root/.cache \\
    # the flag on a continuation line
    --network=host \\
    make
RUN --network=none make
RUN --network=default make
Run --Network=HOST make
";
        assert_eq!(
            after_prelude(text),
            [(10, "network-host"), (16, "network-host")]
        );
    }

    #[test]
    fn docker_socket() {
        let text = "\
RUN --mount=type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock docker ps
RUN --mount=type=cache,target=/run/docker.sock true
RUN --mount=\"type=bind,src=/run/docker.sock,dst=/sock\" true
VOLUME /var/run/docker.sock
";
        assert_eq!(
            after_prelude(text),
            [
                (10, "docker-socket"),
                (11, "docker-socket"),
                (12, "docker-socket"),
                (13, "volume"),
            ]
        );
    }

    #[test]
    fn host_bind_mount() {
        let text = "\
RUN --mount=type=bind,source=/etc,target=/mnt cat /mnt/hostname
RUN --mount=source=../..,target=/mnt ls /mnt
RUN --mount='\"source=/home\",target=/mnt' ls
RUN --mount=type=bind,source=$HOST_DIR,target=/mnt ls
RUN --mount=type=bind,source=src/../data,target=/mnt ls
RUN --mount=type=bind,target=/mnt ls
RUN --mount=type=bind,from=base,source=/etc,target=/mnt ls
RUN --mount=type=cache,source=/cache,target=/mnt ls
RUN --mount=type=bind,source=/etc,target=/a --mount=type=bind,source=/usr,target=/b ls
";
        assert_eq!(
            after_prelude(text),
            [
                (10, "host-bind-mount"),
                (11, "host-bind-mount"),
                (12, "host-bind-mount"),
                (13, "host-bind-mount"),
                (18, "host-bind-mount"),
            ]
        );
    }

    #[test]
    fn instruction_names_are_case_insensitive() {
        assert_eq!(
            after_prelude("volume /data\nOnBuild RUN true\nstopSignal 9\nfrom debian\n"),
            [
                (10, "volume"),
                (11, "onbuild"),
                (12, "stopsignal"),
                (13, "unapproved-base"),
            ]
        );
    }

    #[test]
    fn heredoc_bodies_are_not_instructions() {
        let text = "\
RUN <<EOF
VOLUME /in-heredoc
EOF
RUN cat <<-'ONE' > /a && cat <<TWO > /b
\tSTOPSIGNAL SIGINT
\tONE
ONBUILD RUN x
TWO
COPY <<\"FILE\" /etc/x
FROM debian
FILE
VOLUME /after
";
        assert_eq!(after_prelude(text), [(21, "volume")]);
    }

    #[test]
    fn json_forms_and_quoted_markers_open_no_heredoc() {
        let text = "\
RUN [\"sh\", \"-c\", \"cat <<EOF\"]
VOLUME /x
RUN echo \"<<EOF\"
VOLUME /y
";
        assert_eq!(after_prelude(text), [(11, "volume"), (13, "volume")]);
    }

    #[test]
    fn unterminated_heredoc_swallows_the_rest() {
        assert_eq!(after_prelude("RUN <<EOF\nVOLUME /x\n"), []);
    }

    #[test]
    fn backtick_escape_directive() {
        let body = "\
FROM sandbox-matrix/contract-base:v1
COPY . C:\\app\\
VOLUME C:\\data
RUN echo a `
    # a comment inside the continuation
    --privileged
STOPSIGNAL `
  SIGTERM
";
        assert_eq!(
            found(&format!("# escape=`\n{body}")),
            [(4, "volume"), (5, "privileged"), (8, "stopsignal")]
        );
        assert_eq!(
            found(&format!("#  ESCAPE = `\n{body}")),
            [(4, "volume"), (5, "privileged"), (8, "stopsignal")]
        );
        // With the default backslash the COPY continues onto the VOLUME line, and the
        // backtick continues nothing.
        assert_eq!(found(&format!("# a comment\n{body}")), [(8, "stopsignal")]);
        // A directive after a comment is a comment.
        assert_eq!(
            found(&format!("# a comment\n# escape=`\n{body}")),
            [(9, "stopsignal")]
        );
    }

    #[test]
    fn crlf_and_byte_order_mark() {
        let text =
            "\u{feff}FROM sandbox-matrix/contract-base:v1\r\nRUN echo \\\r\n  hi\r\nVOLUME /x\r\n";
        assert_eq!(found(text), [(4, "volume")]);
    }

    #[test]
    fn one_finding_per_refusal_and_instruction() {
        assert_eq!(
            after_prelude(
                "RUN --network=host --security=insecure --privileged docker run --privileged x\n"
            ),
            [(10, "network-host"), (10, "privileged")]
        );
    }

    #[test]
    fn display_names_file_line_id_reason_and_excerpt() {
        let findings = lint_str(
            Path::new("env/Dockerfile"),
            "FROM sandbox-matrix/contract-base:v1\nVOLUME   /data \\\n   /more\n",
        );
        assert_eq!(
            findings[0].to_string(),
            "env/Dockerfile:2: volume: Modal's image builder does not implement VOLUME. (VOLUME /data /more)"
        );
        let long = format!("VOLUME /{}\n", "d".repeat(200));
        let rendered = after_prelude_findings(&long)[0].to_string();
        assert!(
            rendered.ends_with(&format!("(VOLUME /{}…)", "d".repeat(72))),
            "{rendered}"
        );
    }

    #[test]
    fn clean_multi_stage_fixture_passes() {
        let path = fixtures().join("dockerfiles/clean-multi-stage.Dockerfile");
        assert_eq!(lint_file(&path).unwrap(), []);
    }

    #[test]
    fn every_refusal_fixture_names_each_line() {
        let path = fixtures().join("dockerfiles/every-refusal.Dockerfile");
        let found: Vec<_> = lint_file(&path)
            .unwrap()
            .iter()
            .map(|finding| (finding.line, finding.refusal))
            .collect();
        assert_eq!(
            found,
            [
                (5, Refusal::UnapprovedBase),
                (6, Refusal::NetworkHost),
                (10, Refusal::Privileged),
                (11, Refusal::DockerSocket),
                (12, Refusal::HostBindMount),
                (17, Refusal::Platform),
                (18, Refusal::BaseFromBuildArg),
                (19, Refusal::Volume),
                (20, Refusal::Onbuild),
                (21, Refusal::Stopsignal),
            ]
        );
        assert_eq!(found.len(), Refusal::ALL.len());
    }

    #[test]
    fn the_projects_environments_pass() {
        let mut dockerfiles = Vec::new();
        for folder in ["environments", "images/violations"] {
            collect_dockerfiles(&fixtures().join(folder), &mut dockerfiles);
        }
        assert!(dockerfiles.len() >= 3, "{dockerfiles:?}");
        for path in dockerfiles {
            let findings = lint_file(&path).unwrap();
            assert!(findings.is_empty(), "{findings:#?}");
        }
    }

    fn collect_dockerfiles(folder: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                collect_dockerfiles(&path, out);
            } else if path.file_name().is_some_and(|name| name == "Dockerfile") {
                out.push(path);
            }
        }
    }

    #[test]
    fn read_errors_name_the_path() {
        let path = fixtures().join("dockerfiles/missing/Dockerfile");
        let error = lint_file(&path).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot read Dockerfile {}: ", path.display())),
            "{error}"
        );
    }

    #[test]
    fn no_input_panics() {
        const PIECES: &[&str] = &[
            "FROM ",
            "RUN ",
            "run ",
            "VOLUME ",
            "ONBUILD ",
            "COPY ",
            "--mount=",
            "--network=",
            "--platform=",
            "--security=",
            "--",
            "type=bind,",
            "source=",
            "from=",
            "\"",
            "'",
            "\\",
            "`",
            "#",
            "# escape=`",
            "# escape=\\",
            "<<",
            "<<-",
            "EOF",
            "\t",
            " ",
            "\n",
            "\r\n",
            "[",
            "]",
            ",",
            "=",
            "$",
            "${",
            "}",
            "AS ",
            "é",
            "\u{feff}",
            "..",
            "/",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let mut text = String::new();
            for _ in 0..next() % 60 {
                match next() % 4 {
                    0 => text.push(char::from_u32((next() % 0x3000) as u32).unwrap_or('?')),
                    _ => text.push_str(PIECES[(next() % PIECES.len() as u64) as usize]),
                }
            }
            lint_str(Path::new("fuzz"), &text);
            let bytes: Vec<u8> = (0..next() % 80).map(|_| next() as u8).collect();
            lint_str(Path::new("fuzz"), &String::from_utf8_lossy(&bytes));
        }
        for name in ["clean-multi-stage.Dockerfile", "every-refusal.Dockerfile"] {
            let text = std::fs::read_to_string(fixtures().join("dockerfiles").join(name)).unwrap();
            for (end, _) in text.char_indices() {
                lint_str(Path::new(name), &text[..end]);
            }
        }
    }
}
