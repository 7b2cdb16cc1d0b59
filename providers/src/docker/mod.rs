//! The `docker` variant: the Datalayer OCI artifact on the local Docker engine.
//!
//! Builds an environment on the reference base with the engine (no network inside the
//! build), launches it by image id with Jupyter Server as the command on a 127.0.0.1
//! ephemeral port, and runs code through the server's kernel REST API and WebSocket.

pub mod base;
pub mod hold;
pub mod pull;

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

/// Port Jupyter Server listens on inside the container.
const JUPYTER_PORT: u16 = 8888;
/// Longest a single engine call may take.
const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The kernel every sandbox starts.
const KERNEL_NAME: &str = "python3";
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
/// How long one piece of code may run on the kernel.
const EXECUTE_DEADLINE: Duration = Duration::from_secs(300);
/// How long a delete waits for a classic build step the engine is committing (a cancelled
/// build's last step): about 10 s each on fuse-overlayfs.
const BUILD_STEP_COMMIT_WAIT: Duration = Duration::from_secs(120);
/// How long a delete of a BuildKit build waits for it to end once cancelled: a build whose
/// client is gone goes on exporting its image (6 s for the reference environment on a
/// 2-core machine with fuse-overlayfs), and an export cannot be cancelled.
const BUILD_END_WAIT: Duration = Duration::from_secs(300);
/// The resource kind of a BuildKit build under way: recorded in the run ledger before the
/// build starts, so that cleanup and `sweep` cancel it and wait for it to end before they
/// list what carries the run's labels. Its id is `<build id>:<holder pid>:<holder start
/// ticks>` (see [`hold`]), or the build id alone when it had no holder.
pub const BUILD_RESOURCE: &str = "buildkit-build";
/// Which builder the docker variant builds environments with: `buildkit` or `classic`;
/// unset, BuildKit where the engine offers it ([`DockerProvider::offered_builder`]), else
/// the classic builder.
pub const BUILDER_VAR: &str = "SANDBOX_MATRIX_DOCKER_BUILDER";
/// Registry address under which build secrets are handed to the builder, as a registry
/// login would be; `.invalid` never resolves.
const CANARY_REGISTRY: &str = "build-secrets.invalid";

/// Starts a kernel with jupyter_client alone and prints how long it took to answer `1+1`.
const FLOOR_KERNEL_SCRIPT: &str = r#"
import json, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
answers = []
def hook(msg):
    if msg["msg_type"] == "execute_result":
        answers.append(msg["content"]["data"]["text/plain"])
kc.execute_interactive("1+1", output_hook=hook, timeout=60)
at = time.time()
kc.stop_channels()
km.shutdown_kernel(now=True)
print(json.dumps({"answer": answers[-1] if answers else None, "at": at}))
"#;

/// The python3 floor: bare `print(1+1)`, then the wall clock when it printed.
const FLOOR_PYTHON_SCRIPT: &str = "import time; print(1+1); print(repr(time.time()))";

/// The span from `created` (the host's clock just before the container was created) to
/// `at`, the container's wall clock in seconds since the epoch (the same kernel's clock).
fn since_create(created: std::time::SystemTime, at: f64, what: &str) -> Result<Duration> {
    let created = created
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Duration::try_from_secs_f64(at - created)
        .ok()
        .filter(|d| *d < Duration::from_secs(3600))
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{what} answered at {at}, {:.3} s from the container's create: not a span",
                    at - created
                ),
            )
        })
}

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

/// A kernel socket several tasks may take turns on.
type SharedSocket = Arc<tokio::sync::Mutex<KernelSocket>>;

/// An extra kernel: its id, read without waiting for code that holds its socket, and
/// its socket.
struct ContextKernel {
    id: String,
    socket: SharedSocket,
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

/// A sandbox's default kernel.
#[derive(Default)]
struct Kernel {
    /// Its id and socket, once started.
    started: Option<(String, KernelSocket)>,
    /// Why the kernel could not start, once it failed: later calls fail at once with it
    /// instead of waiting out another start.
    failure: Option<ProviderError>,
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

    /// BuildKit where the engine offers it (a Linux engine speaking API 1.39 or later,
    /// which has BuildKit built in), else the classic builder.
    pub async fn offered_builder(&self) -> Builder {
        // The version negotiated at connect: the engine's, where it is older than bollard's.
        let api = self.docker.client_version();
        let linux = self
            .docker
            .version()
            .await
            .is_ok_and(|v| v.os.as_deref() == Some("linux"));
        if linux && (api.major_version, api.minor_version) >= (1, 39) {
            Builder::BuildKit
        } else {
            Builder::Classic
        }
    }

    /// This provider with its builder named by the environment variable `var` instead of
    /// [`BUILDER_VAR`] (a variant of its own on this engine).
    pub fn with_builder_var(mut self, var: &'static str) -> Self {
        self.builder_var = var;
        self
    }

