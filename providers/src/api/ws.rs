//! WebSocket exchanges over the same client, in the same three modes as HTTP calls.
//!
//! A [`WsSession`] is opened from an [`ApiRequest`] (a GET whose target and headers are
//! those of an HTTP call). Live, it connects to the provider (`wss://` for `https://`).
//! Recording, every frame sent and received is kept, normalized, and the whole socket is
//! added to the cassette as one exchange (the upgrade request, `101`, the frames) when the
//! session ends, with the same grouping as HTTP: a socket opened before an earlier
//! exchange ended joins its group. In replay it connects to the replay server, whose
//! front listener ([`split_upgrades`]) hands upgrades to the WebSocket player and
//! everything else to the HTTP server.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::cassette::{RecordedRequest, RecordedResponse, WsFrame};
use super::{ApiClient, ApiRequest, Exchange, Mode, Recorder};
use crate::{ErrorKind, ProviderError, Result, tail};

/// Longest request head the front listener reads before deciding where it goes.
const MAX_HEAD: usize = 64 * 1024;

/// What a WebSocket session received.
#[derive(Debug, Clone, PartialEq)]
pub enum WsMessage {
    /// A text frame holding JSON.
    Json(serde_json::Value),
    /// A text frame that is not JSON.
    Text(String),
    /// The server closed the socket (code 1005 when it gave none).
    Closed {
        /// The close code.
        code: u16,
        /// The close reason.
        reason: String,
    },
}

/// An open WebSocket to a provider. Dropping it ends it; in record mode that is when its
/// exchange is written down.
pub struct WsSession {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    client: ApiClient,
    what: String,
    recording: Option<Recording>,
    closed: bool,
}

impl std::fmt::Debug for WsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsSession")
            .field("call", &self.what)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// A socket being recorded: what the cassette will hold once it ends.
struct Recording {
    recorder: std::sync::Arc<Recorder>,
    sent: u64,
    request: RecordedRequest,
    frames: Vec<WsFrame>,
    started: Instant,
}

impl ApiClient {
    /// Opens a WebSocket for `req` (its target, path and headers; the method is GET)
    /// within the request's deadline. A refused upgrade is an error with the status and
    /// the start of the answer, such as a replay mismatch.
    pub async fn websocket(&self, req: ApiRequest) -> Result<WsSession> {
        let what = req.describe();
        let url = self.url(&req.target, &req.path);
        let url = match url.split_once("://") {
            Some(("https", rest)) => format!("wss://{rest}"),
            Some(("http", rest)) => format!("ws://{rest}"),
            _ => url,
        };
        let mut request = url.as_str().into_client_request().map_err(|e| {
            ProviderError::new(ErrorKind::Config, format!("bad WebSocket URL: {e}"))
                .context(what.clone())
        })?;
        for (name, value) in &req.headers {
            let value = HeaderValue::from_str(value).map_err(|_| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("header {name} is not a valid header value"),
                )
                .context(what.clone())
            })?;
            let name: tungstenite::http::HeaderName = name.parse().map_err(|_| {
                ProviderError::new(ErrorKind::Config, format!("bad header name {name}"))
                    .context(what.clone())
            })?;
            request.headers_mut().insert(name, value);
        }
        let deadline = req.timeout.unwrap_or(self.inner.call_timeout);
        let sent = match &self.inner.mode {
            Mode::Record(recorder) => Some((recorder.clone(), recorder.send())),
            Mode::Live | Mode::Replay { .. } => None,
        };
        let started = Instant::now();
        let normalizer = self.normalizer();
        let recorded_request = RecordedRequest {
            method: "GET".to_owned(),
            path: normalizer.text(&req.canonical_path()),
            headers: req
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), normalizer.text(v)))
                .collect(),
            body: None,
        };
        let connected = tokio::time::timeout(deadline, self.connect_ws(request, &url)).await;
        let socket = match connected {
            Err(_) => {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!(
                        "deadline of {:.1} s passed before the WebSocket opened",
                        deadline.as_secs_f64()
                    ),
                )
                .context(what));
            }
            Ok(Err(tungstenite::Error::Http(response))) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                if let Some((recorder, sent)) = &sent {
                    let content_type = response
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    recorder.add(
                        Exchange {
                            request: recorded_request,
                            response: RecordedResponse {
                                status,
                                headers: Default::default(),
                                body: (!body.is_empty()).then(|| {
                                    normalizer.body(&super::Body::from_bytes(content_type, &body))
                                }),
                                latency_ms: latency_ms(started.elapsed()),
                                reset_after_bytes: None,
                            },
                            repeat: false,
                            group: None,
                            websocket: None,
                        },
                        *sent,
                        &super::lock(&self.inner.credentials),
                    );
                }
                let kind = if status == 404 {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::Api
                };
                let text = String::from_utf8_lossy(&body);
                return Err(ProviderError::new(
                    kind,
                    format!(
                        "WebSocket upgrade answered HTTP {status}: {}",
                        normalizer.text(tail(text.trim(), 400))
                    ),
                )
                .context(what));
            }
            Ok(Err(e)) => {
                return Err(ProviderError::new(
                    ErrorKind::Transport,
                    format!(
                        "WebSocket did not open: {}",
                        normalizer.text(&e.to_string())
                    ),
                )
                .context(what));
            }
            Ok(Ok((socket, _))) => socket,
        };
        Ok(WsSession {
            socket,
            client: self.clone(),
            what,
            recording: sent.map(|(recorder, sent)| Recording {
                recorder,
                sent,
                request: recorded_request,
                frames: Vec::new(),
                started,
            }),
            closed: false,
        })
    }
}

