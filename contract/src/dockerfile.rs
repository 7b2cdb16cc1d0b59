//! What an environment's Dockerfile may not do under sandbox-contract/v1: each refusal names
//! something at least one provider's builder cannot honour. The linter in `sandbox-matrix`
//! reports them before any build, reading the Dockerfile with [`parse`], as the providers'
//! builders do.

use std::fmt;

pub mod parse;

/// Repositories an environment may start `FROM`, with any tag or `@sha256:` digest.
pub const APPROVED_BASES: &[&str] = &["sandbox-matrix/contract-base"];

/// The only platform a `FROM --platform=` may name.
pub const PLATFORM: &str = "linux/amd64";

/// Something a Dockerfile may not do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// A `VOLUME` instruction.
    Volume,
    /// An `ONBUILD` instruction.
    Onbuild,
    /// A `STOPSIGNAL` instruction.
    Stopsignal,
    /// A `FROM` whose base is neither an approved base nor an earlier stage.
    UnapprovedBase,
    /// A `FROM` that names its base through a variable (`FROM $BASE`), other than the one
    /// base argument, `BASE_IMAGE`, declared before the first `FROM` with a default.
    BaseFromBuildArg,
    /// A `FROM --platform=` other than [`PLATFORM`], or one given by a variable.
    Platform,
    /// A `RUN` with `--privileged` or `--security=insecure`.
    Privileged,
    /// A `RUN --network=host`.
    NetworkHost,
    /// A `RUN --mount` whose source or target is the Docker socket.
    DockerSocket,
    /// A `RUN --mount=type=bind` of a path outside the build context.
    HostBindMount,
}

impl Refusal {
    /// Every refusal, in the order above.
    pub const ALL: [Refusal; 10] = [
        Refusal::Volume,
        Refusal::Onbuild,
        Refusal::Stopsignal,
        Refusal::UnapprovedBase,
        Refusal::BaseFromBuildArg,
        Refusal::Platform,
        Refusal::Privileged,
        Refusal::NetworkHost,
        Refusal::DockerSocket,
        Refusal::HostBindMount,
    ];

    /// The stable id reports and tests use.
    pub fn id(self) -> &'static str {
        match self {
            Refusal::Volume => "volume",
            Refusal::Onbuild => "onbuild",
            Refusal::Stopsignal => "stopsignal",
            Refusal::UnapprovedBase => "unapproved-base",
            Refusal::BaseFromBuildArg => "base-from-build-arg",
            Refusal::Platform => "platform",
            Refusal::Privileged => "privileged",
            Refusal::NetworkHost => "network-host",
            Refusal::DockerSocket => "docker-socket",
            Refusal::HostBindMount => "host-bind-mount",
        }
    }

    /// Why it is refused, as one sentence.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Volume => "Modal's image builder does not implement VOLUME.",
            Refusal::Onbuild => "Modal's image builder does not implement ONBUILD.",
            Refusal::Stopsignal => "Modal's image builder does not implement STOPSIGNAL.",
            Refusal::UnapprovedBase => {
                "The base is neither an approved Datalayer base nor an earlier stage of this Dockerfile."
            }
            Refusal::BaseFromBuildArg => {
                "The base is named through a build argument other than BASE_IMAGE declared before the first FROM with an approved default, so it cannot be checked against the approved Datalayer bases."
            }
            Refusal::Platform => {
                "Sandboxes run linux/amd64 only; another platform, or one given by a variable, is refused."
            }
            Refusal::Privileged => {
                "Privileged build steps (--privileged, --security=insecure) are not available on every provider's builder."
            }
            Refusal::NetworkHost => {
                "RUN --network=host is not available on every provider's builder."
            }
            Refusal::DockerSocket => {
                "Mounting the Docker socket is refused: no provider's builder offers a Docker engine to a build."
            }
            Refusal::HostBindMount => {
                "Bind-mounting a path outside the build context is refused: only the context, a stage or an image may be bound."
            }
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// Whether an image reference names a repository in [`APPROVED_BASES`], with an optional
/// tag and an optional `@sha256:` digest (`sandbox-matrix/contract-base:v1`,
/// `sandbox-matrix/contract-base@sha256:<64 hex>`). The repository must match exactly: a
/// registry prefix such as `docker.io/` is a different name.
pub fn is_approved_base(reference: &str) -> bool {
    let (name, digest) = match reference.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (reference, None),
    };
    if digest.is_some_and(|digest| !is_sha256_digest(digest)) {
        return false;
    }
    let repository = match name.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => {
            if !is_tag(tag) {
                return false;
            }
            repository
        }
        _ => name,
    };
    APPROVED_BASES.contains(&repository)
}

