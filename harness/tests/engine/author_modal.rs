//! Authors the modal cassettes: `sandbox_emulators::modal` (Modal's gRPC control
//! plane and command router on loopback, backed by the local docker variant, so every
//! build, sandbox and exec is real) answers the modal variant running the lifecycle and
//! core-tier scenarios in record mode, which writes
//! `fixtures/cassettes/modal/<scenario>.yaml`, and the fault cassettes under `faults/`.
//! That recording writes no credential is `tests/engine/modal_cli.rs`'s to check, through the CLI.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine author_modal:: -- --ignored`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::modal::{DEFAULT_DOMAIN, Emulator, Options, ROUTER_JWT_TTL};
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::ScenarioResult;
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::grpc::Recorder;
use sandbox_providers::modal::client::{Credentials, TOKEN_ID_VAR, TOKEN_SECRET_VAR};
use sandbox_providers::modal::{self, Connection, ModalProvider};
use sandbox_providers::{Housekeeping as _, Provider, Secret};

/// What the cassettes say they were written from.
const ORIGIN: &str = "authored from modal-labs/modal-client@69519aef4cf6a3378314e3e7b91e87429490ed2a \
                      modal_proto/api.proto and task_command_router.proto (fixtures/specs/modal/SOURCES.md), \
                      answered by sandbox-matrix's emulator of them backed by the docker variant";

/// Run only when asked (`--ignored`): it writes fixtures/cassettes/modal/*.yaml.
pub async fn author_modal_cassettes() {
    let root = common::root();
    record(
        &root,
        &root.join("fixtures/cassettes/modal"),
        &["lifecycle", "core-tier"],
    )
    .await;
}

/// Records `scenarios` into `dir`; their results and the secrets used.
pub async fn record(
    root: &Path,
    dir: &Path,
    scenarios: &[&str],
) -> (Vec<ScenarioResult>, Vec<Secret>) {
    let docker = common::prepared_docker(root).await;
    let mut results = Vec::new();
    let mut secrets = Vec::new();
    for scenario in scenarios {
        let (result, used) = author(root, docker.clone(), scenario, dir).await;
        results.push(result);
        secrets.extend(used);
    }
    (results, secrets)
}

async fn author(
    root: &Path,
    docker: Arc<sandbox_providers::docker::DockerProvider>,
    name: &str,
    dir: &Path,
) -> (ScenarioResult, Vec<Secret>) {
    let emulator = Emulator::start(
        docker,
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
    .expect("the modal emulator starts");
    let credentials = credentials(&emulator);
    let runner = Runner::new(
        new_run_id(),
        fake_canary(),
        Arc::new(Print),
        tokio_util::sync::CancellationToken::new(),
    );
    // The runner's own placeholders: run id, canary, its fingerprint, restart markers.
    let volatiles = runner.scenario_volatiles();
    let recorder = Recorder::new(
        modal::proto::descriptors().clone(),
        modal::record_options_with(credentials.secrets(), volatiles.clone()),
    );
    let provider = ModalProvider::new(
        &emulator.server_url(),
        credentials.clone(),
        Connection::Record(recorder.clone()),
        volatiles,
    )
    .expect("a modal client");
    let provider: Arc<dyn Provider> = Arc::new(provider);
    let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml"))).expect("scenario");
    let result = runner.run_scenario(provider, &scenario, None).await;
    // Whatever the emulator's docker sandboxes left is removed by their labels.
    emulator.stop();
    emulator.cleanup().await;
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let cassette = recorder
        .cassette(ORIGIN, Some(date), "modal", name)
        .expect("the cassette");
    let path = dir.join(format!("{name}.yaml"));
    cassette.save(&path).expect("the cassette is written");
    eprintln!(
        "wrote {} ({} calls)",
        path.display(),
        cassette.exchanges.len()
    );
    assert!(
        result.passed(),
        "{name} did not pass against the emulator: {result:#?}"
    );
    let mut used = runner.secrets();
    used.extend(credentials.secrets());
    (result, used)
}

/// The token the emulator generated: fakes, which grant nothing anywhere.
fn credentials(emulator: &Emulator) -> Credentials {
    Credentials {
        token_id: Secret::new(TOKEN_ID_VAR, emulator.token_id()),
        token_secret: Secret::new(TOKEN_SECRET_VAR, emulator.token_secret()),
    }
}

/// Prints step outcomes while authoring.
struct Print;

impl EventSink for Print {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepFinished { .. } = event {
            eprintln!("{event:?}");
        }
    }
}

/// The labels every fault cassette's calls carry: a fixed run id, so the replay of a
/// fault needs no volatiles but the canary.
pub const FAULT_RUN_ID: &str = "20260101T000000Z-fa0175";

/// Run only when asked (`--ignored`): it writes fixtures/cassettes/modal/faults/*.yaml.
pub async fn author_modal_fault_cassettes() {
    let root = common::root();
    record_faults(&root, &root.join("fixtures/cassettes/modal/faults")).await;
}

