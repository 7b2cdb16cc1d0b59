//! Cassettes: the HTTP exchanges of one scenario on one variant, as YAML, and the
//! normalization that keeps credentials and run-varying values out of them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{ErrorKind, ProviderError, Result, Secret};

/// A recorded (or spec-authored) conversation with a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    /// Where the exchanges come from: `recorded live <date>` or
    /// `authored from <spec>@<version>`.
    pub origin: String,
    /// When the exchanges were written: `YYYY-MM-DD` or an RFC 3339 time; `None` when the
    /// cassette does not say, and then the date is unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "written_date"
    )]
    pub written: Option<String>,
    /// The variant the exchanges belong to.
    pub variant: String,
    /// The scenario that produced them.
    pub scenario: String,
    /// What a fault cassette breaks, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The exchanges, in the order they happened.
    pub exchanges: Vec<Exchange>,
}

/// The longest latency a cassette may record: one hour, in milliseconds.
pub const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// Reads a response's `latency_ms:`, refusing what is not a finite number of milliseconds
/// from 0 to [`MAX_LATENCY_MS`] (replay at the recorded pace sleeps that long).
pub(crate) fn latency<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<f64, D::Error> {
    let ms = f64::deserialize(deserializer)?;
    if ms.is_finite() && (0.0..=MAX_LATENCY_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(serde::de::Error::custom(format!(
            "latency_ms: {} is out of range; a recorded latency is 0 to {MAX_LATENCY_MS} ms (one hour)",
            if ms.abs() >= 1e9 {
                format!("{ms:e}")
            } else {
                ms.to_string()
            }
        )))
    }
}

/// Reads a cassette's `written:`, refusing what is neither `YYYY-MM-DD` nor an RFC 3339 time.
fn written_date<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<String>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if is_date_or_time(&text) {
        Ok(Some(text))
    } else {
        Err(serde::de::Error::custom(format!(
            "written: `{text}` is neither YYYY-MM-DD nor an RFC 3339 time"
        )))
    }
}

/// True for `YYYY-MM-DD` and for RFC 3339 times (`Z` or a numeric offset).
fn is_date_or_time(text: &str) -> bool {
    if text.len() == "YYYY-MM-DD".len() {
        return humantime::parse_rfc3339_weak(&format!("{text}T00:00:00")).is_ok();
    }
    let bytes = text.as_bytes();
    let offset = bytes.len().checked_sub(6).filter(|&at| {
        matches!(bytes[at], b'+' | b'-')
            && bytes[at + 3] == b':'
            && [1, 2, 4, 5].iter().all(|i| bytes[at + i].is_ascii_digit())
    });
    let local = match offset {
        Some(at) => &text[..at],
        None => match text.strip_suffix('Z') {
            Some(local) => local,
            None => return false,
        },
    };
    local.as_bytes().get(10) == Some(&b'T') && humantime::parse_rfc3339_weak(local).is_ok()
}

/// One request and the response it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    /// What the client sent.
    pub request: RecordedRequest,
    /// What came back.
    pub response: RecordedResponse,
    /// Served again for the same request until a later exchange matches (a poll that
    /// keeps answering the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat: bool,
    /// Consecutive exchanges with the same label were in flight together (concurrent
    /// launches, contexts, polls): replay serves them in any order among themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A WebSocket exchange: the request is the upgrade, the response its `101`, and these
    /// are the frames that followed, both ways, in the order they went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<Vec<WsFrame>>,
}

/// One WebSocket frame of a recorded exchange, in its most readable form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WsFrame {
    /// A text frame the client sent holding one JSON document.
    Client(serde_json::Value),
    /// A text frame the server sent holding one JSON document.
    Server(serde_json::Value),
    /// A text frame the client sent that is not JSON.
    ClientText(String),
    /// A text frame the server sent that is not JSON.
    ServerText(String),
    /// The server closed the socket with this code and reason.
    Close {
        /// The close code (1000: done; 4008: Daytona's execution timeout).
        code: u16,
        /// The reason, often empty.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reason: String,
    },
}

impl WsFrame {
    /// A text frame in its readable form: JSON when it parses as JSON.
    pub fn from_text(from_client: bool, text: &str) -> WsFrame {
        match (serde_json::from_str(text), from_client) {
            (Ok(value), true) => WsFrame::Client(value),
            (Ok(value), false) => WsFrame::Server(value),
            (Err(_), true) => WsFrame::ClientText(text.to_owned()),
            (Err(_), false) => WsFrame::ServerText(text.to_owned()),
        }
    }

