//! What an emulator was sent, kept in memory once asked for ([`Exchanges`]): each request's
//! form and the answer's status and JSON, credentials (sent or handed out) redacted as
//! they arrive. The parity
//! tests (`harness/tests/engine/parity/`) compare what the project's client and a
//! provider's official SDK each send for the same intent.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_providers::api::cassette::decode_connect;
use sandbox_providers::api::grpc::decode_frames;
use serde::Serialize;
use serde_json::Value;

use crate::http::{HttpRequest, host_name, lock};

/// Headers whose value is a credential: recorded as `{token}`, an `Authorization` keeping
/// its scheme (and a Basic one its user name, which envd reads).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "x-access-token",
    "e2b-traffic-access-token",
    "x-daytona-api-key",
    "x-modal-token-id",
    "x-modal-token-secret",
    "x-modal-auth-token",
    "x-amz-security-token",
    "cookie",
];

/// One request an emulator answered.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    /// When it arrived, in milliseconds since the Unix epoch (the clock a flow in another
    /// process marks its intents with).
    pub at_ms: u64,
    /// Method, upper case.
    pub method: String,
    /// The host called, lower case, without its port.
    pub host: String,
    /// Path, without the query.
    pub path: String,
    /// Query parameters, in order.
    pub query: Vec<(String, String)>,
    /// Headers, names lower case, credentials redacted.
    pub headers: BTreeMap<String, String>,
    /// What the body was.
    pub body: Body,
    /// The status answered.
    pub status: u16,
    /// The answer's body, when it was JSON.
    pub answer: Value,
}

/// A request body as recorded: JSON is kept, anything else by its kind and size.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    /// No body.
    Empty,
    /// A JSON document.
    Json {
        /// The document.
        value: Value,
    },
    /// Connect protocol envelopes of JSON messages.
    ConnectJson {
        /// Each envelope's message.
        messages: Vec<Value>,
    },
    /// gRPC messages (each frame's message, base64), undecoded: the reader holds the
    /// descriptors.
    Grpc {
        /// Each message.
        messages: Vec<String>,
    },
    /// A gzip stream, with what it unpacks to.
    Gzip {
        /// Bytes sent.
        len: usize,
        /// The unpacked stream: a tar archive or other bytes.
        inner: String,
    },
    /// A plain tar archive.
    Tar {
        /// Bytes sent.
        len: usize,
    },
    /// Other bytes.
    Bytes {
        /// Bytes sent.
        len: usize,
    },
}

impl Body {
    /// What `bytes`, sent as `content_type`, is.
    pub fn of(bytes: &[u8], content_type: &str) -> Self {
        if content_type.starts_with("application/grpc")
            && let Ok(frames) = decode_frames(bytes)
        {
            let messages = frames.iter().map(|m| BASE64.encode(m)).collect();
            return Self::Grpc { messages };
        }
        if bytes.is_empty() {
            return Self::Empty;
        }
        if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
            return Self::Json { value };
        }
        if content_type.starts_with("application/connect+json")
            && let Ok(frames) = decode_connect(bytes)
        {
            let messages = frames.into_iter().map(|f| f.message).collect();
            return Self::ConnectJson { messages };
        }
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut unpacked = Vec::new();
            let inner = match flate2::read::GzDecoder::new(bytes).read_to_end(&mut unpacked) {
                Ok(_) if is_tar(&unpacked) => "tar",
                Ok(_) => "bytes",
                Err(_) => "corrupt",
            };
            return Self::Gzip {
                len: bytes.len(),
                inner: inner.into(),
            };
        }
        if is_tar(bytes) {
            return Self::Tar { len: bytes.len() };
        }
        Self::Bytes { len: bytes.len() }
    }
}

/// Whether `bytes` opens with a ustar header.
fn is_tar(bytes: &[u8]) -> bool {
    bytes.len() >= 262 && &bytes[257..262] == b"ustar"
}

