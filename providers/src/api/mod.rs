//! The HTTP layer every cloud variant talks through, the same code in three modes: live,
//! record (live, every exchange written to a cassette with credentials replaced by
//! placeholders) and replay (pointed at a local [`replay::ReplayServer`]).
//!
//! Every call has a deadline; 429 (honouring Retry-After), 5xx and connection errors are
//! retried with backoff, 5xx and resets only when the call is idempotent.

pub mod cassette;
pub mod grpc;
pub mod network;
mod poll;
mod recorder;
pub mod replay;
pub mod settings;

/// The response header sandbox-matrix's emulators answer with, naming themselves
/// (`sandbox-matrix 0.9.0's E2B emulator over the local Docker engine, not E2B`); the
/// real services never send it.
pub const EMULATOR_HEADER: &str = "x-sandbox-matrix-emulator";
pub mod ws;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::BackoffBuilder as _;
use futures_util::StreamExt as _;
use reqwest::Method;

pub use cassette::{Body, Cassette, ConnectFrame, Exchange, Normalizer, Volatiles, WsFrame};
pub use network::{Network, ResolvePin};
pub use poll::PollIntervals;
pub use recorder::Recorder;

use crate::{ErrorKind, ProviderError, Result, Secret, tail};
use cassette::{RecordedRequest, RecordedResponse};

/// Most attempts of one call, the first included.
const MAX_ATTEMPTS: usize = 5;
/// Longest Retry-After the client honours; a longer one fails the call.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Response headers a cassette keeps.
const KEPT_RESPONSE_HEADERS: &[&str] = &["content-type", "retry-after", "location"];

/// A provider's live URLs.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Control-plane base URL, such as `https://api.example.test`.
    pub api_base: String,
    /// Domain under which sandboxes answer as `https://{port}-{id}.{domain}`; given as an
    /// `http(s)://` URL instead, sandbox calls go to `{url}/sandbox/{port}/{id}{path}`.
    pub sandbox_domain: String,
}

/// Where calls go and whether they are written down.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The real service.
    Live,
    /// The real service, every exchange added to the recorder.
    Record(Arc<Recorder>),
    /// A local replay server at `server_url`.
    Replay {
        /// Base URL of the replay server.
        server_url: String,
        /// How fast it answers; at instant pace polls do not wait either.
        pace: replay::Pace,
    },
}

/// How to make an [`ApiClient`].
#[derive(Debug)]
pub struct ApiSettings {
    /// Live URLs.
    pub endpoints: Endpoints,
    /// Live, record or replay.
    pub mode: Mode,
    /// Credentials; their values never reach a cassette, a log or an error.
    pub credentials: Vec<Secret>,
    /// Run-varying values, kept as placeholders in cassettes.
    pub volatiles: Arc<Volatiles>,
    /// Default deadline of one HTTP call.
    pub call_timeout: Duration,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The control plane.
    Api,
    /// A port of a running sandbox.
    Sandbox {
        /// Port inside the sandbox.
        port: u16,
        /// The provider's sandbox id.
        sandbox_id: String,
    },
    /// An absolute URL the provider handed out (an upload link, a proxy).
    Absolute(String),
}

/// A request body.
#[derive(Debug, Clone)]
pub enum ReqBody {
    /// No body.
    None,
    /// A JSON document.
    Json(serde_json::Value),
    /// One Connect envelope holding this JSON message, for a server-streaming call.
    ConnectStream(serde_json::Value),
    /// Raw bytes with no content type, as E2B's SDK uploads a build's files to the signed
    /// URL the API hands out.
    Raw(Vec<u8>),
}

/// One HTTP call. Its `Debug` shows header names only: values may be credentials.
#[derive(Clone)]
pub struct ApiRequest {
    method: Method,
    target: Target,
    path: String,
    headers: Vec<(String, String)>,
    body: ReqBody,
    idempotent: bool,
    timeout: Option<Duration>,
    what: Option<String>,
}

