//! The `datalayer-runtimes` variant: the Datalayer platform's own launch, through its
//! runtimes API (`{base}/api/runtimes/v1`), live, recorded and replayed.
//!
//! The platform builds its environments and launches them by name: this variant builds
//! nothing (its build step is skipped, saying which environment it launches). Launch reads
//! the environment's burning rate from `GET /environments`, reserves credits for
//! [`RESERVATION_MINUTES`] with `POST /runtimes` (`type`, `environment_name`, `given_name`,
//! `credits_limit`, a Bearer token), and reads the answer's `runtime` (`pod_name`, `uid`,
//! `ingress`, `token`, `started_at`, `expired_at`); a 200 whose body says `success: false`
//! is a failed launch with the platform's message. Get and delete are keyed by `pod_name`:
//! the `uid` names the runtime in the platform's records, not in its API paths.
//!
//! Jupyter Server is reached at the runtime's ingress with the runtime's token
//! (`Authorization: token <t>`), through [`crate::jupyter::server`]; while the ingress warms
//! up it answers 502, 503 or 504, which launch retries until its deadline. Commands run as
//! `subprocess.run` in a kernel of their own (the runtimes API has no process call), as the
//! runtime's user, never as root. A runtime's `given_name` is `sm-<run-id>-<scenario>`:
//! runtimes carry no labels, so that name is what cleanup and `sweep` find them by.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::Deleted;
use crate::api::settings::Settings;
use crate::api::{ApiClient, ApiRequest, ApiSettings, Endpoints, Mode, Network, Target, Volatiles};
use crate::jupyter::server::{Channel, Server};
use crate::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, ErrorKind,
    Housekeeping, Labelled, LifetimeLimit, LogFn, Provider, ProviderError, Resource, RestartKind,
    Result, RunLabels, SandboxId, Secret, ShutdownEnding, ShutdownObservation, ShutdownReport,
    Timing,
};

/// The variant's name.
pub const VARIANT: &str = "datalayer-runtimes";
/// The runtimes API's base URL when [`URL_VAR`] is not set: the platform's first region,
/// as Datalayer's own client defaults to it.
pub const DEFAULT_RUNTIMES_URL: &str = "https://r1.datalayer.run";
/// The runtimes API's base URL, as Datalayer's client reads it.
pub const URL_VAR: &str = "DATALAYER_RUNTIMES_URL";
/// The API key, sent as a Bearer token, as Datalayer's client reads it.
pub const API_KEY_VAR: &str = "DATALAYER_API_KEY";
/// The environment the variant launches.
pub const ENVIRONMENT_VAR: &str = "SANDBOX_MATRIX_DATALAYER_ENVIRONMENT";
/// The environment launched when [`ENVIRONMENT_VAR`] is not set: the default of
/// Datalayer's own client, datalayer-core 1.1.40 (`DEFAULT_ENVIRONMENT` in
/// `datalayer_core/utils/defaults.py`, what `create_runtime` launches). Whether the live
/// platform still lists it is not checked here: `preflight` asks the platform.
pub const DEFAULT_ENVIRONMENT: &str = "ai-agents-env";
/// The artifact kind: an environment the platform launches by name.
pub const ARTIFACT_KIND: &str = "environment";
/// The resource kind of a runtime; its id is the `pod_name`.
pub const KIND_RUNTIME: &str = "runtime";
/// Minutes of credits a launch reserves (the runtime's burning rate × 60 × this), as
/// Datalayer's client reserves by default.
pub const RESERVATION_MINUTES: f64 = 10.0;
/// Request headers a replay compares with the cassette's, after redaction: the Bearer
/// key, the runtime's token at the ingress, and the body's content type.
pub const REPLAY_MATCHED_HEADERS: &[&str] = &["authorization", "content-type"];
/// The runtimes API's path prefix.
const API: &str = "/api/runtimes/v1";
/// Deadline of one HTTP call unless a call says otherwise: longer than any step budget, so
/// that the step's budget ends a call to a hung service (one timeout source).
const CALL_TIMEOUT: Duration = Duration::from_secs(25 * 60 * 60);
/// How long launch waits for the ingress's Jupyter Server and the first kernel.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// How long one readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one piece of code or one command may run.
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long shutdown waits for a deleted runtime to be gone from the API.
const GONE_DEADLINE: Duration = Duration::from_secs(60);
/// Kernels one runtime runs at once: what check 14 asks for and what the emulator
/// exercised, not a figure measured on the platform.
const CONCURRENT_CONTEXTS: u32 = 4;
/// The prefix of every runtime's `given_name`.
const NAME_PREFIX: &str = "sm-";
/// The kernel commands run in, by the name [`Provider::run_code_in`] would give it.
const EXEC_CONTEXT: &str = "\u{0}exec";

