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

/// A daytona emulator whose snapshots wait `queued` for a runner, its resources labelled
/// with a new run's labels.
async fn daytona(queued: Duration) -> (RunLabels, Emulator) {
    let docker = common::prepared_docker(&common::root()).await;
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "daytona".into(),
        scenario: "server-rules".into(),
    };
    let emulator = Emulator::start(
        docker,
        Options {
            labels: Some(labels.clone()),
            queued,
            ..Options::new(0, DEFAULT_DOMAIN)
        },
    )
    .await
    .expect("the daytona emulator starts");
    (labels, emulator)
}

/// A snapshot queued longer than the service waits for a runner: asking its build-logs
/// URL at once, as the client did, is held 30 s and answered 404; the client, which now
/// asks once the snapshot has left `pending`, builds it.
pub async fn daytona_answers_404_for_the_build_logs_of_a_snapshot_no_runner_holds() {
    let root = common::root();
    let (labels, emulator) = daytona(Duration::from_secs(32)).await;
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

/// `process/execute` as Daytona's toolbox runs it (daytonaio/daytona v0.190.0,
/// apps/daemon/pkg/toolbox/process/execute.go): as the sandbox's user, in `cwd`, with
/// `envs`, killed past `timeout` with a 408; and a create field the emulator does not
/// implement is refused by name rather than dropped.
pub async fn daytona_runs_process_execute_as_its_toolbox_does() {
    let root = common::root();
    let (labels, emulator) = daytona(Duration::ZERO).await;
    let client =
        DaytonaProvider::with_network(settings(&emulator), None, None, &emulator.network())
            .expect("a daytona client");
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let bearer = ("Authorization", format!("Bearer {FAKE_KEY}"));
    let request = BuildRequest {
        environment_dir: root.join("fixtures/environments/reference"),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    };
    let artifact = client
        .build(&request, &|_: &str| {})
        .await
        .expect("the reference environment builds");
    let refused = raw
        .call(
            ApiRequest::post(Target::Api, "/sandbox")
                .header(bearer.0, bearer.1.clone())
                .json(serde_json::json!({"snapshot": artifact.id, "autoStopInterval": 15})),
        )
        .await
        .map(|_| ());
    let (sandbox, _) = client.launch(&artifact, &labels).await.expect("a sandbox");
    let proxy: serde_json::Value = raw
        .call(
            ApiRequest::get(
                Target::Api,
                format!("/sandbox/{}/toolbox-proxy-url", sandbox.0),
            )
            .header(bearer.0, bearer.1.clone()),
        )
        .await
        .expect("the toolbox URL")
        .json()
        .expect("JSON");
    let execute = format!(
        "{}/{}/process/execute",
        proxy["url"].as_str().expect("a URL").trim_end_matches('/'),
        sandbox.0
    );
    let run = |body: serde_json::Value| {
        raw.call(
            ApiRequest::post(Target::Absolute(execute.clone()), "")
                .header(bearer.0, bearer.1.clone())
                .json(body),
        )
    };
    let ran: serde_json::Value = run(serde_json::json!({
        "command": "id -un; pwd; echo \"$FROM_ENVS\"",
        "cwd": "/tmp",
        "envs": {"FROM_ENVS": "given"},
    }))
    .await
    .expect("a command")
    .json()
    .expect("JSON");
    let asked = Instant::now();
    let timed_out = run(serde_json::json!({"command": "sleep 30", "timeout": 1}))
        .await
        .map(|_| ());
    let waited = asked.elapsed();
    for resource in client.list_resources(&labels).await.unwrap_or_default() {
        let _ = client.delete_resource(&resource).await;
    }
    emulator.stop();
    emulator.cleanup().await;

    let refused = refused.expect_err("a create with autoStopInterval");
    assert!(refused.message.contains("`autoStopInterval`"), "{refused}");
    assert_eq!(ran["exitCode"], 0, "{ran}");
    assert_eq!(ran["result"], "datalayer\n/tmp\ngiven\n", "{ran}");
    let timed_out = timed_out.expect_err("a command past its timeout");
    assert!(
        timed_out.message.contains("command execution timeout"),
        "{timed_out}"
    );
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test left resources"
    );
}
