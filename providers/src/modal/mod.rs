//! The modal variant: Modal's gRPC control plane (`modal.client.ModalClient`) and a task's
//! command router (`modal.task_command_router.TaskCommandRouter`).
//!
//! Build: the environment's Dockerfile as Modal's `dockerfile_commands` (the base argument
//! resolved), the files its `COPY`s name as context files, the base's registry credential
//! and the run's build secret as ephemeral Secrets deleted after the build; the image id is
//! the artifact. Launch: a sandbox of that image id running the image's own command (the
//! contract base's Jupyter Server), its task, and the code channel ([`channel`]) installed
//! and waiting for the server. Every exec re-asserts the contract's user (Modal runs execs
//! as root otherwise) except the root ones the secrets scan asks for.

pub mod channel;
pub mod client;
pub mod proto;
pub mod router;
pub mod sandbox;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use self::client::{ControlPlane, Credentials};
use self::proto::client::{
    ClientHelloResponse, ImageContextFile, ImageDeleteRequest, SandboxListRequest, SandboxTag,
};
use self::router::Router;
use crate::Deleted;
use crate::api::Volatiles;
use crate::api::grpc::{GrpcOptions, Recorder};
use crate::api::settings::Settings;
use crate::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, CreateLog,
    CreateRecorder, ErrorKind, Housekeeping, Labelled, LifetimeLimit, LogFn, Provider,
    ProviderError, Resource, RestartKind, Result, RunLabels, SandboxId, Secret, ShutdownEnding,
    ShutdownObservation, ShutdownReport, Timing,
};

/// What the client was written against.
pub const API_VERSION: &str = "Modal client API of modal 1.6.4 (subset protos)";
/// The artifact kind: a Modal image id.
pub const ARTIFACT_KIND: &str = "modal-image";
/// The app every sandbox-matrix sandbox and image belongs to.
pub const APP_NAME: &str = "sandbox-matrix";
/// Resource kind of a sandbox.
const KIND_SANDBOX: &str = "sandbox";
/// Resource kind of an image.
const KIND_IMAGE: &str = "image";
/// How long a build may take.
const BUILD_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How long a new sandbox may take to get a task.
const TASK_DEADLINE: Duration = Duration::from_secs(120);
/// How long launch waits for the Jupyter Server once the sandbox has a task.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How often the channel looks for the server while it waits.
const READY_POLL: Duration = Duration::from_millis(50);
/// How long a sandbox lives before Modal ends it, should cleanup never run.
/// The image builder version a build asks for when `MODAL_IMAGE_BUILDER_VERSION` is not
/// set. The official client asks for its environment's setting (or that variable's); this
/// one is pinned, so that a night's image does not change with a dashboard setting.
pub const DEFAULT_IMAGE_BUILDER_VERSION: &str = "2025.06";

/// Names the image builder version a build asks for.
pub const IMAGE_BUILDER_VERSION_VAR: &str = "MODAL_IMAGE_BUILDER_VERSION";

/// The region sandboxes are placed in when [`REGION_VAR`] is not set: `us`, Modal's broad
/// US region. Set, rather than left to Modal, so that a night's timings do not move with
/// where Modal happens to place a sandbox (left free, the spike's ran in FRA2). Modal
/// bills a sandbox with a region at a multiplier (its region-selection guide).
pub const DEFAULT_REGION: &str = "us";

/// Names the region (or a narrower location, such as `us-east`) sandboxes are placed in.
pub const REGION_VAR: &str = "SANDBOX_MATRIX_MODAL_REGION";

/// The image builder versions the official client 1.6.4 accepts (`modal/_image.py`,
/// `ImageBuilderVersion`).
pub const IMAGE_BUILDER_VERSIONS: &[&str] = &[
    "2023.12", "2024.04", "2024.10", "2025.06", "2026.10", "PREVIEW",
];

const SANDBOX_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How long one command may run.
const EXEC_TIMEOUT: Duration = Duration::from_secs(300);
/// The deadline of the short calls made here.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// The most context files one image takes in all, as one gRPC message carries them.
const MAX_CONTEXT_BYTES: usize = 2 * 1024 * 1024;
/// Kernels run at once in one sandbox: each context is a server session of its own.
const CONCURRENT_CONTEXTS: u32 = 4;

