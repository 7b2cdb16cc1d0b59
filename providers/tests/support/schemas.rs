//! A variant's JSON Schemas (`fixtures/schemas/<variant>/`) and their index, shared by the
//! tests that check cassette bodies and the requests the clients send.
// Each test binary that includes this uses its own subset of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandbox_providers::api::cassette::RecordedRequest;
use sandbox_providers::api::{Body, WsFrame};
use serde::Deserialize;
use serde_json::Value;

/// Which schema applies to a call's request, and to its response by status.
#[derive(Debug, Deserialize)]
pub struct Endpoint {
    /// The request body's schema file, or none when the request has no JSON body.
    pub request: Option<String>,
    /// The response body's schema file by status; null for no JSON body.
    pub response: BTreeMap<String, Option<String>>,
    /// For a WebSocket route, the schemas of its JSON frames.
    #[serde(default)]
    pub frames: Option<Frames>,
}

/// The schema files of a WebSocket route's frames, by who sends them.
#[derive(Debug, Deserialize)]
pub struct Frames {
    /// Each JSON frame the client sends.
    pub client: String,
    /// Each JSON frame the server sends.
    pub server: String,
}

/// The compiled schemas of one variant and its `index.json`.
pub struct SchemaSet {
    /// The folder they were read from.
    pub dir: PathBuf,
    index: BTreeMap<String, Endpoint>,
    compiled: boon::Schemas,
    ids: BTreeMap<String, boon::SchemaIndex>,
}

