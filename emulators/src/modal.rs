//! An emulator of Modal's gRPC API (`modal.client.ModalClient` and the task command
//! router, `modal.task_command_router.TaskCommandRouter`), written from the published
//! protos and the official Python client's behaviour, served on 127.0.0.1 and backed by
//! the local docker variant, so every answer about an image, a sandbox or an exec is real.
//!
//! What the official client (`modal` 1.6.4) does, read from its sources (facts, no code):
//! - Settings: `MODAL_SERVER_URL` (default the live host over TLS), `MODAL_TOKEN_ID`,
//!   `MODAL_TOKEN_SECRET`. An `http://` server URL gives plain HTTP/2 gRPC (h2c); an
//!   `https://` one verifies against certifi's bundle, which `SSL_CERT_FILE` does not
//!   extend, so the client reaches an emulator over plain gRPC on loopback. With a server
//!   URL on 127.0.0.1 it also accepts an `http://` command router URL (and skips
//!   certificate checks on an `https://` one).
//! - Every control-plane call carries `x-modal-token-id`, `x-modal-token-secret`,
//!   `x-modal-client-type`, `x-modal-client-version` (and `x-modal-host`, the URL's host).
//!   `AuthTokenGet` is asked only for input-plane calls; its token is a JWT whose `exp`
//!   the client reads to refresh it at half its life.
//! - New sandboxes are "V2" unless `MODAL_SANDBOX_V2=0`, which keeps the `Sandbox*` RPCs
//!   this emulator (and the modal variant) speak. A V1 sandbox id is `sb-` and 22
//!   alphanumerics; the client picks the RPC family by that shape.
//! - `App.lookup(name, create_if_missing=True)`: `AppGetOrCreate`.
//! - `Image.from_registry(tag)` resolves lazily at sandbox creation:
//!   `EnvironmentGetOrCreate` (the environment's image builder version; from 2025.06 the
//!   Dockerfile is `FROM <tag>` alone), then `ImageGetOrCreate` with the Dockerfile's
//!   commands; a response without a result means "building": the client then reads
//!   `ImageJoinStreaming` (logs as `TaskLogs`, `entry_id` to resume, the last message with
//!   the result), re-joining up to 3 times when a stream ends without one.
//! - `Sandbox.create(app=, image=)`: `SandboxCreate`, then `SandboxGetTaskId` polled (no
//!   timeout set, about every 0.5 s) until it names a task; a `task_result` without a task
//!   means the sandbox ended first. `Sandbox.create(region=...)` sends the regions as
//!   `definition.scheduler_placement.regions`: the sandbox is placed in the first (none
//!   named: `us-east`), and every command in it sees that as `MODAL_REGION`, as Modal sets
//!   a container's location in its environment.
//! - `sb.exec(...)`: `TaskGetCommandRouterAccess` (a JWT and the router's URL) once per
//!   sandbox, then on the router, with `authorization: Bearer <jwt>`: `TaskExecStart`
//!   (client-chosen exec id; `workdir`, `env`, stdout/stderr configs), `TaskExecStdioRead`
//!   (a stream of bytes from an offset, ended when the command's output ends) for
//!   `stdout.read()`, and `TaskExecWait` for `wait()`. On `Unauthenticated` the client
//!   fetches a new JWT once and retries.
//! - `sb.terminate()`: `SandboxTerminate`; `sb.wait()`: `SandboxWait` long polls.
//!
//! What it serves: the RPCs above plus `SandboxList`, `SecretGetOrCreate`, `SecretDelete`,
//! `ImageDelete`, `TaskExecPoll` and the Mount RPCs of a build's context mount
//! (`MountBatchedCheckExistence`, `MountPutFile`, `MountGetOrCreate`: `modal_mounts.rs`);
//! any other is `Unimplemented`. Control-plane calls must carry the
//! token id and secret it generated at start (fakes), else `Unauthenticated`; router calls
//! a JWT it issued for that task that has not expired, else `Unauthenticated`. Images are
//! docker builds of the Dockerfile commands, context files and context mount's files (the
//! base is the local one, another image of the emulator's that `base_images` names, or
//! pulled by digest with the static credential of the build's registry Secret; the
//! environment of the image's `secret_ids` is handed to the build as its secrets); a sandbox is the docker
//! variant's container of the image (its main process is the docker variant's, so
//! entrypoint arguments are refused); an exec is a docker exec in it, as root unless the
//! command says otherwise (Modal's default), in the requested workdir with the requested
//! environment. It answers over plain HTTP/2 on one port (what the official client uses),
//! and through a TLS front with a test CA on another, naming the same router.
//!
//! Faults, for cassettes and tests: a router JWT lifetime short enough to expire mid-run,
//! an RPC whose first call answers `Unavailable`, and sandboxes that never get a task. A
//! build that fails and a terminate of an ended sandbox need none: a failing Dockerfile
//! step fails the docker build, and terminating twice answers the first ending.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt as _};
use rand::Rng as _;
use sandbox_providers::docker::DockerProvider;
use sandbox_providers::modal::proto::client as api;
use sandbox_providers::modal::proto::router;
use sandbox_providers::{
    Artifact, BaseImage, BuildRequest, CredentialSource, Provider, RegistryCredential, RunLabels,
    SandboxId, Secret,
};
use tonic::{Request, Response, Status};

use api::generic_result::GenericStatus;
use api::modal_client_server::{ModalClient, ModalClientServer};
use router::task_command_router_server::{TaskCommandRouter, TaskCommandRouterServer};

use super::{EmulateError, HttpRequest, lock};

/// The domain the TLS front's certificate names (`api.<domain>`) when none is given.
pub const DEFAULT_DOMAIN: &str = "modal.test";
/// The image builder version the emulated environment reports: the client then sends a
/// registry image's Dockerfile as `FROM <tag>` alone.
const IMAGE_BUILDER_VERSION: &str = "2025.06";
/// Where the emulator places a sandbox whose create names no region: `us-east`, where
/// Modal's control plane runs (its region-selection guide). Modal itself may place such
/// a sandbox anywhere.
const UNASKED_REGION: &str = "us-east";
/// How long an `AuthTokenGet` token lives.
const AUTH_TOKEN_TTL: Duration = Duration::from_secs(60 * 60);
/// How long a command router JWT lives unless told otherwise.
pub const ROUTER_JWT_TTL: Duration = Duration::from_secs(15 * 60);
/// The longest any long poll (build logs, task id, sandbox wait, exec wait) holds a call.
const LONG_POLL: Duration = Duration::from_secs(55);
/// How often a long poll looks again.
const POLL: Duration = Duration::from_millis(100);
/// The largest piece of output one stdio message carries.
const STDIO_CHUNK: usize = 64 * 1024;
/// How long cleanup waits for builds still running, whose images would outlive it.
const BUILD_DRAIN: Duration = Duration::from_secs(45);
/// How long PID 1 of a terminated sandbox gets after SIGTERM.
const TERMINATE_GRACE: Duration = Duration::from_secs(10);

/// The control-plane RPCs it serves, by method name.
pub const CONTROL_RPCS: [&str; 18] = [
    "AppGetOrCreate",
    "AuthTokenGet",
    "ClientHello",
    "EnvironmentGetOrCreate",
    "ImageDelete",
    "ImageGetOrCreate",
    "ImageJoinStreaming",
    "MountBatchedCheckExistence",
    "MountGetOrCreate",
    "MountPutFile",
    "SandboxCreate",
    "SandboxGetTaskId",
    "SandboxList",
    "SandboxTerminate",
    "SandboxWait",
    "SecretDelete",
    "SecretGetOrCreate",
    "TaskGetCommandRouterAccess",
];

/// Where the emulator serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1 of the plain HTTP/2 gRPC server; 0 takes a free one.
    pub port: u16,
    /// The domain the TLS front's certificate is for (it serves `api.<domain>`).
    pub domain: String,
    /// How long a command router JWT it issues lives (a short one makes a client's JWT
    /// expire mid-run).
    pub router_jwt_ttl: Duration,
    /// Control-plane RPCs (of [`CONTROL_RPCS`]) whose first call answers `Unavailable`,
    /// as a live control plane may; a client retries it.
    pub unavailable_once: Vec<String>,
    /// Sandboxes never get a task: their container is never launched.
    pub no_task: bool,
    /// The run whose label every build and container it makes carries (`run --emulated`);
    /// `None`: a run id of its own, unique to this emulator.
    pub run_id: Option<String>,
    /// Fault: every sandbox ends this long after its create, whatever its timeout asks,
    /// as a live provider's sandbox may die early.
    pub kill_after: Option<Duration>,
}

/// A docker build of an image's Dockerfile commands.
#[derive(Default)]
struct Build {
    logs: Mutex<Vec<String>>,
    outcome: Mutex<Option<Result<Artifact, String>>>,
}

/// A sandbox: its docker container once launched, its result once ended.
struct SandboxEntry {
    app_id: String,
    /// Where the sandbox is placed: the first region its create asked for, else
    /// [`UNASKED_REGION`]. Its commands see it as `MODAL_REGION`, as Modal's containers do.
    region: String,
    image_id: String,
    tags: Vec<api::SandboxTag>,
    created_at: f64,
    state: Mutex<SandboxState>,
}

#[derive(Default)]
struct SandboxState {
    /// Its task id and the docker variant's sandbox, once launched.
    task: Option<(String, SandboxId)>,
    /// How it ended, once it did.
    result: Option<api::GenericResult>,
}

/// A command run in a sandbox.
#[derive(Default)]
struct Exec {
    stdout: Mutex<Vec<u8>>,
    stderr: Mutex<Vec<u8>>,
    exit: Mutex<Option<i32>>,
}

