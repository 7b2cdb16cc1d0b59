//! Shared by the Docker-backed tests: whether the engine is there, and what a run left.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod ecr;
pub mod emulate;
pub mod registry;
pub mod sdk;
pub mod trials;

/// The docker variant of the checkout at `root`, its reference base image made or reused:
/// what the emulators forward to.
pub async fn prepared_docker(
    root: &Path,
) -> std::sync::Arc<sandbox_providers::docker::DockerProvider> {
    use sandbox_providers::Provider as _;
    let docker = sandbox_matrix::run::variants::docker_provider(
        root,
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .map(std::sync::Arc::new)
    .expect("a Docker engine");
    docker
        .prepare(
            &sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
            &|line: &str| eprintln!("prepare: {line}"),
        )
        .await
        .expect("the docker variant's base image");
    docker
}

/// The project checkout (the workspace root).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// The private base the daytona build cassettes name (authored by author_daytona, replayed
/// by daytona_registry_entry): a made-up registry under `.test` and a made-up digest,
/// served by the emulator from the local contract base.
pub const PRIVATE_BASE: &str = "registry.emulator.test/sandbox-matrix/contract-base@sha256:31344e332d1cb7f81f5a4c0242cf60d19d1008ad9a56bad86fd2caa56b46632e";

/// `sandbox-matrix run --variant docker --scenario <scenario> --root <checkout> --out <out>`,
/// ready for more settings.
pub fn docker_run(scenario: &Path, out: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .args(["run", "--variant", "docker", "--scenario"])
        .arg(scenario)
        .arg("--root")
        .arg(root())
        .arg("--out")
        .arg(out);
    command
}

/// Ids of containers and images still carrying the run's label, asked of the docker CLI
/// (not of the code under test).
pub fn left_by_run(run_id: &str) -> Vec<String> {
    let filter = format!("label=sandbox-matrix.run={run_id}");
    let mut left = Vec::new();
    for args in [
        vec!["ps", "-aq", "--filter", &filter],
        vec!["images", "-aq", "--filter", &filter],
    ] {
        let out = Command::new("docker")
            .args(&args)
            .output()
            .expect("docker CLI runs");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    left
}

/// Removes the images a test tagged or pulled, by reference, when dropped.
pub struct Images(pub Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for reference in &self.0 {
            let _ = Command::new("docker").args(["rmi", reference]).output();
        }
    }
}

/// Writes an approved-bases file at `path` that approves `digests` of `repository`, and
/// returns its path as text (for `SANDBOX_MATRIX_APPROVED_BASES`).
pub fn approved_bases(path: &Path, repository: &str, digests: &[&str]) -> String {
    let listed: Vec<String> = digests.iter().map(|d| format!("\"{d}\"")).collect();
    std::fs::write(
        path,
        format!(
            "bases:\n  - repository: {repository}\n    digests: [{}]\n",
            listed.join(", ")
        ),
    )
    .expect("approved bases written");
    path.display().to_string()
}

/// The `base: <reference>` line `bootstrap --push` printed; panics showing `shown` without.
pub fn pushed_reference(stdout: &[u8], shown: &str) -> String {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("base: "))
        .unwrap_or_else(|| panic!("no `base:` line: {shown}"))
        .to_owned()
}

/// A fresh, empty folder for one test's reports.
/// A `sandbox-matrix run` started by a test, its standard error read line by line.
pub struct StartedRun {
    /// The run's process.
    pub child: std::process::Child,
    lines: Box<dyn Iterator<Item = String>>,
    /// Every line read so far.
    pub seen: Vec<String>,
    /// The run id it printed, once read.
    pub run_id: Option<String>,
}

impl StartedRun {
    /// Starts `command` (a `sandbox-matrix run`), with its standard error piped.
    pub fn start(mut command: Command) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("sandbox-matrix starts");
        let stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
        Self {
            child,
            lines: Box::new(stderr.lines().map_while(Result::ok)),
            seen: Vec::new(),
            run_id: None,
        }
    }

    /// Reads until step `step` starts (`▸ step`) and returns the run id; panics with what
    /// was read when the run ends before.
    pub fn until_step(&mut self, step: &str) -> String {
        let started = format!("▸ {step}");
        for line in self.lines.by_ref() {
            if let Some(rest) = line.strip_prefix("run ") {
                self.run_id = rest.split(':').next().map(str::to_owned);
            }
            let reached = line.trim() == started;
            self.seen.push(line);
            if reached {
                return self
                    .run_id
                    .clone()
                    .unwrap_or_else(|| panic!("no run id printed: {:#?}", self.seen));
            }
        }
        panic!("the run ended before {step}: {:#?}", self.seen)
    }

    /// Reads the rest and waits for the run's exit.
    pub fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.seen.extend(self.lines.by_ref());
        let status = self.child.wait().expect("sandbox-matrix exits");
        (status, self.seen)
    }
}

