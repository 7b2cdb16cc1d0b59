//! The `daytona` variant: Daytona's REST control plane and its per-sandbox toolbox.
//!
//! A build creates a snapshot from the environment's Dockerfile (`buildInfo`), polls it
//! until `active` while polling its build logs, and hands back the snapshot's **id**:
//! names are rewritten and reused, ids are not. The Dockerfile's `FROM ${BASE_IMAGE}` is
//! resolved to the run's base before it is sent. The base registry's credential (or, with
//! none, the run's canary build secret) travels as a docker-registry entry created for the
//! build and deleted by id as soon as the build ends, success or failure. A launch creates a sandbox from
//! the snapshot id with the run's labels and polls until `started`. Code and commands go
//! to the toolbox at the sandbox's `toolboxProxyUrl`: commands to `process/execute`, code
//! to interpreter contexts (`process/interpreter/context`), run over the
//! `process/interpreter/execute` WebSocket. `run_code` uses one context created on first
//! use, `run_code_in` one per name; restart deletes the context and creates a new one, so
//! the state is gone and the sandbox keeps running.

mod code;
mod dockerfile;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::Deleted;
use crate::api::settings::Settings;
use crate::api::ws::WsMessage;
use crate::api::{ApiClient, ApiRequest, ApiSettings, Endpoints, Mode, Network, Target, Volatiles};
use crate::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, CreateLog,
    CreateRecorder, ErrorKind, Housekeeping, Labelled, LifetimeLimit, LogFn, Provider,
    ProviderError, Resource, RestartKind, Result, RunLabels, SandboxId, SandboxState, Secret,
    ShutdownEnding, ShutdownObservation, ShutdownReport, Timing,
};

/// The control plane's default base URL, used when `DAYTONA_API_URL` is not set.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";
/// The API version this client was written against (the OpenAPI document's `info.version`).
pub const API_VERSION: &str = "1.0";

/// Request headers a replay compares with the cassette's, after redaction: the bearer
/// credential (`Bearer <redacted:DAYTONA_API_KEY>`) and the body's content type.
pub const REPLAY_MATCHED_HEADERS: &[&str] = &["authorization", "content-type"];

/// Resource kind of a sandbox in [`Resource`].
pub const KIND_SANDBOX: &str = "sandbox";
/// Resource kind of a snapshot in [`Resource`].
pub const KIND_SNAPSHOT: &str = "snapshot";
/// Resource kind of a docker-registry entry in [`Resource`].
pub const KIND_REGISTRY: &str = "docker-registry";

/// Registry address under which build secrets are handed to the builder, as a registry
/// login would be, when the Dockerfile's base names no registry; `.invalid` never resolves.
const CANARY_REGISTRY: &str = "build-secrets.invalid";
/// Deadline of one HTTP call unless a call says otherwise: longer than any step budget (at
/// most 24 h), so that the step's budget, not a hidden client timeout, ends a call to a hung
/// or paused service. One timeout source: the budget; a TCP connect still gives up after 10 s.
const CALL_TIMEOUT: Duration = Duration::from_secs(25 * 60 * 60);
/// Longest one piece of code or one command may run in the toolbox.
const RUN_TIMEOUT_SECS: u64 = 300;
/// Interpreter contexts one sandbox runs at once. The toolbox spec and the SDK set no
/// limit (each context is a worker process of its own, bounded by the sandbox's 1 CPU and
/// 1 GiB); 4 is what check 14 asks for and what was exercised, through the authoring
/// emulator, not a figure measured on Daytona.
const CONCURRENT_CONTEXTS: u32 = 4;
/// The name under which `run_code`'s context is kept.
const DEFAULT_CONTEXT: &str = "";
/// Resources baked into every snapshot: 1 CPU, 1 GiB memory, 3 GiB disk.
const SNAPSHOT_RESOURCES: (u32, u32, u32) = (1, 1, 3);

/// The region sandboxes and snapshots are placed in when `DAYTONA_TARGET` is not set:
/// `us`, the first of the two Daytona offers (`us`, `eu`). Set, rather than left to the
/// organization's default, so that a run says where it asked to run. Sent as the
/// sandbox's `target` and the snapshot's `regionId`, as the official SDK sends its
/// client-level target for both (daytona 0.226.1, `daytona/_async/snapshot.py`).
pub const DEFAULT_TARGET: &str = "us";

/// How long each wait polls before giving up.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// A snapshot build, to `active`.
    pub build: Duration,
    /// A sandbox, to `started`.
    pub ready: Duration,
    /// A sandbox, to `stopped`.
    pub stop: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            build: Duration::from_secs(15 * 60),
            ready: Duration::from_secs(120),
            stop: Duration::from_secs(60),
        }
    }
}

