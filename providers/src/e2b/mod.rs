//! The `e2b` variant: an E2B template build, launched by its build id.
//!
//! The control plane is REST with an `X-API-Key` header. A build creates a template,
//! uploads each `COPY` step's files, starts the build and polls its status with a log
//! offset. A sandbox is created from `templateID:buildID`, with the run's labels as
//! metadata and public traffic off; code runs on the template's Jupyter Server (port
//! 49999, see [`crate::jupyter::server`]) in a kernel of our own, reached with the sandbox's traffic
//! access token, and commands through envd's Connect process API (port 49983,
//! `Process/Start`, server-streaming). E2B ignores the image's `USER`,
//! `WORKDIR` and `ENV`, so the template ends by setting them again and every call passes
//! the contract's user, working directory, locale and time zone.

mod client;
mod sweep;
mod template;
mod wire;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::Method;
use sandbox_contract::IDENTITY;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Deleted;
use crate::api::settings::Settings;
use crate::api::{
    ApiClient, ApiRequest, ApiResponse, ApiSettings, Endpoints, Mode, Network, Normalizer, ReqBody,
    Target, Volatiles,
};
use crate::jupyter::server::{Channel, Server};
use crate::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, CreateLog,
    CreateRecorder, ErrorKind, Housekeeping, Labelled, LifetimeLimit, LogFn, Provider,
    ProviderError, Resource, RestartKind, Result, RunLabels, SandboxId, Secret, ShutdownEnding,
    ShutdownObservation, ShutdownReport, Timing,
};

use wire::{
    BuildInfo, CreatedSandbox, FileUpload, ListedSandbox, SandboxLogs, StateOnly, TemplateCreated,
    TemplateListed,
};

/// The spec versions this client was written against.
pub const API_VERSION: &str = "E2B API 0.1.0, envd 0.1.3";
/// The control plane's public address, used when `E2B_API_URL` is not set.
pub const DEFAULT_API_URL: &str = "https://api.e2b.app";
/// The sandbox domain, used when `E2B_DOMAIN` is not set.
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// The artifact kind of a template build.
pub const ARTIFACT_KIND: &str = "e2b-build";
/// Port of envd, the in-sandbox daemon (Connect).
pub const ENVD_PORT: u16 = 49983;
/// Port of the template's Jupyter Server.
pub const CODE_PORT: u16 = 49999;
/// The header E2B's proxy reads the traffic access token from.
pub const TRAFFIC_TOKEN_HEADER: &str = "E2B-Traffic-Access-Token";

/// Request headers a replay compares with the cassette's, after redaction: the API key
/// (`<redacted:E2B_API_KEY>`), envd's access token, the traffic access token, the user
/// envd runs a process as (`Authorization: Basic base64("user:")`) and the body's
/// content type.
pub const REPLAY_MATCHED_HEADERS: &[&str] = &[
    "x-api-key",
    "x-access-token",
    "e2b-traffic-access-token",
    "authorization",
    "content-type",
];

/// Resource kind of a sandbox.
const KIND_SANDBOX: &str = "sandbox";
/// Resource kind of a template (with its builds, names and tags).
const KIND_TEMPLATE: &str = "template";
/// Deadline of one HTTP call unless a call says otherwise: longer than any step budget (at
/// most 24 h), so that the step's budget, not a hidden client timeout, ends a call to a hung
/// or paused service. One timeout source: the budget; a TCP connect still gives up after 10 s.
const CALL_TIMEOUT: Duration = Duration::from_secs(25 * 60 * 60);
/// How long one piece of code or one command may run.
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a build may take before the poll gives up (E2B caps builds at an hour).
const BUILD_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How long launch waits for the Jupyter Server to answer.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long one readiness probe may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Seconds a sandbox lives before E2B kills it, should cleanup never run.
const SANDBOX_TIMEOUT_SECS: u64 = 900;
/// Build log entries fetched per status poll (the spec's maximum).
const LOG_PAGE: usize = 100;
/// Most pages of build log the secrets scan reads (ten thousand lines).
const MAX_LOG_PAGES: usize = 100;
/// Kernels run at once, as the spike measured (four of four).
const CONCURRENT_CONTEXTS: u32 = 4;
/// Resources of the template's sandboxes.
const CPU_COUNT: u32 = 2;
/// Memory of the template's sandboxes, in MiB.
const MEMORY_MB: u32 = 1024;