/// Runs `sandbox-matrix args` in the checkout with no provider credential, registry
/// base or step summary taken from the environment the tests run in.
pub fn sandbox_matrix_without_credentials(args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command.args(args).current_dir(root());
    for var in [
        "E2B_API_KEY",
        "DAYTONA_API_KEY",
        "DAYTONA_JWT_TOKEN",
        "DAYTONA_ORGANIZATION_ID",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "DATALAYER_API_KEY",
        "SANDBOX_MATRIX_BASE",
        "GITHUB_STEP_SUMMARY",
    ] {
        command.env_remove(var);
    }
    command.output().expect("sandbox-matrix runs")
}

/// A test's output folder, removed when dropped unless the test is failing (a panic is
/// unwinding), so that a failure keeps what it wrote and a pass leaves nothing behind.
#[derive(Debug)]
pub struct OutDir(PathBuf);

impl std::ops::Deref for OutDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for OutDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for OutDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh folder `sandbox-matrix-<test>-<pid>` in the temp folder (see [`OutDir`]).
pub fn out_dir(test: &str) -> OutDir {
    let dir = std::env::temp_dir().join(format!("sandbox-matrix-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    OutDir(dir)
}

/// Writes `scenarios` as one run's reports (JUnit, summary, results.json) under `out`.
pub fn write_reports(
    out: &Path,
    scenarios: Vec<sandbox_matrix::model::results::ScenarioResult>,
    secrets: &[sandbox_providers::Secret],
) {
    use sandbox_matrix::model::results::{Provenance, RESULTS_SCHEMA_VERSION, RunResults};
    let results = RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
        provenance: Provenance {
            run_id: sandbox_matrix::run::runner::new_run_id(),
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            host: "test".to_owned(),
            started_at: "2026-11-29T00:00:00Z".to_owned(),
            base: None,
            shards: Vec::new(),
            partition: None,
        },
        scenarios,
        orphans: Vec::new(),
    };
    sandbox_matrix::report::run_folder::write(out, &results, secrets).expect("reports written");
}

/// Fails naming the file and the secret when any file under `dir` holds a secret's value.
pub fn assert_no_value_in_tree(dir: &Path, secrets: &[sandbox_providers::Secret]) {
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("readable dir") {
                stack.push(entry.expect("dir entry").path());
            }
        } else if path.is_file() {
            files += 1;
            let bytes = std::fs::read(&path).expect("readable file");
            for secret in secrets {
                let value = secret.expose().as_bytes();
                assert!(
                    !bytes.windows(value.len()).any(|w| w == value),
                    "{} holds the value of {}",
                    path.display(),
                    secret.name()
                );
            }
        }
    }
    assert!(files > 0, "nothing was written under {}", dir.display());
    eprintln!(
        "scanned {files} files under {} for {} secret values: none found",
        dir.display(),
        secrets.len()
    );
}

/// Drops every event: for tests that read the results, not the progress.
pub struct Quiet;

/// A runner for a fresh run id and fake canary, reporting to nothing.
pub fn quiet_runner() -> sandbox_matrix::run::runner::Runner {
    sandbox_matrix::run::runner::Runner::new(
        sandbox_matrix::run::runner::new_run_id(),
        sandbox_matrix::run::runner::fake_canary(),
        std::sync::Arc::new(Quiet),
        tokio_util::sync::CancellationToken::new(),
    )
}

impl sandbox_matrix::model::events::EventSink for Quiet {
    fn emit(&self, _: &sandbox_matrix::model::events::RunEvent) {}
}

