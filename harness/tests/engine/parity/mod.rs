//! Parity with the providers' official SDKs: the project's client and the SDK each
//! perform the same intents against one provider's emulator, which keeps every request
//! (`sandbox_emulators::record`); the requests of each intent are set side by side
//! and every difference fails, unless `fixtures/parity/<provider>.yaml` accepts it with a
//! reason and the source (an SDK or server file, at its version or commit) that shows the
//! service takes our form.
//!
//! Only what must differ is normalized: ids and tokens the emulator handed out (any
//! answer's string under a key ending in `id` or `token`), names and labels each side was
//! given, content hashes each side computes as its cache keys (E2B's `filesHash`,
//! Daytona's `contextHashes`),
//! timestamps, deadlines (`grpc-timeout`, which counts down), credentials (the recorder
//! keeps none) and idempotency keys. Each
//! intent's requests are compared endpoint by endpoint (method, host form, path): an
//! endpoint only one side calls is a difference `request`; for one both call, the first
//! call's query, headers and body are compared field by field. Arrays are aligned on their
//! equal elements, so one step added or changed is one difference, not a shifted tail.
//!
//! `cargo test -p sandbox-matrix --test engine parity::`.

pub mod datalayer_runtimes;
pub mod daytona;
pub mod e2b;
pub mod modal;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use crate::json_diff::{diff_values, looks_like_time};
use sandbox_emulators::record::{Body, Exchange};
use sandbox_providers::{Artifact, BaseImage, BuildRequest, Provider, RunLabels, SandboxState};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Headers of the HTTP exchange rather than of the request's meaning: how the body was
/// framed and the connection kept, and the WebSocket handshake's nonce.
const TRANSPORT_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "accept-encoding",
    "transfer-encoding",
    "keep-alive",
    "te",
    "sec-websocket-key",
];

/// The pause each side leaves around an intent (the SDK flows too), so that a request
/// never falls on a boundary's millisecond.
pub const PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// One intent's span on the wall clock, as the side that performed it marked it.
#[derive(Debug, Clone)]
pub struct Window {
    /// The intent's name, as the parity file names it.
    pub intent: String,
    /// Milliseconds since the epoch when it began and ended.
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
}

impl Window {
    /// The windows an SDK flow printed (`step`, `from_ms`, `to_ms`).
    pub fn from_flow(printed: &[Value]) -> Vec<Window> {
        printed
            .iter()
            .map(|line| Window {
                intent: line["step"].as_str().unwrap_or("?").to_owned(),
                from_ms: line["from_ms"].as_u64().expect("a step's from_ms"),
                to_ms: line["to_ms"].as_u64().expect("a step's to_ms"),
            })
            .collect()
    }
}

/// Runs `action` as intent `name`, marking its span in `windows`, apart from the next by
/// [`PAUSE`] so that no request falls on a boundary's millisecond.
pub async fn intent<T>(
    windows: &mut Vec<Window>,
    name: &str,
    action: impl Future<Output = T>,
) -> T {
    tokio::time::sleep(PAUSE).await;
    let from_ms = sandbox_emulators::record::now_ms();
    let out = action.await;
    windows.push(Window {
        intent: name.to_owned(),
        from_ms,
        to_ms: sandbox_emulators::record::now_ms(),
    });
    tokio::time::sleep(PAUSE).await;
    out
}

/// The build of `environment` from the local contract base, labelled `labels`, with no
/// credential or build secret: what our client builds for the build intent.
pub fn build_request(environment: &std::path::Path, labels: &RunLabels) -> BuildRequest {
    BuildRequest {
        environment_dir: environment.to_owned(),
        base: BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    }
}

