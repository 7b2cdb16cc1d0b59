//! Emulators of the cloud providers' APIs, served on loopback over HTTPS and backed by the
//! docker variant: what authors the cassettes, what `sandbox-matrix emulate` serves, and
//! what the providers' own SDKs are run against.
//!
//! This module holds their shared plumbing: an HTTP/1.1 server handing each request to the
//! emulator as an [`HttpRequest`], the [`Answer`] it gives back, and [`tls`] (a test CA
//! made at start, and the TLS front). An emulator is reached through its provider's live
//! host forms (`api.<domain>`, `<port>-<id>.<domain>`), the client pinning `<domain>` and
//! every name under it to 127.0.0.1 and trusting the test CA.

pub mod datalayer;
pub mod daytona;
pub mod e2b;
mod error;
mod http;
pub mod launch;
pub mod modal;
pub mod record;
pub mod tls;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sandbox_providers::api::{Network, ResolvePin};
use sandbox_providers::{Artifact, BuildRequest, LogFn, Provider, RunLabels};

pub use error::EmulateError;
pub use http::{Answer, HttpRequest, bind_loopback, serve_http};
pub(crate) use http::{host_name, lock, upgrade_request};

/// The domain an emulator serves when none is given: `.test` never resolves on the
/// Internet (RFC 6761), so only a pinned client reaches it.
pub const DEFAULT_DOMAIN: &str = "emulator.test";

/// The providers sandbox-matrix emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulated {
    /// E2B's control plane, envd and the code interpreter.
    E2b,
    /// Daytona's API and toolbox.
    Daytona,
    /// Modal's gRPC control plane and task command router.
    Modal,
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress.
    Datalayer,
}

impl Emulated {
    /// The emulator cloud variant `variant` runs against; `None` for a variant with none.
    pub fn of_variant(variant: &str) -> Option<Self> {
        match variant {
            "e2b" => Some(Self::E2b),
            "daytona" => Some(Self::Daytona),
            "modal" => Some(Self::Modal),
            sandbox_providers::datalayer::runtimes::VARIANT => Some(Self::Datalayer),
            _ => None,
        }
    }

    /// The provider's name, as people write it.
    pub fn provider(self) -> &'static str {
        match self {
            Self::E2b => "E2B",
            Self::Daytona => "Daytona",
            Self::Modal => "Modal",
            Self::Datalayer => "Datalayer",
        }
    }
}

/// What results of `variant` run against its emulator say they came from:
/// `sandbox-matrix 0.9.0's E2B emulator over the local Docker engine`.
pub fn describe(variant: &str) -> String {
    let provider: &str = match Emulated::of_variant(variant) {
        Some(which) => which.provider(),
        None => variant,
    };
    format!(
        "sandbox-matrix {}'s {provider} emulator over the local Docker engine, not {provider}",
        env!("CARGO_PKG_VERSION")
    )
}

/// An HTTP emulator's sockets on 127.0.0.1 before it serves: the TLS front on the asked
/// port, which hands every connection to a listener that splits WebSocket upgrades off
/// and passes every other request to the plain HTTP listener.
pub(crate) struct Listening {
    /// The TLS front, which [`Site::new`] reads its port and CA from.
    pub(crate) front: Front,
    plain: (tokio::net::TcpListener, SocketAddr),
    split: (tokio::net::TcpListener, SocketAddr),
}

impl Listening {
    /// Listens with the front on `port` (0: any free one), its certificate naming
    /// `certified` and every name under it.
    pub(crate) async fn on(port: u16, certified: &str) -> Result<Self, EmulateError> {
        let plain = bind_loopback(0).await?;
        let split = bind_loopback(0).await?;
        let front = Front::with_upstream(port, split.1, certified).await?;
        Ok(Self {
            front,
            plain,
            split,
        })
    }

    /// The address the front relays to, upgrades and plain requests alike, on loopback.
    pub(crate) fn upstream(&self) -> SocketAddr {
        self.split.1
    }

    /// Serves `site`: each WebSocket upgrade with `upgrade`, every other request with
    /// `handle`, until the site stops.
    pub(crate) fn serve<U, UF, H, HF>(self, site: &Arc<Site>, upgrade: U, handle: H)
    where
        U: Fn(sandbox_providers::api::ws::Rewound) -> UF + Clone + Send + Sync + 'static,
        UF: std::future::Future<Output = ()> + Send + 'static,
        H: Fn(HttpRequest) -> HF + Clone + Send + Sync + 'static,
        HF: std::future::Future<Output = Answer> + Send + 'static,
    {
        let Self {
            mut front,
            plain: (plain_listener, plain),
            split: (split, _),
        } = self;
        front.serve(sandbox_providers::api::ws::split_upgrades(
            split, plain, upgrade,
        ));
        site.serve(front, plain_listener, handle);
    }
}

