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

/// A request header's value, looked up by its lower-case name.
fn header<'a>(request: &'a RecordedRequest, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// How `came` differs from `expected` in its matched headers and body (the mismatch's
/// first words give method and path): at most [`MAX_DIFFERENCES`] items, each short.
fn differences(
    expected: &RecordedRequest,
    came: &RecordedRequest,
    headers: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    for name in headers {
        let (e, c) = (header(expected, name), header(came, name));
        if e != c {
            out.push(format!(
                "header {name}: expected {}, came {}",
                header_value(e),
                header_value(c)
            ));
        }
    }
    body_differences(expected.body.as_ref(), came.body.as_ref(), &mut out);
    if out.len() > MAX_DIFFERENCES {
        out.truncate(MAX_DIFFERENCES);
        out.push("more differences".to_owned());
    }
    out
}

/// A header value as a difference shows it; a Basic credential's user is decoded (envd
/// runs a process as that user).
fn header_value(value: Option<&str>) -> String {
    let Some(value) = value else {
        return "none".to_owned();
    };
    let user = value
        .strip_prefix("Basic ")
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|pair| pair.split_once(':').map(|(user, _)| user.to_owned()));
    match user {
        Some(user) => format!("`{}` (user {user})", excerpt(value)),
        None => format!("`{}`", excerpt(value)),
    }
}

/// How two bodies differ: the first differing line of text, the first differing JSON
/// values (lines and Connect frames as arrays), or their forms.
fn body_differences(expected: Option<&Body>, came: Option<&Body>, out: &mut Vec<String>) {
    match (expected, came) {
        (None, None) => {}
        (Some(e), Some(c)) if e == c => {}
        (Some(Body::Text(e)), Some(Body::Text(c))) => {
            let (mut el, mut cl) = (e.lines(), c.lines());
            let mut line = 1;
            loop {
                match (el.next(), cl.next()) {
                    (Some(a), Some(b)) if a == b => line += 1,
                    (None, None) => {
                        out.push("body: differs in line endings".to_owned());
                        return;
                    }
                    (a, b) => {
                        out.push(format!(
                            "body line {line}: expected {}, came {}",
                            a.map_or("none".to_owned(), |a| crate::quoted(&excerpt(a))),
                            b.map_or("none".to_owned(), |b| crate::quoted(&excerpt(b)))
                        ));
                        return;
                    }
                }
            }
        }
        (Some(e), Some(c)) => match (json_form(e), json_form(c)) {
            (Some(ev), Some(cv)) if form(e) == form(c) => {
                json_differences("body", "", &ev, &cv, out)
            }
            _ => out.push(format!(
                "body: expected {} {}, came {} {}",
                form(e),
                excerpt(&short(e)),
                form(c),
                excerpt(&short(c))
            )),
        },
        (e, c) => out.push(format!(
            "body: expected {}, came {}",
            e.map_or("none".to_owned(), |b| format!(
                "{} {}",
                form(b),
                excerpt(&short(b))
            )),
            c.map_or("none".to_owned(), |b| format!(
                "{} {}",
                form(b),
                excerpt(&short(b))
            ))
        )),
    }
}

/// The body's form, as cassettes name it.
fn form(body: &Body) -> &'static str {
    match body {
        Body::Json(_) => "json",
        Body::JsonLines(_) => "json_lines",
        Body::Connect(_) => "connect",
        Body::Text(_) => "text",
        Body::Base64(_) => "base64",
    }
}

/// The body as one JSON document to compare: lines and Connect frames as arrays.
fn json_form(body: &Body) -> Option<serde_json::Value> {
    match body {
        Body::Json(v) => Some(v.clone()),
        Body::JsonLines(lines) => Some(serde_json::Value::Array(lines.clone())),
        Body::Connect(frames) => serde_json::to_value(frames).ok(),
        Body::Text(_) | Body::Base64(_) => None,
    }
}