/// The JSON body of the first request to `path` by `method` among `exchanges` (a gRPC
/// call's once decoded: `{"messages": [...]}`).
pub fn sent(exchanges: &[Exchange], method: &str, path: &str) -> Value {
    exchanges
        .iter()
        .find(|e| e.method == method && e.path == path)
        .and_then(|e| match &e.body {
            Body::Json { value } => Some(value.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {method} {path} with a JSON body was sent"))
}

/// What our client performs of the intents: every one the variant can, in the order the
/// SDK flows perform theirs.
pub struct OurIntents<'a> {
    /// What it builds; `None`: it launches `launch` as given (a platform's environment).
    pub build: Option<&'a BuildRequest>,
    /// The artifact launched when there is no build.
    pub launch: Option<Artifact>,
    /// The command intents: name, as root, the user `id -un` must print.
    pub commands: &'a [(&'a str, bool, &'a str)],
}

/// Our client performs `plan` against its emulator as one run labelled `labels`, each
/// intent marked; what the intents leave is removed after the last. Fails at the first
/// intent that fails or answers wrong.
pub async fn perform(
    client: &dyn Provider,
    labels: &RunLabels,
    plan: OurIntents<'_>,
) -> Vec<Window> {
    let mut w = Vec::new();
    let log = |line: &str| eprintln!("  {line}");
    let artifact = match plan.build {
        Some(request) => intent(&mut w, "build", client.build(request, &log))
            .await
            .expect("our client builds the parity environment"),
        None => plan.launch.expect("an artifact to launch"),
    };
    let (sandbox, _) = intent(&mut w, "create", client.launch(&artifact, labels))
        .await
        .expect("our client creates a sandbox");
    let (code, _) = intent(&mut w, "run-1+1", client.run_code(&sandbox, "1+1"))
        .await
        .expect("our client runs 1+1");
    assert_eq!(code.result.as_deref(), Some("2"), "{code:?}");
    let id = ["id".to_owned(), "-un".to_owned()];
    for &(name, root, user) in plan.commands {
        let out = intent(&mut w, name, client.exec(&sandbox, &id, root))
            .await
            .expect("our client runs a command");
        assert_eq!(out.stdout.trim(), user, "{name}: {out:?}");
    }
    if plan.build.is_some() {
        // Outside any intent: the parity environment's RUN wrote who ran it, which must be
        // the base image's user, as a Docker build runs it.
        let file = ["cat".to_owned(), "/home/datalayer/built-by".to_owned()];
        let who = client
            .exec(&sandbox, &file, false)
            .await
            .expect("our client reads who ran the RUN");
        assert_eq!(
            who.stdout.trim(),
            sandbox_contract::IDENTITY.user,
            "the parity environment's RUN did not run as a Docker build runs it: {who:?}"
        );
    }
    if client.capabilities().restart != sandbox_providers::RestartKind::Unsupported {
        intent(&mut w, "restart", client.restart(&sandbox))
            .await
            .expect("our client restarts the code channel");
    }
    let running = intent(&mut w, "state", client.sandbox_state(&sandbox))
        .await
        .expect("our client asks for the sandbox's state");
    // Every cloud variant says what became of its sandbox: `None` (cannot tell) fails here.
    assert!(
        matches!(running, Some(SandboxState::Running)),
        "a running sandbox said {running:?}"
    );
    let listed = intent(&mut w, "list", client.list_resources(labels))
        .await
        .expect("our client lists by label");
    let resource = listed
        .iter()
        .find(|r| r.id == sandbox.0)
        .unwrap_or_else(|| panic!("{sandbox:?} is not among {listed:?}"))
        .clone();
    intent(&mut w, "delete", client.delete_resource(&resource))
        .await
        .expect("our client deletes the sandbox");
    let ended = intent(&mut w, "state-deleted", client.sandbox_state(&sandbox))
        .await
        .expect("our client asks for a deleted sandbox's state");
    assert!(
        matches!(ended, Some(SandboxState::Stopped { .. })),
        "a deleted sandbox said {ended:?}"
    );
    for left in client.list_resources(labels).await.unwrap_or_default() {
        let _ = client.delete_resource(&left).await;
    }
    if let Some(image) = client.artifact_resource(&artifact) {
        let _ = client.delete_resource(&image).await;
    }
    w
}

/// A regression put back into our requests: what it is, and the change to one exchange
/// (whether it touched it).
pub type Regression<'a> = (&'a str, &'a dyn Fn(&mut Exchange) -> bool);

/// Fails unless `parity` accepts every difference between `ours` and `theirs` (for the
/// intents both perform) and no more; then puts each of `regressions` back into our
/// requests and fails unless the check catches it.
pub fn judge(parity: &ParityFile, ours: &Side, theirs: &Side, regressions: &[Regression<'_>]) {
    let skipped: Vec<&str> = parity
        .not_applicable
        .iter()
        .map(|n| n.intent.as_str())
        .collect();
    let found = compare(ours, theirs, &skipped);
    for d in &found {
        eprintln!("{d}");
    }
    parity.assert_holds(&found);
    for (what, regress) in regressions {
        let mut regressed = Side {
            exchanges: ours.exchanges.clone(),
            windows: ours.windows.clone(),
            given: ours.given.clone(),
        };
        let touched = regressed
            .exchanges
            .iter_mut()
            .map(regress)
            .filter(|t| *t)
            .count();
        assert!(touched > 0, "our requests hold no place for {what}");
        let (unaccepted, _) = parity.judge(&compare(&regressed, theirs, &skipped));
        assert!(
            !unaccepted.is_empty(),
            "{what} in our requests passes the parity check"
        );
        for d in &unaccepted {
            eprintln!("{what} fails parity: {d}");
        }
    }
}

/// What one side sent, with the values it alone was given (its names and labels), each
/// with the placeholder it is compared as.
#[derive(Debug)]
pub struct Side {
    /// Every request the emulator kept while the side ran.
    pub exchanges: Vec<Exchange>,
    /// Its intents.
    pub windows: Vec<Window>,
    /// Values only this side was given, and their placeholders.
    pub given: Vec<(String, String)>,
}

/// One difference between the two sides' requests for an intent.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The intent.
    pub intent: String,
    /// The endpoint: method, host form and path, normalized.
    pub request: String,
    /// Where: `request` (only one side calls it), `status` (the answer to the first
    /// call), `query <name>`, `header <name>`, `body<pointer>`.
    pub at: String,
    /// What ours sends there (null: nothing).
    pub ours: Value,
    /// What the SDK sends there (null: nothing).
    pub theirs: Value,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {} at {}: ours {}, theirs {}",
            self.intent, self.request, self.at, self.ours, self.theirs
        )
    }
}

