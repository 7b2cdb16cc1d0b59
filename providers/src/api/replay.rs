//! A local server that plays a cassette back to the same client code that recorded it.
//!
//! Built on wiremock: one catch-all mock whose responder serves, for each request, the
//! first unused exchange that matches it (method, canonical path, normalized body), or
//! else the last served exchange marked `repeat`. A request the cassette lacks gets status
//! 418 with the nearest recorded exchange; [`ReplayServer::finish`] fails on those and on
//! exchanges never requested. A response marked `reset_after_bytes` is redirected to a
//! small TCP responder that sends that many bytes of it and resets the connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

use super::cassette::{Body, Cassette, Normalizer, RecordedRequest, Volatiles};
use crate::{ErrorKind, ProviderError, Result, Secret};

/// How fast responses come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// At once.
    Instant,
    /// After each exchange's recorded latency.
    Recorded,
    /// After a fixed delay for every response, to measure what the harness adds.
    Fixed(Duration),
}

/// A check run on every request before it is matched, such as a JSON Schema; an `Err`
/// answers 418 and fails the replay.
pub type RequestCheck =
    Arc<dyn Fn(&RecordedRequest) -> std::result::Result<(), String> + Send + Sync>;

/// How to serve a cassette.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Response pacing.
    pub pace: Pace,
    /// Credentials the client uses (fake in replay); redacted before matching.
    pub credentials: Vec<Secret>,
    /// The run's volatile values, replaced by placeholders before matching.
    pub volatiles: Arc<Volatiles>,
    /// Checked against every request.
    pub request_check: Option<RequestCheck>,
}

impl std::fmt::Debug for ReplayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayOptions")
            .field("pace", &self.pace)
            .field("credentials", &self.credentials)
            .field("request_check", &self.request_check.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            pace: Pace::Instant,
            credentials: Vec::new(),
            volatiles: Arc::new(Volatiles::default()),
            request_check: None,
        }
    }
}

/// A request the server saw, and which exchange answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// HTTP method.
    pub method: String,
    /// Canonical path with query.
    pub path: String,
    /// Index of the exchange served, or `None` when nothing matched.
    pub exchange: Option<usize>,
    /// Status answered.
    pub status: u16,
}

#[derive(Debug)]
struct State {
    cassette: Cassette,
    served: Vec<u32>,
    last_served: Option<usize>,
    observed: Vec<Observed>,
    problems: Vec<String>,
}

/// A replay server on 127.0.0.1. Stops when dropped.
pub struct ReplayServer {
    server: MockServer,
    state: Arc<Mutex<State>>,
    reset_task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("url", &self.server.uri())
            .finish_non_exhaustive()
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.reset_task.abort();
    }
}

impl ReplayServer {
    /// Starts serving `cassette`.
    pub async fn start(cassette: Cassette, options: ReplayOptions) -> Result<Self> {
        let reset_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| {
                ProviderError::new(ErrorKind::Config, format!("cannot listen on loopback: {e}"))
            })?;
        let reset_addr = reset_listener
            .local_addr()
            .map_err(|e| ProviderError::new(ErrorKind::Config, format!("no local address: {e}")))?;
        let served = vec![0; cassette.exchanges.len()];
        let state = Arc::new(Mutex::new(State {
            cassette,
            served,
            last_served: None,
            observed: Vec::new(),
            problems: Vec::new(),
        }));
        let server = MockServer::builder().start().await;
        Mock::given(wiremock::matchers::any())
            .respond_with(Responder {
                state: state.clone(),
                options,
                reset_base: format!("http://{reset_addr}"),
            })
            .mount(&server)
            .await;
        let reset_task = tokio::spawn(serve_resets(reset_listener, state.clone()));
        Ok(Self {
            server,
            state,
            reset_task,
        })
    }

    /// Base URL to point the client at.
    pub fn url(&self) -> String {
        self.server.uri()
    }

    /// Every request seen so far, in order.
    pub fn observed(&self) -> Vec<Observed> {
        lock(&self.state).observed.clone()
    }

    /// Ok when every request matched and every exchange was served; otherwise an error
    /// listing each unexpected request and each exchange never requested.
    pub fn finish(&self) -> Result<()> {
        let state = lock(&self.state);
        let mut problems = state.problems.clone();
        let unused: Vec<String> = state
            .cassette
            .exchanges
            .iter()
            .zip(&state.served)
            .enumerate()
            .filter(|(_, (_, served))| **served == 0)
            .map(|(i, (exchange, _))| {
                format!(
                    "#{i} ({} {})",
                    exchange.request.method, exchange.request.path
                )
            })
            .collect();
        match unused.len() {
            0 => {}
            1 => problems.push(format!("exchange {} was never requested", unused[0])),
            n => problems.push(format!(
                "{n} exchanges were never requested, from {}{}",
                unused[..n.min(3)].join(", "),
                if n > 3 { ", …" } else { "" }
            )),
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "replay of the {} {} cassette did not go as recorded: {}",
                    state.cassette.variant,
                    state.cassette.scenario,
                    problems.join("; ")
                ),
            ))
        }
    }
}

