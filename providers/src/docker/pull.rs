//! Pulling an image from a registry through the engine, bounded: a pull whose registry
//! sends nothing for [`STALL`] fails, and so does one that takes over [`TOTAL`].

use std::time::Duration;

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;

use crate::{ErrorKind, LogFn, ProviderError, Result};

/// How long a pull may go without a word from the engine before it is given up.
pub const STALL: Duration = Duration::from_secs(30);

/// How long a whole pull may take.
pub const TOTAL: Duration = Duration::from_secs(15 * 60);

/// Pulls `reference` (`name:tag` or `name@sha256:…`) and returns the image's repository
/// digest as `name@sha256:<hex>`: what the tag resolved to, for a later pull by digest.
/// `progress` gets the engine's status lines, but not the per-layer byte counts.
pub async fn pull(docker: &Docker, reference: &str, progress: &LogFn) -> Result<String> {
    pull_as(docker, reference, None, progress).await
}

/// [`pull`], logging in to the registry with `credentials` when given.
pub async fn pull_as(
    docker: &Docker,
    reference: &str,
    credentials: Option<DockerCredentials>,
    progress: &LogFn,
) -> Result<String> {
    let (name, tag) = split_reference(reference);
    let options = CreateImageOptionsBuilder::default()
        .from_image(name)
        .tag(tag)
        .build();
    let mut stream = docker.create_image(Some(options), None, credentials);
    let deadline = tokio::time::Instant::now() + TOTAL;
    loop {
        let next = tokio::time::timeout(STALL, stream.next());
        let item = match tokio::time::timeout_at(deadline, next).await {
            Err(_) => {
                let took = format!("took over {}", crate::for_people(TOTAL));
                return Err(timed_out(reference, &took));
            }
            Ok(Err(_)) => {
                let silent = format!("no answer for {}", crate::for_people(STALL));
                return Err(timed_out(reference, &silent));
            }
            Ok(Ok(item)) => item,
        };
        match item {
            None => break,
            Some(Ok(info)) => {
                if let Some(status) = info.status.as_deref()
                    && info.progress_detail.is_none()
                {
                    match info.id.as_deref() {
                        Some(id) => progress(&format!("pull {reference}: {id}: {status}")),
                        None => progress(&format!("pull {reference}: {status}")),
                    }
                }
            }
            Some(Err(e)) => {
                return Err(super::engine_error(e).context(format!("pulling {reference}")));
            }
        }
    }
    let image = docker
        .inspect_image(reference)
        .await
        .map_err(|e| super::engine_error(e).context(format!("inspecting {reference}")))?;
    let digests = image.repo_digests.unwrap_or_default();
    digests
        .iter()
        .find(|d| d.starts_with(&format!("{name}@")))
        .or_else(|| digests.first())
        .cloned()
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("{reference} was pulled but the engine knows no digest of it"),
            )
        })
}

fn timed_out(reference: &str, what: &str) -> ProviderError {
    ProviderError::new(
        ErrorKind::Timeout,
        format!("pulling {reference}: the registry {what}"),
    )
}

/// `name` and `tag` (or `sha256:…` digest) of a reference; the tag is `latest` when none
/// is given. A colon in the registry's host:port is not a tag.
pub fn split_reference(reference: &str) -> (&str, &str) {
    if let Some((name, digest)) = reference.split_once('@') {
        return (name, digest);
    }
    match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (reference, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_name_and_tag_or_digest() {
        assert_eq!(
            split_reference("debian:trixie-slim"),
            ("debian", "trixie-slim")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/library/debian:trixie-slim"),
            ("127.0.0.1:5000/library/debian", "trixie-slim")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/library/debian"),
            ("127.0.0.1:5000/library/debian", "latest")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/library/debian@sha256:abc"),
            ("127.0.0.1:5000/library/debian", "sha256:abc")
        );
    }
}
