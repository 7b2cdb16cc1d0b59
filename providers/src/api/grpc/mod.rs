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
mod tests {
    use super::*;
    use crate::modal::proto::client::modal_client_client::ModalClientClient;
    use crate::modal::proto::client::{
        AppGetOrCreateRequest, ImageJoinStreamingRequest, SandboxTerminateRequest,
    };
    use crate::modal::proto::descriptors;
    use futures_util::StreamExt as _;

    // A fake credential, never a real one.
    const FAKE_SECRET: &str = "sm-fake-modal-token-secret";

    const CASSETTE: &str = r#"
origin: authored by hand from the subset api.proto, for the replay server's tests
written: 2026-12-01
variant: modal
scenario: replay-unit
exchanges:
- method: /modal.client.ModalClient/AppGetOrCreate
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {app_name: sandbox-matrix, object_creation_type: OBJECT_CREATION_TYPE_CREATE_IF_MISSING}
  responses: [{app_id: ap-1}]
  grpc-status: 0
- method: /modal.client.ModalClient/ImageJoinStreaming
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {image_id: im-1, timeout: 55}
  responses:
  - {task_logs: [{data: "Step 1\n", file_descriptor: FILE_DESCRIPTOR_STDOUT}], entry_id: "1"}
  - {result: {status: GENERIC_STATUS_SUCCESS}, eof: true}
  grpc-status: 0
- method: /modal.client.ModalClient/SandboxTerminate
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {sandbox_id: sb-1}
  grpc-status: 14
  grpc-message: "try again: 50% busy"
"#;

    async fn server() -> (
        GrpcReplayServer,
        ModalClientClient<tonic::transport::Channel>,
    ) {
        let pool = descriptors().clone();
        let cassette = GrpcCassette::parse(CASSETTE, &pool).expect("the test cassette parses");
        let options = GrpcOptions {
            credentials: vec![Secret::new("MODAL_TOKEN_SECRET", FAKE_SECRET)],
            matched_metadata: vec!["x-modal-token-secret".to_owned()],
            ..GrpcOptions::default()
        };
        let server = GrpcReplayServer::start(cassette, pool, options)
            .await
            .expect("replay server starts");
        let channel = tonic::transport::Channel::from_shared(server.url())
            .expect("a URL")
            .connect()
            .await
            .expect("connects to the replay server");
        (server, ModalClientClient::new(channel))
    }

