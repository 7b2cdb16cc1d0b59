//! Every request the cloud clients send, in a whole replayed scenario, matches the JSON
//! Schema the spec gives it: the replay server checks each one before answering, and a
//! request that fails its schema fails the run. No Docker.

mod common;
#[path = "../../providers/tests/support/schemas.rs"]
mod schemas;

use std::sync::Arc;

use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;
use sandbox_providers::api::cassette::RecordedRequest;
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Body, Cassette, Mode};
use schemas::SchemaSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_every_replayed_scenario_matches_its_schema() {
    let mut runs = 0;
    // A variant over gRPC has no JSON requests: its cassettes are checked against its
    // protos when they load, and each request is decoded with them when it is replayed.
    for cloud in variants::CLOUD.iter().filter(|c| c.grpc.is_none()) {
        let set = Arc::new(SchemaSet::load(
            &common::root().join("fixtures/schemas").join(cloud.name),
        ));
        for name in ["lifecycle", "core-tier"] {
            let path = variants::cassette_path(
                &common::root().join(variants::CASSETTES_DIR),
                cloud.name,
                name,
            );
            let cassette = Cassette::load(&path).expect("the cassette loads");
            let scenario = Scenario::load(&common::root().join(format!("scenarios/{name}.yaml")))
                .expect("the scenario loads");
            let runner = common::quiet_runner();
            let volatiles = runner.scenario_volatiles();
            let checked = set.clone();
            let server = ReplayServer::start(
                cassette,
                ReplayOptions {
                    pace: Pace::Instant,
                    volatiles: volatiles.clone(),
                    request_check: Some(Arc::new(move |request| checked.check_request(request))),
                    credentials: (cloud.replay_credentials)(),
                    matched_headers: cloud.matched_headers,
                    cassette_path: Some(path.clone()),
                },
            )
            .await
            .expect("replay server");
            let provider = (cloud.connect)(
                Mode::Replay {
                    server_url: server.url(),
                    pace: Pace::Instant,
                },
                volatiles,
                &sandbox_providers::api::settings::Settings::environment(),
            )
            .expect("replay needs no credential");
            let result = runner.run_scenario(provider, &scenario, None).await;
            assert!(
                result.passed(),
                "{} {name}: {:#?}",
                cloud.name,
                result.steps
            );
            server
                .finish()
                .unwrap_or_else(|e| panic!("{} {name}: {e}", cloud.name));
            let served = server.observed().len();
            // A whole scenario: environments or templates, a create, the code channel,
            // commands, a delete, the leak check's listing.
            assert!(served > 12, "{} {name}: only {served} requests", cloud.name);
            runs += 1;
        }
    }
    assert_eq!(
        runs, 6,
        "datalayer-runtimes, e2b and daytona, lifecycle and core-tier"
    );
}

#[test]
fn a_request_with_a_wrong_type_or_a_missing_field_is_caught() {
    let set = SchemaSet::load(&common::root().join("fixtures/schemas/e2b"));
    let create = |body: serde_json::Value| RecordedRequest {
        method: "POST".into(),
        path: "/sandboxes".into(),
        headers: Default::default(),
        body: Some(Body::Json(body)),
    };
    set.check_request(&create(
        serde_json::json!({"templateID": "t:b", "timeout": 900}),
    ))
    .expect("a well-formed create");
    let wrong_type = set
        .check_request(&create(
            serde_json::json!({"templateID": "t:b", "timeout": "900"}),
        ))
        .unwrap_err();
    assert!(
        wrong_type.contains("sandbox-create.request.json"),
        "{wrong_type}"
    );
    set.check_request(&create(serde_json::json!({"timeout": 900})))
        .unwrap_err();
    let unknown = RecordedRequest {
        method: "POST".into(),
        path: "/no/such/call".into(),
        headers: Default::default(),
        body: None,
    };
    assert!(set.check_request(&unknown).unwrap_err().contains("not in"));
}

/// Every request schema is strict: a field the published spec does not name fails, in
/// every provider's set, at the top of the body and in the objects it nests.
#[test]
fn a_request_field_no_spec_names_is_caught() {
    use serde_json::json;
    let root = common::root().join("fixtures/schemas");
    let build = |body: serde_json::Value| RecordedRequest {
        method: "POST".into(),
        path: "/v2/templates/tpl0001/builds/b1".into(),
        headers: Default::default(),
        body: Some(Body::Json(body)),
    };
    let e2b = SchemaSet::load(&root.join("e2b"));
    let step = json!({"type": "RUN", "args": ["id", "root"], "force": false});
    e2b.check_request(&build(json!({"fromImage": "a", "steps": [step]})))
        .expect("a well-formed build");
    for body in [
        json!({"fromImage": "a", "steps": [], "user": "root"}),
        json!({"fromImage": "a", "steps": [{"type": "RUN", "args": ["id"], "user": "root"}]}),
    ] {
        e2b.check_request(&build(body.clone()))
            .expect_err(&format!("an unknown field is refused: {body}"));
    }
    let daytona = SchemaSet::load(&root.join("daytona"));
    let snapshot = |body: serde_json::Value| RecordedRequest {
        method: "POST".into(),
        path: "/snapshots".into(),
        headers: Default::default(),
        body: Some(Body::Json(body)),
    };
    daytona
        .check_request(&snapshot(
            json!({"name": "s", "buildInfo": {"dockerfileContent": "FROM a", "contextHashes": []}}),
        ))
        .expect("a well-formed snapshot");
    daytona
        .check_request(&snapshot(
            json!({"name": "s", "buildInfo": {"dockerfileContent": "FROM a", "extra": 1}}),
        ))
        .expect_err("an unknown nested field is refused");
}
