//! The providers' published server rules, as the emulators enforce them, against the
//! form a client sends: what the project's client used to send is refused as the service
//! refuses it, and what it sends now passes. Each rule names its source in the emulator.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine server_rules::`.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_matrix::emulate::daytona::{DEFAULT_DOMAIN, Emulator, Options};
use sandbox_providers::api::{ApiClient, ApiRequest, ApiSettings, Endpoints, Mode, Target};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{BuildRequest, Provider, Resource, RunLabels, Secret};

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "fake-daytona-rules-key-0000";

fn settings(emulator: &Emulator) -> ApiSettings {
    ApiSettings {
        endpoints: Endpoints {
            api_base: emulator.api_url(),
            sandbox_domain: String::new(),
        },
        mode: Mode::Live,
        // Fake: the emulator checks only that a key is sent.
        credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
        volatiles: Arc::default(),
        call_timeout: Duration::from_secs(120),
    }
}

/// A snapshot queued longer than the service waits for a runner: asking its build-logs
/// URL at once, as the client did, is held 30 s and answered 404; the client, which now
/// asks once the snapshot has left `pending`, builds it.
pub async fn daytona_answers_404_for_the_build_logs_of_a_snapshot_no_runner_holds() {
    let root = common::root();
    let docker = common::prepared_docker(&root).await;
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "daytona".into(),
        scenario: "server-rules".into(),
    };
    let emulator = Emulator::start(
        docker.clone() as Arc<dyn Provider>,
        Options {
            labels: Some(labels.clone()),
            queued: Duration::from_secs(32),
            ..Options::new(0, DEFAULT_DOMAIN)
        },
    )
    .await
    .expect("the daytona emulator starts");
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let bearer = ("Authorization", format!("Bearer {FAKE_KEY}"));
    let created: serde_json::Value = raw
        .call(
            ApiRequest::post(Target::Api, "/snapshots")
                .header(bearer.0, bearer.1.clone())
                .json(serde_json::json!({
                    "name": format!("rules-{}", labels.run_id.to_ascii_lowercase()),
                    "buildInfo": {"dockerfileContent": "FROM sandbox-matrix/contract-base:v1\n", "contextHashes": []},
                })),
        )
        .await
        .expect("the snapshot is created")
        .json()
        .expect("JSON");
    let id = created["id"].as_str().expect("an id").to_owned();
    assert_eq!(created["state"], "pending");
    // The client's own build, queued the same way, meanwhile.
    let client =
        DaytonaProvider::with_network(settings(&emulator), None, None, &emulator.network())
            .expect("a daytona client");
    let env = root.join("fixtures/environments/reference");
    let build = {
        let labels = labels.clone();
        tokio::spawn(async move {
            let request = BuildRequest {
                environment_dir: env,
                base: sandbox_providers::BaseImage::local(
                    sandbox_providers::docker::base::BASE_IMAGE,
                ),
                registry_credential: None,
                build_secrets: Vec::new(),
                labels,
            };
            let built = client.build(&request, &|_: &str| {}).await;
            (client, built)
        })
    };
    let asked = Instant::now();
    let early = raw
        .call(
            ApiRequest::get(Target::Api, format!("/snapshots/{id}/build-logs-url"))
                .header(bearer.0, bearer.1.clone()),
        )
        .await;
    let held = asked.elapsed();
    let (client, built) = build.await.expect("the build task joins");
    // Whatever the assertions say, nothing of this test stays.
    if let Ok(artifact) = &built {
        let _ = client
            .delete_resource(&Resource {
                kind: sandbox_providers::daytona::KIND_SNAPSHOT.into(),
                id: artifact.id.clone(),
            })
            .await;
    }
    let _ = raw
        .call(
            ApiRequest::delete(Target::Api, format!("/snapshots/{id}"))
                .header(bearer.0, bearer.1.clone()),
        )
        .await;
    emulator.stop();
    emulator.cleanup().await;
    let error = early.expect_err("a pending snapshot's build-logs URL is refused");
    assert_eq!(
        error.kind,
        sandbox_providers::ErrorKind::NotFound,
        "{error}"
    );
    assert!(
        error
            .message
            .contains("Timeout waiting for build runner assignment"),
        "{error}"
    );
    assert!(
        held >= Duration::from_secs(29),
        "the service holds the request for a runner (30 s): {held:?}"
    );
    built.expect("the client asks once the snapshot has left pending, and builds");
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test's builds left images"
    );
}