    fn authed<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "x-modal-token-secret",
            FAKE_SECRET.parse().expect("ASCII metadata"),
        );
        request
    }

    fn app_request(name: &str) -> AppGetOrCreateRequest {
        AppGetOrCreateRequest {
            app_name: name.to_owned(),
            object_creation_type: 1,
            ..Default::default()
        }
    }

    async fn join<T>(client: &mut ModalClientClient<T>) -> Vec<String>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<tonic::codegen::StdError>,
        T::ResponseBody: hyper::body::Body<Data = Bytes> + Send + 'static,
        <T::ResponseBody as hyper::body::Body>::Error: Into<tonic::codegen::StdError> + Send,
    {
        let mut stream = client
            .image_join_streaming(authed(ImageJoinStreamingRequest {
                image_id: "im-1".to_owned(),
                timeout: 55.0,
                ..Default::default()
            }))
            .await
            .expect("the stream starts")
            .into_inner();
        let mut seen = Vec::new();
        while let Some(frame) = stream.next().await {
            let frame = frame.expect("a recorded frame");
            seen.extend(frame.task_logs.into_iter().map(|l| l.data));
            if frame.eof {
                seen.push(format!("eof {:?}", frame.result.map(|r| r.status)));
            }
        }
        seen
    }

    #[tokio::test]
    async fn the_recorded_calls_replay_with_streams_and_trailers() {
        let (server, mut client) = server().await;
        let app = client
            .app_get_or_create(authed(app_request("sandbox-matrix")))
            .await
            .expect("recorded answer");
        assert_eq!(app.into_inner().app_id, "ap-1");
        assert_eq!(join(&mut client).await, ["Step 1\n", "eof Some(1)"]);
        let status = client
            .sandbox_terminate(authed(SandboxTerminateRequest {
                sandbox_id: "sb-1".to_owned(),
            }))
            .await
            .expect_err("the recording ends in Unavailable");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "try again: 50% busy");
        server.finish().expect("every exchange served as recorded");
    }

    #[tokio::test]
    async fn recording_the_calls_writes_the_cassette_they_came_from() {
        let (server, _) = server().await;
        let recorder = Recorder::new(
            descriptors().clone(),
            GrpcOptions {
                credentials: vec![Secret::new("MODAL_TOKEN_SECRET", FAKE_SECRET)],
                matched_metadata: vec!["x-modal-token-secret".to_owned()],
                ..GrpcOptions::default()
            },
        );
        let channel = tonic::transport::Channel::from_shared(server.url())
            .expect("a URL")
            .connect()
            .await
            .expect("connects to the replay server");
        let mut client =
            ModalClientClient::new(GrpcTransport::new(channel, Some(recorder.clone())));
        client
            .app_get_or_create(authed(app_request("sandbox-matrix")))
            .await
            .expect("recorded answer");
        assert_eq!(join(&mut client).await.len(), 2);
        client
            .sandbox_terminate(authed(SandboxTerminateRequest {
                sandbox_id: "sb-1".to_owned(),
            }))
            .await
            .expect_err("Unavailable");
        server.finish().expect("the calls went as recorded");
        let source = GrpcCassette::parse(CASSETTE, descriptors()).expect("parses");
        let recorded = recorder
            .cassette(
                source.origin.clone(),
                source.written.clone(),
                "modal",
                "replay-unit",
            )
            .expect("every call ended");
        let text = serde_saphyr::to_string(&recorded).expect("YAML");
        assert!(!text.contains(FAKE_SECRET), "{text}");
        let mut reread = GrpcCassette::parse(&text, descriptors()).expect("the recording parses");
        // Each call's latency is kept; the hand-written source has none.
        for exchange in &mut reread.exchanges {
            assert!(exchange.latency_ms < 10_000.0, "{}", exchange.latency_ms);
            exchange.latency_ms = 0.0;
        }
        assert_eq!(reread, source);
    }

    #[test]
    fn a_latency_out_of_range_is_refused_at_load() {
        let text = CASSETTE.replace(
            "  responses: [{app_id: ap-1}]\n",
            "  responses: [{app_id: ap-1}]\n  latency_ms: 1e300\n",
        );
        let error = GrpcCassette::parse(&text, descriptors()).expect_err("refused");
        assert!(
            error
                .to_string()
                .contains("latency_ms: 1e300 is out of range"),
            "{error}"
        );
    }

    #[test]
    fn text_inside_bytes_becomes_a_placeholder_and_back() {
        let pool = descriptors();
        let output = pool
            .get_message_by_name("modal.task_command_router.TaskExecStdioReadResponse")
            .expect("the stdio message");
        let mut message = from_json(
            output,
            &serde_json::json!({ "data": "eyJtIjogInNtLW1hcmtlci0xIn0=" }),
        )
        .expect("a message");
        let volatiles = Volatiles::default();
        volatiles.register("marker", "sm-marker-1");
        let normalizer = Normalizer::new(&[], &volatiles);
        rewrite_text(&mut message, &|t| normalizer.text(t));
        let json = to_json(&message);
        let data = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            json["data"].as_str().expect("bytes as base64"),
        )
        .expect("base64");
        assert_eq!(String::from_utf8_lossy(&data), r#"{"m": "<marker>"}"#);
        // A later run's value goes back in where the recording holds the placeholder.
        let later = Volatiles::default();
        later.register("marker", "sm-marker-2");
        let back = Normalizer::new(&[], &later).back();
        rewrite_text(&mut message, &|t| back.text(t));
        let data = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            to_json(&message)["data"].as_str().expect("bytes"),
        )
        .expect("base64");
        assert_eq!(String::from_utf8_lossy(&data), r#"{"m": "sm-marker-2"}"#);
    }

    #[tokio::test]
    async fn a_different_request_field_fails_the_call_and_the_replay() {
        let (server, mut client) = server().await;
        let status = client
            .app_get_or_create(authed(app_request("another-app")))
            .await
            .expect_err("not the recorded request");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let error = server.finish().expect_err("the replay fails").to_string();
        assert!(
            error.contains(
                "exchange 0 (/modal.client.ModalClient/AppGetOrCreate): the request differs"
            ),
            "{error}"
        );
        assert!(error.contains("another-app"), "{error}");
    }

    #[tokio::test]
    async fn a_call_out_of_order_fails() {
        let (server, mut client) = server().await;
        let status = client
            .sandbox_terminate(authed(SandboxTerminateRequest {
                sandbox_id: "sb-1".to_owned(),
            }))
            .await
            .expect_err("exchange 0 is AppGetOrCreate");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let error = server.finish().expect_err("the replay fails").to_string();
        assert!(error.contains("expected exchange 0"), "{error}");
    }

    #[tokio::test]
    async fn a_different_credential_fails_by_its_metadata() {
        let (server, mut client) = server().await;
        let mut request = tonic::Request::new(app_request("sandbox-matrix"));
        request.metadata_mut().insert(
            "x-modal-token-secret",
            // A fake credential, never a real one.
            "sm-fake-another-secret".parse().expect("ASCII metadata"),
        );
        client
            .app_get_or_create(request)
            .await
            .expect_err("not the recorded credential");
        let error = server.finish().expect_err("the replay fails").to_string();
        assert!(error.contains("metadata `x-modal-token-secret`"), "{error}");
        assert!(!error.contains(FAKE_SECRET), "{error}");
    }

    #[tokio::test]
    async fn exchanges_never_requested_fail_the_replay() {
        let (server, mut client) = server().await;
        client
            .app_get_or_create(authed(app_request("sandbox-matrix")))
            .await
            .expect("recorded answer");
        let error = server
            .finish()
            .expect_err("two exchanges unused")
            .to_string();
        assert!(
            error.contains("2 exchanges were never requested, from exchange 1 (/modal.client.ModalClient/ImageJoinStreaming)"),
            "{error}"
        );
    }

    #[test]
    fn cassettes_with_unknown_methods_fields_or_statuses_are_refused() {
        let pool = descriptors();
        let bad = [
            (
                CASSETTE.replace("AppGetOrCreate\n", "AppGetOrMake\n"),
                "has no method `AppGetOrMake`",
            ),
            (
                CASSETTE.replace("{app_id: ap-1}", "{app_ident: ap-1}"),
                "response 0: not a modal.client.AppGetOrCreateResponse",
            ),
            (
                CASSETTE.replace("grpc-status: 14", "grpc-status: 17"),
                "grpc-status 17 is not a gRPC status code",
            ),
            (
                CASSETTE.replace(
                    "responses: [{app_id: ap-1}]",
                    "responses: [{app_id: a}, {app_id: b}]",
                ),
                "a unary method answers once",
            ),
        ];
        for (text, expected) in bad {
            let error = GrpcCassette::parse(&text, pool)
                .expect_err("a broken cassette")
                .to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn frames_round_trip_and_truncation_is_an_error() {
        let mut body = encode_frame(b"abc").to_vec();
        body.extend_from_slice(&encode_frame(b""));
        assert_eq!(
            decode_frames(&body),
            Ok(vec![Bytes::from_static(b"abc"), Bytes::new()])
        );
        assert!(decode_frames(&body[..6]).is_err());
        assert!(decode_frames(&[1, 0, 0, 0, 0]).is_err());
    }
}
