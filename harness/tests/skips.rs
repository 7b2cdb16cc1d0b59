//! Skip, never pass, when there is nothing to test: a stub variant whose capabilities and
//! code channel are set per test (no engine needed) shows that checks with nothing to test,
//! restarts on a stateless channel and calls the variant cannot serve are skipped with their
//! reason, that a channel declared stateful but keeping nothing fails instead of passing,
//! and that a shutdown through an API is never counted as a graceful exit.

use std::collections::HashMap;
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

/// A variant with a tiny Python-like code channel: `1+1`, `name = value`, `name`, and
/// `"name" in globals()`. When `keeps_state` is false, every call starts empty, as
/// Daytona's code-run does.
struct Stub {
    capabilities: Capabilities,
    keeps_state: bool,
    ending: ShutdownEnding,
    globals: Mutex<HashMap<String, String>>,
}

impl Stub {
    fn new(capabilities: Capabilities) -> Self {
        Self {
            capabilities,
            keeps_state: true,
            ending: ShutdownEnding::ExitedOnSigterm,
            globals: Mutex::new(HashMap::new()),
        }
    }

    fn answer(&self, code: &str) -> CodeOutput {
        let mut globals = self.globals.lock().unwrap();
        if !self.keeps_state {
            globals.clear();
        }
        let mut output = CodeOutput::default();
        for line in code.lines() {
            if line == "1+1" {
                output.result = Some("2".into());
            } else if let Some((name, value)) = line.split_once(" = ") {
                // Rust's `{:?}` quotes with `"`; Python's repr answers with `'`.
                globals.insert(name.to_owned(), value.replace('"', "'"));
            } else if let Some(name) = line
                .strip_suffix(" in globals()")
                .map(|n| n.trim_matches('"'))
            {
                let present = if globals.contains_key(name) {
                    "True"
                } else {
                    "False"
                };
                output.result = Some(present.into());
            } else {
                match globals.get(line) {
                    Some(value) => output.result = Some(value.clone()),
                    None => output.error = Some(format!("NameError: name '{line}' is not defined")),
                }
            }
        }
        output
    }
}

#[async_trait]
impl Provider for Stub {
    fn variant(&self) -> &str {
        "stub"
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
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
        Ok((self.answer(code), Vec::new()))
    }

    /// Each context a kernel of its own, all running at once: check 14's timed probe gets
    /// the context's own pid and one shared second.
    async fn run_code_in(&self, _: &SandboxId, context: &str, code: &str) -> Result<CodeOutput> {
        if code.contains("getpid") {
            let pid =
                100 + context.len() as u64 * 10 + u64::from(context.as_bytes()[context.len() - 1]);
            return Ok(CodeOutput {
                stdout: format!("{pid} 10.0 11.0\n"),
                ..CodeOutput::default()
            });
        }
        Ok(self.answer(code))
    }

    async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
        Err(ProviderError::unsupported("run commands"))
    }

    async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
        self.globals.lock().unwrap().clear();
        Ok(Vec::new())
    }

    async fn shutdown(&self, _: &SandboxId, _: Duration) -> Result<ShutdownReport> {
        Ok(ShutdownReport {
            ending: self.ending,
            exit_code: None,
        })
    }

    async fn artifact_metadata(&self, _: &Artifact) -> Result<String> {
        Err(ProviderError::unsupported("read artifact metadata"))
    }
}

#[async_trait]
impl Housekeeping for Stub {
    async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
        Ok(Vec::new())
    }

    async fn delete_resource(&self, _: &Resource) -> Result<sandbox_providers::Deleted> {
        Ok(sandbox_providers::Deleted::AlreadyGone)
    }
}

/// A kernel-backed variant: stateful, restarts its kernel, shutdown seen by signal.
fn kernel_variant() -> Capabilities {
    Capabilities {
        build: true,
        restart: RestartKind::Kernel,
        build_logs: BuildLogMode::Streamed,
        exec_as_root: false,
        doctor_scan: false,
        artifact_metadata: false,
        floor: false,
        concurrent_contexts: 4,
        stateful_code: true,
        shutdown: ShutdownObservation::Signal,
        gpus: 0,
        egress_policy: false,
        artifacts_listed: true,
        provenance: false,
        lifetime: Default::default(),
    }
}

/// A variant whose code channel is a fresh interpreter per call, ended through an API.
fn stateless_variant() -> Capabilities {
    Capabilities {
        restart: RestartKind::Sandbox,
        concurrent_contexts: 1,
        stateful_code: false,
        shutdown: ShutdownObservation::Api,
        ..kernel_variant()
    }
}

struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: &RunEvent) {}
}

async fn run(stub: Stub, steps: &str) -> ScenarioResult {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/t.yaml");
    let text = format!(
        "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 5s\n{steps}"
    );
    let scenario = Scenario::parse(&path, &text).expect("scenario parses");
    let runner = Runner::new(
        "run-1".into(),
        fake_canary(),
        Arc::new(Quiet),
        CancellationToken::new(),
    );
    runner.run_scenario(Arc::new(stub), &scenario, None).await
}

fn status<'a>(result: &'a ScenarioResult, step: &str) -> &'a StepStatus {
    &result
        .step(step)
        .unwrap_or_else(|| panic!("no {step} in {:?}", result.steps))
        .status
}

/// The reason `step` was skipped; panics when it was not.
fn skipped<'a>(result: &'a ScenarioResult, step: &str) -> &'a str {
    match status(result, step) {
        StepStatus::Skipped { reason } => reason,
        other => panic!("{step} should be skipped, was {other:?}"),
    }
}

/// The reason `step` failed; panics when it did not.
fn failed<'a>(result: &'a ScenarioResult, step: &str) -> &'a str {
    match status(result, step) {
        StepStatus::Failed { reason } => reason,
        other => panic!("{step} should fail, was {other:?}"),
    }
}

