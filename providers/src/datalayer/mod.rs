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

    /// The base's digest: from its reference in a registry, else the local image's id.
    async fn base_digest(&self, base: &BaseImage) -> Result<String> {
        if base.registry.is_some() {
            return Ok(DigestReference::parse(&base.reference)?.digest);
        }
        let inspect = self
            .docker
            .engine()
            .inspect_image(&base.reference)
            .await
            .map_err(|e| {
                crate::docker::engine_error(e)
                    .context(format!("inspecting the base {}", base.reference))
            })?;
        inspect.id.ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("the engine gave the base {} no id", base.reference),
            )
        })
    }

    /// Exports image `image_id`, makes its attestations and pushes it all by digest.
    async fn push(
        &self,
        request: &BuildRequest,
        image_id: &str,
        started: &str,
        log: &LogFn,
    ) -> Result<(DigestReference, Pushed)> {
        let began = Instant::now();
        let dockerfile = crate::read_dockerfile(&request.environment_dir)?;
        let base_digest = self.base_digest(&request.base).await?;
        let exported = oci::export(self.docker.engine(), image_id).await?;
        if oci::sha256(&exported.config) != image_id {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!("the engine exported a config that is not image {image_id}"),
            ));
        }
        let platform = oci::platform(&exported.config)?;
        // Only a saving: a registry that will not say what it holds gets every layer.
        let in_registry = match self.layers_held(&exported.diff_ids()?).await {
            Ok(held) => held,
            Err(e) => {
                log(&format!("{e}; gzipping every layer"));
                HashMap::new()
            }
        };
        let (image, installed) = tokio::task::spawn_blocking(move || {
            let installed = attest::installed(&exported.layers)?;
            let image = oci::image_manifest(&exported, &in_registry)?;
            Ok::<_, ProviderError>((image, installed))
        })
        .await
        .map_err(|e| ProviderError::new(ErrorKind::Protocol, format!("packing layers: {e}")))??;
        log(&format!(
            "SBOM: {} Debian packages and {} Python distributions read from the image",
            installed.debian.len(),
            installed.python.len()
        ));
        let repository = &self.settings.repository;
        let subject = attest::Subject {
            name: format!(
                "pkg:docker/{repository}@{}?platform={}%2F{}",
                image.manifest.digest,
                platform["os"].as_str().unwrap_or_default(),
                platform["architecture"].as_str().unwrap_or_default()
            ),
            digest: image.manifest.digest.clone(),
        };
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let mut build_arg_names: Vec<String> = request
            .build_secrets
            .iter()
            .map(|s| s.name().to_owned())
            .chain(std::iter::once(BASE_ARG.to_owned()))
            .collect();
        build_arg_names.sort();
        let provenance = attest::Provenance {
            dockerfile_digest: oci::sha256(dockerfile.as_bytes()),
            base_reference: request.base.reference.clone(),
            base_digest,
            base_local: request.base.registry.is_none(),
            build_arg_names,
            invocation_id: request.labels.run_id.clone(),
            builder: format!(
                "{}, {}",
                self.docker.provider_version().unwrap_or_default(),
                self.builder().await?.describe()
            ),
            started: started.to_owned(),
            finished: now.clone(),
        };
        let tool = format!("sandbox-matrix-{}", env!("CARGO_PKG_VERSION"));
        let statements = [
            (
                attest::SPDX_PREDICATE,
                attest::sbom(&subject, &installed, &now, &tool),
            ),
            (
                attest::SLSA_PREDICATE,
                attest::provenance(&subject, &provenance),
            ),
        ];
        let image_manifest = image.manifest.digest.clone();
        let (layers, reused) = (image.layers.clone(), image.reused);
        let artifact = oci::assemble(image, platform, &statements);
        let reference = oci::push(repository, &self.settings.push, &artifact).await?;
        let count = layers.len();
        self.layers
            .lock()
            .expect("pushed layers lock")
            .extend(layers);
        let pushed = Pushed {
            image_id: image_id.to_owned(),
            image_manifest,
            push: began.elapsed(),
            size: artifact.size(),
            pulled: false,
        };
        log(&format!(
            "pushed {reference} as {} ({} bytes in all) in {:.1} s{}",
            self.settings.push.username,
            pushed.size,
            pushed.push.as_secs_f64(),
            if reused > 0 {
                format!(
                    "; {reused} of {count} layers already in the registry, named and not gzipped again"
                )
            } else {
                String::new()
            }
        ));
        Ok((reference, pushed))
    }

    /// The layers among `diff_ids` that this provider pushed before and the repository
    /// still holds, as a registry client remembers its layers' digests so that a push
    /// compresses and uploads only what is new.
    async fn layers_held(&self, diff_ids: &[String]) -> Result<HashMap<String, oci::PushedLayer>> {
        let known: HashMap<String, oci::PushedLayer> = {
            let layers = self.layers.lock().expect("pushed layers lock");
            diff_ids
                .iter()
                .filter_map(|id| Some((id.clone(), layers.get(id)?.clone())))
                .collect()
        };
        let digests: Vec<String> = known.values().map(|l| l.digest.clone()).collect();
        let held =
            oci::blobs_held(&self.settings.repository, &self.settings.push, &digests).await?;
        Ok(known
            .into_iter()
            .filter(|(_, layer)| held.contains(&layer.digest))
            .collect())
    }

    /// Removes the local copy of `pushed`'s image, pulls `reference` by digest as the
    /// read-only user and checks the engine now holds the very image that was pushed.
    async fn pull(&self, reference: &str, pushed: &Pushed) -> Result<()> {
        let engine = self.docker.engine();
        match engine
            .remove_image(
                &pushed.image_id,
                Some(RemoveImageOptionsBuilder::default().force(true).build()),
                None,
            )
            .await
        {
            Ok(_)
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => {
                return Err(crate::docker::engine_error(e)
                    .context("removing the local copy before the pull"));
            }
        }
        crate::docker::pull::pull_as(
            engine,
            reference,
            Some(crate::docker::docker_credentials(&self.settings.pull)),
            &|line| tracing::debug!("{line}"),
        )
        .await?;
        let pulled = engine
            .inspect_image(reference)
            .await
            .map_err(|e| crate::docker::engine_error(e).context(format!("inspecting {reference}")))?
            .id
            .unwrap_or_default();
        if pulled != pushed.image_id {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{reference} pulled as image {pulled}, but the image pushed was {}",
                    pushed.image_id
                ),
            ));
        }
        Ok(())
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