#[derive(Default)]
struct World {
    apps: HashMap<String, String>,
    images: HashMap<String, Arc<Build>>,
    /// Image ids by their Dockerfile commands, context files' and context mount's digests
    /// and base images, for builds that may be reused.
    by_commands: HashMap<Vec<String>, String>,
    mounts: super::modal_mounts::Mounts,
    secrets: HashMap<String, HashMap<String, String>>,
    named_secrets: HashMap<String, String>,
    sandboxes: HashMap<String, Arc<SandboxEntry>>,
    /// Sandbox ids by task id.
    tasks: HashMap<String, String>,
    execs: HashMap<(String, String), Arc<Exec>>,
    /// Issued router JWTs: their task and expiry (seconds since the epoch).
    jwts: HashMap<String, (String, u64)>,
    labels: Vec<RunLabels>,
}

/// The modal emulator. Dropping it does not stop serving: [`Emulator::stop`] does, and
/// [`Emulator::cleanup`] removes what its builds and sandboxes left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    docker: Arc<DockerProvider>,
    engine: Docker,
    /// Fakes, generated at start: what every control-plane call must carry.
    token_id: String,
    token_secret: String,
    /// The run label of its builds and of sandboxes created without one.
    run_id: String,
    router_jwt_ttl: Duration,
    /// RPCs whose next call answers `Unavailable`, each once.
    unavailable_once: Mutex<Vec<String>>,
    no_task: bool,
    /// [`Options::kill_after`].
    kill_after: Option<Duration>,
    plain: SocketAddr,
    tls: SocketAddr,
    domain: String,
    ca_pem: String,
    world: Mutex<World>,
    serving: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set by [`Emulator::stop`]: calls on connections still open are refused.
    stopped: AtomicBool,
    /// Sandbox launches under way.
    launching: AtomicUsize,
    /// Where calls are kept once [`Emulator::record`] is asked for.
    recording: Mutex<Option<super::record::Exchanges>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("plain", &self.inner.plain)
            .field("tls", &self.inner.tls)
            .finish_non_exhaustive()
    }
}

impl Emulator {
    /// Serves Modal's API on 127.0.0.1 with `docker` behind it: plain HTTP/2 gRPC on
    /// `options.port`, and TLS with a fresh test CA on a free port.
    pub async fn start(
        docker: Arc<DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        if let Some(unknown) = options
            .unavailable_once
            .iter()
            .find(|m| !CONTROL_RPCS.contains(&m.as_str()))
        {
            return Err(EmulateError::Config(format!(
                "--unavailable-once {unknown}: not an RPC the emulator serves ({})",
                CONTROL_RPCS.join(", ")
            )));
        }
        let engine = Docker::connect_with_local_defaults()
            .map_err(|e| EmulateError::Backend(format!("cannot reach the Docker engine: {e}")))?;
        let domain = super::Site::normalise(&options.domain);
        let (plain_listener, plain) = super::bind_loopback(options.port).await?;
        let (tls_listener, tls) = super::bind_loopback(0).await?;
        let (behind_tls_listener, behind_tls) = super::bind_loopback(0).await?;
        let ca = super::tls::TestCa::generate(&domain)?;
        // gRPC is HTTP/2: the front says so in ALPN (the test CA's default is HTTP/1.1).
        let mut config = (*ca.server_config()).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let emulator = Self {
            inner: Arc::new(Inner {
                docker,
                engine,
                // Fakes: generated credentials that only this emulator accepts.
                token_id: format!("sm-fake-ak-{}", random_id(16)),
                token_secret: format!("sm-fake-as-{}", random_id(24)),
                run_id: options.run_id.unwrap_or_else(|| {
                    format!(
                        "emulator-{}-{:06x}",
                        std::process::id(),
                        rand::random::<u32>() >> 8
                    )
                }),
                router_jwt_ttl: options.router_jwt_ttl,
                unavailable_once: Mutex::new(options.unavailable_once),
                no_task: options.no_task,
                kill_after: options.kill_after,
                plain,
                tls,
                domain,
                ca_pem: ca.ca_pem().to_owned(),
                world: Mutex::default(),
                serving: Mutex::default(),
                stopped: AtomicBool::new(false),
                launching: AtomicUsize::new(0),
                recording: Mutex::default(),
            }),
        };
        let run_labels = emulator.labels(None, "build");
        emulator.world().labels.push(run_labels);
        let plain_router = emulator.server_url();
        let tls_router = emulator.tls_url();
        let tasks = vec![
            emulator.serve(plain_listener, plain_router),
            emulator.serve(behind_tls_listener, tls_router),
            super::tls::terminate(tls_listener, Arc::new(config), behind_tls),
        ];
        *lock(&emulator.inner.serving) = tasks;
        Ok(emulator)
    }