/// The `daytona` variant over the REST API.
pub struct DaytonaProvider {
    client: ApiClient,
    /// The bearer token (an API key or a JWT).
    bearer: Secret,
    /// Sent as `X-Daytona-Organization-ID` (with a JWT).
    organization: Option<String>,
    /// The region sandboxes and snapshots are placed in ([`DEFAULT_TARGET`] unless set).
    target: String,
    /// The regions the API says this client's sandboxes were created in.
    ran_in: Mutex<std::collections::BTreeSet<String>>,
    waits: Waits,
    /// Toolbox base URL of each sandbox, from its record.
    toolboxes: Mutex<HashMap<String, String>>,
    /// Interpreter context ids by sandbox and name (`run_code`'s is [`DEFAULT_CONTEXT`]).
    contexts: Mutex<HashMap<(String, String), String>>,
    /// What became of the last build's registry entry, for the credential row.
    registry_entry: Mutex<Option<&'static str>>,
    /// The run ledger: a registry entry is recorded as soon as it exists.
    creates: CreateRecorder,
    /// Registry entries this client deleted after their build: the run's cleanup, which
    /// also deletes what the ledger names, does not delete them again.
    deleted: Mutex<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for DaytonaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaProvider")
            .field("organization", &self.organization)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The bearer credential and organization from `lookup` (an environment): the API key,
/// or a JWT with its organization id; the error names what is missing.
fn credentials_from(lookup: impl Fn(&str) -> Option<String>) -> Result<(Secret, Option<String>)> {
    if let Some(key) = lookup("DAYTONA_API_KEY") {
        return Ok((Secret::new("DAYTONA_API_KEY", key), None));
    }
    match (
        lookup("DAYTONA_JWT_TOKEN"),
        lookup("DAYTONA_ORGANIZATION_ID"),
    ) {
        (Some(jwt), Some(org)) => Ok((Secret::new("DAYTONA_JWT_TOKEN", jwt), Some(org))),
        (Some(_), None) => Err(ProviderError::new(
            ErrorKind::Config,
            "DAYTONA_JWT_TOKEN is set but DAYTONA_ORGANIZATION_ID is not; a JWT needs the organization id",
        )),
        _ => Err(ProviderError::new(
            ErrorKind::Config,
            "the daytona variant needs DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID",
        )),
    }
}

/// The credentials this client sends in replay mode, for the replay server to redact
/// as the cassette did.
pub fn replay_credentials() -> Vec<Secret> {
    vec![replay_key()]
}

/// A placeholder for replay, where nothing is authenticated; not a credential.
fn replay_key() -> Secret {
    Secret::new("DAYTONA_API_KEY", "replay-placeholder-key")
}

impl DaytonaProvider {
    /// Creates a sandbox from the snapshot `artifact` names and waits until it started; with
    /// `auto_stop_minutes`, Daytona stops it after that many minutes with no activity
    /// (`autoStopInterval`; Daytona's default is 15 when the field is not sent).
    async fn launch_with_auto_stop(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        auto_stop_minutes: Option<u64>,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        let mut body = json!({
            "snapshot": artifact.id,
            "labels": labels.to_map(),
            "user": sandbox_contract::IDENTITY.user,
            "target": self.target,
        });
        if let Some(minutes) = auto_stop_minutes {
            body["autoStopInterval"] = json!(minutes);
        }
        let started = Instant::now();
        let created: SandboxRecord = self
            .call(
                ApiRequest::post(Target::Api, "/sandbox")
                    .json(body)
                    .what("create sandbox"),
            )
            .await?
            .json()?;
        self.remember(&created);
        if let Some(region) = &created.target {
            lock(&self.ran_in).insert(region.clone());
        }
        let id = created.id;
        let resolution = if created.state.as_deref() == Some("started") {
            None
        } else {
            match self
                .wait_for_sandbox(&id, "started", self.waits.ready)
                .await
            {
                Ok(resolution) => Some(resolution),
                Err(e) => {
                    if let Err(d) = self
                        .delete(format!("/sandbox/{id}"), "delete sandbox")
                        .await
                    {
                        return Err(e.context(format!(
                            "the sandbox {id} could not be deleted either: {d}"
                        )));
                    }
                    return Err(e);
                }
            }
        };
        Ok((
            SandboxId(id),
            vec![Timing {
                name: "sandbox-started".into(),
                duration: started.elapsed(),
                resolution,
            }],
        ))
    }

    /// Builds the provider from the environment: `DAYTONA_API_KEY`, or `DAYTONA_JWT_TOKEN`
    /// with `DAYTONA_ORGANIZATION_ID`; `DAYTONA_API_URL` overrides the base URL and
    /// `DAYTONA_TARGET` picks a region ([`DEFAULT_TARGET`] if unset), all read from
    /// `settings`; live, with their test network settings. Replay needs no credential.
    pub fn from_settings(
        mode: Mode,
        volatiles: Arc<Volatiles>,
        settings: &Settings,
    ) -> Result<Self> {
        let var = |name: &str| settings.var(name);
        let (credential, organization) = if matches!(mode, Mode::Replay { .. }) {
            (replay_key(), None)
        } else {
            credentials_from(var)?
        };
        let network = settings.network_for(&mode)?;
        let api_base = var("DAYTONA_API_URL").unwrap_or_else(|| DEFAULT_API_URL.to_owned());
        Self::with_network(
            ApiSettings {
                endpoints: Endpoints {
                    api_base: api_base.trim_end_matches('/').to_owned(),
                    // Unused: the toolbox is reached at each sandbox's toolboxProxyUrl.
                    sandbox_domain: String::new(),
                },
                mode,
                credentials: vec![credential],
                volatiles,
                call_timeout: CALL_TIMEOUT,
            },
            organization,
            var("DAYTONA_TARGET"),
            &network,
        )
    }

