//! The datalayer-runtimes variant against `sandbox_emulators::datalayer` (Datalayer's
//! runtimes API over HTTPS, each runtime a real docker sandbox whose Jupyter Server is
//! served at its ingress): the lifecycle passes and leaves no runtime; the runtime is
//! keyed by its `pod_name` (a client that deleted by `uid` would leave it running, which
//! the emulator, like the platform, refuses to find by uid); a refused create and a warming
//! ingress behave as the runner expects. The ignored test authors the cassettes.
//!
//! `cargo test -p sandbox-matrix --test engine datalayer_runtimes::` (Docker); authoring:
//! `cargo test -p sandbox-matrix --test engine datalayer_runtimes::author -- --ignored`.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::datalayer::{
    DEFAULT_DOMAIN, DEFAULT_ENVIRONMENT, Emulator, Faults, Options,
};
use sandbox_matrix::model::results::ScenarioResult;
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::{Mode, Recorder, Volatiles};
use sandbox_providers::datalayer::runtimes::{self, RuntimesProvider};
use sandbox_providers::{Artifact, Housekeeping as _, Provider, Resource, RunLabels, Secret};

/// What the cassettes say they were written from.
const ORIGIN: &str = "authored from datalayer-core 1.1.40's runtimes calls (fixtures/specs/datalayer-runtimes/SOURCES.md), answered by an emulator forwarding to the docker variant";

/// The fake key the emulator is sent; it grants nothing anywhere.
const FAKE_KEY: &str = "datalayer-fake-authoring-key-0000";

