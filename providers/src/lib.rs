//! The `Provider` trait every sandbox variant implements, its capabilities,
//! typed errors, and one module per variant.

pub mod api;
pub mod context;
pub mod datalayer;
pub mod daytona;
pub mod docker;
pub mod e2b;
pub mod error;
pub mod jupyter;
pub mod modal;
pub mod process;
pub mod registry;
mod secret;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use error::{ErrorKind, ProviderError};
pub use secret::Secret;

/// Receives progress and log lines, one call per line.
pub type LogFn = dyn for<'s> Fn(&'s str) + Send + Sync;

/// Result type of every provider call.
pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// Label key every resource of a run carries; its value is the run id.
pub const RUN_LABEL: &str = "sandbox-matrix.run";
/// Label key naming the variant that created a resource.
pub const VARIANT_LABEL: &str = "sandbox-matrix.variant";
/// Label key naming the scenario that created a resource.
pub const SCENARIO_LABEL: &str = "sandbox-matrix.scenario";

/// How a variant restarts the code channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartKind {
    /// The kernel restarts inside a running sandbox.
    Kernel,
    /// The whole sandbox is stopped and started (no kernel restart exists).
    Sandbox,
    /// The variant cannot restart.
    Unsupported,
}

/// How build logs reach the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildLogMode {
    /// Pushed as they are written.
    Streamed,
    /// Fetched by polling, some time behind.
    Polled,
    /// Not available.
    None,
}

/// How the end of a sandbox can be seen when it is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShutdownObservation {
    /// PID 1 is sent SIGTERM and its exit (or the kill after the grace period) is seen.
    Signal,
    /// The sandbox is stopped or deleted through an API call; how PID 1 ended cannot be
    /// seen.
    Api,
}

/// How a variant can bound a sandbox's life when it creates it ([`Provider::launch_for`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "counts")]
pub enum LifetimeLimit {
    /// No limit can be asked for: a sandbox runs until it is stopped.
    #[default]
    None,
    /// The provider ends the sandbox this long after its create, whatever it does (E2B's
    /// `timeout`, Modal's `timeout_secs`, Datalayer's `credits_limit` at the burning rate).
    SinceCreate {
        /// The limit's unit: a limit asked for is a whole number of these seconds.
        unit_secs: u64,
    },
    /// The provider stops the sandbox this long after its last activity (Daytona's
    /// `autoStopInterval`, in minutes of no toolbox call).
    SinceActivity {
        /// The limit's unit: a limit asked for is a whole number of these seconds.
        unit_secs: u64,
    },
}

impl LifetimeLimit {
    /// `wanted` rounded up to a whole number of the limit's unit, at least one; `None` when
    /// no limit can be asked for.
    pub fn asked(self, wanted: Duration) -> Option<Duration> {
        let unit = match self {
            LifetimeLimit::None => return None,
            LifetimeLimit::SinceCreate { unit_secs }
            | LifetimeLimit::SinceActivity { unit_secs } => unit_secs.max(1),
        };
        let units = wanted
            .as_nanos()
            .div_ceil(u128::from(unit) * 1_000_000_000)
            .max(1);
        Some(Duration::from_secs(
            u64::try_from(units).unwrap_or(u64::MAX / unit) * unit,
        ))
    }
}