/// What the modal variant can do.
pub const CAPABILITIES: Capabilities = Capabilities {
    build: true,
    restart: RestartKind::Kernel,
    build_logs: BuildLogMode::Streamed,
    exec_as_root: true,
    doctor_scan: false,
    // Modal's API gives no image env, labels or history.
    artifact_metadata: false,
    floor: false,
    concurrent_contexts: CONCURRENT_CONTEXTS,
    stateful_code: true,
    shutdown: ShutdownObservation::Api,
    gpus: 0,
    egress_policy: false,
    // Modal lists sandboxes by tag, but no image by anything: the images a run built are
    // known only from this client, so a leaked one cannot be counted from a listing.
    artifacts_listed: false,
    provenance: false,
    // `Sandbox.timeout_secs`, whole seconds from create (api.proto).
    lifetime: LifetimeLimit::SinceCreate { unit_secs: 1 },
};

/// Request metadata replay compares (the control plane's and the router's).
pub const MATCHED_METADATA: &[&str] = &client::MATCHED_METADATA;

/// How the variant reaches Modal.
#[derive(Debug, Clone)]
pub enum Connection {
    /// Modal's control plane (or `SANDBOX_MATRIX_MODAL_URL`), with the token from the
    /// environment.
    Live,
    /// As live, every call written to the recorder.
    Record(Recorder),
    /// A replay server at `server_url`, which serves the router calls too; fake
    /// credentials.
    Replay {
        /// The replay server's URL.
        server_url: String,
    },
}

/// The token replay sends: fakes, which the replay server compares as placeholders.
pub fn replay_credentials() -> Vec<Secret> {
    fake_credentials().secrets()
}

fn fake_credentials() -> Credentials {
    // Fakes: a replay reaches no service.
    Credentials {
        token_id: Secret::new(client::TOKEN_ID_VAR, "ak-sandbox-matrix-replay"),
        token_secret: Secret::new(client::TOKEN_SECRET_VAR, "as-sandbox-matrix-replay"),
    }
}

/// The token `settings` carry, for a recorder's redaction; none when it is not set.
pub fn live_credentials(settings: &Settings) -> Vec<Secret> {
    Credentials::from_lookup(|name| settings.var(name))
        .ok()
        .flatten()
        .map(|c| c.secrets())
        .unwrap_or_default()
}

/// How calls are recorded: the token of `settings` and the run's volatiles redacted, the
/// meaningful metadata kept.
pub fn record_options(volatiles: Arc<Volatiles>, settings: &Settings) -> GrpcOptions {
    record_options_with(live_credentials(settings), volatiles)
}

/// [`record_options`] redacting `credentials`.
pub fn record_options_with(credentials: Vec<Secret>, volatiles: Arc<Volatiles>) -> GrpcOptions {
    GrpcOptions {
        credentials,
        volatiles,
        matched_metadata: MATCHED_METADATA.iter().map(|s| (*s).to_owned()).collect(),
        ..GrpcOptions::default()
    }
}

/// The `modal` variant.
pub struct ModalProvider {
    plane: Arc<ControlPlane>,
    connection: Connection,
    volatiles: Arc<Volatiles>,
    app: tokio::sync::OnceCell<String>,
    /// Each launched sandbox's command router, by sandbox id.
    sandboxes: Mutex<HashMap<String, Arc<Router>>>,
    /// Sandboxes this client terminated and saw end: cleanup does not terminate them again.
    gone: Mutex<HashSet<String>>,
    /// Images this client built and has not deleted, with their labels: Modal lists no
    /// images by label, so cleanup learns them here (and from the run ledger).
    built: Mutex<Vec<(RunLabels, String)>>,
    /// Held by each code call when calls must keep the recorded order.
    order: tokio::sync::Mutex<()>,
    /// How long a new sandbox may take to get a task.
    task_deadline: Duration,
    /// The image builder version builds ask for.
    builder_version: String,
    /// The region sandboxes are placed in.
    region: String,
    /// Where Modal placed this client's sandboxes, as each said (`MODAL_REGION`).
    ran_in: Mutex<std::collections::BTreeSet<String>>,
    creates: CreateRecorder,
}

