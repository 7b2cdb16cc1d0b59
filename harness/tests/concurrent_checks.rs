//! Independent checks of a live run start together; restart waits until those on the code
//! channel are done, not for the secrets scan's exec; results keep the scenario's order; a recorded (or replayed) session runs one step at a
//! time. Shown with a provider that counts the calls in flight (no engine needed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::Source;
use sandbox_matrix::run::runner::{Runner, fake_canary};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, Housekeeping,
    LogFn, Provider, ProviderError, Resource, RestartKind, Result, RunLabels, SandboxId,
    ShutdownEnding, ShutdownObservation, ShutdownReport, Timing,
};
use tokio_util::sync::CancellationToken;

/// Counts the code and exec calls in flight; every call takes a moment, so calls that may
/// overlap do.
#[derive(Default)]
struct Counting {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    /// Code calls and execs in flight: both, and each.
    code_in_flight: AtomicUsize,
    execs_in_flight: AtomicUsize,
    /// Code calls and execs in flight when restart was asked for.
    at_restart: Mutex<Vec<(usize, usize)>>,
    /// An exec takes [`SLOW_EXEC`], as a secrets scan of a whole file system does.
    slow_exec: bool,
    /// Says its calls are recorded or replayed, so must come one at a time.
    ordered: bool,
    /// The code channel opens as a kernel that never starts does on docker: the first call
    /// holds the channel for [`OPENING`] and fails, later ones fail at once.
    broken_channel: bool,
    /// Held by a code call, as the docker variant holds its sandbox's kernel.
    channel: tokio::sync::Mutex<bool>,
    /// When the broken channel's opening ended, and when the first exec started.
    opened_at: Mutex<Option<Instant>>,
    first_exec: Mutex<Option<Instant>>,
}

/// How long a broken channel's first call waits before it fails.
const OPENING: Duration = Duration::from_millis(1500);

/// How long an exec takes with `slow_exec`.
const SLOW_EXEC: Duration = Duration::from_millis(600);

impl Counting {
    async fn call(&self, kind: &AtomicUsize, takes: Duration) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        kind.fetch_add(1, Ordering::SeqCst);
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(takes).await;
        kind.fetch_sub(1, Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Provider for Counting {
    fn variant(&self) -> &str {
        "counting"
    }

    fn ordered_calls(&self) -> bool {
        self.ordered
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            build: true,
            restart: RestartKind::Kernel,
            build_logs: BuildLogMode::Streamed,
            exec_as_root: true,
            doctor_scan: false,
            artifact_metadata: false,
            floor: false,
            concurrent_contexts: 1,
            stateful_code: true,
            shutdown: ShutdownObservation::Signal,
            gpus: 0,
            egress_policy: false,
            artifacts_listed: true,
            provenance: false,
            lifetime: Default::default(),
        }
    }

    async fn build(&self, _: &BuildRequest, _: &LogFn) -> Result<Artifact> {
        Ok(Artifact {
            id: "img-1".into(),
            kind: "image-id".into(),
        })
    }

    async fn launch(&self, _: &Artifact, _: &RunLabels) -> Result<(SandboxId, Vec<Timing>)> {
        Ok((SandboxId("box-1".into()), Vec::new()))
    }

    async fn run_code(&self, _: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        if self.broken_channel {
            let mut opened = self.channel.lock().await;
            if !*opened {
                *opened = true;
                tokio::time::sleep(OPENING).await;
                *self.opened_at.lock().unwrap() = Some(Instant::now());
            }
            return Err(ProviderError::new(
                sandbox_providers::ErrorKind::Transport,
                "the kernel never started",
            ));
        }
        self.call(&self.code_in_flight, Duration::from_millis(50))
            .await;
        // Check 7 keeps a marker before it restarts: answer that it was kept.
        let result = code.ends_with("in globals()").then(|| "True".to_owned());
        Ok((
            CodeOutput {
                result,
                ..Default::default()
            },
            Vec::new(),
        ))
    }

    async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
        self.first_exec
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
        let takes = if self.slow_exec {
            SLOW_EXEC
        } else {
            Duration::from_millis(50)
        };
        self.call(&self.execs_in_flight, takes).await;
        Ok(CommandOutput {
            exit_code: Some(1),
            ..Default::default()
        })
    }

