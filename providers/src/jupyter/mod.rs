//! A small Jupyter Server client: the REST calls that manage kernels and the
//! kernel WebSocket that runs code on them.
//!
//! Messages are `jupyter-protocol` types sent as JSON text frames over the
//! default (`""`) WebSocket subprotocol, where each message names its
//! `channel`. Only `ws://` is exercised: `wss://` goes through rustls with the
//! webpki roots, built in for the daytona variant's interpreter WebSocket.
//!
//! [`server`] is the same protocol through a cloud variant's recorded transports.

pub mod server;
mod socket;

pub use socket::KernelSocket;

use std::fmt;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use jupyter_protocol::{
    Channel, ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent,
    KernelInfoRequest, Media, MediaType, ReplyStatus, Stdio,
};
use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{CodeOutput, ErrorKind, ProviderError, Result};

pub(crate) use socket::Execution;
use socket::Unready;

/// Timeout of one HTTP call (a kernel's start, restart, shutdown): longer than any step
/// budget (at most 24 h), so that the step's budget, not a hidden client timeout, ends a
/// call to a hung or paused server. One timeout source: the budget.
const HTTP_TIMEOUT: Duration = Duration::from_secs(25 * 60 * 60);
/// Timeout of the TCP connect and the WebSocket handshake, as long for the same reason.
const CONNECT_TIMEOUT: Duration = HTTP_TIMEOUT;
/// First interval between readiness polls.
const POLL_START: Duration = Duration::from_millis(25);
/// Largest interval between readiness polls.
const POLL_MAX: Duration = Duration::from_millis(200);
/// The longest one readiness poll waits for its answer before it is sent again: a poll
/// that hangs (a connection accepted while the server starts, never answered) must not
/// hold the wait until its deadline.
const POLL_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an unanswered `kernel_info_request` is sent again.
const KERNEL_INFO_RESEND: Duration = Duration::from_secs(1);
/// How long after the first `kernel_info_reply` a socket's iopub may stay silent before
/// [`KernelSocket::wait_kernel_ready`] gives the socket up.
pub const IOPUB_SILENCE: Duration = Duration::from_secs(3);
/// How often [`JupyterServer::kernel_gone`] asks whether the kernel still exists.
const KERNEL_WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// How long a polite close may take before the socket is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How much of an error body goes into an error message.
const BODY_EXCERPT_CHARS: usize = 200;

/// A Jupyter Server reached over HTTP with a token.
pub struct JupyterServer {
    base_url: String,
    token: String,
    http: reqwest::Client,
}

impl fmt::Debug for JupyterServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JupyterServer")
            .field("base_url", &self.base_url)
            .field("token", &format_args!("[redacted]"))
            .finish_non_exhaustive()
    }
}

/// The part of a kernel model that the client reads.
#[derive(Deserialize)]
struct KernelModel {
    id: String,
}

