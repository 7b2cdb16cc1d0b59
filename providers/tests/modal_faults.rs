//! The modal variant against faults replayed at the gRPC layer: each cassette under
//! fixtures/cassettes/modal/faults/ was recorded from `sandbox-matrix emulate modal` with
//! one fault switched on (`harness/tests/engine/author_modal.rs`, `author_modal_fault_cassettes`),
//! and is replayed here with the calls that recorded it. Replay is strict (order,
//! metadata, every exchange used), so each test also proves what the client did.
//! No Docker needed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::api::Volatiles;
use sandbox_providers::api::grpc::{GrpcCassette, GrpcOptions, GrpcReplayServer};
use sandbox_providers::api::replay::Pace;
use sandbox_providers::modal::{self, Connection, ModalProvider};
use sandbox_providers::{
    Artifact, BaseImage, BuildRequest, CreateLog, ErrorKind, Housekeeping as _, Provider, Resource,
    RunLabels, SandboxId, Secret,
};

/// The run id the fault cassettes were recorded with.
const RUN_ID: &str = "20260101T000000Z-fa0175";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn labels(name: &str) -> RunLabels {
    RunLabels {
        run_id: RUN_ID.into(),
        variant: "modal".into(),
        scenario: name.into(),
    }
}

/// A fake canary, the build secret: replay compares it as `<redacted:REGISTRY_TOKEN>`.
fn canary() -> Secret {
    // Fake: made up for this test, grants nothing.
    Secret::new(
        "REGISTRY_TOKEN",
        "sm-fake-canary-00000000000000000000000000000000",
    )
}

fn cassette(name: &str) -> (PathBuf, GrpcCassette) {
    let path = root().join(format!("fixtures/cassettes/modal/faults/{name}.yaml"));
    let cassette = GrpcCassette::load(&path, modal::proto::descriptors())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, cassette)
}

/// The replay server for fault `name`, answering at once, and a modal client pointed at it.
async fn serve(name: &str) -> (GrpcReplayServer, ModalProvider) {
    serve_at(name, Pace::Instant).await
}

