//! The runner's own guarantees, shown with a scripted provider (no engine needed): a step
//! that panics or hangs fails with the reason, later steps are skipped with a reason, and
//! cleanup still runs and deletes what was created; a floor is measured once per artifact
//! and run; the orphan audit catches a sandbox left behind and sweeps it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::{ScenarioResult, StepStatus};
use sandbox_matrix::run::runner::{Runner, fake_canary};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::{
    Artifact, BuildLogMode, BuildRequest, Capabilities, CodeOutput, CommandOutput, Housekeeping,
    LogFn, Provider, ProviderError, Resource, RestartKind, Result, RunLabels, SandboxId,
    ShutdownEnding, ShutdownObservation, ShutdownReport, Timing,
};
use tokio_util::sync::CancellationToken;

/// What the scripted provider does wrong.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    PanicOnRestart,
    HangOnLaunch,
    FirstFloorFails,
    /// Its API lists no artifact (as Modal's), and deleting the image fails.
    UnlistedImageStays,
}

/// A provider whose resources are a list in memory; it misbehaves as scripted.
struct Scripted {
    fault: Fault,
    resources: Mutex<Vec<Resource>>,
    /// The restart step's marker, kept between calls as a kernel keeps it.
    marker: Mutex<Option<String>>,
    /// How many floors it measured.
    floors: Mutex<u32>,
}

#[async_trait]
impl Provider for Scripted {
    fn variant(&self) -> &str {
        "scripted"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            build: true,
            restart: RestartKind::Kernel,
            build_logs: BuildLogMode::Streamed,
            exec_as_root: false,
            doctor_scan: false,
            artifact_metadata: false,
            floor: true,
            concurrent_contexts: 1,
            stateful_code: true,
            shutdown: ShutdownObservation::Signal,
            gpus: 0,
            egress_policy: false,
            artifacts_listed: self.fault != Fault::UnlistedImageStays,
            provenance: false,
            lifetime: Default::default(),
        }
    }

    async fn build(&self, _: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        log("built");
        self.resources.lock().unwrap().push(Resource {
            kind: "image".into(),
            id: "img-1".into(),
        });
        Ok(Artifact {
            id: "img-1".into(),
            kind: "image-id".into(),
        })
    }

    async fn launch(&self, _: &Artifact, _: &RunLabels) -> Result<(SandboxId, Vec<Timing>)> {
        self.resources.lock().unwrap().push(Resource {
            kind: "container".into(),
            id: "box-1".into(),
        });
        if self.fault == Fault::HangOnLaunch {
            std::future::pending::<()>().await;
        }
        Ok((SandboxId("box-1".into()), Vec::new()))
    }

    async fn run_code(&self, _: &SandboxId, code: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        // Answers `1+1`, and keeps the restart step's marker, answering it the way
        // Python's repr would.
        if let Some(marker) = code
            .strip_prefix("__sandbox_matrix_marker = \"")
            .and_then(|rest| rest.split('"').next())
        {
            *self.marker.lock().unwrap() = Some(marker.to_owned());
        }
        let result = match code {
            "1+1" => Some("2".to_owned()),
            _ if code.ends_with("__sandbox_matrix_marker") => self
                .marker
                .lock()
                .unwrap()
                .as_ref()
                .map(|m| format!("'{m}'")),
            _ => None,
        };
        Ok((
            CodeOutput {
                result,
                ..Default::default()
            },
            Vec::new(),
        ))
    }

    async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
        Err(ProviderError::unsupported("exec"))
    }

    async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
        panic!("the scripted restart panics");
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

    async fn floor(&self, _: &Artifact, _: &RunLabels) -> Result<Vec<Timing>> {
        let mut floors = self.floors.lock().unwrap();
        *floors += 1;
        if self.fault == Fault::FirstFloorFails && *floors == 1 {
            return Err(ProviderError::new(
                sandbox_providers::ErrorKind::Transport,
                "the scripted floor's container did not start",
            ));
        }
        Ok(vec![Timing {
            name: "floor-kernel".into(),
            duration: Duration::from_millis(1_500),
            resolution: None,
        }])
    }
}

#[async_trait]
impl Housekeeping for Scripted {
    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: "container".into(),
            id: sandbox.0.clone(),
        })
    }

    async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
        Ok(self.resources.lock().unwrap().clone())
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<sandbox_providers::Deleted> {
        if self.fault == Fault::UnlistedImageStays && resource.kind == "image" {
            return Err(ProviderError::new(
                sandbox_providers::ErrorKind::Api,
                "the scripted image delete fails",
            ));
        }
        let mut resources = self.resources.lock().unwrap();
        let before = resources.len();
        resources.retain(|r| r != resource);
        Ok(if resources.len() < before {
            sandbox_providers::Deleted::Removed
        } else {
            sandbox_providers::Deleted::AlreadyGone
        })
    }
}

struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: &RunEvent) {}
}