impl JupyterServer {
    /// A server at `base_url` (such as `http://127.0.0.1:49153`, a trailing
    /// `/` is ignored) that accepts `token`. Proxy settings from the
    /// environment are ignored, as they are for the WebSocket.
    pub fn new(base_url: &str, token: &str) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            // Without TLS there is nothing that can fail here, the same
            // assumption reqwest::Client::new() makes.
            .expect("an HTTP client without TLS always builds");
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http,
        }
    }

    /// The server's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The token it accepts.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Polls `GET /api` until it answers 200 or `deadline` passes. Poll interval starts at 25 ms and doubles up to 200 ms.
    /// Returns the last poll interval used (the measurement's resolution);
    /// 25 ms when the first poll already succeeds.
    ///
    /// Connection errors, 5xx answers and polls unanswered after two seconds are polled
    /// through (the poll is sent again); an answer that
    /// cannot get better (a 4xx) ends the wait at once. jupyter_server 2.x
    /// answers `GET /api` without checking the token, so a wrong token shows
    /// only on the next call.
    pub async fn wait_ready(&self, deadline: Duration) -> Result<Duration> {
        let until = Instant::now() + deadline;
        let mut interval = POLL_START;
        let mut last_used = POLL_START;
        loop {
            let remaining = until.saturating_duration_since(Instant::now());
            let call = remaining.min(POLL_CALL_TIMEOUT);
            let last_error = match self.call(Method::GET, "/api", None, call).await {
                Ok(_) => return Ok(last_used),
                Err(e) if !e.retryable => return Err(e),
                Err(e) => e,
            };
            let remaining = until.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!(
                        "not ready within {}; last poll: {}: {}",
                        crate::for_people(deadline),
                        last_error.kind,
                        last_error.message
                    ),
                )
                .context("GET /api"));
            }
            last_used = interval.min(remaining);
            tokio::time::sleep(last_used).await;
            interval = (interval * 2).min(POLL_MAX);
        }
    }

    /// `POST /api/kernels {"name": kernel_name}`; returns the kernel id.
    pub async fn start_kernel(&self, kernel_name: &str) -> Result<String> {
        let body = serde_json::json!({ "name": kernel_name });
        let response = self
            .call(Method::POST, "/api/kernels", Some(body), HTTP_TIMEOUT)
            .await?;
        let model: KernelModel = response.json().await.map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("kernel model: {}", error_chain(&e)),
            )
            .context("POST /api/kernels")
        })?;
        check_kernel_id(&model.id).map_err(|e| e.context("POST /api/kernels"))?;
        Ok(model.id)
    }

    /// Resolves once `GET /api/kernels/{id}` answers 404, with the error saying why: Jupyter
    /// Server drops a kernel whose process died and whose restarts all failed (five, about
    /// 20 s), while its model still says `starting` and a socket to it is answered by
    /// nothing (jupyter_server waits 60 s for the kernel before resetting it). Polled every
    /// second; any other answer keeps watching, so race it against the call it guards.
    pub async fn kernel_gone(&self, kernel_id: &str) -> ProviderError {
        let path = format!("/api/kernels/{kernel_id}");
        loop {
            tokio::time::sleep(KERNEL_WATCH_INTERVAL).await;
            let Ok(auth) = self.auth_header() else {
                // No request can be authorized: the call being guarded fails on its own.
                return std::future::pending().await;
            };
            let answer = self
                .http
                .get(format!("{}{path}", self.base_url))
                .header(AUTHORIZATION, auth)
                .timeout(POLL_CALL_TIMEOUT)
                .send()
                .await;
            if answer.is_ok_and(|r| r.status() == StatusCode::NOT_FOUND) {
                return ProviderError::new(
                    ErrorKind::Transport,
                    format!(
                        "kernel {kernel_id} is gone: its process died and every restart failed, so Jupyter Server removed it (GET {path} answers 404)"
                    ),
                );
            }
        }
    }

    /// `POST /api/kernels/{id}/restart`.
    ///
    /// Open sockets to the kernel are not kept usable: connect again (with
    /// [`JupyterServer::connect_ready`]) after a restart, because a
    /// socket from before the restart can miss the new kernel's first iopub
    /// messages (it did in 7 of 34 tries).
    pub async fn restart_kernel(&self, kernel_id: &str) -> Result<()> {
        check_kernel_id(kernel_id)?;
        let path = format!("/api/kernels/{kernel_id}/restart");
        self.call(Method::POST, &path, None, HTTP_TIMEOUT).await?;
        Ok(())
    }

    /// `POST /api/kernels/{id}/interrupt`: Jupyter Server sends a kernel interrupted by
    /// signal (ipykernel) SIGINT, which raises `KeyboardInterrupt` in the code it runs. It
    /// answers without waiting for that code to stop.
    pub async fn interrupt_kernel(&self, kernel_id: &str) -> Result<()> {
        check_kernel_id(kernel_id)?;
        let path = format!("/api/kernels/{kernel_id}/interrupt");
        self.call(Method::POST, &path, None, HTTP_TIMEOUT).await?;
        Ok(())
    }

    /// `DELETE /api/kernels/{id}`.
    pub async fn shutdown_kernel(&self, kernel_id: &str) -> Result<()> {
        check_kernel_id(kernel_id)?;
        let path = format!("/api/kernels/{kernel_id}");
        self.call(Method::DELETE, &path, None, HTTP_TIMEOUT).await?;
        Ok(())
    }

    /// Opens `ws(s)://.../api/kernels/{id}/channels?session_id=<uuid-ish random>`, sending `Authorization: token <t>` on the upgrade request.
    pub async fn connect(&self, kernel_id: &str) -> Result<KernelSocket> {
        let context = format!("GET /api/kernels/{kernel_id}/channels");
        let socket = async {
            check_kernel_id(kernel_id)?;
            let session = random_session_id();
            let url = format!(
                "{}/api/kernels/{kernel_id}/channels?session_id={session}",
                websocket_base(&self.base_url)?
            );
            let mut request = url.into_client_request().map_err(|e| self.ws_error(e))?;
            request
                .headers_mut()
                .insert(AUTHORIZATION, self.auth_header()?);
            let (ws, _) =
                tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(request))
                    .await
                    .map_err(|_| {
                        ProviderError::retryable(
                            ErrorKind::Timeout,
                            format!(
                                "WebSocket handshake took over {}",
                                crate::for_people(CONNECT_TIMEOUT)
                            ),
                        )
                    })?
                    .map_err(|e| self.ws_error(e))?;
            Ok(KernelSocket {
                ws,
                session,
                kernel_id: kernel_id.to_owned(),
                token: self.token.clone(),
                lost: false,
            })
        };
        socket.await.map_err(|e: ProviderError| e.context(context))
    }

    /// [`connect`](Self::connect), then [`KernelSocket::wait_kernel_ready`]: a socket on
    /// which the kernel answers on both channels, for after a restart or a kernel's death.
    /// Only a socket whose iopub stays silent while shell answers is closed and opened
    /// again, until `deadline`; any other failure is returned as it is.
    pub async fn connect_ready(&self, kernel_id: &str, deadline: Duration) -> Result<KernelSocket> {
        let until = tokio::time::Instant::now() + deadline;
        let mut given_up = 0u32;
        let work = async {
            loop {
                let mut socket = self.connect(kernel_id).await?;
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                match socket.wait_both(left).await {
                    Ok(()) => return Ok(socket),
                    Err(Unready::Failed(e)) => {
                        socket.close().await;
                        return Err(e);
                    }
                    Err(Unready::IopubSilent(e)) => {
                        socket.close().await;
                        given_up += 1;
                        tracing::debug!(kernel = kernel_id, "connecting again: {e}");
                    }
                }
            }
        };
        let answer = tokio::time::timeout_at(until, work).await;
        answer.unwrap_or_else(|_| {
            Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "no socket to kernel {kernel_id} answered on shell and iopub within {} ({given_up} given up for a silent iopub)",
                    crate::for_people(deadline)
                ),
            ))
        })
    }

    /// `Authorization: token <t>`, marked sensitive.
    fn auth_header(&self) -> Result<HeaderValue> {
        let mut value = HeaderValue::from_str(&format!("token {}", self.token)).map_err(|_| {
            ProviderError::new(
                ErrorKind::Config,
                "the token is not a valid HTTP header value",
            )
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// Sends one authorized request and turns anything but a 2xx answer into an error.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<reqwest::Response> {
        let context = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base_url))
            .header(
                AUTHORIZATION,
                self.auth_header().map_err(|e| e.context(context.clone()))?,
            )
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| http_error(&e).context(context.clone()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        // The body is only for the message, so failing to read it is not an error of its own.
        let body = response.text().await.unwrap_or_default();
        Err(status_error(status, &body, &self.token).context(context))
    }

    /// Maps a WebSocket handshake error.
    fn ws_error(&self, e: tungstenite::Error) -> ProviderError {
        ws_error(e, &self.token)
    }
}