    /// The builder of [`DockerProvider::build_environment`], chosen at its first call:
    /// the one the builder variable names (`buildkit` or `classic`); unset or empty,
    /// [`DockerProvider::offered_builder`].
    pub async fn builder(&self) -> Result<Builder> {
        self.builder
            .get_or_try_init(|| async {
                let var = self.builder_var;
                match std::env::var(var).as_deref().map(str::trim) {
                    Err(_) | Ok("") => Ok(self.offered_builder().await),
                    Ok("buildkit") => Ok(Builder::BuildKit),
                    Ok("classic") => Ok(Builder::Classic),
                    Ok(other) => Err(ProviderError::new(
                        ErrorKind::Config,
                        format!(
                            "{var}={}: expected `buildkit` or `classic`",
                            crate::quoted(other)
                        ),
                    )),
                }
            })
            .await
            .copied()
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

    /// Builds an environment with [`DockerProvider::builder`], saying which in the log.
    /// BuildKit's cache outlives a run, where the classic builder's (the run's own
    /// intermediate images, which cleanup removes) goes with it: until this provider has
    /// built an environment once, its builds start from the base, as on a fresh engine;
    /// later ones (a rebuild) may use the cache.
    pub async fn build_environment(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let builder = self.builder().await?;
        let first = !self
            .built
            .lock()
            .expect("built environments lock")
            .contains(&request.environment_dir);
        let use_cache = builder == Builder::Classic || !first;
        log(&format!(
            "builder: {}{}",
            builder.describe(),
            if use_cache {
                ""
            } else {
                ", its cache not used: this run's first build of the environment"
            }
        ));
        let built = self.build_with(request, log, builder, use_cache).await?;
        self.built
            .lock()
            .expect("built environments lock")
            .insert(request.environment_dir.clone());
        Ok(built)
    }

    /// Builds `request` as [`Provider::build`] does, with `builder`, from the engine's
    /// build cache or (`use_cache` false) from the base alone.
    pub async fn build_with(
        &self,
        request: &BuildRequest,
        log: &LogFn,
        builder: Builder,
        use_cache: bool,
    ) -> Result<Artifact> {
        // The run's labels go in as one LABEL right after each FROM, not through the
        // engine's label option, which the classic builder appends as one LABEL per key at
        // the end: every intermediate image then carries all of them, so cleanup and sweep
        // find a build stopped part-way.
        let dockerfile = crate::read_dockerfile(&request.environment_dir)?;
        let dockerfile = label_every_stage(&dockerfile, &request.labels.to_map());
        let mut build_args: HashMap<String, String> = request
            .build_secrets
            .iter()
            .map(|s| (s.name().to_owned(), s.expose().to_owned()))
            .collect();
        build_args.insert(BASE_ARG.to_owned(), request.base.reference.clone());
        let pull = match &request.base.registry {
            Some(registry) => {
                let reference = DigestReference::parse(&request.base.reference)?;
                // The handshake first, so a refused credential is reported naming the
                // registry, not as whatever the engine makes of it.
                check_base(&reference, request.registry_credential.as_ref())
                    .await
                    .map_err(|e| {
                        ProviderError::new(
                            ErrorKind::Build,
                            format!("the base {reference} cannot be pulled: {}", e.message),
                        )
                    })?;
                // The engine resolves the digest through the registry: the reference is
                // untagged (the layers, and images built on them, stay) and the build pulls.
                // Measured on the classic builder: the first use of a digest GETs its manifest
                // by digest with the credential, a digest whose manifest the engine has
                // cached is HEAD-ed or only pinged (/v2/); BuildKit resolves it through
                // containerd, with a HEAD by digest with the credential (both seen in
                // tests/engine/private_base.rs). The check above runs every build.
                match self
                    .docker
                    .remove_image(
                        &request.base.reference,
                        Some(RemoveImageOptionsBuilder::default().noprune(true).build()),
                        None,
                    )
                    .await
                {
                    Ok(_)
                    | Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => {}
                    Err(e) => log(&format!(
                        "the engine kept its copy of {reference} ({e}); the pull may not fetch its manifest"
                    )),
                }
                log(&format!(
                    "base {reference}: from registry {registry} by digest ({}), pulled by the engine",
                    request.credential_made()
                ));
                true
            }
            None => {
                log(&format!(
                    "base {}: local, bootstrapped on this engine, not from a registry",
                    request.base.reference
                ));
                false
            }
        };
        // The real registry's login where there is one; else the fake canary is handed over
        // as a registry login would be, so that the scan can show none of it stays.
        let credentials = match &request.registry_credential {
            Some(credential) => Some(HashMap::from([(
                credential.registry.clone(),
                docker_credentials(credential),
            )])),
            None => request.build_secrets.first().map(|s| {
                HashMap::from([(
                    CANARY_REGISTRY.to_owned(),
                    DockerCredentials {
                        username: Some("build".into()),
                        password: Some(s.expose().to_owned()),
                        serveraddress: Some(CANARY_REGISTRY.into()),
                        ..Default::default()
                    },
                )])
            }),
        };
        // A BuildKit build goes on without its client (its image lands seconds after a kill):
        // it goes through a holder that outlives the client, and the ledger names both
        // before it starts, so that cleanup and sweep can cancel it and wait for its end.
        let holder = match (builder, &self.holder, hold::EngineAddress::from_env()) {
            (Builder::BuildKit, Some(executable), Some(engine)) => {
                Some(hold::Holder::start(executable, &engine).await?)
            }
            _ => None,
        };
        let build = (builder == Builder::BuildKit).then(|| {
            let id = format!("sandbox-matrix-{}", random_hex(12));
            BuildRecord {
                holder: holder.as_ref().map(|h| h.owner.clone()),
                id,
            }
        });
        let build_resource = build.as_ref().map(BuildRecord::resource);
        if let Some(resource) = &build_resource {
            let seq = self.creates.intent(&request.labels, BUILD_RESOURCE)?;
            self.creates.created(seq, &request.labels, resource, log);
        }
        let engine = match &holder {
            Some(holder) => Docker::connect_with_unix(
                &holder.socket.to_string_lossy(),
                ENGINE_CALL_TIMEOUT.as_secs(),
                &self.docker.client_version(),
            )
            .map_err(|e| engine_error(e).context("connecting to the build holder"))?,
            None => self.docker.clone(),
        };
        let spec = BuildSpec {
            dir: &request.environment_dir,
            extra_files: &[],
            dockerfile: Some(&dockerfile),
            tag: None,
            labels: HashMap::new(),
            build_args,
            credentials,
            pull,
            builder,
            no_cache: !use_cache,
            build_id: build.as_ref().map(|b| b.id.as_str()),
        };
        let built = build_context(&engine, spec, log).await;
        if let Some(holder) = holder {
            holder.finish().await;
        }
        if let Some(resource) = &build_resource {
            self.creates.gone(&request.labels, resource, log);
        }
        let id = built?;
        Ok(Artifact {
            id,
            kind: "image-id".into(),
        })
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

    /// This provider with every BuildKit build held by `executable hold-build` (see
    /// [`hold`]), so that cleanup and `sweep` can see a build end after its client is gone.
    pub fn with_build_holder(mut self, executable: PathBuf) -> Self {
        self.holder = Some(executable);
        self
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

    /// Every container (running or not) and image (intermediate ones too) whose labels
    /// match `filters`.
    async fn labelled(
        &self,
        filters: &HashMap<String, Vec<String>>,
    ) -> Result<(
        Vec<bollard::models::ContainerSummary>,
        Vec<bollard::models::ImageSummary>,
    )> {
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(filters)
                    .build(),
            ))
            .await
            .map_err(|e| engine_error(e).context("listing containers by run label"))?;
        let images = self
            .docker
            .list_images(Some(
                ListImagesOptionsBuilder::default()
                    .all(true)
                    .filters(filters)
                    .build(),
            ))
            .await
            .map_err(|e| engine_error(e).context("listing images by run label"))?;
        Ok((containers, images))
    }

    /// Makes sure the local reference base exists (see [`BaseRecipe::ensure`]): reused when
    /// current, else made from a pulled Debian image or by mmdebstrap.
    pub async fn ensure_base(&self, progress: &LogFn) -> Result<base::BaseImage> {
        let base = self.base.ensure(&self.docker, progress).await?;
        *self.made_from.lock().expect("made_from lock") = Some(base.made_from.clone());
        Ok(base)
    }

    /// Where a running sandbox's Jupyter Server answers on this host, and its token: what
    /// the e2b emulator forwards a template's code channel to.
    pub async fn jupyter_endpoint(&self, id: &SandboxId) -> Result<(String, Secret)> {
        let sandbox = self.sandbox(id)?;
        Ok((
            sandbox.server.base_url().to_owned(),
            Secret::new("JUPYTER_TOKEN", sandbox.server.token()),
        ))
    }

    /// [`Provider::run_code`], waiting up to `deadline` for the answer.
    async fn run_default(
        &self,
        sandbox: &SandboxId,
        code: &str,
        deadline: Duration,
    ) -> Result<(CodeOutput, Vec<Timing>)> {
        let sandbox = self.sandbox(sandbox)?;
        let mut kernel = sandbox.kernel.lock().await;
        let mut timings = Vec::new();
        if let Some(failure) = &kernel.failure {
            return Err(failure
                .clone()
                .context("the kernel failed to start earlier"));
        }
        if kernel.started.is_none() {
            let started = Instant::now();
            let server = sandbox.server.clone();
            // A kernel whose process dies at start (ipykernel missing, say) is only found
            // out by the server dropping it after its restarts; until then its socket is
            // answered by nothing, so connecting and the first answer race that watch.
            let failed = |kernel: &mut Kernel, e: ProviderError| {
                kernel.failure = Some(e.clone());
                e
            };
            let kernel_id = match server.start_kernel(KERNEL_NAME).await {
                Ok(id) => id,
                Err(e) => return Err(failed(&mut kernel, e)),
            };
            *sandbox.kernel_id.lock().expect("kernel id lock") = Some(kernel_id.clone());
            let gone = server.kernel_gone(&kernel_id);
            tokio::pin!(gone);
            let mut socket = tokio::select! {
                socket = server.connect(&kernel_id) => match socket {
                    Ok(socket) => socket,
                    Err(e) => return Err(failed(&mut kernel, e)),
                },
                e = &mut gone => return Err(failed(&mut kernel, e)),
            };
            // Jupyter Server opens a new kernel's channels once the kernel answers (a
            // first `1+1` after it takes as long as a later one), so this is the
            // kernel's start without the first code's own run.
            timings.push(Timing {
                name: "kernel-start-to-channels".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            let output = tokio::select! {
                output = socket.execute(code, deadline) => output,
                e = &mut gone => return Err(failed(&mut kernel, e)),
            };
            kernel.started = Some((kernel_id.clone(), socket));
            let output = output?;
            timings.push(Timing {
                name: "kernel-start-to-first-answer".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            return Ok((output, timings));
        }
        let (kernel_id, socket) = kernel.started.as_mut().expect("kernel is present");
        renew_if_lost(&sandbox.server, kernel_id, socket).await?;
        Ok((socket.execute(code, deadline).await?, timings))
    }

    /// [`Provider::run_code_in`], waiting up to `deadline` for the answer.
    async fn run_context(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
        deadline: Duration,
    ) -> Result<CodeOutput> {
        let key = (sandbox.0.clone(), context.to_owned());
        let existing = self
            .contexts
            .lock()
            .expect("context table lock")
            .get(&key)
            .map(|kernel| kernel.socket.clone());
        let socket = match existing {
            Some(socket) => socket,
            None => {
                let server = self.sandbox(sandbox)?.server.clone();
                let kernel_id = server.start_kernel(KERNEL_NAME).await?;
                let socket = Arc::new(tokio::sync::Mutex::new(server.connect(&kernel_id).await?));
                self.contexts.lock().expect("context table lock").insert(
                    key,
                    ContextKernel {
                        id: kernel_id,
                        socket: socket.clone(),
                    },
                );
                socket
            }
        };
        let mut socket = socket.lock().await;
        let server = self.sandbox(sandbox)?.server.clone();
        let kernel_id = socket.kernel_id().to_owned();
        renew_if_lost(&server, &kernel_id, &mut socket).await?;
        socket.execute(code, deadline).await
    }

    /// Runs `code` on context `context`'s kernel, or with none on the default kernel, as
    /// [`Provider::run_code_in`] and [`Provider::run_code`] do, waiting up to `deadline`
    /// for the answer instead of their 300 s.
    pub async fn run_code_within(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
        deadline: Duration,
    ) -> Result<CodeOutput> {
        match context {
            Some(context) => self.run_context(sandbox, context, code, deadline).await,
            None => Ok(self.run_default(sandbox, code, deadline).await?.0),
        }
    }

    /// The id of context `context`'s kernel, or with none the default kernel's, once it
    /// started.
    fn kernel_of(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<Option<String>> {
        Ok(match context {
            Some(context) => self
                .contexts
                .lock()
                .expect("context table lock")
                .get(&(sandbox.0.clone(), context.to_owned()))
                .map(|kernel| kernel.id.clone()),
            None => self
                .sandbox(sandbox)?
                .kernel_id
                .lock()
                .expect("kernel id lock")
                .clone(),
        })
    }

    /// Interrupts the code that runs on context `context`'s kernel, or with none on the
    /// default kernel ([`JupyterServer::interrupt_kernel`]), while a run waits for it:
    /// that run then answers the code's `KeyboardInterrupt`. Nothing to do before the
    /// kernel started.
    pub async fn interrupt_kernel(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<()> {
        let server = self.sandbox(sandbox)?.server.clone();
        match self.kernel_of(sandbox, context)? {
            Some(kernel_id) => server.interrupt_kernel(&kernel_id).await,
            None => Ok(()),
        }
    }

    /// Shuts down context `context`'s kernel, or with none the default kernel, whatever it
    /// runs: the next code there starts a new kernel, with none of the old one's state.
    /// Call it once no run waits on that kernel (drop the run first: it holds the kernel).
    pub async fn kill_kernel(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<()> {
        let entry = self.sandbox(sandbox)?;
        let kernel_id = match context {
            Some(context) => {
                let removed = self
                    .contexts
                    .lock()
                    .expect("context table lock")
                    .remove(&(sandbox.0.clone(), context.to_owned()));
                match removed {
                    Some(ContextKernel { id, socket }) => {
                        if let Ok(socket) = Arc::try_unwrap(socket) {
                            socket.into_inner().close().await;
                        }
                        Some(id)
                    }
                    None => None,
                }
            }
            None => {
                let mut kernel = entry.kernel.lock().await;
                if let Some((_, socket)) = kernel.started.take() {
                    socket.close().await;
                }
                entry.kernel_id.lock().expect("kernel id lock").take()
            }
        };
        match kernel_id {
            Some(kernel_id) => entry.server.shutdown_kernel(&kernel_id).await,
            None => Ok(()),
        }
    }

    /// Pushes the reference base ([`base::BASE_IMAGE`], which must exist: see
    /// [`Provider::prepare`]) to `target` under its tag, logging in with `credential`, and
    /// returns the reference by digest the registry gave it. `progress` gets the engine's
    /// push lines.
    pub async fn push_base(
        &self,
        target: &Repository,
        credential: Option<&RegistryCredential>,
        progress: &LogFn,
    ) -> Result<DigestReference> {
        let tag = base::BASE_IMAGE
            .rsplit_once(':')
            .map_or("latest", |(_, tag)| tag);
        let name = target.to_string();
        self.docker
            .tag_image(
                base::BASE_IMAGE,
                Some(
                    TagImageOptionsBuilder::default()
                        .repo(&name)
                        .tag(tag)
                        .build(),
                ),
            )
            .await
            .map_err(|e| {
                engine_error(e).context(format!("tagging {} as {name}:{tag}", base::BASE_IMAGE))
            })?;
        let mut stream = self.docker.push_image(
            &name,
            Some(PushImageOptionsBuilder::default().tag(tag).build()),
            credential.map(docker_credentials),
        );
        let mut pushed = None;
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| match e {
                bollard::errors::Error::DockerStreamError { error } => ProviderError::new(
                    ErrorKind::Api,
                    format!("pushing to registry {}: {error}", target.registry),
                ),
                other => engine_error(other).context(format!("pushing {name}:{tag}")),
            })?;
            if let Some(status) = info.status.as_deref() {
                if info.progress_detail.is_none() {
                    progress(status);
                }
                // The engine's last line: `<tag>: digest: sha256:<hex> size: <n>`.
                if let Some(digest) = status
                    .split_once("digest: ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .filter(|d| crate::registry::is_sha256_digest(d))
                {
                    pushed = Some(digest.to_owned());
                }
            }
        }
        let recorded = self
            .docker
            .inspect_image(&format!("{name}:{tag}"))
            .await
            .map_err(|e| engine_error(e).context("inspecting the pushed base"))?
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find_map(|d| d.strip_prefix(&format!("{name}@")).map(str::to_owned));
        match (pushed, recorded) {
            (Some(pushed), Some(recorded)) if pushed != recorded => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "the push reported digest {pushed} but the engine recorded {recorded} for {name}"
                ),
            )),
            (Some(digest), _) | (None, Some(digest)) => Ok(target.at(&digest)),
            (None, None) => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!("the push to {name} finished without a digest"),
            )),
        }
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

    /// Runs `cmd` in a fresh container of `image` to its end and removes it; returns its
    /// stdout and the host's wall clock just before the container was created.
    async fn run_once(
        &self,
        image: &str,
        cmd: Vec<String>,
        labels: &RunLabels,
    ) -> Result<(String, std::time::SystemTime)> {
        let config = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(cmd),
            labels: Some(labels.to_map().into_iter().collect()),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let create_at = std::time::SystemTime::now();
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, config)
            .await
            .map_err(|e| engine_error(e).context("creating a container"))?;
        let outcome = async {
            self.docker
                .start_container(&created.id, None)
                .await
                .map_err(|e| engine_error(e).context("starting a container"))?;
            let mut wait = self.docker.wait_container(&created.id, None);
            while let Some(status) = wait.next().await {
                if let Err(e) = status {
                    // A non-zero exit arrives as an error; the logs below say why.
                    tracing::debug!("container wait: {e}");
                }
            }
            let mut logs = self.docker.logs(
                &created.id,
                Some(
                    LogsOptionsBuilder::default()
                        .stdout(true)
                        .stderr(true)
                        .build(),
                ),
            );
            let (mut stdout, mut stderr) = (String::new(), String::new());
            while let Some(chunk) = logs.next().await {
                match chunk.map_err(|e| engine_error(e).context("reading container logs"))? {
                    LogOutput::StdOut { message } => {
                        stdout.push_str(&String::from_utf8_lossy(&message))
                    }
                    LogOutput::StdErr { message } => {
                        stderr.push_str(&String::from_utf8_lossy(&message))
                    }
                    _ => {}
                }
            }
            if stdout.trim().is_empty() {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!(
                        "the container printed nothing on stdout; stderr: {}",
                        tail(&stderr, 400)
                    ),
                ));
            }
            Ok(stdout)
        }
        .await;
        remove_container(&self.docker, &created.id).await?;
        outcome.map(|stdout| (stdout, create_at))
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

#[async_trait]
impl Housekeeping for DockerProvider {
    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.creates.set(log);
    }

    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let filters = HashMap::from([(
            "label".to_owned(),
            labels
                .to_map()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
        )]);
        let (containers, images) = self.labelled(&filters).await?;
        Ok(containers
            .into_iter()
            .filter_map(|c| c.id)
            .map(|id| Resource {
                kind: "container".into(),
                id,
            })
            .chain(children_first(images).into_iter().map(|id| Resource {
                kind: "image".into(),
                id,
            }))
            .collect())
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        Some(Resource {
            kind: "image".into(),
            id: artifact.id.clone(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: "container".into(),
            id: sandbox.0.clone(),
        })
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        let filter = match run_id {
            Some(id) => format!("{}={id}", crate::RUN_LABEL),
            None => crate::RUN_LABEL.to_owned(),
        };
        let filters = HashMap::from([("label".to_owned(), vec![filter])]);
        let (containers, images) = self.labelled(&filters).await?;
        let at = |secs: i64| {
            u64::try_from(secs)
                .ok()
                .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s))
        };
        let label = |labels: Option<&HashMap<String, String>>, key: &str| {
            labels.and_then(|l| l.get(key)).cloned()
        };
        let mut found = Vec::new();
        for c in containers {
            let Some(id) = c.id else { continue };
            found.push(Labelled {
                run_id: label(c.labels.as_ref(), crate::RUN_LABEL).unwrap_or_default(),
                scenario: label(c.labels.as_ref(), crate::SCENARIO_LABEL),
                created: c.created.and_then(at),
                resource: Resource {
                    kind: "container".into(),
                    id,
                },
            });
        }
        let by_id: HashMap<String, (HashMap<String, String>, i64)> = images
            .iter()
            .map(|i| (i.id.clone(), (i.labels.clone(), i.created)))
            .collect();
        for id in children_first(images) {
            let (labels, created) = &by_id[&id];
            found.push(Labelled {
                run_id: label(Some(labels), crate::RUN_LABEL).unwrap_or_default(),
                scenario: label(Some(labels), crate::SCENARIO_LABEL),
                created: at(*created),
                resource: Resource {
                    kind: "image".into(),
                    id,
                },
            });
        }
        Ok(found)
    }