    /// Builds the provider from explicit settings; the first credential is the bearer
    /// token, `organization` goes with a JWT and `target` names a region ([`DEFAULT_TARGET`]
    /// if `None`). Live, it takes
    /// the test network settings of the environment, if any (see [`crate::api::network`]).
    pub fn new(
        settings: ApiSettings,
        organization: Option<String>,
        target: Option<String>,
    ) -> Result<Self> {
        let bearer = Self::bearer(&settings)?;
        Self::with_client(ApiClient::new(settings)?, bearer, organization, target)
    }

    /// As [`Self::new`], trusting `network`'s extra roots and resolving through its pin:
    /// an emulator reached through Daytona's live URL forms.
    pub fn with_network(
        settings: ApiSettings,
        organization: Option<String>,
        target: Option<String>,
        network: &Network,
    ) -> Result<Self> {
        let bearer = Self::bearer(&settings)?;
        Self::with_client(
            ApiClient::with_network(settings, network)?,
            bearer,
            organization,
            target,
        )
    }

    fn bearer(settings: &ApiSettings) -> Result<Secret> {
        settings.credentials.first().cloned().ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Config,
                "the daytona variant needs a bearer credential",
            )
        })
    }

    fn with_client(
        client: ApiClient,
        bearer: Secret,
        organization: Option<String>,
        target: Option<String>,
    ) -> Result<Self> {
        Ok(Self {
            client,
            bearer,
            organization,
            target: target.unwrap_or_else(|| DEFAULT_TARGET.to_owned()),
            ran_in: Mutex::default(),
            waits: Waits::default(),
            toolboxes: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
            registry_entry: Mutex::new(None),
            creates: CreateRecorder::default(),
            deleted: Mutex::default(),
        })
    }
}

/// A snapshot record (`SnapshotDto`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotRecord {
    id: String,
    name: String,
    state: String,
    #[serde(default)]
    error_reason: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// A page of snapshots (`PaginatedSnapshots`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotPage {
    items: Vec<SnapshotRecord>,
    page: f64,
    total_pages: f64,
}

/// A sandbox record (`Sandbox` or `SandboxListItem`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxRecord {
    id: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error_reason: Option<String>,
    toolbox_proxy_url: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// The region the sandbox was created in.
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// A page of sandboxes (`ListSandboxesResponse`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxPage {
    items: Vec<SandboxRecord>,
    next_cursor: Option<String>,
}

/// A docker-registry entry (`DockerRegistry`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegistryRecord {
    id: String,
    name: String,
    #[serde(default)]
    created_at: Option<String>,
}

/// The docker-registry entry a build creates, and why.
struct RegistryEntry {
    /// The registry host the entry is for.
    url: String,
    username: String,
    password: Secret,
    /// What the entry holds, for the build log.
    what: &'static str,
}

/// The entry `request`'s build needs: the base registry's credential when the run has one;
/// otherwise the first build secret (the run's canary), handed over as a registry login
/// to the base's registry, or to [`CANARY_REGISTRY`] for a base that names none, so that
/// it reaches Daytona as a real credential would and the secrets scan can look for it.
/// With a credential the canary is not sent: one entry per build, the one a live build
/// needs.
fn registry_entry(request: &BuildRequest, dockerfile: &str) -> Option<RegistryEntry> {
    if let Some(credential) = &request.registry_credential {
        return Some(RegistryEntry {
            url: credential.registry.clone(),
            username: credential.username.clone(),
            password: credential.password.clone(),
            what: "the base registry's credential",
        });
    }
    let secret = request.build_secrets.first()?;
    Some(RegistryEntry {
        url: dockerfile::base_registry(dockerfile).unwrap_or_else(|| CANARY_REGISTRY.to_owned()),
        username: "build".to_owned(),
        password: secret.clone(),
        what: "the build secret",
    })
}

/// A URL answer (`Url`, `ToolboxProxyUrl`).
#[derive(Debug, Deserialize)]
struct UrlRecord {
    url: String,
}

/// An interpreter context (`InterpreterContext`), the field this client reads.
#[derive(Debug, Deserialize)]
struct ContextRecord {
    id: String,
}

/// What `process/execute` answers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunRecord {
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    result: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The name of every resource a run's scenario creates that carries no labels.
fn resource_name(labels: &RunLabels) -> String {
    format!("{RESOURCE_PREFIX}{}-{}", labels.run_id, labels.scenario)
}

/// How the name of every resource a run creates that carries no labels starts.
const RESOURCE_PREFIX: &str = "sandbox-matrix-";

/// `path` with `params` as its URL-encoded query.
fn with_query(path: &str, params: &[(&str, &str)]) -> String {
    let mut query = reqwest::Url::parse("http://query.invalid/").expect("a constant URL parses");
    query.query_pairs_mut().extend_pairs(params);
    format!("{path}?{}", query.query().unwrap_or_default())
}

/// Sandbox states from which `started` or `stopped` will never come.
fn sandbox_failed(state: &str) -> bool {
    matches!(
        state,
        "error" | "build_failed" | "destroyed" | "destroying" | "archived"
    )
}