/// The error for a status that says the kernel process is gone (`restarting`,
/// `autorestarting`, `dead`), which the server sends with no parent when the kernel dies:
/// the request in flight will never be answered, so waiting for it would only run out the
/// caller's budget.
pub(crate) fn kernel_lost(message: &JupyterMessage) -> Option<ProviderError> {
    let JupyterMessageContent::Status(status) = &message.content else {
        return None;
    };
    match status.execution_state {
        ExecutionState::Restarting | ExecutionState::AutoRestarting | ExecutionState::Dead => {
            Some(ProviderError::new(
                ErrorKind::Transport,
                format!(
                    "the kernel died while running the request (the server says `{}`)",
                    status.execution_state.as_str()
                ),
            ))
        }
        _ => None,
    }
}

/// The `text/plain` entry of a MIME bundle.
fn plain_text(media: &Media) -> Option<String> {
    media.content.iter().find_map(|entry| match entry {
        MediaType::Plain(text) => Some(text.clone()),
        _ => None,
    })
}

/// The WebSocket base for an HTTP base URL: only the scheme prefix changes.
fn websocket_base(base_url: &str) -> Result<String> {
    if let Some(rest) = base_url.strip_prefix("http://") {
        Ok(format!("ws://{rest}"))
    } else if let Some(rest) = base_url.strip_prefix("https://") {
        Ok(format!("wss://{rest}"))
    } else {
        Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "base URL {} does not start with http:// or https://",
                crate::quoted(base_url)
            ),
        ))
    }
}