/// The image builder version `var` (reading the environment) names, else the default;
/// one the official client does not know is refused, naming the variable.
pub fn image_builder_version(var: impl Fn(&str) -> Option<String>) -> Result<String> {
    match var(IMAGE_BUILDER_VERSION_VAR).filter(|v| !v.trim().is_empty()) {
        None => Ok(DEFAULT_IMAGE_BUILDER_VERSION.to_owned()),
        Some(v) if IMAGE_BUILDER_VERSIONS.contains(&v.trim()) => Ok(v.trim().to_owned()),
        Some(v) => Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "{IMAGE_BUILDER_VERSION_VAR}={v} is not an image builder version modal 1.6.4 knows ({})",
                IMAGE_BUILDER_VERSIONS.join(", ")
            ),
        )),
    }
}

impl ModalProvider {
    /// Creates a sandbox from the image `artifact` names, ended by Modal `lifetime` after
    /// its create (`timeout_secs`), and waits until its channel answers.
    async fn launch_with_lifetime(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        if artifact.kind != ARTIFACT_KIND {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the modal variant launches {ARTIFACT_KIND} artifacts, not {}",
                    artifact.kind
                ),
            ));
        }
        let app = self.app().await?.to_owned();
        let started = Instant::now();
        let id = sandbox::create(
            &self.plane,
            &app,
            &artifact.id,
            Vec::new(),
            &self.region,
            labels,
            lifetime,
        )
        .await?;
        let mut timings = vec![timing("sandbox-create", started.elapsed(), None)];
        let ready = async {
            let started = Instant::now();
            let task = sandbox::task_id(&self.plane, &id, self.task_deadline).await?;
            timings.push(timing("task-assigned", started.elapsed(), None));
            let router = self.router(&task);
            let ready = channel::install_and_wait(&router, READY_DEADLINE).await?;
            timings.push(timing(
                "server-ready",
                channel::millis(ready.waited_ms),
                Some(READY_POLL),
            ));
            if let Some(region) = ready.region.filter(|r| !r.is_empty()) {
                lock(&self.ran_in).insert(region);
            }
            Ok::<_, ProviderError>(router)
        };
        match ready.await {
            Ok(router) => {
                lock(&self.sandboxes).insert(id.clone(), Arc::new(router));
                Ok((SandboxId(id), timings))
            }
            Err(e) => {
                // Never leave a sandbox behind that the caller has no id for.
                if let Err(end) = self.terminate(&id, Duration::from_secs(10)).await {
                    tracing::warn!(sandbox = %id, "could not terminate a sandbox that never became ready: {end}");
                }
                Err(e.context(format!("launch sandbox {id}")))
            }
        }
    }

    /// Connects as `connection` says: live and recording with `MODAL_TOKEN_ID` and
    /// `MODAL_TOKEN_SECRET` (both needed) at [`client::server_url`]; replaying with fakes.
    /// Every value is read from `settings`.
    pub fn from_settings(
        connection: Connection,
        volatiles: Arc<Volatiles>,
        settings: &Settings,
    ) -> Result<Self> {
        let var = |name: &str| settings.var(name);
        let builder_version = image_builder_version(var)?;
        let region = var(REGION_VAR)
            .map(|r| r.trim().to_owned())
            .unwrap_or_else(|| DEFAULT_REGION.to_owned());
        let (url, credentials) = match &connection {
            Connection::Replay { server_url } => (server_url.clone(), fake_credentials()),
            Connection::Live | Connection::Record(_) => {
                let credentials = Credentials::from_lookup(var)?.ok_or_else(|| {
                    ProviderError::new(
                        ErrorKind::Config,
                        format!(
                            "the modal variant needs {} and {} in the environment",
                            client::TOKEN_ID_VAR,
                            client::TOKEN_SECRET_VAR
                        ),
                    )
                })?;
                let url = client::server_url(var);
                (url, credentials)
            }
        };
        Ok(Self::new(&url, credentials, connection, volatiles)?
            .with_builder_version(builder_version)
            .with_region(region))
    }

    /// Connects to the control plane at `url` with `credentials`, as `connection` says
    /// (a replay's server URL is `url`).
    pub fn new(
        url: &str,
        credentials: Credentials,
        connection: Connection,
        volatiles: Arc<Volatiles>,
    ) -> Result<Self> {
        let recorder = match &connection {
            Connection::Record(r) => Some(r.clone()),
            _ => None,
        };
        let transport = client::connect(url, recorder)?;
        let plane = ControlPlane::new(transport, credentials);
        Ok(Self {
            plane: Arc::new(plane),
            connection,
            volatiles,
            app: tokio::sync::OnceCell::new(),
            sandboxes: Mutex::new(HashMap::new()),
            gone: Mutex::new(HashSet::new()),
            built: Mutex::new(Vec::new()),
            order: tokio::sync::Mutex::new(()),
            task_deadline: TASK_DEADLINE,
            builder_version: DEFAULT_IMAGE_BUILDER_VERSION.to_owned(),
            region: DEFAULT_REGION.to_owned(),
            ran_in: Mutex::default(),
            creates: CreateRecorder::default(),
        })
    }

    /// The same provider, its builds asking for image builder `version`.
    pub fn with_builder_version(mut self, version: String) -> Self {
        self.builder_version = version;
        self
    }

    /// The same provider, placing its sandboxes in `region`.
    pub fn with_region(mut self, region: String) -> Self {
        self.region = region;
        self
    }

    /// The same provider, giving a new sandbox `deadline` to get a task.
    pub fn with_task_deadline(mut self, deadline: Duration) -> Self {
        self.task_deadline = deadline;
        self
    }

    async fn app(&self) -> Result<&str> {
        self.app
            .get_or_try_init(|| sandbox::app(&self.plane, APP_NAME))
            .await
            .map(String::as_str)
    }

    fn router(&self, task_id: &str) -> Router {
        let (url, recorder) = match &self.connection {
            Connection::Live => (None, None),
            Connection::Record(r) => (None, Some(r.clone())),
            Connection::Replay { server_url } => (Some(server_url.clone()), None),
        };
        Router::new(
            self.plane.clone(),
            task_id,
            url,
            recorder,
            self.volatiles.clone(),
        )
    }

    fn router_of(&self, sandbox: &SandboxId) -> Result<Arc<Router>> {
        lock(&self.sandboxes)
            .get(&sandbox.0)
            .cloned()
            .ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::NotFound,
                    format!("sandbox {} was not launched by this run", sandbox.0),
                )
            })
    }

    /// Calls hold this while calls must keep the recorded order.
    async fn in_order(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.connection {
            Connection::Live => None,
            _ => Some(self.order.lock().await),
        }
    }

    async fn list(&self, tags: Vec<SandboxTag>) -> Result<Vec<proto::client::SandboxInfo>> {
        let request = SandboxListRequest {
            app_id: self.app().await?.to_owned(),
            tags,
            ..Default::default()
        };
        Ok(self
            .plane
            .call(
                "SandboxList",
                request,
                CALL_DEADLINE,
                |mut c, r| async move { c.sandbox_list(r).await },
            )
            .await?
            .sandboxes)
    }

    async fn terminate(&self, sandbox_id: &str, grace: Duration) -> Result<ShutdownReport> {
        let result = sandbox::terminate(&self.plane, sandbox_id, grace).await?;
        if result.is_some() {
            lock(&self.gone).insert(sandbox_id.to_owned());
        }
        Ok(ShutdownReport {
            ending: ShutdownEnding::NotObservable,
            exit_code: result.map(|r| i64::from(r.exitcode)),
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The files the Dockerfile's `COPY`s name from the build context, as Modal's context
/// files (paths relative to the environment folder); a source that leaves the folder, a
/// pattern, or more than [`MAX_CONTEXT_BYTES`] in all is refused with file:line.
pub fn context_files(dir: &Path, dockerfile: &str) -> Result<Vec<ImageContextFile>> {
    let shown = dir.join("Dockerfile");
    let mut files = Vec::new();
    let mut total = 0usize;
    for instruction in sandbox_contract::dockerfile::parse::parse(dockerfile) {
        let copies = matches!(instruction.keyword.as_str(), "COPY" | "ADD");
        if !copies
            || instruction.flags.iter().any(|f| f.name == "from")
            || !instruction.heredocs.is_empty()
        {
            continue;
        }
        let refuse = |why: String| {
            ProviderError::new(
                ErrorKind::Config,
                format!("{}:{}: {why}", shown.display(), instruction.line),
            )
        };
        let words = instruction.args.words();
        let Some((_, sources)) = words.split_last() else {
            return Err(refuse(format!("{} names no source", instruction.keyword)));
        };
        for source in sources {
            if source.contains(['*', '?', '[']) {
                return Err(refuse(format!("`{source}` is a pattern; name files")));
            }
            let path = crate::context::resolve(dir, source).map_err(&refuse)?;
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_owned();
            for file in crate::context::files(dir, &relative).map_err(&refuse)? {
                let data = std::fs::read(dir.join(&file))
                    .map_err(|e| refuse(format!("cannot read {}: {e}", file.display())))?;
                total += data.len();
                if total > MAX_CONTEXT_BYTES {
                    return Err(refuse(format!(
                        "the build context passes {MAX_CONTEXT_BYTES} bytes, more than one \
                         request carries"
                    )));
                }
                let filename = file.to_string_lossy().into_owned();
                if !files
                    .iter()
                    .any(|f: &ImageContextFile| f.filename == filename)
                {
                    files.push(ImageContextFile { filename, data });
                }
            }
        }
    }
    Ok(files)
}

fn timing(name: &str, duration: Duration, resolution: Option<Duration>) -> Timing {
    Timing {
        name: name.to_owned(),
        duration,
        resolution,
    }
}

#[async_trait]
impl Provider for ModalProvider {
    fn variant(&self) -> &str {
        "modal"
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn provider_version(&self) -> Option<String> {
        Some(API_VERSION.to_owned())
    }

    /// Where Modal placed this client's sandboxes, as each said (`MODAL_REGION` in the
    /// sandbox); `None` before any said.
    fn region(&self) -> Option<String> {
        let ran_in = lock(&self.ran_in);
        (!ran_in.is_empty()).then(|| ran_in.iter().cloned().collect::<Vec<_>>().join(", "))
    }

    fn ordered_calls(&self) -> bool {
        !matches!(self.connection, Connection::Live)
    }

    fn emulator(&self) -> Option<String> {
        self.plane.emulator()
    }

    async fn check_access(&self) -> Result<String> {
        let hello: ClientHelloResponse = self
            .plane
            .call("ClientHello", (), CALL_DEADLINE, |mut c, r| async move {
                c.client_hello(r).await
            })
            .await?;
        Ok(match hello.warning.as_str() {
            "" => "ClientHello answered".to_owned(),
            warning => format!("ClientHello answered, warning: {warning}"),
        })
    }

    fn credential_use(&self, request: &BuildRequest) -> String {
        match &request.registry_credential {
            Some(_) => format!(
                "{}; handed to the image build as an ephemeral registry Secret, deleted by id after the build",
                request.credential_made()
            ),
            None => request.credential_made(),
        }
    }

    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let dir = &request.environment_dir;
        let dockerfile = sandbox_contract::dockerfile::resolve_base_arg(
            &crate::read_dockerfile(dir)?,
            crate::BASE_ARG,
            &request.base.reference,
        );
        let commands = sandbox::dockerfile_commands(&dockerfile)
            .map_err(|e| e.context(dir.join("Dockerfile").display().to_string()))?;
        let context_files = context_files(dir, &dockerfile)?;
        let app = self.app().await?.to_owned();
        let seq = self.creates.intent(&request.labels, KIND_IMAGE)?;
        // Recorded as soon as Modal names the image, so that a run killed mid-build still
        // names it in its ledger, and cleanup deletes it even when its build failed.
        let on_image = |id: &str| {
            let resource = Resource {
                kind: KIND_IMAGE.into(),
                id: id.to_owned(),
            };
            self.creates.created(seq, &request.labels, &resource, log);
            lock(&self.built).push((request.labels.clone(), id.to_owned()));
        };
        let spec = sandbox::ImageSpec {
            commands,
            context_files,
            credential: request.registry_credential.as_ref(),
            build_secrets: &request.build_secrets,
            on_image: Some(&on_image),
            builder_version: &self.builder_version,
        };
        log(&format!("image builder version {}", self.builder_version));
        let image = sandbox::build(&self.plane, &app, spec, log, BUILD_DEADLINE).await?;
        log(&format!("image {image} built"));
        Ok(Artifact {
            id: image,
            kind: ARTIFACT_KIND.into(),
        })
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_lifetime(artifact, labels, SANDBOX_LIFETIME)
            .await
    }

    async fn launch_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_lifetime(artifact, labels, lifetime).await
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        let router = self.router_of(sandbox)?;
        let _order = self.in_order().await;
        let (output, kernel) = channel::run(&router, channel::DEFAULT_CONTEXT, code).await?;
        Ok((output, vec![timing("channel-kernel-answer", kernel, None)]))
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let router = self.router_of(sandbox)?;
        let _order = self.in_order().await;
        let context = format!("context-{context}");
        Ok(channel::run(&router, &context, code).await?.0)
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        let router = self.router_of(sandbox)?;
        let _order = self.in_order().await;
        router.exec(argv, as_root, EXEC_TIMEOUT).await
    }

    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        let router = self.router_of(sandbox)?;
        let _order = self.in_order().await;
        let restarted = channel::restart(&router, channel::DEFAULT_CONTEXT).await?;
        Ok(vec![
            timing(
                "kernel-restart",
                channel::millis(restarted.restart_ms),
                None,
            ),
            timing("kernel-ready", channel::millis(restarted.ready_ms), None),
        ])
    }

    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport> {
        let report = self.terminate(&sandbox.0, grace).await?;
        lock(&self.sandboxes).remove(&sandbox.0);
        Ok(report)
    }

    /// `SandboxWait` without waiting: no result is a running sandbox (Modal cannot say
    /// whether one is frozen); a result is how it ended. Its output is not asked for.
    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<crate::SandboxState>> {
        Ok(Some(
            match sandbox::ending(&self.plane, &sandbox.0).await? {
                None => crate::SandboxState::Running,
                Some(result) => crate::SandboxState::Stopped {
                    ending: sandbox::describe_ending(&result),
                    exit_code: Some(i64::from(result.exitcode)),
                    last_log_lines: Vec::new(),
                },
            },
        ))
    }

    async fn artifact_metadata(&self, _artifact: &Artifact) -> Result<String> {
        Err(ProviderError::unsupported(
            "read an image's env, labels or history (Modal's API has none)",
        ))
    }
}

#[async_trait]
impl Housekeeping for ModalProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let tags = labels
            .to_map()
            .into_iter()
            .map(|(tag_name, tag_value)| SandboxTag {
                tag_name,
                tag_value,
            })
            .collect();
        let gone = lock(&self.gone).clone();
        let sandboxes = self.list(tags).await?;
        // Sandboxes first: an image is deleted once nothing runs from it.
        let images: Vec<Resource> = lock(&self.built)
            .iter()
            .filter(|(built_for, _)| built_for == labels)
            .map(|(_, id)| Resource {
                kind: KIND_IMAGE.into(),
                id: id.clone(),
            })
            .collect();
        Ok(sandboxes
            .into_iter()
            .filter(|s| !gone.contains(&s.id))
            .map(|s| Resource {
                kind: KIND_SANDBOX.into(),
                id: s.id,
            })
            .chain(images)
            .collect())
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        (artifact.kind == ARTIFACT_KIND).then(|| Resource {
            kind: KIND_IMAGE.into(),
            id: artifact.id.clone(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: KIND_SANDBOX.into(),
            id: sandbox.0.clone(),
        })
    }

    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.creates.set(log);
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        let tags = run_id
            .map(|id| SandboxTag {
                tag_name: crate::RUN_LABEL.to_owned(),
                tag_value: id.to_owned(),
            })
            .into_iter()
            .collect();
        Ok(self
            .list(tags)
            .await?
            .into_iter()
            .filter_map(|s| {
                let tag = |name: &str| {
                    s.tags
                        .iter()
                        .find(|t| t.tag_name == name)
                        .map(|t| t.tag_value.clone())
                };
                let run = tag(crate::RUN_LABEL)?;
                let created = (s.created_at > 0.0)
                    .then(|| Duration::try_from_secs_f64(s.created_at).ok())
                    .flatten()
                    .map(|d| std::time::UNIX_EPOCH + d);
                Some(Labelled {
                    run_id: run,
                    scenario: tag(crate::SCENARIO_LABEL),
                    created,
                    resource: Resource {
                        kind: KIND_SANDBOX.into(),
                        id: s.id,
                    },
                })
            })
            .collect())
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            KIND_SANDBOX => {
                if lock(&self.gone).contains(&resource.id) {
                    return Ok(Deleted::AlreadyGone);
                }
                // Terminating a sandbox that has ended already answers its ending: Modal
                // does not say which.
                self.terminate(&resource.id, Duration::from_secs(10))
                    .await
                    .map(|_| Deleted::Removed)
            }
            KIND_IMAGE => {
                let deleted = self
                    .plane
                    .call(
                        "ImageDelete",
                        ImageDeleteRequest {
                            image_id: resource.id.clone(),
                        },
                        CALL_DEADLINE,
                        |mut c, r| async move { c.image_delete(r).await },
                    )
                    .await;
                let deleted = match deleted {
                    Ok(_) => Ok(Deleted::Removed),
                    Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
                    Err(e) => Err(e),
                };
                if deleted.is_ok() {
                    lock(&self.built).retain(|(_, id)| *id != resource.id);
                }
                deleted
            }
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the modal variant has no resource kind `{other}`"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_builder_version_is_the_variables_or_the_stated_default() {
        let unset = |_: &str| None;
        assert_eq!(
            image_builder_version(unset).expect("default"),
            DEFAULT_IMAGE_BUILDER_VERSION
        );
        let given = |_: &str| Some("2026.10".to_owned());
        assert_eq!(image_builder_version(given).expect("known"), "2026.10");
        let unknown = |_: &str| Some("2027.01".to_owned());
        let error = image_builder_version(unknown).expect_err("refused");
        assert!(
            error
                .to_string()
                .contains("MODAL_IMAGE_BUILDER_VERSION=2027.01"),
            "{error}"
        );
    }

    fn environment(files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sm-modal-context-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("the folder");
            std::fs::write(path, text).expect("the file");
        }
        dir
    }

    #[test]
    fn context_files_are_what_the_copies_name() {
        let dir = environment(&[
            ("environment.json", "{}"),
            ("conf/a.txt", "a"),
            ("unused", "x"),
        ]);
        let files = context_files(
            &dir,
            "FROM base\nCOPY environment.json /etc/e.json\nCOPY --chown=1000 conf /conf\n\
             COPY --from=other /x /y\n",
        )
        .expect("the context");
        let names: Vec<&str> = files.iter().map(|f| f.filename.as_str()).collect();
        assert_eq!(names, ["environment.json", "conf/a.txt"]);
        assert_eq!(files[0].data, b"{}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_copy_that_leaves_the_folder_is_refused_with_its_line() {
        let dir = environment(&[("environment.json", "{}")]);
        let error = context_files(&dir, "FROM base\n\nCOPY ../secret /s\n").expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("Dockerfile:3: `../secret` leaves the build context"),
            "{text}"
        );
        let error = context_files(&dir, "FROM base\nCOPY *.json /s\n").expect_err("refused");
        assert!(
            error.to_string().contains(":2: `*.json` is a pattern"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