/// Records the fault cassettes into `dir`, each from an emulator set to fail one way.
pub async fn record_faults(root: &Path, dir: &Path) {
    let root = root.to_path_buf();
    std::fs::create_dir_all(dir).expect("the faults folder");
    let docker = sandbox_matrix::run::variants::docker_provider(
        &root,
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .map(Arc::new)
    .expect("a Docker engine");
    let reference = root.join("fixtures/environments/reference");
    let failing = common::out_dir("modal-fault-env");
    std::fs::create_dir_all(&failing).expect("the failing environment");
    std::fs::write(
        failing.join("Dockerfile"),
        "ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${BASE_IMAGE}\n\
         RUN echo the next step fails && false\n",
    )
    .expect("its Dockerfile");

    let faults: [(&str, &str, Options); 5] = [
        (
            "unavailable-create",
            "SandboxCreate answers UNAVAILABLE once; the client retries it under the same \
             idempotency key and the launch goes on",
            Options {
                unavailable_once: vec!["SandboxCreate".to_owned()],
                ..fault_options()
            },
        ),
        (
            "build-fails",
            "the image build fails at a RUN step; the build's Secret is still deleted",
            fault_options(),
        ),
        (
            "no-task",
            "the sandbox never gets a task; launch gives up at its deadline (2 s here) and \
             terminates the sandbox",
            Options {
                no_task: true,
                ..fault_options()
            },
        ),
        (
            "jwt-expires",
            "the command router's JWT expires between two code calls (it lives 10 s, the \
             calls are 12 s apart); the router answers UNAUTHENTICATED and the client fetches \
             a new one",
            Options {
                router_jwt_ttl: JWT_EXPIRES_TTL,
                ..fault_options()
            },
        ),
        (
            "terminate-ended",
            "a sandbox is terminated twice; the second terminate answers the first ending",
            fault_options(),
        ),
    ];
    for (name, note, options) in faults {
        let emulator = Emulator::start(docker.clone(), options)
            .await
            .expect("the modal emulator starts");
        let credentials = credentials(&emulator);
        let volatiles = Arc::new(sandbox_providers::api::Volatiles::default());
        let canary = fake_canary();
        volatiles.register_secret(&canary);
        let recorder = Recorder::new(
            modal::proto::descriptors().clone(),
            modal::record_options_with(credentials.secrets(), volatiles.clone()),
        );
        let provider = ModalProvider::new(
            &emulator.server_url(),
            credentials,
            Connection::Record(recorder.clone()),
            volatiles,
        )
        .expect("a modal client")
        // Only the fault of a sandbox that never gets a task waits briefly for one; the others'
        // sandboxes get theirs, however busy the machine.
        .with_task_deadline(std::time::Duration::from_secs(if name == "no-task" {
            2
        } else {
            60
        }));
        let environment = if name == "build-fails" {
            &*failing
        } else {
            &reference
        };
        let outcome = fault_calls(&provider, name, environment, &canary).await;
        eprintln!("{name}: {outcome}");
        emulator.stop();
        emulator.cleanup().await;
        let mut cassette = recorder
            .cassette(
                ORIGIN,
                Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
                "modal",
                name,
            )
            .expect("the cassette");
        cassette.note = Some(note.to_owned());
        let path = dir.join(format!("{name}.yaml"));
        cassette.save(&path).expect("the cassette is written");
        eprintln!(
            "wrote {} ({} calls)",
            path.display(),
            cassette.exchanges.len()
        );
    }
    let _ = std::fs::remove_dir_all(&failing);
}

/// How long the router's JWT lives in the `jwt-expires` fault: long enough that launch
/// and the first code call end before it expires however busy the machine (so it expires
/// once, after the pause between the two code calls, and every authoring records the same
/// calls), short enough to wait out.
const JWT_EXPIRES_TTL: std::time::Duration = std::time::Duration::from_secs(10);

fn fault_options() -> Options {
    Options {
        port: 0,
        domain: DEFAULT_DOMAIN.to_owned(),
        router_jwt_ttl: ROUTER_JWT_TTL,
        unavailable_once: Vec::new(),
        no_task: false,
        run_id: None,
        kill_after: None,
    }
}

/// The calls of fault `name`, as `providers/tests/modal_faults.rs` replays them; what
/// came of them, for the log.
async fn fault_calls(
    provider: &ModalProvider,
    name: &str,
    environment: &Path,
    canary: &Secret,
) -> String {
    use sandbox_providers::{BaseImage, BuildRequest, RunLabels};
    let labels = RunLabels {
        run_id: FAULT_RUN_ID.to_owned(),
        variant: "modal".to_owned(),
        scenario: name.to_owned(),
    };
    let request = BuildRequest {
        environment_dir: environment.to_owned(),
        base: BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: vec![canary.clone()],
        labels: labels.clone(),
    };
    let artifact = match provider.build(&request, &|_: &str| {}).await {
        Ok(artifact) => artifact,
        Err(e) => return format!("build: {e}"),
    };
    let launched = provider.launch(&artifact, &labels).await;
    let outcome = match &launched {
        Err(e) => format!("launch: {e}"),
        Ok((sandbox, _)) => {
            let first = provider.run_code(sandbox, "1+1").await;
            if name == "jwt-expires" {
                tokio::time::sleep(JWT_EXPIRES_TTL + std::time::Duration::from_secs(2)).await;
            }
            let second = provider.run_code(sandbox, "2+2").await;
            let grace = std::time::Duration::from_secs(10);
            let ended = provider.shutdown(sandbox, grace).await;
            let again = if name == "terminate-ended" {
                format!(", again: {:?}", provider.shutdown(sandbox, grace).await)
            } else {
                String::new()
            };
            format!(
                "1+1: {:?}, 2+2: {:?}, shutdown: {ended:?}{again}",
                first.map(|(o, _)| o.result),
                second.map(|(o, _)| o.result)
            )
        }
    };
    let image = provider
        .artifact_resource(&artifact)
        .expect("an image resource");
    let deleted = provider.delete_resource(&image).await;
    format!("{outcome}; image deleted: {deleted:?}")
}