struct Responder {
    state: Arc<Mutex<State>>,
    options: ReplayOptions,
    reset_base: String,
}

impl Respond for Responder {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        let mut path = request.url.path().to_owned();
        if let Some(q) = request.url.query() {
            path.push('?');
            path.push_str(q);
        }
        let content_type = request
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let incoming = RecordedRequest {
            method: request.method.to_string(),
            path: normalizer.text(&path),
            headers: Default::default(),
            body: (!request.body.is_empty())
                .then(|| normalizer.body(&Body::from_bytes(content_type, &request.body))),
        };
        let mut state = lock(&self.state);
        if let Some(check) = &self.options.request_check
            && let Err(why) = check(&incoming)
        {
            let problem = format!("{} {}: {why}", incoming.method, incoming.path);
            return refuse(&mut state, &incoming, problem);
        }
        let Some(index) = pick(&state, &incoming) else {
            let nearest = nearest(&state, &incoming);
            let problem = format!(
                "unexpected request {} {} {}; nearest recorded: {nearest}",
                incoming.method,
                incoming.path,
                incoming.body.as_ref().map(short).unwrap_or_default()
            );
            return refuse(&mut state, &incoming, problem);
        };
        state.served[index] += 1;
        state.last_served = Some(index);
        let response = state.cassette.exchanges[index].response.clone();
        state.observed.push(Observed {
            method: incoming.method,
            path: incoming.path,
            exchange: Some(index),
            status: response.status,
        });
        drop(state);
        let delay = match self.options.pace {
            Pace::Instant => Duration::ZERO,
            Pace::Recorded => Duration::from_secs_f64(response.latency_ms.max(0.0) / 1000.0),
            Pace::Fixed(d) => d,
        };
        if response.reset_after_bytes.is_some() {
            // The TCP responder sends the cut response; 307 keeps the method and body.
            return ResponseTemplate::new(307)
                .insert_header(
                    "location",
                    format!("{}/reset/{index}", self.reset_base).as_str(),
                )
                .set_delay(delay);
        }
        let mut template = ResponseTemplate::new(response.status).set_delay(delay);
        for (name, value) in &response.headers {
            if name != "content-type" {
                template = template.insert_header(name.as_str(), value.as_str());
            }
        }
        if let Some(body) = &response.body {
            let content_type = response
                .headers
                .get("content-type")
                .map(String::as_str)
                .unwrap_or(body.default_content_type());
            // Cassettes are checked for valid bodies when loaded.
            let bytes = normalizer.restore(body).to_bytes().unwrap_or_default();
            template = template.set_body_raw(bytes, content_type);
        }
        template
    }
}

fn refuse(state: &mut State, incoming: &RecordedRequest, problem: String) -> ResponseTemplate {
    state.problems.push(problem.clone());
    state.observed.push(Observed {
        method: incoming.method.clone(),
        path: incoming.path.clone(),
        exchange: None,
        status: 418,
    });
    ResponseTemplate::new(418).set_body_string(format!("sandbox-matrix replay: {problem}"))
}

