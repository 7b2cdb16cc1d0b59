//! The datalayer-runtimes cassettes against fixtures/schemas/datalayer-runtimes/ (written for
//! this project from what Datalayer's client sends and reads): every request and response
//! body validates against the schema its method, path and status name in `index.json`, and
//! every kernel WebSocket frame against the Jupyter message schema.

use std::path::{Path, PathBuf};

use schemas::SchemaSet;
use serde_json::json;

#[path = "support/schemas.rs"]
mod schemas;

fn catalogue() -> SchemaSet {
    SchemaSet::load(&root().join("fixtures/schemas/datalayer-runtimes"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("providers/ has a parent")
        .to_path_buf()
}

#[test]
fn every_body_of_every_datalayer_runtimes_cassette_matches_its_schema() {
    let (problems, frames) = catalogue().check_cassettes(
        &root().join("fixtures/cassettes/datalayer-runtimes"),
        &["lifecycle.yaml", "core-tier.yaml"],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(frames > 0, "no WebSocket frame was checked");
}

#[test]
fn a_create_without_its_reservation_and_a_runtime_without_its_key_are_rejected() {
    let catalogue = catalogue();
    let create = json!({
        "type": "notebook", "environment_name": "python-cpu-env",
        "given_name": "sm-20260101T000000Z-fa0175-lifecycle", "credits_limit": 6.0,
    });
    catalogue
        .validate("runtime-create.request.json", &create)
        .expect("a whole create passes");
    let mut free = create.clone();
    free["credits_limit"] = json!(0);
    assert!(
        catalogue
            .validate("runtime-create.request.json", &free)
            .is_err()
    );
    let mut newer = create;
    newer.as_object_mut().unwrap().remove("environment_name");
    newer["environment"] = json!({"name": "python-cpu-env"});
    assert!(
        catalogue
            .validate("runtime-create.request.json", &newer)
            .is_err(),
        "the body this client sends names environment_name"
    );
    let runtime = json!({"success": true, "runtime": {
        "pod_name": "jupyter-python-cpu-env-00001", "uid": "01JDEMU1",
        "given_name": "g", "environment_name": "python-cpu-env",
        "ingress": "https://r1.datalayer.test/jupyter/server/jupyter-python-cpu-env-00001",
        "token": "<redacted:DATALAYER_RUNTIME_TOKEN>",
    }});
    catalogue
        .validate("runtime.response.json", &runtime)
        .expect("a whole runtime passes");
    let mut keyless = runtime.clone();
    keyless["runtime"]
        .as_object_mut()
        .unwrap()
        .remove("pod_name");
    assert!(
        catalogue
            .validate("runtime.response.json", &keyless)
            .is_err()
    );
    assert!(
        catalogue
            .validate(
                "runtime-or-refusal.json",
                &json!({"success": false, "message": "no"})
            )
            .is_ok()
    );
    assert!(
        catalogue
            .validate("runtime-or-refusal.json", &json!({"success": true}))
            .is_err(),
        "a 200 says success: false with a message, or holds a runtime"
    );
}
