//! The datalayer-runtimes client against faults served by the replay server: each cassette
//! under fixtures/cassettes/datalayer-runtimes/faults/ was recorded through the emulator
//! started with that fault (harness/tests/engine/datalayer_runtimes.rs authors them).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Mode, Volatiles};
use sandbox_providers::datalayer::runtimes::{self, RuntimesProvider};
use sandbox_providers::{Artifact, ErrorKind, Housekeeping as _, Provider, Resource, RunLabels};

/// The run id the fault cassettes were recorded with stands behind `<run-id>`.
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
        variant: runtimes::VARIANT.into(),
        scenario: "lifecycle".into(),
    }
}

fn environment() -> Artifact {
    Artifact {
        id: runtimes::DEFAULT_ENVIRONMENT.into(),
        kind: runtimes::ARTIFACT_KIND.into(),
    }
}

/// The fault cassette `name`.
fn fault(name: &str) -> (Cassette, PathBuf) {
    let path = root().join(format!(
        "fixtures/cassettes/datalayer-runtimes/faults/{name}.yaml"
    ));
    let cassette = Cassette::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (cassette, path)
}

/// The replay server for fault `name` and a client pointed at it.
async fn serve(name: &str) -> (ReplayServer, RuntimesProvider) {
    let (cassette, path) = fault(name);
    serve_cassette(cassette, Some(path)).await
}

/// The replay server for `cassette` (read from `path`, if from a file) and a client of it.
async fn serve_cassette(
    cassette: Cassette,
    path: Option<PathBuf>,
) -> (ReplayServer, RuntimesProvider) {
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register("run-id", RUN_ID);
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: runtimes::replay_credentials(),
            volatiles: volatiles.clone(),
            request_check: None,
            matched_headers: runtimes::REPLAY_MATCHED_HEADERS,
            cassette_path: path,
        },
    )
    .await
    .expect("replay server");
    let provider = RuntimesProvider::new(
        &server.url(),
        Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
        runtimes::replay_credentials().remove(0),
        volatiles,
        runtimes::DEFAULT_ENVIRONMENT.into(),
    )
    .expect("replay needs no credential");
    (server, provider)
}

fn count(server: &ReplayServer, method: &str, path_start: &str) -> usize {
    server
        .observed()
        .iter()
        .filter(|o| o.method == method && o.path.starts_with(path_start))
        .count()
}

/// A 200 whose body says `success: false` is a failed launch carrying the platform's
/// message; the create is not repeated and nothing is listed or deleted after it.
#[tokio::test]
async fn a_refused_create_answered_200_fails_launch_with_the_platforms_message() {
    let (server, provider) = serve("refused-create").await;
    let error = provider
        .launch(&environment(), &labels())
        .await
        .expect_err("a refused create fails launch");
    assert_eq!(error.kind, ErrorKind::Api, "{error}");
    assert!(
        error.to_string().contains("success: false")
            && error.to_string().contains("not enough credits"),
        "{error}"
    );
    assert_eq!(count(&server, "POST", "/api/runtimes/v1/runtimes"), 1);
    server
        .finish()
        .expect("every exchange served, nothing unexpected");
}

/// An ingress answering 503 while it warms up is polled until it serves, within launch:
/// the readiness timing carries the poll's resolution, and the runtime runs code after.
#[tokio::test]
async fn a_warming_ingress_is_retried_until_it_serves() {
    let (server, provider) = serve("warm-up").await;
    let (sandbox, timings) = provider
        .launch(&environment(), &labels())
        .await
        .expect("launch waits out the warm-up");
    let ready = timings
        .iter()
        .find(|t| t.name == "ingress-ready")
        .expect("an ingress-ready timing");
    assert!(ready.resolution.is_some(), "{ready:?}");
    assert!(
        count(&server, "GET", "/external/") >= 4,
        "three 503s, then the answer: {:?}",
        server.observed()
    );
    provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("shutdown deletes it by pod_name");
    assert_eq!(
        count(
            &server,
            "DELETE",
            &format!("/api/runtimes/v1/runtimes/{}", sandbox.0)
        ),
        1
    );
    server.finish().expect("every exchange served");
}

/// Deleting a pod_name the platform does not have (404) is not an error: it is gone.
#[tokio::test]
async fn deleting_an_unknown_pod_name_succeeds() {
    let (server, provider) = serve("delete-unknown").await;
    provider
        .delete_resource(&Resource {
            kind: runtimes::KIND_RUNTIME.into(),
            id: "jupyter-python-cpu-env-99999".into(),
        })
        .await
        .expect("already gone");
    server.finish().expect("every exchange served");
}

/// A warm-up that never ends fails launch at its deadline, naming what it waited for, and
/// the runtime is deleted rather than left running.
#[tokio::test]
async fn an_ingress_that_never_warms_up_fails_launch_and_deletes_the_runtime() {
    let (mut cassette, _) = fault("warm-up");
    // Cut the cassette after its 503s: the ingress never serves; the delete stays.
    let first_served = cassette
        .exchanges
        .iter()
        .position(|e| e.request.path.starts_with("/external/") && e.response.status == 200)
        .expect("the ingress serves at last");
    let delete = cassette
        .exchanges
        .iter()
        .find(|e| e.request.method == "DELETE")
        .cloned()
        .expect("a delete");
    cassette.exchanges.truncate(first_served);
    cassette.exchanges.push(delete);
    let (server, provider) = serve_cassette(cassette, None).await;
    let provider = provider.with_ready_deadline(Duration::from_millis(300));
    let error = provider
        .launch(&environment(), &labels())
        .await
        .expect_err("never ready");
    assert!(error.to_string().contains("ingress"), "{error}");
    assert_eq!(count(&server, "DELETE", "/api/runtimes/v1/runtimes/"), 1);
}
