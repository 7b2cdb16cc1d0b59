//! Parity with E2B's official SDK (e2b 2.63.0, pinned in harness/tests/sdk): the project's
//! e2b client and the SDK (`harness/tests/sdk/e2b_parity.py`) each perform the intents
//! against an e2b emulator of their own, built from `fixtures/environments/parity` (a
//! COPY, a RUN and a USER after its FROM); the requests are compared, differences judged
//! by `fixtures/parity/e2b.yaml`. Then the regressions the parity check exists for are put
//! back into our recording one at a time, each failing it: a plain-tar upload, an empty
//! RUN user.
//!
//! Needs Docker and the SDK venv: `cargo test -p sandbox-matrix --test engine parity::e2b`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::e2b::{Emulator, Options};
use sandbox_emulators::record::{Body, Exchange};
use sandbox_matrix::run::runner::new_run_id;
use sandbox_providers::api::{Endpoints, Mode};
use sandbox_providers::e2b::E2bProvider;
use sandbox_providers::{RunLabels, Secret};
use serde_json::{Value, json};

use super::{OurIntents, ParityFile, Side, Window, build_request, judge, perform, sent};

/// The domain both emulators serve: the SDK's resolver sends `*.localhost` to loopback.
const DOMAIN: &str = "e2b.localhost";

/// The SDK the venv must hold (it brings e2b, whose Template and Sandbox the flow uses).
pub const SDK: &str = "e2b-code-interpreter";

/// Fake: the emulator checks only that a key is sent.
const FAKE_KEY: &str = "e2b_fake_parity_key_0000";

pub async fn our_e2b_client_sends_what_the_e2b_sdk_sends_for_each_intent() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let root = common::root();
    let parity = ParityFile::load(&root, "e2b");
    let docker = common::prepared_docker(&root).await;
    let environment = root.join("fixtures/environments/parity");
    let start = || async {
        Emulator::start(
            docker.clone(),
            Options {
                port: 0,
                domain: DOMAIN.to_owned(),
                run_id: None,
                kill_after: None,
                start_cmd: None,
            },
        )
        .await
        .expect("the e2b emulator starts")
    };

    let labels = RunLabels {
        run_id: new_run_id(),
        variant: "e2b".into(),
        scenario: "parity".into(),
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
        &[
            ("a plain-tar upload", &plain_tar),
            ("an empty RUN user", &empty_run_user),
        ],
    );
}

/// Turns a gzip upload into a plain tar's form.
fn plain_tar(e: &mut Exchange) -> bool {
    if let Body::Gzip { len, .. } = e.body {
        e.body = Body::Tar { len };
        return true;
    }
    false
}

/// Empties the user of every RUN step of a build start.
fn empty_run_user(e: &mut Exchange) -> bool {
    let Body::Json { value } = &mut e.body else {
        return false;
    };
    let mut touched = false;
    let steps = value.get_mut("steps").and_then(Value::as_array_mut);
    for step in steps.into_iter().flatten() {
        if step["type"] == "RUN"
            && let Some(args) = step["args"].as_array_mut()
        {
            args.truncate(1);
            args.push(json!(""));
            touched = true;
        }
    }
    touched
}

/// The project's e2b client performs every intent against `emulator`.
async fn ours(emulator: &Emulator, environment: &Path, labels: &RunLabels) -> Side {
    let exchanges = emulator.record();
    let client = E2bProvider::with_network(
        Endpoints {
            api_base: format!("https://api.{}", emulator.domain()),
            sandbox_domain: emulator.domain().to_owned(),
        },
        Mode::Live,
        Secret::new("E2B_API_KEY", FAKE_KEY),
        Arc::default(),
        Default::default(),
        &emulator.network(),
    )
    .expect("an e2b client");
    let request = build_request(environment, labels);
    let plan = OurIntents {
        build: Some(&request),
        launch: None,
        commands: &[
            ("command-root", true, "root"),
            ("command-default", false, "datalayer"),
        ],
    };
    let w = perform(&client, labels, plan).await;
    Side {
        exchanges: exchanges.all(),
        windows: w,
        given: vec![(
            sandbox_providers::e2b::template_name(labels),
            "{name}".into(),
        )],
    }
}

/// The official SDK performs the intents against `emulator`, with the parameters our
/// client sent for each.
async fn theirs(emulator: &Emulator, python: &Path, environment: &Path, ours: &Side) -> Side {
    let exchanges = emulator.record();
    let dir = common::out_dir("parity-e2b");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, emulator.ca_pem()).expect("the CA file");
    let template = sent(&ours.exchanges, "POST", "/v3/templates");
    let create = sent(&ours.exchanges, "POST", "/sandboxes");
    let name = format!(
        "{}-sdk",
        template["name"].as_str().expect("a template name")
    );
    let given = json!({
        "url": format!("https://{}", emulator.domain_with_port()),
        "ca_file": ca_file,
        "environment": environment,
        "base": sandbox_providers::docker::base::BASE_IMAGE,
        "name": name,
        "cpu_count": template["cpuCount"],
        "memory_mb": template["memoryMB"],
        "timeout": create["timeout"],
        "metadata": create["metadata"],
        "envs": create["envVars"],
        "allow_public_traffic": create["network"]["allowPublicTraffic"],
    })
    .to_string();
    let python = python.to_owned();
    let cwd = dir.join("cwd");
    let printed = tokio::task::spawn_blocking(move || {
        common::sdk::run_flow(
            &python,
            "e2b_parity.py",
            &cwd,
            &[("SANDBOX_MATRIX_PARITY", &given)],
            &[
                "E2B_API_URL",
                "E2B_SANDBOX_URL",
                "E2B_DOMAIN",
                "E2B_DEBUG",
                "E2B_API_KEY",
            ],
            "e2b parity",
            &[
                "build",
                "create",
                "command-root",
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
    Side {
        exchanges: exchanges.all(),
        windows: Window::from_flow(&printed),
        given: vec![(name, "{name}".into())],
    }
}
