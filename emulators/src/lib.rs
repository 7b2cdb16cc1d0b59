//! Emulators of the cloud providers' APIs, served on loopback over HTTPS and backed by the
//! docker variant: what authors the cassettes, what `sandbox-matrix emulate` serves, and
//! what the providers' own SDKs are run against.
//!
//! Every emulator implements [`Emulator`]. This crate's root holds their shared plumbing:
//! an HTTP/1.1 server handing each request to the emulator as an [`HttpRequest`], the
//! [`Answer`] it gives back, the [`Site`] it is served at, and [`tls`] (a test CA made at
//! start, and the TLS front). An emulator is reached through its provider's live
//! host forms (`api.<domain>`, `<port>-<id>.<domain>`), the client pinning `<domain>` and
//! every name under it to 127.0.0.1 and trusting the test CA.

pub mod datalayer;
pub mod daytona;
pub mod e2b;
mod emulator;
mod error;
mod http;
mod jupyter;
pub mod launch;
pub mod modal;
pub mod record;
mod site;
pub mod tls;

use std::path::Path;

use sandbox_providers::{Artifact, BuildRequest, LogFn, Provider, RunLabels};

pub use emulator::{ClientEnv, Emulator, Reach};
pub use error::EmulateError;
pub use http::{Answer, HttpRequest, bind_loopback, serve_http};
pub(crate) use http::{host_name, lock, upgrade_request};
pub(crate) use jupyter::{SocketRequest, forward_to_jupyter, serve_kernel_socket};
pub use site::{Front, Site};
pub(crate) use site::{Listening, http_client};

/// The domain an emulator serves when none is given: `.test` never resolves on the
/// Internet (RFC 6761), so only a pinned client reaches it.
pub const DEFAULT_DOMAIN: &str = "emulator.test";

/// The providers sandbox-matrix emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulated {
    /// E2B's control plane, envd and the code interpreter.
    E2b,
    /// Daytona's API and toolbox.
    Daytona,
    /// Modal's gRPC control plane and task command router.
    Modal,
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress.
    Datalayer,
}

impl Emulated {
    /// The emulator cloud variant `variant` runs against; `None` for a variant with none.
    pub fn of_variant(variant: &str) -> Option<Self> {
        match variant {
            "e2b" => Some(Self::E2b),
            "daytona" => Some(Self::Daytona),
            "modal" => Some(Self::Modal),
            sandbox_providers::datalayer::runtimes::VARIANT => Some(Self::Datalayer),
            _ => None,
        }
    }

    /// The provider's name, as people write it.
    pub fn provider(self) -> &'static str {
        match self {
            Self::E2b => "E2B",
            Self::Daytona => "Daytona",
            Self::Modal => "Modal",
            Self::Datalayer => "Datalayer",
        }
    }
}

/// What results of `variant` run against its emulator say they came from:
/// `sandbox-matrix 0.9.0's E2B emulator over the local Docker engine`.
pub fn describe(variant: &str) -> String {
    let provider: &str = match Emulated::of_variant(variant) {
        Some(which) => which.provider(),
        None => variant,
    };
    format!(
        "sandbox-matrix {}'s {provider} emulator over the local Docker engine, not {provider}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The first field of a JSON request `body` set (not null) that is not among
/// `implemented`: what an emulator refuses by name rather than take and drop.
pub(crate) fn set_field_outside(body: &serde_json::Value, implemented: &[&str]) -> Option<String> {
    body.as_object()
        .into_iter()
        .flatten()
        .find(|(k, v)| !v.is_null() && !implemented.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
}

/// The scenario a seed of the environment folder `environment` is labelled with: the
/// folder's name.
pub(crate) fn seed_scenario(environment: &Path) -> String {
    environment
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "environment".into())
}

/// Builds the environment folder `environment` with `client` (the project's client for an
/// emulator's provider, pointed at it) from the local base, labelled `labels`: how an
/// emulator seeds what clients create sandboxes from. `log` gets the build's lines.
pub(crate) async fn seed_build(
    client: &dyn Provider,
    environment: &Path,
    labels: RunLabels,
    log: &LogFn,
) -> Result<Artifact, EmulateError> {
    let request = BuildRequest {
        environment_dir: environment.to_owned(),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels,
    };
    client
        .build(&request, log)
        .await
        .map_err(|e| EmulateError::Backend(format!("seeding {}: {e}", environment.display())))
}

/// Removes from `docker`, by their labels, whatever builds and sandboxes labelled with any
/// of `labels` left; what it cannot list or remove it says on stderr, by name.
pub(crate) async fn remove_labelled(docker: &dyn Provider, labels: Vec<RunLabels>) {
    // Every label set is listed first and every container removed before any image: a
    // sandbox the emulator ended on its own (a timeout) may still be stopping, under
    // another label set than its image's.
    let mut containers = Vec::new();
    let mut images = Vec::new();
    for labels in labels {
        match docker.list_resources(&labels).await {
            Ok(listed) => {
                let (c, i): (Vec<_>, Vec<_>) =
                    listed.into_iter().partition(|r| r.kind == "container");
                containers.extend(c);
                images.extend(i);
            }
            Err(e) => eprintln!("emulator cleanup: cannot list run {}: {e}", labels.run_id),
        }
    }
    for resource in containers.into_iter().chain(images) {
        if let Err(e) = docker.delete_resource(&resource).await {
            eprintln!(
                "emulator cleanup: {} {} could not be removed: {e}",
                resource.kind, resource.id
            );
        }
    }
}

#[cfg(test)]
mod tests;