    /// A [`BUILD_RESOURCE`] whose holder runs is cancelled, then waited for until its
    /// holder exits: the build has ended, and its image, if it got so far, is committed.
    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            BUILD_RESOURCE => BuildRecord::parse(&resource.id)?.settle(&self.docker).await,
            "container" => remove_after_its_commit(&self.docker, &resource.id).await,
            "image" => match self
                .docker
                .remove_image(
                    &resource.id,
                    Some(RemoveImageOptionsBuilder::default().force(true).build()),
                    None,
                )
                .await
            {
                Ok(_) => Ok(Deleted::Removed),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(Deleted::AlreadyGone),
                Err(e) => Err(engine_error(e).context(format!("removing image {}", resource.id))),
            },
            other => Err(ProviderError::new(
                ErrorKind::Unsupported,
                format!("docker has no resource kind {other}"),
            )),
        }
    }
}

/// The ids of `images`, every image before its parent, so that removing them in order
/// never meets an image that still has a child (the intermediate images of a build).
fn children_first(images: Vec<bollard::models::ImageSummary>) -> Vec<String> {
    let parents: HashMap<String, String> = images
        .iter()
        .map(|i| (i.id.clone(), i.parent_id.clone()))
        .collect();
    let depth = |id: &str| {
        let mut depth = 0usize;
        let mut at = id;
        while let Some(parent) = parents.get(at) {
            depth += 1;
            if depth > parents.len() {
                break;
            }
            at = parent;
        }
        depth
    };
    let mut ids: Vec<(usize, String)> = images
        .iter()
        .map(|i| (depth(&i.id), i.id.clone()))
        .collect();
    ids.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ids.into_iter().map(|(_, id)| id).collect()
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

/// Replaces a socket that saw its kernel die (the server restarts such a kernel) or closed
/// with one on which the kernel answers on both channels; until one does, the old socket
/// stays, so a later call tries again.
async fn renew_if_lost(
    server: &JupyterServer,
    kernel_id: &str,
    socket: &mut KernelSocket,
) -> Result<()> {
    if !socket.is_lost() {
        return Ok(());
    }
    let fresh = server
        .connect_ready(kernel_id, EXECUTE_DEADLINE)
        .await
        .map_err(|e| e.context("connecting again after the kernel died"))?;
    std::mem::replace(socket, fresh).close().await;
    Ok(())
}

/// Whether a container is a classic build step whose image the engine is committing: its
/// command is the builder's `/bin/sh -c` (no container the harness creates runs one), and
/// it is a no-op instruction not yet started or a `RUN` that exited 0.
fn is_build_step_being_committed(container: &bollard::models::ContainerInspectResponse) -> bool {
    let cmd = container
        .config
        .as_ref()
        .and_then(|c| c.cmd.as_deref())
        .unwrap_or_default();
    let state = container.state.as_ref();
    let status = state.and_then(|s| s.status);
    let shell = cmd.len() >= 3 && cmd[0] == "/bin/sh" && cmd[1] == "-c";
    shell
        && match status {
            Some(ContainerStateStatusEnum::CREATED) => cmd[2].starts_with("#(nop)"),
            Some(ContainerStateStatusEnum::EXITED) => state.and_then(|s| s.exit_code) == Some(0),
            _ => false,
        }
}

/// Removes a container, except that a classic build step the engine is committing (its
/// client gone) is left to the engine, which removes it once its image is committed:
/// removing it would not stop the commit, and the image would land after the sweep.
async fn remove_after_its_commit(docker: &Docker, id: &str) -> Result<Deleted> {
    let until = tokio::time::Instant::now() + BUILD_STEP_COMMIT_WAIT;
    let mut waited = false;
    loop {
        let container = match docker.inspect_container(id, None).await {
            Ok(c) => c,
            // The engine removes a committed step's container itself.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) if waited => {
                return Ok(Deleted::Settled(
                    "a build step the engine was committing; it removed it once committed"
                        .to_owned(),
                ));
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(Deleted::AlreadyGone),
            Err(e) => return Err(engine_error(e).context(format!("inspecting container {id}"))),
        };
        if !is_build_step_being_committed(&container) {
            return remove_container(docker, id).await;
        }
        waited = true;
        if tokio::time::Instant::now() >= until {
            remove_container(docker, id).await?;
            return Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "container {id} is a build step the engine was still committing after {}: removed, but its image may land later; sweep again",
                    crate::for_people(BUILD_STEP_COMMIT_WAIT)
                ),
            ));
        }
        tokio::time::sleep(EXIT_POLL).await;
    }
}