/// What a variant can do; the runner skips, with a reason, any step a
/// variant cannot perform instead of passing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Builds an artifact from an environment directory.
    pub build: bool,
    /// How restart works.
    pub restart: RestartKind,
    /// How build logs arrive.
    pub build_logs: BuildLogMode,
    /// Runs commands as root in the sandbox (a full view for the secrets scan).
    pub exec_as_root: bool,
    /// The secrets scan runs the image's doctor (`datalayer-sandbox scan-secrets`, native
    /// and parallel) through exec as root, and the Python probe only when the doctor
    /// cannot; without it, the Python probe is the scanner. Only meaningful with
    /// `exec_as_root`.
    #[serde(default)]
    pub doctor_scan: bool,
    /// The artifact's metadata (env, labels, history) can be read.
    pub artifact_metadata: bool,
    /// Measures the floor: bare python in a fresh sandbox and a kernel's first answer.
    pub floor: bool,
    /// How many kernel contexts can run at once in one sandbox; below 2, check 14 has
    /// nothing to test.
    pub concurrent_contexts: u32,
    /// The code channel keeps state between calls (a kernel), so a restart can be shown
    /// by a marker that is gone after it; without it, restart and check 7 are skipped.
    #[serde(default)]
    pub stateful_code: bool,
    /// How a stopped sandbox's end is seen.
    #[serde(default = "signal_observed")]
    pub shutdown: ShutdownObservation,
    /// How many GPUs a sandbox can be given; 0 when the variant attaches none.
    #[serde(default)]
    pub gpus: u32,
    /// The variant can apply an egress policy (hosts a sandbox may not reach), so blocked
    /// targets can be checked.
    #[serde(default)]
    pub egress_policy: bool,
    /// The provider's API lists the artifacts a run built (images, templates, snapshots)
    /// by the run's labels or names. When not, they are known only from what this client
    /// built, and a leak of one cannot be counted from the provider's own listing.
    #[serde(default = "listed")]
    pub artifacts_listed: bool,
    /// A provenance attestation is kept beside each artifact built, where anyone with
    /// pull access can read it ([`Provider::provenance`]); without one, the `base-chain`
    /// step has nothing to audit.
    #[serde(default)]
    pub provenance: bool,
    /// How a sandbox's life can be bounded at create; without a limit, the `lifetime`
    /// step has nothing to test.
    #[serde(default)]
    pub lifetime: LifetimeLimit,
}

fn signal_observed() -> ShutdownObservation {
    ShutdownObservation::Signal
}

fn listed() -> bool {
    true
}

/// `text` in double quotes, its quotes and control characters escaped, so that a message
/// shows exactly what a program printed or which value was refused, on one line.
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", text.escape_debug())
}

/// A duration for a person: `1m 5s`, `300ms`.
pub fn for_people(duration: std::time::Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// What a provider says of a sandbox when a step fails ([`Provider::sandbox_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    /// Running: it took the step's call and did not answer, or answered wrongly.
    Running,
    /// Paused (frozen): it cannot answer.
    Paused,
    /// No longer running.
    Stopped {
        /// How it ended, for a person: `killed (exit 137)`, `exited with code 3`.
        ending: String,
        /// Its main process's exit code, where the provider tells it.
        exit_code: Option<i64>,
        /// Its last log lines, oldest first.
        last_log_lines: Vec<String>,
    },
}

/// Labels that mark every resource a run creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabels {
    /// The run id, unique per run.
    pub run_id: String,
    /// The variant name.
    pub variant: String,
    /// The scenario name.
    pub scenario: String,
}

impl RunLabels {
    /// The labels as a key/value map, as the provider APIs take them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (RUN_LABEL.to_owned(), self.run_id.clone()),
            (VARIANT_LABEL.to_owned(), self.variant.clone()),
            (SCENARIO_LABEL.to_owned(), self.scenario.clone()),
        ])
    }
}

/// The base image an environment builds `FROM`, as the run resolved its
/// [`BASE_ARG`] build argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseImage {
    /// `<registry>/<repository>@sha256:<digest>`, or the local bootstrap's tag when the
    /// base is only in the local engine.
    pub reference: String,
    /// The registry host (`host[:port]`) holding it; `None` for a local-only base.
    pub registry: Option<String>,
}

impl BaseImage {
    /// A base that exists only in the local engine, named by `tag`.
    pub fn local(tag: impl Into<String>) -> Self {
        Self {
            reference: tag.into(),
            registry: None,
        }
    }
}

/// The name of the base among an SLSA provenance's `resolvedDependencies`, as this
/// project's providers write it and the `base-chain` step reads it.
pub const PROVENANCE_BASE: &str = "base";
/// The annotation of a base dependency that only the building engine holds: no registry
/// serves it, and its digest is the engine's image id.
pub const PROVENANCE_LOCAL: &str = "local";

/// An attestation pulled from where the provider keeps it ([`Provider::provenance`]).
#[derive(Debug, Clone)]
pub struct PulledAttestation {
    /// Where it was read, for a person: `registry 127.0.0.1:5000, index sha256:…`.
    pub from: String,
    /// The `sha256:<hex>` digest of the image the store lists the attestation for.
    pub image_digest: String,
    /// The in-toto statement, as pulled.
    pub statement: Vec<u8>,
}