/// `fixtures/parity/<provider>.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParityFile {
    /// The provider.
    pub provider: String,
    /// The SDK the differences were found against, with its version.
    pub sdk: String,
    /// Intents the SDK cannot perform here, with why.
    #[serde(default)]
    pub not_applicable: Vec<NotApplicable>,
    /// Differences the service is shown to accept.
    #[serde(default)]
    pub accepted: Vec<Accepted>,
}

/// An intent not compared.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotApplicable {
    /// The intent.
    pub intent: String,
    /// Why the SDK cannot perform it here.
    pub reason: String,
}

/// An accepted difference: where it is, the values on each side, why and the source.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accepted {
    /// The intent; absent: every intent.
    pub intent: Option<String>,
    /// The endpoint; absent: every endpoint.
    pub request: Option<String>,
    /// Where in it.
    pub at: String,
    /// What ours sends (null: nothing).
    pub ours: Value,
    /// What the SDK sends (null: nothing); absent: whatever it sends, for what differs by
    /// the machine the SDK runs on (its Python version, say).
    #[serde(default, deserialize_with = "present")]
    pub theirs: Option<Value>,
    /// Why ours differs.
    pub reason: String,
    /// The SDK or server file, at its version or commit, showing the service takes ours.
    pub source: String,
}

impl Accepted {
    fn covers(&self, d: &Difference) -> bool {
        self.intent.as_ref().is_none_or(|i| *i == d.intent)
            && self.request.as_ref().is_none_or(|r| *r == d.request)
            && self.at == d.at
            && self.ours == d.ours
            && self.theirs.as_ref().is_none_or(|t| *t == d.theirs)
    }
}