/// The first differences between two JSON documents, by JSON Pointer after `label` (such
/// as `body`); stops once `out` holds more than [`MAX_DIFFERENCES`].
fn json_differences(
    label: &str,
    at: &str,
    expected: &serde_json::Value,
    came: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    if out.len() > MAX_DIFFERENCES {
        return;
    }
    let pointer = |at: &str| {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        }
    };
    match (expected, came) {
        (Value::Object(e), Value::Object(c)) => {
            let mut keys: Vec<&String> = e.keys().chain(c.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                match (e.get(key), c.get(key)) {
                    (Some(ev), Some(cv)) => json_differences(label, &here, ev, cv, out),
                    (ev, cv) => {
                        out.push(format!(
                            "{label} {here}: expected {}, came {}",
                            ev.map_or("none".to_owned(), |v| excerpt(&v.to_string())),
                            cv.map_or("none".to_owned(), |v| excerpt(&v.to_string()))
                        ));
                    }
                }
            }
        }
        (Value::Array(e), Value::Array(c)) => {
            for (i, (ev, cv)) in e.iter().zip(c).enumerate() {
                json_differences(label, &format!("{at}/{i}"), ev, cv, out);
            }
            if e.len() != c.len() {
                out.push(format!(
                    "{label} {}: expected {} items, came {}",
                    pointer(at),
                    e.len(),
                    c.len()
                ));
            }
        }
        (e, c) if e != c => {
            out.push(format!(
                "{label} {}: expected {}, came {}",
                pointer(at),
                excerpt(&e.to_string()),
                excerpt(&c.to_string())
            ));
        }
        _ => {}
    }
}

/// `text` cut to [`EXCERPT`] characters.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
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

/// Serves WebSocket exchanges: the upgrade is matched as a request, then the frames are
/// played.
struct Sockets {
    state: Arc<Mutex<State>>,
    options: ReplayOptions,
}

/// Close code of a socket whose client sent a frame other than the recorded one.
const CLOSE_MISMATCH: u16 = 1008;

impl Sockets {
    async fn serve(self: Arc<Self>, stream: Rewound) {
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        let admitted: Arc<Mutex<Option<usize>>> = Arc::default();
        let (this, picked) = (self.clone(), admitted.clone());
        let check = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request| {
            let uri = request.uri();
            let path = uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
            let headers = matched(request.headers(), this.options.matched_headers, &normalizer);
            let incoming = RecordedRequest {
                method: request.method().to_string(),
                path: normalizer.text(&path),
                headers,
                body: None,
            };
            let (index, response) =
                admit(&this.state, &this.options, incoming).map_err(|answer| (418, answer))?;
            if lock(&this.state).cassette.exchanges[index]
                .websocket
                .is_none()
            {
                // A refused upgrade, recorded as such: answer what was recorded.
                let body = response
                    .body
                    .as_ref()
                    .map(|b| {
                        String::from_utf8_lossy(&b.to_bytes().unwrap_or_default()).into_owned()
                    })
                    .unwrap_or_default();
                return Err((response.status, body));
            }
            *lock(&picked) = Some(index);
            Ok(())
        };
        let Some(mut socket) = super::ws::accept(stream, check).await else {
            return;
        };
        let Some(index) = *lock(&admitted) else {
            return;
        };
        let mut index = index;
        let (mut frames, latency_ms, mut reset) = {
            let state = lock(&self.state);
            let exchange = &state.cassette.exchanges[index];
            (
                exchange.websocket.clone().unwrap_or_default(),
                exchange.response.latency_ms,
                exchange.response.reset_after_bytes,
            )
        };
        // Bytes of server frames sent: a socket marked `reset_after_bytes` is dropped,
        // with no close frame, once they reach it.
        let mut sent_bytes = 0usize;
        let mut bound = false;
        tokio::time::sleep(delay(self.options.pace, latency_ms)).await;
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        // Indexed: binding to another exchange of the group swaps `frames` on the way.
        for k in 0..frames.len() {
            let frame = &frames[k].clone();
            if let WsFrame::Close { code, reason } = frame {
                close_with(&mut socket, *code, reason).await;
                return;
            }
            if !frame.from_client() {
                if reset.is_some_and(|cut| sent_bytes >= cut) {
                    return;
                }
                let text = normalizer.restore_frame(frame).text().unwrap_or_default();
                sent_bytes += text.len();
                if socket.send(Message::text(text)).await.is_err() {
                    self.problem(format!(
                        "exchange #{index}: the client left before frame #{k} was sent"
                    ));
                    return;
                }
                continue;
            }
            let came = loop {
                match socket.next().await {
                    Some(Ok(Message::Text(text))) => break Some(text.as_str().to_owned()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(_)) | Some(Err(_)) | None => break None,
                }
            };
            let Some(came) = came else {
                self.problem(format!(
                    "exchange #{index}: the client closed the socket before sending frame #{k}"
                ));
                return;
            };
            // Normalized the same way the recorder did, with the values known by now.
            let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
            let came = normalizer.frame(&WsFrame::from_text(true, &came));
            if !bound {
                // Sockets of one group send the same upgrade: the first client frame tells
                // which recorded socket this one is.
                bound = true;
                if let Some(j) = self.bind(index, k, &came) {
                    index = j;
                    let state = lock(&self.state);
                    frames = state.cassette.exchanges[j]
                        .websocket
                        .clone()
                        .unwrap_or_default();
                    reset = state.cassette.exchanges[j].response.reset_after_bytes;
                    drop(state);
                    continue;
                }
            }
            if came != frames[k] {
                let problem = format!(
                    "exchange #{index} (GET {}), frame #{k}: {}",
                    lock(&self.state).cassette.exchanges[index].request.path,
                    frame_differences(&frames[k], &came).join("; ")
                );
                self.problem(problem.clone());
                close_with(&mut socket, CLOSE_MISMATCH, &problem).await;
                return;
            }
        }
        // Recorded without a close: the client closed; wait for it to.
        while let Some(Ok(message)) = socket.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    }