impl std::fmt::Debug for ApiRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ApiRequest")
            .field("call", &self.describe())
            .field("headers", &headers)
            .field("idempotent", &self.idempotent)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ApiRequest {
    /// A request; GET, HEAD, PUT and DELETE count as idempotent.
    pub fn new(method: Method, target: Target, path: impl Into<String>) -> Self {
        let idempotent = matches!(
            method,
            Method::GET | Method::HEAD | Method::PUT | Method::DELETE
        );
        Self {
            method,
            target,
            path: path.into(),
            headers: Vec::new(),
            body: ReqBody::None,
            idempotent,
            timeout: None,
            what: None,
        }
    }

    /// A GET.
    pub fn get(target: Target, path: impl Into<String>) -> Self {
        Self::new(Method::GET, target, path)
    }

    /// A DELETE.
    pub fn delete(target: Target, path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, target, path)
    }

    /// A POST (not idempotent unless marked so).
    pub fn post(target: Target, path: impl Into<String>) -> Self {
        Self::new(Method::POST, target, path)
    }

    /// With a JSON body.
    pub fn json(self, body: serde_json::Value) -> Self {
        self.body(ReqBody::Json(body))
    }

    /// With `body`.
    pub fn body(mut self, body: ReqBody) -> Self {
        self.body = body;
        self
    }

    /// With a header; a credential in its value is redacted wherever it is written.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Whether repeating the call is harmless (then 5xx and resets are retried).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// With a deadline other than the client's default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Names the call for errors, such as `create sandbox`.
    pub fn what(mut self, what: impl Into<String>) -> Self {
        self.what = Some(what.into());
        self
    }

    /// The path cassettes hold and replay serves (see [`Target`]).
    pub fn canonical_path(&self) -> String {
        canonical_path(&self.target, &self.path)
    }

    fn describe(&self) -> String {
        let call = format!("{} {}", self.method, self.canonical_path());
        match &self.what {
            Some(what) => format!("{what}: {call}"),
            None => call,
        }
    }

    /// The body's bytes, with its content type where it has one.
    fn encode_body(&self) -> Result<Option<(Option<String>, Vec<u8>)>> {
        Ok(match &self.body {
            ReqBody::None => None,
            ReqBody::Json(v) => Some((
                Some("application/json".to_owned()),
                serde_json::to_vec(v)
                    .map_err(|e| ProviderError::new(ErrorKind::Protocol, e.to_string()))?,
            )),
            ReqBody::ConnectStream(v) => Some((
                Some("application/connect+json".to_owned()),
                cassette::encode_connect(0, v)?,
            )),
            ReqBody::Raw(bytes) => Some((None, bytes.clone())),
        })
    }
}

fn canonical_path(target: &Target, path: &str) -> String {
    match target {
        Target::Api => path.to_owned(),
        Target::Sandbox { port, sandbox_id } => format!("/sandbox/{port}/{sandbox_id}{path}"),
        Target::Absolute(url) => match reqwest::Url::parse(url) {
            Ok(u) => {
                let mut p = format!("/external/{}{}", u.host_str().unwrap_or("-"), u.path());
                if let Some(q) = u.query() {
                    p.push('?');
                    p.push_str(q);
                }
                p
            }
            Err(_) => format!("/external/-/{url}"),
        },
    }
}

/// A response with its whole body. Its `Debug` leaves the body out: it may hold a token.
#[derive(Clone)]
pub struct ApiResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers, names lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: bytes::Bytes,
    what: String,
}

impl std::fmt::Debug for ApiResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiResponse")
            .field("call", &self.what)
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl ApiResponse {
    /// The body as JSON of type `T`; the error names the call and what did not fit.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "unexpected response body: {e}; body: {}",
                    tail(&self.text(), 300)
                ),
            )
            .context(self.what.clone())
        })
    }

    /// The body as newline-delimited JSON.
    pub fn json_lines(&self) -> Result<Vec<serde_json::Value>> {
        self.text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| {
                    ProviderError::new(
                        ErrorKind::Protocol,
                        format!("line {} is not JSON: {e}: {}", i + 1, tail(l, 200)),
                    )
                    .context(self.what.clone())
                })
            })
            .collect()
    }

    /// The body as Connect envelopes.
    pub fn connect_frames(&self) -> Result<Vec<ConnectFrame>> {
        cassette::decode_connect(&self.body).map_err(|e| e.context(self.what.clone()))
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An HTTP client for one provider in one mode. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ApiClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    endpoints: Endpoints,
    /// What an answer's [`EMULATOR_HEADER`] said, live or recording.
    emulator: std::sync::OnceLock<String>,
    mode: Mode,
    credentials: Mutex<Vec<Secret>>,
    volatiles: Arc<Volatiles>,
    call_timeout: Duration,
    /// Extra roots and the resolve pin, which WebSockets honour too.
    network: Network,
}

