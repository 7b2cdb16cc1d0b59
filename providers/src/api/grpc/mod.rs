//! gRPC cassettes and their replay server, with the strictness of the HTTP ones.
//!
//! A cassette holds, per call in the order the calls were made: the method path
//! (`/package.Service/Method`), the meaningful request metadata, the request message and
//! every response message (a server stream frame by frame) as JSON of the decoded message
//! (proto field names, through a descriptor pool), then the trailers `grpc-status` and
//! `grpc-message`. Credentials and run-varying values are placeholders, as in HTTP
//! cassettes ([`Normalizer`]).
//!
//! [`GrpcReplayServer`] speaks real HTTP/2 gRPC on 127.0.0.1, so the live client runs
//! unchanged against it. Each call must be the next exchange: same method, same
//! normalized request and same matched metadata. Anything else is answered
//! `FAILED_PRECONDITION` (a status no client retries) naming the exchange expected and
//! the difference, and [`GrpcReplayServer::finish`] fails on it and on exchanges never
//! requested.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Frame, Incoming};
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions,
};
use serde::{Deserialize, Serialize};

use super::cassette::{Normalizer, Volatiles};
use crate::{ErrorKind, ProviderError, Result, Secret};

pub mod record;

pub use record::{GrpcTransport, Recorder};

/// gRPC's `OK`.
pub const STATUS_OK: i32 = 0;
/// gRPC's `FAILED_PRECONDITION`, the answer to a call the cassette does not expect.
pub const STATUS_FAILED_PRECONDITION: i32 = 9;
/// The highest gRPC status code (`UNAUTHENTICATED`).
const STATUS_MAX: i32 = 16;
/// Most unexpected calls [`GrpcReplayServer::finish`] lists.
const MAX_PROBLEMS: usize = 3;
/// Longest excerpt of a message in a difference, in characters.
const EXCERPT: usize = 200;

/// The recorded gRPC calls of one scenario on one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcCassette {
    /// Where the calls come from: `recorded live <date>`, or `recorded from an emulator
    /// of <proto>` for calls answered by an emulator.
    pub origin: String,
    /// When the calls were written: `YYYY-MM-DD` or an RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// The variant the calls belong to.
    pub variant: String,
    /// The scenario that made them.
    pub scenario: String,
    /// What a fault cassette breaks, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The calls, in the order they were made.
    pub exchanges: Vec<GrpcExchange>,
}

/// One gRPC call and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcExchange {
    /// The method path, `/package.Service/Method`.
    pub method: String,
    /// The request metadata replay compares, normalized.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The request message as JSON, normalized.
    pub request: serde_json::Value,
    /// The response messages as JSON, in order: one for a unary call, each frame of a
    /// server stream, none when the call failed before answering.
    #[serde(default)]
    pub responses: Vec<serde_json::Value>,
    /// The `grpc-status` trailer.
    #[serde(rename = "grpc-status")]
    pub status: i32,
    /// The `grpc-message` trailer, when there was one.
    #[serde(
        rename = "grpc-message",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub message: Option<String>,
    /// Time from sending the request to the call's end, in milliseconds, from 0 to
    /// [`crate::api::cassette::MAX_LATENCY_MS`]; replay at the recorded pace holds the
    /// answer that long.
    #[serde(
        default,
        deserialize_with = "crate::api::cassette::latency",
        skip_serializing_if = "is_zero"
    )]
    pub latency_ms: f64,
}

fn is_zero(ms: &f64) -> bool {
    *ms == 0.0
}

impl GrpcCassette {
    /// Reads a cassette file and checks it against `pool`; errors name the file and, for
    /// YAML, the line.
    pub fn load(path: &Path, pool: &DescriptorPool) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot read cassette {}: {e}", path.display()),
            )
        })?;
        Self::parse(&text, pool).map_err(|e| e.context(path.display().to_string()))
    }

    /// Parses cassette YAML and checks every exchange against `pool`: a known method, a
    /// request and responses that are its messages, as many responses as the method can
    /// send and a real status code.
    pub fn parse(text: &str, pool: &DescriptorPool) -> Result<Self> {
        let mut cassette: Self = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column, message) = crate::yaml::describe(&e);
            ProviderError::new(
                ErrorKind::Config,
                format!("{line}:{column}: not a gRPC cassette: {message}"),
            )
        })?;
        for (i, exchange) in cassette.exchanges.iter_mut().enumerate() {
            exchange
                .check(pool)
                .map_err(|e| e.context(format!("exchange {i} ({})", exchange.method)))?;
        }
        Ok(cassette)
    }

    /// Writes the cassette as YAML, creating its directory.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_saphyr::to_string(self).map_err(|e| {
            ProviderError::new(ErrorKind::Protocol, format!("cannot write cassette: {e}"))
        })?;
        let io = |e: std::io::Error| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot write cassette {}: {e}", path.display()),
            )
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        std::fs::write(path, text).map_err(io)
    }
}

