//! Every body of every e2b cassette matches the JSON Schemas written from E2B's specs
//! (fixtures/schemas/e2b), and the schemas refuse a wrong type and a missing field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandbox_providers::api::{Body, Cassette};
use serde::Deserialize;
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

#[derive(Deserialize)]
struct Endpoint {
    request: Option<String>,
    response: BTreeMap<String, Option<String>>,
}

/// The schemas, compiled, and the index of which applies where.
struct Schemas {
    dir: PathBuf,
    index: BTreeMap<String, Endpoint>,
    compiled: boon::Schemas,
    ids: BTreeMap<String, boon::SchemaIndex>,
}

impl Schemas {
    fn load() -> Self {
        let dir = root().join("fixtures/schemas/e2b");
        let index: BTreeMap<String, Endpoint> = serde_json::from_str(
            &std::fs::read_to_string(dir.join("index.json")).expect("index.json"),
        )
        .expect("index.json parses");
        let mut compiled = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        let mut ids = BTreeMap::new();
        let mut files: Vec<String> = index
            .values()
            .flat_map(|e| e.request.iter().chain(e.response.values().flatten()))
            .cloned()
            .collect();
        files.sort();
        files.dedup();
        for file in files {
            let path = dir.join(&file);
            let value: Value = serde_json::from_str(
                &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}")),
            )
            .unwrap_or_else(|e| panic!("{file}: {e}"));
            let url = format!("file:///e2b/{file}");
            compiler
                .add_resource(&url, value)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let id = compiler
                .compile(&url, &mut compiled)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            ids.insert(file, id);
        }
        Self {
            dir,
            index,
            compiled,
            ids,
        }
    }

    /// The index entry for a method and a canonical path (query ignored).
    fn endpoint(&self, method: &str, path: &str) -> Option<&Endpoint> {
        let path = path.split('?').next().unwrap_or(path);
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        self.index.iter().find_map(|(key, endpoint)| {
            let (m, pattern) = key.split_once(' ')?;
            let pattern: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
            let fits = m == method
                && (pattern.last() == Some(&"{...}")
                    && segments.len() >= pattern.len()
                    && pattern[..pattern.len() - 1]
                        .iter()
                        .zip(&segments)
                        .all(|(p, s)| p == s || *p == "{id}")
                    || pattern.len() == segments.len()
                        && pattern
                            .iter()
                            .zip(&segments)
                            .all(|(p, s)| p == s || *p == "{id}"));
            fits.then_some(endpoint)
        })
    }

    fn validate(&self, file: &str, value: &Value) -> Result<(), String> {
        let id = self.ids.get(file).ok_or(format!("no schema {file}"))?;
        self.compiled
            .validate(value, *id)
            .map_err(|e| format!("{file}: {e}"))
    }

    /// Every JSON document of `body` against `file`; a body where none is expected, or
    /// none where one is, is a problem.
    fn check_body(&self, file: Option<&String>, body: Option<&Body>, at: &str) -> Vec<String> {
        match (file, body) {
            (None, None) => Vec::new(),
            (None, Some(Body::Text(t))) if t.is_empty() => Vec::new(),
            // Raw uploads (a tar archive) have no schema.
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
}

fn cassettes(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(cassettes(&path));
        } else if path.extension().is_some_and(|x| x == "yaml") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn every_e2b_cassette_body_matches_the_schemas() {
    let schemas = Schemas::load();
    let files = cassettes(&root().join("fixtures/cassettes/e2b"));
    assert!(
        files.iter().any(|f| f.ends_with("lifecycle.yaml"))
            && files.iter().any(|f| f.ends_with("core-tier.yaml")),
        "the lifecycle and core-tier cassettes are missing: {files:?}"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let cassette = Cassette::load(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (i, exchange) in cassette.exchanges.iter().enumerate() {
            let (request, response) = (&exchange.request, &exchange.response);
            let at = format!(
                "{} #{i} {} {}",
                file.display(),
                request.method,
                request.path
            );
            let Some(endpoint) = schemas.endpoint(&request.method, &request.path) else {
                problems.push(format!("{at}: not in {}/index.json", schemas.dir.display()));
                continue;
            };
            problems.extend(schemas.check_body(
                endpoint.request.as_ref(),
                request.body.as_ref(),
                &format!("{at} request"),
            ));
            match endpoint.response.get(&response.status.to_string()) {
                Some(file) => problems.extend(schemas.check_body(
                    file.as_ref(),
                    response.body.as_ref(),
                    &format!("{at} response {}", response.status),
                )),
                None => problems.push(format!("{at}: status {} not in the index", response.status)),
            }
            checked += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 20, "only {checked} exchanges checked");
}

#[test]
fn the_schemas_refuse_a_wrong_type_and_a_missing_field() {
    let schemas = Schemas::load();
    let good = json!({"templateID": "t:b", "timeout": 900, "metadata": {"k": "v"}});
    schemas
        .validate("sandbox-create.request.json", &good)
        .unwrap();
    let wrong_type = json!({"templateID": "t:b", "timeout": "900"});
    assert!(
        schemas
            .validate("sandbox-create.request.json", &wrong_type)
            .is_err()
    );
    let missing = json!({"timeout": 900});
    assert!(
        schemas
            .validate("sandbox-create.request.json", &missing)
            .is_err()
    );
    let status =
        json!({"templateID": "t", "buildID": "b", "status": "done", "logs": [], "logEntries": []});
    assert!(
        schemas
            .validate("build-status.response.json", &status)
            .is_err(),
        "an unknown build status"
    );
    let frame = json!({"event": {"data": {"stdout": 42}}});
    assert!(
        schemas
            .validate("process-start.frame.json", &frame)
            .is_err()
    );
    let line = json!({"type": "stdout"});
    assert!(
        schemas.validate("execute.line.json", &line).is_err(),
        "a stdout line without its text"
    );
}