    /// `MODAL_SERVER_URL` for plain gRPC: `http://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        format!("http://{}", self.inner.plain)
    }

    /// The control plane over TLS: `https://api.<domain>:<port>`, the domain pinned to
    /// 127.0.0.1 and the test CA trusted.
    pub fn tls_url(&self) -> String {
        format!(
            "https://api.{}:{}",
            self.inner.domain,
            self.inner.tls.port()
        )
    }

    /// The domain the TLS front's certificate is for.
    pub fn domain(&self) -> &str {
        &self.inner.domain
    }

    /// The test CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.inner.ca_pem
    }

    /// The token id clients must send (a fake).
    pub fn token_id(&self) -> &str {
        &self.inner.token_id
    }

    /// The token secret clients must send (a fake).
    pub fn token_secret(&self) -> &str {
        &self.inner.token_secret
    }

    /// The run label of its docker builds, and of sandboxes created without a
    /// `sandbox-matrix.run` tag: `emulator-<pid>-<random>`.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// Stops serving: no new connection, and every call on one still open is refused.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        for task in lock(&self.inner.serving).drain(..) {
            task.abort();
        }
    }

    /// Waits for its builds still running (up to 45 s), stops the sandboxes still running
    /// and removes, by their labels, whatever its builds and sandboxes left.
    pub async fn cleanup(&self) {
        // A build or launch still running would make its image or container after the
        // removal below.
        let deadline = Instant::now() + BUILD_DRAIN;
        while Instant::now() < deadline
            && (self.inner.launching.load(Ordering::SeqCst) > 0
                || self
                    .world()
                    .images
                    .values()
                    .any(|b| lock(&b.outcome).is_none()))
        {
            tokio::time::sleep(POLL).await;
        }
        let sandboxes: Vec<Arc<SandboxEntry>> = self.world().sandboxes.values().cloned().collect();
        for sandbox in sandboxes {
            if let Err(e) = self.end(&sandbox, terminated()).await {
                eprintln!("emulate modal: cleanup: {}", e.message());
            }
        }
        let labels = self.world().labels.clone();
        super::remove_labelled(self.inner.docker.as_ref() as &dyn Provider, labels).await;
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.inner.world)
    }

    /// Serves both services on `listener`, the router's URL being `router_url`.
    fn serve(
        &self,
        listener: tokio::net::TcpListener,
        router_url: String,
    ) -> tokio::task::JoinHandle<()> {
        let control = Control {
            emulator: self.clone(),
            router_url,
        };
        let check = self.clone();
        let router = Router {
            emulator: self.clone(),
        };
        let keeper = self.clone();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .layer(tower_layer::layer_fn(move |inner| KeepCalls {
                    inner,
                    emulator: keeper.clone(),
                }))
                .add_service(ModalClientServer::with_interceptor(
                    control,
                    move |r: Request<()>| check.admit(r),
                ))
                .add_service(TaskCommandRouterServer::new(router))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        })
    }

    /// Keeps every call it is sent from now on (its method, metadata and request
    /// messages, undecoded), for a caller to read.
    pub fn record(&self) -> super::record::Exchanges {
        lock(&self.inner.recording)
            .get_or_insert_with(super::record::Exchanges::default)
            .clone()
    }

    /// Admits a control-plane call carrying the emulator's token id and secret.
    #[allow(clippy::result_large_err)]
    fn admit(&self, request: Request<()>) -> Result<Request<()>, Status> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(Status::unavailable("the emulator is stopping"));
        }
        let header = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        if header("x-modal-token-id") == self.inner.token_id
            && header("x-modal-token-secret") == self.inner.token_secret
        {
            Ok(request)
        } else {
            Err(Status::unauthenticated(
                "x-modal-token-id and x-modal-token-secret do not name a token of this emulator",
            ))
        }
    }

    /// `Unavailable` when `method`'s next call is to fail once (and not again).
    #[allow(clippy::result_large_err)]
    fn fault(&self, method: &str) -> Result<(), Status> {
        let mut once = lock(&self.inner.unavailable_once);
        match once.iter().position(|m| m == method) {
            Some(at) => {
                once.remove(at);
                Err(Status::unavailable(format!(
                    "{method}: Unavailable, injected once (--unavailable-once)"
                )))
            }
            None => Ok(()),
        }
    }

    /// The labels of a docker build or container: `run` (a sandbox's
    /// `sandbox-matrix.run` tag) or the emulator's own run id.
    fn labels(&self, run: Option<&str>, scenario: &str) -> RunLabels {
        RunLabels {
            run_id: run.unwrap_or(&self.inner.run_id).to_owned(),
            variant: "modal-emulator".into(),
            scenario: scenario.to_owned(),
        }
    }

    fn image(&self, id: &str) -> Result<Arc<Build>, Status> {
        self.world()
            .images
            .get(id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no image {id}")))
    }

    fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>, Status> {
        self.world()
            .sandboxes
            .get(id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no sandbox {id}")))
    }

    /// The running container of task `task_id`.
    fn task(&self, task_id: &str) -> Result<(Arc<SandboxEntry>, SandboxId), Status> {
        let sandbox_id = self
            .world()
            .tasks
            .get(task_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no task {task_id}")))?;
        let sandbox = self.sandbox(&sandbox_id)?;
        let state = lock(&sandbox.state);
        match (&state.task, &state.result) {
            (Some((_, inner)), None) => {
                let inner = inner.clone();
                drop(state);
                Ok((sandbox, inner))
            }
            _ => Err(Status::not_found(format!("task {task_id} has finished"))),
        }
    }

    /// Checks the router call's `authorization: Bearer <jwt>` for task `task_id`.
    #[allow(clippy::result_large_err)]
    fn authorize(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        task_id: &str,
    ) -> Result<(), Status> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(Status::unavailable("the emulator is stopping"));
        }
        let jwt = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("no authorization: Bearer <jwt>"))?;
        let issued = self.world().jwts.get(jwt).cloned();
        match issued {
            None => Err(Status::unauthenticated("a JWT this router did not issue")),
            Some((_, exp)) if exp <= now_secs() as u64 => {
                Err(Status::unauthenticated("the JWT has expired"))
            }
            Some((task, _)) if task != task_id => Err(Status::permission_denied(format!(
                "the JWT is for task {task}, not {task_id}"
            ))),
            Some(_) => Ok(()),
        }
    }

    fn exec(&self, task_id: &str, exec_id: &str) -> Result<Arc<Exec>, Status> {
        self.world()
            .execs
            .get(&(task_id.to_owned(), exec_id.to_owned()))
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no exec {exec_id} in task {task_id}")))
    }

    /// Builds `commands` as image `id`: a Dockerfile of them, on the local base, a base
    /// image of `inputs`, or the one its `FROM` names by digest, pulled with the registry
    /// Secret's credential.
    fn start_build(&self, id: String, image: api::Image, inputs: Inputs, build: Arc<Build>) {
        let emulator = self.clone();
        tokio::spawn(async move {
            let dir =
                std::env::temp_dir().join(format!("sm-modal-emulator-{}-{id}", std::process::id()));
            let result = emulator.build(&dir, &image, &inputs, &build).await;
            let _ = std::fs::remove_dir_all(&dir);
            *lock(&build.outcome) = Some(result);
        });
    }

    async fn build(
        &self,
        dir: &std::path::Path,
        image: &api::Image,
        inputs: &Inputs,
        build: &Arc<Build>,
    ) -> Result<Artifact, String> {
        let mut commands = image.dockerfile_commands.clone();
        for (docker_tag, image_id, artifact) in &inputs.bases {
            // The engine knows the emulator's build of a base image by its id alone: a
            // local tag names it where the Dockerfile names the base's `docker_tag`.
            let options = bollard::query_parameters::TagImageOptionsBuilder::default()
                .repo(super::modal_mounts::BASE_REPOSITORY)
                .tag(image_id)
                .build();
            self.inner
                .engine
                .tag_image(&artifact.id, Some(options))
                .await
                .map_err(|e| format!("cannot tag base image {image_id} ({}): {e}", artifact.id))?;
            let local = format!("{}:{image_id}", super::modal_mounts::BASE_REPOSITORY);
            commands = super::modal_mounts::from_base(&commands, docker_tag, &local);
        }
        let reference = from_reference(&commands)?;
        let secret_id = image
            .image_registry_config
            .as_ref()
            .map(|r| r.secret_id.clone())
            .unwrap_or_default();
        // The build's Secrets reach the builder as build arguments, as a registry token would.
        let mut build_secrets = Vec::new();
        for id in &image.secret_ids {
            let env = self
                .world()
                .secrets
                .get(id)
                .cloned()
                .ok_or_else(|| format!("the image's Secret {id} does not exist"))?;
            let mut env: Vec<(String, String)> = env.into_iter().collect();
            env.sort();
            build_secrets.extend(env.into_iter().map(|(k, v)| Secret::new(k, v)));
        }
        let (base, registry_credential) = if secret_id.is_empty() {
            (BaseImage::local(reference), None)
        } else {
            let env = self
                .world()
                .secrets
                .get(&secret_id)
                .cloned()
                .ok_or_else(|| format!("the image's registry Secret {secret_id} does not exist"))?;
            let host = reference.split('/').next().unwrap_or_default().to_owned();
            let credential = match (env.get("REGISTRY_USERNAME"), env.get("REGISTRY_PASSWORD")) {
                (Some(user), Some(password)) => RegistryCredential {
                    registry: host.clone(),
                    username: user.clone(),
                    password: Secret::new("REGISTRY_PASSWORD", password),
                    source: CredentialSource::Static,
                },
                _ => {
                    return Err(format!(
                        "the registry Secret {secret_id} holds no REGISTRY_USERNAME and \
                         REGISTRY_PASSWORD (the emulator pulls with static credentials only)"
                    ));
                }
            };
            (
                BaseImage {
                    reference,
                    registry: Some(host),
                },
                Some(credential),
            )
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        super::modal_mounts::write_context(dir, &inputs.mounted)?;
        for file in &image.context_files {
            let relative = std::path::Path::new(&file.filename);
            if file.filename.is_empty()
                || relative
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!(
                    "context file {} is not a path inside the build context",
                    sandbox_providers::quoted(&file.filename)
                ));
            }
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            std::fs::write(&path, &file.data).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if dir.join("Dockerfile").exists() {
            return Err(
                "the build context holds a file named Dockerfile, which the emulator's docker \
                 build would take for the image's commands: not emulated"
                    .into(),
            );
        }
        std::fs::write(dir.join("Dockerfile"), commands.join("\n") + "\n").map_err(|e| {
            format!(
                "cannot write the build's Dockerfile in {}: {e}",
                dir.display()
            )
        })?;
        let request = BuildRequest {
            environment_dir: dir.to_owned(),
            base,
            registry_credential,
            build_secrets,
            labels: self.labels(None, "build"),
        };
        let sink = build.clone();
        let log = move |line: &str| lock(&sink.logs).push(line.to_owned());
        self.inner
            .docker
            .build(&request, &log)
            .await
            .map_err(|e| e.to_string())
    }

    /// Launches sandbox `id` from `artifact`; ends it at once if it was terminated first.
    fn start_sandbox(
        &self,
        id: String,
        sandbox: Arc<SandboxEntry>,
        artifact: Artifact,
        labels: RunLabels,
    ) {
        let emulator = self.clone();
        self.inner.launching.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let launched = emulator.inner.docker.launch(&artifact, &labels).await;
            match launched {
                Ok((inner, _)) => {
                    let task_id = format!("ta-{}", random_id(22));
                    let ended = {
                        let mut state = lock(&sandbox.state);
                        state.task = Some((task_id.clone(), inner));
                        state.result.is_some()
                    };
                    emulator.world().tasks.insert(task_id, id);
                    if ended && let Err(e) = emulator.stop_container(&sandbox).await {
                        eprintln!("emulate modal: {}", e.message());
                    }
                }
                Err(e) => {
                    let mut state = lock(&sandbox.state);
                    state.result.get_or_insert(api::GenericResult {
                        status: GenericStatus::InitFailure as i32,
                        exception: format!("the sandbox did not start: {e}"),
                        ..Default::default()
                    });
                }
            }
            emulator.inner.launching.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Ends `sandbox` at its `timeout_secs` unless it has ended by then, as Modal ends a
    /// sandbox at its timeout (`GENERIC_STATUS_TIMEOUT`; api.proto's `Sandbox.timeout_secs`,
    /// the official client's `Sandbox.create(timeout=)`).
    /// Under the [`Options::kill_after`] fault, a sandbox whose timeout is later (or none)
    /// is terminated at that time instead.
    fn end_at_timeout(&self, sandbox: Arc<SandboxEntry>, timeout_secs: u32) {
        let emulator = self.clone();
        let timeout = (timeout_secs > 0).then(|| Duration::from_secs(timeout_secs.into()));
        let early = self
            .inner
            .kill_after
            .filter(|k| timeout.is_none_or(|t| *k < t));
        let Some(at) = early.or(timeout) else { return };
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if emulator.inner.stopped.load(Ordering::SeqCst) {
                return;
            }
            let timed_out = match early {
                Some(early) => api::GenericResult {
                    status: GenericStatus::Terminated as i32,
                    exception: format!(
                        "the emulator killed the sandbox {} s after its create (the kill-after fault)",
                        early.as_secs_f64()
                    ),
                    ..Default::default()
                },
                None => api::GenericResult {
                    status: GenericStatus::Timeout as i32,
                    exception: format!("the sandbox reached its timeout of {timeout_secs} s"),
                    ..Default::default()
                },
            };
            if let Err(e) = emulator.end(&sandbox, timed_out).await {
                eprintln!("emulate modal: ending a sandbox at its timeout: {e}");
            }
        });
    }

    /// Ends `sandbox` with `result` unless it has ended already; returns the result it
    /// had then. An error when its container could not be removed: the sandbox is then not
    /// gone, and no answer says it is.
    #[allow(clippy::result_large_err)]
    async fn end(
        &self,
        sandbox: &SandboxEntry,
        result: api::GenericResult,
    ) -> Result<Option<api::GenericResult>, Status> {
        let existing = {
            let mut state = lock(&sandbox.state);
            match &state.result {
                Some(existing) => Some(existing.clone()),
                None => {
                    state.result = Some(result);
                    None
                }
            }
        };
        if existing.is_none() {
            self.stop_container(sandbox).await?;
        }
        Ok(existing)
    }

    /// Stops and removes the sandbox's container, if it was launched: a terminated
    /// Modal sandbox is gone. A stop that fails is followed by the removal, which forces
    /// it; a removal that fails is the error.
    #[allow(clippy::result_large_err)]
    async fn stop_container(&self, sandbox: &SandboxEntry) -> Result<(), Status> {
        let inner = lock(&sandbox.state)
            .task
            .as_ref()
            .map(|(_, inner)| inner.clone());
        if let Some(inner) = inner {
            let docker = &self.inner.docker;
            if let Err(e) = docker.shutdown(&inner, TERMINATE_GRACE).await {
                eprintln!(
                    "emulate modal: stopping container {} failed ({e}); removing it",
                    inner.0
                );
            }
            let container = sandbox_providers::Resource {
                kind: "container".into(),
                id: inner.0.clone(),
            };
            docker.delete_resource(&container).await.map_err(|e| {
                Status::internal(format!(
                    "the sandbox's container {} could not be removed: {e}",
                    inner.0
                ))
            })?;
        }
        Ok(())
    }

    /// The result of a sandbox whose container exited on its own, if it did.
    async fn exited(&self, sandbox: &SandboxEntry) -> Option<api::GenericResult> {
        let container = lock(&sandbox.state).task.as_ref()?.1.0.clone();
        let state = self
            .inner
            .engine
            .inspect_container(&container, None)
            .await
            .ok()?
            .state?;
        if state.running == Some(true) {
            return None;
        }
        let code = state.exit_code.unwrap_or(-1);
        Some(api::GenericResult {
            status: if code == 0 {
                GenericStatus::Success
            } else {
                GenericStatus::Failure
            } as i32,
            exitcode: i32::try_from(code).unwrap_or(-1),
            ..Default::default()
        })
    }

    /// Starts `argv` in `container` (placed in `region`) as a docker exec, its output
    /// pumped into `exec`.
    async fn start_exec(
        &self,
        container: &str,
        region: &str,
        request: &router::TaskExecStartRequest,
        exec: Arc<Exec>,
    ) -> Result<(), Status> {
        let engine = &self.inner.engine;
        // Modal sets the container's location in every container's environment.
        let env: Vec<String> = std::iter::once(format!("MODAL_REGION={region}"))
            .chain(request.env.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        let created = engine
            .create_exec(
                container,
                CreateExecOptions {
                    cmd: Some(request.command_args.clone()),
                    // Modal runs a command as root unless it says otherwise.
                    user: Some("root".to_owned()),
                    working_dir: request.workdir.clone(),
                    env: Some(env),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| Status::internal(format!("creating the exec: {e}")))?;
        let started = engine
            .start_exec(&created.id, None)
            .await
            .map_err(|e| Status::internal(format!("starting the exec: {e}")))?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(Status::internal("the exec started detached"));
        };
        let keep_stdout = request.stdout_config() == router::TaskExecStdoutConfig::Pipe;
        let stderr_to = request.stderr_config();
        // The router ends an exec at its `timeout_secs` (task_command_router.proto's
        // TaskExecStartRequest; the official client's `exec(timeout=)`): killed, as a
        // signal 9 shows in its exit code (128 + 9, `container_process.py`).
        let deadline = request
            .timeout_secs
            .filter(|secs| *secs > 0)
            .map(|secs| tokio::time::Instant::now() + Duration::from_secs(secs.into()));
        let engine = engine.clone();
        tokio::spawn(async move {
            loop {
                let next = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, output.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            kill_exec(&engine, &created.id).await;
                            break;
                        }
                    },
                    None => output.next().await,
                };
                let Some(Ok(chunk)) = next else { break };
                match chunk {
                    LogOutput::StdOut { message } if keep_stdout => {
                        lock(&exec.stdout).extend_from_slice(&message);
                    }
                    LogOutput::StdErr { message } => match stderr_to {
                        router::TaskExecStderrConfig::Pipe => {
                            lock(&exec.stderr).extend_from_slice(&message);
                        }
                        router::TaskExecStderrConfig::Stdout => {
                            lock(&exec.stdout).extend_from_slice(&message);
                        }
                        router::TaskExecStderrConfig::Devnull => {}
                    },
                    _ => {}
                }
            }
            let mut code = engine
                .inspect_exec(&created.id)
                .await
                .ok()
                .and_then(|i| i.exit_code);
            for _ in 0..50 {
                if code.is_some() {
                    break;
                }
                // A killed exec's code comes once the engine has reaped it.
                tokio::time::sleep(Duration::from_millis(100)).await;
                code = engine
                    .inspect_exec(&created.id)
                    .await
                    .ok()
                    .and_then(|i| i.exit_code);
            }
            *lock(&exec.exit) = Some(i32::try_from(code.unwrap_or(-1)).unwrap_or(-1));
        });
        Ok(())
    }
}