impl ApiClient {
    /// Connects `request` to `url`, through the resolve pin and trusting the extra roots
    /// of this client's network, as its HTTP calls do.
    async fn connect_ws(
        &self,
        request: tungstenite::handshake::client::Request,
        url: &str,
    ) -> std::result::Result<
        (
            WebSocketStream<MaybeTlsStream<TcpStream>>,
            tungstenite::handshake::client::Response,
        ),
        tungstenite::Error,
    > {
        let network = &self.inner.network;
        if network.pin.is_none() && network.extra_roots_pem.is_empty() {
            return tokio_tungstenite::connect_async(request).await;
        }
        let parsed = reqwest::Url::parse(url)
            .map_err(|_| tungstenite::Error::Url(tungstenite::error::UrlError::NoHostName))?;
        let host = parsed.host_str().unwrap_or_default().to_owned();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let stream = match network.pinned(&host) {
            Some(pin) => {
                let port = match (parsed.port(), pin.port()) {
                    (Some(port), _) => port,
                    (None, 0) => port,
                    (None, pinned) => pinned,
                };
                TcpStream::connect(SocketAddr::new(pin.ip(), port)).await
            }
            None => TcpStream::connect((host.as_str(), port)).await,
        }
        .map_err(tungstenite::Error::Io)?;
        let _ = stream.set_nodelay(true);
        let connector = if network.extra_roots_pem.is_empty() {
            None
        } else {
            Some(tokio_tungstenite::Connector::Rustls(tls_config(
                &network.extra_roots_pem,
            )?))
        };
        tokio_tungstenite::client_async_tls_with_config(request, stream, None, connector).await
    }
}