impl DaytonaProvider {
    /// Uses `waits` instead of the default deadlines.
    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.waits = waits;
        self
    }

    /// `req` with the bearer token (and the organization, with a JWT).
    fn authorized(&self, req: ApiRequest) -> ApiRequest {
        let mut req = req.header("Authorization", format!("Bearer {}", self.bearer.expose()));
        if let Some(org) = &self.organization {
            req = req.header("X-Daytona-Organization-ID", org.clone());
        }
        req
    }

    /// Sends `req` with the bearer token (and the organization, with a JWT).
    async fn call(&self, req: ApiRequest) -> Result<crate::api::ApiResponse> {
        self.client.call(self.authorized(req)).await
    }

    /// The id of context `name` in `sandbox`, created on first use.
    async fn context(&self, sandbox: &str, name: &str) -> Result<String> {
        let key = (sandbox.to_owned(), name.to_owned());
        if let Some(id) = lock(&self.contexts).get(&key) {
            return Ok(id.clone());
        }
        let target = self.toolbox(sandbox, "process/interpreter/context").await?;
        let created: ContextRecord = self
            .call(
                ApiRequest::post(target, "")
                    .json(json!({ "language": "python" }))
                    .what("create interpreter context"),
            )
            .await?
            .json()?;
        lock(&self.contexts).insert(key, created.id.clone());
        Ok(created.id)
    }

    /// Runs `code` in context `context` over the execute WebSocket.
    async fn interpret(&self, sandbox: &str, context: &str, code: &str) -> Result<CodeOutput> {
        let target = self.toolbox(sandbox, "process/interpreter/execute").await?;
        let deadline = Duration::from_secs(RUN_TIMEOUT_SECS + 30);
        let mut socket = self
            .client
            .websocket(
                self.authorized(ApiRequest::get(target, ""))
                    .what("execute in interpreter context"),
            )
            .await?;
        socket
            .send_json(&json!({
                "code": code::wrap(code),
                "contextId": context,
                "timeout": RUN_TIMEOUT_SECS,
            }))
            .await?;
        let mut frames = Vec::new();
        let ended = loop {
            match socket.next(deadline).await? {
                WsMessage::Json(frame) => frames.push(frame),
                WsMessage::Text(text) => {
                    return Err(ProviderError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the interpreter sent a frame that is not JSON: {}",
                            crate::tail(&text, 200)
                        ),
                    ));
                }
                WsMessage::Closed { code, reason } => break (code, reason),
            }
        };
        socket.close().await;
        let context_of = |e: ProviderError| {
            e.context(format!(
                "interpreter context {context} in sandbox {sandbox}"
            ))
        };
        match ended {
            (1000 | 1005, _) => {}
            (4008, _) => {
                return Err(context_of(ProviderError::new(
                    ErrorKind::Timeout,
                    format!("the interpreter's timeout of {RUN_TIMEOUT_SECS} s passed"),
                )));
            }
            (code, reason) => {
                return Err(context_of(ProviderError::new(
                    ErrorKind::Transport,
                    format!("the interpreter closed the WebSocket with code {code}: {reason}"),
                )));
            }
        }
        code::output_from_frames(&frames).map_err(context_of)
    }

    /// Creates docker-registry entry `entry` under the run's `name`; returns its id.
    async fn create_registry(
        &self,
        name: &str,
        entry: &RegistryEntry,
        log: &LogFn,
    ) -> Result<String> {
        let created: RegistryRecord = self
            .call(
                ApiRequest::post(Target::Api, "/docker-registry")
                    .json(json!({
                        "name": name,
                        "url": entry.url,
                        "username": entry.username,
                        "password": entry.password.expose(),
                    }))
                    .what("create docker-registry entry"),
            )
            .await?
            .json()?;
        log(&format!(
            "docker-registry entry {} created for {} ({})",
            created.id, entry.url, entry.what
        ));
        Ok(created.id)
    }

    /// Deletes by id; a resource already gone is success.
    async fn delete(&self, path: String, what: &str) -> Result<Deleted> {
        match self
            .call(ApiRequest::delete(Target::Api, path).what(what.to_owned()))
            .await
        {
            Ok(_) => Ok(Deleted::Removed),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e),
        }
    }

    /// Creates the snapshot and polls it to `active`, passing new build log lines to `log`.
    async fn build_snapshot(&self, name: &str, dockerfile: String, log: &LogFn) -> Result<String> {
        let (cpu, memory, disk) = SNAPSHOT_RESOURCES;
        let created: SnapshotRecord = self
            .call(
                ApiRequest::post(Target::Api, "/snapshots")
                    .json(json!({
                        "name": name,
                        "buildInfo": { "dockerfileContent": dockerfile, "contextHashes": [] },
                        "cpu": cpu,
                        "memory": memory,
                        "disk": disk,
                        "regionId": self.target,
                    }))
                    .what("create snapshot"),
            )
            .await?
            .json()?;
        log(&format!(
            "snapshot {} created as {}",
            created.id, created.name
        ));
        let id = created.id;
        match self.wait_for_snapshot(&id, log).await {
            Ok(()) => Ok(id),
            Err(e) => {
                if let Err(d) = self
                    .delete(format!("/snapshots/{id}"), "delete snapshot")
                    .await
                {
                    log(&format!("could not delete the failed snapshot {id}: {d}"));
                }
                Err(e)
            }
        }
    }

    /// Where snapshot `id`'s build logs are read.
    async fn build_logs_url(&self, id: &str) -> Result<UrlRecord> {
        self.call(
            ApiRequest::get(Target::Api, format!("/snapshots/{id}/build-logs-url"))
                .what("get snapshot build logs URL"),
        )
        .await?
        .json()
    }

    /// Polls snapshot `id` until `active`, fetching its build logs on every poll once it
    /// has left `pending`. The build-logs URL is asked for only then, as Daytona's SDK asks
    /// (`daytona/_sync/snapshot.py`, 0.226.1): while the snapshot is `pending` no runner
    /// holds its build, and the service holds the request up to 30 s, then answers 404
    /// (`apps/api/src/sandbox/controllers/snapshot.controller.ts`, daytonaio/daytona
    /// v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8).
    async fn wait_for_snapshot(&self, id: &str, log: &LogFn) -> Result<()> {
        let seen = Mutex::new(0usize);
        let logs_url: Mutex<Option<String>> = Mutex::new(None);
        let (this, seen, logs_url) = (self, &seen, &logs_url);
        let started = Instant::now();
        let ((), resolution) = self
            .client
            .poll_until(
                &format!("snapshot {id} to become active"),
                self.waits.build,
                move || async move {
                    let snapshot: SnapshotRecord = this
                        .call(
                            ApiRequest::get(Target::Api, format!("/snapshots/{id}"))
                                .what("get snapshot"),
                        )
                        .await?
                        .json()?;
                    if snapshot.state != "pending" {
                        let known = logs_url.lock().expect("logs URL lock").clone();
                        let url = match known {
                            Some(url) => url,
                            None => {
                                let url = this.build_logs_url(id).await?.url;
                                *logs_url.lock().expect("logs URL lock") = Some(url.clone());
                                url
                            }
                        };
                        this.emit_new_log_lines(&url, seen, log).await?;
                    }
                    match snapshot.state.as_str() {
                        "active" => Ok(Some(())),
                        "error" | "build_failed" => Err(ProviderError::new(
                            ErrorKind::Build,
                            format!(
                                "snapshot {id} ended in state {}: {}",
                                snapshot.state,
                                snapshot
                                    .error_reason
                                    .as_deref()
                                    .unwrap_or("no reason given")
                            ),
                        )),
                        _ => Ok(None),
                    }
                },
            )
            .await?;
        log(&format!(
            "snapshot {id} active after {:.1} s (polled every {} ms at most)",
            started.elapsed().as_secs_f64(),
            resolution.as_millis()
        ));
        Ok(())
    }

    /// Fetches the build log and passes the lines not seen yet to `log`; a log not
    /// written yet (404) has no lines.
    async fn emit_new_log_lines(&self, url: &str, seen: &Mutex<usize>, log: &LogFn) -> Result<()> {
        let text = match self
            .call(
                ApiRequest::get(Target::Absolute(url.to_owned()), "")
                    .what("get snapshot build logs"),
            )
            .await
        {
            Ok(response) => response.text(),
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let lines: Vec<&str> = text.lines().collect();
        let mut seen = seen.lock().expect("build log counter lock");
        for line in lines.iter().skip(*seen) {
            log(line);
        }
        *seen = (*seen).max(lines.len());
        Ok(())
    }

    /// Polls sandbox `id` until it is in state `want`; returns the poll resolution.
    async fn wait_for_sandbox(&self, id: &str, want: &str, deadline: Duration) -> Result<Duration> {
        let this = self;
        let (record, resolution) = self
            .client
            .poll_until(
                &format!("sandbox {id} to be {want}"),
                deadline,
                move || async move {
                    let record: SandboxRecord = this
                        .call(
                            ApiRequest::get(Target::Api, format!("/sandbox/{id}"))
                                .what("get sandbox"),
                        )
                        .await?
                        .json()?;
                    match record.state.as_deref().unwrap_or("unknown") {
                        state if state == want => Ok(Some(record)),
                        state if sandbox_failed(state) => Err(ProviderError::new(
                            ErrorKind::Api,
                            format!(
                                "sandbox {id} is {state} while waiting for {want}: {}",
                                record.error_reason.as_deref().unwrap_or("no reason given")
                            ),
                        )),
                        _ => Ok(None),
                    }
                },
            )
            .await?;
        self.remember(&record);
        Ok(resolution)
    }

    /// Keeps a sandbox's toolbox URL.
    fn remember(&self, record: &SandboxRecord) {
        self.toolboxes.lock().expect("toolbox table lock").insert(
            record.id.clone(),
            record.toolbox_proxy_url.trim_end_matches('/').to_owned(),
        );
    }

    /// The toolbox URL of `endpoint` in sandbox `id`.
    async fn toolbox(&self, id: &str, endpoint: &str) -> Result<Target> {
        let known = self
            .toolboxes
            .lock()
            .expect("toolbox table lock")
            .get(id)
            .cloned();
        let base = match known {
            Some(base) => base,
            None => {
                let answer: UrlRecord = self
                    .call(
                        ApiRequest::get(Target::Api, format!("/sandbox/{id}/toolbox-proxy-url"))
                            .what("get toolbox proxy URL"),
                    )
                    .await?
                    .json()?;
                let base = answer.url.trim_end_matches('/').to_owned();
                self.toolboxes
                    .lock()
                    .expect("toolbox table lock")
                    .insert(id.to_owned(), base.clone());
                base
            }
        };
        Ok(Target::Absolute(format!("{base}/{id}/{endpoint}")))
    }

    /// Stops sandbox `id` and polls until it is stopped; its contexts end with it.
    async fn stop(&self, id: &str) -> Result<Timing> {
        lock(&self.contexts).retain(|(sandbox, _), _| sandbox != id);
        let started = Instant::now();
        self.call(
            ApiRequest::post(Target::Api, format!("/sandbox/{id}/stop"))
                .idempotent(true)
                .what("stop sandbox"),
        )
        .await?;
        let resolution = self
            .wait_for_sandbox(id, "stopped", self.waits.stop)
            .await?;
        Ok(Timing {
            name: "sandbox-stop".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        })
    }

    /// Lists the run's sandboxes by labels, following the cursor.
    async fn list_sandboxes(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        Ok(self
            .sandboxes_labelled(&labels.to_map())
            .await?
            .into_iter()
            .map(|s| Resource {
                kind: KIND_SANDBOX.into(),
                id: s.id,
            })
            .collect())
    }

    /// Every live sandbox carrying all of `labels`, following the cursor.
    async fn sandboxes_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxRecord>> {
        let selector = serde_json::to_string(labels).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("cannot encode the labels: {e}"),
            )
        })?;
        let mut found = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = vec![("labels", selector.as_str())];
            if let Some(c) = &cursor {
                params.push(("cursor", c.as_str()));
            }
            let page: SandboxPage = self
                .call(
                    ApiRequest::get(Target::Api, with_query("/sandbox", &params))
                        .what("list sandboxes"),
                )
                .await?
                .json()?;
            found.extend(
                page.items
                    .into_iter()
                    .filter(|s| !matches!(s.state.as_deref(), Some("destroyed" | "destroying"))),
            );
            match page.next_cursor {
                Some(next) if !next.is_empty() && cursor.as_deref() != Some(next.as_str()) => {
                    cursor = Some(next);
                }
                _ => return Ok(found),
            }
        }
    }

    /// Lists the run's snapshots by name (snapshots carry no labels).
    async fn list_snapshots(&self, name: &str) -> Result<Vec<Resource>> {
        Ok(self
            .snapshots_named(name)
            .await?
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| Resource {
                kind: KIND_SNAPSHOT.into(),
                id: s.id,
            })
            .collect())
    }

    /// The snapshots Daytona lists for the name filter `name` (a prefix), but those being
    /// removed, following the pages.
    async fn snapshots_named(&self, name: &str) -> Result<Vec<SnapshotRecord>> {
        let mut found = Vec::new();
        let mut page = 1u32;
        loop {
            let number = page.to_string();
            let answer: SnapshotPage = self
                .call(
                    ApiRequest::get(
                        Target::Api,
                        with_query("/snapshots", &[("name", name), ("page", &number)]),
                    )
                    .what("list snapshots"),
                )
                .await?
                .json()?;
            found.extend(answer.items.into_iter().filter(|s| s.state != "removing"));
            if answer.page >= answer.total_pages || page >= 100 {
                return Ok(found);
            }
            page += 1;
        }
    }

    /// Lists the run's docker-registry entries by name.
    async fn list_registries(&self, name: &str) -> Result<Vec<Resource>> {
        Ok(self
            .registries()
            .await?
            .into_iter()
            .filter(|r| r.name == name)
            .map(|r| Resource {
                kind: KIND_REGISTRY.into(),
                id: r.id,
            })
            .collect())
    }

    /// Every docker-registry entry of the organization.
    async fn registries(&self) -> Result<Vec<RegistryRecord>> {
        self.call(
            ApiRequest::get(Target::Api, "/docker-registry").what("list docker-registry entries"),
        )
        .await?
        .json()
    }
}

