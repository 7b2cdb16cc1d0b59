//! The daytona cassettes against fixtures/schemas/daytona/: every request and response body
//! validates against the schema its method, path and status name in `index.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use boon::{Compiler, SchemaIndex, Schemas};
use sandbox_providers::api::Cassette;
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("providers/ has a parent")
        .to_path_buf()
}

/// The compiled schemas by file name, and the index.
struct Catalogue {
    schemas: Schemas,
    by_file: BTreeMap<String, SchemaIndex>,
    index: BTreeMap<String, Value>,
}

fn catalogue() -> Catalogue {
    let dir = root().join("fixtures/schemas/daytona");
    let mut compiler = Compiler::new();
    let mut schemas = Schemas::new();
    let mut by_file = BTreeMap::new();
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the schema directory is readable") {
        let path = entry.expect("a directory entry").path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if file == "index.json" {
            continue;
        }
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
        let id = value["$id"]
            .as_str()
            .expect("every schema has an $id")
            .to_owned();
        compiler.add_resource(&id, value).unwrap();
        ids.push((file, id));
    }
    for (file, id) in ids {
        let compiled = compiler
            .compile(&id, &mut schemas)
            .unwrap_or_else(|e| panic!("{file} compiles: {e}"));
        by_file.insert(file, compiled);
    }
    let index: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap())
            .expect("index.json is JSON");
    let index = index
        .into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .collect();
    Catalogue {
        schemas,
        by_file,
        index,
    }
}

impl Catalogue {
    /// The index entry whose pattern matches `method path` (query ignored).
    fn entry(&self, method: &str, path: &str) -> Option<&Value> {
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').collect();
        self.index.iter().find_map(|(key, entry)| {
            let (m, pattern) = key.split_once(' ')?;
            let wanted: Vec<&str> = pattern.split('/').collect();
            let matches = m == method
                && wanted.len() == segments.len()
                && wanted
                    .iter()
                    .zip(&segments)
                    .all(|(w, s)| (w.starts_with('{') && w.ends_with('}')) || w == s);
            matches.then_some(entry)
        })
    }

    fn check(&self, file: &str, value: &Value) -> Result<(), String> {
        let index = self
            .by_file
            .get(file)
            .ok_or(format!("no schema file {file}"))?;
        self.schemas
            .validate(value, *index)
            .map_err(|e| format!("{file}: {e:#}"))
    }
}

fn cassettes() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root().join("fixtures/cassettes/daytona")];
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

#[test]
fn every_body_of_every_daytona_cassette_matches_its_schema() {
    let catalogue = catalogue();
    let paths = cassettes();
    for scenario in ["lifecycle.yaml", "core-tier.yaml"] {
        assert!(
            paths.iter().any(|p| p.ends_with(scenario)),
            "fixtures/cassettes/daytona/{scenario} is missing"
        );
    }
    let mut problems = Vec::new();
    for path in &paths {
        let cassette = Cassette::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, exchange) in cassette.exchanges.iter().enumerate() {
            let (method, at) = (&exchange.request.method, &exchange.request.path);
            let here = format!("{} #{n} {method} {at}", path.display());
            let Some(entry) = catalogue.entry(method, at) else {
                problems.push(format!("{here}: no index entry"));
                continue;
            };
            for body in exchange
                .request
                .body
                .iter()
                .flat_map(|b| b.json_documents())
            {
                match entry["request"].as_str() {
                    Some(file) => {
                        if let Err(e) = catalogue.check(file, body) {
                            problems.push(format!("{here} request: {e}"));
                        }
                    }
                    None => problems.push(format!(
                        "{here}: a request body the index has no schema for"
                    )),
                }
            }
            let status = exchange.response.status.to_string();
            let Some(schema) = entry["response"].get(&status) else {
                problems.push(format!("{here}: status {status} is not in the index"));
                continue;
            };
            for body in exchange
                .response
                .body
                .iter()
                .flat_map(|b| b.json_documents())
            {
                match schema.as_str() {
                    Some(file) => {
                        if let Err(e) = catalogue.check(file, body) {
                            problems.push(format!("{here} response {status}: {e}"));
                        }
                    }
                    None => {
                        problems.push(format!("{here}: a JSON answer where the index says none"))
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_wrong_field_type_and_a_missing_required_field_are_rejected() {
    let catalogue = catalogue();
    let sandbox = json!({
        "id": "s", "organizationId": "o", "name": "s", "user": "datalayer", "env": {},
        "labels": {}, "public": false, "networkBlockAll": false, "target": "us", "cpu": 1,
        "gpu": 0, "memory": 1, "disk": 3, "toolboxProxyUrl": "http://127.0.0.1:1/toolbox",
    });
    catalogue
        .check("sandbox.json", &sandbox)
        .expect("a whole record passes");
    let mut wrong = sandbox.clone();
    wrong["cpu"] = json!("one");
    assert!(catalogue.check("sandbox.json", &wrong).is_err());
    let mut missing = sandbox;
    missing.as_object_mut().unwrap().remove("toolboxProxyUrl");
    assert!(catalogue.check("sandbox.json", &missing).is_err());

    let run = json!({"code": "print(1)", "language": "python"});
    catalogue
        .check("code-run.request.json", &run)
        .expect("a whole request passes");
    assert!(
        catalogue
            .check("code-run.request.json", &json!({"code": "x"}))
            .is_err()
    );
    assert!(
        catalogue
            .check(
                "execute.response.json",
                &json!({"result": "", "exitCode": "0"})
            )
            .is_err()
    );
    assert!(
        catalogue
            .check(
                "create-snapshot.request.json",
                &json!({"buildInfo": {"dockerfileContent": "FROM x"}})
            )
            .is_err()
    );
}