/// What the variant can do: no build (the platform builds), kernel restart, a kernel per
/// context, commands as the runtime's user, shutdown seen only through the API.
pub const CAPABILITIES: Capabilities = Capabilities {
    build: false,
    restart: RestartKind::Kernel,
    build_logs: BuildLogMode::None,
    exec_as_root: false,
    doctor_scan: false,
    artifact_metadata: false,
    floor: false,
    concurrent_contexts: CONCURRENT_CONTEXTS,
    stateful_code: true,
    shutdown: ShutdownObservation::Api,
    gpus: 0,
    egress_policy: false,
    artifacts_listed: true,
    provenance: false,
    // `credits_limit`: the platform ends a runtime once it has burnt them, at the
    // environment's burning rate (credits a second).
    lifetime: LifetimeLimit::SinceCreate { unit_secs: 1 },
};

/// A runtime as the API describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct RuntimeRecord {
    /// The key of get and delete.
    pub pod_name: String,
    /// The platform's record id (not a key of the API's paths).
    #[serde(default)]
    pub uid: Option<String>,
    /// The name the client gave.
    #[serde(default)]
    pub given_name: Option<String>,
    /// The environment it runs.
    #[serde(default)]
    pub environment_name: Option<String>,
    /// Jupyter Server's base URL.
    pub ingress: String,
    /// The token Jupyter Server wants.
    pub token: String,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// When its reservation ends (RFC 3339).
    #[serde(default)]
    pub expired_at: Option<String>,
}

#[derive(Deserialize)]
struct Answer<T> {
    #[serde(default = "yes")]
    success: bool,
    #[serde(default)]
    message: Option<String>,
    #[serde(flatten)]
    body: Option<T>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct Created {
    runtime: RuntimeRecord,
}

#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    runtimes: Vec<RuntimeRecord>,
}

#[derive(Deserialize)]
struct Environments {
    #[serde(default)]
    environments: Vec<EnvironmentRecord>,
}

#[derive(Deserialize)]
struct EnvironmentRecord {
    name: String,
    #[serde(default)]
    burning_rate: Option<f64>,
}

/// What launch learned of a runtime.
#[derive(Clone)]
struct RuntimeState {
    ingress: String,
    token: Secret,
    /// Kernel ids by context name (`""` is run_code's), each started once, on first use.
    kernels: HashMap<String, Arc<tokio::sync::OnceCell<String>>>,
}

