//! The `datalayer` variant: the Datalayer OCI artifact as it ships, through a registry.
//!
//! Builds with the docker variant's build, through the engine's BuildKit where it offers
//! one (else its classic builder; [`BUILDER_VAR`] chooses), then pushes the
//! image to the configured registry by digest, with the push credential, as an OCI index
//! holding the image manifest and an attestation manifest (an SPDX SBOM read from the
//! image, and an SLSA v1 provenance): see [`oci`] and [`attest`]. The artifact is
//! `<registry>/<repository>@sha256:<index digest>`. Launch removes the local copy, pulls by
//! digest with the separate read-only pull credential, checks the pulled image is the one
//! pushed, and starts it with the runtime pod's command (Jupyter Server with a token) as
//! the docker variant does; code runs through the same Jupyter client. The artifact's
//! resource is the index in the registry: deleting it deletes the index and its manifests.

pub mod attest;
pub mod oci;
pub mod runtimes;
mod sweep;
mod transfer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bollard::query_parameters::RemoveImageOptionsBuilder;

use crate::Deleted;
use crate::docker::{Builder, DockerProvider};
use crate::registry::{DigestReference, Repository};
use crate::{
    Artifact, ArtifactFacts, BASE_ARG, BaseImage, BuildRequest, Capabilities, CodeOutput,
    CommandOutput, CreateLog, CredentialSource, ErrorKind, Housekeeping, Labelled, LogFn, Provider,
    ProviderError, PulledAttestation, RegistryCredential, Resource, Result, RunLabels, SandboxId,
    Secret, ShutdownReport, Timing,
};

/// The repository artifacts are pushed to: `<host[:port]>/<repository>`.
pub const REGISTRY_VAR: &str = "SANDBOX_MATRIX_DATALAYER_REGISTRY";
/// The user that pushes.
pub const PUSH_USER_VAR: &str = "SANDBOX_MATRIX_DATALAYER_PUSH_USER";
/// The pushing user's password.
pub const PUSH_PASSWORD_VAR: &str = "SANDBOX_MATRIX_DATALAYER_PUSH_PASSWORD";
/// How the push logs in: `static` ([`PUSH_USER_VAR`] and [`PUSH_PASSWORD_VAR`], the
/// default) or `ecr` (a login token from ECR's `GetAuthorizationToken`, through the
/// standard AWS credential chain, as [`crate::registry::credential::ecr_login_token`]).
pub const PUSH_AUTH_VAR: &str = "SANDBOX_MATRIX_DATALAYER_PUSH_AUTH";
/// The read-only user that pulls.
pub const PULL_USER_VAR: &str = "SANDBOX_MATRIX_DATALAYER_PULL_USER";
/// The pulling user's password.
pub const PULL_PASSWORD_VAR: &str = "SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD";
/// The artifact kind: an OCI index by digest in a registry.
pub const ARTIFACT_KIND: &str = "oci-index-digest";
/// The resource kind of a pushed index in the registry.
pub const MANIFEST_RESOURCE: &str = "manifest";
/// The build step's timing of the push: export, attestations and upload.
pub const PUSH_TIMING: &str = "push";
/// The launch step's timing of the pull by digest, as the read-only user.
pub const PULL_TIMING: &str = "pull";
/// Which builder builds: `buildkit` or `classic`; unset, BuildKit where the engine offers
/// it ([`DockerProvider::offered_builder`]), else the classic builder.
pub const BUILDER_VAR: &str = "SANDBOX_MATRIX_DATALAYER_BUILDER";

/// What the datalayer variant can do: what the docker variant does, since it runs there.
pub const CAPABILITIES: Capabilities = Capabilities {
    provenance: true,
    ..crate::docker::CAPABILITIES
};

/// Where the variant pushes and how it logs in.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The repository artifacts are pushed to.
    pub repository: Repository,
    /// The credential that pushes.
    pub push: RegistryCredential,
    /// The read-only credential that pulls.
    pub pull: RegistryCredential,
}