async fn remove_container(docker: &Docker, id: &str) -> Result<Deleted> {
    match docker
        .remove_container(
            id,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
    {
        Ok(()) => Ok(Deleted::Removed),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(Deleted::AlreadyGone),
        // The engine is removing it already (a cancelled build's step container).
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => Ok(Deleted::AlreadyGone),
        Err(e) => Err(engine_error(e).context(format!("removing container {id}"))),
    }
}

/// Which of the engine's builders a build goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    /// The classic builder: one image committed per instruction.
    Classic,
    /// The engine's BuildKit, through a BuildKit session bollard serves: no intermediate
    /// images, its own build cache.
    BuildKit,
}

impl Builder {
    /// The builder, for a person and for provenance.
    pub fn describe(self) -> &'static str {
        match self {
            Builder::Classic => "classic builder (bollard, no BuildKit session)",
            Builder::BuildKit => "BuildKit (the engine's, through a bollard BuildKit session)",
        }
    }
}

/// What to build: a folder with a Dockerfile, files added beside it, and build options.
pub(crate) struct BuildSpec<'a> {
    /// The build context folder; its `Dockerfile` is built.
    pub dir: &'a Path,
    /// Files added to the context under a name of their own.
    pub extra_files: &'a [(&'a str, &'a Path)],
    /// The Dockerfile's text to build instead of the folder's own (which stays in the
    /// context): sent as [`LABELLED_DOCKERFILE`].
    pub dockerfile: Option<&'a str>,
    /// A tag for the image, if it should have one.
    pub tag: Option<&'a str>,
    /// Labels of the image.
    pub labels: HashMap<String, String>,
    /// Build arguments.
    pub build_args: HashMap<String, String>,
    /// Registry credentials handed to the builder.
    pub credentials: Option<HashMap<String, DockerCredentials>>,
    /// Pull the base from its registry even when the engine has it: a base by digest is
    /// then fetched through the registry, with `credentials`.
    pub pull: bool,
    /// The builder.
    pub builder: Builder,
    /// Build every step again, whatever the engine's build cache holds.
    pub no_cache: bool,
    /// The id BuildKit registers the build under, which [`cancel_build`] takes; the
    /// classic builder registers none.
    pub build_id: Option<&'a str>,
}