    /// Whether the client sent this frame.
    pub fn from_client(&self) -> bool {
        matches!(self, WsFrame::Client(_) | WsFrame::ClientText(_))
    }

    /// The text on the wire of a text frame; `None` for a close.
    pub fn text(&self) -> Option<String> {
        match self {
            WsFrame::Client(v) | WsFrame::Server(v) => Some(v.to_string()),
            WsFrame::ClientText(t) | WsFrame::ServerText(t) => Some(t.clone()),
            WsFrame::Close { .. } => None,
        }
    }
}

/// A request as cassettes hold it: canonical path, normalized body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRequest {
    /// HTTP method, upper case.
    pub method: String,
    /// Canonical path with its query (see [`super::Target`]).
    pub path: String,
    /// The headers the client set (credentials as placeholders) and the body's content
    /// type; replay matches those its variant declares.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
}

/// A response as cassettes hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedResponse {
    /// HTTP status.
    pub status: u16,
    /// Selected headers (content type, Retry-After).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
    /// Time from sending the request to the end of the body, in milliseconds, from 0 to
    /// [`MAX_LATENCY_MS`].
    #[serde(default, deserialize_with = "latency")]
    pub latency_ms: f64,
    /// Fault: the connection drops after this many bytes of the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after_bytes: Option<usize>,
}

/// A body in the most readable form its content type allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    /// One JSON document.
    Json(serde_json::Value),
    /// Newline-delimited JSON documents.
    JsonLines(Vec<serde_json::Value>),
    /// Connect protocol envelopes, each a JSON message.
    Connect(Vec<ConnectFrame>),
    /// UTF-8 text.
    Text(String),
    /// Anything else, base64.
    Base64(String),
}

/// One Connect envelope: a flags byte and a JSON message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectFrame {
    /// Envelope flags; bit 2 (`0x02`) marks the end of the stream.
    #[serde(default)]
    pub flags: u8,
    /// The message.
    pub message: serde_json::Value,
}

/// Connect's end-of-stream flag.
pub const CONNECT_END_STREAM: u8 = 0x02;

impl Body {
    /// Reads `bytes` of content type `content_type` into its most readable form.
    pub fn from_bytes(content_type: &str, bytes: &[u8]) -> Body {
        let ct = content_type.to_ascii_lowercase();
        if ct.contains("connect+json")
            && let Ok(frames) = decode_connect(bytes)
        {
            return Body::Connect(frames);
        }
        if let Ok(text) = std::str::from_utf8(bytes) {
            if ct.contains("ndjson") || ct.contains("jsonl") {
                if let Some(lines) = parse_json_lines(text) {
                    return Body::JsonLines(lines);
                }
            } else if ct.contains("json")
                && let Ok(value) = serde_json::from_str(text)
            {
                return Body::Json(value);
            } else if let Some(lines) = parse_json_lines(text)
                && lines.len() > 1
            {
                return Body::JsonLines(lines);
            }
            return Body::Text(text.to_owned());
        }
        Body::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The bytes on the wire.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(match self {
            Body::Json(v) => serde_json::to_vec(v).map_err(protocol)?,
            Body::JsonLines(lines) => {
                let mut out = Vec::new();
                for line in lines {
                    out.extend(serde_json::to_vec(line).map_err(protocol)?);
                    out.push(b'\n');
                }
                out
            }
            Body::Connect(frames) => {
                let mut out = Vec::new();
                for frame in frames {
                    out.extend(encode_connect(frame.flags, &frame.message)?);
                }
                out
            }
            Body::Text(t) => t.as_bytes().to_vec(),
            Body::Base64(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| {
                    ProviderError::new(ErrorKind::Protocol, format!("bad base64 body: {e}"))
                })?,
        })
    }

