//! Authors `fixtures/cassettes/daytona/{lifecycle,core-tier}.yaml` and the build cassettes
//! `builds/{private-base,private-base-failed}.yaml`.
//!
//! The daytona emulator (`sandbox_emulators::daytona`, over HTTPS with its test CA,
//! backed by the local docker variant, so every probe answer is real; the control-plane
//! answers are the emulator's) is reached through Daytona's live URL forms
//! (`https://app.daytona.test/api`, the toolbox at `https://proxy.app.daytona.test/toolbox`)
//! with the domain pinned to 127.0.0.1, and the daytona client records against it: each
//! scenario through the real runner, and the build alone from a private base.
//! Needs Docker:
//! `cargo test -p sandbox-matrix --test engine author_daytona:: -- --ignored`.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_emulators::Emulator as _;
use sandbox_emulators::daytona::{DEFAULT_DOMAIN, Emulator, Options, StandInBase};
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::ScenarioResult;
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;
use sandbox_providers::api::{ApiSettings, Endpoints, Mode, Recorder, Volatiles};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{
    BaseImage, BuildRequest, CredentialSource, Housekeeping as _, Provider, RegistryCredential,
    Resource, RunLabels, Secret,
};
use tokio_util::sync::CancellationToken;

/// What the cassettes say they were authored from.
const ORIGIN: &str = "authored from daytonaio/daytona@01c502bb1f1ff8f2885d0cd490e043736083dca8 (v0.190.0) \
libs/api-client-go/api/openapi.yaml and apps/daemon/pkg/toolbox/docs/swagger.yaml (fixtures/specs/daytona/SOURCES.md) \
(an emulator of those APIs on 127.0.0.1 over HTTPS through the live URL forms, builds and probes served by the local docker variant)";

struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: &RunEvent) {}
}

/// The fake key the client sends; it grants nothing anywhere.
const FAKE_KEY: &str = "fake-daytona-key-00000000";

/// The stand-in registry's user, as for an ECR login token.
const REGISTRY_USER: &str = "AWS";
/// The login token the stand-in registry accepts; fake, it opens nothing anywhere.
const FAKE_LOGIN_TOKEN: &str = "fake-ecr-login-token-0000";
/// A token the stand-in registry refuses (an expired one); fake too.
const FAKE_EXPIRED_TOKEN: &str = "fake-ecr-login-token-expired";

/// The credential a build cassette is recorded with, holding `token`.
fn registry_credential(token: &str) -> RegistryCredential {
    RegistryCredential {
        registry: common::PRIVATE_BASE
            .split_once('/')
            .expect("a registry host")
            .0
            .to_owned(),
        username: REGISTRY_USER.to_owned(),
        password: Secret::new("REGISTRY_PASSWORD", token),
        source: CredentialSource::EcrLoginToken,
    }
}

/// Run only when asked (`--ignored`): it rewrites fixtures/cassettes/daytona/{lifecycle,core-tier}.yaml.
pub async fn author_daytona_cassettes() {
    let root = common::root();
    record(
        &root.join("fixtures/cassettes/daytona"),
        &["lifecycle", "core-tier"],
    )
    .await;
}

/// Run only when asked (`--ignored`): it rewrites fixtures/cassettes/daytona/builds/*.yaml.
pub async fn author_daytona_build_cassettes() {
    record_builds(&common::root().join("fixtures/cassettes/daytona/builds")).await;
}

/// Recording with fake credentials writes none of their values: not in the cassettes, not
/// in the reports of the runs that recorded them. The lifecycle and the builds: their
/// build (the registry entry's credential included), launch, commands and secrets scan
/// carry every credential a run has.
pub async fn recording_with_fake_credentials_writes_none_of_them() {
    let out = common::out_dir("record-daytona");
    let (results, mut fakes) = record(&out.join("cassettes"), &["lifecycle"]).await;
    fakes.extend(record_builds(&out.join("cassettes/builds")).await);
    fakes.push(Secret::new("DAYTONA_API_KEY", FAKE_KEY));
    common::write_reports(&out.join("reports"), results, &fakes);
    common::assert_no_value_in_tree(&out, &fakes);
}

