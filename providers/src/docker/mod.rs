//! The `docker` variant: the Datalayer OCI artifact on the local Docker engine.
//!
//! Builds an environment on the reference base with the engine (no network inside the
//! build), launches it by image id with Jupyter Server as the command on a 127.0.0.1
//! ephemeral port, and runs code through the server's kernel REST API and WebSocket.

pub mod base;
mod build;
mod floor;
pub mod hold;
mod kernel;
pub mod pull;
mod sweep;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, HostConfig, PortBinding};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptions, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, LogsOptionsBuilder, PushImageOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder, StopContainerOptionsBuilder,
    TagImageOptionsBuilder,
};
use futures_util::StreamExt;
use rand::Rng;

use crate::Deleted;
use crate::jupyter::{JupyterServer, KernelSocket};
use crate::registry::{DigestReference, Repository, check_base};
use crate::tail;
use crate::{
    Artifact, BASE_ARG, BaseImage, BuildLogMode, BuildRequest, Capabilities, CodeOutput,
    CommandOutput, CreateLog, CreateRecorder, ErrorKind, Housekeeping, Labelled, LifetimeLimit,
    LogFn, Provider, ProviderError, RegistryCredential, Resource, RestartKind, Result, RunLabels,
    SandboxId, SandboxState, Secret, ShutdownEnding, ShutdownObservation, ShutdownReport, Timing,
};

pub use base::{BaseRecipe, DoctorBinary, MadeFrom};
pub use build::Builder;

use build::{BuildRecord, remove_after_its_commit};

pub(crate) use build::{BuildSpec, build_context};
use floor::{FLOOR_KERNEL_SCRIPT, FLOOR_PYTHON_SCRIPT, since_create};
use kernel::{ContextKernel, EXECUTE_DEADLINE, Kernel};
use sweep::remove_container;

/// Port Jupyter Server listens on inside the container.
const JUPYTER_PORT: u16 = 8888;
/// Longest a single engine call may take.
const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long launch would wait for Jupyter Server to answer: longer than any step budget,
/// so that the launch step's budget is what ends a wait for a hung sandbox.
const READY_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);
/// What Jupyter Server prints last when it has started (it binds its port a moment later).
const SERVER_LINE: &str = "Use Control-C to stop this server";
/// How long launch waits for [`SERVER_LINE`] before it polls the server instead.
const SERVER_LINE_WAIT: Duration = Duration::from_secs(5);
/// How often launch asks the engine whether the sandbox container still runs.
const EXIT_POLL: Duration = Duration::from_millis(250);
/// How many of an exited sandbox's last log lines its launch error quotes.
const EXIT_LOG_LINES: usize = 20;
/// The resource kind of a BuildKit build under way: recorded in the run ledger before the
/// build starts, so that cleanup and `sweep` cancel it and wait for it to end before they
/// list what carries the run's labels. Its id is `<build id>:<holder pid>:<holder start
/// ticks>` (see [`hold`]), or the build id alone when it had no holder.
pub const BUILD_RESOURCE: &str = "buildkit-build";
/// Which builder the docker variant builds environments with: `buildkit` or `classic`;
/// unset, BuildKit where the engine offers it ([`DockerProvider::offered_builder`]), else
/// the classic builder.
pub const BUILDER_VAR: &str = "SANDBOX_MATRIX_DOCKER_BUILDER";
/// The `docker` variant on the local engine.
pub struct DockerProvider {
    docker: Docker,
    engine_version: String,
    base: BaseRecipe,
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    /// Extra kernels by (sandbox, context), each with its own socket, so they run at once.
    contexts: Mutex<HashMap<(String, String), ContextKernel>>,
    /// How the local base was made, once [`DockerProvider::ensure_base`] made or reused it.
    made_from: Mutex<Option<MadeFrom>>,
    /// The environment variable that names the builder.
    builder_var: &'static str,
    /// The builder, chosen at the first build.
    builder: tokio::sync::OnceCell<Builder>,
    /// The environment folders built so far, by [`DockerProvider::build_environment`].
    built: Mutex<HashSet<PathBuf>>,
    /// Where each BuildKit build is recorded before it starts, and its end after.
    creates: CreateRecorder,
    /// The executable that runs a build holder ([`hold`]), when builds have one.
    holder: Option<PathBuf>,
}

/// How [`DockerProvider::exec_process`] runs a command; each field unset is the
/// container's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Process {
    /// The user, by name or uid.
    pub user: Option<String>,
    /// Environment variables added to the container's.
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub cwd: Option<String>,
}

