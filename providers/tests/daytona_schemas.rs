//! The daytona cassettes against fixtures/schemas/daytona/: every request and response body
//! validates against the schema its method, path and status name in `index.json`, and
//! every WebSocket frame against the schema of its sender.

use std::path::{Path, PathBuf};

use sandbox_providers::api::Cassette;
use schemas::SchemaSet;
use serde_json::json;

#[path = "support/schemas.rs"]
mod schemas;

fn catalogue() -> SchemaSet {
    SchemaSet::load(&root().join("fixtures/schemas/daytona"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("providers/ has a parent")
        .to_path_buf()
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
    let mut frames = 0;
    for path in &paths {
        let cassette = Cassette::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, exchange) in cassette.exchanges.iter().enumerate() {
            frames += exchange.websocket.as_ref().map_or(0, Vec::len);
            let (method, at) = (&exchange.request.method, &exchange.request.path);
            let here = format!("{} #{n} {method} {at}", path.display());
            let Some(endpoint) = catalogue.endpoint(method, at) else {
                problems.push(format!("{here}: no index entry"));
                continue;
            };
            problems.extend(catalogue.check_body(
                endpoint.request.as_ref(),
                exchange.request.body.as_ref(),
                &format!("{here} request"),
            ));
            problems.extend(catalogue.check_frames(endpoint, exchange.websocket.as_ref(), &here));
            let status = exchange.response.status.to_string();
            match endpoint.response.get(&status) {
                Some(file) => problems.extend(catalogue.check_body(
                    file.as_ref(),
                    exchange.response.body.as_ref(),
                    &format!("{here} response {status}"),
                )),
                None => problems.push(format!("{here}: status {status} is not in the index")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(frames > 0, "no WebSocket frame was checked");
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
        .validate("sandbox.json", &sandbox)
        .expect("a whole record passes");
    let mut wrong = sandbox.clone();
    wrong["cpu"] = json!("one");
    assert!(catalogue.validate("sandbox.json", &wrong).is_err());
    let mut missing = sandbox;
    missing.as_object_mut().unwrap().remove("toolboxProxyUrl");
    assert!(catalogue.validate("sandbox.json", &missing).is_err());

    let run = json!({"code": "print(1)", "contextId": "c1", "timeout": 300});
    catalogue
        .validate("interpreter-execute.frame.json", &run)
        .expect("a whole frame passes");
    assert!(
        catalogue
            .validate(
                "interpreter-execute.frame.json",
                &json!({"contextId": "c1"})
            )
            .is_err(),
        "code is required"
    );
    assert!(
        catalogue
            .validate(
                "interpreter-output.frame.json",
                &json!({"type": "result", "text": "2"})
            )
            .is_err(),
        "the toolbox sends no result frames"
    );
    assert!(
        catalogue
            .validate(
                "interpreter-context.json",
                &json!({"id": "c1", "cwd": "/", "language": "python", "active": true})
            )
            .is_err(),
        "createdAt is required"
    );
    assert!(
        catalogue
            .validate(
                "execute.response.json",
                &json!({"result": "", "exitCode": "0"})
            )
            .is_err()
    );
    assert!(
        catalogue
            .validate(
                "create-snapshot.request.json",
                &json!({"buildInfo": {"dockerfileContent": "FROM x"}})
            )
            .is_err()
    );
}