/// Records `scenarios` into `dir`; returns their results and the secrets used.
pub async fn record(dir: &Path, scenarios: &[&str]) -> (Vec<ScenarioResult>, Vec<Secret>) {
    let root = common::root();
    let mut results = Vec::new();
    let mut secrets = Vec::new();
    let docker = Arc::new(
        variants::docker_provider(&root, Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")))
            .await
            .expect("the docker variant connects"),
    );
    for &name in scenarios {
        let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml")))
            .expect("the scenario loads");
        let run_id = new_run_id();
        let runner = Runner::new(
            run_id.clone(),
            fake_canary(),
            Arc::new(Quiet),
            CancellationToken::new(),
        );
        // The runner's own placeholders: run id, canary, its fingerprint, restart markers.
        let volatiles = runner.scenario_volatiles();
        let labels = RunLabels {
            run_id: run_id.clone(),
            variant: "daytona".into(),
            scenario: name.into(),
        };
        let emulator = start(&docker, labels, volatiles.clone(), Vec::new()).await;
        let path = dir.join(format!("{name}.yaml"));
        let recorder = Arc::new(Recorder::new(&path, ORIGIN, "daytona", name));
        let provider = client(&emulator, Mode::Record(recorder.clone()), volatiles);
        runner
            .prepare(&(docker.clone() as Arc<dyn Provider>))
            .await
            .expect("the docker variant's base image is ready");
        let result = runner
            .run_scenario(Arc::new(provider), &scenario, None)
            .await;
        let failed = common::failures(&result);
        assert!(
            failed.is_empty(),
            "{name} failed through the emulator: {failed:#?}"
        );
        recorder.finish().expect("the cassette is written");
        emulator.stop();
        assert_eq!(
            common::left_by_run(&run_id),
            Vec::<String>::new(),
            "{name} left resources"
        );
        secrets.extend(runner.secrets());
        results.push(result);
    }
    (results, secrets)
}

/// Records `dir/{private-base,private-base-failed}.yaml`: the build alone of
/// `builds/environment` from [`common::PRIVATE_BASE`] with a registry credential, accepted (the
/// snapshot is then deleted) and refused (an expired token: the build fails). Both hold
/// the docker-registry entry's create and its delete by id. Returns the fake secrets used.
pub async fn record_builds(dir: &Path) -> Vec<Secret> {
    let root = common::root();
    let docker = Arc::new(
        variants::docker_provider(&root, Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")))
            .await
            .expect("the docker variant connects"),
    );
    common::quiet_runner()
        .prepare(&(docker.clone() as Arc<dyn Provider>))
        .await
        .expect("the docker variant's base image is ready");
    let accepted = registry_credential(FAKE_LOGIN_TOKEN);
    let stand_in = StandInBase {
        reference: common::PRIVATE_BASE.to_owned(),
        local: sandbox_providers::docker::base::BASE_IMAGE.to_owned(),
        username: accepted.username.clone(),
        password: accepted.password.clone(),
    };
    let mut secrets = Vec::new();
    for (name, token) in [
        ("private-base", FAKE_LOGIN_TOKEN),
        ("private-base-failed", FAKE_EXPIRED_TOKEN),
    ] {
        let run_id = new_run_id();
        let volatiles = Arc::new(Volatiles::default());
        volatiles.register("run-id", &run_id);
        let labels = RunLabels {
            run_id: run_id.clone(),
            variant: "daytona".into(),
            scenario: name.into(),
        };
        let emulator = start(
            &docker,
            labels.clone(),
            volatiles.clone(),
            vec![stand_in.clone()],
        )
        .await;
        let recorder = Arc::new(Recorder::new(
            dir.join(format!("{name}.yaml")),
            ORIGIN,
            "daytona",
            name,
        ));
        let provider = client(&emulator, Mode::Record(recorder.clone()), volatiles);
        let credential = registry_credential(token);
        secrets.push(credential.password.clone());
        let request = BuildRequest {
            environment_dir: root.join("fixtures/cassettes/daytona/builds/environment"),
            base: BaseImage {
                reference: common::PRIVATE_BASE.to_owned(),
                registry: Some(credential.registry.clone()),
            },
            registry_credential: Some(credential),
            build_secrets: Vec::new(),
            labels,
        };
        let built = provider.build(&request, &|_: &str| {}).await;
        match (name, built) {
            ("private-base", Ok(artifact)) => assert_eq!(
                provider
                    .delete_resource(&Resource {
                        kind: sandbox_providers::daytona::KIND_SNAPSHOT.into(),
                        id: artifact.id,
                    })
                    .await
                    .expect("the snapshot is deleted"),
                sandbox_providers::Deleted::Removed
            ),
            ("private-base-failed", Err(e)) => assert!(
                e.message.contains("registry.emulator.test: unauthorized"),
                "the failed build names the registry: {e}"
            ),
            (name, other) => panic!("{name} built unexpectedly: {other:?}"),
        }
        assert_eq!(
            emulator.registry_entries_left(),
            0,
            "{name} left its docker-registry entry"
        );
        recorder.finish().expect("the cassette is written");
        emulator.stop();
        assert_eq!(
            common::left_by_run(&run_id),
            Vec::<String>::new(),
            "{name} left resources"
        );
    }
    secrets
}

/// The emulator on a free port, its docker resources labelled `labels`, registering what
/// varies in `volatiles`.
async fn start(
    docker: &Arc<sandbox_providers::docker::DockerProvider>,
    labels: RunLabels,
    volatiles: Arc<Volatiles>,
    bases: Vec<StandInBase>,
) -> Emulator {
    Emulator::start(
        docker.clone(),
        Options {
            labels: Some(labels),
            volatiles: Some(volatiles),
            bases,
            ..Options::new(0, DEFAULT_DOMAIN)
        },
    )
    .await
    .expect("the daytona emulator starts")
}

/// The daytona client recording against `emulator` through the live URL forms with no
/// port in them (the pin carries it), so the cassettes hold no machine-specific address.
fn client(emulator: &Emulator, mode: Mode, volatiles: Arc<Volatiles>) -> DaytonaProvider {
    DaytonaProvider::with_network(
        ApiSettings {
            endpoints: Endpoints {
                api_base: emulator.api_url(),
                sandbox_domain: String::new(),
            },
            mode,
            // Fake: the emulator checks only that a key is sent.
            credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
            volatiles,
            call_timeout: Duration::from_secs(120),
        },
        None,
        None,
        &emulator.network(),
    )
    .expect("the daytona client starts")
}
