//! `sandbox-matrix emulate <provider>`, the binary, as a test's child process: started with
//! the caller's arguments, its printed `NAME=value` settings read, stopped by pid with
//! SIGTERM (the emulator then removes what it made): by [`Emulate::stop`], which asserts a
//! clean exit, or on drop, even by a failed assertion.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};
use sandbox_providers::api::{Network, ResolvePin, Volatiles};
use sandbox_providers::{ErrorKind, Provider, RunLabels};
use tokio_util::sync::CancellationToken;

/// How long the emulator may take, after SIGTERM, to remove what it made and exit.
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// A running emulator and the settings it printed.
pub struct Emulate {
    /// `emulate` and the caller's arguments, for messages.
    command: String,
    child: Child,
    /// `NAME=value` lines it printed before serving.
    pub settings: BTreeMap<String, String>,
}

impl Emulate {
    /// Starts `emulate <provider>` with `extra` arguments (e.g. `--port 0`, `--domain ...`,
    /// `--ca-out <file>`, `--template`/`--snapshot reference`) and waits until it serves.
    pub fn start(provider: &str, extra: &[&str]) -> Self {
        let command = ["emulate", provider]
            .iter()
            .chain(extra)
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["emulate", provider])
            .args(extra)
            .arg("--root")
            .arg(super::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("sandbox-matrix {command} does not start: {e}"));
        let stdout = child.stdout.take().expect("its stdout");
        // Owned before reading, so that a failed read still stops it.
        let mut emulate = Self {
            command,
            child,
            settings: BTreeMap::new(),
        };
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line of settings");
            if let Some((name, value)) = line.split_once('=') {
                emulate.settings.insert(name.to_owned(), value.to_owned());
            }
            // The CA file comes last: once it is printed, the emulator serves.
            if line.starts_with(CA_FILE_VAR) {
                break;
            }
        }
        assert!(
            emulate.settings.contains_key(CA_FILE_VAR),
            "{} printed no {CA_FILE_VAR}, so does not serve: {:?}",
            emulate.command,
            emulate.settings
        );
        emulate
    }

    /// The emulator's process id (its run ids are `emulator-<pid>-<random>`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The printed setting `name`; panics naming it when the emulator printed none.
    pub fn get(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("{} printed no {name}: {:?}", self.command, self.settings))
    }

    /// The network the printed settings describe: the name pin, and the test CA when
    /// `trust`.
    pub fn network(&self, trust: bool) -> Network {
        let network = Network::default()
            .pin(ResolvePin::parse(self.get(RESOLVE_VAR)).expect("a valid resolve pin"));
        if trust {
            network
                .trust_file(Path::new(self.get(CA_FILE_VAR)))
                .expect("the CA file reads")
        } else {
            network
        }
    }

    /// SIGTERM by pid, then waits: the emulator removes its sandboxes and builds first.
    /// Panics unless it exits successfully within 60 s.
    pub fn stop(mut self) {
        match self.terminate() {
            Some(status) => assert!(status.success(), "{} exited with {status}", self.command),
            None => panic!(
                "{} did not stop within {STOP_DEADLINE:?} of SIGTERM",
                self.command
            ),
        }
    }

    /// SIGTERM by pid unless it has exited, then its exit status (None: still running after
    /// [`STOP_DEADLINE`], then killed).
    fn terminate(&mut self) -> Option<ExitStatus> {
        // An exited child's status is kept, so a second call signals nothing.
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + STOP_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Emulate {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// What a client meets at `emulate <variant>` over HTTPS: made by `client` without the test
/// CA, it gets a certificate refusal, not an answer; made with it, the lifecycle scenario
/// passes, and once the emulator has stopped nothing of the run is left.
pub async fn client_runs_the_lifecycle<P: Provider + 'static>(
    emulate: Emulate,
    variant: &str,
    client: impl Fn(&Emulate, bool, Arc<Volatiles>) -> P,
) {
    // Without the test CA, the client refuses the emulator's certificate.
    let refused = client(&emulate, false, Arc::default())
        .list_resources(&RunLabels {
            run_id: "no-ca".into(),
            variant: variant.into(),
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
    let run_id = new_run_id();
    let runner = Runner::new(
        run_id.clone(),
        fake_canary(),
        Arc::new(super::Quiet),
        CancellationToken::new(),
    );
    let provider = client(&emulate, true, runner.scenario_volatiles());
    let scenario = Scenario::load(&super::root().join("scenarios/lifecycle.yaml"))
        .expect("the lifecycle scenario");
    let result = runner
        .run_scenario(Arc::new(provider), &scenario, None)
        .await;
    emulate.stop();
    assert!(
        result.passed(),
        "lifecycle against emulate {variant}: {:?}",
        super::failures(&result)
    );
    let left = super::left_by_run(&run_id);
    assert!(left.is_empty(), "emulate left {left:?} of run {run_id}");
}
