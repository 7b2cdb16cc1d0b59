//! Drift: every cassette authored through an emulator is authored again, now, with the
//! same author code (`author_e2b`, `author_daytona`, `author_modal`, `datalayer_runtimes`)
//! into a temporary folder, and diffed with the committed one. A change to a client or an
//! emulator that alters the traffic fails here until the cassettes are re-authored and
//! committed with it; replay alone would go on passing against the old recording.
//!
//! What the client sends must match whole: every request's method, path, headers and
//! body, every gRPC call's metadata and message, every WebSocket frame it sends, in order.
//! What the emulator answers must match in status, content type and shape (keys and
//! types; the state words a client steers by, by value); the contents come from a real
//! sandbox and a real build, and differ between two authorings.
//!
//! Ignored: ids, tokens and sessions (any string under a key ending so, wherever it
//! appears again), RFC 3339 times, latencies, the cassette's `written`, build-log offsets
//! in a query, and how many times a poll repeats (a block of up to four requests repeated
//! is one), which is a timing too.
//!
//! Cassettes derived by hand from an authored one (e2b's and daytona's `faults/`) are not
//! authored by any emulator and are not compared here.
//!
//! `CI=true cargo test -p sandbox-matrix --test engine drift::`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::json_diff::{diff_values, looks_like_time};
use crate::{author_daytona, author_e2b, author_modal, common, datalayer_runtimes};

/// How many differences a failure lists.
const SHOWN: usize = 40;

pub async fn e2b() {
    let (root, out) = (common::root(), common::out_dir("drift-e2b"));
    author_e2b::record(&root, &out, &["lifecycle", "core-tier"]).await;
    assert_no_drift(
        &root.join("fixtures/cassettes/e2b"),
        &out,
        "cargo test -p sandbox-matrix --test engine author_e2b:: -- --ignored",
    );
}

pub async fn daytona() {
    let (root, out) = (common::root(), common::out_dir("drift-daytona"));
    author_daytona::record(&out, &["lifecycle", "core-tier"]).await;
    author_daytona::record_builds(&out.join("builds")).await;
    assert_no_drift(
        &root.join("fixtures/cassettes/daytona"),
        &out,
        "cargo test -p sandbox-matrix --test engine author_daytona:: -- --ignored",
    );
}

pub async fn modal() {
    let (root, out) = (common::root(), common::out_dir("drift-modal"));
    author_modal::record(&root, &out, &["lifecycle", "core-tier"]).await;
    author_modal::record_faults(&root, &out.join("faults")).await;
    assert_no_drift(
        &root.join("fixtures/cassettes/modal"),
        &out,
        "cargo test -p sandbox-matrix --test engine author_modal:: -- --ignored",
    );
}

pub async fn datalayer_runtimes() {
    let (root, out) = (common::root(), common::out_dir("drift-datalayer-runtimes"));
    for name in ["lifecycle", "core-tier"] {
        datalayer_runtimes::record_scenario(&out, name).await;
    }
    datalayer_runtimes::record_faults(&out.join("faults")).await;
    assert_no_drift(
        &root.join("fixtures/cassettes/datalayer-runtimes"),
        &out,
        "cargo test -p sandbox-matrix --test engine \
         datalayer_runtimes::author_datalayer_runtimes_cassettes -- --ignored",
    );
}

/// Fails, listing where, if any cassette written under `now` differs from the one at the
/// same path under `committed`; `author` is the command that re-authors them.
fn assert_no_drift(committed: &Path, now: &Path, author: &str) {
    let written = cassettes_under(now);
    assert!(
        !written.is_empty(),
        "authoring wrote no cassette under {}",
        now.display()
    );
    let mut report = String::new();
    for relative in &written {
        let before = committed.join(relative);
        if !before.exists() {
            report.push_str(&format!(
                "\n{}: authored now, not committed\n",
                before.display()
            ));
            continue;
        }
        let differences = drift(&load(&before), &load(&now.join(relative)));
        if differences.is_empty() {
            eprintln!("{}: no drift", before.display());
            continue;
        }
        report.push_str(&format!(
            "\n{} ({} differences; authored now: {}):\n",
            before.display(),
            differences.len(),
            now.join(relative).display()
        ));
        for (at, was, is) in differences.iter().take(SHOWN) {
            report.push_str(&format!(
                "  {at}\n    committed: {was}\n    now:       {is}\n"
            ));
        }
    }
    assert!(
        report.is_empty(),
        "the committed cassettes no longer match what the clients and emulators exchange:\n{report}\n\
         If the change is meant, re-author them (`{author}`), read the diff and commit it."
    );
    let _ = std::fs::remove_dir_all(now);
}

/// The cassettes under `dir`, by path relative to it, in order.
fn cassettes_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a readable folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                found.push(path.strip_prefix(dir).expect("under dir").to_path_buf());
            }
        }
    }
    found.sort();
    found
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

