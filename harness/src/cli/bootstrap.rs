//! `sandbox-matrix bootstrap`: the docker variant's base image, built (or reused) and
//! optionally pushed.

use std::path::Path;
use std::sync::Arc;

use sandbox_matrix::run::variants;

use super::{
    EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, Interrupt, harness_executable,
};

pub(super) async fn bootstrap(root: &Path, push: Option<&str>, base_from: Option<String>) -> u8 {
    let target = match push
        .map(sandbox_providers::registry::Repository::parse)
        .transpose()
    {
        Ok(target) => target,
        Err(e) => {
            eprintln!("error: {}", e.message);
            return EXIT_BAD_INPUT;
        }
    };
    let mut recipe = variants::base_recipe(root, &harness_executable());
    if let Some(image) = base_from {
        recipe = recipe.with_debian_image(Some(image));
    }
    let provider = match sandbox_providers::docker::DockerProvider::connect(recipe).await {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("error: the docker variant needs a Docker engine: {e}");
            return EXIT_FAILED;
        }
    };
    let progress = |line: &str| eprintln!("  {line}");
    let interrupted = Interrupt::listen(None).token;
    let made = tokio::select! {
        made = provider.ensure_base(&progress) => made,
        _ = interrupted.cancelled() => {
            eprintln!("interrupted: the base was not made");
            return EXIT_INTERRUPTED;
        }
    };
    match made {
        Ok(base) => eprintln!(
            "base {}: {} ({}), its root filesystem made from {}",
            sandbox_providers::docker::base::BASE_IMAGE,
            base.id,
            if base.reused { "reused" } else { "built" },
            base.made_from
        ),
        Err(e) => {
            eprintln!("error: {e}");
            return if e.kind == sandbox_providers::ErrorKind::Config {
                EXIT_BAD_INPUT
            } else {
                EXIT_FAILED
            };
        }
    }
    let Some(target) = target else {
        return EXIT_PASSED;
    };
    use sandbox_providers::registry::{AuthMode, make_credential};
    let credential = match AuthMode::from_env() {
        Ok(mode) => make_credential(mode, &target.registry).await,
        Err(e) => Err(e),
    };
    let credential = match credential {
        Ok(credential) => credential,
        Err(e) => {
            eprintln!(
                "error: no credential for registry {}: {}",
                target.registry, e.message
            );
            return EXIT_FAILED;
        }
    };
    eprintln!("pushing the base to {target}");
    let progress = |line: &str| eprintln!("  {line}");
    match provider
        .push_base(&target, credential.as_ref(), &progress)
        .await
    {
        Ok(reference) => {
            println!("digest: {}", reference.digest);
            println!("base: {reference}");
            eprintln!(
                "use it with SANDBOX_MATRIX_BASE={reference}, and approve it by adding {} under {} in policies/approved-bases.yaml",
                reference.digest, reference.repository.path
            );
            EXIT_PASSED
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
    }
}