impl Settings {
    /// Reads the settings from the environment; `None` when [`REGISTRY_VAR`] is unset (the
    /// variant is then skipped). A missing credential variable is named. With
    /// [`PUSH_AUTH_VAR`]`=ecr` the push login is asked of ECR here, once for the run.
    pub async fn from_env() -> Result<Option<Self>> {
        let Some(repository) = std::env::var(REGISTRY_VAR).ok().filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let repository = Repository::parse(&repository)
            .map_err(|e| e.context(format!("reading {REGISTRY_VAR}")))?;
        let read = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    ProviderError::new(
                        ErrorKind::Config,
                        format!("{REGISTRY_VAR} is set but {name} is not"),
                    )
                })
        };
        let credential = |user: &str, password: &str, secret: &str| {
            Ok::<_, ProviderError>(RegistryCredential {
                registry: repository.registry.clone(),
                username: read(user)?,
                password: Secret::new(secret, read(password)?),
                source: CredentialSource::Static,
            })
        };
        let push = match std::env::var(PUSH_AUTH_VAR).as_deref().map(str::trim) {
            Err(_) | Ok("" | "static") => {
                credential(PUSH_USER_VAR, PUSH_PASSWORD_VAR, PUSH_PASSWORD_VAR)?
            }
            Ok("ecr") => crate::registry::credential::ecr_login_token(&repository.registry)
                .await
                .map_err(|e| e.context(format!("{PUSH_AUTH_VAR}=ecr")))?,
            Ok(other) => {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "{PUSH_AUTH_VAR}={}: expected `static` or `ecr`",
                        crate::quoted(other)
                    ),
                ));
            }
        };
        let pull = credential(PULL_USER_VAR, PULL_PASSWORD_VAR, PULL_PASSWORD_VAR)?;
        if push.username == pull.username {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the push user ({}) and {PULL_USER_VAR} name the same user: the pull must be made by a separate read-only user",
                    push.username
                ),
            ));
        }
        Ok(Some(Self {
            repository,
            push,
            pull,
        }))
    }

    /// The push login, for a person: the user and where its password came from.
    pub fn push_login(&self) -> String {
        match self.push.source {
            CredentialSource::EcrLoginToken => {
                format!("{} (an ECR login token)", self.push.username)
            }
            _ => self.push.username.clone(),
        }
    }
}

/// What the variant pushed for one artifact.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The engine's id of the image built (its config's digest).
    pub image_id: String,
    /// The image manifest's digest.
    pub image_manifest: String,
    /// How long the export, attestations and push took.
    pub push: Duration,
    /// Bytes of the artifact: gzipped layers (those the registry held already included),
    /// configs, statements and manifests.
    pub size: u64,
    /// Whether launch pulled it already.
    pub pulled: bool,
}

/// The `datalayer` variant, on the local engine through a registry.
pub struct DatalayerProvider {
    docker: DockerProvider,
    settings: Settings,
    pushed: Mutex<HashMap<String, Pushed>>,
    /// Held while a launch checks for and pulls the image.
    pulling: tokio::sync::Mutex<()>,
    /// The gzipped form of every layer pushed to the repository, by diff id.
    layers: Mutex<HashMap<String, oci::PushedLayer>>,
}

impl std::fmt::Debug for DatalayerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatalayerProvider")
            .field("repository", &self.settings.repository.to_string())
            .finish_non_exhaustive()
    }
}

impl DatalayerProvider {
    /// The variant on `docker`'s engine, pushing and pulling as `settings` say.
    pub fn new(docker: DockerProvider, settings: Settings) -> Self {
        Self {
            docker: docker.with_builder_var(BUILDER_VAR),
            settings,
            pushed: Mutex::new(HashMap::new()),
            pulling: tokio::sync::Mutex::new(()),
            layers: Mutex::new(HashMap::new()),
        }
    }

    /// The builder: [`BUILDER_VAR`]'s, else BuildKit where the engine offers it.
    pub async fn builder(&self) -> Result<Builder> {
        self.docker.builder().await
    }

    /// What was pushed for `artifact`, if this provider pushed it.
    pub fn pushed(&self, artifact: &Artifact) -> Option<Pushed> {
        self.pushed
            .lock()
            .expect("pushed table lock")
            .get(&artifact.id)
            .cloned()
    }
}