/// What the daytona variant can do.
pub const CAPABILITIES: Capabilities = Capabilities {
    build: true,
    restart: RestartKind::Kernel,
    build_logs: BuildLogMode::Polled,
    // process/execute takes no user: commands run as the sandbox's user.
    exec_as_root: false,
    doctor_scan: false,
    artifact_metadata: true,
    floor: false,
    // Interpreter contexts keep their globals between calls; see CONCURRENT_CONTEXTS.
    concurrent_contexts: CONCURRENT_CONTEXTS,
    stateful_code: true,
    shutdown: ShutdownObservation::Api,
    gpus: 0,
    egress_policy: false,
    artifacts_listed: true,
    provenance: false,
    // `autoStopInterval`, whole minutes with no activity (CreateSandbox in Daytona's API;
    // the API's auto-stop check, apps/api/src/sandbox/managers/sandbox.manager.ts).
    lifetime: LifetimeLimit::SinceActivity { unit_secs: 60 },
};

#[async_trait]
impl Provider for DaytonaProvider {
    fn variant(&self) -> &str {
        "daytona"
    }

    fn ordered_calls(&self) -> bool {
        self.client.keeps_order()
    }

    fn emulator(&self) -> Option<String> {
        self.client.emulator()
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn provider_version(&self) -> Option<String> {
        Some(format!(
            "Daytona API {API_VERSION} (toolbox API v0.0.0-dev)"
        ))
    }

    /// The regions the API said this client's sandboxes were created in (its `target`);
    /// `None` before any was created.
    fn region(&self) -> Option<String> {
        let ran_in = lock(&self.ran_in);
        (!ran_in.is_empty()).then(|| ran_in.iter().cloned().collect::<Vec<_>>().join(", "))
    }

    async fn check_access(&self) -> Result<String> {
        let page: SnapshotPage = self
            .call(
                ApiRequest::get(Target::Api, with_query("/snapshots", &[("page", "1")]))
                    .what("list snapshots"),
            )
            .await?
            .json()?;
        Ok(format!(
            "listed snapshots: {} on page 1 of {}",
            page.items.len(),
            page.total_pages
        ))
    }

    fn credential_use(&self, request: &BuildRequest) -> String {
        let made = request.credential_made();
        match (
            &request.registry_credential,
            *self.registry_entry.lock().expect("registry entry lock"),
        ) {
            (Some(_), Some(entry)) => format!("{made}; {entry}"),
            (Some(_), None) => format!("{made}; no registry entry was made"),
            (None, _) => made,
        }
    }

    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let dockerfile = sandbox_contract::dockerfile::resolve_base_arg(
            &dockerfile::inline_context(&request.environment_dir)?,
            crate::BASE_ARG,
            &request.base.reference,
        );
        let name = resource_name(&request.labels);
        for secret in &request.build_secrets {
            self.client.add_secret(secret.clone());
        }
        if let Some(credential) = &request.registry_credential {
            self.client.add_secret(credential.password.clone());
        }
        *self.registry_entry.lock().expect("registry entry lock") = None;
        let registry = match registry_entry(request, &dockerfile) {
            Some(entry) => {
                let seq = self.creates.intent(&request.labels, KIND_REGISTRY)?;
                let created = self.create_registry(&name, &entry, log).await;
                if let Ok(id) = &created {
                    let resource = Resource {
                        kind: KIND_REGISTRY.into(),
                        id: id.clone(),
                    };
                    self.creates.created(seq, &request.labels, &resource, log);
                }
                if created.is_err() {
                    *self.registry_entry.lock().expect("registry entry lock") =
                        Some("the registry entry could not be created");
                }
                Some(created?)
            }
            None => None,
        };
        let built = self.build_snapshot(&name, dockerfile, log).await;
        // The entry goes as soon as the build has ended, whichever way it ended; one left
        // behind (the delete failed) is found by name and deleted by the run's cleanup.
        if let Some(id) = registry {
            match self
                .delete(
                    format!("/docker-registry/{id}"),
                    "delete docker-registry entry",
                )
                .await
            {
                Ok(_) => {
                    log(&format!("docker-registry entry {id} deleted"));
                    lock(&self.deleted).insert(id);
                    *self.registry_entry.lock().expect("registry entry lock") =
                        Some("registry entry, deleted after the build");
                }
                Err(e) => {
                    log(&format!("could not delete docker-registry entry {id}: {e}"));
                    *self.registry_entry.lock().expect("registry entry lock") =
                        Some("registry entry; its delete failed, left to cleanup");
                }
            }
        }
        Ok(Artifact {
            id: built?,
            kind: "snapshot-id".into(),
        })
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_auto_stop(artifact, labels, None).await
    }