/// The `datalayer-runtimes` variant.
pub struct RuntimesProvider {
    client: ApiClient,
    api_key: Secret,
    environment: String,
    ready_deadline: Duration,
    runtimes: Mutex<HashMap<String, RuntimeState>>,
    /// Sockets opened so far to each kernel: the next one's session number.
    sockets: Mutex<HashMap<String, usize>>,
    /// Runtimes this client deleted: the run's cleanup, which also deletes what the ledger
    /// names, does not delete them again.
    gone: Mutex<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for RuntimesProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimesProvider")
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

/// The credentials this client sends in replay mode, for the replay server to redact as
/// the cassette did.
pub fn replay_credentials() -> Vec<Secret> {
    vec![replay_key()]
}

/// A placeholder for replay, where nothing is authenticated; not a credential.
fn replay_key() -> Secret {
    Secret::new(API_KEY_VAR, "datalayer-fake-replay-key-0000")
}

/// The `given_name` of a run's scenario: `sm-<run-id>-<scenario>`.
pub fn given_name(labels: &RunLabels) -> String {
    format!("{NAME_PREFIX}{}-{}", labels.run_id, labels.scenario)
}

impl RuntimesProvider {
    /// Creates a runtime of the environment `artifact` names with credits for `minutes` at
    /// its burning rate (`credits_limit`), so the platform ends it then, and waits until its
    /// Jupyter Server answers.
    async fn launch_with_credits_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        minutes: f64,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        let rate = self.environment().await?;
        let name = given_name(labels);
        self.client.volatiles().register("given_name", &name);
        let started = Instant::now();
        let created: Result<Created> = self
            .answer(
                self.api(Method::POST, "/runtimes")
                    .json(json!({
                        "type": "notebook",
                        "environment_name": artifact.id,
                        "given_name": name,
                        "credits_limit": rate * 60.0 * minutes,
                    }))
                    .idempotent(false),
                "create runtime",
            )
            .await;
        let runtime = match created {
            Ok(created) => created.runtime,
            Err(e) => {
                // An answer lost on the way (not a refusal) may still have made one: never
                // leave it behind, and say so when it cannot be removed.
                let mut left_behind = Vec::new();
                if e.retryable || matches!(e.kind, ErrorKind::Transport | ErrorKind::Timeout) {
                    match self.listed().await {
                        Ok(listed) => {
                            for left in listed
                                .iter()
                                .filter(|r| r.given_name.as_deref() == Some(&name))
                            {
                                if let Err(gone) = self.delete(&left.pod_name).await {
                                    left_behind.push(format!(
                                        "the runtime `{}` it made could not be deleted ({gone})",
                                        left.pod_name
                                    ));
                                }
                            }
                        }
                        Err(listing) => left_behind.push(format!(
                            "the runtimes could not be listed to find one it may have made \
                             ({listing})"
                        )),
                    }
                }
                let mut what = format!("launch environment `{}`", artifact.id);
                if !left_behind.is_empty() {
                    what.push_str(&format!(
                        "; {}: `sandbox-matrix sweep --run {}` removes what is left",
                        left_behind.join("; "),
                        labels.run_id
                    ));
                }
                return Err(e.context(what));
            }
        };
        let mut timings = vec![Timing {
            name: "runtime-create".into(),
            duration: started.elapsed(),
            resolution: None,
        }];
        let token = Secret::new("DATALAYER_RUNTIME_TOKEN", runtime.token.clone());
        self.client.add_secret(token.clone());
        let sandbox = SandboxId(runtime.pod_name.clone());
        let state = RuntimeState {
            ingress: runtime.ingress.clone(),
            token,
            kernels: HashMap::new(),
        };
        lock(&self.runtimes)?.insert(sandbox.0.clone(), state.clone());
        let ready = async {
            self.ingress_ready(&state, &mut timings).await?;
            let started = Instant::now();
            self.kernel(&sandbox, "").await?;
            timings.push(Timing {
                name: "kernel-start".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            Ok::<_, ProviderError>(())
        };
        match ready.await {
            Ok(()) => Ok((sandbox, timings)),
            Err(e) => {
                if let Err(delete) = self.delete(&sandbox.0).await {
                    tracing::warn!(runtime = %sandbox.0, "could not delete a runtime that never became ready: {delete}");
                }
                Err(e.context(format!("launch runtime {}", sandbox.0)))
            }
        }
    }

    /// Connects with [`API_KEY_VAR`] (not needed in replay), [`URL_VAR`] overriding the
    /// base URL and [`ENVIRONMENT_VAR`] naming the environment, all read from `settings`;
    /// live, with their test network settings.
    pub fn from_settings(
        mode: Mode,
        volatiles: Arc<Volatiles>,
        settings: &Settings,
    ) -> Result<Self> {
        let var = |name: &str| settings.var(name);
        let api_key = match (&mode, var(API_KEY_VAR)) {
            (Mode::Replay { .. }, _) => replay_key(),
            (_, Some(key)) => Secret::new(API_KEY_VAR, key),
            (_, None) => {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!("the {VARIANT} variant needs {API_KEY_VAR} in the environment"),
                ));
            }
        };
        let base = var(URL_VAR).unwrap_or_else(|| DEFAULT_RUNTIMES_URL.to_owned());
        let environment = var(ENVIRONMENT_VAR).unwrap_or_else(|| DEFAULT_ENVIRONMENT.to_owned());
        let network = settings.network_for(&mode)?;
        Self::with_network(&base, mode, api_key, volatiles, environment, &network)
    }

