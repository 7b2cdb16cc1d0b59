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
//! (`MountBatchedCheckExistence`, `MountPutFile`, `MountGetOrCreate`: `mounts.rs`);
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

use crate::emulator::Emulator as _;
use crate::error::EmulateError;
use crate::http::{HttpRequest, lock};

mod backend;
mod command_router;
mod control;
mod fields;
mod mounts;
#[cfg(test)]
mod tests;

use backend::{build_inputs, from_reference};
use command_router::Router;
use control::{Control, Streamed};
use fields::{grpc_timeout, unknown_fields};

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
    /// How it ended, once it did: set once its container is gone, so that no answer says
    /// it ended while its container still holds its image.
    result: Option<api::GenericResult>,
    /// How it is ending, while its container is stopped and removed.
    ending: Option<api::GenericResult>,
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
    mounts: mounts::Mounts,
    secrets: HashMap<String, HashMap<String, String>>,
    named_secrets: HashMap<String, String>,
    sandboxes: HashMap<String, Arc<SandboxEntry>>,
    /// Sandbox ids by task id.
    tasks: HashMap<String, String>,
    execs: HashMap<(String, String), Arc<Exec>>,
    /// Issued router JWTs: their task and expiry (seconds since the epoch).
    jwts: HashMap<String, (String, u64)>,
}

/// The modal emulator. Dropping it does not stop serving: [`Emulator::stop`] does, and
/// [`Emulator::cleanup`] removes what its builds and sandboxes left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
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
    /// Its TLS front: domain, port, test CA; and where calls are kept once
    /// [`crate::emulator::Emulator::record`] is asked for.
    site: crate::site::Site,
    world: Mutex<World>,
    serving: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set by [`Emulator::stop`]: calls on connections still open are refused.
    stopped: AtomicBool,
    /// Sandbox launches under way.
    launching: AtomicUsize,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("plain", &self.inner.plain)
            .field("tls", &self.inner.site)
            .finish_non_exhaustive()
    }
}

impl crate::emulator::Emulator for Emulator {
    fn site(&self) -> &crate::site::Site {
        &self.inner.site
    }

    /// The same for both reaches: Modal's client reaches the plain gRPC port by URL, and
    /// the control plane's answers name no address of its own.
    fn client_env(&self, _reach: crate::emulator::Reach) -> crate::emulator::ClientEnv {
        // Fakes: the emulator generated them, and accepts no others.
        vec![
            ("MODAL_SERVER_URL", self.server_url()),
            ("MODAL_TOKEN_ID", self.token_id().to_owned()),
            ("MODAL_TOKEN_SECRET", self.token_secret().to_owned()),
            ("SANDBOX_MATRIX_MODAL_TLS_URL", self.tls_url()),
            // The run label of its builds, and of sandboxes created without one.
            ("SANDBOX_MATRIX_EMULATOR_RUN", self.run_id().to_owned()),
            // The TLS URL carries its port.
            self.resolve(crate::emulator::Reach::WithPort),
        ]
    }

    /// Stops serving: no new connection, and every call on one still open is refused.
    fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        for task in lock(&self.inner.serving).drain(..) {
            task.abort();
        }
    }

    /// Waits for its builds still running (up to 45 s), stops the sandboxes still running
    /// and removes, by their labels, whatever its builds and sandboxes left.
    async fn cleanup(&self) {
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
        self.inner.site.remove_made().await;
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
        let domain = options.domain.trim_end_matches('.').to_ascii_lowercase();
        let (plain_listener, plain) = crate::http::bind_loopback(options.port).await?;
        let (tls_listener, tls) = crate::http::bind_loopback(0).await?;
        let (behind_tls_listener, behind_tls) = crate::http::bind_loopback(0).await?;
        let ca = crate::tls::TestCa::generate(&domain)?;
        let ca_pem = ca.ca_pem().to_owned();
        // gRPC is HTTP/2: the front says so in ALPN (the test CA's default is HTTP/1.1).
        let mut config = (*ca.server_config()).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let emulator = Self {
            inner: Arc::new(Inner {
                site: crate::site::Site::new(domain, tls.port(), ca_pem, "modal", docker),
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

                world: Mutex::default(),
                serving: Mutex::default(),
                stopped: AtomicBool::new(false),
                launching: AtomicUsize::new(0),
            }),
        };
        let run_labels = emulator.labels(None, "build");
        emulator.inner.site.made_under(&run_labels);
        let plain_router = emulator.server_url();
        let tls_router = emulator.tls_url();
        let tasks = vec![
            emulator.serve(plain_listener, plain_router),
            emulator.serve(behind_tls_listener, tls_router),
            crate::tls::terminate(tls_listener, Arc::new(config), behind_tls),
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
        format!("https://api.{}:{}", self.domain(), self.port())
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
}

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
        let recording = self.emulator.inner.site.recording();
        Box::pin(async move {
            let arrived = crate::record::now_ms();
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
    if let Ok(value) = http::HeaderValue::from_str(&crate::emulated::describe("modal")) {
        response
            .headers_mut()
            .insert(sandbox_providers::api::EMULATOR_HEADER, value);
    }
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