/// The CPUs and memory a sandbox's container may use; `None`: the engine's default (no
/// limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// CPUs.
    pub cpus: Option<u32>,
    /// Memory in MiB.
    pub memory_mb: Option<u32>,
}

/// A running container with its Jupyter Server and, once code has run, its kernel.
struct Sandbox {
    container_id: String,
    server: Arc<JupyterServer>,
    /// Held while code runs, a restart or a shutdown: only the kernel is behind it, so an
    /// exec (the secrets scan, probes through python3) runs while the kernel is busy.
    kernel: tokio::sync::Mutex<Kernel>,
    /// The default kernel's id from its start on, read without waiting for code that
    /// holds `kernel`.
    kernel_id: Mutex<Option<String>>,
}

impl std::fmt::Debug for DockerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerProvider")
            .field("engine_version", &self.engine_version)
            .finish_non_exhaustive()
    }
}

/// How a container ended, for a person, from its exit code: 137 is a SIGKILL (`docker kill`,
/// or the memory limit), 143 a SIGTERM, 128 + n another signal.
fn ending(exit_code: Option<i64>, oom_killed: bool) -> String {
    match exit_code {
        Some(137) if oom_killed => "killed for lack of memory (exit 137)".to_owned(),
        Some(137) => "killed (exit 137)".to_owned(),
        Some(143) => "terminated by SIGTERM (exit 143)".to_owned(),
        Some(code) if code > 128 && code < 160 => {
            format!("ended by signal {} (exit {code})", code - 128)
        }
        Some(code) => format!("exited with code {code}"),
        None => "ended, with no exit code".to_owned(),
    }
}