/// A scenario file named `name` (cassettes carry the scenario's name in their labels) with
/// `steps` (YAML list items), on the reference environment, in a fresh temp folder.
pub fn temp_scenario(name: &str, steps: &str) -> sandbox_matrix::run::scenario::Scenario {
    // A folder per call: tests of one binary run at once and must not share it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = out_dir(&format!("scenario-{name}-{call}"));
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}\nenvironment: {}\nsteps:\n{steps}",
        root().join("fixtures/environments/reference").display()
    );
    std::fs::write(&path, text).expect("scenario written");
    // Read whole at load (its environment is absolute): the folder is not needed after.
    sandbox_matrix::run::scenario::Scenario::load(&path).expect("scenario loads")
}

/// Runs `scenario` on the e2b variant against `cassette`, served on loopback at `pace`.
pub async fn replay_e2b(
    cassette: sandbox_providers::api::Cassette,
    scenario: &sandbox_matrix::run::scenario::Scenario,
    pace: sandbox_providers::api::replay::Pace,
) -> (
    sandbox_matrix::model::results::ScenarioResult,
    sandbox_providers::api::replay::ReplayServer,
) {
    use sandbox_providers::api::replay::{ReplayOptions, ReplayServer};
    let runner = sandbox_matrix::run::runner::Runner::new(
        sandbox_matrix::run::runner::new_run_id(),
        sandbox_matrix::run::runner::fake_canary(),
        std::sync::Arc::new(Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let volatiles = runner.scenario_volatiles();
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace,
            volatiles: volatiles.clone(),
            credentials: sandbox_providers::e2b::replay_credentials(),
            matched_headers: sandbox_providers::e2b::REPLAY_MATCHED_HEADERS,
            ..ReplayOptions::default()
        },
    )
    .await
    .expect("replay server");
    let provider = sandbox_providers::e2b::E2bProvider::from_settings(
        sandbox_providers::api::Mode::Replay {
            server_url: server.url(),
            pace,
        },
        volatiles,
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .expect("replay needs no credential");
    let result = runner
        .run_scenario(std::sync::Arc::new(provider), scenario, None)
        .await;
    (result, server)
}

/// Runs `scenario` on cloud variant `cloud` in `mode` (a replay, for tests and benches)
/// with `runner`, checking the session (the replay went as recorded) as `run` does.
pub async fn run_cloud(
    runner: &sandbox_matrix::run::runner::Runner,
    cloud: &sandbox_matrix::run::variants::CloudVariant,
    scenario: &sandbox_matrix::run::scenario::Scenario,
    mode: &sandbox_matrix::run::variants::CloudMode,
) -> sandbox_matrix::model::results::ScenarioResult {
    let session = sandbox_matrix::run::variants::open_cloud(
        cloud,
        &scenario.name,
        mode,
        runner.scenario_volatiles(),
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .await
    .expect("the cassette opens");
    runner
        .run_scenario_checked(
            session.provider,
            scenario,
            None,
            session.check,
            session.source,
            1,
        )
        .await
}

/// The e2b lifecycle cassette.
pub fn e2b_lifecycle() -> sandbox_providers::api::Cassette {
    sandbox_providers::api::Cassette::load(&root().join("fixtures/cassettes/e2b/lifecycle.yaml"))
        .expect("the e2b lifecycle cassette loads")
}

/// One HTTP request as a test server (an authoring emulator) reads it.
pub use sandbox_emulators::HttpRequest;

/// A listener on 127.0.0.1 and its base URL, for [`serve_http`].
pub async fn bind_loopback() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen on loopback");
    let url = format!("http://{}", listener.local_addr().expect("a local address"));
    (listener, url)
}

/// Serves HTTP/1.1 on `listener` with hyper, answering each request with what `handle`
/// returns: status, content type and body (the emulators' server, detached).
pub fn serve_http<F, Fut>(listener: tokio::net::TcpListener, handle: F)
where
    F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = (u16, String, Vec<u8>)> + Send + 'static,
{
    drop(sandbox_emulators::serve_http(listener, None, handle));
}

/// `step: reason` for each failed step of `result`.
pub fn failures(result: &sandbox_matrix::model::results::ScenarioResult) -> Vec<String> {
    result
        .steps
        .iter()
        .filter_map(|s| match &s.status {
            sandbox_matrix::model::results::StepStatus::Failed { reason } => {
                Some(format!("{}: {reason}", s.step))
            }
            _ => None,
        })
        .collect()
}