/// One attempt's outcome before it is judged.
enum Attempt {
    /// A whole response.
    Response(ApiResponse, Duration),
    /// The body broke off after `partial` bytes.
    CutMidStream {
        status: u16,
        headers: Vec<(String, String)>,
        partial: bytes::Bytes,
        error: String,
        latency: Duration,
    },
    /// No response: connecting or sending failed.
    NoResponse { error: String, connect: bool },
}

impl ApiClient {
    /// The emulator that answered, as its [`EMULATOR_HEADER`] said; never set in replay.
    pub fn emulator(&self) -> Option<String> {
        self.inner.emulator.get().cloned()
    }

    /// True when exchanges are recorded or replayed: a cassette holds them in one order,
    /// so the caller must make its calls one at a time.
    pub fn keeps_order(&self) -> bool {
        !matches!(self.inner.mode, Mode::Live)
    }

    /// A client with `settings`; live and recording, it also takes the test network
    /// settings of the environment ([`Network::from_env`]), which a live run leaves unset.
    pub fn new(settings: ApiSettings) -> Result<Self> {
        let network = match settings.mode {
            Mode::Live | Mode::Record(_) => Network::from_env()?,
            Mode::Replay { .. } => Network::default(),
        };
        Self::with_network(settings, &network)
    }