/// Builds a [`BuildSpec`] with the engine, with no network inside the build, streaming
/// log lines to `log`, and returns the image id.
pub(crate) async fn build_context(
    docker: &Docker,
    spec: BuildSpec<'_>,
    log: &LogFn,
) -> Result<String> {
    let BuildSpec {
        dir,
        extra_files,
        dockerfile,
        tag,
        labels,
        build_args,
        credentials,
        pull,
        builder,
        no_cache,
        build_id,
    } = spec;
    if !dir.join("Dockerfile").is_file() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!("no Dockerfile in {}", dir.display()),
        ));
    }
    if dockerfile.is_some() && dir.join(LABELLED_DOCKERFILE).exists() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "{} exists: sandbox-matrix sends the labelled Dockerfile under that name",
                dir.join(LABELLED_DOCKERFILE).display()
            ),
        ));
    }
    let context = tar_context(dir, extra_files, dockerfile)?;
    let mut options = BuildImageOptionsBuilder::default()
        .dockerfile(if dockerfile.is_some() {
            LABELLED_DOCKERFILE
        } else {
            "Dockerfile"
        })
        .rm(true)
        .forcerm(true)
        .networkmode("none")
        .labels(&labels)
        .buildargs(&build_args);
    if let Some(tag) = tag {
        options = options.t(tag);
    }
    if pull {
        options = options.pull("1");
    }
    if no_cache {
        options = options.nocache(true);
    }
    if builder == Builder::BuildKit {
        options = options
            .version(bollard::query_parameters::BuilderVersion::BuilderBuildKit)
            .session(&format!("sandbox-matrix-{}", random_hex(12)));
    }
    let engine = match build_id {
        Some(id) if builder == Builder::BuildKit => with_build_id(docker, id),
        _ => docker.clone(),
    };
    let mut stream = engine.build_image(
        options.build(),
        credentials,
        Some(bollard::body_full(context.into())),
    );
    let mut image_id = None;
    let mut recent = RecentLines::new(log);
    // BuildKit reports each step (a vertex) many times as it goes: named once, when first
    // seen.
    let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| match e {
            bollard::errors::Error::DockerStreamError { error } => ProviderError::new(
                ErrorKind::Build,
                format!("{error}; last lines: {}", recent.tail()),
            ),
            other => engine_error(other).context("docker build"),
        })?;
        if let Some(line) = info.stream.as_deref() {
            recent.push(line);
        }
        if let Some(detail) = info.error_detail {
            return Err(ProviderError::new(
                ErrorKind::Build,
                format!(
                    "{}; last lines: {}",
                    detail.message.unwrap_or_default(),
                    recent.tail()
                ),
            ));
        }
        match info.aux {
            Some(bollard::models::BuildInfoAux::Default(image)) => {
                if let Some(id) = image.id {
                    image_id = Some(id);
                }
            }
            Some(bollard::models::BuildInfoAux::BuildKit(status)) => {
                for vertex in &status.vertexes {
                    if vertex.started.is_some() && named.insert(vertex.digest.clone()) {
                        let cached = if vertex.cached { " (cached)" } else { "" };
                        recent.push(&format!("{}{cached}", vertex.name));
                    }
                    if !vertex.error.is_empty() {
                        recent.push(&format!("{}: {}", vertex.name, vertex.error));
                    }
                }
                for entry in &status.logs {
                    recent.push(&String::from_utf8_lossy(&entry.msg));
                }
            }
            None => {}
        }
    }
    image_id.ok_or_else(|| {
        ProviderError::new(
            ErrorKind::Build,
            "the engine finished the build without an image id",
        )
    })
}

