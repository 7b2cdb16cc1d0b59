//! Parity with Modal's official client (modal 1.6.4, pinned in harness/tests/sdk): the
//! project's modal client and the official one (`harness/tests/sdk/modal_parity.py`)
//! each perform the intents against a modal emulator of their own, which keeps every
//! call; each call's request messages are decoded with the official client's own
//! descriptors (`modal_proto`, read from the venv by `modal_descriptors.py`), so a field
//! our subset protos leave out is seen too. Differences are judged by
//! `fixtures/parity/modal.yaml`. Then a build without its `builder_version`, put back into
//! our calls, fails it.
//!
//! Needs Docker and the SDK venv: `cargo test -p sandbox-matrix --test engine parity::modal`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use sandbox_emulators::Emulator as _;
use sandbox_emulators::modal::{DEFAULT_DOMAIN, Emulator, Options, ROUTER_JWT_TTL};
use sandbox_emulators::record::{Body, Exchange};
use sandbox_matrix::run::runner::new_run_id;
use sandbox_providers::modal::client::{Credentials, TOKEN_ID_VAR, TOKEN_SECRET_VAR};
use sandbox_providers::modal::{Connection, ModalProvider};
use sandbox_providers::{RunLabels, Secret};
use serde_json::{Value, json};

use super::{OurIntents, ParityFile, Side, Window, build_request, judge, perform, sent};

/// The SDK the venv must hold.
pub const SDK: &str = "modal";

pub async fn our_modal_client_sends_what_the_modal_client_sends_for_each_intent() {
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let root = common::root();
    let parity = ParityFile::load(&root, "modal");
    let pool = official_descriptors(&python);
    let docker = common::prepared_docker(&root).await;
    let environment = root.join("fixtures/environments/parity");
    let start = || async {
        Emulator::start(
            docker.clone(),
            Options {
                port: 0,
                domain: DEFAULT_DOMAIN.to_owned(),
                router_jwt_ttl: ROUTER_JWT_TTL,
                unavailable_once: Vec::new(),
                no_task: false,
                run_id: None,
                kill_after: None,
            },
        )
        .await
        .expect("the modal emulator starts")
    };
    let labels = RunLabels {
        run_id: new_run_id(),
        variant: "modal".into(),
        scenario: "parity".into(),
    };

    let emulator = start().await;
    let ours = decoded(ours(&emulator, &environment, &labels).await, &pool);
    emulator.stop();
    emulator.cleanup().await;

    let emulator = start().await;
    let theirs = decoded(theirs(&emulator, &python, &environment, &ours).await, &pool);
    emulator.stop();
    emulator.cleanup().await;
    assert!(common::left_by_run(&labels.run_id).is_empty());

    judge(
        &parity,
        &ours,
        &theirs,
        &[("a build without builder_version", &no_builder_version)],
    );
}

/// Removes a build's `builder_version`.
fn no_builder_version(e: &mut Exchange) -> bool {
    if !e.path.ends_with("/ImageGetOrCreate") {
        return false;
    }
    match &mut e.body {
        Body::Json { value } => value["messages"][0]
            .as_object_mut()
            .and_then(|m| m.remove("builder_version"))
            .is_some(),
        _ => false,
    }
}