impl SchemaSet {
    /// Reads and compiles every schema in `dir` and its `index.json` (keys starting with `$`
    /// are comments). Each schema is known by its `$id`, or by a file URL when it has none.
    pub fn load(dir: &Path) -> Self {
        let mut compiler = boon::Compiler::new();
        let mut urls = Vec::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| !p.ends_with("index.json"))
            .collect();
        files.sort();
        for path in files {
            let file = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let value: Value = serde_json::from_str(
                &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}")),
            )
            .unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
            let url = value["$id"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("file:///schemas/{file}"));
            compiler
                .add_resource(&url, value)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            urls.push((file, url));
        }
        let mut compiled = boon::Schemas::new();
        let mut ids = BTreeMap::new();
        for (file, url) in urls {
            let id = compiler
                .compile(&url, &mut compiled)
                .unwrap_or_else(|e| panic!("{file} compiles: {e}"));
            ids.insert(file, id);
        }
        let raw: BTreeMap<String, Value> = serde_json::from_str(
            &std::fs::read_to_string(dir.join("index.json")).expect("index.json is readable"),
        )
        .expect("index.json is JSON");
        let index = raw
            .into_iter()
            .filter(|(key, _)| !key.starts_with('$'))
            .map(|(key, value)| {
                let endpoint = serde_json::from_value(value)
                    .unwrap_or_else(|e| panic!("index.json entry `{key}`: {e}"));
                (key, endpoint)
            })
            .collect();
        Self {
            dir: dir.to_path_buf(),
            index,
            compiled,
            ids,
        }
    }

    /// The entry for `method` and a canonical `path` (query ignored): a `{name}` segment
    /// matches any one segment, a trailing `{...}` the rest of the path.
    pub fn endpoint(&self, method: &str, path: &str) -> Option<&Endpoint> {
        let path = path.split('?').next().unwrap_or(path);
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        self.index.iter().find_map(|(key, endpoint)| {
            let (m, pattern) = key.split_once(' ')?;
            let pattern: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
            let wildcard = |p: &&str| p.starts_with('{') && p.ends_with('}');
            let fits = |pattern: &[&str], segments: &[&str]| {
                pattern.len() == segments.len()
                    && pattern
                        .iter()
                        .zip(segments)
                        .all(|(p, s)| wildcard(p) || p == s)
            };
            let matched = m == method
                && match pattern.split_last() {
                    Some((&"{...}", head)) => {
                        segments.len() >= head.len() && fits(head, &segments[..head.len()])
                    }
                    _ => fits(&pattern, &segments),
                };
            matched.then_some(endpoint)
        })
    }

    /// `value` against schema `file`.
    pub fn validate(&self, file: &str, value: &Value) -> Result<(), String> {
        let id = self.ids.get(file).ok_or(format!("no schema {file}"))?;
        self.compiled
            .validate(value, *id)
            .map_err(|e| format!("{file}: {e}"))
    }

    /// Every JSON document of `body` against `file`; a JSON body where none is expected,
    /// or none where one is, is a problem. Raw bodies (an upload, a log text) have none.
    pub fn check_body(&self, file: Option<&String>, body: Option<&Body>, at: &str) -> Vec<String> {
        match (file, body) {
            (None, None) => Vec::new(),
            (None, Some(Body::Base64(_) | Body::Text(_))) => Vec::new(),
            (None, Some(_)) => vec![format!("{at}: a JSON body where the spec has none")],
            (Some(file), None) => vec![format!("{at}: no body, {file} expected")],
            (Some(file), Some(body)) => {
                let documents = body.json_documents();
                if documents.is_empty() {
                    return vec![format!("{at}: not JSON, {file} expected")];
                }
                documents
                    .into_iter()
                    .filter_map(|d| self.validate(file, d).err())
                    .map(|e| format!("{at}: {e}"))
                    .collect()
            }
        }
    }

    /// Every JSON frame of a WebSocket exchange against its sender's schema; a WebSocket
    /// exchange on a route without frame schemas, or the reverse, is a problem.
    pub fn check_frames(
        &self,
        endpoint: &Endpoint,
        frames: Option<&Vec<WsFrame>>,
        at: &str,
    ) -> Vec<String> {
        match (&endpoint.frames, frames) {
            (None, None) => Vec::new(),
            (None, Some(_)) => vec![format!("{at}: WebSocket frames on a route without any")],
            (Some(_), None) => Vec::new(),
            (Some(schemas), Some(frames)) => frames
                .iter()
                .enumerate()
                .filter_map(|(k, frame)| {
                    match frame {
                        WsFrame::Client(v) => self.validate(&schemas.client, v).err(),
                        WsFrame::Server(v) => self.validate(&schemas.server, v).err(),
                        WsFrame::ClientText(_) | WsFrame::ServerText(_) => {
                            Some("a text frame that is not JSON".to_owned())
                        }
                        WsFrame::Close { .. } => None,
                    }
                    .map(|e| format!("{at} frame {k}: {e}"))
                })
                .collect(),
        }
    }

    /// A request as the replay server sees it, against the index and its schema.
    pub fn check_request(&self, request: &RecordedRequest) -> Result<(), String> {
        let at = format!("{} {}", request.method, request.path);
        let endpoint = self
            .endpoint(&request.method, &request.path)
            .ok_or_else(|| format!("{at}: not in {}/index.json", self.dir.display()))?;
        let problems = self.check_body(endpoint.request.as_ref(), request.body.as_ref(), &at);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Every `*.yaml` cassette under `dir` and its sub-folders, sorted.
pub fn cassettes_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

impl SchemaSet {
    /// Checks every cassette under `dir` against this catalogue: each request and response
    /// body against the schema its method, path and status name, each WebSocket frame
    /// against its sender's. Panics when one of `required` (file names) is missing; returns
    /// what does not match and how many frames were checked.
    pub fn check_cassettes(&self, dir: &Path, required: &[&str]) -> (Vec<String>, usize) {
        let paths = cassettes_under(dir);
        for name in required {
            assert!(
                paths.iter().any(|p| p.ends_with(name)),
                "{}/{name} is missing",
                dir.display()
            );
        }
        let mut problems = Vec::new();
        let mut frames = 0;
        for path in &paths {
            let cassette = sandbox_providers::api::Cassette::load(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for (n, exchange) in cassette.exchanges.iter().enumerate() {
                frames += exchange.websocket.as_ref().map_or(0, Vec::len);
                let (method, at) = (&exchange.request.method, &exchange.request.path);
                let here = format!("{} #{n} {method} {at}", path.display());
                let Some(endpoint) = self.endpoint(method, at) else {
                    problems.push(format!("{here}: no index entry"));
                    continue;
                };
                problems.extend(self.check_body(
                    endpoint.request.as_ref(),
                    exchange.request.body.as_ref(),
                    &format!("{here} request"),
                ));
                problems.extend(self.check_frames(endpoint, exchange.websocket.as_ref(), &here));
                let status = exchange.response.status.to_string();
                match endpoint.response.get(&status) {
                    Some(file) => problems.extend(self.check_body(
                        file.as_ref(),
                        exchange.response.body.as_ref(),
                        &format!("{here} response {status}"),
                    )),
                    None => problems.push(format!("{here}: status {status} is not in the index")),
                }
            }
        }
        (problems, frames)
    }
}