/// Kills exec `id`'s process (SIGKILL, by the host pid the engine reports): the router
/// ending an exec at its timeout. Only a pid whose cgroup names the exec's container is
/// signalled: an engine in another pid namespace (a VM) reports pids that are not this
/// machine's, and the exec is then said unkilled rather than some other process killed.
async fn kill_exec(engine: &bollard::Docker, id: &str) {
    let inspected = engine.inspect_exec(id).await.ok();
    let pid = inspected
        .as_ref()
        .and_then(|i| i.pid)
        .and_then(|pid| libc::pid_t::try_from(pid).ok())
        .filter(|pid| *pid > 0);
    let container = inspected.and_then(|i| i.container_id).unwrap_or_default();
    let ours = pid.filter(|pid| {
        !container.is_empty()
            && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cgroups| cgroups.contains(&container))
    });
    // SAFETY: kill(2) with a pid checked above to be in the exec's container, and a
    // signal number; no memory is passed.
    let killed = ours.map(|pid| unsafe { libc::kill(pid, libc::SIGKILL) } == 0);
    if killed != Some(true) {
        eprintln!(
            "emulate modal: the exec {id} reached its timeout but could not be killed ({})",
            match (pid, ours) {
                (None, _) => "the engine reported no pid for it",
                (Some(_), None) =>
                    "the pid the engine reported is not in its container on this machine: the engine runs in another pid namespace",
                (Some(_), Some(_)) => "kill(2) failed",
            }
        );
    }
}

/// The control plane, naming the router at `router_url`.
struct Control {
    emulator: Emulator,
    router_url: String,
}

