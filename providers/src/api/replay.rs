//! A local server that plays a cassette back to the same client code that recorded it.
//!
//! Built on wiremock: one catch-all mock whose responder serves the cassette **in order**.
//! Each request must match the next exchange (method, canonical path, normalized body and
//! the headers its variant declares); exchanges marked with the same `group`, one after
//! the other, were in flight together and match in any order among themselves. A served
//! exchange marked `repeat` answers the same request again until the next expected one
//! matches. Anything else gets status 418 naming the cassette, the exchange expected and
//! how the request differs; [`ReplayServer::finish`] fails on those and on exchanges never
//! requested. A response marked `reset_after_bytes` is redirected to a small TCP responder
//! that sends that many bytes of it and resets the connection; a WebSocket exchange marked
//! so is dropped, with no close frame, once its server frames reach that many bytes.
//!
//! WebSocket exchanges (wiremock cannot upgrade) are served by a front listener at the
//! same base URL ([`super::ws::split_upgrades`]): an upgrade is matched as the next
//! exchange like any request, then its recorded frames are played in order, each client
//! frame compared with the recording after normalization. A client frame that differs
//! closes the socket (code 1008) and fails the replay naming the exchange, the frame and
//! the first differences.

mod mismatch;
mod sockets;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

use super::cassette::{Body, Cassette, Exchange, Normalizer, RecordedRequest, Volatiles, WsFrame};
use super::ws::{Rewound, close_with};
use crate::{ErrorKind, ProviderError, Result, Secret};

use mismatch::{differences, header};
use sockets::Sockets;

/// How fast responses come back.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Pace {
    /// At once.
    #[default]
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

/// Most differences one mismatch lists.
const MAX_DIFFERENCES: usize = 3;
/// Most unexpected requests [`ReplayServer::finish`] lists.
const MAX_PROBLEMS: usize = 3;
/// Longest excerpt of a value in a difference, in characters.
const EXCERPT: usize = 60;

/// How to serve a cassette.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Response pacing.
    pub pace: Pace,
    /// Credentials the client sends (fake in replay); redacted before matching, so that
    /// they compare equal to the cassette's `<redacted:NAME>` placeholders.
    pub credentials: Vec<Secret>,
    /// The run's volatile values, replaced by placeholders before matching.
    pub volatiles: Arc<Volatiles>,
    /// Checked against every request.
    pub request_check: Option<RequestCheck>,
    /// Request headers (lower case) whose presence and normalized value must equal the
    /// recorded ones; each variant declares its set as `REPLAY_MATCHED_HEADERS`.
    pub matched_headers: &'static [&'static str],
    /// The cassette's file, named in every problem.
    pub cassette_path: Option<PathBuf>,
}

impl std::fmt::Debug for ReplayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayOptions")
            .field("pace", &self.pace)
            .field("credentials", &self.credentials)
            .field("request_check", &self.request_check.is_some())
            .field("matched_headers", &self.matched_headers)
            .field("cassette_path", &self.cassette_path)
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
            matched_headers: &[],
            cassette_path: None,
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
    /// How problems name the cassette: its file, else its variant and scenario.
    name: String,
    matched_headers: &'static [&'static str],
    /// The cassette cut into what is served in order: a group, or a lone exchange.
    segments: Vec<Range<usize>>,
    /// The first segment with an exchange never served.
    cursor: usize,
    served: Vec<u32>,
    /// WebSocket exchanges a socket has taken for its own by its first client frame.
    bound: Vec<bool>,
    observed: Vec<Observed>,
    problems: Vec<String>,
}

/// A replay server on 127.0.0.1. Stops when dropped.
pub struct ReplayServer {
    /// Kept alive for as long as the front relays to it.
    _server: MockServer,
    url: String,
    state: Arc<Mutex<State>>,
    reset_task: tokio::task::JoinHandle<()>,
    front_task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayServer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.reset_task.abort();
        self.front_task.abort();
    }
}

fn listen_error(e: std::io::Error) -> ProviderError {
    ProviderError::new(ErrorKind::Config, format!("cannot listen on loopback: {e}"))
}

