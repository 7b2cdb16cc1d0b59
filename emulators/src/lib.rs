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
pub mod launch;
pub mod modal;
pub mod record;
pub mod tls;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use sandbox_providers::api::{Network, ResolvePin};
use sandbox_providers::{Artifact, BuildRequest, LogFn, Provider, RunLabels};

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

/// Why an emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// Making the test CA or the TLS configuration failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// A socket or file operation failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The emulator's backend (the docker variant) is not available.
    #[error("{0}")]
    Backend(String),
    /// An option names something the emulator does not have.
    #[error("{0}")]
    Config(String),
}

/// One HTTP request as an emulator reads it.
#[derive(Debug)]
pub struct HttpRequest {
    /// Method, upper case.
    pub method: String,
    /// The `Host` header (the name the client called, with its port if it gave one).
    pub host: String,
    /// Path, without the query.
    pub path: String,
    /// The raw query, empty when there is none.
    pub query: String,
    /// Headers, names lower case.
    pub headers: std::collections::HashMap<String, String>,
    /// The whole body.
    pub body: Vec<u8>,
}

/// One answer: status, content type, body.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Its content type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// `value` as a JSON body.
    pub fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(&value).unwrap_or_default(),
        }
    }

    /// No body.
    pub fn empty(status: u16) -> Self {
        Self {
            status,
            content_type: "text/plain",
            body: Vec::new(),
        }
    }

    /// E2B's error shape, `{"code": status, "message": ...}`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::json(
            status,
            serde_json::json!({ "code": status, "message": message }),
        )
    }
}

impl From<Answer> for (u16, String, Vec<u8>) {
    fn from(answer: Answer) -> Self {
        (answer.status, answer.content_type.to_owned(), answer.body)
    }
}

/// A listener on 127.0.0.1 at `port` (0: any free one) and its address.
pub async fn bind_loopback(
    port: u16,
) -> Result<(tokio::net::TcpListener, SocketAddr), EmulateError> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| EmulateError::Io {
            what: format!("listen on 127.0.0.1:{port}"),
            source: e,
        })?;
    let addr = listener.local_addr().map_err(|e| EmulateError::Io {
        what: "read the listener's address".into(),
        source: e,
    })?;
    Ok((listener, addr))
}

/// Serves HTTP/1.1 on `listener` with hyper, answering each request with what `handle`
/// returns: status, content type and body (or an [`Answer`]), each answer naming the
/// emulator in [`sandbox_providers::api::EMULATOR_HEADER`] when `announce` is set. Runs
/// until the task is aborted.
pub fn serve_http<F, Fut>(
    listener: tokio::net::TcpListener,
    announce: Option<Arc<str>>,
    handle: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Into<(u16, String, Vec<u8>)>,
{
    use http_body_util::BodyExt as _;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handle = handle.clone();
            let announce = announce.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let handle = handle.clone();
                        let announce = announce.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes().to_vec();
                            let headers: std::collections::HashMap<String, String> = parts
                                .headers
                                .iter()
                                .map(|(k, v)| {
                                    (
                                        k.as_str().to_owned(),
                                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                    )
                                })
                                .collect();
                            let request = HttpRequest {
                                method: parts.method.to_string(),
                                host: headers.get("host").cloned().unwrap_or_default(),
                                path: parts.uri.path().to_owned(),
                                query: parts.uri.query().unwrap_or_default().to_owned(),
                                headers,
                                body,
                            };
                            let (status, content_type, body) = handle(request).await.into();
                            let mut response = hyper::Response::builder()
                                .status(status)
                                .header("content-type", content_type);
                            if let Some(announce) = &announce {
                                response = response
                                    .header(sandbox_providers::api::EMULATOR_HEADER, &**announce);
                            }
                            let response =
                                response.body(http_body_util::Full::new(bytes::Bytes::from(body)));
                            let response = response.unwrap_or_else(|_| {
                                let mut r = hyper::Response::new(http_body_util::Full::new(
                                    bytes::Bytes::from_static(b"invalid response"),
                                ));
                                *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                                r
                            });
                            Ok::<_, hyper::Error>(response)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    })
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

/// The name in a `Host` header, lower case, without the port it may name.
pub(crate) fn host_name(host: &str) -> String {
    host.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
        .to_ascii_lowercase()
}

/// A WebSocket upgrade `request` as an [`HttpRequest`] with no body, for the request log.
pub(crate) fn upgrade_request(
    request: &tokio_tungstenite::tungstenite::handshake::server::Request,
) -> HttpRequest {
    let headers: std::collections::HashMap<String, String> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    HttpRequest {
        method: request.method().to_string(),
        host: headers.get("host").cloned().unwrap_or_default(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().unwrap_or_default().to_owned(),
        headers,
        body: Vec::new(),
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

/// `m`'s guard; a lock poisoned by a panicked request is taken as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
mod tests {
    use super::*;

    #[test]
    fn every_cloud_variant_has_an_emulator_named_in_its_results() {
        for variant in ["e2b", "daytona", "modal", "datalayer-runtimes"] {
            let which = Emulated::of_variant(variant).expect("an emulator");
            let said = describe(variant);
            assert!(
                said.contains(&format!("{} emulator", which.provider()))
                    && said.ends_with(&format!("not {}", which.provider())),
                "{said}"
            );
        }
        assert_eq!(Emulated::of_variant("docker"), None);
    }
}
