//! The e2b client against faults served by the replay server: each cassette under
//! fixtures/cassettes/e2b/faults/ is a piece of the lifecycle cassette with one fault.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Mode, Volatiles};
use sandbox_providers::e2b::{self, E2bProvider};
use sandbox_providers::{
    Artifact, BuildRequest, ErrorKind, Housekeeping as _, Provider, Resource, RunLabels, SandboxId,
    Secret,
};

/// The run id the fault cassettes were cut from stands behind `<run_id>`: any value works.
const RUN_ID: &str = "20260101T000000Z-fa0175";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn labels() -> RunLabels {
    RunLabels {
        run_id: RUN_ID.into(),
        variant: "e2b".into(),
        scenario: "lifecycle".into(),
    }
}

/// A fake canary, the build secret of the build fault.
fn canary() -> Secret {
    // Fake: made up for this test, grants nothing.
    Secret::new(
        "REGISTRY_TOKEN",
        "sm-fake-canary-00000000000000000000000000000000",
    )
}

/// The replay server for fault `name` and a client pointed at it.
async fn serve(name: &str) -> (ReplayServer, E2bProvider) {
    let path = root().join(format!("fixtures/cassettes/e2b/faults/{name}.yaml"));
    let cassette = Cassette::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register("run-id", RUN_ID);
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: [vec![canary()], e2b::replay_credentials()].concat(),
            volatiles: volatiles.clone(),
            request_check: None,
            matched_headers: e2b::REPLAY_MATCHED_HEADERS,
            cassette_path: Some(path),
        },
    )
    .await
    .expect("replay server");
    let provider = E2bProvider::from_settings(
        Mode::Replay {
            server_url: server.url(),
            pace: sandbox_providers::api::replay::Pace::Instant,
        },
        volatiles,
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .expect("replay needs no credential");
    (server, provider)
}

fn artifact(id: &str) -> Artifact {
    Artifact {
        id: id.into(),
        kind: "e2b-build".into(),
    }
}

/// The artifact id the lifecycle cassette's sandbox was created from.
fn recorded_artifact() -> Artifact {
    let cassette = Cassette::load(&root().join("fixtures/cassettes/e2b/lifecycle.yaml"))
        .expect("the lifecycle cassette");
    let create = cassette
        .exchanges
        .iter()
        .find(|e| e.request.method == "POST" && e.request.path == "/sandboxes")
        .expect("a create in the lifecycle cassette");
    let body = create.request.body.as_ref().expect("a create body");
    let id = body.json_documents()[0]["templateID"]
        .as_str()
        .expect("templateID")
        .to_owned();
    artifact(&id)
}

fn count(server: &ReplayServer, method: &str, path_start: &str) -> usize {
    server
        .observed()
        .iter()
        .filter(|o| o.method == method && o.path.starts_with(path_start))
        .count()
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_then_succeeds() {
    let (server, provider) = serve("rate-limited-create").await;
    let artifact = recorded_artifact();
    let (sandbox, timings) = provider.launch(&artifact, &labels()).await.expect("launch");
    assert!(
        timings
            .iter()
            .any(|t| t.name == "server-ready" && t.resolution.is_some())
    );
    provider
        .delete_resource(&Resource {
            kind: "sandbox".into(),
            id: sandbox.0,
        })
        .await
        .expect("delete");
    assert_eq!(
        count(&server, "POST", "/sandboxes"),
        2,
        "{:?}",
        server.observed()
    );
    server
        .finish()
        .expect("every exchange served, nothing unexpected");
}

#[tokio::test]
async fn a_500_on_an_idempotent_call_is_retried() {
    let (server, provider) = serve("server-error-delete").await;
    let sandbox = first_sandbox();
    provider
        .delete_resource(&Resource {
            kind: "sandbox".into(),
            id: sandbox,
        })
        .await
        .expect("the DELETE succeeds on its second attempt");
    assert_eq!(count(&server, "DELETE", "/sandboxes/"), 2);
    server.finish().expect("every exchange served");
}

#[tokio::test]
async fn a_sandbox_that_never_becomes_ready_times_out_and_is_deleted() {
    let (server, provider) = serve("never-ready").await;
    let provider = provider.with_ready_deadline(Duration::from_millis(600));
    let artifact = recorded_artifact();
    let error = provider
        .launch(&artifact, &labels())
        .await
        .expect_err("never ready");
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert!(error.to_string().contains("the Jupyter Server"), "{error}");
    assert!(count(&server, "GET", "/sandbox/49999/") >= 2, "polled");
    assert_eq!(
        count(&server, "DELETE", "/sandboxes/"),
        1,
        "the sandbox is deleted"
    );
    server.finish().expect("every exchange served");
}

#[tokio::test]
async fn a_failed_build_is_a_build_error_with_its_logs() {
    let (server, provider) = serve("build-fails").await;
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let log = move |line: &str| sink.lock().unwrap().push(line.to_owned());
    let request = BuildRequest {
        environment_dir: root().join("fixtures/environments/reference"),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: vec![canary()],
        labels: labels(),
    };
    let error = provider
        .build(&request, &log)
        .await
        .expect_err("the build fails");
    assert_eq!(error.kind, ErrorKind::Build, "{error}");
    assert!(error.message.contains("base image not found"), "{error}");
    let lines = lines.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("pulling the base image")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("manifest unknown")),
        "{lines:?}"
    );
    server.finish().expect("every exchange served");
}

#[tokio::test]
async fn deleting_what_is_already_gone_succeeds() {
    let (server, provider) = serve("delete-404").await;
    let template = recorded_template();
    provider
        .delete_resource(&Resource {
            kind: "template".into(),
            id: template,
        })
        .await
        .expect("404 is success");
    server.finish().expect("every exchange served");
}

#[tokio::test]
async fn a_reset_mid_stream_is_a_transport_error_not_retried() {
    let (server, provider) = serve("reset-mid-execute").await;
    let artifact = recorded_artifact();
    let (sandbox, _) = provider.launch(&artifact, &labels()).await.expect("launch");
    let error = provider
        .run_code(&sandbox, "1+1")
        .await
        .expect_err("the stream is cut");
    assert_eq!(error.kind, ErrorKind::Transport, "{error}");
    assert!(error.to_string().contains("execute code"), "{error}");
    assert_eq!(
        count(&server, "POST", "/sandbox/49999/"),
        1,
        "one kernel started"
    );
    let sockets = server
        .observed()
        .iter()
        .filter(|o| o.path.contains("/channels?session_id="))
        .count();
    assert_eq!(sockets, 2, "one socket at launch, one for 1+1, none again");
    provider
        .shutdown(&SandboxId(sandbox.0.clone()), Duration::from_secs(5))
        .await
        .expect("cleanup");
    assert_eq!(count(&server, "DELETE", "/sandboxes/"), 1);
    server.finish().expect("every exchange served");
}

/// The sandbox id the cassette's exchanges name.
fn first_sandbox() -> String {
    id_after(
        &root().join("fixtures/cassettes/e2b/faults/server-error-delete.yaml"),
        "/sandboxes/",
    )
}

fn recorded_template() -> String {
    id_after(
        &root().join("fixtures/cassettes/e2b/faults/delete-404.yaml"),
        "/templates/",
    )
}

fn id_after(cassette: &Path, prefix: &str) -> String {
    let cassette = Cassette::load(cassette).expect("cassette");
    cassette
        .exchanges
        .iter()
        .find_map(|e| e.request.path.strip_prefix(prefix).map(str::to_owned))
        .expect("an id in the cassette")
}