/// `LANG`, `LC_ALL` and `TZ` as the contract wants them.
pub(crate) fn locale_env() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("LANG", IDENTITY.locale),
        ("LC_ALL", IDENTITY.locale),
        ("TZ", IDENTITY.timezone),
    ])
}

/// Overrides of what the build request and the environment directory say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Replaces the base the build request resolved (`E2B_BASE_IMAGE`).
    pub base_image: Option<String>,
    /// Replaces the environment's start command (`E2B_START_CMD`), which E2B runs once at
    /// build time and snapshots: the server of the code channel.
    pub start_cmd: Option<String>,
    /// Replaces the environment's ready command (`E2B_READY_CMD`).
    pub ready_cmd: Option<String>,
}

/// What launch learned about a sandbox.
#[derive(Debug, Clone)]
struct SandboxState {
    /// envd's access token, sent as `X-Access-Token`.
    access_token: Option<Secret>,
    /// The traffic access token E2B's proxy wants on every other port.
    traffic: Option<Secret>,
    /// The kernel run_code uses.
    kernel: String,
    /// Kernels of run_code_in, by the caller's name.
    named: HashMap<String, String>,
}

/// The `e2b` variant.
pub struct E2bProvider {
    client: ApiClient,
    api_key: Secret,
    options: BuildOptions,
    ready_deadline: Duration,
    sandboxes: Mutex<HashMap<String, SandboxState>>,
    /// Sockets opened so far to each kernel: the next one's session number.
    sockets: Mutex<HashMap<String, usize>>,
    /// Sandboxes this client killed and then saw gone (E2B answered 404): the run's
    /// cleanup, which also deletes what the ledger names, does not delete them again.
    gone: Mutex<HashSet<String>>,
    /// The run ledger: the template is recorded as soon as it exists, before its build.
    creates: CreateRecorder,
}

/// The credentials this client sends in replay mode, for the replay server to redact
/// as the cassette did.
/// How many log lines a failed step's message shows of a sandbox that ended.
const LAST_LOG_LINES: usize = 20;

pub fn replay_credentials() -> Vec<Secret> {
    vec![replay_key()]
}

/// The credential used in replay mode, where nothing checks it.
fn replay_key() -> Secret {
    // Fake: replay serves recorded answers and never sees a real key.
    Secret::new("E2B_API_KEY", "e2b_fake_replay_key_0000")
}

fn poisoned() -> ProviderError {
    ProviderError::new(
        ErrorKind::Protocol,
        "the e2b sandbox table lock was poisoned",
    )
}

/// A 404 on a delete means the thing is already gone.
fn gone_is_fine(outcome: Result<ApiResponse>) -> Result<Deleted> {
    match outcome {
        Ok(_) => Ok(Deleted::Removed),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
        Err(e) => Err(e),
    }
}

/// The template name of a run's scenario: lowercase letters, digits and dashes.
pub fn template_name(labels: &RunLabels) -> String {
    let raw = format!("sm-{}-{}", labels.run_id, labels.scenario);
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(128);
    name
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    /// RFC 3986's unreserved characters stay as they are.
    const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(text, UNRESERVED).to_string()
}

/// Folds envd's `Process/Start` frames into a command's output.
fn command_output(frames: &[crate::api::ConnectFrame]) -> Result<CommandOutput> {
    let mut out = CommandOutput::default();
    let decode = |v: &Value| -> Result<String> {
        let text = v.as_str().unwrap_or_default();
        let bytes = BASE64.decode(text).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("process output is not base64: {e}"),
            )
        })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    for frame in frames {
        if frame.flags & 2 != 0 {
            if let Some(error) = frame.message.get("error") {
                return Err(ProviderError::new(
                    ErrorKind::Api,
                    format!(
                        "envd ended the process stream with {}: {}",
                        error
                            .get("code")
                            .and_then(Value::as_str)
                            .unwrap_or("an error"),
                        error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    ),
                ));
            }
            continue;
        }
        let Some(event) = frame.message.get("event") else {
            continue;
        };
        if let Some(data) = event.get("data") {
            if let Some(stdout) = data.get("stdout") {
                out.stdout.push_str(&decode(stdout)?);
            }
            if let Some(stderr) = data.get("stderr") {
                out.stderr.push_str(&decode(stderr)?);
            }
        }
        if let Some(end) = event.get("end") {
            out.exit_code = Some(end.get("exitCode").and_then(Value::as_i64).unwrap_or(0));
            if let Some(error) = end.get("error").and_then(Value::as_str)
                && !error.is_empty()
            {
                out.stderr.push_str(error);
            }
        }
    }
    Ok(out)
}