    async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
        self.at_restart.lock().unwrap().push((
            self.code_in_flight.load(Ordering::SeqCst),
            self.execs_in_flight.load(Ordering::SeqCst),
        ));
        Ok(Vec::new())
    }

    async fn shutdown(&self, _: &SandboxId, _: Duration) -> Result<ShutdownReport> {
        Ok(ShutdownReport {
            ending: ShutdownEnding::ExitedOnSigterm,
            exit_code: Some(0),
        })
    }

    async fn artifact_metadata(&self, _: &Artifact) -> Result<String> {
        Err(ProviderError::unsupported("read artifact metadata"))
    }
}

#[async_trait]
impl Housekeeping for Counting {
    async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
        Ok(Vec::new())
    }

    async fn delete_resource(&self, _: &Resource) -> Result<sandbox_providers::Deleted> {
        Ok(sandbox_providers::Deleted::AlreadyGone)
    }
}

/// The names of the finished steps, in the order the runner reported them.
#[derive(Default)]
struct Order(Mutex<Vec<String>>);

impl EventSink for Order {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepFinished { result, .. } = event {
            self.0.lock().unwrap().push(result.step.clone());
        }
    }
}

const CHECKS: &str = "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 5s\n  - check: identity\n    budget: 5s\n  - check: python\n    budget: 5s\n    expect: \"3.13\"\n  - check: filesystem\n    budget: 5s\n  - check: restart\n    budget: 5s\n  - check: secrets\n    budget: 5s\n  - step: cleanup\n    budget: 5s\n";

const ORDER: [&str; 8] = [
    "build",
    "launch",
    "core-2-identity",
    "core-3-python",
    "core-6-filesystem",
    "core-7-restart",
    "core-9-secrets",
    "cleanup",
];

async fn run(source: Source, ordered: bool) -> (Arc<Counting>, Vec<String>, Vec<String>) {
    let (provider, result, reported) = run_provider(
        Counting {
            ordered,
            ..Counting::default()
        },
        CHECKS,
        source,
    )
    .await;
    let steps = result.steps.iter().map(|s| s.step.clone()).collect();
    (provider, steps, reported)
}

async fn run_provider(
    provider: Counting,
    checks: &str,
    source: Source,
) -> (
    Arc<Counting>,
    sandbox_matrix::model::results::ScenarioResult,
    Vec<String>,
) {
    let provider = Arc::new(provider);
    let order = Arc::new(Order::default());
    // The build step lints the environment's Dockerfile first: give it the project's own.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/t.yaml");
    let scenario = Scenario::parse(&path, checks).expect("scenario parses");
    let runner = Runner::new(
        "run-1".into(),
        fake_canary(),
        order.clone(),
        CancellationToken::new(),
    );
    let result = runner
        .run_scenario_checked(provider.clone(), &scenario, None, None, source, 1)
        .await;
    let reported = order.0.lock().unwrap().clone();
    (provider, result, reported)
}

#[tokio::test]
async fn live_independent_checks_overlap_and_restart_waits_for_them() {
    let (provider, steps, reported) = run(Source::Live, false).await;
    assert_eq!(steps, ORDER);
    assert_eq!(reported, ORDER);
    assert!(
        provider.most.load(Ordering::SeqCst) >= 2,
        "independent checks ran one at a time"
    );
    let at_restart = provider.at_restart.lock().unwrap().clone();
    assert!(!at_restart.is_empty(), "restart was asked for");
    assert!(
        at_restart.iter().all(|&(code, _)| code == 0),
        "restart ran while code calls were in flight: {at_restart:?}"
    );
}

