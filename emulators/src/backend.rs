//! The docker variant behind every emulator: what an emulator builds before clients come
//! (a seed) and how what it made is removed, by its labels.

use std::path::Path;

use sandbox_providers::{Artifact, BuildRequest, LogFn, Provider, RunLabels};

use crate::error::EmulateError;

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