impl DockerProvider {
    /// The engine's state of `container`, `when` saying when it was read (for errors).
    async fn container_state(
        &self,
        container: &str,
        when: &str,
    ) -> Result<bollard::models::ContainerState> {
        Ok(self
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|e| engine_error(e).context(format!("inspecting the container {when}")))?
            .state
            .unwrap_or_default())
    }

    /// Launches `artifact` as [`Provider::launch`] does, its container given at most
    /// `limits`: a cloud sandbox's size, as an emulator launches one.
    pub async fn launch_limited(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        limits: Limits,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        let token = random_hex(24);
        let port = format!("{JUPYTER_PORT}/tcp");
        let config = ContainerCreateBody {
            image: Some(artifact.id.clone()),
            cmd: Some(jupyter_command()),
            env: Some(vec![format!("JUPYTER_TOKEN={token}")]),
            labels: Some(labels.to_map().into_iter().collect()),
            exposed_ports: Some(vec![port.clone()]),
            host_config: Some(HostConfig {
                port_bindings: Some(HashMap::from([(
                    port.clone(),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".into()),
                        host_port: Some(String::new()),
                    }]),
                )])),
                nano_cpus: limits.cpus.map(|c| i64::from(c) * 1_000_000_000),
                memory: limits.memory_mb.map(|m| i64::from(m) * 1024 * 1024),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, config)
            .await
            .map_err(|e| engine_error(e).context("creating the sandbox container"))?;
        let id = created.id;
        self.docker
            .start_container(&id, None)
            .await
            .map_err(|e| engine_error(e).context("starting the sandbox container"))?;
        let inspect = self
            .docker
            .inspect_container(&id, None)
            .await
            .map_err(|e| engine_error(e).context("inspecting the sandbox container"))?;
        let running = inspect.state.as_ref().and_then(|s| s.running) == Some(true);
        let host_port = inspect
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|p| p.get(&port).cloned().flatten())
            .and_then(|b| b.into_iter().find_map(|b| b.host_port));
        let host_port = match host_port {
            Some(port) => port,
            // Exited already: its ports are unpublished.
            None if !running => return Err(self.exited(&id).await),
            None => {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    "the engine published no host port for Jupyter Server",
                ));
            }
        };
        let server = JupyterServer::new(&format!("http://127.0.0.1:{host_port}"), &token);
        let started = Instant::now();
        // The engine's log stream says when the server has started; a poll or two confirms
        // it listens (it binds a moment after that line). A server that never prints the
        // line is polled from SERVER_LINE_WAIT on. Watched while it starts: a container
        // that exits fails launch at once, with its exit code and last log lines, instead
        // of being polled as `connection refused`.
        let heard = async {
            tokio::select! {
                () = self.server_line(&id) => {}
                () = tokio::time::sleep(SERVER_LINE_WAIT) => {}
            }
            server.wait_ready(READY_DEADLINE).await
        };
        let resolution = tokio::select! {
            ready = heard => {
                ready.map_err(|e| e.context("waiting for Jupyter Server"))?
            }
            exited = self.exited(&id) => return Err(exited),
        };
        let timing = Timing {
            name: "jupyter-server-ready".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        };
        let sandbox = Sandbox {
            container_id: id.clone(),
            server: Arc::new(server),
            kernel: tokio::sync::Mutex::default(),
            kernel_id: Mutex::default(),
        };
        self.sandboxes
            .lock()
            .expect("sandbox table lock")
            .insert(id.clone(), Arc::new(sandbox));
        Ok((SandboxId(id), vec![timing]))
    }

    /// Connects to the local engine (`DOCKER_HOST` or the default socket) and negotiates
    /// the API version. `base` is the reference base image's recipe.
    pub async fn connect(base: BaseRecipe) -> Result<Self> {
        // The runner bounds every step; the client's own timeout only has to outlast the
        // longest engine call (a root filesystem import takes minutes).
        let docker = Docker::connect_with_local_defaults()
            .map_err(|e| engine_error(e).context("connecting to the Docker engine"))?
            .with_timeout(ENGINE_CALL_TIMEOUT);
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| engine_error(e).context("negotiating the Docker API version"))?;
        let version = docker
            .version()
            .await
            .map_err(|e| engine_error(e).context("asking the Docker engine its version"))?;
        let engine_version = format!(
            "Docker Engine {} (API {})",
            version.version.unwrap_or_default(),
            version.api_version.unwrap_or_default()
        );
        Ok(Self {
            docker,
            engine_version,
            base,
            sandboxes: Mutex::new(HashMap::new()),
            made_from: Mutex::new(None),
            contexts: Mutex::new(HashMap::new()),
            builder_var: BUILDER_VAR,
            builder: tokio::sync::OnceCell::new(),
            built: Mutex::new(HashSet::new()),
            creates: CreateRecorder::default(),
            holder: None,
        })
    }

    /// Runs `argv` in `sandbox` as `process` says (its user, environment and working
    /// directory, each the container's own when unset), as the emulators' process APIs
    /// run a command. A user the container does not know fails the call (kind `Api`).
    pub async fn exec_process(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        process: &Process,
    ) -> Result<CommandOutput> {
        let container_id = self.sandbox(sandbox)?.container_id.clone();
        let env: Vec<String> = process
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let exec = self
            .docker
            .create_exec(
                &container_id,
                CreateExecOptions {
                    cmd: Some(argv.to_vec()),
                    user: process.user.clone(),
                    env: (!env.is_empty()).then_some(env),
                    working_dir: process.cwd.clone(),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| engine_error(e).context("creating an exec"))?;
        let mut out = CommandOutput::default();
        if let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| engine_error(e).context("starting an exec"))?
        {
            while let Some(chunk) = output.next().await {
                match chunk.map_err(|e| engine_error(e).context("reading exec output"))? {
                    LogOutput::StdOut { message } => {
                        out.stdout.push_str(&String::from_utf8_lossy(&message))
                    }
                    LogOutput::StdErr { message } => {
                        out.stderr.push_str(&String::from_utf8_lossy(&message))
                    }
                    _ => {}
                }
            }
        }
        out.exit_code = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| engine_error(e).context("inspecting an exec"))?
            .exit_code;
        Ok(out)
    }

    /// The engine client, for variants that run on this engine (datalayer).
    pub(crate) fn engine(&self) -> &Docker {
        &self.docker
    }

    fn sandbox(&self, id: &SandboxId) -> Result<Arc<Sandbox>> {
        self.sandboxes
            .lock()
            .expect("sandbox table lock")
            .get(&id.0)
            .cloned()
            .ok_or_else(|| {
                ProviderError::new(ErrorKind::NotFound, format!("no running sandbox {}", id.0))
            })
    }

    /// Makes sure the local reference base exists (see [`BaseRecipe::ensure`]): reused when
    /// current, else made from a pulled Debian image or by mmdebstrap.
    pub async fn ensure_base(&self, progress: &LogFn) -> Result<base::BaseImage> {
        let base = self.base.ensure(&self.docker, progress).await?;
        *self.made_from.lock().expect("made_from lock") = Some(base.made_from.clone());
        Ok(base)
    }

    /// Returns once container `id`'s output holds [`SERVER_LINE`], Jupyter Server's last
    /// line of start-up; never when the stream ends without it (the caller's other waits
    /// decide then). Only the marker is looked for: the lines, which name the token, are
    /// not kept.
    async fn server_line(&self, id: &str) {
        let mut logs = self.docker.logs(
            id,
            Some(
                LogsOptionsBuilder::default()
                    .follow(true)
                    .stdout(true)
                    .stderr(true)
                    .build(),
            ),
        );
        let mut window = String::new();
        while let Some(Ok(chunk)) = logs.next().await {
            window.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            if window.contains(SERVER_LINE) {
                return;
            }
            // Keep only what a marker split across two chunks needs.
            let keep = tail(&window, SERVER_LINE.len()).to_owned();
            window = keep;
        }
        std::future::pending::<()>().await
    }

    /// The last [`EXIT_LOG_LINES`] lines container `id` wrote (stdout and stderr), blank
    /// ones left out; none where the engine cannot give them.
    pub async fn last_log_lines(&self, id: &str) -> Vec<String> {
        let mut logs = self.docker.logs(
            id,
            Some(
                LogsOptionsBuilder::default()
                    .stdout(true)
                    .stderr(true)
                    .tail(&EXIT_LOG_LINES.to_string())
                    .build(),
            ),
        );
        let mut text = String::new();
        while let Some(Ok(chunk)) = logs.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Returns once container `id` is no longer running: an error with its exit code and
    /// last log lines (or why the engine could not be asked).
    async fn exited(&self, id: &str) -> ProviderError {
        let state = loop {
            tokio::time::sleep(EXIT_POLL).await;
            match self.docker.inspect_container(id, None).await {
                Ok(inspect) => {
                    let state = inspect.state.unwrap_or_default();
                    if state.running != Some(true) && state.restarting != Some(true) {
                        break state;
                    }
                }
                Err(e) => {
                    return engine_error(e).context("watching the sandbox container start");
                }
            }
        };
        let lines = self.last_log_lines(id).await;
        let code = state
            .exit_code
            .map_or_else(|| "unknown".to_owned(), |c| c.to_string());
        let oom = if state.oom_killed == Some(true) {
            " (killed for lack of memory)"
        } else {
            ""
        };
        ProviderError::new(
            ErrorKind::Protocol,
            format!(
                "the sandbox container exited with code {code}{oom} before Jupyter Server answered; its last {} log lines: {}",
                lines.len(),
                tail(&lines.join(" | "), 2000)
            ),
        )
    }
}

