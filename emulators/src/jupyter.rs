//! What the HTTP emulators serve from a docker sandbox's Jupyter Server once they have
//! admitted a request: its REST API forwarded, and its kernel WebSockets relayed frame
//! for frame.

use std::collections::HashMap;

use sandbox_providers::SandboxId;
use sandbox_providers::api::ws::{Rewound, accept};
use sandbox_providers::docker::DockerProvider;
use tokio_tungstenite::tungstenite::handshake::server::Request;

use crate::emulator::Emulator;
use crate::http::{Answer, HttpRequest, upgrade_request};

/// A WebSocket upgrade as an emulator admits it: its path, raw query and headers (names
/// lower case).
pub(crate) struct SocketRequest<'a> {
    /// The path, without the query.
    pub(crate) path: &'a str,
    /// The raw query, empty when none.
    pub(crate) query: &'a str,
    /// The headers, by lower-case name.
    pub(crate) headers: HashMap<String, String>,
}

impl<'a> SocketRequest<'a> {
    fn of(request: &'a Request) -> Self {
        Self {
            path: request.uri().path(),
            query: request.uri().query().unwrap_or_default(),
            headers: request
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        v.to_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
        }
    }
}

/// What admits a kernel WebSocket: the docker sandbox and the kernel channels' path (with
/// its query) the upgrade reaches, or a status and message refusing it.
pub(crate) type AdmitSocket<E> =
    fn(&E, &SocketRequest<'_>) -> Result<(SandboxId, String), (u16, String)>;

/// Serves the WebSocket upgrade `stream` on `emulator`'s site, admitted by `admit`: the
/// upgrade is kept with the status it got when the site records, and an admitted socket
/// is relayed to its kernel on the site's backend until either side closes.
pub(crate) async fn serve_kernel_socket<E: Emulator>(
    emulator: E,
    stream: Rewound,
    admit: AdmitSocket<E>,
) {
    let site = emulator.site();
    let mut admitted = None;
    let check = |request: &Request| {
        let verdict =
            admit(&emulator, &SocketRequest::of(request)).map(|found| admitted = Some(found));
        let status = verdict.as_ref().map_or_else(|(s, _)| *s, |()| 101);
        site.keep_upgrade(&upgrade_request(request), status);
        verdict
    };
    let Some(socket) = accept(stream, check).await else {
        return;
    };
    if let Some((inner, path)) = admitted {
        relay_to_kernel(site.backend(), &inner, &path, socket).await;
    }
}

/// Forwards `r` to the Jupyter Server of the docker sandbox `inner` at `path` (the request's
/// path as that server sees it), with the server's own token: what an emulator's code
/// channel serves once it has admitted the request.
pub(crate) async fn forward_to_jupyter(
    docker: &DockerProvider,
    http: &reqwest::Client,
    inner: &SandboxId,
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
                }
                .into(),
                headers: Vec::new(),
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
async fn relay_to_kernel(
    docker: &DockerProvider,
    inner: &SandboxId,
    path: &str,
    mut socket: tokio_tungstenite::WebSocketStream<Rewound>,
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