/// The HTTP client an emulator forwards with: no proxy, whatever the environment says.
pub(crate) fn http_client() -> Result<reqwest::Client, EmulateError> {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| EmulateError::Backend(format!("an HTTP client: {e}")))
}

/// An emulator's HTTPS front: the public TLS listener and the tasks serving it.
#[derive(Debug)]
pub struct Front {
    /// Where clients connect: 127.0.0.1 and the public port.
    pub addr: SocketAddr,
    /// The plain HTTP server behind the TLS front, on loopback.
    pub plain: SocketAddr,
    ca: Arc<tls::TestCa>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Front {
    /// A TLS front on 127.0.0.1:`port` (0: any free port) with a fresh test CA's
    /// certificate for `domain`, relaying to an already serving `upstream` (such as one
    /// that splits WebSocket upgrades off first).
    pub async fn with_upstream(
        port: u16,
        upstream: SocketAddr,
        domain: &str,
    ) -> Result<Self, EmulateError> {
        let (public, addr) = bind_loopback(port).await?;
        let ca = Arc::new(tls::TestCa::generate(domain)?);
        let task = tls::terminate(public, ca.server_config(), upstream);
        Ok(Self {
            addr,
            plain: upstream,
            ca,
            tasks: vec![task],
        })
    }

    /// Keeps `task` (the server behind the front) until the front is dropped.
    pub fn serve(&mut self, task: tokio::task::JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// The public port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The test CA whose certificate clients must trust.
    pub fn ca(&self) -> &tls::TestCa {
        &self.ca
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What every emulator served over HTTP shares through the [`Site`] it serves (e2b,
/// daytona, datalayer-runtimes): only [`Emulator::site`] is its own.
pub trait Emulator {
    /// Where it is served.
    fn site(&self) -> &Site;

    /// Stops serving (what its cleanup removes is left to the cleanup).
    fn stop(&self) {
        self.site().stop();
    }

    /// Keeps every request it is sent from now on, for a caller to read.
    fn record(&self) -> record::Exchanges {
        self.site().record()
    }

    /// The port it serves on 127.0.0.1.
    fn port(&self) -> u16 {
        self.site().port()
    }

    /// Its domain, without a port.
    fn domain(&self) -> &str {
        self.site().domain()
    }

    /// The test CA's certificate, PEM.
    fn ca_pem(&self) -> &str {
        self.site().ca_pem()
    }

    /// What a client needs besides the URLs: the test CA trusted, and the domain pinned to
    /// 127.0.0.1 at the emulator's port, so URLs may carry no port at all (as live ones).
    fn network(&self) -> Network {
        self.site().network()
    }
}

/// Where an emulator is served and what a client needs to reach it: its domain, its port
/// on 127.0.0.1 and its test CA; and the [`Front`] serving it until stopped.
pub struct Site {
    /// What every answer's [`sandbox_providers::api::EMULATOR_HEADER`] says.
    announce: Arc<str>,
    domain: String,
    port: u16,
    ca_pem: String,
    front: Mutex<Option<Front>>,
    /// Where requests are kept once [`Self::record`] is asked for.
    recording: Mutex<Option<record::Exchanges>>,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("domain", &self.domain)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Site {
    /// `domain` (as [`Self::normalise`] gives it) served through `front`, which
    /// [`Self::serve`] takes once the emulator exists.
    /// Serves `domain` through `front` as the emulator of cloud variant `variant`, which
    /// every answer names ([`sandbox_providers::api::EMULATOR_HEADER`]).
    pub(crate) fn new(domain: String, front: &Front, variant: &str) -> Self {
        Self {
            announce: Arc::from(describe(variant)),
            domain,
            port: front.port(),
            ca_pem: front.ca().ca_pem().to_owned(),
            front: Mutex::new(None),
            recording: Mutex::new(None),
        }
    }

    /// `domain` as a site names it: no trailing dot, lower case.
    pub(crate) fn normalise(domain: &str) -> String {
        domain.trim_end_matches('.').to_ascii_lowercase()
    }

    /// Serves `handle` over HTTP on `listener`, the upstream of `front`, and keeps both
    /// serving until [`Self::stop`]. Once [`Self::record`] was asked for, every request
    /// and its answer are kept.
    pub(crate) fn serve<F, Fut>(
        self: &Arc<Self>,
        mut front: Front,
        listener: tokio::net::TcpListener,
        handle: F,
    ) where
        F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Answer> + Send + 'static,
    {
        let site = Arc::downgrade(self);
        front.serve(serve_http(
            listener,
            Some(self.announce.clone()),
            move |request: HttpRequest| {
                let handle = handle.clone();
                let site = site.clone();
                async move {
                    let recording = site.upgrade().and_then(|s| lock(&s.recording).clone());
                    let Some(exchanges) = recording else {
                        return handle(request).await;
                    };
                    let kept = HttpRequest {
                        method: request.method.clone(),
                        host: request.host.clone(),
                        path: request.path.clone(),
                        query: request.query.clone(),
                        headers: request.headers.clone(),
                        body: request.body.clone(),
                    };
                    let arrived = record::now_ms();
                    let answer = handle(request).await;
                    exchanges.keep(arrived, &kept, answer.status, &answer.body);
                    answer
                }
            },
        ));
        *lock(&self.front) = Some(front);
    }

    /// Keeps every request from now on (and a WebSocket upgrade [`Self::keep_upgrade`] is
    /// given); the handle reads them.
    pub(crate) fn record(&self) -> record::Exchanges {
        lock(&self.recording)
            .get_or_insert_with(record::Exchanges::default)
            .clone()
    }

    /// Keeps a WebSocket upgrade request, answered `status`, when recording.
    pub(crate) fn keep_upgrade(&self, request: &HttpRequest, status: u16) {
        if let Some(exchanges) = lock(&self.recording).as_ref() {
            exchanges.keep(record::now_ms(), request, status, &[]);
        }
    }

    /// Stops serving.
    pub(crate) fn stop(&self) {
        lock(&self.front).take();
    }

    /// Whether [`Self::stop`] was called: what it made is its cleanup's, not its own.
    pub(crate) fn stopped(&self) -> bool {
        lock(&self.front).is_none()
    }

    /// The port it serves on 127.0.0.1.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The domain, without a port.
    pub(crate) fn domain(&self) -> &str {
        &self.domain
    }

    /// The test CA's certificate, PEM.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// What `host` (lower case, without a port) names before `.<domain>`: `api` for
    /// `api.<domain>`; none for the domain itself or a host outside it.
    pub(crate) fn label<'a>(&self, host: &'a str) -> Option<&'a str> {
        host.strip_suffix(&self.domain)
            .and_then(|rest| rest.strip_suffix('.'))
    }

    /// What a client needs besides the URLs: the test CA trusted, and the domain pinned to
    /// 127.0.0.1 at the port, so URLs may carry no port at all (as live ones).
    pub(crate) fn network(&self) -> Network {
        Network::default()
            .trust_pem(self.ca_pem.clone())
            .pin(ResolvePin {
                domain: self.domain.clone(),
                addr: SocketAddr::from(([127, 0, 0, 1], self.port)),
            })
    }
}

/// The first field of a JSON request `body` set (not null) that is not among
/// `implemented`: what an emulator refuses by name rather than take and drop.
pub(crate) fn set_field_outside(body: &serde_json::Value, implemented: &[&str]) -> Option<String> {
    body.as_object()
        .into_iter()
        .flatten()
        .find(|(k, v)| !v.is_null() && !implemented.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
}

/// The scenario a seed of the environment folder `environment` is labelled with: the
/// folder's name.
pub(crate) fn seed_scenario(environment: &Path) -> String {
    environment
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "environment".into())
}

/// Builds the environment folder `environment` with `client` (the project's client for an
/// emulator's provider, pointed at it) from the local base, labelled `labels`: how an
/// emulator seeds what clients create sandboxes from. `log` gets the build's lines.
pub(crate) async fn seed_build(
    client: &dyn Provider,
    environment: &Path,
    labels: RunLabels,
    log: &LogFn,
) -> Result<Artifact, EmulateError> {
    let request = BuildRequest {
        environment_dir: environment.to_owned(),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels,
    };
    client
        .build(&request, log)
        .await
        .map_err(|e| EmulateError::Backend(format!("seeding {}: {e}", environment.display())))
}

/// Removes from `docker`, by their labels, whatever builds and sandboxes labelled with any
/// of `labels` left; what it cannot list or remove it says on stderr, by name.
pub(crate) async fn remove_labelled(docker: &dyn Provider, labels: Vec<RunLabels>) {
    // Every label set is listed first and every container removed before any image: a
    // sandbox the emulator ended on its own (a timeout) may still be stopping, under
    // another label set than its image's.
    let mut containers = Vec::new();
    let mut images = Vec::new();
    for labels in labels {
        match docker.list_resources(&labels).await {
            Ok(listed) => {
                let (c, i): (Vec<_>, Vec<_>) =
                    listed.into_iter().partition(|r| r.kind == "container");
                containers.extend(c);
                images.extend(i);
            }
            Err(e) => eprintln!("emulator cleanup: cannot list run {}: {e}", labels.run_id),
        }
    }
    for resource in containers.into_iter().chain(images) {
        if let Err(e) = docker.delete_resource(&resource).await {
            eprintln!(
                "emulator cleanup: {} {} could not be removed: {e}",
                resource.kind, resource.id
            );
        }
    }
}

/// Forwards `r` to the Jupyter Server of the docker sandbox `inner` at `path` (the request's
/// path as that server sees it), with the server's own token: what an emulator's code
/// channel serves once it has admitted the request.
pub(crate) async fn forward_to_jupyter(
    docker: &sandbox_providers::docker::DockerProvider,
    http: &reqwest::Client,
    inner: &sandbox_providers::SandboxId,
    path: &str,
    r: &HttpRequest,
) -> Answer {
    let (base, token) = match docker.jupyter_endpoint(inner).await {
        Ok(found) => found,
        Err(e) => return Answer::error(502, &e.to_string()),
    };
    let query = if r.query.is_empty() {
        String::new()
    } else {
        format!("?{}", r.query)
    };
    let method = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut request = http
        .request(method, format!("{base}{path}{query}"))
        .header("Authorization", format!("token {}", token.expose()))
        .body(r.body.clone());
    if let Some(kind) = r.headers.get("content-type") {
        request = request.header("Content-Type", kind);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let json = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
            Answer {
                status,
                content_type: if json {
                    "application/json"
                } else {
                    "text/plain"
                },
                body: response
                    .bytes()
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default(),
            }
        }
        Err(e) => Answer::error(502, &format!("the sandbox's Jupyter Server: {e}")),
    }
}

/// Relays an admitted kernel WebSocket, frame for frame both ways, to the kernel channels
/// at `path` (with its query) of the docker sandbox `inner`'s Jupyter Server, until either
/// side closes; a kernel that cannot be reached closes the client's socket with 1011.
pub(crate) async fn relay_to_kernel(
    docker: &sandbox_providers::docker::DockerProvider,
    inner: &sandbox_providers::SandboxId,
    path: &str,
    mut socket: tokio_tungstenite::WebSocketStream<sandbox_providers::api::ws::Rewound>,
) {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};
    let upstream = async {
        let (base, token) = docker
            .jupyter_endpoint(inner)
            .await
            .map_err(|e| e.to_string())?;
        let url = format!("ws{}{path}", base.trim_start_matches("http"));
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| e.to_string())?;
        let value = format!("token {}", token.expose())
            .parse()
            .map_err(|_| "a bad token".to_owned())?;
        request.headers_mut().insert("authorization", value);
        tokio_tungstenite::connect_async(request)
            .await
            .map(|(ws, _)| ws)
            .map_err(|e| e.to_string())
    };
    let mut upstream = match upstream.await {
        Ok(ws) => ws,
        Err(e) => {
            sandbox_providers::api::ws::close_with(
                &mut socket,
                1011,
                &format!("the sandbox's kernel: {e}"),
            )
            .await;
            return;
        }
    };
    loop {
        tokio::select! {
            from_client = socket.next() => match from_client {
                Some(Ok(Message::Close(frame))) => {
                    let _ = upstream.close(frame).await;
                    break;
                }
                Some(Ok(message)) => {
                    if upstream.send(message).await.is_err() {
                        break;
                    }
                }
                _ => break,
            },
            from_kernel = upstream.next() => match from_kernel {
                Some(Ok(Message::Close(frame))) => {
                    let _ = socket.close(frame).await;
                    break;
                }
                Some(Ok(Message::Frame(_))) => {}
                Some(Ok(message)) => {
                    if socket.send(message).await.is_err() {
                        break;
                    }
                }
                _ => break,
            },
        }
    }
    let _ = upstream.close(None).await;
}

#[cfg(test)]
mod tests;