/// The build argument, declared before the first `FROM`, that names an environment's base.
pub const BASE_ARG: &str = "BASE_IMAGE";

/// How a registry credential was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialSource {
    /// A login token from ECR's `GetAuthorizationToken`, made for this run.
    EcrLoginToken,
    /// A user and password taken from the environment.
    Static,
}

/// The credential for the registry that holds the base, made once per run. Its
/// password is a [`Secret`]: never printed, never written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryCredential {
    /// Registry host (`host[:port]`) the credential is for.
    pub registry: String,
    /// User name (`AWS` for an ECR login token).
    pub username: String,
    /// The password or token.
    pub password: Secret,
    /// How it was made.
    pub source: CredentialSource,
}

/// What to build: an environment directory (a Dockerfile and its context).
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// Directory holding the environment's Dockerfile and build context.
    pub environment_dir: PathBuf,
    /// The base the Dockerfile's [`BASE_ARG`] resolves to.
    pub base: BaseImage,
    /// The credential for the base's registry, when it has one.
    pub registry_credential: Option<RegistryCredential>,
    /// Build-time credentials handed to the builder the way a registry token
    /// would be; none of them may remain in the artifact.
    pub build_secrets: Vec<Secret>,
    /// Labels for the artifact.
    pub labels: RunLabels,
}

impl BuildRequest {
    /// How the base's credential was made, as the table's "Credential for the private base"
    /// row starts: `ECR login token, made for this run`, `static credential from
    /// SANDBOX_MATRIX_REGISTRY_USER`, `none: local base`, or `none: the registry lets anyone
    /// pull`. A provider's [`Provider::credential_use`] adds what it did with it.
    pub fn credential_made(&self) -> String {
        match (&self.registry_credential, &self.base.registry) {
            (Some(c), _) => c.source.made(),
            (None, None) => "none: local base".to_owned(),
            (None, Some(_)) => "none: the registry lets anyone pull".to_owned(),
        }
    }
}

/// An immutable artifact a sandbox is launched from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// The immutable id: a digest, image id, build id or snapshot id.
    pub id: String,
    /// What kind of id `id` is.
    pub kind: String,
}

/// What a build measured of its artifact beyond the build step's own duration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArtifactFacts {
    /// Spans inside the build, such as the datalayer variant's `push`.
    pub timings: Vec<Timing>,
    /// The artifact's compressed size in bytes, where the build pushed it somewhere.
    pub compressed_bytes: Option<u64>,
}

/// A sandbox started by a provider, named by the provider's id for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxId(pub String);

/// A timing measured inside a provider call, beside the step's own duration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Stable name, such as `kernel-start-to-first-answer`.
    pub name: String,
    /// The measured span.
    #[serde(with = "duration_ms")]
    pub duration: Duration,
    /// The poll interval that bounds the measurement's resolution, if it was polled.
    #[serde(
        default,
        with = "opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub resolution: Option<Duration>,
}

/// What one piece of code produced on the code channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeOutput {
    /// Text written to stdout.
    pub stdout: String,
    /// Text written to stderr.
    pub stderr: String,
    /// The `text/plain` value of the last expression, if any.
    pub result: Option<String>,
    /// `ename: evalue` when the code raised.
    pub error: Option<String>,
}

/// What a command run in the sandbox produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit code, if the command exited.
    pub exit_code: Option<i64>,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
}

/// How a sandbox ended when it was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShutdownEnding {
    /// PID 1 was running when SIGTERM was delivered and exited within the grace period,
    /// with 0 or SIGTERM's code (143).
    ExitedOnSigterm,
    /// PID 1 was running when SIGTERM was delivered and exited within the grace period with
    /// another code (the exit code says which): not a clean exit.
    ExitedWithError,
    /// PID 1 had already exited when the stop was sent: the sandbox ended on its own (a
    /// crash, say), and no shutdown was seen.
    AlreadyExited,
    /// The grace period ran out and the sandbox was killed.
    Killed,
    /// Ended through an API call (a stop or delete): how PID 1 ended cannot be seen, so it is never
    /// counted as a graceful exit.
    NotObservable,
    /// The provider does not say.
    Unknown,
}