    /// A provider for the runtimes API at `base`; live, with the test network settings of
    /// the environment, if any (see [`crate::api::network`]).
    pub fn new(
        base: &str,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        environment: String,
    ) -> Result<Self> {
        let client = ApiClient::new(Self::settings(base, mode, &api_key, volatiles))?;
        Ok(Self::with_client(client, api_key, environment))
    }

    /// [`Self::new`], trusting `network`'s extra roots and resolving through its pin (an
    /// emulator reached through its HTTPS names).
    pub fn with_network(
        base: &str,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        environment: String,
        network: &Network,
    ) -> Result<Self> {
        let client =
            ApiClient::with_network(Self::settings(base, mode, &api_key, volatiles), network)?;
        Ok(Self::with_client(client, api_key, environment))
    }

    fn settings(
        base: &str,
        mode: Mode,
        api_key: &Secret,
        volatiles: Arc<Volatiles>,
    ) -> ApiSettings {
        ApiSettings {
            endpoints: Endpoints {
                api_base: base.trim_end_matches('/').to_owned(),
                // Unused: Jupyter is reached at each runtime's ingress.
                sandbox_domain: String::new(),
            },
            mode,
            credentials: vec![api_key.clone()],
            volatiles,
            call_timeout: CALL_TIMEOUT,
        }
    }

    fn with_client(client: ApiClient, api_key: Secret, environment: String) -> Self {
        Self {
            client,
            api_key,
            environment,
            ready_deadline: READY_DEADLINE,
            runtimes: Mutex::default(),
            sockets: Mutex::default(),
            gone: Mutex::default(),
        }
    }

    /// Sets how long launch waits for the ingress and the first kernel (120 s unless set).
    pub fn with_ready_deadline(mut self, deadline: Duration) -> Self {
        self.ready_deadline = deadline;
        self
    }

    fn api(&self, method: Method, path: &str) -> ApiRequest {
        ApiRequest::new(method, Target::Api, format!("{API}{path}"))
            .header("Authorization", format!("Bearer {}", self.api_key.expose()))
    }

