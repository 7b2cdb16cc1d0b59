//! The base a run builds from and the registry credential, each made once per run and
//! handed to every variant's build.
//!
//! With no [`BASE_VAR`] (nor `run --base`), the base is the local bootstrap's tag,
//! `sandbox-matrix/contract-base:v1`, and no credential is made: the default run and the
//! test suite's path. With one, the base is `<registry>/<repository>@sha256:<digest>` (a
//! tag is refused), the credential is made as `SANDBOX_MATRIX_REGISTRY_AUTH` says (see
//! [`sandbox_providers::registry::credential`]), and the approved bases file is read so the
//! build step can refuse a digest it does not list.

use std::path::Path;

use sandbox_providers::registry::{AuthMode, DigestReference, make_credential};
use sandbox_providers::{BaseImage, RegistryCredential, Secret};

use crate::checks::approved::ApprovedBases;

/// The base by digest in a registry, `<registry>/<repository>@sha256:<digest>`.
pub const BASE_VAR: &str = "SANDBOX_MATRIX_BASE";

/// The base a run builds from, and what goes with it.
#[derive(Debug, Clone)]
pub struct RunBase {
    /// What every build request carries.
    pub base: BaseImage,
    /// The base by digest, when it is in a registry.
    pub reference: Option<DigestReference>,
    /// The registry credential, made once for the run.
    pub credential: Option<RegistryCredential>,
    /// The approved bases a registry base is checked against.
    pub approved: Option<ApprovedBases>,
}

impl RunBase {
    /// The local bootstrap's base, with no registry and no credential.
    pub fn local() -> Self {
        Self {
            base: BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
            reference: None,
            credential: None,
            approved: None,
        }
    }

    /// Resolves the run's base from `arg` (`run --base`) or [`BASE_VAR`]; for a registry
    /// base, reads the approved bases at `approved` and makes the credential. The error says
    /// what is wrong: a tag, a malformed reference, the approved file, the credential.
    pub async fn resolve(arg: Option<&str>, approved: &Path) -> Result<Self, String> {
        let text = match arg {
            Some(arg) => arg.to_owned(),
            None => match std::env::var(BASE_VAR) {
                Ok(value) if !value.trim().is_empty() => value.trim().to_owned(),
                _ => return Ok(Self::local()),
            },
        };
        let reference = DigestReference::parse(&text).map_err(|e| e.message)?;
        let approved = ApprovedBases::load(approved)?;
        let registry = &reference.repository.registry;
        let mode = AuthMode::from_env().map_err(|e| e.message)?;
        let credential = make_credential(mode, registry)
            .await
            .map_err(|e| format!("no credential for registry {registry}: {}", e.message))?;
        Ok(Self {
            base: reference.to_base_image(),
            reference: Some(reference),
            credential,
            approved: Some(approved),
        })
    }

    /// The credential's password, which the secrets scan and the reports' self-check look
    /// for: it must be found nowhere.
    pub fn secret(&self) -> Option<Secret> {
        self.credential.as_ref().map(|c| c.password.clone())
    }

    /// One line for the run's output: where the base comes from.
    pub fn describe(&self) -> String {
        match (&self.reference, &self.credential) {
            (None, _) => format!(
                "base {}: local, bootstrapped on this engine, not from a registry (set {BASE_VAR} for a base in a registry)",
                self.base.reference
            ),
            (Some(reference), Some(credential)) => format!(
                "base {reference}: from registry {}, credential: {} for user {}",
                reference.repository.registry,
                sandbox_providers::registry::check::describe(credential.source),
                credential.username
            ),
            (Some(reference), None) => format!(
                "base {reference}: from registry {}, no credential",
                reference.repository.registry
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tag_is_refused_before_anything_else() {
        let error = RunBase::resolve(
            Some("127.0.0.1:5000/sm/contract-base:v1"),
            Path::new("/nonexistent"),
        )
        .await
        .unwrap_err();
        assert!(error.contains("not by digest"), "{error}");
    }

    #[tokio::test]
    async fn a_missing_approved_file_is_named() {
        let text = format!("127.0.0.1:5000/sm/contract-base@sha256:{}", "ab".repeat(32));
        let error = RunBase::resolve(Some(&text), Path::new("/nonexistent/approved.yaml"))
            .await
            .unwrap_err();
        assert!(error.contains("/nonexistent/approved.yaml"), "{error}");
    }

    #[test]
    fn the_local_base_says_it_is_local() {
        let local = RunBase::local();
        assert_eq!(local.base.registry, None);
        assert!(local.secret().is_none());
        assert!(local.describe().contains("local"), "{}", local.describe());
        assert!(local.describe().contains("not from a registry"));
    }
}
