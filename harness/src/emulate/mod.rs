//! Emulators of the cloud providers' APIs, served on loopback over HTTPS and backed by the
//! docker variant: what authors the cassettes, what `sandbox-matrix emulate` serves, and
//! what the providers' own SDKs are run against.
//!
//! This module holds their shared plumbing: an HTTP/1.1 server handing each request to the
//! emulator as an [`HttpRequest`], the [`Answer`] it gives back, and [`tls`] (a test CA
//! made at start, and the TLS front). An emulator is reached through its provider's live
//! host forms (`api.<domain>`, `<port>-<id>.<domain>`), the client pinning `<domain>` and
//! every name under it to 127.0.0.1 and trusting the test CA.

pub mod e2b;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

/// The domain an emulator serves when none is given: `.test` never resolves on the
/// Internet (RFC 6761), so only a pinned client reaches it.
pub const DEFAULT_DOMAIN: &str = "emulator.test";

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
/// returns: status, content type and body. Runs until the task is aborted.
pub fn serve_http<F, Fut>(
    listener: tokio::net::TcpListener,
    handle: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = (u16, String, Vec<u8>)> + Send + 'static,
{
    use http_body_util::BodyExt as _;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let handle = handle.clone();
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
                            let (status, content_type, body) = handle(request).await;
                            let response = hyper::Response::builder()
                                .status(status)
                                .header("content-type", content_type)
                                .body(http_body_util::Full::new(bytes::Bytes::from(body)));
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
    /// Serves `handle` over HTTPS on 127.0.0.1:`port` (0: any free port) with a fresh test
    /// CA's certificate for `domain`, and over plain HTTP on another loopback port.
    pub async fn start<F, Fut>(port: u16, domain: &str, handle: F) -> Result<Self, EmulateError>
    where
        F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = (u16, String, Vec<u8>)> + Send + 'static,
    {
        let (plain_listener, plain) = bind_loopback(0).await?;
        let (public, _) = bind_loopback(port).await?;
        let mut front = Self::with_upstream(public, plain, domain)?;
        front.tasks.push(serve_http(plain_listener, handle));
        Ok(front)
    }

    /// A TLS front on `public` relaying to an already serving `upstream` (such as one that
    /// splits WebSocket upgrades off first).
    pub fn with_upstream(
        public: tokio::net::TcpListener,
        upstream: SocketAddr,
        domain: &str,
    ) -> Result<Self, EmulateError> {
        let addr = public.local_addr().map_err(|e| EmulateError::Io {
            what: "read the listener's address".into(),
            source: e,
        })?;
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