fn scripted(fault: Fault) -> Arc<Scripted> {
    Arc::new(Scripted {
        fault,
        resources: Mutex::new(Vec::new()),
        marker: Mutex::new(None),
        floors: Mutex::new(0),
    })
}

fn runner() -> Runner {
    Runner::new(
        "run-1".into(),
        fake_canary(),
        Arc::new(Quiet),
        CancellationToken::new(),
    )
}

/// `text` as a scenario file of `scenarios/`, so that the build step lints the project's
/// own reference environment.
fn scenario(text: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/t.yaml");
    Scenario::parse(&path, text).expect("scenario parses")
}

async fn run(fault: Fault, text: &str) -> (ScenarioResult, Arc<Scripted>) {
    let provider = scripted(fault);
    let result = runner()
        .run_scenario(provider.clone(), &scenario(text), None)
        .await;
    (result, provider)
}

fn status<'a>(result: &'a ScenarioResult, step: &str) -> &'a StepStatus {
    &result
        .step(step)
        .unwrap_or_else(|| panic!("no {step}"))
        .status
}

const LIFECYCLE: &str = "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 1s\n  - step: first-result\n    budget: 5s\n  - step: restart\n    budget: 5s\n  - step: shutdown\n    budget: 5s\n  - step: cleanup\n    budget: 5s\n";

#[tokio::test]
async fn a_panicking_step_fails_and_cleanup_still_runs() {
    let (result, provider) = run(Fault::PanicOnRestart, LIFECYCLE).await;
    assert_eq!(status(&result, "build"), &StepStatus::Passed);
    assert_eq!(status(&result, "first-result"), &StepStatus::Passed);
    assert_eq!(
        status(&result, "restart"),
        &StepStatus::Failed {
            reason: "panicked: the scripted restart panics".into()
        }
    );
    assert_eq!(
        status(&result, "shutdown"),
        &StepStatus::Skipped {
            reason: "an earlier step failed: restart".into()
        }
    );
    assert_eq!(status(&result, "cleanup"), &StepStatus::Passed);
    assert!(
        provider.resources.lock().unwrap().is_empty(),
        "cleanup deleted everything"
    );
    assert!(result.leaked_resources.is_empty());
}