/// A field given, null included, as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl ParityFile {
    /// Reads `fixtures/parity/<provider>.yaml` under `root`.
    pub fn load(root: &Path, provider: &str) -> Self {
        let path = root.join(format!("fixtures/parity/{provider}.yaml"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let file: Self = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a parity file: {e}", path.display()));
        assert_eq!(file.provider, provider, "{}", path.display());
        for entry in &file.not_applicable {
            assert!(
                !entry.reason.trim().is_empty(),
                "{}: intent {} is not applicable without a reason",
                path.display(),
                entry.intent
            );
        }
        for entry in &file.accepted {
            assert!(
                !entry.reason.trim().is_empty() && !entry.source.trim().is_empty(),
                "{}: every accepted difference names its reason and source: {entry:?}",
                path.display()
            );
        }
        file
    }

    /// The differences no entry accepts, and the entries that accept none of `found`
    /// (stale: the file must stay true).
    pub fn judge<'a>(&'a self, found: &[Difference]) -> (Vec<Difference>, Vec<&'a Accepted>) {
        let unaccepted = found
            .iter()
            .filter(|d| !self.accepted.iter().any(|a| a.covers(d)))
            .cloned()
            .collect();
        let stale = self
            .accepted
            .iter()
            .filter(|a| !found.iter().any(|d| a.covers(d)))
            .collect();
        (unaccepted, stale)
    }

    /// Fails unless every difference in `found` is accepted and every entry still is one.
    pub fn assert_holds(&self, found: &[Difference]) {
        let (unaccepted, stale) = self.judge(found);
        let listed = |ds: &[Difference]| {
            ds.iter()
                .map(|d| format!("  {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(
            unaccepted.is_empty() && stale.is_empty(),
            "parity with {} fails.\n{} difference(s) fixtures/parity/{}.yaml does not accept:\n{}\n{} entr(ies) it accepts that no longer differ:\n{}",
            self.sdk,
            unaccepted.len(),
            self.provider,
            listed(&unaccepted),
            stale.len(),
            stale
                .iter()
                .map(|a| format!("  {a:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The differences between `ours` and `theirs`, intent by intent, for every intent both
/// performed and `skip` does not name.
pub fn compare(ours: &Side, theirs: &Side, skip: &[&str]) -> Vec<Difference> {
    let placeholders = Placeholders::of(&[ours, theirs]);
    let mut found = Vec::new();
    for window in &ours.windows {
        if skip.contains(&window.intent.as_str()) {
            continue;
        }
        let Some(their_window) = theirs.windows.iter().find(|w| w.intent == window.intent) else {
            panic!(
                "the SDK did not perform intent {} (nor does the parity file say it cannot)",
                window.intent
            );
        };
        let mine = placeholders.endpoints(ours, window);
        let their = placeholders.endpoints(theirs, their_window);
        let keys: BTreeSet<&String> = mine.keys().chain(their.keys()).collect();
        for key in keys {
            let difference = |at: String, ours: Value, theirs: Value| Difference {
                intent: window.intent.clone(),
                request: key.clone(),
                at,
                ours,
                theirs,
            };
            match (mine.get(key), their.get(key)) {
                (Some(a), Some(b)) => {
                    for (at, o, t) in diff_requests(a, b) {
                        found.push(difference(at, o, t));
                    }
                }
                (a, b) => found.push(difference(
                    "request".into(),
                    json!(a.is_some()),
                    json!(b.is_some()),
                )),
            }
        }
    }
    found
}

/// A request as compared: query, headers and body, every value normalized.
#[derive(Debug, Clone)]
struct Normalized {
    /// The status the emulator answered (a gRPC call's HTTP status is always 200).
    status: u16,
    query: BTreeMap<String, Value>,
    headers: BTreeMap<String, Value>,
    body: Value,
}

/// The values each side was handed by the emulator or by the test, and what they are
/// compared as.
struct Placeholders {
    /// Longest first, so that a value inside another is replaced after it.
    values: Vec<(String, String)>,
}

impl Placeholders {
    fn of(sides: &[&Side]) -> Self {
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        for side in sides {
            for (value, placeholder) in &side.given {
                values.insert(value.clone(), placeholder.clone());
            }
            for exchange in &side.exchanges {
                harvest(&exchange.answer, None, &mut values);
                if let Body::Json { value } = &exchange.body {
                    harvest_hashes(value, None, &mut values);
                }
            }
        }
        let mut values: Vec<(String, String)> = values.into_iter().collect();
        values.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        Self { values }
    }

    fn text(&self, s: &str) -> String {
        if looks_like_time(s) {
            return "{time}".into();
        }
        let mut out = s.to_owned();
        for (value, placeholder) in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), placeholder);
            }
        }
        out
    }

    fn value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.value(i)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.text(k), self.value(v)))
                    .collect::<Map<_, _>>(),
            ),
            other => other.clone(),
        }
    }

    /// The first request to each endpoint within `window`, by endpoint.
    fn endpoints(&self, side: &Side, window: &Window) -> BTreeMap<String, Normalized> {
        let mut found = BTreeMap::new();
        for e in side
            .exchanges
            .iter()
            .filter(|e| e.at_ms >= window.from_ms && e.at_ms <= window.to_ms)
        {
            let key = format!("{} {}{}", e.method, self.text(&e.host), self.text(&e.path));
            found.entry(key).or_insert_with(|| self.normalize(e));
        }
        found
    }

    fn normalize(&self, e: &Exchange) -> Normalized {
        // A query parameter named as an id is one a client chose (a session's, say).
        let query = e
            .query
            .iter()
            .map(|(k, v)| {
                let value = if k.to_ascii_lowercase().ends_with("id") {
                    Value::String(format!("{{{k}}}"))
                } else {
                    self.query_value(v)
                };
                (k.clone(), value)
            })
            .collect();
        let headers = e
            .headers
            .iter()
            .filter(|(k, _)| !TRANSPORT_HEADERS.contains(&k.as_str()))
            .map(|(k, v)| {
                let v = if k.contains("idempotency") {
                    "{key}".into()
                } else if k == "grpc-timeout" {
                    // A deadline counts down: whether one is sent is what compares.
                    "{deadline}".into()
                } else if k.contains("timestamp") {
                    "{time}".into()
                } else {
                    self.text(v)
                };
                (k.clone(), Value::String(v))
            })
            .collect();
        let body = match &e.body {
            Body::Json { value } => self.value(value),
            Body::ConnectJson { messages } => json!({"connect": self.value(&json!(messages))}),
            // Bytes other than JSON by what they are: two archives of the same files
            // differ in size with their packer.
            Body::Gzip { inner, .. } => json!({"kind": "gzip", "inner": inner}),
            Body::Tar { .. } => json!({"kind": "tar"}),
            Body::Bytes { .. } => json!({"kind": "bytes"}),
            // A side's test decodes gRPC messages with the published descriptors first.
            Body::Grpc { messages } => json!({"kind": "grpc", "undecoded": messages.len()}),
            Body::Empty => Value::Null,
        };
        Normalized {
            status: e.status,
            query,
            headers,
            body,
        }
    }

    /// A query value, JSON inside it compared as JSON.
    fn query_value(&self, v: &str) -> Value {
        match serde_json::from_str::<Value>(v) {
            Ok(value @ (Value::Object(_) | Value::Array(_))) => self.value(&value),
            _ => Value::String(self.text(v)),
        }
    }
}