/// The differences between two cassettes once ids, times and repeats are set aside. An
/// element one side's answer has and the other's lacks is no drift: how many log lines, or
/// listed things, an answer holds is its content (a shape keeps only the distinct shapes of
/// an array's elements, so an element of a new shape shows up beside the one it replaced).
fn drift(committed: &Value, now: &Value) -> Vec<(String, Value, Value)> {
    let mut found = Vec::new();
    diff_values("", &normalized(committed), &normalized(now), &mut found);
    found.retain(|(at, was, is)| {
        let answer = ["/response/", "/responses/", "/server/"]
            .iter()
            .any(|part| at.contains(part));
        let element = at
            .rsplit('/')
            .next()
            .is_some_and(|last| last.trim_start_matches('~').parse::<usize>().is_ok());
        !(answer && element && (was.is_null() || is.is_null()))
    });
    found
}

/// `cassette` as it is compared: ids and times replaced, each exchange by what the client
/// sent and the shape of what it was answered, and a repeated run of requests (a poll) once.
fn normalized(cassette: &Value) -> Value {
    let mut ids = BTreeMap::new();
    harvest_ids(cassette, None, &mut ids);
    let mut ids: Vec<(String, String)> = ids.into_iter().collect();
    // Longest first, so that a value inside another is replaced after it.
    ids.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
    let exchanges: Vec<Value> = cassette["exchanges"]
        .as_array()
        .map(|all| all.iter().map(|e| exchange(&replace(e, &ids))).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    for key in ["origin", "variant", "scenario", "note"] {
        if let Some(v) = cassette.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    out.insert("exchanges".to_owned(), Value::Array(polled_once(exchanges)));
    Value::Object(out)
}

/// Collects every string of six characters or more under a key ending in `id`, `token` or
/// `session` (any case), with the placeholder it is compared as.
fn harvest_ids(v: &Value, key: Option<&str>, into: &mut BTreeMap<String, String>) {
    match v {
        Value::String(s) if s.len() >= 6 => {
            if let Some(key) = key {
                let lower = key.to_ascii_lowercase();
                if ["id", "token", "session"]
                    .iter()
                    .any(|end| lower.ends_with(end))
                {
                    into.entry(s.clone())
                        .or_insert_with(|| format!("{{{lower}}}"));
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| harvest_ids(i, key, into)),
        Value::Object(map) => map.iter().for_each(|(k, v)| harvest_ids(v, Some(k), into)),
        _ => {}
    }
}

/// `v` with each id replaced by its placeholder and times by `{time}`.
fn replace(v: &Value, ids: &[(String, String)]) -> Value {
    let text = |s: &str| {
        if looks_like_time(s) {
            return "{time}".to_owned();
        }
        let mut out = s.to_owned();
        for (value, placeholder) in ids {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), placeholder);
            }
        }
        out
    };
    match v {
        Value::String(s) => Value::String(text(s)),
        Value::Array(items) => Value::Array(items.iter().map(|i| replace(i, ids)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (text(k), replace(v, ids)))
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

/// One exchange as compared. What the client sent, whole: an HTTP request (its path with
/// no log offset, its headers but the body's length), a gRPC call's method, metadata and
/// message, a WebSocket's client frames in order. What it was answered, by status and
/// shape: an HTTP status and content type, a gRPC status, and the shape of each body,
/// message or server frame (see [`shape`]). The answers' contents come from a real
/// sandbox and a real build (logs, probe output, kernel messages whose channels
/// interleave as they will) and differ between two authorings; their shape is the
/// emulator's.
fn exchange(e: &Value) -> Value {
    let mut out = Map::new();
    let Some(fields) = e.as_object() else {
        return e.clone();
    };
    for (key, v) in fields {
        let view = match key.as_str() {
            "latency_ms" => continue,
            "request" => request(v),
            "response" => response(v),
            "responses" => shapes(v.as_array().map(Vec::as_slice).unwrap_or_default()),
            "websocket" => websocket(v),
            _ => v.clone(),
        };
        out.insert(key.clone(), view);
    }
    Value::Object(out)
}

/// An HTTP request (or a gRPC message, which has neither path nor headers) as compared.
fn request(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(path) = v.get("path").and_then(Value::as_str) {
        v["path"] = Value::String(without_log_offsets(path));
    }
    if let Some(Value::Object(headers)) = v.get_mut("headers") {
        headers.remove("content-length");
    }
    v
}

/// `path` with the value of each query parameter whose name ends in `offset` replaced: a
/// position in a build log, which counts the build's own lines.
fn without_log_offsets(path: &str) -> String {
    let Some((route, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.to_ascii_lowercase().ends_with("offset") => {
                format!("{name}={{offset}}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{route}?{}", pairs.join("&"))
}

/// An HTTP response as compared: status, content type and the body's shape.
fn response(v: &Value) -> Value {
    let mut out = Map::new();
    out.insert("status".to_owned(), v["status"].clone());
    if let Some(kind) = v["headers"].get("content-type") {
        out.insert("content-type".to_owned(), kind.clone());
    }
    out.insert("body".to_owned(), shape(&v["body"], None));
    Value::Object(out)
}

/// A WebSocket's frames as compared: the client's in order, a frame sent again at once
/// (a kernel asked until it answers) once; the server's by their shapes, but for those
/// that answer nothing the client sent (a kernel's own status broadcasts, with an empty
/// `parent_header`), which come as the kernel's start-up timing has them.
fn websocket(v: &Value) -> Value {
    let frames = v.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut client: Vec<Value> = frames
        .iter()
        .filter_map(|f| f.get("client").cloned())
        .collect();
    client.dedup();
    let server: Vec<Value> = frames
        .iter()
        .filter_map(|f| f.get("server").cloned())
        .filter(|f| f.get("parent_header") != Some(&Value::Object(Map::new())))
        .collect();
    serde_json::json!({"client": client, "server": shapes(&server)})
}

/// The distinct shapes of `values`, in order.
fn shapes(values: &[Value]) -> Value {
    distinct_shapes(values, None)
}

/// The distinct shapes of `values`, each read under `key`, in order.
fn distinct_shapes(values: &[Value], key: Option<&str>) -> Value {
    let mut all: Vec<Value> = values.iter().map(|v| shape(v, key)).collect();
    all.sort_by_key(Value::to_string);
    all.dedup();
    Value::Array(all)
}

/// Keys whose string values steer a client (a build's or sandbox's state, a message's
/// type and channel): kept in a shape, where other strings are `"string"`.
const STEERING: &[&str] = &["state", "status", "type", "msg_type", "channel"];

/// What `v` is made of: objects by key, arrays by their elements' distinct shapes, scalars
/// by their type (strings under a [`STEERING`] key by their value).
fn shape(v: &Value, key: Option<&str>) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), shape(v, Some(k))))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => distinct_shapes(items, key),
        Value::String(s) if key.is_some_and(|k| STEERING.contains(&k)) => Value::String(s.clone()),
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => Value::Null,
    }
}

/// `exchanges` with every block of up to four exchanges that repeats the requests of the
/// block before it folded into it, keeping the later answers: a poll asked five times and
/// asked twice are one poll that ended as the last one did.
fn polled_once(mut exchanges: Vec<Value>) -> Vec<Value> {
    let asked = |e: &Value| {
        let mut e = e.clone();
        if let Some(map) = e.as_object_mut() {
            map.remove("response");
            map.remove("responses");
            map.remove("grpc-status");
            map.remove("grpc-message");
        }
        e
    };
    let mut i = 0;
    while i < exchanges.len() {
        let folded = (1..=4).find(|&len| {
            i + 2 * len <= exchanges.len()
                && (0..len).all(|k| asked(&exchanges[i + k]) == asked(&exchanges[i + len + k]))
        });
        match folded {
            Some(len) => {
                exchanges.drain(i..i + len);
                i = i.saturating_sub(4);
            }
            None => i += 1,
        }
    }
    exchanges
}

/// New ids, new latencies, a new `written` and a poll answered twice are no drift; a
/// request that asks for something else is, at the field that changed.
pub fn ids_times_and_repeated_polls_are_not_drift_but_a_changed_request_is() {
    let committed = load(&common::root().join("fixtures/cassettes/e2b/lifecycle.yaml"));
    let text = serde_json::to_string(&committed).expect("JSON");
    let template = committed["exchanges"][0]["response"]["body"]["json"]["templateID"]
        .as_str()
        .expect("the template id the first answer gives")
        .to_owned();
    let mut now: Value = serde_json::from_str(&text.replace(&template, "tplZZ99"))
        .expect("the same cassette with another template id");
    now["written"] = "2027-01-01T00:00:00Z".into();
    let exchanges = now["exchanges"].as_array_mut().expect("exchanges");
    for exchange in exchanges.iter_mut() {
        exchange["latency_ms"] = 987.6.into();
    }
    let poll = exchanges[3].clone();
    exchanges.insert(3, poll);
    assert_eq!(drift(&committed, &now), Vec::new());

    now["exchanges"][0]["request"]["body"]["json"]["cpuCount"] = 4.into();
    let found = drift(&committed, &now);
    assert_eq!(
        found,
        vec![(
            "/exchanges/0/request/body/json/cpuCount".to_owned(),
            Value::from(2),
            Value::from(4)
        )]
    );

    // An answer with a field renamed, or another status, is drift too.
    let mut now = committed.clone();
    let answer = now["exchanges"][0]["response"]["body"]["json"]
        .as_object_mut()
        .expect("the first answer's JSON");
    let id = answer.remove("templateID").expect("its templateID");
    answer.insert("templateId".to_owned(), id);
    now["exchanges"][1]["response"]["status"] = 200.into();
    let at: Vec<String> = drift(&committed, &now).into_iter().map(|d| d.0).collect();
    assert_eq!(
        at,
        [
            "/exchanges/0/response/body/json/templateID",
            "/exchanges/0/response/body/json/templateId",
            "/exchanges/1/response/status",
        ]
    );
}