/// The provider's account of a shutdown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownReport {
    /// How it ended.
    pub ending: ShutdownEnding,
    /// The exit code of PID 1, where known.
    pub exit_code: Option<i64>,
}

/// A resource a provider created, found by listing the run's label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// Kind, such as `container` or `image`.
    pub kind: String,
    /// The provider's id for it.
    pub id: String,
}

/// What [`Housekeeping::delete_resource`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// It existed, and the provider removed it.
    Removed,
    /// It was gone already (the provider answered not found, or this client had removed it).
    AlreadyGone,
    /// A build that may have gone on without its client: the provider stopped it or waited
    /// for it to end; says what it waited for.
    Settled(String),
}

impl std::fmt::Display for Deleted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Deleted::Removed => f.write_str("removed"),
            Deleted::AlreadyGone => f.write_str("already gone"),
            Deleted::Settled(what) => f.write_str(what),
        }
    }
}

/// A resource found by its run label alone, with what its labels and the provider say of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// The resource.
    pub resource: Resource,
    /// Its run label's value.
    pub run_id: String,
    /// Its scenario label, when it has one.
    pub scenario: Option<String>,
    /// When the provider says it was created.
    pub created: Option<std::time::SystemTime>,
}

/// The run ledger as a provider sees it: where it records what a call creates part-way (an
/// e2b template before its build, a Daytona registry entry during one), before and after
/// each create, so a run killed in the middle of the call still names it.
pub trait CreateLog: Send + Sync {
    /// Records that `labels.variant` is about to create a `kind` for `labels.scenario`;
    /// returns the number [`CreateLog::created`] takes. An error means nothing may be made.
    fn intent(&self, labels: &RunLabels, kind: &str) -> std::result::Result<u64, String>;

    /// Records the provider's id for what intent `seq` created, as its delete takes it.
    fn created(
        &self,
        seq: u64,
        labels: &RunLabels,
        resource: &Resource,
    ) -> std::result::Result<(), String>;

    /// Records that `resource`, created for `labels`, is gone: deleted, or a build that
    /// ended; cleanup and `sweep` then leave it alone.
    fn gone(&self, labels: &RunLabels, resource: &Resource) -> std::result::Result<(), String>;
}

/// The [`CreateLog`] a provider was given by [`Housekeeping::record_creates`], if any.
#[derive(Default)]
pub(crate) struct CreateRecorder(Mutex<Option<Arc<dyn CreateLog>>>);

impl CreateRecorder {
    fn log(&self) -> Option<Arc<dyn CreateLog>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set(&self, log: Arc<dyn CreateLog>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(log);
    }

    /// [`CreateLog::intent`]; when it cannot be recorded, nothing is to be created.
    pub(crate) fn intent(&self, labels: &RunLabels, kind: &str) -> Result<Option<u64>> {
        self.log()
            .map(|l| l.intent(labels, kind))
            .transpose()
            .map_err(|e| ProviderError::new(ErrorKind::Config, format!("{e}: nothing created")))
    }

    /// [`CreateLog::created`] for intent `seq`; a write that fails is a warning on `log`.
    pub(crate) fn created(
        &self,
        seq: Option<u64>,
        labels: &RunLabels,
        resource: &Resource,
        log: &LogFn,
    ) {
        if let (Some(ledger), Some(seq)) = (self.log(), seq)
            && let Err(e) = ledger.created(seq, labels, resource)
        {
            log(&format!("warning: {e}"));
        }
    }

    /// [`CreateLog::gone`]; a write that fails is a warning on `log`.
    pub(crate) fn gone(&self, labels: &RunLabels, resource: &Resource, log: &LogFn) {
        if let Some(ledger) = self.log()
            && let Err(e) = ledger.gone(labels, resource)
        {
            log(&format!("warning: {e}"));
        }
    }
}

/// One sandbox provider variant.
///
/// A provider only knows how to talk to its service: the runner owns timing,
/// deadlines, retries and cleanup. Calls a variant cannot serve return
/// [`ErrorKind::Unsupported`], and its [`Capabilities`] say so up front.
#[async_trait]
pub trait Provider: Housekeeping + Send + Sync {
    /// The variant's name, as scenarios and reports use it.
    fn variant(&self) -> &str;