/// Restart needs the code channel to itself, not the sandbox: it runs while the secrets
/// scan (an exec) still reads the file system, once the channel's checks are done.
#[tokio::test]
async fn restart_runs_beside_a_long_secrets_scan() {
    let (provider, result, reported) = run_provider(
        Counting {
            slow_exec: true,
            ..Counting::default()
        },
        CHECKS,
        Source::Live,
    )
    .await;
    let steps: Vec<String> = result.steps.iter().map(|s| s.step.clone()).collect();
    assert_eq!(steps, ORDER);
    assert_eq!(reported, ORDER);
    let at_restart = provider.at_restart.lock().unwrap().clone();
    assert_eq!(
        at_restart,
        [(0, 1)],
        "(code calls, execs) in flight at restart: none on the channel, the scan's exec"
    );
    // Each step says when it started, so the overlap can be read off the results too: the
    // scan starts before the restart and is still running when the restart starts.
    let span = |name: &str| {
        let step = result.step(name).unwrap();
        let started = step.started.expect("a step that ran says when it started");
        (started, started + step.duration)
    };
    let (scan_start, scan_end) = span("core-9-secrets");
    let (restart_start, _) = span("core-7-restart");
    assert!(
        scan_start < restart_start && restart_start < scan_end,
        "scan {scan_start:?}..{scan_end:?}, restart from {restart_start:?}"
    );
}

#[tokio::test]
async fn a_recorded_session_runs_one_step_at_a_time() {
    let (provider, steps, reported) = run(Source::Record, false).await;
    assert_eq!(steps, ORDER);
    assert_eq!(reported, ORDER);
    assert_eq!(provider.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_provider_replaying_a_cassette_gets_one_call_at_a_time_whatever_the_source() {
    let (provider, steps, _) = run(Source::Live, true).await;
    assert_eq!(steps, ORDER);
    assert_eq!(provider.most.load(Ordering::SeqCst), 1);
}

/// Checks whose budgets are shorter than a broken channel's opening.
const SHORT_BUDGETS: &str = "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 5s\n  - check: identity\n    budget: 5s\n  - check: python\n    budget: 1s\n    expect: \"3.13\"\n  - check: filesystem\n    budget: 1s\n  - check: secrets\n    budget: 1s\n  - step: cleanup\n    budget: 5s\n";

/// A code channel that takes long to fail on its first use (a kernel that never starts)
/// costs the first check that opens it its wait; the checks after it learn at once that
/// it failed and probe through exec, instead of queueing behind the opening until their
/// own shorter budgets run out. The secrets scan, which does not use the channel, starts
/// with the opening.
#[tokio::test]
async fn a_channel_that_cannot_open_holds_up_only_the_check_that_opens_it() {
    let (provider, result, reported) = run_provider(
        Counting {
            broken_channel: true,
            ..Counting::default()
        },
        SHORT_BUDGETS,
        Source::Live,
    )
    .await;
    let steps: Vec<&str> = result.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(reported, steps, "reported in the scenario's order");
    let identity = result.step("core-2-identity").expect("identity ran");
    assert!(
        identity.duration >= OPENING,
        "the first check opened the channel: {identity:?}"
    );
    for name in ["core-3-python", "core-6-filesystem", "core-9-secrets"] {
        let step = result.step(name).expect("the check ran");
        let shown = format!("{:?}", step.status);
        assert!(
            !shown.contains("exceeded its budget"),
            "{name} waited behind the channel's opening: {shown}"
        );
        assert!(
            shown.contains("python3 exited") || shown.contains("secrets probe"),
            "{name} probed through exec once the channel had failed: {shown}"
        );
    }
    let opened = provider
        .opened_at
        .lock()
        .unwrap()
        .expect("the channel was opened");
    let first_exec = provider
        .first_exec
        .lock()
        .unwrap()
        .expect("exec was called");
    assert!(
        first_exec < opened,
        "the secrets scan waited for the channel's opening"
    );
}
