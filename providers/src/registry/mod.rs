//! The registry that holds an environment's base: references by digest, the credential made
//! once per run ([`credential`]), and a read-only check that the base can be pulled with it
//! ([`check`]).
//!
//! A base in a registry is always named by digest, `<host[:port]>/<repository>@sha256:<hex>`:
//! a tag can move between the run that checked it and the build that pulls it.

pub mod check;
pub mod credential;

use std::fmt;

pub use check::check_base;
pub use credential::{AuthMode, make_credential};

use crate::{BaseImage, ErrorKind, ProviderError, Result};

/// A repository in a registry: `<host[:port]>/<path>`, with no tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// The registry host, with its port when it has one.
    pub registry: String,
    /// The repository's path inside the registry, such as `team/contract-base`.
    pub path: String,
}

/// A base image named by digest in a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestReference {
    /// Where it is.
    pub repository: Repository,
    /// `sha256:` and 64 lowercase hex digits.
    pub digest: String,
}

impl Repository {
    /// Parses `<host[:port]>/<path>`. The first component must be a host (it holds a `.` or
    /// a `:`, or is `localhost`), as the engine reads it; the path is lowercase components
    /// of letters, digits and `._-` separators. A tag or digest is refused.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            ProviderError::new(
                ErrorKind::Config,
                format!("`{text}` is not a <registry>/<repository>: {why}"),
            )
        };
        if text.contains('@') {
            return Err(bad("it holds a digest; name the repository alone"));
        }
        let (registry, path) = text
            .split_once('/')
            .ok_or_else(|| bad("it names no registry host"))?;
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(bad(&format!(
                "`{registry}` is not a registry host (a host has a `.` or a `:port`, or is localhost)"
            )));
        }
        if let Some((host, port)) = registry.rsplit_once(':')
            && (host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad(&format!("`{registry}` has no valid port")));
        }
        if path
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
        {
            return Err(bad("it holds a tag; name the repository alone"));
        }
        if path.is_empty() || !path.split('/').all(is_path_component) {
            return Err(bad(&format!(
                "`{path}` is not a repository path (lowercase letters, digits, and `._-` between them)"
            )));
        }
        Ok(Self {
            registry: registry.to_owned(),
            path: path.to_owned(),
        })
    }

    /// This repository's image with `digest`.
    pub fn at(&self, digest: &str) -> DigestReference {
        DigestReference {
            repository: self.clone(),
            digest: digest.to_owned(),
        }
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

impl DigestReference {
    /// Parses `<host[:port]>/<repository>@sha256:<64 hex>`; a tag, with or without a
    /// digest, is refused with a message saying how to get the digest.
    pub fn parse(text: &str) -> Result<Self> {
        let Some((name, digest)) = text.split_once('@') else {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "`{text}` names the base by tag or name, not by digest: a tag can move, so give \
                     <registry>/<repository>@sha256:<digest> (`sandbox-matrix bootstrap --push` prints it)"
                ),
            ));
        };
        if !is_sha256_digest(digest) {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!("`{text}`: `{digest}` is not sha256: followed by 64 lowercase hex digits"),
            ));
        }
        let repository = Repository::parse(name).map_err(|e| ProviderError {
            message: format!(
                "`{text}` is not <registry>/<repository>@sha256:<digest>: {}",
                e.message
            ),
            ..e
        })?;
        Ok(repository.at(digest))
    }

    /// The base as a build request carries it.
    pub fn to_base_image(&self) -> BaseImage {
        BaseImage {
            reference: self.to_string(),
            registry: Some(self.repository.registry.clone()),
        }
    }
}

impl fmt::Display for DigestReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repository, self.digest)
    }
}

/// `sha256:` followed by 64 lowercase hex digits.
pub fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// A repository path component: `[a-z0-9]+([._-]+[a-z0-9]+)*` (the `__` and `-` runs the
/// distribution grammar allows are read as any run of separators).
fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| alnum(b) || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest() -> String {
        format!("sha256:{}", "0123456789abcdef".repeat(4))
    }

    #[test]
    fn parses_a_reference_by_digest() {
        let text = format!("127.0.0.1:5000/team/contract-base@{}", digest());
        let parsed = DigestReference::parse(&text).unwrap();
        assert_eq!(parsed.repository.registry, "127.0.0.1:5000");
        assert_eq!(parsed.repository.path, "team/contract-base");
        assert_eq!(parsed.digest, digest());
        assert_eq!(parsed.to_string(), text);
        let base = parsed.to_base_image();
        assert_eq!(base.reference, text);
        assert_eq!(base.registry.as_deref(), Some("127.0.0.1:5000"));
        let host = format!("registry.example/contract-base@{}", digest());
        assert_eq!(
            DigestReference::parse(&host).unwrap().repository.registry,
            "registry.example"
        );
    }

    #[test]
    fn refuses_tags_bad_digests_and_names_without_a_host() {
        let tag = DigestReference::parse("127.0.0.1:5000/contract-base:v1").unwrap_err();
        assert!(tag.message.contains("not by digest"), "{tag}");
        assert!(tag.message.contains("bootstrap --push"), "{tag}");
        for text in [
            format!("127.0.0.1:5000/contract-base:v1@{}", digest()),
            format!("contract-base@{}", digest()),
            format!("sandbox-matrix/contract-base@{}", digest()),
            format!("127.0.0.1:/contract-base@{}", digest()),
            format!("127.0.0.1:5000/Contract-Base@{}", digest()),
            format!("127.0.0.1:5000/@{}", digest()),
            format!("127.0.0.1:5000/a//b@{}", digest()),
            "127.0.0.1:5000/contract-base@sha256:abc".to_owned(),
            format!("127.0.0.1:5000/contract-base@{}", digest().to_uppercase()),
        ] {
            assert!(DigestReference::parse(&text).is_err(), "{text}");
        }
    }

    #[test]
    fn parses_a_repository_to_push_to() {
        let repo = Repository::parse("localhost:5000/sm/contract-base").unwrap();
        assert_eq!(repo.to_string(), "localhost:5000/sm/contract-base");
        assert_eq!(
            repo.at(&digest()).to_string(),
            format!("localhost:5000/sm/contract-base@{}", digest())
        );
        for text in [
            "localhost:5000/sm/contract-base:v1",
            "localhost:5000",
            "sm/contract-base",
            "localhost:5000/a@sha256:00",
        ] {
            assert!(Repository::parse(text).is_err(), "{text}");
        }
    }
}