/// A JSON frame as a Jupyter message; `None` (logged at debug) for anything that is not
/// a known one.
pub(crate) fn parse_json(value: serde_json::Value) -> Option<JupyterMessage> {
    match serde_json::from_value::<JupyterMessage>(value) {
        Ok(message) => match &message.content {
            JupyterMessageContent::UnknownMessage(unknown) => {
                tracing::debug!(msg_type = %unknown.msg_type, "skipping kernel message of unknown type");
                None
            }
            _ => Some(message),
        },
        Err(e) => {
            tracing::debug!("skipping kernel frame that is not a message: {e}");
            None
        }
    }
}

/// Whether `message` is the `kernel_info_reply` to one of the requests `sent`.
pub(crate) fn answers_kernel_info(message: &JupyterMessage, sent: &[String]) -> bool {
    let answers = message
        .parent_header
        .as_ref()
        .is_some_and(|parent| sent.contains(&parent.msg_id));
    answers && matches!(message.content, JupyterMessageContent::KernelInfoReply(_))
}

/// A shell-channel message of `content` in `session`, with id `msg_id`.
pub(crate) fn shell_message(
    content: impl Into<JupyterMessageContent>,
    session: &str,
    msg_id: String,
) -> JupyterMessage {
    let mut message = JupyterMessage::new(content, None)
        .with_session(session)
        .with_channel(Channel::Shell);
    message.header.msg_id = msg_id;
    message
}

/// Kernel ids go into URL paths, so only id-like text is accepted.
pub(crate) fn check_kernel_id(kernel_id: &str) -> Result<()> {
    let id_like = !kernel_id.is_empty()
        && kernel_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if id_like {
        Ok(())
    } else {
        Err(ProviderError::new(
            ErrorKind::Config,
            format!("{} is not a kernel id", crate::quoted(kernel_id)),
        ))
    }
}

/// A random id in UUID v4 form, for the WebSocket's session.
fn random_session_id() -> String {
    // Version nibble 4 (bits 76..80) and variant 0b10 (bits 62..64).
    let bits = (rand::random::<u128>() & !(0xf000 << 64) & !(0xc000 << 48))
        | (0x4000 << 64)
        | (0x8000 << 48);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// An error for a non-2xx answer: 5xx and 429 may pass on a retry, other 4xx will not.
fn status_error(status: StatusCode, body: &str, token: &str) -> ProviderError {
    let message = format!("HTTP {status}: {}", excerpt(body, token));
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        ProviderError::retryable(ErrorKind::Api, message)
    } else {
        ProviderError::new(ErrorKind::Api, message)
    }
}

/// The start of `body` on one line, with the token blanked out should the server echo it.
fn excerpt(body: &str, token: &str) -> String {
    let mut line = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if !token.is_empty() {
        line = line.replace(token, "[redacted]");
    }
    if line.is_empty() {
        return "(empty body)".to_owned();
    }
    match line.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// An error for an HTTP call that got no answer.
fn http_error(e: &reqwest::Error) -> ProviderError {
    let message = error_chain(e);
    if e.is_timeout() {
        ProviderError::retryable(ErrorKind::Timeout, message)
    } else if e.is_builder() {
        ProviderError::new(ErrorKind::Config, message)
    } else {
        ProviderError::retryable(ErrorKind::Transport, message)
    }
}

/// An error for a WebSocket failure, from the handshake or a frame.
fn ws_error(e: tungstenite::Error, token: &str) -> ProviderError {
    match e {
        tungstenite::Error::Http(response) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            status_error(response.status(), &body, token)
        }
        tungstenite::Error::Url(e) => ProviderError::new(ErrorKind::Config, e.to_string()),
        tungstenite::Error::HttpFormat(e) => ProviderError::new(ErrorKind::Config, e.to_string()),
        e @ (tungstenite::Error::Io(_)
        | tungstenite::Error::ConnectionClosed
        | tungstenite::Error::AlreadyClosed
        | tungstenite::Error::Tls(_)
        | tungstenite::Error::Protocol(_)) => {
            ProviderError::retryable(ErrorKind::Transport, e.to_string())
        }
        e => ProviderError::new(ErrorKind::Protocol, e.to_string()),
    }
}

/// The error for a socket the server has closed.
fn socket_closed() -> ProviderError {
    ProviderError::retryable(ErrorKind::Transport, "the kernel WebSocket is closed")
}

/// An error and its sources on one line (reqwest puts the cause in the sources).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests;