/// A stream of one RPC's responses.
type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ModalClient for Control {
    async fn app_get_or_create(
        &self,
        request: Request<api::AppGetOrCreateRequest>,
    ) -> Result<Response<api::AppGetOrCreateResponse>, Status> {
        self.emulator.fault("AppGetOrCreate")?;
        let name = request.into_inner().app_name;
        if name.is_empty() {
            return Err(Status::invalid_argument("AppGetOrCreate names no app"));
        }
        let mut world = self.emulator.world();
        let app_id = world
            .apps
            .entry(name)
            .or_insert_with(|| format!("ap-{}", random_id(22)))
            .clone();
        Ok(Response::new(api::AppGetOrCreateResponse { app_id }))
    }

    async fn auth_token_get(
        &self,
        _request: Request<api::AuthTokenGetRequest>,
    ) -> Result<Response<api::AuthTokenGetResponse>, Status> {
        self.emulator.fault("AuthTokenGet")?;
        let token = jwt(&serde_json::json!({
            "sub": self.emulator.inner.token_id,
            "exp": now_secs() as u64 + AUTH_TOKEN_TTL.as_secs(),
        }));
        Ok(Response::new(api::AuthTokenGetResponse { token }))
    }

    async fn client_hello(
        &self,
        _request: Request<()>,
    ) -> Result<Response<api::ClientHelloResponse>, Status> {
        self.emulator.fault("ClientHello")?;
        Ok(Response::new(api::ClientHelloResponse::default()))
    }

    async fn environment_get_or_create(
        &self,
        request: Request<api::EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<api::EnvironmentGetOrCreateResponse>, Status> {
        self.emulator.fault("EnvironmentGetOrCreate")?;
        let name = request.into_inner().deployment_name;
        Ok(Response::new(api::EnvironmentGetOrCreateResponse {
            environment_id: "en-emulator".into(),
            metadata: Some(api::EnvironmentMetadata {
                name: if name.is_empty() { "main".into() } else { name },
                settings: Some(api::EnvironmentSettings {
                    image_builder_version: IMAGE_BUILDER_VERSION.into(),
                    webhook_suffix: String::new(),
                }),
            }),
        }))
    }

    async fn image_delete(
        &self,
        request: Request<api::ImageDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        self.emulator.fault("ImageDelete")?;
        let id = request.into_inner().image_id;
        let build = {
            let mut world = self.emulator.world();
            let build = world
                .images
                .remove(&id)
                .ok_or_else(|| Status::not_found(format!("no image {id}")))?;
            world.by_commands.retain(|_, v| *v != id);
            build
        };
        let outcome = lock(&build.outcome).clone();
        match outcome {
            Some(Ok(artifact)) => {
                let docker = &self.emulator.inner.docker;
                let image = docker.artifact_resource(&artifact).ok_or_else(|| {
                    Status::internal("the docker variant names no resource for its image")
                })?;
                docker
                    .delete_resource(&image)
                    .await
                    .map_err(|e| Status::failed_precondition(format!("image {id}: {e}")))?;
            }
            Some(Err(_)) => {}
            None => {
                return Err(Status::failed_precondition(format!(
                    "image {id} is still building"
                )));
            }
        }
        Ok(Response::new(()))
    }

    async fn image_get_or_create(
        &self,
        request: Request<api::ImageGetOrCreateRequest>,
    ) -> Result<Response<api::ImageGetOrCreateResponse>, Status> {
        self.emulator.fault("ImageGetOrCreate")?;
        let request = request.into_inner();
        let image = request
            .image
            .ok_or_else(|| Status::invalid_argument("ImageGetOrCreate has no image"))?;
        from_reference(&image.dockerfile_commands).map_err(Status::invalid_argument)?;
        let mut world = self.emulator.world();
        let inputs = build_inputs(&world, &image)?;
        // An image is reused for the same commands, context and bases, as Modal reuses one.
        let mut key = image.dockerfile_commands.clone();
        key.extend(image.context_files.iter().map(|f| {
            format!(
                "{}:{}",
                f.filename,
                super::modal_mounts::hex_sha256(&f.data)
            )
        }));
        key.extend(inputs.mounted.iter().map(|f| {
            let mode = f.mode.map(|m| format!("{m:o}")).unwrap_or_default();
            format!("mount:{}:{}:{mode}", f.path.display(), f.sha256_hex)
        }));
        key.extend(
            inputs
                .bases
                .iter()
                .map(|(tag, id, _)| format!("base:{tag}={id}")),
        );
        if !request.force_build
            && let Some(id) = world.by_commands.get(&key).cloned()
            && let Some(build) = world.images.get(&id)
            && matches!(*lock(&build.outcome), Some(Ok(_)))
        {
            return Ok(Response::new(api::ImageGetOrCreateResponse {
                image_id: id,
                result: Some(success()),
                metadata: Some(image_metadata()),
            }));
        }
        let id = format!("im-{}", random_id(22));
        let build = Arc::new(Build::default());
        world.images.insert(id.clone(), build.clone());
        world.by_commands.insert(key, id.clone());
        drop(world);
        self.emulator.start_build(id.clone(), image, inputs, build);
        Ok(Response::new(api::ImageGetOrCreateResponse {
            image_id: id,
            result: None,
            metadata: None,
        }))
    }

    type ImageJoinStreamingStream = Streamed<api::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<api::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.emulator.fault("ImageJoinStreaming")?;
        let request = request.into_inner();
        let build = self.emulator.image(&request.image_id)?;
        let next: usize = request.last_entry_id.parse().unwrap_or(0);
        let deadline = Instant::now() + long_poll(request.timeout);
        let stream = futures_util::stream::unfold(Some(next), move |next| {
            let build = build.clone();
            async move {
                let mut next = next?;
                loop {
                    // The outcome first: once set, every log line is in.
                    let outcome = lock(&build.outcome).clone();
                    let lines: Vec<String> = lock(&build.logs).iter().skip(next).cloned().collect();
                    if !lines.is_empty() {
                        next += lines.len();
                        let task_logs = lines
                            .into_iter()
                            .map(|line| api::TaskLogs {
                                data: line + "\n",
                                file_descriptor: api::FileDescriptor::Stdout as i32,
                                timestamp: now_secs(),
                                ..Default::default()
                            })
                            .collect();
                        let response = api::ImageJoinStreamingResponse {
                            task_logs,
                            entry_id: next.to_string(),
                            ..Default::default()
                        };
                        return Some((Ok(response), Some(next)));
                    }
                    if let Some(outcome) = outcome {
                        let result = match outcome {
                            Ok(_) => success(),
                            Err(e) => api::GenericResult {
                                status: GenericStatus::Failure as i32,
                                exception: e,
                                ..Default::default()
                            },
                        };
                        let response = api::ImageJoinStreamingResponse {
                            result: Some(result),
                            entry_id: next.to_string(),
                            eof: true,
                            metadata: Some(image_metadata()),
                            ..Default::default()
                        };
                        return Some((Ok(response), None));
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn mount_batched_check_existence(
        &self,
        request: Request<api::MountBatchedCheckExistenceRequest>,
    ) -> Result<Response<api::MountBatchedCheckExistenceResponse>, Status> {
        self.emulator.fault("MountBatchedCheckExistence")?;
        let request = request.into_inner();
        Ok(Response::new(
            self.emulator.world().mounts.check_existence(&request),
        ))
    }

    async fn mount_get_or_create(
        &self,
        request: Request<api::MountGetOrCreateRequest>,
    ) -> Result<Response<api::MountGetOrCreateResponse>, Status> {
        self.emulator.fault("MountGetOrCreate")?;
        let request = request.into_inner();
        let mut world = self.emulator.world();
        // An anonymous mount is owned by the app it names (api.proto's `app_id`).
        if !world.apps.values().any(|id| *id == request.app_id) {
            return Err(Status::not_found(format!(
                "MountGetOrCreate: no app {}",
                sandbox_providers::quoted(&request.app_id)
            )));
        }
        let id = format!("mo-{}", random_id(22));
        world.mounts.get_or_create(request, id).map(Response::new)
    }

    async fn mount_put_file(
        &self,
        request: Request<api::MountPutFileRequest>,
    ) -> Result<Response<api::MountPutFileResponse>, Status> {
        self.emulator.fault("MountPutFile")?;
        let request = request.into_inner();
        self.emulator
            .world()
            .mounts
            .put_file(request)
            .map(Response::new)
    }

    async fn sandbox_create(
        &self,
        request: Request<api::SandboxCreateRequest>,
    ) -> Result<Response<api::SandboxCreateResponse>, Status> {
        self.emulator.fault("SandboxCreate")?;
        let request = request.into_inner();
        let definition = request
            .definition
            .ok_or_else(|| Status::invalid_argument("SandboxCreate has no definition"))?;
        if !definition.entrypoint_args.is_empty() {
            return Err(Status::invalid_argument(
                "the emulator's sandbox runs the docker variant's main process: entrypoint \
                 arguments are not emulated",
            ));
        }
        let build = self.emulator.image(&definition.image_id)?;
        let artifact = match lock(&build.outcome).clone() {
            Some(Ok(artifact)) => artifact,
            Some(Err(e)) => {
                return Err(Status::failed_precondition(format!(
                    "image {} failed to build: {e}",
                    definition.image_id
                )));
            }
            None => {
                return Err(Status::failed_precondition(format!(
                    "image {} is still building",
                    definition.image_id
                )));
            }
        };
        let tag = |name: &str| {
            request
                .tags
                .iter()
                .find(|t| t.tag_name == name)
                .map(|t| t.tag_value.clone())
        };
        let labels = self.emulator.labels(
            tag("sandbox-matrix.run").as_deref(),
            &tag("sandbox-matrix.scenario").unwrap_or_else(|| "sandbox".into()),
        );
        let region = match definition.scheduler_placement {
            Some(placement) => placement.regions.first().cloned().ok_or_else(|| {
                Status::unimplemented(
                    "definition.scheduler_placement without regions (a zone, lifecycle or \
                         instance types) is not emulated",
                )
            })?,
            None => UNASKED_REGION.to_owned(),
        };
        let id = format!("sb-{}", random_id(22));
        let sandbox = Arc::new(SandboxEntry {
            app_id: request.app_id,
            region,
            image_id: definition.image_id,
            tags: request.tags,
            created_at: now_secs(),
            state: Mutex::default(),
        });
        {
            let mut world = self.emulator.world();
            if !world.labels.contains(&labels) {
                world.labels.push(labels.clone());
            }
            world.sandboxes.insert(id.clone(), sandbox.clone());
        }
        self.emulator
            .end_at_timeout(sandbox.clone(), definition.timeout_secs);
        if !self.emulator.inner.no_task {
            self.emulator
                .start_sandbox(id.clone(), sandbox, artifact, labels);
        }
        Ok(Response::new(api::SandboxCreateResponse { sandbox_id: id }))
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.emulator.fault("SandboxGetTaskId")?;
        let request = request.into_inner();
        let sandbox = self.emulator.sandbox(&request.sandbox_id)?;
        let deadline = Instant::now() + request.timeout.map_or(Duration::ZERO, long_poll);
        loop {
            let response = {
                let state = lock(&sandbox.state);
                match (&state.task, &state.result) {
                    (Some((task_id, _)), _) => Some(api::SandboxGetTaskIdResponse {
                        task_id: Some(task_id.clone()),
                        task_result: state.result.clone(),
                    }),
                    (None, Some(result)) => Some(api::SandboxGetTaskIdResponse {
                        task_id: None,
                        task_result: Some(result.clone()),
                    }),
                    (None, None) => None,
                }
            };
            if let Some(response) = response {
                return Ok(Response::new(response));
            }
            if Instant::now() >= deadline {
                return Ok(Response::new(api::SandboxGetTaskIdResponse::default()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn sandbox_list(
        &self,
        request: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.emulator.fault("SandboxList")?;
        let request = request.into_inner();
        let world = self.emulator.world();
        let mut sandboxes: Vec<api::SandboxInfo> = world
            .sandboxes
            .iter()
            .filter(|(_, s)| request.app_id.is_empty() || s.app_id == request.app_id)
            .filter(|(_, s)| request.tags.iter().all(|t| s.tags.contains(t)))
            // A page: those created before the last one the client has (0: the first).
            .filter(|(_, s)| {
                request.before_timestamp <= 0.0 || s.created_at < request.before_timestamp
            })
            .filter_map(|(id, s)| {
                let state = lock(&s.state);
                if state.result.is_some() && !request.include_finished {
                    return None;
                }
                Some(api::SandboxInfo {
                    id: id.clone(),
                    created_at: s.created_at,
                    task_info: Some(api::TaskInfo {
                        id: state
                            .task
                            .as_ref()
                            .map(|(t, _)| t.clone())
                            .unwrap_or_default(),
                        started_at: s.created_at,
                        finished_at: 0.0,
                        result: state.result.clone(),
                    }),
                    app_id: s.app_id.clone(),
                    tags: s.tags.clone(),
                    image_id: s.image_id.clone(),
                })
            })
            .collect();
        sandboxes.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        Ok(Response::new(api::SandboxListResponse { sandboxes }))
    }

    async fn sandbox_terminate(
        &self,
        request: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        self.emulator.fault("SandboxTerminate")?;
        let sandbox = self.emulator.sandbox(&request.into_inner().sandbox_id)?;
        let existing_result = self.emulator.end(&sandbox, terminated()).await?;
        Ok(Response::new(api::SandboxTerminateResponse {
            existing_result,
        }))
    }

    async fn sandbox_wait(
        &self,
        request: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.emulator.fault("SandboxWait")?;
        let request = request.into_inner();
        let sandbox = self.emulator.sandbox(&request.sandbox_id)?;
        let deadline = Instant::now() + long_poll(request.timeout);
        loop {
            if let Some(result) = lock(&sandbox.state).result.clone() {
                return Ok(Response::new(api::SandboxWaitResponse {
                    result: Some(result),
                }));
            }
            if let Some(result) = self.emulator.exited(&sandbox).await {
                let result = self
                    .emulator
                    .end(&sandbox, result.clone())
                    .await?
                    .unwrap_or(result);
                return Ok(Response::new(api::SandboxWaitResponse {
                    result: Some(result),
                }));
            }
            if Instant::now() >= deadline {
                return Ok(Response::new(api::SandboxWaitResponse::default()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn secret_delete(
        &self,
        request: Request<api::SecretDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        self.emulator.fault("SecretDelete")?;
        let id = request.into_inner().secret_id;
        let mut world = self.emulator.world();
        if world.secrets.remove(&id).is_none() {
            return Err(Status::not_found(format!("no secret {id}")));
        }
        world.named_secrets.retain(|_, v| *v != id);
        Ok(Response::new(()))
    }

    async fn secret_get_or_create(
        &self,
        request: Request<api::SecretGetOrCreateRequest>,
    ) -> Result<Response<api::SecretGetOrCreateResponse>, Status> {
        self.emulator.fault("SecretGetOrCreate")?;
        let request = request.into_inner();
        let mut world = self.emulator.world();
        if !request.deployment_name.is_empty()
            && let Some(id) = world.named_secrets.get(&request.deployment_name).cloned()
        {
            return Ok(Response::new(api::SecretGetOrCreateResponse {
                secret_id: id,
            }));
        }
        if request.env_dict.is_empty() {
            return Err(Status::not_found(format!(
                "no secret {} (and no values to create it with)",
                request.deployment_name
            )));
        }
        let id = format!("st-{}", random_id(22));
        world
            .secrets
            .insert(id.clone(), request.env_dict.into_iter().collect());
        if !request.deployment_name.is_empty() {
            world
                .named_secrets
                .insert(request.deployment_name, id.clone());
        }
        Ok(Response::new(api::SecretGetOrCreateResponse {
            secret_id: id,
        }))
    }

    async fn task_get_command_router_access(
        &self,
        request: Request<api::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::TaskGetCommandRouterAccessResponse>, Status> {
        self.emulator.fault("TaskGetCommandRouterAccess")?;
        let task_id = request.into_inner().task_id;
        self.emulator.task(&task_id)?;
        let exp = now_secs() as u64 + self.emulator.inner.router_jwt_ttl.as_secs();
        let token = jwt(&serde_json::json!({
            "task_id": task_id,
            "exp": exp,
            "jti": random_id(16),
        }));
        self.emulator
            .world()
            .jwts
            .insert(token.clone(), (task_id, exp));
        Ok(Response::new(api::TaskGetCommandRouterAccessResponse {
            jwt: token,
            url: self.router_url.clone(),
        }))
    }
}

/// The task command router.
struct Router {
    emulator: Emulator,
}

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_poll(
        &self,
        request: Request<router::TaskExecPollRequest>,
    ) -> Result<Response<router::TaskExecPollResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let exit_status = lock(&exec.exit).map(router::task_exec_poll_response::ExitStatus::Code);
        Ok(Response::new(router::TaskExecPollResponse { exit_status }))
    }

    async fn task_exec_start(
        &self,
        request: Request<router::TaskExecStartRequest>,
    ) -> Result<Response<router::TaskExecStartResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        if request.command_args.is_empty() {
            return Err(Status::invalid_argument("TaskExecStart has no command"));
        }
        let (sandbox, inner) = self.emulator.task(&request.task_id)?;
        let key = (request.task_id.clone(), request.exec_id.clone());
        let exec = {
            let mut world = self.emulator.world();
            if world.execs.contains_key(&key) {
                // The exec id is the idempotency key: a retried start starts nothing.
                return Ok(Response::new(router::TaskExecStartResponse {}));
            }
            let exec = Arc::new(Exec::default());
            world.execs.insert(key.clone(), exec.clone());
            exec
        };
        if let Err(e) = self
            .emulator
            .start_exec(&inner.0, &sandbox.region, &request, exec)
            .await
        {
            self.emulator.world().execs.remove(&key);
            return Err(e);
        }
        Ok(Response::new(router::TaskExecStartResponse {}))
    }

    async fn task_exec_stdin_write(
        &self,
        _request: Request<router::TaskExecStdinWriteRequest>,
    ) -> Result<Response<router::TaskExecStdinWriteResponse>, Status> {
        Err(Status::unimplemented("the emulator's execs have no stdin"))
    }

    type TaskExecStdioReadStream = Streamed<router::TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        request: Request<router::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let stderr = request.file_descriptor() == router::TaskExecStdioFileDescriptor::Stderr;
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        // The read ends at its deadline, the stream and not only its headers: gRPC's
        // deadline is the whole call's (`grpc-timeout`, grpc/grpc doc/PROTOCOL-HTTP2.md),
        // and Modal's official client opens the read again from its offset when it ends
        // so (`modal/sandbox/_task_command_router_client.py`, `_stream_stdio_with_retries`,
        // modal 1.6.4). Modal publishes no server to cite.
        let until = grpc_timeout(&metadata).map(|t| tokio::time::Instant::now() + t);
        let stream = futures_util::stream::unfold((offset, false), move |(offset, ended)| {
            let exec = exec.clone();
            async move {
                if ended {
                    return None;
                }
                loop {
                    // The exit first: once set, all the output is in.
                    let exited = lock(&exec.exit).is_some();
                    let data: Vec<u8> = {
                        let buffer = if stderr { &exec.stderr } else { &exec.stdout };
                        let buffer = lock(buffer);
                        let end = buffer.len().min(offset.saturating_add(STDIO_CHUNK));
                        buffer.get(offset..end).unwrap_or_default().to_vec()
                    };
                    if !data.is_empty() {
                        let next = offset + data.len();
                        return Some((
                            Ok(router::TaskExecStdioReadResponse { data }),
                            (next, false),
                        ));
                    }
                    if exited {
                        return None;
                    }
                    if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                        let status = Status::deadline_exceeded(format!(
                            "the read's deadline passed at offset {offset}"
                        ));
                        return Some((Err(status), (offset, true)));
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn task_exec_wait(
        &self,
        request: Request<router::TaskExecWaitRequest>,
    ) -> Result<Response<router::TaskExecWaitResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let deadline = Instant::now() + LONG_POLL;
        loop {
            if let Some(code) = *lock(&exec.exit) {
                return Ok(Response::new(router::TaskExecWaitResponse {
                    exit_status: Some(router::task_exec_wait_response::ExitStatus::Code(code)),
                }));
            }
            if Instant::now() >= deadline {
                return Err(Status::deadline_exceeded(format!(
                    "exec {} still runs",
                    request.exec_id
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The base a Dockerfile's first command, `FROM [--flag ...] <reference> [AS name]`, names.
/// The layer under the gRPC server that keeps each call's request while recording.
#[derive(Clone)]
struct KeepCalls<S> {
    inner: S,
    emulator: Emulator,
}

impl<S> tonic::codegen::Service<http::Request<tonic::body::Body>> for KeepCalls<S>
where
    S: tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The service polled ready serves this call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let recording = lock(&self.emulator.inner.recording).clone();
        Box::pin(async move {
            let arrived = super::record::now_ms();
            let (parts, body) = request.into_parts();
            let bytes = match http_body_util::BodyExt::collect(body).await {
                Ok(collected) => collected.to_bytes(),
                Err(status) => return Ok(status.into_http()),
            };
            if let Some(exchanges) = recording {
                let kept = HttpRequest {
                    method: parts.method.to_string(),
                    host: parts
                        .uri
                        .authority()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    path: parts.uri.path().to_owned(),
                    query: String::new(),
                    headers: parts
                        .headers
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.as_str().to_owned(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect(),
                    body: bytes.to_vec(),
                };
                exchanges.keep(arrived, &kept, 200, &[]);
            }
            if let Some(refusal) = unknown_fields(parts.uri.path(), &bytes) {
                let mut response = Status::unimplemented(refusal).into_http();
                announce(&mut response);
                return Ok(response);
            }
            let request = http::Request::from_parts(
                parts,
                tonic::body::Body::new(http_body_util::Full::new(bytes)),
            );
            let mut response = inner.call(request).await?;
            announce(&mut response);
            Ok(response)
        })
    }
}

/// Names the emulator in `response`'s metadata ([`sandbox_providers::api::EMULATOR_HEADER`]),
/// as every answer of the HTTP emulators does.
fn announce<B>(response: &mut http::Response<B>) {
    if let Ok(value) = http::HeaderValue::from_str(&super::describe("modal")) {
        response
            .headers_mut()
            .insert(sandbox_providers::api::EMULATOR_HEADER, value);
    }
}

/// How the emulator implements a request field it has.
#[derive(Debug, Clone, Copy)]
enum Honoured {
    /// As the service does, whatever its value.
    Any,
    /// For these values only (an enum's by name): what the emulator has no other form of.
    Only(&'static [&'static str]),
}

/// The request fields each call's handler implements, by path from the request (a field
/// inside one listed comes with it). Any other field a request sets is refused by name:
/// a field the subset protos have is otherwise taken and dropped unseen.
const HONOURED: &[(&str, &[(&str, Honoured)])] = &[
    ("ClientHello", &[]),
    ("AuthTokenGet", &[]),
    (
        "EnvironmentGetOrCreate",
        &[
            ("deployment_name", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_CREATE_IF_MISSING"]),
            ),
        ],
    ),
    (
        "AppGetOrCreate",
        &[
            ("app_name", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_CREATE_IF_MISSING"]),
            ),
        ],
    ),
    (
        "ImageGetOrCreate",
        &[
            ("app_id", Honoured::Any),
            ("image.dockerfile_commands", Honoured::Any),
            ("image.context_files", Honoured::Any),
            ("image.context_mount_id", Honoured::Any),
            ("image.base_images", Honoured::Any),
            ("image.secret_ids", Honoured::Any),
            ("image.image_registry_config.secret_id", Honoured::Any),
            (
                "image.image_registry_config.registry_auth_type",
                Honoured::Only(&["REGISTRY_AUTH_TYPE_STATIC_CREDS"]),
            ),
            ("force_build", Honoured::Any),
            (
                "namespace",
                Honoured::Only(&["DEPLOYMENT_NAMESPACE_WORKSPACE"]),
            ),
            ("builder_version", Honoured::Only(&[IMAGE_BUILDER_VERSION])),
        ],
    ),
    (
        "ImageJoinStreaming",
        &[
            ("image_id", Honoured::Any),
            ("timeout", Honoured::Any),
            ("last_entry_id", Honoured::Any),
            // The emulator streams a finished build's log lines too.
            ("include_logs_for_finished", Honoured::Only(&["true"])),
        ],
    ),
    ("ImageDelete", &[("image_id", Honoured::Any)]),
    // A context mount as modal 1.6.4 uploads one (modal/mount.py, `_Mount._load_mount`):
    // not a named mount (`deployment_name`, `namespace`, `environment_name`), nor a file
    // put through the blob store (`data_blob_id`), nor a file's `size`.
    (
        "MountBatchedCheckExistence",
        &[("sha256_hex_hashes", Honoured::Any)],
    ),
    (
        "MountPutFile",
        &[("sha256_hex", Honoured::Any), ("data", Honoured::Any)],
    ),
    (
        "MountGetOrCreate",
        &[
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP"]),
            ),
            ("app_id", Honoured::Any),
            ("files.filename", Honoured::Any),
            ("files.sha256_hex", Honoured::Any),
            ("files.mode", Honoured::Any),
        ],
    ),
    (
        "SecretGetOrCreate",
        &[
            ("deployment_name", Honoured::Any),
            ("env_dict", Honoured::Any),
            ("app_id", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&[
                    "OBJECT_CREATION_TYPE_EPHEMERAL",
                    "OBJECT_CREATION_TYPE_CREATE_IF_MISSING",
                ]),
            ),
        ],
    ),
    ("SecretDelete", &[("secret_id", Honoured::Any)]),
    (
        "SandboxCreate",
        &[
            ("app_id", Honoured::Any),
            ("tags", Honoured::Any),
            ("definition.image_id", Honoured::Any),
            ("definition.entrypoint_args", Honoured::Any),
            ("definition.timeout_secs", Honoured::Any),
            ("definition.scheduler_placement.regions", Honoured::Any),
            (
                "definition.network_access.network_access_type",
                Honoured::Only(&["OPEN"]),
            ),
        ],
    ),
    (
        "SandboxGetTaskId",
        &[("sandbox_id", Honoured::Any), ("timeout", Honoured::Any)],
    ),
    (
        "SandboxList",
        &[
            ("app_id", Honoured::Any),
            ("before_timestamp", Honoured::Any),
            ("include_finished", Honoured::Any),
            ("tags", Honoured::Any),
        ],
    ),
    ("SandboxTerminate", &[("sandbox_id", Honoured::Any)]),
    (
        "SandboxWait",
        &[("sandbox_id", Honoured::Any), ("timeout", Honoured::Any)],
    ),
    ("TaskGetCommandRouterAccess", &[("task_id", Honoured::Any)]),
    (
        "TaskExecStart",
        &[
            ("task_id", Honoured::Any),
            ("exec_id", Honoured::Any),
            ("command_args", Honoured::Any),
            ("stdout_config", Honoured::Any),
            ("stderr_config", Honoured::Any),
            ("timeout_secs", Honoured::Any),
            ("workdir", Honoured::Any),
            ("env", Honoured::Any),
        ],
    ),
    (
        "TaskExecStdioRead",
        &[
            ("task_id", Honoured::Any),
            ("exec_id", Honoured::Any),
            ("offset", Honoured::Any),
            ("file_descriptor", Honoured::Any),
        ],
    ),
    (
        "TaskExecPoll",
        &[("task_id", Honoured::Any), ("exec_id", Honoured::Any)],
    ),
    (
        "TaskExecWait",
        &[("task_id", Honoured::Any), ("exec_id", Honoured::Any)],
    ),
];

/// The fields a request to `method` sets that [`HONOURED`] does not list for it, each as
/// `` `path` (set to value) ``; methods it does not list are not checked.
fn unhonoured_fields(method: &str, message: &prost_reflect::DynamicMessage) -> Vec<String> {
    let Some((_, honoured)) = HONOURED.iter().find(|(m, _)| *m == method) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk_set_fields(message, "", &mut |path, value| {
        let rule = honoured
            .iter()
            .filter(|(at, _)| path == *at || path.starts_with(&format!("{at}.")))
            .map(|(_, rule)| *rule)
            .next();
        match rule {
            Some(Honoured::Any) => {}
            Some(Honoured::Only(values)) if values.contains(&value.as_str()) => {}
            _ => found.push(format!("`{path}` (set to {value})")),
        }
    });
    found
}

/// Calls `leaf` with the path and value of every field `message` sets, messages
/// descended into (an empty one sets nothing), lists and maps taken whole.
fn walk_set_fields(
    message: &prost_reflect::DynamicMessage,
    prefix: &str,
    leaf: &mut dyn FnMut(&str, String),
) {
    use prost_reflect::{Kind, Value};
    for (field, value) in message.fields() {
        let path = if prefix.is_empty() {
            field.name().to_owned()
        } else {
            format!("{prefix}.{}", field.name())
        };
        match value {
            Value::Message(inner) => walk_set_fields(inner, &path, leaf),
            Value::List(items) if items.iter().all(|i| matches!(i, Value::Message(_))) => {
                for item in items {
                    if let Value::Message(inner) = item {
                        walk_set_fields(inner, &path, leaf);
                    }
                }
            }
            Value::EnumNumber(n) => {
                let name = match field.kind() {
                    Kind::Enum(e) => e.get_value(*n).map(|v| v.name().to_owned()),
                    _ => None,
                };
                leaf(&path, name.unwrap_or_else(|| n.to_string()));
            }
            Value::String(s) => leaf(&path, s.clone()),
            Value::List(items) => leaf(&path, format!("{} items", items.len())),
            Value::Map(entries) => leaf(&path, format!("{} entries", entries.len())),
            Value::Bytes(b) => leaf(&path, format!("{} bytes", b.len())),
            other => leaf(&path, other.to_string()),
        }
    }
}

/// Why the emulator refuses the call to `path` with `body`, if a message in it sets a field
/// the emulator's protos do not have (named by message and number: the subset protos,
/// `providers/proto/modal/`, have no name for it), or one they have that its handler does
/// not implement ([`HONOURED`], named by path): the emulator would otherwise drop it
/// unseen, as prost drops unknown fields.
pub(super) fn unknown_fields(path: &str, body: &[u8]) -> Option<String> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    let pool = sandbox_providers::modal::proto::descriptors();
    let input = pool
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == method)?
        .input();
    let frames = sandbox_providers::api::grpc::decode_frames(body).ok()?;
    let mut found = Vec::new();
    for frame in frames {
        let message = prost_reflect::DynamicMessage::decode(input.clone(), frame).ok()?;
        collect_unknown(&message, &mut found);
        found.extend(unhonoured_fields(method, &message));
    }
    (!found.is_empty()).then(|| {
        format!(
            "{method}: the emulator does not implement {}",
            found.join(", ")
        )
    })
}

/// Each field `message` (or a message inside it) sets that its descriptor does not have,
/// as `<message> field <number>`.
fn collect_unknown(message: &prost_reflect::DynamicMessage, found: &mut Vec<String>) {
    use prost_reflect::{ReflectMessage as _, Value};
    let name = message.descriptor().full_name().to_owned();
    for field in message.unknown_fields() {
        found.push(format!("{name} field {}", field.number()));
    }
    for (_, value) in message.fields() {
        let mut inner = |v: &Value| {
            if let Value::Message(m) = v {
                collect_unknown(m, found);
            }
        };
        match value {
            Value::List(items) => items.iter().for_each(&mut inner),
            Value::Map(entries) => entries.values().for_each(&mut inner),
            other => inner(other),
        }
    }
}

/// A call's deadline, from its `grpc-timeout` header (`<digits><H|M|S|m|u|n>`).
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// What a build takes besides its image definition: its context mount's files, and each
/// base image's build, by the `docker_tag` its Dockerfile names it by and its image id.
struct Inputs {
    mounted: Vec<super::modal_mounts::MountedFile>,
    bases: Vec<(String, String, Artifact)>,
}

/// The inputs of a build of `image`: the mount it names and the base images it names,
/// each built.
#[allow(clippy::result_large_err)]
fn build_inputs(world: &World, image: &api::Image) -> Result<Inputs, Status> {
    let mounted = match image.context_mount_id.as_str() {
        "" => Vec::new(),
        id => world.mounts.files(id)?,
    };
    let mut bases = Vec::new();
    for base in &image.base_images {
        if base.docker_tag.is_empty() {
            return Err(Status::invalid_argument(format!(
                "base image {} has no docker_tag",
                base.image_id
            )));
        }
        let build = world
            .images
            .get(&base.image_id)
            .ok_or_else(|| Status::not_found(format!("no image {} (a base)", base.image_id)))?;
        match lock(&build.outcome).clone() {
            Some(Ok(artifact)) => {
                bases.push((base.docker_tag.clone(), base.image_id.clone(), artifact));
            }
            Some(Err(_)) => {
                return Err(Status::failed_precondition(format!(
                    "base image {} failed to build",
                    base.image_id
                )));
            }
            None => {
                return Err(Status::failed_precondition(format!(
                    "base image {} is still building",
                    base.image_id
                )));
            }
        }
    }
    Ok(Inputs { mounted, bases })
}

fn from_reference(commands: &[String]) -> Result<String, String> {
    let first = commands.first().map(|c| c.trim()).unwrap_or_default();
    let mut words = first.split_whitespace();
    if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
        return Err(format!(
            "the image's first Dockerfile command must be FROM <base>, not `{first}`"
        ));
    }
    words
        .find(|w| !w.starts_with("--"))
        .map(str::to_owned)
        .ok_or_else(|| format!("the image's `{first}` names no base"))
}

/// A long poll's hold: `timeout` seconds (none or less than nothing: none), at most
/// [`LONG_POLL`].
fn long_poll(timeout: f32) -> Duration {
    Duration::try_from_secs_f32(timeout)
        .unwrap_or(Duration::ZERO)
        .min(LONG_POLL)
}

fn success() -> api::GenericResult {
    api::GenericResult {
        status: GenericStatus::Success as i32,
        ..Default::default()
    }
}

fn terminated() -> api::GenericResult {
    api::GenericResult {
        status: GenericStatus::Terminated as i32,
        exception: "the sandbox was terminated".into(),
        ..Default::default()
    }
}

fn image_metadata() -> api::ImageMetadata {
    api::ImageMetadata {
        image_builder_version: Some(IMAGE_BUILDER_VERSION.into()),
        ..Default::default()
    }
}

/// A JWT of `claims`, unsigned in substance: its signature is random bytes, as only the
/// emulator, which keeps every one it issued, checks it.
fn jwt(claims: &serde_json::Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signature: [u8; 32] = rand::random();
    format!("{header}.{payload}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// `n` random alphanumerics: the tail of Modal's ids (`sb-` and 22 of them).
fn random_id(n: usize) -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `message` as one gRPC frame, with `extra` (raw protobuf bytes) after it.
    fn framed(message: &impl prost::Message, extra: &[u8]) -> Vec<u8> {
        let mut payload = message.encode_to_vec();
        payload.extend_from_slice(extra);
        let mut frame = vec![0];
        frame.extend_from_slice(&u32::try_from(payload.len()).expect("small").to_be_bytes());
        frame.extend_from_slice(&payload);
        frame
    }

    #[test]
    fn a_field_the_emulator_does_not_have_is_refused_by_message_and_number() {
        let app = api::AppGetOrCreateRequest {
            app_name: "sandbox-matrix".into(),
            ..Default::default()
        };
        let path = "/modal.client.ModalClient/AppGetOrCreate";
        assert_eq!(unknown_fields(path, &framed(&app, &[])), None);
        // Field 99, varint 1: a field no subset proto has.
        assert_eq!(
            unknown_fields(path, &framed(&app, &[0x98, 0x06, 0x01])),
            Some(
                "AppGetOrCreate: the emulator does not implement \
                 modal.client.AppGetOrCreateRequest field 99"
                    .to_owned()
            )
        );
        // Inside a message inside the request: a GPU asked of an image (GPUConfig.count, 2).
        let image = api::ImageGetOrCreateRequest {
            image: Some(api::Image {
                gpu_config: Some(api::GpuConfig {}),
                ..Default::default()
            }),
            ..Default::default()
        };
        let path = "/modal.client.ModalClient/ImageGetOrCreate";
        assert_eq!(
            unknown_fields(path, &framed(&image, &[])),
            None,
            "no GPU is emulated"
        );
        // ImageGetOrCreateRequest.image (2) holding Image.gpu_config (16) holding
        // GPUConfig.count (2) = 1, encoded by hand: the subset has no field to set it with.
        let gpu_config = [0x82, 0x01, 0x02, 0x10, 0x01];
        let mut request = vec![0x12, u8::try_from(gpu_config.len()).expect("small")];
        request.extend_from_slice(&gpu_config);
        let empty = api::ImageGetOrCreateRequest::default();
        assert_eq!(
            unknown_fields(path, &framed(&empty, &request)),
            Some(
                "ImageGetOrCreate: the emulator does not implement modal.client.GPUConfig field 2"
                    .to_owned()
            )
        );
    }

    #[test]
    fn a_field_the_emulator_has_but_does_not_implement_is_refused_by_path() {
        let create = |definition: api::Sandbox| api::SandboxCreateRequest {
            app_id: "ap-1".into(),
            definition: Some(definition),
            ..Default::default()
        };
        let path = "/modal.client.ModalClient/SandboxCreate";
        let open = api::NetworkAccess {
            network_access_type: api::network_access::NetworkAccessType::Open as i32,
            ..Default::default()
        };
        let implemented = api::Sandbox {
            image_id: "im-1".into(),
            timeout_secs: 900,
            network_access: Some(open.clone()),
            // Present but empty: nothing asked of them.
            resources: Some(api::Resources::default()),
            open_ports: Some(api::PortSpecs {}),
            ..Default::default()
        };
        assert_eq!(
            unknown_fields(path, &framed(&create(implemented.clone()), &[])),
            None
        );
        let memory = api::Sandbox {
            resources: Some(api::Resources {
                memory_mb: 512,
                ..Default::default()
            }),
            ..implemented.clone()
        };
        assert_eq!(
            unknown_fields(path, &framed(&create(memory), &[])),
            Some(
                "SandboxCreate: the emulator does not implement \
                 `definition.resources.memory_mb` (set to 512)"
                    .to_owned()
            )
        );
        let blocked = api::Sandbox {
            network_access: Some(api::NetworkAccess {
                network_access_type: api::network_access::NetworkAccessType::Blocked as i32,
                ..open
            }),
            idle_timeout_secs: Some(60),
            ..implemented
        };
        assert_eq!(
            unknown_fields(path, &framed(&create(blocked), &[])),
            Some(
                "SandboxCreate: the emulator does not implement \
                 `definition.network_access.network_access_type` (set to BLOCKED), \
                 `definition.idle_timeout_secs` (set to 60)"
                    .to_owned()
            )
        );
        let image = api::ImageGetOrCreateRequest {
            image: Some(api::Image {
                dockerfile_commands: vec!["FROM base:v1".into()],
                ..Default::default()
            }),
            builder_version: "2024.10".into(),
            ..Default::default()
        };
        assert_eq!(
            unknown_fields(
                "/modal.client.ModalClient/ImageGetOrCreate",
                &framed(&image, &[])
            ),
            Some(
                "ImageGetOrCreate: the emulator does not implement `builder_version` (set to \
                 2024.10)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn the_base_is_what_the_first_from_names() {
        let commands = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            from_reference(&commands(&["FROM base:v1", "RUN true"])),
            Ok("base:v1".into())
        );
        assert_eq!(
            from_reference(&commands(&[
                "from --platform=linux/amd64 r.io/x@sha256:ab AS one"
            ])),
            Ok("r.io/x@sha256:ab".into())
        );
        assert!(from_reference(&commands(&["RUN true"])).is_err());
        assert!(from_reference(&commands(&["FROM"])).is_err());
        assert!(from_reference(&[]).is_err());
    }

    #[test]
    fn a_jwt_carries_its_claims_and_ids_have_modals_shape() {
        let token = jwt(&serde_json::json!({"exp": 42}));
        let payload = token.split('.').nth(1).expect("three parts");
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url"))
                .expect("JSON");
        assert_eq!(claims["exp"], 42);
        let id = random_id(22);
        assert!(id.len() == 22 && id.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn a_grpc_timeout_header_is_read_in_each_unit() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (value, expected) in [
            ("2S", Some(Duration::from_secs(2))),
            ("1500m", Some(Duration::from_millis(1500))),
            ("1M", Some(Duration::from_secs(60))),
            ("7x", None),
        ] {
            metadata.insert("grpc-timeout", value.parse().expect("ascii"));
            assert_eq!(grpc_timeout(&metadata), expected, "{value}");
        }
    }

    #[test]
    fn long_polls_are_bounded() {
        assert_eq!(long_poll(-1.0), Duration::ZERO);
        assert_eq!(long_poll(f32::NAN), Duration::ZERO);
        assert_eq!(long_poll(2.5), Duration::from_millis(2500));
        assert_eq!(long_poll(1e9), LONG_POLL);
    }
}