/// `text` with `$name` and `${name}` in its `FROM` instructions replaced by `reference`:
/// how a builder that takes no build arguments is handed the base the run resolved (`name`
/// is normally the providers' `BASE_ARG`, `BASE_IMAGE`). Only `FROM` lines change (with
/// their continuation lines); `$name` is replaced only as a whole name, so `$BASE_IMAGE_X`
/// stays. Everything else, the `ARG` that declares it included, is kept as written.
pub fn resolve_base_arg(text: &str, name: &str, reference: &str) -> String {
    let from_lines: Vec<(usize, usize)> = parse::parse(text)
        .iter()
        .filter(|instruction| instruction.keyword == "FROM")
        .map(|instruction| (instruction.line, instruction.last_line))
        .collect();
    let braced = format!("${{{name}}}");
    let bare = format!("${name}");
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        if !from_lines
            .iter()
            .any(|&(first, last)| (first..=last).contains(&number))
        {
            out.push_str(line);
            continue;
        }
        let line = line.replace(&braced, reference);
        let mut rest = line.as_str();
        while let Some(at) = rest.find(&bare) {
            let after = &rest[at + bare.len()..];
            out.push_str(&rest[..at]);
            if after.starts_with(is_name_char) {
                out.push_str(&bare);
            } else {
                out.push_str(reference);
            }
            rest = after;
        }
        out.push_str(rest);
    }
    out
}

/// `sha256:` followed by 64 lowercase hex digits.
fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// An OCI tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let mut bytes = tag.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && tag.len() <= 128
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_reasons_end_with_a_period() {
        for (i, a) in Refusal::ALL.iter().enumerate() {
            assert!(a.reason().ends_with('.'), "{a}");
            for b in &Refusal::ALL[i + 1..] {
                assert_ne!(a.id(), b.id());
            }
        }
    }

    #[test]
    fn approved_bases_take_any_tag_or_digest() {
        let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
        for reference in [
            "sandbox-matrix/contract-base".to_string(),
            "sandbox-matrix/contract-base:v1".to_string(),
            "sandbox-matrix/contract-base:1.2_rc-3".to_string(),
            format!("sandbox-matrix/contract-base@{digest}"),
            format!("sandbox-matrix/contract-base:v1@{digest}"),
        ] {
            assert!(is_approved_base(&reference), "{reference}");
        }
    }

    #[test]
    fn the_base_argument_resolves_in_from_lines_only() {
        let text = "\
# uses ${BASE_IMAGE} in a comment
ARG BASE_IMAGE=sandbox-matrix/contract-base:v1
FROM ${BASE_IMAGE} AS base
RUN echo $BASE_IMAGE
FROM \\
    $BASE_IMAGE
FROM $BASE_IMAGE_OTHER
FROM base
";
        let reference = format!("127.0.0.1:5000/sm/base@sha256:{}", "ab".repeat(32));
        let resolved = resolve_base_arg(text, "BASE_IMAGE", &reference);
        assert_eq!(
            resolved,
            text.replace("FROM ${BASE_IMAGE} AS", &format!("FROM {reference} AS"))
                .replace("    $BASE_IMAGE\n", &format!("    {reference}\n"))
        );
        let froms: Vec<String> = parse::parse(&resolved)
            .iter()
            .filter(|i| i.keyword == "FROM")
            .map(|i| i.args.words()[0].clone())
            .collect();
        assert_eq!(froms, [&reference, &reference, "$BASE_IMAGE_OTHER", "base"]);
        // CRLF line ends and a file without a final newline are kept.
        assert_eq!(
            resolve_base_arg("FROM $BASE_IMAGE\r\nRUN x", "BASE_IMAGE", "img@sha256:1"),
            "FROM img@sha256:1\r\nRUN x"
        );
    }

    #[test]
    fn other_references_are_not_approved() {
        for reference in [
            "scratch",
            "debian:trixie",
            "sandbox-matrix/contract-rootfs:trixie",
            "sandbox-matrix/contract-base-evil:v1",
            "docker.io/sandbox-matrix/contract-base:v1",
            "localhost:5000/sandbox-matrix/contract-base:v1",
            "sandbox-matrix/contract-base:",
            "sandbox-matrix/contract-base:.v1",
            "sandbox-matrix/contract-base@sha256:abc",
            "sandbox-matrix/contract-base@",
            "",
        ] {
            assert!(!is_approved_base(reference), "{reference}");
        }
    }
}
