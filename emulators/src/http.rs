//! HTTP/1.1 as the emulators serve it: one request as an emulator reads it, the answer it
//! gives, the loopback listener and the hyper server between them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::EmulateError;

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
    pub content_type: String,
    /// The body.
    pub body: Vec<u8>,
    /// Headers besides the content type (names lower case), such as an S3 object's `etag`.
    pub headers: Vec<(&'static str, String)>,
}

impl Answer {
    /// `value` as a JSON body.
    pub fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json".into(),
            body: serde_json::to_vec(&value).unwrap_or_default(),
            headers: Vec::new(),
        }
    }

    /// No body.
    pub fn empty(status: u16) -> Self {
        Self {
            status,
            content_type: "text/plain".into(),
            body: Vec::new(),
            headers: Vec::new(),
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

impl From<(u16, String, Vec<u8>)> for Answer {
    fn from((status, content_type, body): (u16, String, Vec<u8>)) -> Self {
        Self {
            status,
            content_type,
            body,
            headers: Vec::new(),
        }
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
    Fut::Output: Into<Answer>,
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
                            let answer: Answer = handle(request).await.into();
                            let mut response = hyper::Response::builder()
                                .status(answer.status)
                                .header("content-type", answer.content_type);
                            for (name, value) in answer.headers {
                                response = response.header(name, value);
                            }
                            if let Some(announce) = &announce {
                                response = response
                                    .header(sandbox_providers::api::EMULATOR_HEADER, &**announce);
                            }
                            let response = response
                                .body(http_body_util::Full::new(bytes::Bytes::from(answer.body)));
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

/// `m`'s guard; a lock poisoned by a panicked request is taken as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