/// A build's log lines, each handed to the log as it comes, the last five kept for an
/// error.
struct RecentLines<'a> {
    log: &'a LogFn,
    recent: Vec<String>,
}

impl<'a> RecentLines<'a> {
    fn new(log: &'a LogFn) -> Self {
        Self {
            log,
            recent: Vec::new(),
        }
    }

    /// Logs each non-empty line of `text`.
    fn push(&mut self, text: &str) {
        for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
            (self.log)(line);
            self.recent.push(line.to_owned());
            if self.recent.len() > 5 {
                self.recent.remove(0);
            }
        }
    }

    /// The last lines, joined for an error.
    fn tail(&self) -> String {
        self.recent.join(" | ")
    }
}

/// Name under which a rewritten Dockerfile is added to the build context.
pub(crate) const LABELLED_DOCKERFILE: &str = ".sandbox-matrix.Dockerfile";

/// `dockerfile` with one `LABEL` instruction carrying every one of `labels` right after
/// each `FROM` instruction (continuation lines followed; the classic builder has no
/// heredocs), so that every image
/// the build commits, intermediate ones included, carries all of them.
pub(crate) fn label_every_stage(
    dockerfile: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> String {
    let quote = |s: &str| {
        let mut q = String::from("\"");
        for c in s.chars() {
            match c {
                '"' | '\\' | '$' => {
                    q.push('\\');
                    q.push(c);
                }
                '\n' => q.push(' '),
                c => q.push(c),
            }
        }
        q.push('"');
        q
    };
    let label_line = format!(
        "LABEL {}",
        labels
            .iter()
            .map(|(k, v)| format!("{}={}", quote(k), quote(v)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // A `# escape=` parser directive changes the continuation character.
    let mut escape = '\\';
    for line in dockerfile.lines() {
        let t = line.trim();
        let Some(directive) = t.strip_prefix('#') else {
            break;
        };
        let directive = directive.trim();
        if let Some((key, value)) = directive.split_once('=') {
            if key.trim().eq_ignore_ascii_case("escape")
                && let Some(c) = value.trim().chars().next()
            {
                escape = c;
            }
        } else {
            break;
        }
    }
    let mut out = String::with_capacity(dockerfile.len() + 200);
    let mut in_from = false;
    let mut continued = false;
    for line in dockerfile.lines() {
        out.push_str(line);
        out.push('\n');
        let trimmed = line.trim();
        if !continued {
            if trimmed.starts_with('#') || trimmed.is_empty() {
                continue;
            }
            in_from = trimmed
                .split_whitespace()
                .next()
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM"));
        } else if trimmed.starts_with('#') || trimmed.is_empty() {
            // Comments and blank lines inside a continued instruction do not end it.
            continue;
        }
        continued = trimmed.ends_with(escape);
        if in_from && !continued {
            out.push_str(&label_line);
            out.push('\n');
            in_from = false;
        }
    }
    out
}

fn tar_context(
    dir: &Path,
    extra_files: &[(&str, &Path)],
    dockerfile: Option<&str>,
) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    // The engine's tar reader refuses GNU sparse entries, which large binaries become.
    builder.sparse(false);
    builder
        .append_dir_all(".", dir)
        .and_then(|()| {
            extra_files
                .iter()
                .try_for_each(|(name, path)| builder.append_path_with_name(path, name))
        })
        .and_then(|()| match dockerfile {
            Some(text) => {
                let mut header = tar::Header::new_gnu();
                header.set_size(text.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(0);
                header.set_cksum();
                builder.append_data(&mut header, LABELLED_DOCKERFILE, text.as_bytes())
            }
            None => Ok(()),
        })
        .and_then(|()| builder.into_inner())
        .map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot pack build context {}: {e}", dir.display()),
            )
        })
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

/// `docker` with every `/build` request naming `id` as its `buildid`, under which the
/// engine's BuildKit registers the build so that `/build/cancel` can stop it (bollard 0.21's
/// build options have no such field), and asking the engine to close the connection after
/// its answer, so that a holder sees the answer's end.
fn with_build_id(docker: &Docker, id: &str) -> Docker {
    let id = id.to_owned();
    docker.clone().with_request_modifier(move |mut request| {
        if let Some(uri) = naming_build_id(request.uri(), &id) {
            *request.uri_mut() = uri;
            request.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        request
    })
}

/// A BuildKit build as the ledger names it: its build id and the holder it went through.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BuildRecord {
    id: String,
    holder: Option<crate::process::Owner>,
}

impl BuildRecord {
    /// As a [`BUILD_RESOURCE`].
    fn resource(&self) -> Resource {
        Resource {
            kind: BUILD_RESOURCE.into(),
            id: match &self.holder {
                Some(h) => format!("{}:{}:{}", self.id, h.pid, h.start_ticks.unwrap_or(0)),
                None => self.id.clone(),
            },
        }
    }

    /// Reads a [`BUILD_RESOURCE`]'s id; it comes from a ledger file: only the shape
    /// [`BuildRecord::resource`] gives is taken.
    fn parse(text: &str) -> Result<Self> {
        let refused = || {
            ProviderError::new(
                ErrorKind::Config,
                format!("`{text}` is not a BuildKit build as this provider records one"),
            )
        };
        let mut parts = text.split(':');
        let id = parts.next().unwrap_or_default();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(refused());
        }
        let holder = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => None,
            (Some(pid), Some(ticks), None) => Some(crate::process::Owner {
                pid: pid.parse().map_err(|_| refused())?,
                start_ticks: Some(ticks.parse().map_err(|_| refused())?).filter(|t| *t != 0),
                boot_id: None,
            }),
            _ => return Err(refused()),
        };
        Ok(Self {
            id: id.to_owned(),
            holder,
        })
    }

    /// Cancels the build and waits for its holder to exit, which it does once the engine
    /// has ended the build.
    async fn settle(&self, docker: &Docker) -> Result<Deleted> {
        let Some(holder) = &self.holder else {
            cancel_build(docker, &self.id).await?;
            return Ok(Deleted::Settled(
                "cancelled; it had no holder (the engine is reached over TLS, or the build predates holders), so its end cannot be seen: an image it was exporting may still land, for a later sweep".to_owned(),
            ));
        };
        if !holder.alive() {
            return Ok(Deleted::Settled(format!(
                "it had ended (its holder, process {}, had exited)",
                holder.pid
            )));
        }
        cancel_build(docker, &self.id).await?;
        let started = Instant::now();
        while holder.alive() {
            if started.elapsed() >= BUILD_END_WAIT {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!(
                        "cancelled, and still under way after {} s (its holder, process {}, waits for its end): sweep again once that process has exited",
                        BUILD_END_WAIT.as_secs(),
                        holder.pid
                    ),
                ));
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
        Ok(Deleted::Settled(format!(
            "cancelled; it ended {:.1} s later (its holder, process {}, exited)",
            started.elapsed().as_secs_f64(),
            holder.pid
        )))
    }
}