/// What the docker variant can do.
pub const CAPABILITIES: Capabilities = Capabilities {
    build: true,
    restart: RestartKind::Kernel,
    build_logs: BuildLogMode::Streamed,
    exec_as_root: true,
    doctor_scan: true,
    artifact_metadata: true,
    floor: true,
    concurrent_contexts: 4,
    stateful_code: true,
    shutdown: ShutdownObservation::Signal,
    gpus: 0,
    egress_policy: false,
    artifacts_listed: true,
    provenance: false,
    // A container has no lifetime limit: it runs until it is stopped.
    lifetime: LifetimeLimit::None,
};

#[async_trait]
impl Provider for DockerProvider {
    fn variant(&self) -> &str {
        "docker"
    }

    fn base_made_from(&self) -> Option<String> {
        self.made_from
            .lock()
            .expect("made_from lock")
            .as_ref()
            .map(ToString::to_string)
    }

    fn provider_version(&self) -> Option<String> {
        Some(self.engine_version.clone())
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn check_access(&self) -> Result<String> {
        self.docker
            .ping()
            .await
            .map_err(|e| engine_error(e).context("pinging the Docker engine"))?;
        Ok(format!("{} answers", self.engine_version))
    }

    async fn prepare(&self, base: &BaseImage, progress: &LogFn) -> Result<()> {
        if base.registry.is_some() {
            // The build pulls it by digest, with the run's credential.
            progress(&format!(
                "the run's base is {}: nothing to bootstrap",
                base.reference
            ));
            return Ok(());
        }
        self.ensure_base(progress).await.map(|_| ())
    }

    async fn build(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        self.build_environment(request, log).await
    }

    /// The credential goes into the build's registry config for its registry, so the
    /// engine pulls the base with it: how it was made says it all.
    fn credential_use(&self, request: &BuildRequest) -> String {
        request.credential_made()
    }

    async fn launch(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        self.launch_limited(artifact, labels, Limits::default())
            .await
    }

    async fn run_code(&self, sandbox: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        self.run_default(sandbox, code, EXECUTE_DEADLINE).await
    }

    async fn run_code_in(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        self.run_context(sandbox, context, code, EXECUTE_DEADLINE)
            .await
    }

    async fn exec(
        &self,
        sandbox: &SandboxId,
        argv: &[String],
        as_root: bool,
    ) -> Result<CommandOutput> {
        let process = Process {
            user: as_root.then(|| "root".to_owned()),
            ..Process::default()
        };
        self.exec_process(sandbox, argv, &process).await
    }

    async fn restart(&self, sandbox: &SandboxId) -> Result<Vec<Timing>> {
        let sandbox = self.sandbox(sandbox)?;
        let mut kernel = sandbox.kernel.lock().await;
        let (kernel_id, old_socket) = kernel.started.take().ok_or_else(|| {
            ProviderError::new(ErrorKind::Protocol, "no kernel to restart: run code first")
        })?;
        old_socket.close().await;
        let started = Instant::now();
        sandbox.server.restart_kernel(&kernel_id).await?;
        // The server answers once the old kernel is gone and the new one is launched.
        let requested = started.elapsed();
        // A fresh socket after every restart: an old one can lose the new kernel's first messages.
        let socket = sandbox.server.connect(&kernel_id).await?;
        kernel.started = Some((kernel_id, socket));
        Ok(vec![Timing {
            name: "restart-request".into(),
            duration: requested,
            resolution: None,
        }])
    }

    async fn shutdown(&self, sandbox: &SandboxId, grace: Duration) -> Result<ShutdownReport> {
        let entry = self.sandbox(sandbox)?;
        let mut kernel = entry.kernel.lock().await;
        if let Some((_, socket)) = kernel.started.take() {
            socket.close().await;
        }
        let grace_secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        // Whether PID 1 was still running when the stop was sent: a container that had
        // already exited is no shutdown, whatever its code.
        let before = self
            .container_state(&entry.container_id, "before the stop")
            .await?;
        let was_running = before.running == Some(true);
        let started = Instant::now();
        self.docker
            .stop_container(
                &entry.container_id,
                Some(StopContainerOptionsBuilder::default().t(grace_secs).build()),
            )
            .await
            .map_err(|e| engine_error(e).context("stopping the sandbox container"))?;
        let elapsed = started.elapsed();
        let state = self
            .container_state(&entry.container_id, "after the stop")
            .await?;
        if state.running == Some(true) {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                "the engine says the container still runs after stop",
            ));
        }
        let exit_code = state.exit_code;
        let ending = match exit_code {
            _ if !was_running => ShutdownEnding::AlreadyExited,
            // 137 is 128 + SIGKILL: the engine killed PID 1 once the grace period ran out.
            Some(137) if elapsed >= grace && state.oom_killed != Some(true) => {
                ShutdownEnding::Killed
            }
            // 143 is 128 + SIGTERM: PID 1 ended on the signal; 0, it handled it and exited.
            Some(0 | 143) => ShutdownEnding::ExitedOnSigterm,
            _ => ShutdownEnding::ExitedWithError,
        };
        drop(kernel);
        self.sandboxes
            .lock()
            .expect("sandbox table lock")
            .remove(&sandbox.0);
        self.contexts
            .lock()
            .expect("context table lock")
            .retain(|(owner, _), _| owner != &sandbox.0);
        Ok(ShutdownReport { ending, exit_code })
    }

    async fn sandbox_state(&self, sandbox: &SandboxId) -> Result<Option<SandboxState>> {
        let container = self.sandbox(sandbox)?.container_id.clone();
        let state = self
            .container_state(&container, "after the step failed")
            .await?;
        if state.paused == Some(true) {
            return Ok(Some(SandboxState::Paused));
        }
        if state.running == Some(true) || state.restarting == Some(true) {
            return Ok(Some(SandboxState::Running));
        }
        Ok(Some(SandboxState::Stopped {
            ending: ending(state.exit_code, state.oom_killed == Some(true)),
            exit_code: state.exit_code,
            last_log_lines: self.last_log_lines(&container).await,
        }))
    }

    async fn artifact_metadata(&self, artifact: &Artifact) -> Result<String> {
        let inspect = self
            .docker
            .inspect_image(&artifact.id)
            .await
            .map_err(|e| engine_error(e).context("inspecting the artifact"))?;
        let history = self
            .docker
            .image_history(&artifact.id)
            .await
            .map_err(|e| engine_error(e).context("reading the artifact's history"))?;
        let config = inspect.config.unwrap_or_default();
        let metadata = serde_json::json!({
            "env": config.env,
            "labels": config.labels,
            "cmd": config.cmd,
            "entrypoint": config.entrypoint,
            "history": history.iter().map(|h| &h.created_by).collect::<Vec<_>>(),
        });
        Ok(serde_json::to_string_pretty(&metadata).expect("metadata is plain JSON"))
    }

    /// Both floors are timed from the container's create to the answer, as create-to-first
    /// is: the answer carries the container's wall clock, so the container's exit and
    /// removal are not counted.
    async fn floor(&self, artifact: &Artifact, labels: &RunLabels) -> Result<Vec<Timing>> {
        let (out, created) = self
            .run_once(
                &artifact.id,
                vec!["python3".into(), "-c".into(), FLOOR_PYTHON_SCRIPT.into()],
                labels,
            )
            .await?;
        let mut lines = out.lines();
        let (answer, at) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
        if answer.trim() != "2" {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "bare python3 printed {}, not 2",
                    crate::quoted(tail(&out, 200))
                ),
            ));
        }
        let python3 = since_create(
            created,
            at.trim().parse().unwrap_or(f64::NAN),
            "bare python3",
        )?;
        let (out, created) = self
            .run_once(
                &artifact.id,
                vec!["python3".into(), "-c".into(), FLOOR_KERNEL_SCRIPT.into()],
                labels,
            )
            .await?;
        let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
        let parsed: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "the kernel floor script printed {}: {e}",
                    crate::quoted(tail(&out, 200))
                ),
            )
        })?;
        if parsed["answer"] != "2" {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!("a bare kernel answered {} to 1+1", parsed["answer"]),
            ));
        }
        let kernel = since_create(
            created,
            parsed["at"].as_f64().unwrap_or(f64::NAN),
            "a bare kernel",
        )?;
        Ok(vec![
            Timing {
                name: "floor-python3".into(),
                duration: python3,
                resolution: None,
            },
            Timing {
                name: "floor-kernel".into(),
                duration: kernel,
                resolution: None,
            },
        ])
    }
}