/// A TLS client configuration trusting the built-in roots and `extra` (PEM).
fn tls_config(
    extra: &[String],
) -> std::result::Result<std::sync::Arc<rustls::ClientConfig>, tungstenite::Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let tls = |e: String| tungstenite::Error::Io(std::io::Error::other(e));
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for pem in extra {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| tls(format!("an extra root is not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| tls(format!("an extra root is refused: {e}")))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

fn latency_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0
}

impl WsSession {
    /// Sends `value` as one JSON text frame.
    pub async fn send_json(&mut self, value: &serde_json::Value) -> Result<()> {
        if let Some(recording) = &mut self.recording {
            recording
                .frames
                .push(WsFrame::Client(self.client.normalizer().json(value)));
        }
        self.socket
            .send(Message::text(value.to_string()))
            .await
            .map_err(|e| self.error(e))
    }

    /// The next text frame or the close, waiting at most `deadline`. Pings, pongs and
    /// binary frames are skipped; a socket that ends without a close frame is an error.
    pub async fn next(&mut self, deadline: Duration) -> Result<WsMessage> {
        if self.closed {
            return Err(
                ProviderError::new(ErrorKind::Protocol, "the WebSocket is closed already")
                    .context(self.what.clone()),
            );
        }
        loop {
            let message = match tokio::time::timeout(deadline, self.socket.next()).await {
                Err(_) => {
                    return Err(ProviderError::new(
                        ErrorKind::Timeout,
                        format!("no WebSocket frame within {:.1} s", deadline.as_secs_f64()),
                    )
                    .context(self.what.clone()));
                }
                Ok(None) => {
                    self.closed = true;
                    return Err(ProviderError::new(
                        ErrorKind::Transport,
                        "the WebSocket ended without a close frame",
                    )
                    .context(self.what.clone()));
                }
                Ok(Some(Err(e))) => {
                    self.closed = true;
                    return Err(self.error(e));
                }
                Ok(Some(Ok(message))) => message,
            };
            let (frame, answer) = match message {
                Message::Text(text) => {
                    let frame = WsFrame::from_text(false, text.as_str());
                    let answer = match &frame {
                        WsFrame::Server(v) => WsMessage::Json(v.clone()),
                        _ => WsMessage::Text(text.as_str().to_owned()),
                    };
                    (frame, answer)
                }
                Message::Close(close) => {
                    self.closed = true;
                    let (code, reason) = close
                        .map(|c| (u16::from(c.code), c.reason.as_str().to_owned()))
                        .unwrap_or((1005, String::new()));
                    (
                        WsFrame::Close {
                            code,
                            reason: reason.clone(),
                        },
                        WsMessage::Closed { code, reason },
                    )
                }
                Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {
                    continue;
                }
            };
            if let Some(recording) = &mut self.recording {
                recording
                    .frames
                    .push(self.client.normalizer().frame(&frame));
            }
            return Ok(answer);
        }
    }

    /// Closes the socket from this side, if the server has not.
    pub async fn close(mut self) {
        if !self.closed {
            let _ = self.socket.close(None).await;
            self.closed = true;
        }
    }

    fn error(&self, e: tungstenite::Error) -> ProviderError {
        ProviderError::new(
            ErrorKind::Transport,
            format!(
                "WebSocket: {}",
                self.client.normalizer().text(&e.to_string())
            ),
        )
        .context(self.what.clone())
    }
}

impl Drop for WsSession {
    fn drop(&mut self) {
        let Some(recording) = self.recording.take() else {
            return;
        };
        recording.recorder.add(
            Exchange {
                request: recording.request,
                response: RecordedResponse {
                    status: 101,
                    headers: Default::default(),
                    body: None,
                    latency_ms: latency_ms(recording.started.elapsed()),
                    reset_after_bytes: None,
                },
                repeat: false,
                group: None,
                websocket: Some(recording.frames),
            },
            recording.sent,
            &super::lock(&self.client.inner.credentials),
        );
    }
}

/// A connection whose first bytes were read already, read again before the rest.
#[derive(Debug)]
pub struct Rewound {
    head: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl Rewound {
    /// The bytes read before the stream was handed on: at least the request head.
    pub fn head(&self) -> &[u8] {
        &self.head
    }
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = buf.remaining().min(self.head.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether a request head asks for a WebSocket upgrade.
fn is_upgrade(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("upgrade")
                && value.trim().eq_ignore_ascii_case("websocket")
        })
    })
}

/// Serves `listener` in front of an HTTP server at `upstream`: a connection whose first
/// request asks for a WebSocket upgrade goes to `on_upgrade` (its head unread again), any
/// other is relayed byte for byte to `upstream`. So one base URL serves both.
pub fn split_upgrades<F, Fut>(
    listener: TcpListener,
    upstream: SocketAddr,
    on_upgrade: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(Rewound) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let on_upgrade = on_upgrade.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                    if head.len() > MAX_HEAD {
                        return;
                    }
                }
                if is_upgrade(&head) {
                    on_upgrade(Rewound {
                        head,
                        at: 0,
                        inner: stream,
                    })
                    .await;
                    return;
                }
                let Ok(mut server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = server.set_nodelay(true);
                if server.write_all(&head).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut stream, &mut server).await;
                }
            });
        }
    })
}

/// Accepts the WebSocket on `stream`; `check` sees the upgrade request first and may
/// refuse it with a status and a text body.
#[expect(
    clippy::result_large_err,
    reason = "the handshake callback's error type is tungstenite's, a whole HTTP response"
)]
pub async fn accept<F>(stream: Rewound, check: F) -> Option<WebSocketStream<Rewound>>
where
    F: FnOnce(&tungstenite::handshake::server::Request) -> std::result::Result<(), (u16, String)>
        + Send
        + Unpin,
{
    let callback = |request: &tungstenite::handshake::server::Request,
                    response: tungstenite::handshake::server::Response| {
        match check(request) {
            Ok(()) => Ok(response),
            Err((status, body)) => {
                let mut refused = tungstenite::handshake::server::ErrorResponse::new(Some(body));
                *refused.status_mut() = tungstenite::http::StatusCode::from_u16(status)
                    .unwrap_or(tungstenite::http::StatusCode::IM_A_TEAPOT);
                refused.headers_mut().insert(
                    "content-type",
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                Err(refused)
            }
        }
    };
    tokio_tungstenite::accept_hdr_async(stream, callback)
        .await
        .ok()
}

/// Closes `socket` with `code` and `reason` (cut to what a close frame holds).
pub async fn close_with(socket: &mut WebSocketStream<Rewound>, code: u16, reason: &str) {
    let mut reason = reason.to_owned();
    while reason.len() > 123 {
        reason.pop();
    }
    let _ = socket
        .close(Some(CloseFrame {
            code: code.into(),
            reason: reason.into(),
        }))
        .await;
}