    /// What this variant can do.
    fn capabilities(&self) -> Capabilities;

    /// The provider's API, SDK or engine version, for provenance.
    fn provider_version(&self) -> Option<String> {
        None
    }

    /// The region or location the provider runs sandboxes in, where known, for provenance.
    fn region(&self) -> Option<String> {
        None
    }

    /// How the local base this variant builds on was made, once [`Provider::prepare`]
    /// made or reused it, for provenance (the docker variant: from the Debian image by
    /// digest, or by mmdebstrap); `None` for a variant with no local base.
    fn base_made_from(&self) -> Option<String> {
        None
    }

    /// Makes the variant ready to build from `base`, the run's base (the docker variant
    /// bootstraps the local base image; a base in a registry is pulled by the build).
    /// Runs once per run, before any scenario, and is not timed as a step.
    async fn prepare(&self, _base: &BaseImage, _progress: &LogFn) -> Result<()> {
        Ok(())
    }

    /// For a variant that builds nothing ([`Capabilities::build`] unset) because its
    /// platform builds environments and launches them by name: the artifact a `build` step
    /// hands to launch instead, and the reason the step gives for skipping. `None` for a
    /// variant that builds.
    fn platform_artifact(&self) -> Option<(Artifact, String)> {
        None
    }

    /// Builds the environment and returns its immutable id. `log` receives build log lines.
    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact>;

    /// What the build of `artifact` measured beyond its duration (a push and its size), for
    /// the build step's result; the runner asks once after each build that passed. The
    /// default has nothing.
    fn artifact_facts(&self, _artifact: &Artifact) -> ArtifactFacts {
        ArtifactFacts::default()
    }

    /// The provenance kept beside `artifact` (see [`Capabilities::provenance`]), pulled
    /// anew from where the provider keeps it, never from what this client remembers of the
    /// build. The default has none.
    async fn provenance(&self, _artifact: &Artifact) -> Result<PulledAttestation> {
        Err(ProviderError::new(
            ErrorKind::Unsupported,
            format!("the {} variant keeps no provenance", self.variant()),
        ))
    }

    /// A read-only call that proves the variant's service answers with the credentials it
    /// was made with (the engine's version, a page of templates or snapshots); it creates
    /// nothing. Returns what it saw, for `preflight`.
    async fn check_access(&self) -> Result<String> {
        Err(ProviderError::unsupported("a read-only access check"))
    }

    /// What this variant did with the base's registry credential in the build of `request`,
    /// for the table's "Credential for the private base" row: the runner asks once after
    /// each build, passed or failed, so a provider may say what became of what it made from
    /// the credential (`…; registry entry, deleted after the build`). Start from
    /// [`BuildRequest::credential_made`]. The default says a credential was not handed on.
    fn credential_use(&self, request: &BuildRequest) -> String {
        match &request.registry_credential {
            Some(_) => format!(
                "{}; not handed to this variant's builder",
                request.credential_made()
            ),
            None => request.credential_made(),
        }
    }