    async fn launch_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_auto_stop(
            artifact,
            labels,
            Some(lifetime.as_secs().div_ceil(60).max(1)),
        )
        .await
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        let context = self.context(&sandbox.0, DEFAULT_CONTEXT).await?;
        Ok((
            self.interpret(&sandbox.0, &context, code).await?,
            Vec::new(),
        ))
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let id = self
            .context(&sandbox.0, &format!("named:{context}"))
            .await?;
        self.interpret(&sandbox.0, &id, code).await
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        if as_root {
            return Err(ProviderError::unsupported(
                "run a command as root: the toolbox's process/execute takes no user",
            ));
        }
        let target = self.toolbox(&sandbox.0, "process/execute").await?;
        let answer: RunRecord = self
            .call(
                ApiRequest::post(target, "")
                    .json(json!({
                        "command": code::shell_command(argv),
                        "timeout": RUN_TIMEOUT_SECS,
                    }))
                    .timeout(Duration::from_secs(RUN_TIMEOUT_SECS + 30))
                    .what("execute"),
            )
            .await?
            .json()?;
        Ok(CommandOutput {
            exit_code: answer.exit_code,
            // The toolbox answers stdout and stderr as one text.
            stdout: answer.result.unwrap_or_default(),
            stderr: String::new(),
        })
    }

    /// Deletes `run_code`'s context and creates a new one: a fresh worker, its globals
    /// gone, the sandbox still running.
    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        let id = sandbox.0.as_str();
        let started = Instant::now();
        let old = lock(&self.contexts).remove(&(id.to_owned(), DEFAULT_CONTEXT.to_owned()));
        if let Some(old) = old {
            let target = self
                .toolbox(id, &format!("process/interpreter/context/{old}"))
                .await?;
            match self
                .call(ApiRequest::delete(target, "").what("delete interpreter context"))
                .await
            {
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.context(id, DEFAULT_CONTEXT).await?;
        Ok(vec![Timing {
            name: "context-recreated".into(),
            duration: started.elapsed(),
            resolution: None,
        }])
    }

    /// Stops the sandbox; Daytona's stop takes no grace period and does not report how
    /// PID 1 ended.
    async fn shutdown(&self, sandbox: &SandboxId, _grace: Duration) -> Result<ShutdownReport> {
        self.stop(&sandbox.0).await?;
        Ok(ShutdownReport {
            ending: ShutdownEnding::NotObservable,
            exit_code: None,
        })
    }

    /// `GET /sandbox/{id}`: `started` is running; any other state is said as Daytona
    /// names it, with its `errorReason`; a sandbox Daytona no longer has (404) has ended.
    /// Daytona's API keeps no log of the sandbox's own processes, so no lines come with it.
    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<SandboxState>> {
        let id = &sandbox.0;
        let asked = self
            .call(ApiRequest::get(Target::Api, format!("/sandbox/{id}")).what("get sandbox"))
            .await;
        let record: SandboxRecord = match asked {
            Ok(response) => response.json()?,
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Ok(Some(SandboxState::Stopped {
                    ending: "Daytona no longer has it (it was deleted or destroyed)".to_owned(),
                    exit_code: None,
                    last_log_lines: Vec::new(),
                }));
            }
            Err(e) => return Err(e),
        };
        Ok(Some(match record.state.as_deref().unwrap_or("unknown") {
            "started" => SandboxState::Running,
            state => SandboxState::Stopped {
                ending: match record.error_reason.as_deref().filter(|r| !r.is_empty()) {
                    Some(reason) => format!("Daytona says it is `{state}`: {reason}"),
                    None => format!("Daytona says it is `{state}`"),
                },
                exit_code: None,
                last_log_lines: Vec::new(),
            },
        }))
    }

    /// What Daytona's API says about the snapshot: its record (build info included), its
    /// build log, and any docker-registry entry left under the run's name. Daytona
    /// exposes no image env, labels or history.
    async fn artifact_metadata(&self, artifact: &Artifact) -> Result<String> {
        let id = &artifact.id;
        let snapshot: serde_json::Value = self
            .call(ApiRequest::get(Target::Api, format!("/snapshots/{id}")).what("get snapshot"))
            .await?
            .json()?;
        let logs = self.build_logs_url(id).await?;
        let log = match self
            .call(ApiRequest::get(Target::Absolute(logs.url), "").what("get snapshot build logs"))
            .await
        {
            Ok(response) => response.text(),
            Err(e) if e.kind == ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let registries: Vec<serde_json::Value> = self
            .call(
                ApiRequest::get(Target::Api, "/docker-registry")
                    .what("list docker-registry entries"),
            )
            .await?
            .json()?;
        let registries: Vec<serde_json::Value> = registries
            .into_iter()
            .filter(|r| r["name"] == snapshot["name"])
            .collect();
        Ok(json!({
            "snapshot": snapshot,
            "build log": log.lines().collect::<Vec<_>>(),
            "docker registries": registries,
        })
        .to_string())
    }
}

