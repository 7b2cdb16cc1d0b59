//! Parity with Daytona's official SDK (daytona 0.226.1, pinned in harness/tests/sdk): the
//! project's daytona client and the SDK (`harness/tests/sdk/daytona_parity.py`) each
//! perform the intents against a daytona emulator of their own whose snapshots wait
//! [`QUEUED`] for a runner, as a busy service's do, and whose build-log URL is 404 until
//! then (the server's rule, `emulate::daytona`); the requests are compared, differences
//! judged by `fixtures/parity/daytona.yaml`. Then a build-log URL asked for while the
//! snapshot is still pending, put back into our requests, fails it. The SDK builds the
//! environment's COPY as it does live, through the emulator's object storage; its S3 client
//! trusts only the system's CA bundle, so the SDK runs where that bundle is the emulator's
//! test CA (`common::sdk::with_system_ca`).
//!
//! Needs Docker and the SDK venv: `cargo test -p sandbox-matrix --test engine parity::daytona`.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::daytona::{DEFAULT_DOMAIN, Emulator, Options};
use sandbox_emulators::record::Exchange;
use sandbox_matrix::run::runner::new_run_id;
use sandbox_providers::api::{ApiSettings, Endpoints, Mode, Network};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{RunLabels, Secret};
use serde_json::json;

use super::{OurIntents, ParityFile, Side, Window, build_request, judge, perform, sent};

/// The SDK the venv must hold.
pub const SDK: &str = "daytona";

/// How long a new snapshot waits for a runner, `pending`.
const QUEUED: Duration = Duration::from_secs(2);
/// The least time a snapshot stays `building`: the SDK polls once a second and streams the
/// build log only once it has seen a state other than `pending` before `active`; a build
/// the engine serves from its cache would end before that (seen in CI, 2026-12-06).
const BUILDING: Duration = Duration::from_secs(3);

/// Fake: the emulator checks only that a key is sent.
const FAKE_KEY: &str = "fake-daytona-parity-key";

pub async fn our_daytona_client_sends_what_the_daytona_sdk_sends_for_each_intent() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let root = common::root();
    let parity = ParityFile::load(&root, "daytona");
    let docker = common::prepared_docker(&root).await;
    let environment = root.join("fixtures/environments/parity");
    let labels = RunLabels {
        run_id: new_run_id(),
        variant: "daytona".into(),
        scenario: "parity".into(),
    };
    let start = || async {
        Emulator::start(
            docker.clone(),
            Options {
                labels: Some(labels.clone()),
                queued: QUEUED,
                building_at_least: BUILDING,
                ..Options::new(0, DEFAULT_DOMAIN)
            },
        )
        .await
        .expect("the daytona emulator starts")
    };

    let emulator = start().await;
    let ours = ours(&emulator, &environment, &labels).await;
    emulator.stop();
    emulator.cleanup().await;

    let emulator = start().await;
    let theirs = theirs(&emulator, &python, &environment, &ours).await;
    emulator.stop();
    emulator.cleanup().await;
    assert!(common::left_by_run(&labels.run_id).is_empty());

    judge(
        &parity,
        &ours,
        &theirs,
        &[("a build-log URL asked for while pending", &logs_url_refused)],
    );
}

/// Answers a build-log URL request 404, as the server does while the snapshot is pending
/// (as the client once asked, right after create).
fn logs_url_refused(e: &mut Exchange) -> bool {
    if !e.path.ends_with("/build-logs-url") {
        return false;
    }
    e.status = 404;
    true
}

/// `https://localhost:<port>/api`: the API URL both sides call (the SDK's resolver
/// reaches no other name here), so their hosts compare.
fn api_url(emulator: &Emulator) -> String {
    let live = reqwest::Url::parse(&emulator.api_url_with_port()).expect("a URL");
    format!(
        "https://localhost:{}{}",
        live.port().expect("a port"),
        live.path()
    )
}