    /// Calls the API and reads its answer, failing with the platform's message on a body
    /// that says `success: false`, whatever the status.
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        request: ApiRequest,
        what: &str,
    ) -> Result<T> {
        let response = self.client.call(request.what(what)).await?;
        let answer: Answer<T> = response.json()?;
        let refused = |message: Option<String>| {
            ProviderError::new(
                ErrorKind::Api,
                format!(
                    "{what}: the platform answered success: false: {}",
                    message.as_deref().unwrap_or("(no message)")
                ),
            )
        };
        match answer {
            Answer {
                success: false,
                message,
                ..
            } => Err(refused(message)),
            Answer {
                body: Some(body), ..
            } => Ok(body),
            Answer { message, .. } => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{what}: the answer lacks what it should hold{}",
                    message.map(|m| format!(" ({m})")).unwrap_or_default()
                ),
            )),
        }
    }

    fn channel<'a>(&'a self, state: &'a RuntimeState) -> Channel<'a> {
        Channel {
            client: &self.client,
            server: Server::Url(&state.ingress),
            // As Datalayer's kernel client sends it (jupyter-kernel-client 0.15.0,
            // `manager.py`); Jupyter Server takes `token` or `bearer` alike.
            admit: Some(("Authorization", "Bearer ", &state.token)),
        }
    }

    fn next_socket(&self, kernel: &str) -> Result<usize> {
        let mut sockets = lock(&self.sockets)?;
        let n = sockets.entry(kernel.to_owned()).or_insert(0);
        *n += 1;
        Ok(*n)
    }

    /// The environment to launch, with its burning rate (credits a second).
    async fn environment(&self) -> Result<f64> {
        let listed: Environments = self
            .answer(self.api(Method::GET, "/environments"), "list environments")
            .await?;
        let names: Vec<&str> = listed
            .environments
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        let found = listed
            .environments
            .iter()
            .find(|e| e.name == self.environment)
            .ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "the platform has no environment `{}` ({ENVIRONMENT_VAR}); it has: {}",
                        self.environment,
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ),
                )
            })?;
        match found.burning_rate {
            Some(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
            other => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "environment `{}` has no positive burning_rate ({}): no credits can be reserved",
                    self.environment,
                    other.map_or("none given".to_owned(), |rate| format!("it is {rate}"))
                ),
            )),
        }
    }

    /// Runtimes whose `given_name` is the run's, of `run_id` or of any run.
    async fn listed(&self) -> Result<Vec<RuntimeRecord>> {
        let listed: Listed = self
            .answer(self.api(Method::GET, "/runtimes"), "list runtimes")
            .await?;
        Ok(listed.runtimes)
    }

    /// Deletes a runtime by its `pod_name`; one already gone is not an error.
    async fn delete(&self, pod_name: &str) -> Result<Deleted> {
        let outcome = self
            .client
            .call(
                self.api(Method::DELETE, &format!("/runtimes/{pod_name}"))
                    .what("delete runtime"),
            )
            .await;
        lock(&self.runtimes)?.remove(pod_name);
        match outcome {
            Ok(_) => {
                lock(&self.gone)?.insert(pod_name.to_owned());
                Ok(Deleted::Removed)
            }
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e),
        }
    }

    /// Waits for the ingress's Jupyter Server, retrying 502, 503 and 504 (and a connection
    /// refused) while it warms up; any other answer fails at once.
    async fn ingress_ready(&self, state: &RuntimeState, timings: &mut Vec<Timing>) -> Result<()> {
        let started = Instant::now();
        let channel = self.channel(state);
        let ((), resolution) = self
            .client
            .poll_until(
                "the runtime's Jupyter Server at its ingress",
                self.ready_deadline,
                || async {
                    let probe = channel
                        .request(Method::GET, "/api/status")
                        .idempotent(false)
                        .timeout(PROBE_TIMEOUT)
                        .what("Jupyter Server status");
                    match self.client.call(probe).await {
                        Ok(_) => Ok(Some(())),
                        Err(e) if e.retryable || e.kind == ErrorKind::Transport => Ok(None),
                        Err(e) => Err(e.context("the ingress refused the runtime's token")),
                    }
                },
            )
            .await?;
        timings.push(Timing {
            name: "ingress-ready".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        });
        Ok(())
    }

    /// Starts a kernel on the runtime and waits until it answers.
    async fn start_kernel(&self, state: &RuntimeState) -> Result<String> {
        let channel = self.channel(state);
        let kernel = channel.start_kernel(CALL_TIMEOUT).await?;
        let n = self.next_socket(&kernel)?;
        let mut socket = channel.open(&kernel, n, CALL_TIMEOUT).await?;
        let ready = socket.wait_ready(self.ready_deadline).await;
        socket.close().await;
        ready.map_err(|e| e.context(format!("wait for kernel {kernel}")))?;
        Ok(kernel)
    }

    /// The kernel of `context` on `sandbox`, started on first use (once, however many
    /// callers ask at the same time; contexts start side by side).
    async fn kernel(&self, sandbox: &SandboxId, context: &str) -> Result<(RuntimeState, String)> {
        let (state, cell) = {
            let mut runtimes = lock(&self.runtimes)?;
            let kept = runtimes.get_mut(&sandbox.0).ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::NotFound,
                    format!("runtime {} was not launched by this provider", sandbox.0),
                )
            })?;
            let cell = kept.kernels.entry(context.to_owned()).or_default().clone();
            (kept.clone(), cell)
        };
        let kernel = cell
            .get_or_try_init(|| self.start_kernel(&state))
            .await?
            .clone();
        Ok((state, kernel))
    }

    /// Runs `code` on `kernel` over a socket of its own.
    async fn execute(&self, state: &RuntimeState, kernel: &str, code: &str) -> Result<CodeOutput> {
        let n = self.next_socket(kernel)?;
        let mut socket = self.channel(state).open(kernel, n, CALL_TIMEOUT).await?;
        let output = socket.execute(code, EXECUTE_TIMEOUT).await;
        socket.close().await;
        output.map_err(|e| e.context(format!("execute code on kernel {kernel}")))
    }
}