#[async_trait]
impl Housekeeping for DaytonaProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let name = resource_name(labels);
        let mut found = self.list_sandboxes(labels).await?;
        found.extend(self.list_snapshots(&name).await?);
        found.extend(self.list_registries(&name).await?);
        Ok(found)
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        Some(Resource {
            kind: KIND_SNAPSHOT.into(),
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
        // Sandboxes carry the run label; Daytona filters by key and value, so a listing of
        // every run's is filtered here.
        let filter: BTreeMap<String, String> = run_id
            .map(|id| (crate::RUN_LABEL.to_owned(), id.to_owned()))
            .into_iter()
            .collect();
        let mut found: Vec<Labelled> = self
            .sandboxes_labelled(&filter)
            .await?
            .into_iter()
            .filter_map(|s| {
                let run = s.labels.get(crate::RUN_LABEL)?.clone();
                run_id.is_none_or(|want| want == run).then(|| Labelled {
                    run_id: run,
                    scenario: s.labels.get(crate::SCENARIO_LABEL).cloned(),
                    created: crate::parse_time(s.created_at.as_deref()),
                    resource: Resource {
                        kind: KIND_SANDBOX.into(),
                        id: s.id,
                    },
                })
            })
            .collect();
        // Snapshots and registry entries carry no labels: their name holds the run id
        // (`sandbox-matrix-<run>-<scenario>`).
        let prefix = match run_id {
            Some(id) => format!("{RESOURCE_PREFIX}{id}-"),
            None => RESOURCE_PREFIX.to_owned(),
        };
        let named = |name: &str| {
            crate::run_of_name(RESOURCE_PREFIX, name)
                .filter(|(run, _)| run_id.is_none_or(|want| want == run))
        };
        let labelled =
            |kind: &str, id: String, (run, scenario), created: Option<String>| Labelled {
                run_id: run,
                scenario: Some(scenario),
                created: crate::parse_time(created.as_deref()),
                resource: Resource {
                    kind: kind.into(),
                    id,
                },
            };
        for s in self.snapshots_named(&prefix).await? {
            if let Some(run) = named(&s.name) {
                found.push(labelled(KIND_SNAPSHOT, s.id, run, s.created_at));
            }
        }
        for r in self.registries().await? {
            if let Some(run) = named(&r.name) {
                found.push(labelled(KIND_REGISTRY, r.id, run, r.created_at));
            }
        }
        Ok(found)
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        let id = &resource.id;
        match resource.kind.as_str() {
            KIND_SANDBOX => {
                self.delete(format!("/sandbox/{id}"), "delete sandbox")
                    .await
            }
            KIND_SNAPSHOT => {
                self.delete(format!("/snapshots/{id}"), "delete snapshot")
                    .await
            }
            KIND_REGISTRY if lock(&self.deleted).contains(id) => Ok(Deleted::AlreadyGone),
            KIND_REGISTRY => {
                self.delete(
                    format!("/docker-registry/{id}"),
                    "delete docker-registry entry",
                )
                .await
            }
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the daytona variant has no resource kind `{other}` (resource {id})"),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