    /// A client with `settings` trusting `network`'s extra roots and resolving through its
    /// pin (an emulator reached through the live host forms).
    pub fn with_network(settings: ApiSettings, network: &Network) -> Result<Self> {
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        let http = network.apply(builder)?.build().map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot make an HTTP client: {e}"),
            )
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                endpoints: settings.endpoints,
                emulator: std::sync::OnceLock::new(),
                mode: settings.mode,
                credentials: Mutex::new(settings.credentials),
                volatiles: settings.volatiles,
                call_timeout: settings.call_timeout,
                network: network.clone(),
            }),
        })
    }

    /// Registers a token learned at run time; from now on it is redacted like a credential.
    pub fn add_secret(&self, secret: Secret) {
        let mut credentials = lock(&self.inner.credentials);
        if !credentials.iter().any(|s| s.expose() == secret.expose()) {
            credentials.push(secret);
        }
    }

    /// The run-varying values this client's cassettes keep as placeholders.
    pub fn volatiles(&self) -> &Arc<Volatiles> {
        &self.inner.volatiles
    }

    /// The poll intervals this client waits with: live ones, or 1 ms in a replay at
    /// instant or fixed pace, where only the order of answers matters.
    pub fn poll_intervals(&self) -> PollIntervals {
        match &self.inner.mode {
            Mode::Replay {
                pace: replay::Pace::Instant | replay::Pace::Fixed(_),
                ..
            } => PollIntervals::INSTANT,
            Mode::Replay {
                pace: replay::Pace::Recorded,
                ..
            }
            | Mode::Live
            | Mode::Record(_) => PollIntervals::LIVE,
        }
    }

    /// [`poll::poll_until`] with this client's intervals: 50 ms backing off to 2 s, or
    /// 1 ms in a replay at instant or fixed pace, where only the order of answers counts.
    pub async fn poll_until<T, F, Fut>(
        &self,
        what: &str,
        deadline: Duration,
        probe: F,
    ) -> Result<(T, Duration)>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        poll::poll_until(what, deadline, self.poll_intervals(), probe).await
    }

    fn normalizer(&self) -> Normalizer {
        Normalizer::new(&lock(&self.inner.credentials), &self.inner.volatiles)
    }

    fn url(&self, target: &Target, path: &str) -> String {
        match &self.inner.mode {
            Mode::Replay { server_url, .. } => {
                format!(
                    "{}{}",
                    server_url.trim_end_matches('/'),
                    canonical_path(target, path)
                )
            }
            Mode::Live | Mode::Record(_) => match target {
                Target::Api => format!(
                    "{}{path}",
                    self.inner.endpoints.api_base.trim_end_matches('/')
                ),
                // A domain given as a URL (a local emulator) routes by the canonical path.
                Target::Sandbox { .. }
                    if self.inner.endpoints.sandbox_domain.starts_with("http://")
                        || self.inner.endpoints.sandbox_domain.starts_with("https://") =>
                {
                    format!(
                        "{}{}",
                        self.inner.endpoints.sandbox_domain.trim_end_matches('/'),
                        canonical_path(target, path)
                    )
                }
                Target::Sandbox { port, sandbox_id } => format!(
                    "https://{port}-{sandbox_id}.{}{path}",
                    self.inner.endpoints.sandbox_domain
                ),
                Target::Absolute(url) => url.clone(),
            },
        }
    }

    /// Sends `req` under its deadline, retrying what may be retried; records every
    /// attempt in record mode. A final non-2xx status is an error (kind `NotFound` for 404).
    pub async fn call(&self, req: ApiRequest) -> Result<ApiResponse> {
        let what = req.describe();
        let body = req.encode_body().map_err(|e| e.context(what.clone()))?;
        let url = self.url(&req.target, &req.path);
        let deadline = req.timeout.unwrap_or(self.inner.call_timeout);
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter()
            .build();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = match &self.inner.mode {
                Mode::Record(recorder) => recorder.send(),
                Mode::Live | Mode::Replay { .. } => 0,
            };
            let outcome = self.attempt(&req, &url, body.as_ref(), deadline).await;
            if let Attempt::Response(response, _) = &outcome
                && !matches!(self.inner.mode, Mode::Replay { .. })
                && let Some(emulator) = response.header(EMULATOR_HEADER)
            {
                let _ = self.inner.emulator.set(emulator.to_owned());
            }
            if let Mode::Record(recorder) = &self.inner.mode {
                self.record(recorder, &req, body.as_ref(), &outcome, sent);
            }
            let (retry_after, error) = match outcome {
                Attempt::Response(response, _) if (200..300).contains(&response.status) => {
                    return Ok(response);
                }
                Attempt::Response(response, _) => {
                    let status = response.status;
                    let retryable = status == 429 || (status >= 500 && req.idempotent);
                    let kind = if status == 404 {
                        ErrorKind::NotFound
                    } else {
                        ErrorKind::Api
                    };
                    let message = format!(
                        "HTTP {status}: {}",
                        self.normalizer().text(tail(response.text().trim(), 400))
                    );
                    let error = if retryable || status >= 500 || status == 429 {
                        ProviderError::retryable(kind, message)
                    } else {
                        ProviderError::new(kind, message)
                    };
                    if !retryable {
                        return Err(error.context(what));
                    }
                    let retry_after = if status == 429 {
                        Some(parse_retry_after(response.header("retry-after")))
                    } else {
                        None
                    };
                    (retry_after.flatten(), error)
                }
                Attempt::CutMidStream { partial, error, .. } => {
                    let error = ProviderError::retryable(
                        ErrorKind::Transport,
                        format!(
                            "connection reset mid-stream after {} bytes of the body: {}",
                            partial.len(),
                            self.normalizer().text(&error)
                        ),
                    );
                    if !req.idempotent {
                        return Err(error.context(what));
                    }
                    (None, error)
                }
                Attempt::NoResponse { error, connect } => {
                    if error.starts_with("deadline") {
                        return Err(ProviderError::new(ErrorKind::Timeout, error).context(what));
                    }
                    let error = ProviderError::retryable(
                        ErrorKind::Transport,
                        self.normalizer().text(&error),
                    );
                    if !(connect || req.idempotent) {
                        return Err(error.context(what));
                    }
                    (None, error)
                }
            };
            let Some(delay) = backoff.next() else {
                return Err(error.context(format!("{what}, after {attempt} attempts")));
            };
            let delay = match retry_after {
                Some(wait) if wait > MAX_RETRY_AFTER => {
                    return Err(error.context(format!(
                        "{what}: Retry-After {} s is longer than the {} s this client waits",
                        wait.as_secs(),
                        MAX_RETRY_AFTER.as_secs()
                    )));
                }
                Some(wait) => wait,
                None => delay,
            };
            tracing::debug!(call = %what, attempt, ?delay, error = %error, "retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(
        &self,
        req: &ApiRequest,
        url: &str,
        body: Option<&(Option<String>, Vec<u8>)>,
        deadline: Duration,
    ) -> Attempt {
        let started = Instant::now();
        let mut builder = self.inner.http.request(req.method.clone(), url);
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        if let Some((content_type, bytes)) = body {
            if let Some(content_type) = content_type {
                builder = builder.header("content-type", content_type);
            }
            builder = builder.body(bytes.clone());
        }
        let work = async {
            let response = match builder.send().await {
                Ok(r) => r,
                Err(e) => {
                    return Attempt::NoResponse {
                        connect: e.is_connect(),
                        error: error_chain(&e),
                    };
                }
            };
            let status = response.status().as_u16();
            let headers: Vec<(String, String)> = response
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let mut stream = response.bytes_stream();
            let mut collected = bytes::BytesMut::new();
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(chunk) => collected.extend_from_slice(&chunk),
                    Err(e) => {
                        return Attempt::CutMidStream {
                            status,
                            headers,
                            partial: collected.freeze(),
                            error: error_chain(&e),
                            latency: started.elapsed(),
                        };
                    }
                }
            }
            Attempt::Response(
                ApiResponse {
                    status,
                    headers,
                    body: collected.freeze(),
                    what: req.describe(),
                },
                started.elapsed(),
            )
        };
        match tokio::time::timeout(deadline, work).await {
            Ok(outcome) => outcome,
            Err(_) => Attempt::NoResponse {
                error: format!(
                    "deadline of {} passed with no complete answer",
                    humantime_secs(deadline)
                ),
                connect: false,
            },
        }
    }

    fn record(
        &self,
        recorder: &Recorder,
        req: &ApiRequest,
        body: Option<&(Option<String>, Vec<u8>)>,
        outcome: &Attempt,
        sent: u64,
    ) {
        let (status, headers, bytes, latency, reset) = match outcome {
            Attempt::Response(r, latency) => (r.status, &r.headers, &r.body, *latency, None),
            Attempt::CutMidStream {
                status,
                headers,
                partial,
                latency,
                ..
            } => (*status, headers, partial, *latency, Some(partial.len())),
            // Nothing came back: there is no exchange to replay.
            Attempt::NoResponse { .. } => return,
        };
        let normalizer = self.normalizer();
        let content_type = headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.as_str())
            .unwrap_or("");
        let request = RecordedRequest {
            method: req.method.to_string(),
            path: normalizer.text(&req.canonical_path()),
            headers: req
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), normalizer.text(v)))
                .chain(
                    body.and_then(|(ct, _)| ct.clone().map(|ct| ("content-type".to_owned(), ct))),
                )
                .collect(),
            body: body.map(|(ct, bytes)| {
                normalizer.body(&Body::from_bytes(ct.as_deref().unwrap_or(""), bytes))
            }),
        };
        let response = RecordedResponse {
            status,
            headers: headers
                .iter()
                .filter(|(k, _)| KEPT_RESPONSE_HEADERS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), normalizer.text(v)))
                .collect(),
            body: (!bytes.is_empty())
                .then(|| normalizer.body(&Body::from_bytes(content_type, bytes))),
            latency_ms: (latency.as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
            reset_after_bytes: reset,
        };
        recorder.add(
            Exchange {
                request,
                response,
                repeat: false,
                group: None,
                websocket: None,
            },
            sent,
            &lock(&self.inner.credentials),
        );
    }
}

fn parse_retry_after(value: Option<&str>) -> Option<Duration> {
    value?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn humantime_secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// An error and its sources on one line (reqwest hides the cause, such as a reset).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests;