/// The official client's descriptors, as `modal_descriptors.py` prints them.
fn official_descriptors(python: &Path) -> DescriptorPool {
    let script = common::root().join("harness/tests/sdk/modal_descriptors.py");
    let output = std::process::Command::new(python)
        .arg(&script)
        .output()
        .expect("the venv's python runs");
    assert!(
        output.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    DescriptorPool::decode(output.stdout.as_slice()).expect("a FileDescriptorSet")
}

/// `side` with every gRPC request decoded as JSON (`{"messages": [...]}`, proto field
/// names), and the ids its requests carry (under a key ending in `id`) added to the
/// values compared as placeholders.
fn decoded(mut side: Side, pool: &DescriptorPool) -> Side {
    let options = SerializeOptions::new().use_proto_field_name(true);
    let mut ids = std::collections::BTreeMap::new();
    for e in &mut side.exchanges {
        let Body::Grpc { messages } = &e.body else {
            continue;
        };
        let input = method_input(pool, &e.path);
        let values: Vec<Value> = messages
            .iter()
            .map(|m| {
                let bytes = base64_decode(m);
                let message = DynamicMessage::decode(input.clone(), bytes.as_slice())
                    .unwrap_or_else(|err| panic!("{} does not decode: {err}", e.path));
                message
                    .serialize_with_options(serde_json::value::Serializer, &options)
                    .expect("a message as JSON")
            })
            .collect();
        for value in &values {
            collect_ids(value, None, &mut ids);
        }
        e.body = Body::Json {
            value: json!({ "messages": values }),
        };
    }
    side.given.extend(ids);
    side
}

/// The input message of the RPC at `path` (`/package.Service/Method`).
fn method_input(pool: &DescriptorPool, path: &str) -> prost_reflect::MessageDescriptor {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or_else(|| panic!("not an RPC path: {path}"));
    pool.get_service_by_name(service)
        .and_then(|s| s.methods().find(|m| m.name() == method))
        .unwrap_or_else(|| panic!("the official protos have no {path}"))
        .input()
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

/// Strings under keys ending in `id` (ids each side was handed or chose: sandbox, image,
/// app, task, exec), as `{key}`.
fn collect_ids(
    v: &Value,
    key: Option<&str>,
    into: &mut std::collections::BTreeMap<String, String>,
) {
    match v {
        Value::String(s) if s.len() >= 6 => {
            if let Some(key) = key.filter(|k| k.to_ascii_lowercase().ends_with("id")) {
                into.entry(s.clone())
                    .or_insert_with(|| format!("{{{key}}}"));
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_ids(i, key, into)),
        Value::Object(map) => map.iter().for_each(|(k, v)| collect_ids(v, Some(k), into)),
        _ => {}
    }
}

/// The token the emulator generated: fakes, which grant nothing anywhere.
fn credentials(emulator: &Emulator) -> Credentials {
    Credentials {
        token_id: Secret::new(TOKEN_ID_VAR, emulator.token_id()),
        token_secret: Secret::new(TOKEN_SECRET_VAR, emulator.token_secret()),
    }
}

/// The project's modal client performs every intent against `emulator`.
async fn ours(emulator: &Emulator, environment: &Path, labels: &RunLabels) -> Side {
    let exchanges = emulator.record();
    let client = ModalProvider::new(
        &emulator.server_url(),
        credentials(emulator),
        Connection::Live,
        Arc::default(),
    )
    .expect("a modal client");
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
        given: Vec::new(),
    }
}

/// The official client performs the intents against `emulator`, with the parameters our
/// client sent for each.
async fn theirs(emulator: &Emulator, python: &Path, environment: &Path, ours: &Side) -> Side {
    let exchanges = emulator.record();
    let dir = common::out_dir("parity-modal");
    let build = sent(
        &ours.exchanges,
        "POST",
        "/modal.client.ModalClient/ImageGetOrCreate",
    )["messages"][0]
        .clone();
    let create = sent(
        &ours.exchanges,
        "POST",
        "/modal.client.ModalClient/SandboxCreate",
    )["messages"][0]
        .clone();
    let tags: serde_json::Map<String, Value> = create["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| {
            (
                t["tag_name"].as_str().unwrap_or_default().to_owned(),
                t["tag_value"].clone(),
            )
        })
        .collect();
    let given = json!({
        "environment": environment,
        "base": sandbox_providers::docker::base::BASE_IMAGE,
        "builder_version": build["builder_version"],
        "timeout": create["definition"]["timeout_secs"],
        "tags": tags,
        "region": create["definition"]["scheduler_placement"]["regions"][0],
    })
    .to_string();
    let python = python.to_owned();
    let cwd = dir.join("cwd");
    let server = emulator.server_url();
    let (token_id, token_secret) = (
        emulator.token_id().to_owned(),
        emulator.token_secret().to_owned(),
    );
    let printed = tokio::task::spawn_blocking(move || {
        common::sdk::run_flow(
            &python,
            "modal_parity.py",
            &cwd,
            &[
                ("SANDBOX_MATRIX_PARITY", &given),
                ("MODAL_SERVER_URL", &server),
                ("MODAL_TOKEN_ID", &token_id),
                ("MODAL_TOKEN_SECRET", &token_secret),
            ],
            &[
                "MODAL_PROFILE",
                "MODAL_ENVIRONMENT",
                "MODAL_IMAGE_BUILDER_VERSION",
            ],
            "modal parity",
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
        given: Vec::new(),
    }
}