/// `uri` with `buildid=id` added to its query, when it is a `/build` request.
fn naming_build_id(uri: &http::Uri, id: &str) -> Option<http::Uri> {
    if !uri.path().ends_with("/build") {
        return None;
    }
    let separator = if uri.query().is_some() { '&' } else { '?' };
    format!("{uri}{separator}buildid={id}").parse().ok()
}

/// Makes an engine call bollard 0.21 has no method for, or decodes into a newer API's shape
/// than the engine speaks, and returns the answer's body: bollard's ping request, re-aimed
/// at `method` and `path` (with its query) by a request modifier, so that it goes through
/// bollard's transport and negotiated API version like every other call.
async fn engine_call(docker: &Docker, method: http::Method, path: &str) -> Result<String> {
    let path = path.to_owned();
    let call = docker.clone().with_request_modifier(move |mut request| {
        let uri = request.uri().to_string();
        if let Some(prefix) = uri.strip_suffix("/_ping")
            && let Ok(uri) = format!("{prefix}{path}").parse()
        {
            *request.uri_mut() = uri;
            *request.method_mut() = method.clone();
        }
        request
    });
    call.ping().await.map_err(engine_error)
}

/// Asks the engine to cancel BuildKit build `id` (`POST /build/cancel?id=`). Its solve stops
/// where it can: a `RUN` is killed, an export under way goes on to its end. The engine
/// answers the same whether or not such a build runs.
async fn cancel_build(docker: &Docker, id: &str) -> Result<()> {
    engine_call(
        docker,
        http::Method::POST,
        &format!("/build/cancel?id={id}"),
    )
    .await
    .map(drop)
    .map_err(|e| e.context(format!("cancelling BuildKit build {id}")))
}

fn random_hex(bytes: usize) -> String {
    let mut rng = rand::rng();
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

#[cfg(test)]
mod tests;