/// Collects the string values under keys ending in `id` or `token` (any case) in an
/// emulator's answer: what it handed out.
fn harvest(v: &Value, key: Option<&str>, into: &mut BTreeMap<String, String>) {
    match v {
        Value::String(s) if s.len() >= 6 => {
            if let Some(key) = key {
                let lower = key.to_ascii_lowercase();
                if lower.ends_with("id") || lower.ends_with("token") {
                    into.entry(s.clone())
                        .or_insert_with(|| format!("{{{key}}}"));
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| harvest(i, key, into)),
        Value::Object(map) => map.iter().for_each(|(k, v)| harvest(v, Some(k), into)),
        _ => {}
    }
}

/// Collects the string values under keys ending in `hash` or `hashes` in a request:
/// content hashes a client computes as its own cache keys (E2B's `filesHash`, Daytona's
/// `contextHashes`), which the service takes as opaque strings.
fn harvest_hashes(v: &Value, key: Option<&str>, into: &mut BTreeMap<String, String>) {
    match v {
        Value::String(s) if s.len() >= 16 => {
            let hash = |k: &&str| {
                let k = k.to_ascii_lowercase();
                k.ends_with("hash") || k.ends_with("hashes")
            };
            if let Some(key) = key.filter(hash) {
                into.entry(s.clone())
                    .or_insert_with(|| format!("{{{key}}}"));
            }
        }
        Value::Array(items) => items.iter().for_each(|i| harvest_hashes(i, key, into)),
        Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| harvest_hashes(v, Some(k), into)),
        _ => {}
    }
}

/// Differences between two calls of one endpoint: `(at, ours, theirs)`.
fn diff_requests(a: &Normalized, b: &Normalized) -> Vec<(String, Value, Value)> {
    let mut found = Vec::new();
    if a.status != b.status {
        found.push(("status".to_owned(), json!(a.status), json!(b.status)));
    }
    for (what, x, y) in [
        ("query", &a.query, &b.query),
        ("header", &a.headers, &b.headers),
    ] {
        let names: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
        for name in names {
            let (o, t) = (x.get(name), y.get(name));
            if o != t {
                found.push((
                    format!("{what} {name}"),
                    o.cloned().unwrap_or(Value::Null),
                    t.cloned().unwrap_or(Value::Null),
                ));
            }
        }
    }
    diff_values("body", &a.body, &b.body, &mut found);
    found
}