    /// Keeps `problem` for [`ReplayServer::finish`].
    fn problem(&self, problem: String) {
        lock(&self.state).problems.push(problem);
    }

    /// The exchange a socket admitted as `index` is, now that its client frame `k` is
    /// `came`: `index` itself or another of its group with the same upgrade, frames
    /// before `k` and frame `k`, not taken by another socket yet (the served counts move
    /// with it). `None` when none fits: `index` then reports the difference.
    fn bind(&self, index: usize, k: usize, came: &WsFrame) -> Option<usize> {
        let mut state = lock(&self.state);
        let segment = state
            .segments
            .iter()
            .find(|s| s.contains(&index))
            .cloned()
            .unwrap_or(index..index + 1);
        let exchanges = &state.cassette.exchanges;
        let mine = exchanges[index].websocket.as_deref().unwrap_or_default();
        let fits = |j: usize| {
            let theirs = exchanges[j].websocket.as_deref().unwrap_or_default();
            !state.bound[j]
                && exchanges[j].request == exchanges[index].request
                && theirs.len() > k
                && theirs[..k] == mine[..k.min(mine.len())]
                && &theirs[k] == came
        };
        let j = std::iter::once(index)
            .chain(segment.filter(|&j| j != index))
            .find(|&j| fits(j))?;
        state.bound[j] = true;
        if j != index {
            state.served[index] -= 1;
            state.served[j] += 1;
        }
        Some(j)
    }
}

/// How a client frame differs from the recorded one.
fn frame_differences(expected: &WsFrame, came: &WsFrame) -> Vec<String> {
    let mut out = Vec::new();
    match (expected, came) {
        (WsFrame::Client(e), WsFrame::Client(c)) => json_differences("frame", "", e, c, &mut out),
        _ => out.push(format!(
            "expected {}, came {}",
            excerpt(&expected.text().unwrap_or_default()),
            excerpt(&came.text().unwrap_or_default())
        )),
    }
    if out.len() > MAX_DIFFERENCES {
        out.truncate(MAX_DIFFERENCES);
        out.push("more differences".to_owned());
    }
    out
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

fn short(body: &Body) -> String {
    match body {
        Body::Json(v) => v.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
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