#[tokio::test]
async fn a_hung_step_fails_at_its_budget_and_cleanup_still_runs() {
    let started = std::time::Instant::now();
    let (result, provider) = run(Fault::HangOnLaunch, LIFECYCLE).await;
    assert_eq!(
        status(&result, "launch"),
        &StepStatus::Failed {
            reason: "exceeded its budget of 1s waiting for the sandbox to run and its code channel to answer (it neither answered nor exited)".into()
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the budget bounds the wait"
    );
    assert_eq!(status(&result, "cleanup"), &StepStatus::Passed);
    assert!(
        provider.resources.lock().unwrap().is_empty(),
        "the container created before the hang is gone"
    );
}

#[tokio::test]
async fn a_scenario_without_cleanup_gets_one() {
    let (result, provider) = run(
        Fault::PanicOnRestart,
        "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n",
    )
    .await;
    assert_eq!(
        result
            .steps
            .iter()
            .map(|s| s.step.as_str())
            .collect::<Vec<_>>(),
        ["build", "cleanup"]
    );
    assert!(provider.resources.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_refused_dockerfile_fails_build_before_the_provider_builds() {
    let dir = std::env::temp_dir().join(format!("sm-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Dockerfile"),
        "FROM sandbox-matrix/contract-base:v1\n\nVOLUME /data\n",
    )
    .unwrap();
    let text = format!(
        "name: t\nenvironment: {}\nsteps:\n  - step: build\n    budget: 5s\n",
        dir.display()
    );
    let (result, provider) = run(Fault::PanicOnRestart, &text).await;
    let _ = std::fs::remove_dir_all(&dir);
    let StepStatus::Failed { reason } = status(&result, "build") else {
        panic!("{:?}", result.steps)
    };
    assert!(reason.contains("Dockerfile:3: volume:"), "{reason}");
    assert!(
        provider.resources.lock().unwrap().is_empty(),
        "nothing was built"
    );
}

/// Runs scenarios `one` and `two` (build, launch, first-result) with one runner on a
/// scripted provider with `fault`: their results and the provider.
async fn two_first_results(fault: Fault) -> (Vec<ScenarioResult>, Arc<Scripted>) {
    let provider = scripted(fault);
    let runner = runner();
    let first_result = "name: NAME\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 1s\n  - step: first-result\n    budget: 5s\n";
    let mut results = Vec::new();
    for name in ["one", "two"] {
        let scenario = scenario(&first_result.replace("NAME", name));
        results.push(runner.run_scenario(provider.clone(), &scenario, None).await);
    }
    (results, provider)
}

#[tokio::test]
async fn a_floor_is_measured_once_per_artifact_and_run() {
    let (results, provider) = two_first_results(Fault::PanicOnRestart).await;
    assert_eq!(
        *provider.floors.lock().unwrap(),
        1,
        "one artifact, one floor"
    );
    let first = results[0].step("first-result").expect("first-result");
    assert_eq!(first.status, StepStatus::Passed);
    assert!(
        first.timings.iter().any(|t| t.name == "floor-kernel"),
        "{first:?}"
    );
    let second = results[1].step("first-result").expect("first-result");
    assert_eq!(second.status, StepStatus::Passed);
    assert!(second.timings.iter().all(|t| t.name != "floor-kernel"));
    assert!(
        second
            .log
            .contains(&"floor: measured once per artifact and run, in scenario `one`".to_owned()),
        "{:?}",
        second.log
    );
}

#[tokio::test]
async fn a_floor_that_failed_is_measured_again_with_the_next_first_result() {
    let (results, provider) = two_first_results(Fault::FirstFloorFails).await;
    assert_eq!(*provider.floors.lock().unwrap(), 2);
    let first = results[0].step("first-result").expect("first-result");
    assert_eq!(
        first.status,
        StepStatus::Passed,
        "a floor never fails its step"
    );
    assert!(
        first
            .log
            .iter()
            .any(|l| l.starts_with("floor not measured:") && l.contains("did not start")),
        "{:?}",
        first.log
    );
    let second = results[1].step("first-result").expect("first-result");
    assert!(
        second.timings.iter().any(|t| t.name == "floor-kernel"),
        "{second:?}"
    );
}

/// Where the API lists no artifact, a leak is counted from the provider's listing only: the
/// image this client still remembers is not counted as leaked, and its failed delete fails
/// cleanup, named.
#[tokio::test]
async fn an_unlisted_artifact_is_not_counted_and_its_failed_delete_fails_cleanup() {
    let (result, provider) = run(Fault::UnlistedImageStays, LIFECYCLE).await;
    let StepStatus::Failed { reason } = status(&result, "cleanup") else {
        panic!("cleanup passed: {:?}", status(&result, "cleanup"));
    };
    assert!(
        reason.contains("could not remove image img-1: api error: the scripted image delete fails"),
        "{reason}"
    );
    assert!(
        result.leaked_resources.is_empty(),
        "{:?}",
        result.leaked_resources
    );
    assert_eq!(
        provider.resources.lock().unwrap().as_slice(),
        [Resource {
            kind: "image".into(),
            id: "img-1".into(),
        }]
    );
}

/// A sandbox that outlived its scenario's cleanup (a create whose answer was lost, say),
/// deliberately left in the provider's inventory: the orphan audit lists it, deletes it and
/// counts it against the creates the ledger recorded for the variant, and no other's.
#[tokio::test]
async fn the_orphan_audit_catches_a_sandbox_left_behind_and_sweeps_it() {
    use sandbox_matrix::run::ledger::Ledger;
    use sandbox_matrix::run::orphans;
    let dir = std::env::temp_dir().join(format!("sm-orphans-{}", std::process::id()));
    let ledger = Ledger::create(&dir, "run-orphans").expect("a ledger");
    let labels = |variant: &str| sandbox_providers::RunLabels {
        run_id: "run-orphans".to_owned(),
        variant: variant.to_owned(),
        scenario: "burst".to_owned(),
    };
    for _ in 0..4 {
        ledger
            .intent(&labels("scripted"), "sandbox")
            .expect("recorded");
    }
    ledger
        .intent(&labels("scripted"), "image")
        .expect("recorded");
    ledger
        .intent(&labels("other"), "sandbox")
        .expect("recorded");
    let creates = orphans::creates(ledger.path(), "scripted").expect("read");
    assert_eq!(creates, 4, "sandbox creates of this variant only");

    let provider = scripted(Fault::HangOnLaunch);
    let before = orphans::inventory(
        provider.as_ref(),
        "run-orphans",
        "scripted",
        &["burst".to_owned()],
    )
    .await
    .expect("listed");
    assert!(before.is_empty());
    let leaked = Resource {
        kind: "container".to_owned(),
        id: "lost-create-1".to_owned(),
    };
    provider.resources.lock().unwrap().push(leaked.clone());
    let lines = Mutex::new(Vec::new());
    let audit = orphans::audit(
        provider.as_ref(),
        "run-orphans",
        "scripted",
        &["burst".to_owned()],
        creates,
        before,
        &|line| lines.lock().unwrap().push(line.to_owned()),
    )
    .await
    .expect("audited");
    assert_eq!(audit.orphans, ["container lost-create-1"]);
    assert_eq!(audit.swept, 1);
    assert_eq!(audit.per_1000(), Some(250.0));
    assert!(provider.resources.lock().unwrap().is_empty(), "swept");
    assert_eq!(
        lines.into_inner().unwrap(),
        ["orphan container lost-create-1: deleted"]
    );
    let _ = std::fs::remove_dir_all(dir);
}