    /// Starts a sandbox from the artifact's immutable id and waits until it runs.
    /// Returns the sandbox and timings measured on the way (such as readiness polls).
    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)>;

    /// Starts a sandbox as [`Provider::launch`] does, asking the provider to end it
    /// `lifetime` after its create or its last activity, as [`Capabilities::lifetime`]
    /// says; `lifetime` is a whole number of the limit's unit ([`LifetimeLimit::asked`]).
    async fn launch_for(
        &self,
        _artifact: &Artifact,
        _labels: &RunLabels,
        _lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        Err(ProviderError::unsupported("bound a sandbox's lifetime"))
    }

    /// Runs code through the variant's code channel (a kernel where there is one).
    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)>;

    /// Runs code in context `context`, a kernel of its own, so that several contexts can
    /// run at once (see [`Capabilities::concurrent_contexts`]).
    async fn run_code_in(
        &self,
        _sandbox: &SandboxId,
        _context: &str,
        _code: &str,
    ) -> Result<CodeOutput> {
        Err(ProviderError::unsupported("run code in separate contexts"))
    }

    /// Runs a command in the sandbox, as root when `as_root` is set.
    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput>;

    /// Restarts the code channel (see [`Capabilities::restart`]).
    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>>;

    /// Stops the sandbox, giving PID 1 `grace` to exit after SIGTERM.
    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport>;

    /// The artifact's metadata as text (env, labels, history), for the secrets scan.
    async fn artifact_metadata(&self, artifact: &Artifact) -> Result<String>;

    /// What the provider says of `sandbox` now: running, paused, or how it ended, with its
    /// last log lines. Asked when a step after launch fails, so that the failure says what
    /// happened to the sandbox; `None` where the provider cannot say.
    async fn sandbox_state(&self, _sandbox: &SandboxId) -> Result<Option<SandboxState>> {
        Ok(None)
    }

    /// Measures the floor on the same artifact: bare `python3 -c 'print(1+1)'`
    /// in a fresh sandbox, and a kernel's first answer (see [`Capabilities::floor`]).
    async fn floor(&self, _artifact: &Artifact, _labels: &RunLabels) -> Result<Vec<Timing>> {
        Err(ProviderError::unsupported("measure the floor"))
    }

    /// True when the variant's calls must be made one at a time, in the scenario's order:
    /// its exchanges are being recorded into, or replayed from, a cassette. The runner then
    /// runs no two steps at once.
    fn ordered_calls(&self) -> bool {
        false
    }

    /// The emulator that answered this provider's calls, as it announced itself in its
    /// answers ([`api::EMULATOR_HEADER`]), when one did: a run reaching an emulator through
    /// live settings is then labelled emulated, never live. Never set by a replay.
    fn emulator(&self) -> Option<String> {
        None
    }
}

/// What a variant leaves behind and how it is found and removed: the run ledger's, the
/// orphan audit's and `sweep`'s side of a provider, apart from the sandbox lifecycle of
/// [`Provider`]. Every provider is one (`Provider: Housekeeping`), so a `dyn Provider`
/// answers these too.
#[async_trait]
pub trait Housekeeping: Send + Sync {
    /// Lists every resource carrying all of `labels` (run, variant and scenario).
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>>;

    /// Deletes one resource and says whether it was there; deleting one already gone is not
    /// an error.
    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted>;

    /// The resource [`Housekeeping::delete_resource`] removes for an artifact this variant
    /// built, for the run ledger; `None` when the variant has no such resource to delete.
    fn artifact_resource(&self, _artifact: &Artifact) -> Option<Resource> {
        None
    }

    /// The resource [`Housekeeping::delete_resource`] removes for a sandbox this variant
    /// launched, for the run ledger; `None` when the variant does not say.
    fn sandbox_resource(&self, _sandbox: &SandboxId) -> Option<Resource> {
        None
    }

    /// Hands the variant the run ledger, so that it records what its calls create part-way
    /// (before and after each create). The default keeps nothing: the runner records what
    /// each call returns.
    fn record_creates(&self, _log: Arc<dyn CreateLog>) {}

    /// Lists every resource carrying the run label, of run `run_id` or, with `None`, of
    /// any run, whatever its variant and scenario labels (a resource whose build stopped
    /// part-way, or of a scenario loaded from anywhere). Variants that can only list by all
    /// three labels say [`ErrorKind::Unsupported`].
    async fn list_labelled(&self, _run_id: Option<&str>) -> Result<Vec<Labelled>> {
        Err(ProviderError::unsupported(
            "list resources by the run label alone",
        ))
    }
}

/// The text of `dir/Dockerfile`; the error names the file.
pub(crate) fn read_dockerfile(dir: &std::path::Path) -> Result<String> {
    let path = dir.join("Dockerfile");
    // A Dockerfile that is a symlink out of the environment folder is not read.
    if path.symlink_metadata().is_ok() {
        context::check(dir, &path, "Dockerfile").map_err(|why| {
            ProviderError::new(ErrorKind::Config, format!("{}: {why}", path.display()))
        })?;
    }
    std::fs::read_to_string(&path).map_err(|e| {
        ProviderError::new(
            ErrorKind::Config,
            format!("cannot read {}: {e}", path.display()),
        )
    })
}

