//! Recording gRPC calls: [`GrpcTransport`] wraps the client's channel and, given a
//! [`Recorder`], tees every call (its request, each response frame and the trailers)
//! into a [`GrpcCassette`] in the order the calls were made. Without a recorder it only
//! passes calls through, so live, record and replay run the same client type.
//!
//! Messages are decoded with the descriptor pool and normalized when the cassette is
//! written, so credentials and volatiles registered at any point of the run become
//! placeholders everywhere.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor};
use tonic::codegen::{Service, StdError};

use super::{GrpcCassette, GrpcExchange, GrpcOptions, decode_frames, method, to_json};
use crate::api::cassette::Normalizer;
use crate::{ErrorKind, ProviderError, Result};

/// gRPC's `CANCELLED`: what a call whose stream the client dropped is recorded with.
const STATUS_CANCELLED: i32 = 1;
/// gRPC's `UNKNOWN`: a response that carried no status.
const STATUS_UNKNOWN: i32 = 2;

/// One call as it is being recorded.
struct Call {
    path: String,
    method: Option<MethodDescriptor>,
    metadata: Vec<(String, String)>,
    request: Bytes,
    body: BytesMut,
    status: Option<(i32, Option<String>)>,
    started: std::time::Instant,
    /// From the request to the call's end, once it ended.
    took: Option<std::time::Duration>,
}

struct Recording {
    pool: DescriptorPool,
    options: GrpcOptions,
    calls: Vec<Call>,
}

/// Collects the calls of a run for a cassette. Cheap to clone; clones share the calls.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Recording>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("calls", &self.lock().calls.len())
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder decoding messages with `pool` and normalizing them per `options`.
    pub fn new(pool: DescriptorPool, options: GrpcOptions) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Recording {
                pool,
                options,
                calls: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts recording a call; its index.
    fn begin(&self, path: &str, headers: &http::HeaderMap, request: Bytes) -> usize {
        let mut recording = self.lock();
        let metadata = recording
            .options
            .matched_metadata
            .iter()
            .filter_map(|key| {
                let value = headers.get(key.as_str())?.to_str().ok()?;
                Some((key.clone(), value.to_owned()))
            })
            .collect();
        let method = method(&recording.pool, path).ok();
        recording.calls.push(Call {
            path: path.to_owned(),
            method,
            metadata,
            request,
            body: BytesMut::new(),
            status: None,
            started: std::time::Instant::now(),
            took: None,
        });
        recording.calls.len() - 1
    }

    fn with_call(&self, index: usize, f: impl FnOnce(&mut Call)) {
        if let Some(call) = self.lock().calls.get_mut(index) {
            f(call);
            if call.status.is_some() && call.took.is_none() {
                call.took = Some(call.started.elapsed());
            }
        }
    }

    /// The calls recorded so far as a cassette, normalized. Fails, naming the call, when
    /// one is still in flight or cannot be decoded with the protos.
    pub fn cassette(
        &self,
        origin: impl Into<String>,
        written: Option<String>,
        variant: impl Into<String>,
        scenario: impl Into<String>,
    ) -> Result<GrpcCassette> {
        let recording = self.lock();
        let normalizer =
            Normalizer::new(&recording.options.credentials, &recording.options.volatiles);
        let exchanges = recording
            .calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                call.exchange(&normalizer).map_err(|e| {
                    ProviderError::new(
                        ErrorKind::Protocol,
                        format!("cannot record call {i} ({}): {e}", call.path),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GrpcCassette {
            origin: origin.into(),
            written,
            variant: variant.into(),
            scenario: scenario.into(),
            note: None,
            exchanges,
        })
    }
}

impl Call {
    fn exchange(&self, normalizer: &Normalizer) -> std::result::Result<GrpcExchange, String> {
        let method = self
            .method
            .clone()
            .ok_or("the method is not in the protos")?;
        let Some((status, message)) = self.status.clone() else {
            return Err("the call had not ended".to_owned());
        };
        let decode = |bytes: &[u8], descriptor| {
            DynamicMessage::decode(descriptor, bytes)
                .map(|mut m| {
                    super::rewrite_text(&mut m, &|t| normalizer.text(t));
                    normalizer.json(&to_json(&m))
                })
                .map_err(|e| e.to_string())
        };
        let request = match decode_frames(&self.request)?.as_slice() {
            [one] => decode(one, method.input())?,
            frames => return Err(format!("{} request messages, not one", frames.len())),
        };
        let responses = decode_frames(&self.body)?
            .iter()
            .map(|frame| decode(frame, method.output()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(GrpcExchange {
            method: self.path.clone(),
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), normalizer.text(v)))
                .collect(),
            request,
            responses,
            status,
            message: message.map(|m| normalizer.text(&m)),
            // To the tenth of a millisecond, as HTTP cassettes keep it.
            latency_ms: self
                .took
                .map_or(0.0, |d| (d.as_secs_f64() * 10_000.0).round() / 10.0),
        })
    }
}

/// The status and message a header map (trailers, or the headers of a trailers-only
/// response) carries.
fn status_of(headers: &http::HeaderMap) -> Option<(i32, Option<String>)> {
    let status = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|m| !m.is_empty());
    Some((status, message))
}