/// The project's daytona client performs every intent against `emulator`.
async fn ours(emulator: &Emulator, environment: &Path, labels: &RunLabels) -> Side {
    let exchanges = emulator.record();
    let client = DaytonaProvider::with_network(
        ApiSettings {
            endpoints: Endpoints {
                api_base: api_url(emulator),
                sandbox_domain: String::new(),
            },
            mode: Mode::Live,
            credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
            volatiles: Arc::default(),
            call_timeout: Duration::from_secs(120),
        },
        None,
        None,
        &Network::default().trust_pem(emulator.ca_pem().to_owned()),
    )
    .expect("a daytona client");
    let request = build_request(environment, labels);
    // A command as root is no intent here: the toolbox takes no user, so neither client
    // can ask for one (the parity file says so).
    let plan = OurIntents {
        build: Some(&request),
        launch: None,
        commands: &[("command-default", false, "datalayer")],
    };
    let w = perform(&client, labels, plan).await;
    let name = sent(&exchanges.all(), "POST", "/api/snapshots")["name"]
        .as_str()
        .expect("a snapshot name")
        .to_owned();
    Side {
        exchanges: exchanges.all(),
        windows: w,
        given: vec![(name, "{name}".into())],
    }
}

/// The path our client ran its command at (`/toolbox/<id>/process/execute`).
fn execute_path(exchanges: &[Exchange]) -> String {
    exchanges
        .iter()
        .find(|e| e.path.ends_with("/process/execute"))
        .map(|e| e.path.clone())
        .expect("our client ran a command")
}

/// The official SDK performs the intents against `emulator`, with the parameters our
/// client sent for each.
async fn theirs(emulator: &Emulator, python: &Path, environment: &Path, ours: &Side) -> Side {
    let exchanges = emulator.record();
    let dir = common::out_dir("parity-daytona");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, emulator.ca_pem()).expect("the CA file");
    let snapshot = sent(&ours.exchanges, "POST", "/api/snapshots");
    let create = sent(&ours.exchanges, "POST", "/api/sandbox");
    let name = format!("{}-sdk", snapshot["name"].as_str().expect("a name"));
    let given = json!({
        "url": api_url(emulator),
        "ca_file": ca_file,
        "environment": environment,
        "base": sandbox_providers::docker::base::BASE_IMAGE,
        "name": name,
        "resources": {"cpu": snapshot["cpu"], "memory": snapshot["memory"], "disk": snapshot["disk"]},
        "labels": create["labels"],
        "exec_timeout": sent(&ours.exchanges, "POST", &execute_path(&ours.exchanges))["timeout"],
        "target": create["target"].as_str().expect("ours names a region"),
    })
    .to_string();
    let python = python.to_owned();
    let cwd = dir.join("cwd");
    let ca = ca_file.clone();
    let printed = tokio::task::spawn_blocking(move || {
        common::sdk::run_flow_with(
            common::sdk::with_system_ca(&ca, &python),
            "daytona_parity.py",
            &cwd,
            &[("SANDBOX_MATRIX_PARITY", &given)],
            &[
                "DAYTONA_API_KEY",
                "DAYTONA_API_URL",
                "DAYTONA_TARGET",
                "DAYTONA_OTEL_ENABLED",
                "SSL_CERT_DIR",
            ],
            "daytona parity",
            &[
                "build",
                "create",
                "run-1+1",
                "command-default",
                "state",
                "list",
                "delete",
                "state-deleted",
            ],
        )
    })
    .await
    .expect("the SDK flow");
    let _ = std::fs::remove_dir_all(&dir);
    // The SDK names a COPY's file in the archive (and the Dockerfile) by its path without
    // the leading `/`, which differs by checkout.
    let archived = environment
        .to_string_lossy()
        .trim_start_matches('/')
        .to_owned();
    Side {
        exchanges: exchanges.all(),
        windows: Window::from_flow(&printed),
        given: vec![(name, "{name}".into()), (archived, "{environment}".into())],
    }
}