impl GrpcExchange {
    /// Checks the exchange against `pool` and writes its messages the way replayed and
    /// recorded ones are (`55` and `55.0` alike, enums by name), so they compare as JSON.
    fn check(&mut self, pool: &DescriptorPool) -> Result<()> {
        let method = method(pool, &self.method).map_err(config)?;
        self.request = to_json(&from_json(method.input(), &self.request).map_err(config)?);
        for (k, response) in self.responses.iter_mut().enumerate() {
            *response = to_json(
                &from_json(method.output(), response)
                    .map_err(|e| config(format!("response {k}: {e}")))?,
            );
        }
        if !(0..=STATUS_MAX).contains(&self.status) {
            return Err(config(format!(
                "grpc-status {} is not a gRPC status code",
                self.status
            )));
        }
        if !method.is_server_streaming() && self.responses.len() > 1 {
            return Err(config(format!(
                "a unary method answers once, not {} times",
                self.responses.len()
            )));
        }
        if !method.is_server_streaming() && self.status == STATUS_OK && self.responses.is_empty() {
            return Err(config("a unary call with status 0 has a response"));
        }
        Ok(())
    }
}

fn config(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ErrorKind::Config, message)
}

/// The method `path` (`/package.Service/Method`) names in `pool`.
pub fn method(pool: &DescriptorPool, path: &str) -> std::result::Result<MethodDescriptor, String> {
    let (service, name) = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .ok_or_else(|| format!("`{path}` is not a gRPC method path (/package.Service/Method)"))?;
    pool.get_service_by_name(service)
        .ok_or_else(|| format!("no service `{service}` in the protos"))?
        .methods()
        .find(|m| m.name() == name)
        .ok_or_else(|| format!("service `{service}` has no method `{name}`"))
}

/// Rewrites, with `f`, every string of `message` and every bytes value that is UTF-8 text
/// (command output, a program's arguments), in nested messages, lists and maps too: how
/// credentials and run-varying values inside bytes become placeholders, and back.
pub fn rewrite_text(message: &mut DynamicMessage, f: &dyn Fn(&str) -> String) {
    for (_, value) in message.fields_mut() {
        rewrite_value(value, f);
    }
}

fn rewrite_value(value: &mut prost_reflect::Value, f: &dyn Fn(&str) -> String) {
    use prost_reflect::{MapKey, Value};
    match value {
        Value::String(s) => *s = f(s),
        Value::Bytes(b) => {
            if let Ok(text) = std::str::from_utf8(b) {
                let rewritten = f(text);
                if rewritten != text {
                    *b = Bytes::from(rewritten.into_bytes());
                }
            }
        }
        Value::Message(m) => rewrite_text(m, f),
        Value::List(items) => items.iter_mut().for_each(|v| rewrite_value(v, f)),
        Value::Map(map) => {
            let entries: Vec<(MapKey, Value)> = map.drain().collect();
            for (key, mut v) in entries {
                rewrite_value(&mut v, f);
                let key = match key {
                    MapKey::String(k) => MapKey::String(f(&k)),
                    other => other,
                };
                map.insert(key, v);
            }
        }
        _ => {}
    }
}

/// `message` as JSON with proto field names, default values left out.
pub fn to_json(message: &DynamicMessage) -> serde_json::Value {
    let options = SerializeOptions::new().use_proto_field_name(true);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .unwrap_or_else(|e| serde_json::Value::String(format!("<unserializable: {e}>")))
}

/// The `descriptor` message `value` describes; unknown fields are refused.
pub fn from_json(
    descriptor: MessageDescriptor,
    value: &serde_json::Value,
) -> std::result::Result<DynamicMessage, String> {
    let name = descriptor.full_name().to_owned();
    DynamicMessage::deserialize(descriptor, value).map_err(|e| format!("not a {name}: {e}"))
}