#[async_trait]
impl Provider for DatalayerProvider {
    fn variant(&self) -> &str {
        "datalayer"
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn provider_version(&self) -> Option<String> {
        self.docker.provider_version()
    }

    fn base_made_from(&self) -> Option<String> {
        self.docker.base_made_from()
    }

    async fn prepare(&self, base: &BaseImage, progress: &LogFn) -> Result<()> {
        self.docker.prepare(base, progress).await
    }

    /// The engine, then both logins at the registry.
    async fn check_access(&self) -> Result<String> {
        let engine = self.docker.check_access().await?;
        let registry = &self.settings.repository.registry;
        let push = oci::check_login(registry, &self.settings.push).await?;
        let pull = oci::check_login(registry, &self.settings.pull).await?;
        Ok(format!(
            "{engine}; registry {registry}: push user {push}, read-only user {pull}"
        ))
    }

    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let started = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let built = self.docker.build_environment(request, log).await?;
        let (reference, pushed) = self.push(request, &built.id, &started, log).await?;
        let artifact = Artifact {
            id: reference.to_string(),
            kind: ARTIFACT_KIND.into(),
        };
        self.pushed
            .lock()
            .expect("pushed table lock")
            .insert(artifact.id.clone(), pushed);
        Ok(artifact)
    }

    /// The SLSA statement in the attestation manifest the artifact's index lists, pulled
    /// from the registry as the read-only user.
    async fn provenance(&self, artifact: &Artifact) -> Result<PulledAttestation> {
        let reference = DigestReference::parse(&artifact.id)?;
        let pulled =
            oci::pull_statement(&reference, &self.settings.pull, attest::SLSA_PREDICATE).await?;
        Ok(PulledAttestation {
            from: format!(
                "registry {}, index {}",
                reference.repository.registry, reference.digest
            ),
            image_digest: pulled.image_manifest,
            statement: pulled.statement.to_vec(),
        })
    }

    fn credential_use(&self, request: &BuildRequest) -> String {
        self.docker.credential_use(request)
    }

    /// The push (export, attestations and upload) and the bytes pushed.
    fn artifact_facts(&self, artifact: &Artifact) -> ArtifactFacts {
        self.pushed(artifact)
            .map(|pushed| ArtifactFacts {
                timings: vec![Timing {
                    name: PUSH_TIMING.into(),
                    duration: pushed.push,
                    resolution: None,
                }],
                compressed_bytes: Some(pushed.size),
            })
            .unwrap_or_default()
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        let pushed = self.pushed(artifact).ok_or_else(|| {
            ProviderError::new(
                ErrorKind::NotFound,
                format!("{} was not pushed by this run", artifact.id),
            )
        })?;
        let mut timings = Vec::new();
        // The first launch removes the build's local copy and pulls; a later one pulls
        // again only when the engine no longer holds the image (a scenario's cleanup
        // removes the images carrying its labels, the pulled one among them). Launches at
        // once (a burst) pull one at a time: the first pulls, the others find it held.
        let pulling = self.pulling.lock().await;
        let pulled = self.pushed(artifact).is_some_and(|p| p.pulled);
        if !pulled || !self.holds(&artifact.id).await? {
            let started = Instant::now();
            self.pull(&artifact.id, &pushed).await?;
            timings.push(Timing {
                name: PULL_TIMING.into(),
                duration: started.elapsed(),
                resolution: None,
            });
            if let Some(p) = self
                .pushed
                .lock()
                .expect("pushed table lock")
                .get_mut(&artifact.id)
            {
                p.pulled = true;
            }
        }
        drop(pulling);
        let (sandbox, launched) = self.docker.launch(artifact, labels).await?;
        timings.extend(launched);
        Ok((sandbox, timings))
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        self.docker.run_code(sandbox, code).await
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        self.docker.run_code_in(sandbox, context, code).await
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        self.docker.exec(sandbox, argv, as_root).await
    }

    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        self.docker.restart(sandbox).await
    }

    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport> {
        self.docker.shutdown(sandbox, grace).await
    }

    /// The local image's metadata: the image pushed is the image pulled, one id.
    async fn artifact_metadata(&self, artifact: &Artifact) -> Result<String> {
        self.docker.artifact_metadata(&self.local(artifact)?).await
    }

    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<crate::SandboxState>> {
        self.docker.sandbox_state(sandbox).await
    }

    async fn floor(&self, artifact: &Artifact, labels: &RunLabels) -> Result<Vec<Timing>> {
        self.docker.floor(&self.local(artifact)?, labels).await
    }
}