async fn emulator(faults: Faults) -> Emulator {
    let root = common::root();
    let docker = common::prepared_docker(&root).await;
    let emulator = Emulator::start(
        docker,
        Options {
            port: 0,
            domain: DEFAULT_DOMAIN.to_owned(),
            environment_name: DEFAULT_ENVIRONMENT.to_owned(),
            faults,
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
}

/// A client of `emulator` in `mode`, at the API's HTTPS name without a port (the pin
/// carries it), so cassettes hold no machine-specific address.
fn client(emulator: &Emulator, mode: Mode, volatiles: Arc<Volatiles>) -> RuntimesProvider {
    RuntimesProvider::with_network(
        &format!("https://r1.{}", emulator.domain()),
        mode,
        // Fake: the emulator checks only that a key is sent.
        Secret::new(runtimes::API_KEY_VAR, FAKE_KEY),
        volatiles,
        DEFAULT_ENVIRONMENT.to_owned(),
        &emulator.network(),
    )
    .expect("a datalayer-runtimes client")
}

fn environment() -> Artifact {
    Artifact {
        id: DEFAULT_ENVIRONMENT.to_owned(),
        kind: runtimes::ARTIFACT_KIND.to_owned(),
    }
}

fn labels(run_id: &str, scenario: &str) -> RunLabels {
    RunLabels {
        run_id: run_id.to_owned(),
        variant: runtimes::VARIANT.to_owned(),
        scenario: scenario.to_owned(),
    }
}

/// Runs scenario `name` recording into `dir`; its result and the secrets the run used.
pub async fn record_scenario(dir: &Path, name: &str) -> (ScenarioResult, Vec<Secret>) {
    let root = common::root();
    let emulator = emulator(Faults::default()).await;
    let path = dir.join(format!("{name}.yaml"));
    let recorder = Arc::new(Recorder::new(&path, ORIGIN, runtimes::VARIANT, name));
    let runner = Runner::new(
        new_run_id(),
        fake_canary(),
        Arc::new(common::Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let provider: Arc<dyn Provider> = Arc::new(client(
        &emulator,
        Mode::Record(recorder.clone()),
        runner.scenario_volatiles(),
    ));
    let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml"))).expect("scenario");
    let result = runner.run_scenario(provider, &scenario, None).await;
    let left = emulator.runtimes();
    emulator.stop();
    emulator.cleanup().await;
    recorder.finish().expect("the cassette");
    assert!(left.is_empty(), "{name} left runtimes: {left:?}");
    assert!(
        result.passed(),
        "{name} did not pass against the emulator: {:#?}",
        common::failures(&result)
    );
    (result, runner.secrets())
}

/// Run only when asked (`--ignored`): it rewrites fixtures/cassettes/datalayer-runtimes/.
pub async fn author_datalayer_runtimes_cassettes() {
    let dir = common::root().join("fixtures/cassettes/datalayer-runtimes");
    for name in ["lifecycle", "core-tier"] {
        record_scenario(&dir, name).await;
    }
    record_faults(&dir.join("faults")).await;
}

/// The lifecycle, recorded with a fake key: it passes, leaves no runtime, and no
/// credential value (the key, the runtime's token, the canary) is in any file written.
pub async fn the_lifecycle_passes_leaves_no_runtime_and_writes_no_credential() {
    let out = common::out_dir("record-datalayer-runtimes");
    let (result, mut secrets) = record_scenario(&out.join("cassettes"), "lifecycle").await;
    assert_eq!(
        result.artifact_id.as_deref(),
        Some(DEFAULT_ENVIRONMENT),
        "the environment is what was launched"
    );
    secrets.push(Secret::new(runtimes::API_KEY_VAR, FAKE_KEY));
    // The runtime's token is the emulator's (sm-fake-runtime-token-…): in no file either.
    secrets.push(Secret::new("runtime token", "sm-fake-runtime-token-"));
    common::write_reports(&out.join("reports"), vec![result], &secrets);
    common::assert_no_value_in_tree(&out, &secrets);
}

/// The sandbox id launch gives is the runtime's `pod_name`, the key the API's get and
/// delete take: shutdown then leaves nothing. A client keyed by `uid` would send
/// `DELETE /runtimes/<uid>`, be told 404 (taken as already gone) and leave the runtime
/// running: this test then fails on the runtime still listed.
pub async fn runtimes_are_deleted_by_pod_name_and_a_uid_finds_nothing() {
    let emulator = emulator(Faults::default()).await;
    let provider = client(&emulator, Mode::Live, Arc::default());
    let run = labels(&new_run_id(), "by-pod-name");
    let (sandbox, _) = provider
        .launch(&environment(), &run)
        .await
        .expect("a runtime launches");
    assert_eq!(emulator.runtimes(), vec![sandbox.0.clone()]);

    // The runtime's uid, as the API describes it, names nothing the API deletes.
    let http = reqwest::Client::new();
    let listed: serde_json::Value = http
        .get(format!("{}/api/runtimes/v1/runtimes", emulator.plain_url()))
        .bearer_auth(FAKE_KEY)
        .send()
        .await
        .expect("list runtimes")
        .json()
        .await
        .expect("a JSON listing");
    let uid = listed["runtimes"][0]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    assert_ne!(uid, sandbox.0);
    provider
        .delete_resource(&Resource {
            kind: runtimes::KIND_RUNTIME.into(),
            id: uid.clone(),
        })
        .await
        .expect("a delete of what is not there is not an error");
    assert_eq!(
        emulator.runtimes(),
        vec![sandbox.0.clone()],
        "deleting by uid must leave the runtime: the uid is not the API's key"
    );
    let found = provider
        .list_resources(&run)
        .await
        .expect("list by given_name");
    assert_eq!(found.len(), 1, "the leak check finds it by its given_name");

    provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("shutdown deletes the runtime");
    let left = emulator.runtimes();
    emulator.stop();
    emulator.cleanup().await;
    assert!(left.is_empty(), "shutdown left runtimes: {left:?}");
}

/// A create the platform refuses with a 200 and `success: false` fails launch with the
/// platform's message and makes nothing; an ingress that answers 503 while it warms up is
/// waited for within the launch.
pub async fn a_refused_create_fails_launch_and_a_warming_ingress_is_waited_for() {
    let emulator = emulator(Faults {
        refuse_create: Some("Runtime creation failed: not enough credits".into()),
        warm_up: 3,
    })
    .await;
    let provider = client(&emulator, Mode::Live, Arc::default());
    let run = labels(&new_run_id(), "faults");
    let refused = provider
        .launch(&environment(), &run)
        .await
        .expect_err("the refused create fails launch");
    assert!(
        refused.to_string().contains("success: false")
            && refused.to_string().contains("not enough credits"),
        "{refused}"
    );
    assert!(emulator.runtimes().is_empty());
    let (sandbox, timings) = provider
        .launch(&environment(), &run)
        .await
        .expect("the second create passes; its ingress warms up");
    let ready = timings
        .iter()
        .find(|t| t.name == "ingress-ready")
        .expect("an ingress-ready timing");
    assert!(ready.resolution.is_some(), "{ready:?}");
    let (output, _) = provider
        .run_code(&sandbox, "1+1")
        .await
        .expect("1+1 through the ingress");
    assert_eq!(output.result.as_deref(), Some("2"));
    provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("shutdown");
    let left = emulator.runtimes();
    emulator.stop();
    emulator.cleanup().await;
    assert!(left.is_empty(), "left runtimes: {left:?}");
}

/// Writes the fault cassettes into `dir`: a refused create, a warming ingress, and a
/// delete of a pod_name the platform does not have.
pub async fn record_faults(dir: &Path) {
    let run_id = "20260101T000000Z-fa0175";
    let volatiles = || {
        let v = Arc::new(Volatiles::default());
        v.register("run-id", run_id);
        v
    };
    let record = |name: &str| {
        Arc::new(Recorder::new(
            dir.join(format!("{name}.yaml")),
            ORIGIN,
            runtimes::VARIANT,
            "lifecycle",
        ))
    };
    let refusing = emulator(Faults {
        refuse_create: Some("Runtime creation failed: not enough credits".into()),
        warm_up: 0,
    })
    .await;
    let recorder = record("refused-create");
    let provider = client(&refusing, Mode::Record(recorder.clone()), volatiles());
    provider
        .launch(&environment(), &labels(run_id, "lifecycle"))
        .await
        .expect_err("refused");
    recorder.finish().expect("refused-create.yaml");
    refusing.stop();
    refusing.cleanup().await;

    let warming = emulator(Faults {
        refuse_create: None,
        warm_up: 3,
    })
    .await;
    let recorder = record("warm-up");
    let provider = client(&warming, Mode::Record(recorder.clone()), volatiles());
    let (sandbox, _) = provider
        .launch(&environment(), &labels(run_id, "lifecycle"))
        .await
        .expect("launched after the warm-up");
    provider
        .shutdown(&sandbox, Duration::from_secs(10))
        .await
        .expect("shutdown");
    recorder.finish().expect("warm-up.yaml");

    let recorder = record("delete-unknown");
    let provider = client(&warming, Mode::Record(recorder.clone()), volatiles());
    provider
        .delete_resource(&Resource {
            kind: runtimes::KIND_RUNTIME.into(),
            id: "jupyter-python-cpu-env-99999".into(),
        })
        .await
        .expect("an unknown pod_name is already gone");
    recorder.finish().expect("delete-unknown.yaml");
    warming.stop();
    warming.cleanup().await;
}

/// The platform ends a runtime once its `credits_limit` is spent at the burning rate; a
/// create field the emulator does not implement is refused by name, not dropped.
pub async fn a_runtime_ends_when_its_credits_are_spent_and_an_unknown_field_is_refused() {
    let emulator = emulator(Faults::default()).await;
    let http = reqwest::Client::new();
    let create = |body: serde_json::Value| {
        http.post(format!("{}/api/runtimes/v1/runtimes", emulator.plain_url()))
            .bearer_auth(FAKE_KEY)
            .json(&body)
            .send()
    };
    let refused = create(serde_json::json!({
        "type": "notebook", "environment_name": DEFAULT_ENVIRONMENT, "given_name": "sm-refused",
        "credits_limit": 1.0, "capabilities": ["gpu"],
    }))
    .await
    .expect("the emulator answers");
    let refused = (
        refused.status().as_u16(),
        refused.text().await.unwrap_or_default(),
    );
    // Three seconds of credits at the emulator's burning rate.
    let rate = sandbox_emulators::datalayer::BURNING_RATE;
    let created = create(serde_json::json!({
        "type": "notebook", "environment_name": DEFAULT_ENVIRONMENT, "given_name": "sm-brief",
        "credits_limit": 3.0 * rate,
    }))
    .await
    .expect("the emulator answers");
    let status = created.status().as_u16();
    let created: serde_json::Value = created.json().await.unwrap_or_default();
    let mut left = emulator.runtimes();
    for _ in 0..40 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        left = emulator.runtimes();
    }
    emulator.stop();
    emulator.cleanup().await;
    assert_eq!(refused.0, 501, "{refused:?}");
    assert!(refused.1.contains("`capabilities`"), "{refused:?}");
    assert_eq!(status, 201, "{created}");
    assert!(left.is_empty(), "a runtime outlived its credits: {left:?}");
}