impl ReplayServer {
    /// Starts serving `cassette`.
    pub async fn start(cassette: Cassette, options: ReplayOptions) -> Result<Self> {
        let reset_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(listen_error)?;
        let reset_addr = reset_listener.local_addr().map_err(listen_error)?;
        let front = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(listen_error)?;
        let url = format!("http://{}", front.local_addr().map_err(listen_error)?);
        let name = match &options.cassette_path {
            Some(path) => path.display().to_string(),
            None => format!("the {} {} cassette", cassette.variant, cassette.scenario),
        };
        let state = Arc::new(Mutex::new(State {
            served: vec![0; cassette.exchanges.len()],
            bound: vec![false; cassette.exchanges.len()],
            segments: segments(&cassette.exchanges),
            cursor: 0,
            name,
            matched_headers: options.matched_headers,
            cassette,
            observed: Vec::new(),
            problems: Vec::new(),
        }));
        let server = MockServer::builder().start().await;
        Mock::given(wiremock::matchers::any())
            .respond_with(Responder {
                state: state.clone(),
                options: options.clone(),
                reset_base: format!("http://{reset_addr}"),
            })
            .mount(&server)
            .await;
        let reset_task = tokio::spawn(serve_resets(reset_listener, state.clone()));
        let sockets = Arc::new(Sockets {
            state: state.clone(),
            options,
        });
        let front_task = super::ws::split_upgrades(front, *server.address(), move |stream| {
            sockets.clone().serve(stream)
        });
        Ok(Self {
            _server: server,
            url,
            state,
            reset_task,
            front_task,
        })
    }

    /// Base URL to point the client at (HTTP and WebSocket).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Every request seen so far, in order.
    pub fn observed(&self) -> Vec<Observed> {
        lock(&self.state).observed.clone()
    }

    /// Ok when every request matched and every exchange was served; otherwise an error
    /// naming the cassette, the first unexpected requests (each with the exchange expected
    /// and how it differs) and the exchanges never requested.
    pub fn finish(&self) -> Result<()> {
        let state = lock(&self.state);
        let mut problems: Vec<String> = state.problems.iter().take(MAX_PROBLEMS).cloned().collect();
        if state.problems.len() > MAX_PROBLEMS {
            problems.push(format!(
                "{} more unexpected requests",
                state.problems.len() - MAX_PROBLEMS
            ));
        }
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
                    "replay of {} did not go as recorded: {}",
                    state.name,
                    problems.join("; ")
                ),
            ))
        }
    }
}

/// Consecutive exchanges with the same group label form one segment; any other exchange
/// is a segment of its own.
fn segments(exchanges: &[Exchange]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, exchange) in exchanges.iter().enumerate() {
        match out.last_mut() {
            Some(last)
                if exchange.group.is_some() && exchanges[last.start].group == exchange.group =>
            {
                last.end = i + 1;
            }
            _ => out.push(i..i + 1),
        }
    }
    out
}

impl State {
    /// Whether `incoming` is the request `recorded` describes.
    fn matches(&self, recorded: &RecordedRequest, incoming: &RecordedRequest) -> bool {
        recorded.method.eq_ignore_ascii_case(&incoming.method)
            && recorded.path == incoming.path
            && recorded.body == incoming.body
            && self
                .matched_headers
                .iter()
                .all(|name| header(recorded, name) == header(incoming, name))
    }

    /// The exchange that answers `incoming`: an unserved one of the current segment, else
    /// a served `repeat` exchange of the segment served last.
    fn pick(&mut self, incoming: &RecordedRequest) -> Option<usize> {
        while self
            .segments
            .get(self.cursor)
            .is_some_and(|s| s.clone().all(|i| self.served[i] > 0))
        {
            self.cursor += 1;
        }
        let exchanges = &self.cassette.exchanges;
        if let Some(segment) = self.segments.get(self.cursor)
            && let Some(i) = segment
                .clone()
                .find(|&i| self.served[i] == 0 && self.matches(&exchanges[i].request, incoming))
        {
            return Some(i);
        }
        let last = match self.segments.get(self.cursor) {
            Some(s) if s.clone().any(|i| self.served[i] > 0) => self.cursor,
            _ => self.cursor.checked_sub(1)?,
        };
        self.segments[last].clone().rev().find(|&i| {
            exchanges[i].repeat
                && self.served[i] > 0
                && self.matches(&exchanges[i].request, incoming)
        })
    }

