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

mod client;
mod sweep;
mod wire;

use client::RuntimeState;
pub use wire::RuntimeRecord;
use wire::{Answer, Created, Environments, Listed};

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

#[cfg(test)]
mod tests;