/// The Python that runs `argv` in a kernel and prints what it did as one JSON line.
fn command_code(argv: &[String]) -> String {
    // A JSON array of strings is a Python list literal.
    let argv = serde_json::to_string(argv).unwrap_or_else(|_| "[]".to_owned());
    format!(
        "import json as _sm_json, subprocess as _sm_subprocess\n\
         try:\n    _sm_done = _sm_subprocess.run({argv}, capture_output=True)\n    \
         print(_sm_json.dumps({{'exit_code': _sm_done.returncode, 'stdout': _sm_done.stdout.decode('utf-8', 'replace'), 'stderr': _sm_done.stderr.decode('utf-8', 'replace')}}))\n\
         except OSError as _sm_error:\n    \
         print(_sm_json.dumps({{'exit_code': None, 'stdout': '', 'stderr': str(_sm_error)}}))\n"
    )
}

#[derive(Deserialize)]
struct Ran {
    exit_code: Option<i64>,
    stdout: String,
    stderr: String,
}

/// What [`command_code`] printed, read back.
fn command_output(output: &CodeOutput) -> Result<CommandOutput> {
    if let Some(error) = &output.error {
        return Err(ProviderError::new(
            ErrorKind::Protocol,
            format!("the command's kernel raised {error}"),
        ));
    }
    let line = output.stdout.lines().last().unwrap_or_default();
    let ran: Ran = serde_json::from_str(line).map_err(|e| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!(
                "the command's kernel printed no result line ({e}): {}",
                crate::tail(&output.stdout, 200)
            ),
        )
    })?;
    Ok(CommandOutput {
        exit_code: ran.exit_code,
        stdout: ran.stdout,
        stderr: ran.stderr,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    mutex.lock().map_err(|_| {
        ProviderError::new(
            ErrorKind::Protocol,
            "the datalayer-runtimes table lock was poisoned",
        )
    })
}

#[async_trait]
impl Provider for RuntimesProvider {
    fn variant(&self) -> &str {
        VARIANT
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

    fn platform_artifact(&self) -> Option<(Artifact, String)> {
        Some((
            Artifact {
                id: self.environment.clone(),
                kind: ARTIFACT_KIND.to_owned(),
            },
            format!(
                "the platform builds its environments: this variant launches environment `{}` by name",
                self.environment
            ),
        ))
    }

    async fn check_access(&self) -> Result<String> {
        self.environment().await?;
        Ok(format!(
            "listed environments: `{}` is there",
            self.environment
        ))
    }

    async fn build(&self, _request: &BuildRequest, _log: &LogFn) -> Result<Artifact> {
        Err(ProviderError::unsupported(
            "build an environment (the platform builds them)",
        ))
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_credits_for(artifact, labels, RESERVATION_MINUTES)
            .await
    }

    async fn launch_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        lifetime: Duration,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_with_credits_for(artifact, labels, lifetime.as_secs_f64() / 60.0)
            .await
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        let (state, kernel) = self.kernel(sandbox, "").await?;
        Ok((self.execute(&state, &kernel, code).await?, Vec::new()))
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let (state, kernel) = self.kernel(sandbox, &format!("context:{context}")).await?;
        self.execute(&state, &kernel, code).await
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        if as_root {
            return Err(ProviderError::unsupported(
                "run a command as root (the runtime's kernel runs as its user)",
            ));
        }
        let (state, kernel) = self.kernel(sandbox, EXEC_CONTEXT).await?;
        let output = self.execute(&state, &kernel, &command_code(argv)).await?;
        command_output(&output).map_err(|e| e.context(format!("run `{}`", argv.join(" "))))
    }

    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        let (state, kernel) = self.kernel(sandbox, "").await?;
        let started = Instant::now();
        let channel = self.channel(&state);
        channel.restart_kernel(&kernel, CALL_TIMEOUT).await?;
        let n = self.next_socket(&kernel)?;
        let mut socket = channel.open(&kernel, n, CALL_TIMEOUT).await?;
        let ready = socket.wait_ready(self.ready_deadline).await;
        socket.close().await;
        ready?;
        Ok(vec![Timing {
            name: "kernel-restart".into(),
            duration: started.elapsed(),
            resolution: None,
        }])
    }

    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport> {
        self.delete(&sandbox.0).await?;
        let path = format!("/runtimes/{}", sandbox.0);
        self.client
            .poll_until(
                "the runtime to be gone",
                grace.max(GONE_DEADLINE),
                || async {
                    match self
                        .client
                        .call(self.api(Method::GET, &path).what("get runtime"))
                        .await
                    {
                        Err(e) if e.kind == ErrorKind::NotFound => Ok(Some(())),
                        Err(e) => Err(e),
                        Ok(_) => Ok(None),
                    }
                },
            )
            .await?;
        Ok(ShutdownReport {
            ending: ShutdownEnding::NotObservable,
            exit_code: None,
        })
    }

    async fn artifact_metadata(&self, _artifact: &Artifact) -> Result<String> {
        Err(ProviderError::unsupported(
            "read an environment's image metadata (the runtimes API does not expose it)",
        ))
    }

    /// `GET /runtimes/{pod_name}`, as datalayer-core's `get_runtime` asks: a runtime the
    /// platform still has is running (its API says no more); one it no longer has was
    /// stopped, or its credits ran out.
    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<crate::SandboxState>> {
        let path = format!("/runtimes/{}", sandbox.0);
        match self
            .client
            .call(self.api(Method::GET, &path).what("get runtime"))
            .await
        {
            Ok(_) => Ok(Some(crate::SandboxState::Running)),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Some(crate::SandboxState::Stopped {
                ending: "Datalayer no longer has it (it was stopped, or its credits ran out)"
                    .to_owned(),
                exit_code: None,
                last_log_lines: Vec::new(),
            })),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Housekeeping for RuntimesProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let name = given_name(labels);
        Ok(self
            .listed()
            .await?
            .into_iter()
            .filter(|r| r.given_name.as_deref() == Some(name.as_str()))
            .map(|r| Resource {
                kind: KIND_RUNTIME.into(),
                id: r.pod_name,
            })
            .collect())
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            KIND_RUNTIME if lock(&self.gone)?.contains(&resource.id) => Ok(Deleted::AlreadyGone),
            KIND_RUNTIME => self.delete(&resource.id).await,
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the {VARIANT} variant has no resource kind `{other}`"),
            )),
        }
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: KIND_RUNTIME.into(),
            id: sandbox.0.clone(),
        })
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        Ok(self
            .listed()
            .await?
            .into_iter()
            .filter_map(|r| {
                let (run, scenario) = crate::run_of_name(NAME_PREFIX, r.given_name.as_deref()?)?;
                run_id.is_none_or(|want| want == run).then(|| Labelled {
                    run_id: run,
                    scenario: Some(scenario),
                    created: crate::parse_time(r.started_at.as_deref()),
                    resource: Resource {
                        kind: KIND_RUNTIME.into(),
                        id: r.pod_name,
                    },
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
