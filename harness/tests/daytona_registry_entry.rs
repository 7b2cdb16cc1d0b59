//! Daytona's docker-registry entry, which hands the base registry's credential to the
//! builder, is deleted by id as soon as the build ends, whether the build succeeded or
//! failed: the daytona client replays `fixtures/cassettes/daytona/builds/` (recorded
//! through the authoring emulator) and the replay server's record of served exchanges
//! shows `DELETE /docker-registry/<id>` with the id the create answered. Strict replay
//! fails both when the client sends a delete the cassette does not hold and when a
//! recorded delete is never requested, as it would be by a client that skipped it.
//! No Docker.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::api::replay::{Observed, Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{ApiSettings, Body, Cassette, Endpoints, Mode, Volatiles};
use sandbox_providers::daytona::{DaytonaProvider, KIND_SNAPSHOT};
use sandbox_providers::{
    Artifact, BaseImage, BuildRequest, CredentialSource, ErrorKind, Housekeeping as _, Provider,
    ProviderError, RegistryCredential, Resource, RunLabels, Secret,
};

/// A fake API key, made up for this test; it grants nothing anywhere.
fn fake_key() -> Secret {
    Secret::new("DAYTONA_API_KEY", "fake-daytona-key-for-registry-tests")
}

/// A fake registry login token, made up for this test; replay redacts it to the
/// cassette's `<redacted:REGISTRY_PASSWORD>`.
fn fake_token() -> Secret {
    Secret::new("REGISTRY_PASSWORD", "fake-login-token-for-registry-tests")
}

fn cassette_path(name: &str) -> PathBuf {
    common::root().join(format!("fixtures/cassettes/daytona/builds/{name}.yaml"))
}

fn labels(scenario: &str) -> RunLabels {
    RunLabels {
        run_id: "20260101T000000Z-4e6157".into(),
        variant: "daytona".into(),
        scenario: scenario.into(),
    }
}

/// Serves `cassette` (recorded as `name`) and points a daytona client at it.
async fn serve(name: &str, cassette: Cassette) -> (ReplayServer, DaytonaProvider) {
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register("run-id", &labels(name).run_id);
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: vec![fake_key(), fake_token()],
            volatiles: volatiles.clone(),
            request_check: None,
            matched_headers: sandbox_providers::daytona::REPLAY_MATCHED_HEADERS,
            cassette_path: Some(cassette_path(name)),
        },
    )
    .await
    .expect("the replay server starts");
    let provider = DaytonaProvider::new(
        ApiSettings {
            endpoints: Endpoints {
                api_base: "http://127.0.0.1:9".into(),
                sandbox_domain: String::new(),
            },
            mode: Mode::Replay {
                server_url: server.url(),
                pace: Pace::Instant,
            },
            credentials: vec![fake_key()],
            volatiles,
            call_timeout: Duration::from_secs(10),
        },
        None,
        None,
    )
    .expect("the client starts");
    (server, provider)
}

/// The build the cassettes recorded: the builds environment from the private base, with
/// the registry's credential.
fn request(name: &str) -> BuildRequest {
    BuildRequest {
        environment_dir: common::root().join("fixtures/cassettes/daytona/builds/environment"),
        base: BaseImage {
            reference: common::PRIVATE_BASE.into(),
            registry: Some("registry.emulator.test".into()),
        },
        registry_credential: Some(RegistryCredential {
            registry: "registry.emulator.test".into(),
            username: "AWS".into(),
            password: fake_token(),
            source: CredentialSource::EcrLoginToken,
        }),
        build_secrets: Vec::new(),
        labels: labels(name),
    }
}

/// Runs the recorded client calls: the build, and for a build that succeeded the
/// snapshot's delete, as the authoring did.
async fn build(name: &str, provider: &DaytonaProvider) -> Result<Artifact, ProviderError> {
    let artifact = provider.build(&request(name), &|_: &str| {}).await?;
    provider
        .delete_resource(&Resource {
            kind: KIND_SNAPSHOT.into(),
            id: artifact.id.clone(),
        })
        .await?;
    Ok(artifact)
}

/// The id the cassette's `POST /docker-registry` answered, and that exchange's index.
fn created_entry(cassette: &Cassette) -> (usize, String) {
    let (at, exchange) = cassette
        .exchanges
        .iter()
        .enumerate()
        .find(|(_, e)| e.request.method == "POST" && e.request.path == "/docker-registry")
        .expect("the cassette creates a docker-registry entry");
    let Some(Body::Json(answer)) = &exchange.response.body else {
        panic!("the create answered no JSON");
    };
    let id = answer["id"].as_str().expect("the create answered an id");
    (at, id.to_owned())
}