/// The run id and scenario a resource name holds after its `prefix`, as
/// `<prefix><run-id>-<scenario>` names them, whatever case the provider folded the name to;
/// `None` when the name is not one of a run's. A run id is `YYYYMMDDTHHMMSSZ-xxxxxx`.
pub(crate) fn run_of_name(prefix: &str, name: &str) -> Option<(String, String)> {
    let rest = name
        .get(..prefix.len())?
        .eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])?;
    let (id, scenario) = (rest.get(..23)?, rest.get(23..)?.strip_prefix('-')?);
    let b = id.as_bytes();
    let shaped = b.iter().enumerate().all(|(i, c)| match i {
        8 => c.eq_ignore_ascii_case(&b'T'),
        15 => c.eq_ignore_ascii_case(&b'Z'),
        16 => *c == b'-',
        17.. => c.is_ascii_hexdigit(),
        _ => c.is_ascii_digit(),
    });
    shaped.then(|| {
        (
            format!(
                "{}T{}Z-{}",
                &id[..8],
                &id[9..15],
                id[17..].to_ascii_lowercase()
            ),
            scenario.to_owned(),
        )
    })
}

/// An RFC 3339 time as a provider writes it, if it is one.
pub(crate) fn parse_time(text: Option<&str>) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339_weak(text?).ok()
}

/// The last `max` bytes of `text` or fewer, starting on a character boundary: how errors
/// quote a long output.
pub fn tail(text: &str, max: usize) -> &str {
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::{run_of_name, tail};

    #[test]
    fn run_names_give_back_their_run_id_and_scenario() {
        assert_eq!(
            run_of_name("sm-", "sm-20261201t061500z-00abcf-core-tier"),
            Some(("20261201T061500Z-00abcf".into(), "core-tier".into()))
        );
        assert_eq!(
            run_of_name(
                "sandbox-matrix-",
                "sandbox-matrix-20261201T061500Z-00abcf-x"
            ),
            Some(("20261201T061500Z-00abcf".into(), "x".into()))
        );
        assert_eq!(run_of_name("sm-", "sm-my-own-template"), None);
        assert_eq!(run_of_name("sm-", "sm-20261201t061500z-00abcf"), None);
        assert_eq!(run_of_name("sm-", "other"), None);
        assert!(super::parse_time(Some("2026-01-01T00:00:00.000Z")).is_some());
        assert!(super::parse_time(Some("2026-01-01T00:00:00Z")).is_some());
        assert_eq!(super::parse_time(Some("yesterday")), None);
    }

    #[test]
    fn a_lifetime_asked_for_is_rounded_up_to_whole_units() {
        use super::LifetimeLimit;
        use std::time::Duration;
        let seconds = LifetimeLimit::SinceCreate { unit_secs: 1 };
        let minutes = LifetimeLimit::SinceActivity { unit_secs: 60 };
        let s = Duration::from_secs;
        assert_eq!(seconds.asked(s(6)), Some(s(6)));
        assert_eq!(seconds.asked(Duration::from_millis(6_500)), Some(s(7)));
        assert_eq!(seconds.asked(Duration::from_millis(500)), Some(s(1)));
        assert_eq!(seconds.asked(Duration::ZERO), Some(s(1)));
        assert_eq!(minutes.asked(s(60)), Some(s(60)));
        assert_eq!(minutes.asked(s(61)), Some(s(120)));
        assert_eq!(minutes.asked(Duration::from_millis(60_001)), Some(s(120)));
        assert_eq!(minutes.asked(s(5)), Some(s(60)));
        assert_eq!(LifetimeLimit::None.asked(s(60)), None);
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("hello", 3), "llo");
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("hi", 10), "hi");
    }
}

/// Serde for a `Duration` as fractional milliseconds, as results files hold them.
pub mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }

    /// Reads milliseconds into a `Duration`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1000.0).map_err(serde::de::Error::custom)
    }
}

/// Serde for an optional `Duration` as fractional milliseconds or null.
pub mod opt_duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as milliseconds, or null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration_ms::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Reads milliseconds or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|ms| Duration::try_from_secs_f64(ms / 1000.0).map_err(serde::de::Error::custom))
            .transpose()
    }
}
