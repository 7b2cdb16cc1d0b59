//! Authors the e2b cassettes: the e2b emulator (`sandbox_emulators::e2b`, over HTTPS
//! with its test CA, forwarding code and commands to a real sandbox of the local docker
//! variant, so every probe answer is real) is reached through E2B's live host forms, and
//! the e2b client runs the lifecycle and core-tier scenarios against it in record mode,
//! writing `fixtures/cassettes/e2b/<scenario>.yaml`.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine author_e2b:: -- --ignored`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::e2b::{DEFAULT_DOMAIN, Emulator, Options};
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::ScenarioResult;
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::{Endpoints, Mode, Recorder};
use sandbox_providers::e2b::E2bProvider;
use sandbox_providers::{Provider, Secret};

/// What the cassettes say they were written from.
const ORIGIN: &str = "authored from e2b-dev/infra@54693ff353d26c5fe1951db5467e751f3e2f984e spec/openapi.yml and packages/envd/spec/envd.yaml (fixtures/specs/e2b/SOURCES.md), answered by an emulator forwarding to the docker variant";

/// The fake key the emulator is sent; it grants nothing anywhere.
const FAKE_KEY: &str = "e2b_fake_authoring_key_0000";

/// Run only when asked (`--ignored`): it writes fixtures/cassettes/e2b/*.yaml.
pub async fn author_e2b_cassettes() {
    let root = common::root();
    record(
        &root,
        &root.join("fixtures/cassettes/e2b"),
        &["lifecycle", "core-tier"],
    )
    .await;
}

/// Records `scenarios` into `dir`; returns their results and the secrets used.
pub async fn record(
    root: &Path,
    dir: &Path,
    scenarios: &[&str],
) -> (Vec<ScenarioResult>, Vec<Secret>) {
    let docker = common::prepared_docker(root).await;
    let mut results = Vec::new();
    let mut secrets = Vec::new();
    for &scenario in scenarios {
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
        docker.clone(),
        Options {
            port: 0,
            domain: DEFAULT_DOMAIN.to_owned(),
            run_id: None,
            kill_after: None,
            start_cmd: None,
        },
    )
    .await
    .expect("the e2b emulator starts");
    let path = dir.join(format!("{name}.yaml"));
    let recorder = Arc::new(Recorder::new(&path, ORIGIN, "e2b", name));
    let run_id = new_run_id();
    let runner = Runner::new(
        run_id,
        fake_canary(),
        Arc::new(Print),
        tokio_util::sync::CancellationToken::new(),
    );
    // The runner's own placeholders: run id, canary, its fingerprint, restart markers.
    let volatiles = runner.scenario_volatiles();
    // The live host forms with no port in them (the pin carries it), so the cassettes
    // hold no machine-specific address: `https://api.e2b.test`, `https://49999-<id>.e2b.test`.
    let e2b = E2bProvider::with_network(
        Endpoints {
            api_base: format!("https://api.{}", emulator.domain()),
            sandbox_domain: emulator.domain().to_owned(),
        },
        Mode::Record(recorder.clone()),
        // Fake: the emulator checks only that a key is sent.
        Secret::new("E2B_API_KEY", FAKE_KEY),
        volatiles.clone(),
        Default::default(),
        &emulator.network(),
    )
    .expect("an e2b client");
    let provider: Arc<dyn Provider> = Arc::new(e2b);
    let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml"))).expect("scenario");
    let result = runner.run_scenario(provider, &scenario, None).await;
    // Whatever the emulator's docker sandboxes left is removed by their labels.
    emulator.stop();
    emulator.cleanup().await;
    let written = recorder.finish().expect("the cassette");
    eprintln!("wrote {} ({} exchanges)", written.display(), recorder.len());
    assert!(
        result.passed(),
        "{name} did not pass against the emulator: {result:#?}"
    );
    (result, runner.secrets())
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