/// `credential` as the engine takes a registry login.
pub(crate) fn docker_credentials(credential: &RegistryCredential) -> DockerCredentials {
    DockerCredentials {
        username: Some(credential.username.clone()),
        password: Some(credential.password.expose().to_owned()),
        serveraddress: Some(credential.registry.clone()),
        ..Default::default()
    }
}

/// Jupyter Server as the sandbox's command; the token comes from `JUPYTER_TOKEN`. Its own
/// executable, `jupyter-server`, which `jupyter server` looks up and runs: calling it
/// directly spares every launch a Python start and jupyter_core's import (the server's
/// start to `/api`: 1.50 s against 1.68 s, medians of 7 each, interleaved, on a 2-core
/// machine on 2026-12-06).
fn jupyter_command() -> Vec<String> {
    [
        "jupyter-server",
        "--ServerApp.ip=0.0.0.0",
        &format!("--ServerApp.port={JUPYTER_PORT}"),
        "--ServerApp.open_browser=False",
        "--ServerApp.root_dir=/home/datalayer",
        // An image that breaks the contract by running as root must still launch, so that
        // the identity checks, not Jupyter's refusal, report it.
        "--ServerApp.allow_root=True",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Maps an engine error to a provider error: 5xx and I/O failures are retryable.
pub(crate) fn engine_error(e: bollard::errors::Error) -> ProviderError {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError {
            status_code: 404,
            message,
        } => ProviderError::new(ErrorKind::NotFound, message),
        E::DockerResponseServerError {
            status_code,
            message,
        } if status_code >= 500 => {
            ProviderError::retryable(ErrorKind::Api, format!("{status_code}: {message}"))
        }
        E::DockerResponseServerError {
            status_code,
            message,
        } => ProviderError::new(ErrorKind::Api, format!("{status_code}: {message}")),
        E::SocketNotFoundError(path) => ProviderError::new(
            ErrorKind::Config,
            format!("no Docker engine socket at {path}: start the engine or set DOCKER_HOST"),
        ),
        E::IOError { err } => ProviderError::retryable(ErrorKind::Transport, err.to_string()),
        other => ProviderError::new(ErrorKind::Transport, other.to_string()),
    }
}

fn random_hex(bytes: usize) -> String {
    let mut rng = rand::rng();
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

#[cfg(test)]
mod tests;