/// `value` of header `name` as recorded: a credential's value is `{token}`.
fn redact(name: &str, value: &str) -> String {
    if !CREDENTIAL_HEADERS.contains(&name) {
        return value.to_owned();
    }
    if name != "authorization" {
        return "{token}".into();
    }
    match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("basic") => {
            let user = BASE64
                .decode(rest.trim())
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
                .map(|d| d.split(':').next().unwrap_or_default().to_owned())
                .unwrap_or_default();
            format!("{scheme} {user}:{{token}}")
        }
        Some((scheme, _)) => format!("{scheme} {{token}}"),
        None => "{token}".into(),
    }
}

/// Credentials an answer hands out, by key: a temporary storage credential's secret and
/// session token (Daytona's push access).
const CREDENTIAL_ANSWER_KEYS: &[&str] = &["secret", "sessionToken"];

/// `answer` as recorded: the value of a top-level [`CREDENTIAL_ANSWER_KEYS`] key is
/// `{token}`.
fn redact_answer(mut answer: Value) -> Value {
    if let Some(map) = answer.as_object_mut() {
        for key in CREDENTIAL_ANSWER_KEYS {
            if let Some(value) = map.get_mut(*key) {
                *value = Value::String("{token}".into());
            }
        }
    }
    answer
}

/// What an emulator was sent since recording began; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Exchanges {
    kept: Arc<Mutex<Vec<Exchange>>>,
}

impl Exchanges {
    /// Keeps `request`, which arrived at `at_ms` ([`now_ms`]), and the `status` and
    /// `answer` it got.
    pub fn keep(&self, at_ms: u64, request: &HttpRequest, status: u16, answer: &[u8]) {
        let host = host_name(&request.host);
        let content_type = request
            .headers
            .get("content-type")
            .map(String::as_str)
            .unwrap_or_default();
        let exchange = Exchange {
            at_ms,
            method: request.method.clone(),
            host,
            path: request.path.clone(),
            query: url::form_urlencoded::parse(request.query.as_bytes())
                .into_owned()
                .collect(),
            headers: request
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), redact(k, v)))
                .collect(),
            body: Body::of(&request.body, content_type),
            status,
            answer: redact_answer(serde_json::from_slice(answer).unwrap_or(Value::Null)),
        };
        lock(&self.kept).push(exchange);
    }

    /// Everything kept so far, in arrival order.
    pub fn all(&self) -> Vec<Exchange> {
        lock(&self.kept).clone()
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_never_kept_but_its_scheme_and_basic_user_are() {
        assert_eq!(redact("authorization", "Bearer abc"), "Bearer {token}");
        let basic = format!("Basic {}", BASE64.encode("root:"));
        assert_eq!(redact("authorization", &basic), "Basic root:{token}");
        assert_eq!(redact("x-api-key", "e2b_fake_key"), "{token}");
        assert_eq!(redact("accept", "application/json"), "application/json");
    }

    #[test]
    fn a_body_is_told_by_what_it_is_not_what_it_claims() {
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_cksum();
        archive
            .append_data(&mut header, "a", &b"x"[..])
            .expect("tar");
        let plain = archive.into_inner().expect("tar");
        assert_eq!(
            Body::of(&plain, "application/gzip"),
            Body::Tar { len: plain.len() }
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &plain).expect("gzip");
        let packed = gz.finish().expect("gzip");
        assert_eq!(
            Body::of(&packed, ""),
            Body::Gzip {
                len: packed.len(),
                inner: "tar".into()
            }
        );
        let mut envelope = vec![0u8];
        envelope.extend(7u32.to_be_bytes());
        envelope.extend(br#"{"a":1}"#);
        assert_eq!(
            Body::of(&envelope, "application/connect+json"),
            Body::ConnectJson {
                messages: vec![serde_json::json!({"a": 1})]
            }
        );
    }
}