/// [`serve`] at `pace`.
async fn serve_at(name: &str, pace: Pace) -> (GrpcReplayServer, ModalProvider) {
    let (path, cassette) = cassette(name);
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register_secret(&canary());
    let server = GrpcReplayServer::start(
        cassette,
        modal::proto::descriptors().clone(),
        GrpcOptions {
            credentials: modal::replay_credentials(),
            volatiles: volatiles.clone(),
            matched_metadata: modal::MATCHED_METADATA
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            name: Some(path.display().to_string()),
            pace,
        },
    )
    .await
    .expect("replay server");
    let provider = ModalProvider::from_settings(
        Connection::Replay {
            server_url: server.url(),
        },
        volatiles,
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .expect("replay needs no credential")
    // As authored: only the sandbox that never gets a task waits briefly for one.
    .with_task_deadline(Duration::from_secs(if name == "no-task" { 2 } else { 60 }));
    (server, provider)
}

fn build_request(name: &str, environment: &Path) -> BuildRequest {
    BuildRequest {
        environment_dir: environment.to_owned(),
        base: BaseImage::local("sandbox-matrix/contract-base:v1"),
        registry_credential: None,
        build_secrets: vec![canary()],
        labels: labels(name),
    }
}

fn reference() -> PathBuf {
    root().join("fixtures/environments/reference")
}

/// The calls every fault but the build's makes after the build: launch, two code calls,
/// a shutdown.
async fn lifecycle(provider: &ModalProvider, name: &str) -> (Artifact, SandboxId) {
    let artifact = provider
        .build(&build_request(name, &reference()), &|_: &str| {})
        .await
        .expect("the recorded build");
    let (sandbox, _) = provider
        .launch(&artifact, &labels(name))
        .await
        .expect("the recorded launch");
    for (code, answer) in [("1+1", "2"), ("2+2", "4")] {
        let (output, _) = provider.run_code(&sandbox, code).await.expect(code);
        assert_eq!(output.result.as_deref(), Some(answer), "{output:?}");
    }
    provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("the recorded shutdown");
    (artifact, sandbox)
}

async fn delete_image(provider: &ModalProvider, artifact: &Artifact) {
    let image = provider.artifact_resource(artifact).expect("an image");
    provider
        .delete_resource(&image)
        .await
        .expect("the recorded delete");
}

/// The `x-retry-attempt` of each recorded call to `method`.
fn attempts(name: &str, method: &str) -> Vec<String> {
    cassette(name)
        .1
        .exchanges
        .iter()
        .filter(|e| e.method.ends_with(&format!("/{method}")))
        .map(|e| {
            e.metadata
                .get("x-retry-attempt")
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// Every Secret the recording made (the build's) was deleted by id after it, in fault
/// `name`; the replay, which serves every exchange in order or fails, made the client send
/// those deletes.
fn assert_build_secrets_deleted(name: &str) {
    let (_, recorded) = cassette(name);
    let made: Vec<(usize, String)> = recorded
        .exchanges
        .iter()
        .enumerate()
        .filter(|(_, e)| e.method.ends_with("/SecretGetOrCreate"))
        .map(|(i, e)| {
            (
                i,
                e.responses[0]["secret_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert!(
        !made.is_empty(),
        "{name}: the build made a Secret for its canary"
    );
    for (at, id) in made {
        assert!(
            recorded.exchanges[at..].iter().any(|e| {
                e.method.ends_with("/SecretDelete") && e.request["secret_id"] == id.as_str()
            }),
            "{name}: Secret {id} is never deleted"
        );
    }
}

/// A run ledger as a provider sees it, keeping what it is told.
#[derive(Default)]
struct Ledger {
    created: std::sync::Mutex<Vec<Resource>>,
}

impl CreateLog for Ledger {
    fn intent(&self, _labels: &RunLabels, _kind: &str) -> Result<u64, String> {
        Ok(1)
    }

    fn created(&self, _seq: u64, _labels: &RunLabels, resource: &Resource) -> Result<(), String> {
        self.created
            .lock()
            .expect("ledger lock")
            .push(resource.clone());
        Ok(())
    }

    fn gone(&self, _labels: &RunLabels, _resource: &Resource) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unavailable_create_is_retried_and_the_launch_goes_on() {
    let (server, provider) = serve("unavailable-create").await;
    let (artifact, _) = lifecycle(&provider, "unavailable-create").await;
    delete_image(&provider, &artifact).await;
    server.finish().expect("the calls as recorded");
    assert_eq!(
        attempts("unavailable-create", "SandboxCreate"),
        ["0", "1"],
        "one refused create, then its retry"
    );
    assert_build_secrets_deleted("unavailable-create");
}

#[tokio::test]
async fn a_failed_build_is_a_build_error_and_its_secret_is_deleted() {
    let (server, provider) = serve("build-fails").await;
    // The request the recording was made with: the failing step is in the cassette's
    // Dockerfile commands, which replay compares.
    let dir = std::env::temp_dir().join(format!("sm-modal-fault-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("an environment");
    std::fs::write(
        dir.join("Dockerfile"),
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\n\
         RUN echo the next step fails && false\n",
    )
    .expect("its Dockerfile");
    let ledger = Arc::new(Ledger::default());
    provider.record_creates(ledger.clone());
    let error = provider
        .build(&build_request("build-fails", &dir), &|_: &str| {})
        .await
        .expect_err("the build fails");
    // The image was named in the ledger when Modal answered its id, before the build
    // failed: cleanup and sweep can delete it.
    let recorded = ledger.created.lock().expect("ledger lock").clone();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].kind, "image");
    assert!(
        recorded[0].id.starts_with("im-") && error.to_string().contains(&recorded[0].id),
        "the failed image is the one recorded: {recorded:?} / {error}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(error.kind, ErrorKind::Build, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("build failed: build failed: executor failed")
            && text.contains("the next step fails"),
        "the error names the ending and quotes the log: {text}"
    );
    // The Secret holding the canary was deleted after the failure: the replay checks
    // that every recorded call, SecretDelete last, was made.
    server.finish().expect("the calls as recorded");
    let (_, recorded) = cassette("build-fails");
    assert!(
        recorded
            .exchanges
            .last()
            .is_some_and(|e| e.method.ends_with("/SecretDelete")),
        "the build's Secret is deleted last"
    );
    assert_build_secrets_deleted("build-fails");
}

#[tokio::test]
async fn a_sandbox_without_a_task_times_out_and_is_terminated() {
    // At the recorded pace: the client waits out its deadline by the clock, so each
    // answer must take as long as it did.
    let (server, provider) = serve_at("no-task", Pace::Recorded).await;
    let artifact = provider
        .build(&build_request("no-task", &reference()), &|_: &str| {})
        .await
        .expect("the recorded build");
    let error = provider
        .launch(&artifact, &labels("no-task"))
        .await
        .expect_err("no task comes");
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert!(
        error.to_string().contains("had no task after 2s"),
        "{error}"
    );
    delete_image(&provider, &artifact).await;
    server
        .finish()
        .expect("the calls as recorded, SandboxTerminate included");
    assert_eq!(attempts("no-task", "SandboxTerminate").len(), 1);
    assert_build_secrets_deleted("no-task");
}

#[tokio::test]
async fn an_expired_router_jwt_is_fetched_again_and_the_code_still_runs() {
    let (server, provider) = serve("jwt-expires").await;
    let (artifact, _) = lifecycle(&provider, "jwt-expires").await;
    delete_image(&provider, &artifact).await;
    server.finish().expect("the calls as recorded");
    let (_, recorded) = cassette("jwt-expires");
    let refused = recorded
        .exchanges
        .iter()
        .filter(|e| e.method.contains("TaskCommandRouter") && e.status == 16)
        .count();
    let accesses = recorded
        .exchanges
        .iter()
        .filter(|e| e.method.ends_with("/TaskGetCommandRouterAccess"))
        .count();
    assert!(refused >= 1, "the router refused the expired JWT");
    assert_eq!(accesses, refused + 1, "one new JWT per refusal");
    assert_build_secrets_deleted("jwt-expires");
}

#[tokio::test]
async fn terminating_an_ended_sandbox_answers_its_ending() {
    let (server, provider) = serve("terminate-ended").await;
    let (artifact, sandbox) = lifecycle(&provider, "terminate-ended").await;
    let again = provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("a second terminate is no error");
    assert_eq!(again.exit_code, Some(0));
    delete_image(&provider, &artifact).await;
    server.finish().expect("the calls as recorded");
    assert_build_secrets_deleted("terminate-ended");
}

#[tokio::test]
async fn a_client_that_stops_after_the_build_fails_the_replay() {
    // A client that makes fewer calls than the recording leaves exchanges unused, and the
    // replay says so.
    let (server, provider) = serve("unavailable-create").await;
    let artifact = provider
        .build(
            &build_request("unavailable-create", &reference()),
            &|_: &str| {},
        )
        .await
        .expect("the recorded build");
    drop(artifact);
    let error = server.finish().expect_err("exchanges were left unused");
    assert!(
        error.to_string().contains("were never requested"),
        "{error}"
    );
}