    /// The content type a body of this form is sent with, when the cassette names none.
    pub fn default_content_type(&self) -> &'static str {
        match self {
            Body::Json(_) => "application/json",
            Body::JsonLines(_) => "application/x-ndjson",
            Body::Connect(_) => "application/connect+json",
            Body::Text(_) => "text/plain; charset=utf-8",
            Body::Base64(_) => "application/octet-stream",
        }
    }

    /// The JSON documents this body carries, for schema checks: one for `json`, each line
    /// for `json_lines`, each message for `connect`, none otherwise.
    pub fn json_documents(&self) -> Vec<&serde_json::Value> {
        match self {
            Body::Json(v) => vec![v],
            Body::JsonLines(lines) => lines.iter().collect(),
            Body::Connect(frames) => frames.iter().map(|f| &f.message).collect(),
            Body::Text(_) | Body::Base64(_) => Vec::new(),
        }
    }
}

fn protocol(e: serde_json::Error) -> ProviderError {
    ProviderError::new(ErrorKind::Protocol, e.to_string())
}

fn parse_json_lines(text: &str) -> Option<Vec<serde_json::Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Encodes one Connect envelope: flags, big-endian length, JSON message.
pub fn encode_connect(flags: u8, message: &serde_json::Value) -> Result<Vec<u8>> {
    let payload = serde_json::to_vec(message).map_err(protocol)?;
    let len = u32::try_from(payload.len())
        .map_err(|_| ProviderError::new(ErrorKind::Protocol, "Connect message over 4 GiB"))?;
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flags);
    out.extend(len.to_be_bytes());
    out.extend(payload);
    Ok(out)
}

/// Decodes a stream of Connect envelopes holding JSON messages.
pub fn decode_connect(mut bytes: &[u8]) -> Result<Vec<ConnectFrame>> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 5 {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "Connect stream ends inside an envelope header ({} bytes left)",
                    bytes.len()
                ),
            ));
        }
        let flags = bytes[0];
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let rest = &bytes[5..];
        if rest.len() < len {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "Connect envelope {} says {len} bytes but {} remain",
                    frames.len(),
                    rest.len()
                ),
            ));
        }
        let message = serde_json::from_slice(&rest[..len]).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("Connect envelope {} is not JSON: {e}", frames.len()),
            )
        })?;
        frames.push(ConnectFrame { flags, message });
        bytes = &rest[len..];
    }
    Ok(frames)
}

impl Cassette {
    /// Reads a cassette file; errors name the file and, for YAML, the line.
    pub fn load(path: &Path) -> Result<Cassette> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot read cassette {}: {e}", path.display()),
            )
        })?;
        Self::parse_named(&text, Some(path))
    }

    /// Parses cassette YAML.
    pub fn parse(text: &str) -> Result<Cassette> {
        Self::parse_named(text, None)
    }

    /// Parses cassette YAML; YAML errors start `file:line:column:` (`file` being `path`,
    /// or `cassette`).
    fn parse_named(text: &str, path: Option<&Path>) -> Result<Cassette> {
        let cassette: Cassette = serde_saphyr::from_str(text).map_err(|e| {
            let file = path.map_or_else(|| "cassette".to_owned(), |p| p.display().to_string());
            let (line, column, message) = crate::yaml::describe(&e);
            if line == 0 {
                return ProviderError::new(
                    ErrorKind::Config,
                    format!("{file}: not a cassette: {message}"),
                );
            }
            ProviderError::new(
                ErrorKind::Config,
                format!("{file}:{line}:{column}: not a cassette: {message}"),
            )
        })?;
        cassette.check().map_err(|mut e| {
            let file = path.map_or_else(|| "cassette".to_owned(), |p| p.display().to_string());
            e.message = format!("{file}: {}", crate::yaml::humane(&e.message));
            e
        })?;
        Ok(cassette)
    }

    /// What YAML cannot say about a cassette: paths, methods, statuses and bodies that work.
    fn check(&self) -> Result<()> {
        let cassette = self;
        for (i, exchange) in cassette.exchanges.iter().enumerate() {
            if !exchange.request.path.starts_with('/') {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "exchange {i}: path `{}` must start with `/`",
                        exchange.request.path
                    ),
                ));
            }
            if reqwest::Method::from_bytes(exchange.request.method.as_bytes()).is_err() {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "exchange {i}: `{}` is not an HTTP method",
                        exchange.request.method
                    ),
                ));
            }
            if reqwest::StatusCode::from_u16(exchange.response.status).is_err() {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "exchange {i}: {} is not an HTTP status",
                        exchange.response.status
                    ),
                ));
            }
            if exchange.websocket.is_some() && exchange.request.method != "GET" {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "exchange {i}: a WebSocket upgrade is a GET, not {}",
                        exchange.request.method
                    ),
                ));
            }
            if let Some(body) = &exchange.response.body {
                body.to_bytes()
                    .map_err(|e| e.context(format!("exchange {i} response body")))?;
            }
        }
        Ok(())
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

