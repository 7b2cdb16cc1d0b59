//! The daytona cassettes against fixtures/schemas/daytona/: every request and response body
//! validates against the schema its method, path and status name in `index.json`, and
//! every WebSocket frame against the schema of its sender.

use std::path::{Path, PathBuf};

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

#[test]
fn every_body_of_every_daytona_cassette_matches_its_schema() {
    let (problems, frames) = catalogue().check_cassettes(
        &root().join("fixtures/cassettes/daytona"),
        &["lifecycle.yaml", "core-tier.yaml"],
    );
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