#[tokio::test]
async fn checks_with_nothing_to_test_are_skipped_with_their_reason() {
    let result = run(
        Stub::new(kernel_variant()),
        "  - step: first-result\n    budget: 5s\n  - check: python\n    budget: 5s\n  - check: imports\n    budget: 5s\n  - check: egress\n    budget: 5s\n  - check: gpu\n    budget: 5s\n  - check: cold-start\n    budget: 5s\n",
    )
    .await;
    assert!(skipped(&result, "core-3-python").contains("no Python version (`expect:`)"));
    assert!(skipped(&result, "core-5-imports").contains("locks no package"));
    assert!(skipped(&result, "extended-10-egress").contains("no egress targets"));
    assert!(skipped(&result, "extended-11-gpu").contains("no accelerator was asked for"));
    assert!(skipped(&result, "extended-13-cold-start").contains("no cold-start budget"));
    assert!(
        result.passed(),
        "a skip is not a failure: {:?}",
        result.steps
    );
}

#[tokio::test]
async fn a_cold_start_with_no_first_result_before_it_is_skipped() {
    let result = run(
        Stub::new(kernel_variant()),
        "  - check: cold-start\n    budget: 5s\n    within: 30s\n",
    )
    .await;
    assert!(skipped(&result, "extended-13-cold-start").contains("not measured"));
}

#[tokio::test]
async fn a_gpu_asked_of_a_variant_without_one_fails() {
    let result = run(
        Stub::new(kernel_variant()),
        "  - check: gpu\n    budget: 5s\n    gpus: 1\n",
    )
    .await;
    assert_eq!(
        failed(&result, "extended-11-gpu"),
        "1 GPU(s) asked for, and this variant attaches 0"
    );
}

#[tokio::test]
async fn blocked_targets_on_a_variant_without_an_egress_policy_are_skipped() {
    let result = run(
        Stub::new(kernel_variant()),
        "  - check: egress\n    budget: 5s\n    blocked: [\"127.0.0.1:9\"]\n",
    )
    .await;
    assert!(skipped(&result, "extended-10-egress").contains("applies no egress policy"));
}

#[tokio::test]
async fn a_stateless_channel_skips_restart_check_7_and_check_14() {
    let stub = Stub {
        keeps_state: false,
        ending: ShutdownEnding::NotObservable,
        ..Stub::new(stateless_variant())
    };
    let result = run(
        stub,
        "  - step: restart\n    budget: 5s\n  - check: restart\n    budget: 5s\n  - check: concurrent-kernels\n    budget: 5s\n",
    )
    .await;
    assert!(skipped(&result, "restart").contains("keeps no state between calls"));
    assert!(skipped(&result, "core-7-restart").contains("keeps no state between calls"));
    assert!(
        skipped(&result, "extended-14-concurrent-kernels").contains("1 code context at a time")
    );
}

#[tokio::test]
async fn a_channel_declared_stateful_that_keeps_nothing_fails_instead_of_passing() {
    let stub = Stub {
        keeps_state: false,
        ..Stub::new(kernel_variant())
    };
    let result = run(
        stub,
        "  - check: restart\n    budget: 5s\n  - step: restart\n    budget: 5s\n",
    )
    .await;
    assert!(failed(&result, "core-7-restart").contains("kept nothing between two calls"));
    assert!(failed(&result, "restart").contains("kept nothing between two calls"));
}

#[tokio::test]
async fn a_kernel_restart_passes_check_7_and_the_restart_step() {
    let result = run(
        Stub::new(kernel_variant()),
        "  - check: restart\n    budget: 5s\n  - step: restart\n    budget: 5s\n  - check: concurrent-kernels\n    budget: 5s\n",
    )
    .await;
    assert_eq!(status(&result, "core-7-restart"), &StepStatus::Passed);
    assert_eq!(status(&result, "restart"), &StepStatus::Passed);
    assert_eq!(
        status(&result, "extended-14-concurrent-kernels"),
        &StepStatus::Passed
    );
}

#[tokio::test]
async fn a_shutdown_through_the_api_is_not_a_graceful_exit() {
    let stub = Stub {
        ending: ShutdownEnding::NotObservable,
        ..Stub::new(stateless_variant())
    };
    let result = run(stub, "  - step: shutdown\n    budget: 5s\n").await;
    let step = result.step("shutdown").expect("a shutdown step");
    assert_eq!(step.status, StepStatus::Passed);
    assert!(
        step.log
            .iter()
            .any(|l| l == "ending: ended through the API; exit on SIGTERM not observable"),
        "{:?}",
        step.log
    );
    let data = step.data.as_ref().expect("shutdown data");
    assert!(data["graceful"].is_null(), "{data}");
}

#[tokio::test]
async fn a_shutdown_the_provider_does_not_describe_fails() {
    let stub = Stub {
        ending: ShutdownEnding::Unknown,
        ..Stub::new(kernel_variant())
    };
    let result = run(stub, "  - step: shutdown\n    budget: 5s\n").await;
    assert!(failed(&result, "shutdown").contains("did not say how the sandbox ended"));
}

#[tokio::test]
async fn a_call_the_variant_cannot_serve_skips_the_step_naming_it() {
    // The secrets probe goes through `python3 -c` when the variant runs commands as root;
    // this one declares it but cannot.
    let capabilities = Capabilities {
        exec_as_root: true,
        ..kernel_variant()
    };
    let result = run(
        Stub::new(capabilities),
        "  - step: secrets-scan\n    budget: 5s\n",
    )
    .await;
    assert_eq!(
        skipped(&result, "secrets-scan"),
        "this variant cannot run commands"
    );
}
