//! The daytona client against fault cassettes under fixtures/cassettes/daytona/faults/,
//! each derived from the lifecycle cassette with one fault edited in, served by the replay
//! server.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{ApiSettings, Cassette, Endpoints, Mode, Volatiles};
use sandbox_providers::daytona::{
    DaytonaProvider, KIND_REGISTRY, KIND_SANDBOX, KIND_SNAPSHOT, Waits,
};
use sandbox_providers::{
    Artifact, BuildRequest, ErrorKind, Housekeeping as _, Provider, Resource, RunLabels, SandboxId,
    Secret,
};

/// The sandbox and snapshot the lifecycle cassette created (ids come from its answers).
const SANDBOX: &str = "5d1a7000-0000-4000-8000-000000000003";
const SNAPSHOT: &str = "5d1a7000-0000-4000-8000-000000000002";
const REGISTRY: &str = "5d1a7000-0000-4000-8000-000000000001";

/// A fake API key, made up for these tests; it grants nothing anywhere.
fn fake_key() -> Secret {
    Secret::new("DAYTONA_API_KEY", "fake-daytona-key-for-fault-tests")
}

/// A fake build secret, made up for these tests, standing in for the run's canary.
fn fake_canary() -> Secret {
    Secret::new(
        "REGISTRY_TOKEN",
        "sm-fake-canary-00112233445566778899aabbccddeeff",
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("providers/ has a parent")
        .to_path_buf()
}

fn labels() -> RunLabels {
    RunLabels {
        run_id: "20260101T000000Z-fa017e".into(),
        variant: "daytona".into(),
        scenario: "lifecycle".into(),
    }
}

/// Serves fault cassette `name` and points a daytona client with `waits` at it.
async fn serve(name: &str, waits: Waits) -> (ReplayServer, DaytonaProvider) {
    let path = root().join(format!("fixtures/cassettes/daytona/faults/{name}.yaml"));
    let cassette = Cassette::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register("run-id", &labels().run_id);
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: vec![fake_key(), fake_canary()],
            volatiles: volatiles.clone(),
            request_check: None,
            matched_headers: sandbox_providers::daytona::REPLAY_MATCHED_HEADERS,
            cassette_path: Some(path),
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
                pace: sandbox_providers::api::replay::Pace::Instant,
            },
            credentials: vec![fake_key()],
            volatiles,
            call_timeout: Duration::from_secs(10),
        },
        None,
        None,
    )
    .expect("the client starts")
    .with_waits(waits);
    (server, provider)
}

fn snapshot() -> Artifact {
    Artifact {
        id: SNAPSHOT.into(),
        kind: "snapshot-id".into(),
    }
}

/// How many observed requests were `method` to a path containing `part`.
fn seen(server: &ReplayServer, method: &str, part: &str) -> usize {
    server
        .observed()
        .iter()
        .filter(|o| o.method == method && o.path.contains(part))
        .count()
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after_then_the_launch_succeeds() {
    let (server, provider) = serve("rate-limited", Waits::default()).await;
    let started = Instant::now();
    let (sandbox, timings) = provider.launch(&snapshot(), &labels()).await.unwrap();
    assert_eq!(sandbox, SandboxId(SANDBOX.into()));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(seen(&server, "POST", "/sandbox"), 2);
    assert_eq!(timings[0].name, "sandbox-started");
    assert!(timings[0].resolution.is_some());
    server.finish().unwrap();
}

#[tokio::test]
async fn a_500_on_an_idempotent_poll_is_retried() {
    let (server, provider) = serve("server-error", Waits::default()).await;
    let (sandbox, _) = provider.launch(&snapshot(), &labels()).await.unwrap();
    assert_eq!(sandbox.0, SANDBOX);
    server.finish().unwrap();
}

#[tokio::test]
async fn a_sandbox_that_never_starts_times_out_and_is_deleted() {
    let waits = Waits {
        ready: Duration::from_secs(1),
        ..Waits::default()
    };
    let (server, provider) = serve("never-ready", waits).await;
    let e = provider.launch(&snapshot(), &labels()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains(SANDBOX), "{e}");
    assert_eq!(seen(&server, "DELETE", &format!("/sandbox/{SANDBOX}")), 1);
    server.finish().unwrap();
}

#[tokio::test]
async fn a_failed_build_is_a_build_error_and_its_log_lines_arrive() {
    let (server, provider) = serve("build-failed", Waits::default()).await;
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let log = move |line: &str| sink.lock().unwrap().push(line.to_owned());
    let request = BuildRequest {
        environment_dir: root().join("fixtures/environments/reference"),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: vec![fake_canary()],
        labels: labels(),
    };
    let e = provider.build(&request, &log).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Build, "{e}");
    assert!(e.message.contains("no space left on device"), "{e}");
    let lines = lines.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l == "ERROR: failed to copy files: no space left on device"),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("Step 1/5")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(fake_canary().expose())),
        "the build secret never reaches the log"
    );
    assert_eq!(
        seen(&server, "DELETE", &format!("/snapshots/{SNAPSHOT}")),
        1
    );
    assert_eq!(
        seen(&server, "DELETE", &format!("/docker-registry/{REGISTRY}")),
        1
    );
    server.finish().unwrap();
}

#[tokio::test]
async fn deleting_what_is_already_gone_succeeds() {
    let (server, provider) = serve("delete-404", Waits::default()).await;
    for (kind, id) in [
        (KIND_SANDBOX, SANDBOX),
        (KIND_SNAPSHOT, SNAPSHOT),
        (KIND_REGISTRY, REGISTRY),
    ] {
        provider
            .delete_resource(&Resource {
                kind: kind.into(),
                id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("deleting {kind} {id}: {e}"));
    }
    server.finish().unwrap();
}

#[tokio::test]
async fn a_context_create_cut_mid_answer_is_a_transport_error_not_retried_and_cleanup_follows() {
    let (server, provider) = serve("reset-mid-stream", Waits::default()).await;
    let (sandbox, _) = provider.launch(&snapshot(), &labels()).await.unwrap();
    let e = provider.run_code(&sandbox, "1+1").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transport, "{e}");
    assert!(
        e.to_string().contains("create interpreter context"),
        "the error names the call: {e}"
    );
    assert_eq!(
        seen(&server, "POST", "/process/interpreter/context"),
        1,
        "not retried"
    );
    assert_eq!(
        seen(&server, "GET", "/process/interpreter/execute"),
        0,
        "no code runs without a context"
    );
    provider
        .delete_resource(&Resource {
            kind: KIND_SANDBOX.into(),
            id: sandbox.0.clone(),
        })
        .await
        .unwrap();
    assert_eq!(seen(&server, "DELETE", &format!("/sandbox/{SANDBOX}")), 1);
    server.finish().unwrap();
}