/// Index of the recorded `DELETE /docker-registry/<id>`.
fn recorded_delete(cassette: &Cassette, id: &str) -> usize {
    cassette
        .exchanges
        .iter()
        .position(|e| {
            e.request.method == "DELETE" && e.request.path == format!("/docker-registry/{id}")
        })
        .expect("the cassette deletes the entry it created")
}

/// Asserts the replay served the entry's create, then the build's end, then the delete
/// of the id the create answered, which the server answered with the recorded 204.
fn assert_deleted_by_id(observed: &[Observed], cassette: &Cassette) {
    let (created, id) = created_entry(cassette);
    let at = |want: &dyn Fn(&Observed) -> bool, what: &str| {
        observed
            .iter()
            .position(want)
            .unwrap_or_else(|| panic!("no {what} was requested: {observed:#?}"))
    };
    let create = at(&|o| o.exchange == Some(created), "create of the entry");
    let delete = at(
        &|o| o.method == "DELETE" && o.path == format!("/docker-registry/{id}"),
        &format!("DELETE /docker-registry/{id}"),
    );
    let last_poll = observed
        .iter()
        .rposition(|o| o.method == "GET" && o.path.starts_with("/snapshots/"))
        .expect("the build polled its snapshot");
    assert!(
        create < last_poll && last_poll < delete,
        "the entry is created before the build and deleted after it ended: {observed:#?}"
    );
    assert_eq!(
        (observed[delete].exchange, observed[delete].status),
        (Some(recorded_delete(cassette, &id)), 204),
        "the delete is the recorded one"
    );
}

#[tokio::test]
async fn a_successful_build_deletes_its_registry_entry_by_id() {
    let cassette = Cassette::load(&cassette_path("private-base")).expect("the cassette loads");
    let (server, provider) = serve("private-base", cassette.clone()).await;
    build("private-base", &provider)
        .await
        .expect("the build replays");
    assert_deleted_by_id(&server.observed(), &cassette);
    server.finish().expect("the replay went as recorded");
}

#[tokio::test]
async fn a_failed_build_deletes_its_registry_entry_by_id() {
    let cassette =
        Cassette::load(&cassette_path("private-base-failed")).expect("the cassette loads");
    let (server, provider) = serve("private-base-failed", cassette.clone()).await;
    let e = build("private-base-failed", &provider).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Build, "{e}");
    assert!(
        e.message.contains("registry.emulator.test: unauthorized"),
        "the error names the registry: {e}"
    );
    assert!(
        !e.to_string().contains(fake_token().expose()),
        "the token is not in the error"
    );
    assert_deleted_by_id(&server.observed(), &cassette);
    server.finish().expect("the replay went as recorded");
}

/// `cassette` without its delete of the entry: the client's delete is unexpected.
fn without_delete(cassette: &Cassette) -> Cassette {
    let (_, id) = created_entry(cassette);
    let mut edited = cassette.clone();
    edited.exchanges.remove(recorded_delete(cassette, &id));
    edited
}

/// `cassette` with its delete of the entry recorded twice: the second one is never
/// requested, as the recorded delete would not be by a client that skipped it.
fn with_delete_twice(cassette: &Cassette) -> Cassette {
    let (_, id) = created_entry(cassette);
    let mut edited = cassette.clone();
    let at = recorded_delete(cassette, &id);
    edited
        .exchanges
        .insert(at + 1, cassette.exchanges[at].clone());
    edited
}

#[tokio::test]
async fn strict_replay_fails_when_the_recorded_delete_and_the_clients_differ() {
    for name in ["private-base", "private-base-failed"] {
        let cassette = Cassette::load(&cassette_path(name)).expect("the cassette loads");
        let (_, id) = created_entry(&cassette);

        let (server, provider) = serve(name, without_delete(&cassette)).await;
        let _ = build(name, &provider).await;
        let e = server
            .finish()
            .expect_err("an unrecorded delete fails the replay");
        assert!(
            e.message.contains(&format!("DELETE /docker-registry/{id}")),
            "{name}: the unexpected delete is named: {e}"
        );

        let (server, provider) = serve(name, with_delete_twice(&cassette)).await;
        let _ = build(name, &provider).await;
        let e = server
            .finish()
            .expect_err("a recorded delete never requested fails the replay");
        assert!(
            e.message.contains("never requested")
                && e.message.contains(&format!("DELETE /docker-registry/{id}")),
            "{name}: the delete never requested is named: {e}"
        );
    }
}