/// The channel every Modal client talks through: `inner` (a tonic channel), with every
/// call recorded when there is a [`Recorder`].
#[derive(Clone, Debug)]
pub struct GrpcTransport<S> {
    inner: S,
    recorder: Option<Recorder>,
    /// What a response's [`crate::api::EMULATOR_HEADER`] said, shared by every clone.
    emulator: Arc<OnceLock<String>>,
}

impl<S> GrpcTransport<S> {
    /// Calls go to `inner`, recorded by `recorder` when there is one.
    pub fn new(inner: S, recorder: Option<Recorder>) -> Self {
        Self {
            inner,
            recorder,
            emulator: Arc::default(),
        }
    }

    /// The emulator that answered, as its responses' metadata announced it; the services
    /// never send it.
    pub fn emulator(&self) -> Option<String> {
        self.emulator.get().cloned()
    }
}

/// Keeps the emulator `headers` announce, if they do.
fn note_emulator(emulator: &OnceLock<String>, headers: &http::HeaderMap) {
    if let Some(announced) = headers
        .get(crate::api::EMULATOR_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        let _ = emulator.set(announced.to_owned());
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = std::result::Result<T, StdError>> + Send>>;

impl<S, B> Service<http::Request<tonic::body::Body>> for GrpcTransport<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<StdError>,
    B: Body<Data = Bytes> + Send + 'static,
{
    type Response = http::Response<RecordedBody<B>>;
    type Error = StdError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), StdError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The service polled ready is the one that serves this call; a clone takes its
        // place for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let emulator = self.emulator.clone();
        let Some(recorder) = self.recorder.clone() else {
            return Box::pin(async move {
                let response = inner.call(request).await.map_err(Into::into)?;
                note_emulator(&emulator, response.headers());
                Ok(response.map(|body| RecordedBody {
                    inner: Box::pin(body),
                    call: None,
                }))
            });
        };
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let index = recorder.begin(parts.uri.path(), &parts.headers, bytes.clone());
            let request = http::Request::from_parts(
                parts,
                tonic::body::Body::new(http_body_util::Full::new(bytes)),
            );
            let response = match inner.call(request).await {
                Ok(response) => response,
                Err(e) => {
                    let e: StdError = e.into();
                    recorder.with_call(index, |call| {
                        call.status = Some((STATUS_UNKNOWN, Some(format!("transport: {e}"))));
                    });
                    return Err(e);
                }
            };
            note_emulator(&emulator, response.headers());
            if let Some(status) = status_of(response.headers()) {
                recorder.with_call(index, |call| call.status = Some(status));
            }
            Ok(response.map(|body| RecordedBody {
                inner: Box::pin(body),
                call: Some((recorder, index)),
            }))
        })
    }
}

/// A response body that records its frames and trailers as the client reads them.
pub struct RecordedBody<B> {
    inner: Pin<Box<B>>,
    call: Option<(Recorder, usize)>,
}

impl<B> RecordedBody<B> {
    fn record(&self, f: impl FnOnce(&mut Call)) {
        if let Some((recorder, index)) = &self.call {
            recorder.with_call(*index, f);
        }
    }
}

impl<B> Drop for RecordedBody<B> {
    fn drop(&mut self) {
        // A stream the client stopped reading: what it received, ended as cancelled.
        self.record(|call| {
            call.status.get_or_insert((
                STATUS_CANCELLED,
                Some("the client stopped reading".to_owned()),
            ));
        });
    }
}

impl<B> Body for RecordedBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.record(|call| call.body.extend_from_slice(data));
                } else if let Some(trailers) = frame.trailers_ref() {
                    let status = status_of(trailers).unwrap_or((
                        STATUS_UNKNOWN,
                        Some("trailers without grpc-status".to_owned()),
                    ));
                    this.record(|call| call.status = Some(status));
                }
            }
            Some(Err(_)) => this.record(|call| {
                call.status
                    .get_or_insert((STATUS_UNKNOWN, Some("the response broke off".to_owned())));
            }),
            None => this.record(|call| {
                call.status
                    .get_or_insert((STATUS_UNKNOWN, Some("no grpc-status".to_owned())));
            }),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