/// Splits a gRPC body into its length-prefixed messages; compressed ones are refused.
pub fn decode_frames(mut body: &[u8]) -> std::result::Result<Vec<Bytes>, String> {
    let mut frames = Vec::new();
    while !body.is_empty() {
        let Some((head, rest)) = body.split_first_chunk::<5>() else {
            return Err(format!(
                "a gRPC frame header needs 5 bytes, {} left",
                body.len()
            ));
        };
        if head[0] != 0 {
            return Err("a compressed gRPC message (compression was not negotiated)".to_owned());
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if rest.len() < len {
            return Err(format!(
                "a gRPC frame says {len} bytes but {} follow",
                rest.len()
            ));
        }
        frames.push(Bytes::copy_from_slice(&rest[..len]));
        body = &rest[len..];
    }
    Ok(frames)
}

/// `message` as one uncompressed gRPC frame.
pub fn encode_frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(message.len() + 5);
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

/// How gRPC calls are normalized, matched and recorded.
#[derive(Debug, Clone, Default)]
pub struct GrpcOptions {
    /// Credentials the client sends, compared as their `<redacted:NAME>` placeholders.
    pub credentials: Vec<Secret>,
    /// Run-varying values the client registers as it goes.
    pub volatiles: Arc<Volatiles>,
    /// Request metadata keys compared with the cassette's (lower case).
    pub matched_metadata: Vec<String>,
    /// What errors call the cassette, such as its file; the variant and scenario otherwise.
    pub name: Option<String>,
    /// How fast the replay server answers.
    pub pace: crate::api::replay::Pace,
}

struct State {
    cassette: GrpcCassette,
    pool: DescriptorPool,
    options: GrpcOptions,
    name: String,
    cursor: usize,
    problems: Vec<String>,
}

/// What the replay server sends for one call, after `delay`: its messages, then the
/// trailers.
struct Answer {
    frames: Vec<Bytes>,
    status: i32,
    message: Option<String>,
    delay: std::time::Duration,
}

impl State {
    fn answer(
        &mut self,
        path: &str,
        headers: &http::HeaderMap,
        body: std::result::Result<Bytes, String>,
    ) -> Answer {
        match body.and_then(|body| self.expected(path, headers, &body)) {
            Ok(answer) => {
                self.cursor += 1;
                answer
            }
            Err(problem) => {
                let problem = format!("call {path}: {problem}");
                self.problems.push(problem.clone());
                Answer {
                    frames: Vec::new(),
                    status: STATUS_FAILED_PRECONDITION,
                    message: Some(format!("replay of {}: {problem}", self.name)),
                    delay: std::time::Duration::ZERO,
                }
            }
        }
    }

    /// The recorded answer when the call is the next exchange, else how it differs.
    fn expected(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> std::result::Result<Answer, String> {
        let method = method(&self.pool, path)?;
        let frames = decode_frames(body)?;
        let [frame] = frames.as_slice() else {
            return Err(format!("{} request messages, not one", frames.len()));
        };
        let mut request = DynamicMessage::decode(method.input(), frame.clone())
            .map_err(|e| format!("not a {}: {e}", method.input().full_name()))?;
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        rewrite_text(&mut request, &|t| normalizer.text(t));
        let request = normalizer.json(&to_json(&request));
        let metadata: BTreeMap<String, String> = self
            .options
            .matched_metadata
            .iter()
            .filter_map(|key| {
                let value = headers.get(key.as_str())?.to_str().ok()?;
                Some((key.clone(), normalizer.text(value)))
            })
            .collect();
        let Some(exchange) = self.cassette.exchanges.get(self.cursor) else {
            return Err(format!(
                "every one of the {} exchanges was already served",
                self.cassette.exchanges.len()
            ));
        };
        let at = format!("exchange {} ({})", self.cursor, exchange.method);
        if exchange.method != path {
            return Err(format!("expected {at}"));
        }
        for key in &self.options.matched_metadata {
            let (recorded, sent) = (exchange.metadata.get(key), metadata.get(key));
            if recorded != sent {
                return Err(format!(
                    "{at}: metadata `{key}` is {}, the recording has {}",
                    sent.map_or_else(|| "absent".to_owned(), |v| format!("`{v}`")),
                    recorded.map_or_else(|| "none".to_owned(), |v| format!("`{v}`")),
                ));
            }
        }
        if exchange.request != request {
            return Err(format!(
                "{at}: the request differs: sent {}, recorded {}",
                crate::yaml::cut(&request.to_string(), EXCERPT),
                crate::yaml::cut(&exchange.request.to_string(), EXCERPT),
            ));
        }
        // What the recording answered, with this run's values in place of placeholders.
        let back = normalizer.back();
        let frames = exchange
            .responses
            .iter()
            .map(|r| {
                from_json(method.output(), r).map(|mut m| {
                    rewrite_text(&mut m, &|t| back.text(t));
                    encode_frame(&m.encode_to_vec())
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Answer {
            frames,
            status: exchange.status,
            message: exchange.message.clone(),
            delay: crate::api::replay::delay(self.options.pace, exchange.latency_ms),
        })
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

type ReplayBody = StreamBody<
    futures_util::stream::Iter<std::vec::IntoIter<std::result::Result<Frame<Bytes>, Infallible>>>,
>;

/// A gRPC replay server on 127.0.0.1 (HTTP/2 without TLS). Stops when dropped.
pub struct GrpcReplayServer {
    url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for GrpcReplayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcReplayServer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for GrpcReplayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcReplayServer {
    /// Starts serving `cassette`, whose messages `pool` describes.
    pub async fn start(
        cassette: GrpcCassette,
        pool: DescriptorPool,
        options: GrpcOptions,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(listen_error)?;
        let url = format!("http://{}", listener.local_addr().map_err(listen_error)?);
        let name = options
            .name
            .clone()
            .unwrap_or_else(|| format!("the {} {} cassette", cassette.variant, cassette.scenario));
        let state = Arc::new(Mutex::new(State {
            cassette,
            pool,
            options,
            name,
            cursor: 0,
            problems: Vec::new(),
        }));
        let task = tokio::spawn(accept(listener, state.clone()));
        Ok(Self { url, state, task })
    }

    /// The URL to point the client at.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Ok when every call matched and every exchange was served; otherwise an error naming
    /// the cassette, the first unexpected calls and the exchanges never requested.
    pub fn finish(&self) -> Result<()> {
        let state = lock(&self.state);
        let mut problems: Vec<String> = state.problems.iter().take(MAX_PROBLEMS).cloned().collect();
        if state.problems.len() > MAX_PROBLEMS {
            problems.push(format!(
                "{} more unexpected calls",
                state.problems.len() - MAX_PROBLEMS
            ));
        }
        let unused = &state.cassette.exchanges[state.cursor..];
        if let Some(first) = unused.first() {
            problems.push(format!(
                "{} exchanges were never requested, from exchange {} ({})",
                unused.len(),
                state.cursor,
                first.method
            ));
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

fn listen_error(e: std::io::Error) -> ProviderError {
    ProviderError::new(ErrorKind::Config, format!("cannot listen on loopback: {e}"))
}

async fn accept(listener: tokio::net::TcpListener, state: Arc<Mutex<State>>) {
    while let Ok((stream, _)) = listener.accept().await {
        // Small frames (headers, a message, trailers) go out at once, as a service sends
        // them: Nagle's algorithm would hold some back for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(serve(&state, request).await) }
            });
            // A connection the client drops ends here; the calls it made were counted.
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve(
    state: &Mutex<State>,
    request: http::Request<Incoming>,
) -> http::Response<ReplayBody> {
    let path = request.uri().path().to_owned();
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) => Err(format!("the request body broke off: {e}")),
    };
    let answer = lock(state).answer(&path, &parts.headers, body);
    tokio::time::sleep(answer.delay).await;
    let mut status = http::HeaderMap::new();
    status.insert("grpc-status", http::HeaderValue::from(answer.status));
    if let Some(message) = &answer.message {
        let encoded =
            percent_encoding::utf8_percent_encode(message, GRPC_MESSAGE_ESCAPES).to_string();
        if let Ok(value) = http::HeaderValue::from_str(&encoded) {
            status.insert("grpc-message", value);
        }
    }
    // A call that failed before answering is trailers-only, as a gRPC server sends it: the
    // status in the headers, so the client's call itself fails (not its first read).
    let trailers_only = answer.frames.is_empty() && answer.status != 0;
    let frames: Vec<std::result::Result<Frame<Bytes>, Infallible>> = if trailers_only {
        Vec::new()
    } else {
        answer
            .frames
            .into_iter()
            .map(|f| Ok(Frame::data(f)))
            .chain(std::iter::once(Ok(Frame::trailers(status.clone()))))
            .collect()
    };
    let mut response = http::Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    if trailers_only {
        response.headers_mut().extend(status);
    }
    response
}

/// What gRPC percent-encodes in `grpc-message`: controls, `%` and non-ASCII.
pub(crate) const GRPC_MESSAGE_ESCAPES: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b'%');

#[cfg(test)]
mod tests;
