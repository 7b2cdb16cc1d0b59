//! `sandbox-matrix emulate e2b`, the binary, as a client meets it: the e2b client runs the
//! lifecycle over HTTPS through E2B's live host forms (`https://api.<domain>:<port>`,
//! `https://<port>-<id>.<domain>:<port>`), with exactly the settings the command prints
//! (the test CA to trust, the name pin); and without the CA the client refuses the
//! emulator, so TLS is really checked. The emulator also refuses what E2B refuses.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test emulate_e2b`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};
use sandbox_providers::api::{Endpoints, Mode, Network, ResolvePin};
use sandbox_providers::e2b::E2bProvider;
use sandbox_providers::{ErrorKind, Provider, Secret};

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "e2b_fake_emulate_key_0000";

/// The `emulate e2b` child and the settings it printed; stopped with SIGTERM, by pid.
struct Emulate {
    child: Child,
    settings: BTreeMap<String, String>,
}

impl Emulate {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["emulate", "e2b", "--root"])
            .arg(common::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox-matrix emulate e2b starts");
        let mut settings = BTreeMap::new();
        let stdout = child.stdout.take().expect("its stdout");
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line of settings");
            if let Some((name, value)) = line.split_once('=') {
                settings.insert(name.to_owned(), value.to_owned());
            }
            // The CA file comes last: once it is printed, the emulator serves.
            if line.starts_with(CA_FILE_VAR) {
                break;
            }
        }
        assert!(
            settings.contains_key(CA_FILE_VAR),
            "emulate printed no {CA_FILE_VAR}: {settings:?}"
        );
        Self { child, settings }
    }

    fn get(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("emulate printed no {name}: {:?}", self.settings))
    }

    /// An e2b client configured as the printed settings say; `trust` adds the CA.
    fn client(
        &self,
        trust: bool,
        volatiles: Arc<sandbox_providers::api::Volatiles>,
    ) -> E2bProvider {
        let mut network = Network::default()
            .pin(ResolvePin::parse(self.get(RESOLVE_VAR)).expect("a valid resolve pin"));
        if trust {
            network = network
                .trust_file(Path::new(self.get(CA_FILE_VAR)))
                .expect("the CA file reads");
        }
        E2bProvider::with_network(
            Endpoints {
                api_base: self.get("E2B_API_URL").to_owned(),
                sandbox_domain: self.get("E2B_DOMAIN").to_owned(),
            },
            Mode::Live,
            // Fake: the emulator checks only that a key is sent.
            Secret::new("E2B_API_KEY", FAKE_KEY),
            volatiles,
            Default::default(),
            &network,
        )
        .expect("an e2b client")
    }

    /// SIGTERM by pid, then waits: the emulator removes its sandboxes and builds first.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..600 {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "emulate exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("emulate did not stop within 60 s of SIGTERM");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_e2b_client_runs_the_lifecycle_against_emulate_over_https_through_live_host_forms() {
    if !common::docker_or_skip("emulate_e2b") {
        return;
    }
    let emulate = Emulate::start();
    assert!(
        emulate.get("E2B_API_URL").starts_with("https://api.")
            && emulate.get(RESOLVE_VAR).ends_with("=127.0.0.1"),
        "{:?}",
        emulate.settings
    );

    // Without the test CA, the client refuses the emulator's certificate.
    let untrusting = emulate.client(false, Arc::default());
    let refused = untrusting
        .list_resources(&sandbox_providers::RunLabels {
            run_id: "no-ca".into(),
            variant: "e2b".into(),
            scenario: "lifecycle".into(),
        })
        .await
        .expect_err("a client that does not trust the test CA must not get an answer");
    let shown = refused.to_string();
    assert!(
        refused.kind == ErrorKind::Transport && shown.to_lowercase().contains("certificate"),
        "not a certificate refusal: {shown}"
    );

    // With it, the whole lifecycle passes.
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let runner = sandbox_matrix::run::runner::Runner::new(
        run_id.clone(),
        sandbox_matrix::run::runner::fake_canary(),
        Arc::new(common::Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let provider = emulate.client(true, runner.scenario_volatiles());
    let scenario = Scenario::load(&common::root().join("scenarios/lifecycle.yaml"))
        .expect("the lifecycle scenario");
    let result = runner
        .run_scenario(Arc::new(provider), &scenario, None)
        .await;
    emulate.stop();
    assert!(
        result.passed(),
        "lifecycle against emulate e2b: {:?}",
        common::failures(&result)
    );
    let left = common::left_by_run(&run_id);
    assert!(left.is_empty(), "emulate left {left:?} of run {run_id}");
}

/// The emulator refuses what E2B refuses: a ready command with no start command, and the
/// code channel of a sandbox whose template has no start command does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_start_command_the_code_channel_does_not_answer() {
    use sandbox_matrix::emulate::e2b::{DEFAULT_DOMAIN, Emulator, Options};
    use serde_json::{Value, json};
    if !common::docker_or_skip("emulate_e2b (no start command)") {
        return;
    }
    let root = common::root();
    let docker = sandbox_matrix::run::variants::connect_docker(
        &root,
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .expect("a Docker engine");
    docker
        .prepare(&|line: &str| eprintln!("prepare: {line}"))
        .await
        .expect("the base image");
    let emulator = Emulator::start(
        docker,
        Options {
            port: 0,
            domain: DEFAULT_DOMAIN.to_owned(),
            environment: root.join("fixtures/environments/reference"),
        },
    )
    .await
    .expect("the emulator starts");
    let http = emulator
        .network()
        .apply(reqwest::Client::builder())
        .expect("the test network")
        .build()
        .expect("an HTTP client");
    let api = format!("https://api.{DEFAULT_DOMAIN}");
    let call = |method: reqwest::Method, url: String, body: Option<Value>| {
        let mut request = http.request(method, url).header("X-API-Key", FAKE_KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.expect("the emulator answers");
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    };
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let (status, created) = call(
        reqwest::Method::POST,
        format!("{api}/v3/templates"),
        Some(json!({"name": format!("sm-{run_id}")})),
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let (tid, bid) = (
        created["templateID"].as_str().expect("a template id"),
        created["buildID"].as_str().expect("a build id"),
    );
    let build = format!("{api}/v2/templates/{tid}/builds/{bid}");
    let base = sandbox_providers::docker::base::BASE_IMAGE;
    let (status, refused) = call(
        reqwest::Method::POST,
        build.clone(),
        Some(json!({"fromImage": base, "steps": [], "readyCmd": "true"})),
    )
    .await;
    assert_eq!(status, 400, "a readyCmd without startCmd: {refused}");
    let (status, _) = call(
        reqwest::Method::POST,
        build,
        Some(json!({"fromImage": base, "steps": []})),
    )
    .await;
    assert_eq!(status, 202);
    let mut ready = false;
    for _ in 0..600 {
        let (_, info) = call(
            reqwest::Method::GET,
            format!("{api}/templates/{tid}/builds/{bid}/status?logsOffset=100000"),
            None,
        )
        .await;
        match info["status"].as_str() {
            Some("ready") => {
                ready = true;
                break;
            }
            Some("error") => panic!("the build failed: {info}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    assert!(ready, "the build did not end within 2 minutes");
    let (status, sandbox) = call(
        reqwest::Method::POST,
        format!("{api}/sandboxes"),
        Some(json!({"templateID": format!("{tid}:{bid}"),
                    "metadata": {"sandbox-matrix.run": run_id, "sandbox-matrix.scenario": "no-start"}})),
    )
    .await;
    assert_eq!(status, 201, "{sandbox}");
    let id = sandbox["sandboxID"].as_str().expect("a sandbox id");
    let token = sandbox["envdAccessToken"].as_str().expect("an envd token");
    let health = http
        .get(format!("https://49999-{id}.{DEFAULT_DOMAIN}/health"))
        .header("X-Access-Token", token)
        .send()
        .await
        .expect("the emulator answers for the sandbox");
    let status = health.status().as_u16();
    let _ = call(
        reqwest::Method::DELETE,
        format!("{api}/sandboxes/{id}"),
        None,
    )
    .await;
    emulator.stop();
    emulator.cleanup().await;
    assert_eq!(
        status, 502,
        "the code channel of a template without a start command answered"
    );
}