/// What the e2b variant can do.
pub const CAPABILITIES: Capabilities = Capabilities {
    build: true,
    restart: RestartKind::Kernel,
    build_logs: BuildLogMode::Polled,
    exec_as_root: true,
    doctor_scan: false,
    artifact_metadata: true,
    floor: false,
    concurrent_contexts: CONCURRENT_CONTEXTS,
    stateful_code: true,
    shutdown: ShutdownObservation::Api,
    gpus: 0,
    egress_policy: false,
    artifacts_listed: true,
    provenance: false,
    // `NewSandbox.timeout`, whole seconds from create (E2B's spec/openapi.yml).
    lifetime: LifetimeLimit::SinceCreate { unit_secs: 1 },
};

#[async_trait]
impl Provider for E2bProvider {
    fn variant(&self) -> &str {
        "e2b"
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
        Some(API_VERSION.to_owned())
    }

    async fn check_access(&self) -> Result<String> {
        let listed: Vec<TemplateListed> = self
            .client
            .call(
                self.api(Method::GET, "/v2/templates")
                    .what("list templates"),
            )
            .await?
            .json()?;
        Ok(format!(
            "listed templates: {} on the first page",
            listed.len()
        ))
    }

    fn credential_use(&self, request: &BuildRequest) -> String {
        match &request.registry_credential {
            Some(_) => format!(
                "{}; handed to the template build as fromImageRegistry",
                request.credential_made()
            ),
            None => request.credential_made(),
        }
    }

    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let plan = template::plan(&request.environment_dir)?;
        // Refused before anything is created: without a start command nothing would serve
        // the code channel, and every launch would wait out its readiness deadline.
        let commands = template::start_commands(&request.environment_dir, &self.options)?;
        let from_image = self
            .options
            .base_image
            .clone()
            .unwrap_or_else(|| template::resolve_base(&plan.from_image, &request.base));
        if !plan.ignored.is_empty() {
            log(&format!(
                "E2B templates take no {}: the start command and the contract's identity replace them",
                plan.ignored.join(", ")
            ));
        }
        let name = self.template_name(&request.labels);
        let seq = self.creates.intent(&request.labels, KIND_TEMPLATE)?;
        let created: TemplateCreated = self
            .client
            .call(
                self.api(Method::POST, "/v3/templates")
                    .json(json!({ "name": name, "cpuCount": CPU_COUNT, "memoryMB": MEMORY_MB }))
                    .what("create template"),
            )
            .await?
            .json()?;
        let (tid, bid) = (&created.template_id, &created.build_id);
        let template = Resource {
            kind: KIND_TEMPLATE.into(),
            id: tid.clone(),
        };
        self.creates.created(seq, &request.labels, &template, log);
        log(&format!("template {tid}, build {bid}"));
        for upload in &plan.uploads {
            let link: FileUpload = self
                .client
                .call(
                    self.api(
                        Method::GET,
                        format!("/templates/{tid}/files/{}", upload.hash),
                    )
                    .what("get a file upload link"),
                )
                .await?
                .json()?;
            match (link.present, link.url) {
                (true, _) => log(&format!("files {} already uploaded", &upload.hash[..12])),
                (false, Some(url)) => {
                    // As E2B's SDK uploads: no content type (the signed URL is made without
                    // one), the headers the API names but the length, which the client sets.
                    let mut put = ApiRequest::new(Method::PUT, Target::Absolute(url), "");
                    for (name, value) in &link.headers {
                        if !name.eq_ignore_ascii_case("content-length") {
                            put = put.header(name, value.clone());
                        }
                    }
                    self.client
                        .call(
                            put.body(ReqBody::Raw(upload.archive.clone()))
                                .idempotent(true)
                                .what("upload build files"),
                        )
                        .await?;
                    log(&format!(
                        "uploaded files {} ({} bytes, gzipped)",
                        &upload.hash[..12],
                        upload.archive.len()
                    ));
                }
                (false, None) => {
                    return Err(ProviderError::new(
                        ErrorKind::Protocol,
                        format!("E2B gave no upload link for files {}", upload.hash),
                    )
                    .context("get a file upload link"));
                }
            }
        }
        let mut start = json!({
            "fromImage": from_image,
            "steps": plan.steps,
            "force": false,
        });
        let registry_login = match &request.registry_credential {
            // The base's registry credential, made for this run (an ECR login token is a
            // registry password for user `AWS`).
            Some(credential) => Some((credential.username.clone(), credential.password.clone())),
            // A local base needs none; the run's fake canary goes the way a registry
            // credential would, so the secrets scan checks E2B's side for it.
            None => request
                .build_secrets
                .first()
                .map(|canary| ("sandbox-matrix".to_owned(), canary.clone())),
        };
        if let Some((username, password)) = registry_login {
            self.client.add_secret(password.clone());
            start["fromImageRegistry"] = json!({
                "type": "registry",
                "username": username,
                "password": password.expose(),
            });
        }
        start["startCmd"] = json!(commands.start);
        if let Some(ready) = &commands.ready {
            start["readyCmd"] = json!(ready);
        }
        self.client
            .call(
                self.api(Method::POST, format!("/v2/templates/{tid}/builds/{bid}"))
                    .json(start)
                    .what("start template build"),
            )
            .await?;
        let resolution = self.wait_for_build(tid, bid, log).await?;
        log(&format!(
            "build ready (status polled every {} ms at most)",
            resolution.as_millis()
        ));
        Ok(Artifact {
            id: format!("{tid}:{bid}"),
            kind: ARTIFACT_KIND.into(),
        })
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_timeout(artifact, labels, SANDBOX_TIMEOUT_SECS)
            .await
    }

    /// Creates the sandbox with `timeout` set to `lifetime`, in seconds.
    async fn launch_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_timeout(artifact, labels, lifetime.as_secs().max(1))
            .await
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        let state = self.state(sandbox)?;
        let output = self.execute(sandbox, &state, &state.kernel, code).await?;
        Ok((output, Vec::new()))
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let state = self.state(sandbox)?;
        let kernel = match state.named.get(context) {
            Some(kernel) => kernel.clone(),
            None => {
                let kernel = self.start_kernel(sandbox, &state).await?;
                let mut table = self.sandboxes.lock().map_err(|_| poisoned())?;
                if let Some(entry) = table.get_mut(&sandbox.0) {
                    entry.named.insert(context.to_owned(), kernel.clone());
                }
                kernel
            }
        };
        self.execute(sandbox, &state, &kernel, code).await
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        let (cmd, args) = argv
            .split_first()
            .ok_or_else(|| ProviderError::new(ErrorKind::Config, "exec needs a command to run"))?;
        let token = self.state(sandbox)?.access_token;
        let user = if as_root { "root" } else { IDENTITY.user };
        let response = self
            .client
            .call(
                self.in_sandbox(
                    Method::POST,
                    ENVD_PORT,
                    sandbox,
                    token.as_ref(),
                    "/process.Process/Start",
                )
                // envd runs the process as the user named in Basic auth (no password).
                .header(
                    "Authorization",
                    format!("Basic {}", BASE64.encode(format!("{user}:"))),
                )
                .body(ReqBody::ConnectStream(json!({
                    "process": {
                        "cmd": cmd,
                        "args": args,
                        "envs": locale_env(),
                        "cwd": IDENTITY.workdir,
                    },
                    "stdin": false,
                })))
                .timeout(EXECUTE_TIMEOUT)
                .what("start process"),
            )
            .await?;
        command_output(&response.connect_frames()?)
    }

    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        let state = self.state(sandbox)?;
        let started = Instant::now();
        self.channel(sandbox, &state)
            .restart_kernel(&state.kernel, EXECUTE_TIMEOUT)
            .await?;
        let restarted = started.elapsed();
        let started = Instant::now();
        self.kernel_ready(sandbox, &state, &state.kernel).await?;
        Ok(vec![
            Timing {
                name: "kernel-restart".into(),
                duration: restarted,
                resolution: None,
            },
            Timing {
                name: "kernel-ready".into(),
                duration: started.elapsed(),
                resolution: None,
            },
        ])
    }

    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport> {
        self.kill(&sandbox.0).await?;
        let path = format!("/sandboxes/{}", sandbox.0);
        self.client
            .poll_until("the sandbox to stop", grace, || async {
                match self
                    .client
                    .call(self.api(Method::GET, path.clone()).what("get sandbox"))
                    .await
                {
                    Err(e) if e.kind == ErrorKind::NotFound => Ok(Some(())),
                    Err(e) => Err(e),
                    Ok(_) => Ok(None),
                }
            })
            .await?;
        self.gone
            .lock()
            .map_err(|_| poisoned())?
            .insert(sandbox.0.clone());
        Ok(ShutdownReport {
            ending: ShutdownEnding::NotObservable,
            exit_code: None,
        })
    }

    /// `GET /sandboxes/{id}`: `running` or `paused`; a sandbox E2B no longer has (404)
    /// has ended, and its last log lines are asked of `GET /v2/sandboxes/{id}/logs`
    /// (newest first, reversed here; none when E2B keeps none).
    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<crate::SandboxState>> {
        let asked = self
            .client
            .call(
                self.api(Method::GET, format!("/sandboxes/{}", sandbox.0))
                    .what("get sandbox"),
            )
            .await;
        match asked {
            Ok(response) => match response.json::<StateOnly>()?.state.as_str() {
                "running" => Ok(Some(crate::SandboxState::Running)),
                "paused" => Ok(Some(crate::SandboxState::Paused)),
                other => Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!(
                        "E2B said sandbox {} is `{other}`, neither running nor paused",
                        sandbox.0
                    ),
                )),
            },
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Some(crate::SandboxState::Stopped {
                ending:
                    "E2B no longer has it (it was killed, ran out of memory or passed its timeout)"
                        .to_owned(),
                exit_code: None,
                last_log_lines: self.last_log_lines(&sandbox.0).await,
            })),
            Err(e) => Err(e),
        }
    }

    /// What E2B's API says about the build: its status answers with the whole log, paged
    /// from the start, and the template's entry in the listing. E2B exposes no image
    /// env, labels or history.
    async fn artifact_metadata(&self, artifact: &Artifact) -> Result<String> {
        let (tid, bid) = artifact.id.split_once(':').ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Config,
                format!(
                    "an {ARTIFACT_KIND} artifact is templateID:buildID, not {}",
                    artifact.id
                ),
            )
        })?;
        let mut pages = Vec::new();
        let mut offset = 0;
        loop {
            if pages.len() == MAX_LOG_PAGES {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!(
                        "build {bid} has more than {offset} log lines; the secrets scan reads no more"
                    ),
                ));
            }
            let page: Value = self
                .client
                .call(
                    self.api(
                        Method::GET,
                        format!(
                            "/templates/{tid}/builds/{bid}/status?logsOffset={offset}&limit={LOG_PAGE}"
                        ),
                    )
                    .what("get build status and logs"),
                )
                .await?
                .json()?;
            let lines = serde_json::from_value::<BuildInfo>(page.clone())
                .map_err(|e| ProviderError::new(ErrorKind::Protocol, format!("build status: {e}")))?
                .lines()
                .len();
            pages.push(page);
            offset += lines;
            if lines < LOG_PAGE {
                break;
            }
        }
        let templates: Vec<Value> = self.list_all("/v2/templates", "list templates").await?;
        let template: Vec<Value> = templates
            .into_iter()
            .filter(|t| t["templateID"] == tid)
            .collect();
        Ok(json!({ "template": template, "build": pages }).to_string())
    }
}

#[cfg(test)]
mod tests;
