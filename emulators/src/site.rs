//! Where an HTTP emulator is served: its [`Site`] (domain, port, test CA, recording), the
//! TLS [`Front`] clients connect to, and the sockets it listens on before it serves.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use sandbox_providers::RunLabels;
use sandbox_providers::api::ws::Rewound;
use sandbox_providers::api::{Network, ResolvePin};
use sandbox_providers::docker::DockerProvider;

use crate::backend::remove_labelled;
use crate::emulated::describe;
use crate::error::EmulateError;
use crate::http::{Answer, HttpRequest, bind_loopback, lock, serve_http};
use crate::record;
use crate::tls;

/// An HTTP emulator's sockets on 127.0.0.1 and the [`Site`] they serve, before it serves:
/// the TLS front on the asked port, which hands every connection to a listener that
/// splits WebSocket upgrades off and passes every other request to the plain HTTP
/// listener.
pub(crate) struct Listening {
    site: Arc<Site>,
    front: Front,
    plain: (tokio::net::TcpListener, SocketAddr),
    split: (tokio::net::TcpListener, SocketAddr),
}

impl Listening {
    /// Listens for the emulator of cloud variant `variant` at `domain` (normalised: no
    /// trailing dot, lower case) over `backend`, the front on `port` (0: any free one),
    /// its certificate naming `<under>.<domain>` (or `domain` when `under` is `None`) and
    /// every name under it.
    pub(crate) async fn on(
        port: u16,
        domain: &str,
        under: Option<&str>,
        variant: &str,
        backend: Arc<DockerProvider>,
    ) -> Result<Self, EmulateError> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let certified = match under {
            Some(label) => format!("{label}.{domain}"),
            None => domain.clone(),
        };
        let plain = bind_loopback(0).await?;
        let split = bind_loopback(0).await?;
        let front = Front::with_upstream(port, split.1, &certified).await?;
        let ca_pem = front.ca().ca_pem().to_owned();
        let site = Arc::new(Site::new(domain, front.port(), ca_pem, variant, backend));
        Ok(Self {
            site,
            front,
            plain,
            split,
        })
    }

    /// The site it serves.
    pub(crate) fn site(&self) -> Arc<Site> {
        self.site.clone()
    }

    /// The address the front relays to, upgrades and plain requests alike, on loopback.
    pub(crate) fn upstream(&self) -> SocketAddr {
        self.split.1
    }

    /// Serves `emulator` until its site stops: each WebSocket upgrade with `upgrade`, every
    /// other request with `handle`.
    pub(crate) fn serve<E, U, UF, H, HF>(self, emulator: E, upgrade: U, handle: H)
    where
        E: Clone + Send + Sync + 'static,
        U: Fn(E, Rewound) -> UF + Clone + Send + Sync + 'static,
        UF: std::future::Future<Output = ()> + Send + 'static,
        H: Fn(E, HttpRequest) -> HF + Clone + Send + Sync + 'static,
        HF: std::future::Future<Output = Answer> + Send + 'static,
    {
        let Self {
            site,
            mut front,
            plain: (plain_listener, plain),
            split: (split, _),
        } = self;
        let sockets = emulator.clone();
        front.serve(sandbox_providers::api::ws::split_upgrades(
            split,
            plain,
            move |stream| upgrade(sockets.clone(), stream),
        ));
        site.serve(front, plain_listener, move |request| {
            handle(emulator.clone(), request)
        });
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
    /// The docker variant behind the emulator.
    backend: Arc<DockerProvider>,
    /// The labels of every build and sandbox it made: what [`Self::remove_made`] removes.
    made: Mutex<Vec<RunLabels>>,
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
    /// The emulator of cloud variant `variant`, which every answer names
    /// ([`sandbox_providers::api::EMULATOR_HEADER`]), at `domain` (lower case, no trailing
    /// dot) on 127.0.0.1:`port` behind a test CA `ca_pem`; [`Self::serve`] takes its front
    /// once the emulator exists. What it makes, it makes on `backend`.
    pub(crate) fn new(
        domain: String,
        port: u16,
        ca_pem: String,
        variant: &str,
        backend: Arc<DockerProvider>,
    ) -> Self {
        Self {
            announce: Arc::from(describe(variant)),
            domain,
            port,
            ca_pem,
            front: Mutex::new(None),
            recording: Mutex::new(None),
            backend,
            made: Mutex::default(),
        }
    }

    /// The docker variant behind the emulator.
    pub(crate) fn backend(&self) -> &Arc<DockerProvider> {
        &self.backend
    }

    /// Notes that the emulator makes builds or sandboxes labelled `labels`.
    pub(crate) fn made_under(&self, labels: &RunLabels) {
        let mut made = lock(&self.made);
        if !made.contains(labels) {
            made.push(labels.clone());
        }
    }

    /// Removes from the backend, by their labels, whatever the emulator's builds and
    /// sandboxes left.
    pub(crate) async fn remove_made(&self) {
        let labels = lock(&self.made).clone();
        remove_labelled(self.backend.as_ref(), labels).await;
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
                    let recording = site.upgrade().and_then(|s| s.recording());
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

    /// Where requests are kept, once [`Self::record`] was asked for.
    pub(crate) fn recording(&self) -> Option<record::Exchanges> {
        lock(&self.recording).clone()
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