    /// Why `incoming` is refused: the exchange expected, how the request differs from it,
    /// and whether it matches another exchange (out of order, or served already).
    fn mismatch(&self, incoming: &RecordedRequest) -> String {
        let exchanges = &self.cassette.exchanges;
        let came = format!("{} {}", incoming.method, incoming.path);
        let Some(segment) = self.segments.get(self.cursor) else {
            return format!("came {came} after every exchange was served");
        };
        let score = |r: &RecordedRequest| {
            u8::from(r.path == incoming.path) * 4
                + u8::from(r.method.eq_ignore_ascii_case(&incoming.method)) * 2
                + u8::from(r.body == incoming.body)
        };
        let expected = segment
            .clone()
            .filter(|&i| self.served[i] == 0)
            .max_by_key(|&i| (score(&exchanges[i].request), std::cmp::Reverse(i)))
            .unwrap_or(segment.start);
        let recorded = &exchanges[expected].request;
        let same_call = recorded.method.eq_ignore_ascii_case(&incoming.method)
            && recorded.path == incoming.path;
        let mut out = if same_call {
            format!("exchange #{expected}, {came}")
        } else {
            format!(
                "exchange #{expected}: expected {} {}, came {came}",
                recorded.method, recorded.path
            )
        };
        if segment.len() > 1 {
            out.push_str(&format!(
                " (group `{}`, #{}-#{})",
                exchanges[segment.start]
                    .group
                    .as_deref()
                    .unwrap_or_default(),
                segment.start,
                segment.end - 1
            ));
        }
        let differences = differences(recorded, incoming, self.matched_headers);
        if !differences.is_empty() {
            out.push_str(if same_call { ": " } else { "; " });
            out.push_str(&differences.join("; "));
        }
        let elsewhere = |i: usize| self.matches(&exchanges[i].request, incoming);
        if let Some(later) = (segment.end..exchanges.len()).find(|&i| elsewhere(i)) {
            out.push_str(&format!("; it matches #{later}, later in the cassette"));
        } else if let Some(earlier) = (0..segment.start)
            .rev()
            .find(|&i| !exchanges[i].repeat && elsewhere(i))
        {
            out.push_str(&format!("; it matches #{earlier}, served already"));
        }
        out
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
        let headers = matched(&request.headers, self.options.matched_headers, &normalizer);
        let incoming = RecordedRequest {
            method: request.method.to_string(),
            path: normalizer.text(&path),
            headers,
            body: (!request.body.is_empty())
                .then(|| normalizer.body(&Body::from_bytes(content_type, &request.body))),
        };
        let (index, response) = match admit(&self.state, &self.options, incoming) {
            Ok(admitted) => admitted,
            Err(answer) => return ResponseTemplate::new(418).set_body_string(answer),
        };
        let delay = delay(self.options.pace, response.latency_ms);
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

/// Matches `incoming` as the next request: the exchange serving it and its response, or
/// the refusal's answer (the problem is kept for [`ReplayServer::finish`]).
fn admit(
    state: &Mutex<State>,
    options: &ReplayOptions,
    incoming: RecordedRequest,
) -> std::result::Result<(usize, super::cassette::RecordedResponse), String> {
    let mut state = lock(state);
    if let Some(check) = &options.request_check
        && let Err(why) = check(&incoming)
    {
        let problem = format!("{} {}: {why}", incoming.method, incoming.path);
        return Err(refusal(&mut state, &incoming, problem));
    }
    let Some(index) = state.pick(&incoming) else {
        let problem = state.mismatch(&incoming);
        return Err(refusal(&mut state, &incoming, problem));
    };
    state.served[index] += 1;
    let response = state.cassette.exchanges[index].response.clone();
    state.observed.push(Observed {
        method: incoming.method,
        path: incoming.path,
        exchange: Some(index),
        status: response.status,
    });
    Ok((index, response))
}

/// How long to hold an answer recorded as taking `latency_ms`.
pub(crate) fn delay(pace: Pace, latency_ms: f64) -> Duration {
    match pace {
        Pace::Instant => Duration::ZERO,
        // Cassettes are range-checked at load; a value built in code never panics here.
        Pace::Recorded => Duration::try_from_secs_f64(latency_ms.max(0.0) / 1000.0)
            .unwrap_or(Duration::from_secs(3600)),
        Pace::Fixed(d) => d,
    }
}

/// Keeps `problem` for [`ReplayServer::finish`] and returns the answer naming the cassette.
fn refusal(state: &mut State, incoming: &RecordedRequest, problem: String) -> String {
    let answer = format!("sandbox-matrix replay of {}: {problem}", state.name);
    state.problems.push(problem);
    state.observed.push(Observed {
        method: incoming.method.clone(),
        path: incoming.path.clone(),
        exchange: None,
        status: 418,
    });
    answer
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

/// The headers of `names` that `headers` holds, each normalized (credentials and volatile
/// values as placeholders), several values of one name joined as HTTP joins them.
fn matched(
    headers: &tokio_tungstenite::tungstenite::http::HeaderMap,
    names: &[&str],
    normalizer: &Normalizer,
) -> std::collections::BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|name| {
            let values: Vec<&str> = headers
                .get_all(*name)
                .iter()
                .map(|v| v.to_str().unwrap_or("(not UTF-8)"))
                .collect();
            (!values.is_empty()).then(|| {
                (
                    name.to_ascii_lowercase(),
                    normalizer.text(&values.join(", ")),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
