//! Every body of every e2b cassette matches the JSON Schemas written from E2B's specs
//! (fixtures/schemas/e2b), and the schemas refuse a wrong type and a missing field.

use std::path::{Path, PathBuf};

use sandbox_providers::api::Cassette;
use schemas::SchemaSet;
use serde_json::json;

#[path = "support/schemas.rs"]
mod schemas;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
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
    let schemas = SchemaSet::load(&root().join("fixtures/schemas/e2b"));
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
    let schemas = SchemaSet::load(&root().join("fixtures/schemas/e2b"));
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
    let kernel = json!({"path": "notebook.ipynb"});
    assert!(
        schemas
            .validate("kernel-start.request.json", &kernel)
            .is_err(),
        "a kernel start without the kernel's name"
    );
}