/// The first unused exchange matching `incoming`, else the last served one if it repeats
/// and matches.
fn pick(state: &State, incoming: &RecordedRequest) -> Option<usize> {
    let exchanges = &state.cassette.exchanges;
    if let Some(i) = (0..exchanges.len())
        .find(|&i| state.served[i] == 0 && matches(&exchanges[i].request, incoming))
    {
        return Some(i);
    }
    (0..exchanges.len()).rev().find(|&i| {
        exchanges[i].repeat && state.served[i] > 0 && matches(&exchanges[i].request, incoming)
    })
}

fn matches(recorded: &RecordedRequest, incoming: &RecordedRequest) -> bool {
    recorded.method.eq_ignore_ascii_case(&incoming.method)
        && recorded.path == incoming.path
        && recorded.body == incoming.body
}

/// The recorded request most like `incoming`, described with what differs.
fn nearest(state: &State, incoming: &RecordedRequest) -> String {
    let score = |r: &RecordedRequest| {
        u8::from(r.method.eq_ignore_ascii_case(&incoming.method)) * 2
            + u8::from(r.path == incoming.path) * 4
            + u8::from(r.body == incoming.body)
    };
    let candidate = state
        .cassette
        .exchanges
        .iter()
        .enumerate()
        .filter(|(i, _)| state.served[*i] == 0)
        .max_by_key(|(i, e)| (score(&e.request), std::cmp::Reverse(*i)));
    let Some((i, exchange)) = candidate else {
        return "none: every exchange was already served".to_owned();
    };
    let r = &exchange.request;
    let mut differs = Vec::new();
    if !r.method.eq_ignore_ascii_case(&incoming.method) {
        differs.push("method");
    }
    if r.path != incoming.path {
        differs.push("path");
    }
    if r.body != incoming.body {
        differs.push("body");
    }
    format!(
        "#{i} {} {} {} (differs in {})",
        r.method,
        r.path,
        r.body.as_ref().map(short).unwrap_or_default(),
        differs.join(", ")
    )
}

fn short(body: &Body) -> String {
    let text = match body {
        Body::Json(v) => v.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    if text.len() > 240 {
        let mut end = 240;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
}

/// Serves `/reset/{index}`: the response's head and its first `reset_after_bytes` bytes,
/// then a TCP reset.
async fn serve_resets(listener: tokio::net::TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
                if head.len() > 64 * 1024 {
                    return;
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let index = head
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.strip_prefix("/reset/"))
                .and_then(|i| i.parse::<usize>().ok());
            let response = index.and_then(|i| {
                lock(&state)
                    .cassette
                    .exchanges
                    .get(i)
                    .map(|e| e.response.clone())
            });
            let Some(response) = response else {
                let _ = socket
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            };
            let body = response
                .body
                .as_ref()
                .and_then(|b| b.to_bytes().ok())
                .unwrap_or_default();
            let content_type = response
                .headers
                .get("content-type")
                .cloned()
                .or_else(|| {
                    response
                        .body
                        .as_ref()
                        .map(|b| b.default_content_type().to_owned())
                })
                .unwrap_or_else(|| "application/octet-stream".to_owned());
            let cut = response.reset_after_bytes.unwrap_or(0).min(body.len());
            let reply = format!(
                "HTTP/1.1 {} Replay\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                response.status,
                body.len().max(cut + 1)
            );
            let _ = socket.write_all(reply.as_bytes()).await;
            let _ = socket.write_all(&body[..cut]).await;
            let _ = socket.flush().await;
            // Linger 0: closing sends RST, as a dropped connection does; with a zero
            // linger the close does not block.
            #[expect(deprecated, reason = "a zero linger resets at once; nothing blocks")]
            let _ = socket.set_linger(Some(Duration::ZERO));
            drop(socket);
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
