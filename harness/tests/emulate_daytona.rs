//! `sandbox-matrix emulate daytona`, the binary, as a client meets it: the daytona client
//! runs the lifecycle over HTTPS through Daytona's live URL forms (the control plane at
//! `https://app.<domain>:<port>/api`, the toolbox at the `toolboxProxyUrl` the emulator
//! hands out, `https://proxy.app.<domain>:<port>/toolbox`), with exactly the settings the
//! command prints (the URL, the test CA to trust, the name pin); without the CA the
//! client refuses the emulator, so TLS is really checked.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test emulate_daytona`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};
use sandbox_providers::api::{ApiSettings, Endpoints, Mode, Network, ResolvePin, Volatiles};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{ErrorKind, Provider, RunLabels, Secret};
use tokio_util::sync::CancellationToken;

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "fake-daytona-emulate-key-0000";

/// The `emulate daytona` child and the settings it printed; stopped with SIGTERM, by pid.
struct Emulate {
    child: Child,
    settings: BTreeMap<String, String>,
}

impl Emulate {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["emulate", "daytona", "--root"])
            .arg(common::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox-matrix emulate daytona starts");
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
        Self { child, settings }
    }

    fn get(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("emulate printed no {name}: {:?}", self.settings))
    }

    /// A daytona client configured as the printed settings say; `trust` adds the CA.
    fn client(&self, trust: bool, volatiles: Arc<Volatiles>) -> DaytonaProvider {
        let mut network = Network::default()
            .pin(ResolvePin::parse(self.get(RESOLVE_VAR)).expect("a valid resolve pin"));
        if trust {
            network = network
                .trust_file(Path::new(self.get(CA_FILE_VAR)))
                .expect("the CA file reads");
        }
        DaytonaProvider::with_network(
            ApiSettings {
                endpoints: Endpoints {
                    api_base: self.get("DAYTONA_API_URL").to_owned(),
                    sandbox_domain: String::new(),
                },
                mode: Mode::Live,
                // Fake: the emulator checks only that a key is sent.
                credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
                volatiles,
                call_timeout: Duration::from_secs(120),
            },
            None,
            None,
            &network,
        )
        .expect("a daytona client")
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
async fn the_daytona_client_runs_the_lifecycle_against_emulate_over_https_through_live_forms() {
    if !common::docker_or_skip("emulate_daytona") {
        return;
    }
    let emulate = Emulate::start();
    let api = emulate.get("DAYTONA_API_URL").to_owned();
    let pin = emulate.get(RESOLVE_VAR).to_owned();
    assert!(
        api.starts_with("https://app.daytona.test:") && api.ends_with("/api"),
        "{api}"
    );
    assert_eq!(pin, "daytona.test=127.0.0.1");

    // Without the test CA, the client refuses the emulator's certificate.
    let refused = emulate
        .client(false, Arc::default())
        .list_resources(&RunLabels {
            run_id: "no-ca".into(),
            variant: "daytona".into(),
            scenario: "lifecycle".into(),
        })
        .await
        .expect_err("a client that does not trust the test CA must not get an answer");
    let shown = refused.to_string();
    assert!(
        refused.kind == ErrorKind::Transport && shown.to_lowercase().contains("certificate"),
        "not a certificate refusal: {shown}"
    );

    // With it, the whole lifecycle passes, the toolbox reached at the proxy host.
    let run_id = new_run_id();
    let runner = Runner::new(
        run_id.clone(),
        fake_canary(),
        Arc::new(common::Quiet),
        CancellationToken::new(),
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
        "lifecycle against emulate daytona: {:?}",
        common::failures(&result)
    );
    let left = common::left_by_run(&run_id);
    assert!(left.is_empty(), "emulate left {left:?} of run {run_id}");
}