#[async_trait]
impl Housekeeping for DatalayerProvider {
    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.docker.record_creates(log);
    }

    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        self.docker.list_resources(labels).await
    }

    /// A `manifest` (an index pushed by digest, with the manifests it lists) is deleted
    /// from the registry with the push credential, then from the engine its pulled copy
    /// and the image built for it, where the engine still holds them (a rebuild's image is
    /// pushed but never launched, so no pull removed it); anything else is the engine's.
    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        if resource.kind == MANIFEST_RESOURCE {
            let reference = DigestReference::parse(&resource.id)?;
            let deleted = oci::delete(&reference, &self.settings.push).await?;
            let built = self
                .pushed
                .lock()
                .expect("pushed table lock")
                .get(&resource.id)
                .map(|p| p.image_id.clone());
            // The engine's image delete: forced, and done where the image is gone already.
            for id in std::iter::once(resource.id.clone()).chain(built) {
                self.docker
                    .delete_resource(&Resource {
                        kind: "image".into(),
                        id,
                    })
                    .await?;
            }
            return Ok(deleted);
        }
        self.docker.delete_resource(resource).await
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        (artifact.kind == ARTIFACT_KIND).then(|| Resource {
            kind: MANIFEST_RESOURCE.into(),
            id: artifact.id.clone(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        self.docker.sandbox_resource(sandbox)
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        self.docker.list_labelled(run_id).await
    }
}

impl DatalayerProvider {
    /// Whether the engine holds the image `reference` names.
    async fn holds(&self, reference: &str) -> Result<bool> {
        match self.docker.engine().inspect_image(reference).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => {
                Err(crate::docker::engine_error(e).context(format!("inspecting {reference}")))
            }
        }
    }

    /// The local image of `artifact`, by the engine's id.
    fn local(&self, artifact: &Artifact) -> Result<Artifact> {
        let pushed = self.pushed(artifact).ok_or_else(|| {
            ProviderError::new(
                ErrorKind::NotFound,
                format!("{} was not pushed by this run", artifact.id),
            )
        })?;
        Ok(Artifact {
            id: pushed.image_id,
            kind: "image-id".into(),
        })
    }
}
