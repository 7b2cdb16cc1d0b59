//! Parity with Datalayer's own client (datalayer-core 1.1.40, pinned in
//! harness/tests/sdk): the project's datalayer-runtimes client and datalayer-core
//! (`harness/tests/sdk/datalayer_parity.py`) each perform the intents against a datalayer
//! emulator of their own, at its plain address (datalayer-core's URL there), which keeps
//! every request and kernel WebSocket upgrade; the requests are compared, differences
//! judged by `fixtures/parity/datalayer-runtimes.yaml`. Then the runtime's Jupyter Server
//! called with `Authorization: token …` (as the client once did), put back into our
//! requests, fails it.
//!
//! Needs Docker and the SDK venv:
//! `cargo test -p sandbox-matrix --test engine parity::datalayer_runtimes`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::datalayer::{DEFAULT_DOMAIN, DEFAULT_ENVIRONMENT, Emulator, Options};
use sandbox_emulators::record::Exchange;
use sandbox_matrix::run::runner::new_run_id;
use sandbox_providers::api::{Mode, Network};
use sandbox_providers::datalayer::runtimes::{self, RuntimesProvider};
use sandbox_providers::{Artifact, RunLabels, Secret};
use serde_json::json;

use super::{OurIntents, ParityFile, Side, Window, judge, perform, sent};

/// The SDK the venv must hold.
pub const SDK: &str = "datalayer-core";

/// Fake: the emulator checks only that a key is sent.
const FAKE_KEY: &str = "datalayer-fake-parity-key-0000";

pub async fn our_datalayer_client_sends_what_datalayer_core_sends_for_each_intent() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let root = common::root();
    let parity = ParityFile::load(&root, "datalayer-runtimes");
    let docker = common::prepared_docker(&root).await;
    let start = || async {
        let emulator = Emulator::start(
            docker.clone(),
            Options {
                port: 0,
                domain: DEFAULT_DOMAIN.to_owned(),
                environment_name: DEFAULT_ENVIRONMENT.to_owned(),
                faults: Default::default(),
                run_id: None,
                kill_after: None,
            },
        )
        .await
        .expect("the datalayer emulator starts");
        emulator
            .seed(
                &root.join("fixtures/environments/reference"),
                &|line: &str| eprintln!("environment: {line}"),
            )
            .await
            .expect("the emulator's environment builds");
        emulator
    };
    let labels = RunLabels {
        run_id: new_run_id(),
        variant: runtimes::VARIANT.into(),
        scenario: "parity".into(),
    };

    let emulator = start().await;
    let ours = ours(&emulator, &labels).await;
    emulator.stop();
    emulator.cleanup().await;

    let emulator = start().await;
    let theirs = theirs(&emulator, &python, &ours).await;
    emulator.stop();
    emulator.cleanup().await;
    assert!(common::left_by_run(&labels.run_id).is_empty());

    judge(
        &parity,
        &ours,
        &theirs,
        &[(
            "`Authorization: token` to the Jupyter Server",
            &token_scheme,
        )],
    );
}

/// Calls the runtime's Jupyter Server with `Authorization: token`, as the client once did.
fn token_scheme(e: &mut Exchange) -> bool {
    if !e.path.starts_with("/jupyter/") {
        return false;
    }
    match e.headers.get_mut("authorization") {
        Some(value) => {
            *value = "token {token}".into();
            true
        }
        None => false,
    }
}

/// The project's datalayer-runtimes client performs every intent against `emulator`.
async fn ours(emulator: &Emulator, labels: &RunLabels) -> Side {
    let exchanges = emulator.record();
    let client = RuntimesProvider::with_network(
        &emulator.plain_url(),
        Mode::Live,
        Secret::new(runtimes::API_KEY_VAR, FAKE_KEY),
        Arc::default(),
        DEFAULT_ENVIRONMENT.to_owned(),
        &Network::default(),
    )
    .expect("a datalayer-runtimes client");
    let artifact = Artifact {
        id: DEFAULT_ENVIRONMENT.to_owned(),
        kind: runtimes::ARTIFACT_KIND.to_owned(),
    };
    let plan = OurIntents {
        build: None,
        launch: Some(artifact),
        commands: &[],
    };
    let w = perform(&client, labels, plan).await;
    let all = exchanges.all();
    let given_name = sent(&all, "POST", "/api/runtimes/v1/runtimes")["given_name"]
        .as_str()
        .expect("our client named its runtime")
        .to_owned();
    Side {
        exchanges: all,
        windows: w,
        given: vec![(given_name, "{given_name}".into())],
    }
}

/// datalayer-core performs the intents against `emulator`, with the parameters our client
/// sent for each.
async fn theirs(emulator: &Emulator, python: &Path, ours: &Side) -> Side {
    let exchanges = emulator.record();
    let dir = common::out_dir("parity-datalayer");
    let create = sent(&ours.exchanges, "POST", "/api/runtimes/v1/runtimes");
    // Named as ours names it, so the name compares as the intent's.
    let given_name = create["given_name"]
        .as_str()
        .expect("a given name")
        .to_owned();
    let given = json!({
        "name": given_name,
        "url": emulator.plain_url(),
        "environment": create["environment_name"],
        "time_reservation": runtimes::RESERVATION_MINUTES,
    })
    .to_string();
    let python = python.to_owned();
    let cwd = dir.join("cwd");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("an empty HOME");
    let printed = tokio::task::spawn_blocking(move || {
        common::sdk::run_flow(
            &python,
            "datalayer_parity.py",
            &cwd,
            &[
                ("SANDBOX_MATRIX_PARITY", &given),
                ("HOME", &home.display().to_string()),
            ],
            &[
                "DATALAYER_RUN_URL",
                "DATALAYER_API_KEY",
                "DATALAYER_EXTERNAL_TOKEN",
            ],
            "datalayer parity",
            &[
                "create",
                "run-1+1",
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
    Side {
        exchanges: exchanges.all(),
        windows: Window::from_flow(&printed),
        given: vec![(given_name, "{given_name}".into())],
    }
}