/// Values that differ from run to run (the run id, a canary's fingerprint, a marker):
/// cassettes hold a placeholder in their place, and replay puts the same placeholder in
/// what the client sends before comparing.
#[derive(Debug, Default)]
pub struct Volatiles {
    values: Mutex<Vec<(String, String)>>,
}

impl Volatiles {
    /// Registers `value` as volatile under `name`; it becomes `<name>`, or `<name-2>`,
    /// `<name-3>`… when `name` already stands for another value. Returns the placeholder.
    pub fn register(&self, name: &str, value: &str) -> String {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, placeholder)) = values.iter().find(|(v, _)| v == value) {
            return placeholder.clone();
        }
        let taken = values
            .iter()
            .filter(|(_, p)| *p == format!("<{name}>") || p.starts_with(&format!("<{name}-")))
            .count();
        let placeholder = if taken == 0 {
            format!("<{name}>")
        } else {
            format!("<{name}-{}>", taken + 1)
        };
        values.push((value.to_owned(), placeholder.clone()));
        placeholder
    }

    /// Registers `value` as one of a kind whose values all read `<name>`, unnumbered: for
    /// values a client makes up per message and the other side only echoes back (a Jupyter
    /// message's timestamp), so that how many there were never shifts another placeholder.
    pub fn register_alike(&self, name: &str, value: &str) {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        if !values.iter().any(|(v, _)| v == value) {
            values.push((value.to_owned(), format!("<{name}>")));
        }
    }

    /// Registers a credential used in the run (such as a canary handed to a build): it
    /// becomes `<redacted:NAME>`, as credentials do in cassettes.
    pub fn register_secret(&self, secret: &Secret) {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        if !values.iter().any(|(v, _)| v == secret.expose()) {
            values.push((
                secret.expose().to_owned(),
                format!("<redacted:{}>", secret.name()),
            ));
        }
    }

    fn snapshot(&self) -> Vec<(String, String)> {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Replaces credential values with `<redacted:NAME>` and volatile values with their
/// placeholders, in strings and in every string of a JSON document.
#[derive(Debug, Default, Clone)]
pub struct Normalizer {
    replacements: Vec<(String, String)>,
}

impl Normalizer {
    /// A normalizer for `credentials` and the values registered so far in `volatiles`.
    pub fn new(credentials: &[Secret], volatiles: &Volatiles) -> Self {
        let mut replacements: Vec<(String, String)> = credentials
            .iter()
            .filter(|s| !s.expose().is_empty())
            .map(|s| (s.expose().to_owned(), format!("<redacted:{}>", s.name())))
            .collect();
        replacements.extend(
            volatiles
                .snapshot()
                .into_iter()
                .filter(|(v, _)| !v.is_empty()),
        );
        // Longest first, so a value containing another is replaced whole.
        replacements.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Self { replacements }
    }

    /// `text` with every known value replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, placeholder) in &self.replacements {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), placeholder);
            }
        }
        out
    }

    /// `value` with every string normalized (keys included).
    pub fn json(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.text(k), self.json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `body` normalized.
    pub fn body(&self, body: &Body) -> Body {
        match body {
            Body::Json(v) => Body::Json(self.json(v)),
            Body::JsonLines(lines) => Body::JsonLines(lines.iter().map(|v| self.json(v)).collect()),
            Body::Connect(frames) => Body::Connect(
                frames
                    .iter()
                    .map(|f| ConnectFrame {
                        flags: f.flags,
                        message: self.json(&f.message),
                    })
                    .collect(),
            ),
            Body::Text(t) => Body::Text(self.text(t)),
            Body::Base64(b) => self.base64(b),
        }
    }

    /// `frame` normalized.
    pub fn frame(&self, frame: &WsFrame) -> WsFrame {
        match frame {
            WsFrame::Client(v) => WsFrame::Client(self.json(v)),
            WsFrame::Server(v) => WsFrame::Server(self.json(v)),
            WsFrame::ClientText(t) => WsFrame::ClientText(self.text(t)),
            WsFrame::ServerText(t) => WsFrame::ServerText(self.text(t)),
            WsFrame::Close { code, reason } => WsFrame::Close {
                code: *code,
                reason: self.text(reason),
            },
        }
    }

    fn base64(&self, b: &str) -> Body {
        let engine = base64::engine::general_purpose::STANDARD;
        match engine.decode(b).map(String::from_utf8) {
            Ok(Ok(text)) => {
                let normalized = self.text(&text);
                if normalized == text {
                    Body::Base64(b.to_owned())
                } else {
                    Body::Base64(engine.encode(normalized))
                }
            }
            _ => Body::Base64(b.to_owned()),
        }
    }

    /// `body` with each run-varying placeholder put back to this run's value: what a
    /// replayed response says in place of the recording's values. Credentials stay
    /// placeholders.
    pub fn restore(&self, body: &Body) -> Body {
        self.back().body(body)
    }

    /// `frame` with each run-varying placeholder put back, as [`Self::restore`] does.
    pub fn restore_frame(&self, frame: &WsFrame) -> WsFrame {
        self.back().frame(frame)
    }

    /// The normalizer that turns this one's run-varying placeholders back into values
    /// (credentials stay placeholders).
    pub fn back(&self) -> Normalizer {
        Normalizer {
            replacements: self
                .replacements
                .iter()
                .filter(|(_, p)| !p.starts_with("<redacted:"))
                .map(|(v, p)| (p.clone(), v.clone()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_envelopes_round_trip_and_truncation_is_an_error() {
        let message = serde_json::json!({"event": {"data": {"stdout": "MgoK"}}});
        let mut bytes = encode_connect(0, &message).unwrap();
        bytes.extend(encode_connect(CONNECT_END_STREAM, &serde_json::json!({})).unwrap());
        let frames = decode_connect(&bytes).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].message, message);
        assert_eq!(frames[1].flags, CONNECT_END_STREAM);
        let err = decode_connect(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.message.contains("remain"), "{err}");
    }

    #[test]
    fn bodies_take_their_readable_form() {
        assert!(matches!(
            Body::from_bytes("application/json", br#"{"a":1}"#),
            Body::Json(_)
        ));
        assert!(matches!(
            Body::from_bytes("application/x-ndjson", b"{\"a\":1}\n{\"b\":2}\n"),
            Body::JsonLines(ref l) if l.len() == 2
        ));
        assert!(matches!(
            Body::from_bytes("text/plain", b"hi"),
            Body::Text(_)
        ));
        assert!(matches!(
            Body::from_bytes("application/octet-stream", &[0xff, 0x00]),
            Body::Base64(_)
        ));
        let lines = Body::from_bytes("application/x-ndjson", b"{\"a\":1}\n");
        assert_eq!(lines.to_bytes().unwrap(), b"{\"a\":1}\n");
    }

    #[test]
    fn normalizer_redacts_credentials_and_names_volatiles() {
        let volatiles = Volatiles::default();
        assert_eq!(
            volatiles.register("run-id", "20261129T1530Z-abc123"),
            "<run-id>"
        );
        assert_eq!(volatiles.register("marker", "m-1"), "<marker>");
        assert_eq!(volatiles.register("marker", "m-2"), "<marker-2>");
        assert_eq!(volatiles.register("marker", "m-1"), "<marker>");
        // A fake credential, made up for this test.
        let key = Secret::new("E2B_API_KEY", "fake-e2b-key-123");
        let n = Normalizer::new(std::slice::from_ref(&key), &volatiles);
        let out = n.json(&serde_json::json!({
            "labels": {"sandbox-matrix.run": "20261129T1530Z-abc123"},
            "auth": "Bearer fake-e2b-key-123",
            "code": "x = 'm-2'",
        }));
        assert_eq!(
            out,
            serde_json::json!({
                "labels": {"sandbox-matrix.run": "<run-id>"},
                "auth": "Bearer <redacted:E2B_API_KEY>",
                "code": "x = '<marker-2>'",
            })
        );
        assert!(!out.to_string().contains("fake-e2b-key-123"));
    }

    #[test]
    fn alike_values_share_one_placeholder_and_shift_no_other() {
        let volatiles = Volatiles::default();
        volatiles.register_alike("jupyter-date", "2026-11-30T22:00:00.000001Z");
        volatiles.register_alike("jupyter-date", "2026-11-30T22:00:01.000002Z");
        assert_eq!(volatiles.register("marker", "m-1"), "<marker>");
        let normalizer = Normalizer::new(&[], &volatiles);
        assert_eq!(
            normalizer.text("2026-11-30T22:00:01.000002Z 2026-11-30T22:00:00.000001Z m-1"),
            "<jupyter-date> <jupyter-date> <marker>"
        );
        assert_eq!(
            normalizer.text("2026-11-30T22:00:02Z"),
            "2026-11-30T22:00:02Z"
        );
    }

    #[test]
    fn restore_puts_this_runs_values_back_but_never_a_credential() {
        let volatiles = Volatiles::default();
        volatiles.register("marker", "sm-marker-1234");
        // A fake credential, made up for this test.
        volatiles.register_secret(&Secret::new("REGISTRY_TOKEN", "fake-canary-0000"));
        let n = Normalizer::new(&[], &volatiles);
        let body =
            Body::Json(serde_json::json!({"text": "'<marker>'", "p": "<redacted:REGISTRY_TOKEN>"}));
        assert_eq!(
            n.restore(&body),
            Body::Json(
                serde_json::json!({"text": "'sm-marker-1234'", "p": "<redacted:REGISTRY_TOKEN>"})
            )
        );
    }

    #[test]
    fn a_bad_cassette_names_the_exchange() {
        let err = Cassette::parse(
            "origin: authored\nvariant: e2b\nscenario: x\nexchanges:\n  - request: {method: GET, path: nope}\n    response: {status: 200}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("exchange 0"), "{err}");
        let err = Cassette::parse("origin: a\nvariant: e2b\n").unwrap_err();
        assert!(err.to_string().contains("not a cassette"), "{err}");
        // Long values are cut, and parser internals stay out.
        let err = Cassette::parse(&format!(
            "origin: authored\nvariant: e2b\nscenario: x\nexchanges:\n  - request: {{method: GET, path: {}}}\n    response: {{status: 200}}\n",
            "p".repeat(20_000)
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.len() < 700 && err.contains("20000 bytes in all"),
            "{}",
            &err[..300]
        );
        let err =
            Cassette::parse("origin: a\norigin: b\nvariant: e2b\nscenario: x\nexchanges: []\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("cassette:2:1: not a cassette: `origin` is given twice"),
            "{err}"
        );
    }

    #[test]
    fn a_latency_out_of_range_is_refused_at_load_where_it_stands() {
        let cassette = |latency: &str| {
            Cassette::parse(&format!(
                "origin: a\nvariant: e2b\nscenario: x\nexchanges:\n  - request: {{method: GET, path: /}}\n    response:\n      status: 200\n      latency_ms: {latency}\n"
            ))
        };
        assert_eq!(
            cassette("3600000").unwrap().exchanges[0]
                .response
                .latency_ms,
            3_600_000.0
        );
        assert_eq!(cassette("0").unwrap().exchanges[0].response.latency_ms, 0.0);
        for bad in ["1e300", "-1", "3600000.5", ".nan", ".inf", "-.inf"] {
            let err = cassette(bad).unwrap_err().to_string();
            assert!(
                err.contains("cassette:8:19: not a cassette: latency_ms:")
                    && err.contains("out of range"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn written_is_a_date_or_an_rfc3339_time_and_may_be_absent() {
        let header = |written: &str| {
            Cassette::parse(&format!(
                "origin: a\n{written}variant: e2b\nscenario: x\nexchanges: []\n"
            ))
            .map(|c| c.written)
        };
        assert_eq!(header("").unwrap(), None);
        for ok in [
            "2026-11-29",
            "2026-11-29T12:13:14Z",
            "2026-11-29T12:13:14.5+01:00",
        ] {
            assert_eq!(
                header(&format!("written: {ok}\n")).unwrap().as_deref(),
                Some(ok)
            );
        }
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-11-29 12:13:14",
            "2026-11-29T12:13",
        ] {
            let err = header(&format!("written: {bad}\n")).unwrap_err();
            assert!(
                err.to_string().contains("neither YYYY-MM-DD"),
                "{bad}: {err}"
            );
        }
    }
}
