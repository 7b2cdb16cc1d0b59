//! The runner: runs each scenario's steps in order against a provider, with a deadline per
//! step, and always cleans up — after a failed step, a panic inside a step, or Ctrl-C.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rand::Rng;
use sandbox_providers::api::Volatiles;
use sandbox_providers::{
    Artifact, BuildRequest, Capabilities, Deleted, ErrorKind, LifetimeLimit, Provider,
    ProviderError, RestartKind, RunLabels, SandboxId, Secret, ShutdownEnding, Timing,
};
use tokio_util::sync::CancellationToken;

use crate::checks::conformance::{self, Check, CheckParams};
use crate::checks::suite::{self, CheckTarget, check_answer, describe};
use crate::checks::{chain, secrets};
use crate::model::events::{EventSink, RunEvent};
use crate::model::outcome::{NOT_OBSERVABLE, StepEnd};
use crate::model::results::{
    BaseChain, COMPRESSED_BYTES, CREATE_TO_FIRST_RESULT, CREATED, FIRST_COMMAND,
    FIRST_COMMAND_SAMPLE, LifetimeSeen, ReusedArtifact, SECOND_COMMAND_SAMPLE, Sample,
    ScanCoverage, ScenarioResult, Source, StepResult, StepStatus, TTI,
};
use crate::run::base::RunBase;
use crate::run::ledger::Ledger;
use crate::run::lifetime;
use crate::run::scenario::{Expectation, LaunchMode, Scenario, Step, StepKind};
use crate::run::shared::{AtCleanup, SharedArtifact, SharedBuilds};

pub use skips::{skip_reason, unreachable_variant};

use check_steps::judge_coverage;
use sandbox_state::{sandbox_said, talks_to_the_sandbox};
use skips::{not_run, skipped};
use step::StepContext;
use step_log::StepLog;

mod build;
mod check_steps;
mod cleanup;
mod launches;
mod sandbox_state;
mod sandbox_steps;
mod secrets_scan;
mod skips;
mod step;
mod step_log;

/// Budget of the cleanup the runner adds when a scenario lists none.
pub const IMPLICIT_CLEANUP_BUDGET: Duration = Duration::from_secs(120);
/// Budget of a variant's preparation (the docker base image bootstrap takes minutes).
pub const PREPARE_BUDGET: Duration = Duration::from_secs(30 * 60);

/// Budget of the floor measurement that follows a first result.
const FLOOR_BUDGET: Duration = Duration::from_secs(120);
/// Most log lines kept per step; the newest are kept.
const MAX_LOG_LINES: usize = 400;

/// Runs scenarios on providers and reports through an [`EventSink`].
pub struct Runner {
    run_id: String,
    canary: Secret,
    base: Arc<RunBase>,
    sink: Arc<dyn EventSink>,
    cancel: CancellationToken,
    volatiles: Mutex<Arc<Volatiles>>,
    ledger: OnceLock<Arc<Ledger>>,
    interrupted_by: Arc<OnceLock<String>>,
    shared: Arc<SharedBuilds>,
    /// The scenario that measured each (variant, artifact id)'s floor: a floor is the
    /// image's, so it is measured once per artifact and run.
    floors: Mutex<HashMap<(String, String), String>>,
}

/// A check of the transport behind a scenario, run after its cleanup and reported as one
/// more step named `name`: in replay, that the cassette went as recorded; in record mode,
/// writing the cassette.
pub struct SessionCheck {
    /// The step name it is reported under, such as `replay`.
    pub name: &'static str,
    /// The check; `Ok` carries a line for the step's log.
    pub check: Box<dyn FnOnce() -> Result<String, String> + Send>,
}

/// Makes a run id: UTC time to the second and six random hex digits.
pub fn new_run_id() -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace([':', '-'], "");
    let suffix: u32 = rand::rng().random_range(0..0x100_0000);
    format!("{stamp}-{suffix:06x}")
}

/// A fresh fake canary credential for one run: it is handed to builds the way a registry
/// token would be and must never be found in an artifact or sandbox.
pub fn fake_canary() -> Secret {
    // Fake by construction: the value says so and grants nothing anywhere.
    Secret::new("REGISTRY_TOKEN", format!("sm-fake-canary-{}", random_hex()))
}

/// 16 random bytes as hex: the random part of values made for one run.
pub fn random_hex() -> String {
    (0..16)
        .map(|_| format!("{:02x}", rand::rng().random::<u8>()))
        .collect()
}

impl Runner {
    /// A runner for run `run_id`; cancelling `cancel` interrupts the current step and skips
    /// the rest, cleanup excepted.
    pub fn new(
        run_id: String,
        canary: Secret,
        sink: Arc<dyn EventSink>,
        cancel: CancellationToken,
    ) -> Self {
        let runner = Self {
            run_id,
            canary,
            base: Arc::new(RunBase::local()),
            sink,
            cancel,
            volatiles: Mutex::new(Arc::default()),
            ledger: OnceLock::new(),
            interrupted_by: Arc::default(),
            shared: Arc::default(),
            floors: Mutex::default(),
        };
        runner.scenario_volatiles();
        runner
    }

    /// This runner building every environment from `base`, with its credential, instead of
    /// the local bootstrap's base. The credential's password joins the run's secrets.
    pub fn with_base(mut self, base: RunBase) -> Self {
        self.base = Arc::new(base);
        self.scenario_volatiles();
        self
    }

    /// This runner recording every create in `ledger` before and after it, and cleaning up
    /// what the ledger names beside what the run's labels find.
    pub fn with_ledger(self, ledger: Arc<Ledger>) -> Self {
        self.attach_ledger(ledger);
        self
    }

    /// [`Runner::with_ledger`] on a runner already made: from the first create on (the
    /// ledger is made once the run's input has been checked, so bad input writes nothing).
    /// A second ledger is ignored.
    pub fn attach_ledger(&self, ledger: Arc<Ledger>) {
        let _ = self.ledger.set(ledger);
    }

    /// This runner naming what cancelled it from `by` (`Ctrl-C`, `SIGTERM`...), set by
    /// whoever cancels the token; an interrupted step says `interrupted by <it>`.
    pub fn with_interrupt_name(mut self, by: Arc<OnceLock<String>>) -> Self {
        self.interrupted_by = by;
        self
    }

    fn interruption(&self) -> String {
        format!(
            "interrupted by {}",
            self.interrupted_by.get().map_or("Ctrl-C", String::as_str)
        )
    }

    /// Plans one build per environment for the scenarios `variant` will run, in order and
    /// repetitions included: the first builds, the others reuse its artifact, and the last
    /// removes it (see [`SharedBuilds`]). Only for live variants: a cassette holds its own
    /// build.
    pub fn plan_shared_builds<'a>(
        &self,
        variant: &str,
        scenarios: impl IntoIterator<Item = &'a Scenario>,
    ) {
        self.shared.plan(variant, scenarios);
    }

    /// Removes the artifacts `provider`'s variant still shares because the scenarios that
    /// would have removed them did not run (the run stopped between scenarios); each line
    /// returned says what was removed or why it could not be.
    pub async fn release_shared(&self, provider: &Arc<dyn Provider>) -> Vec<String> {
        let mut lines = Vec::new();
        for resource in self.shared.drain(provider.variant()) {
            lines.push(match provider.delete_resource(&resource).await {
                Ok(deleted) => format!(
                    "shared {} {} that no scenario after the stop needed: {deleted}",
                    resource.kind,
                    short(&resource.id)
                ),
                Err(e) => format!(
                    "could not remove shared {} {}: {e}; `sandbox-matrix sweep --run {}` will",
                    resource.kind,
                    short(&resource.id),
                    self.run_id
                ),
            });
        }
        lines
    }

    /// The base every build uses.
    pub fn base(&self) -> &RunBase {
        &self.base
    }

    /// The run-varying values for the next scenario, which cloud variants keep out of
    /// cassettes: a fresh set holding the run id, the canary's forms (the value and its
    /// encodings) and their fingerprints, to which the scenario adds its own (restart
    /// markers, names a provider derives). Fresh per scenario, so that placeholders are
    /// numbered the same way in every run of it; call it before opening the scenario's
    /// session.
    pub fn scenario_volatiles(&self) -> Arc<Volatiles> {
        let volatiles = Arc::new(Volatiles::default());
        volatiles.register("run-id", &self.run_id);
        for form in secrets::forms(&self.canary) {
            volatiles.register_secret(&form);
            let hash = secrets::fingerprint(&form).hash;
            volatiles.register("canary-hash", &hash.to_string());
        }
        // The registry credential is real: no form of it may reach a cassette either.
        for form in self.base.secret().iter().flat_map(secrets::forms) {
            volatiles.register_secret(&form);
            let hash = secrets::fingerprint(&form).hash;
            volatiles.register("credential-hash", &hash.to_string());
        }
        *self.volatiles.lock().expect("volatiles lock") = volatiles.clone();
        volatiles
    }

    /// The secrets this run hands out and must never find again: the fake canary and,
    /// when the base is in a registry, the credential's password.
    pub fn secrets(&self) -> Vec<Secret> {
        std::iter::once(self.canary.clone())
            .chain(self.base.secret())
            .collect()
    }

    /// Prepares `provider` once; an error names the variant and what failed.
    pub async fn prepare(&self, provider: &Arc<dyn Provider>) -> Result<(), String> {
        let variant = provider.variant().to_owned();
        let sink = self.sink.clone();
        let progress = move |line: &str| {
            sink.emit(&RunEvent::Preparing {
                variant: variant.clone(),
                line: line.to_owned(),
            })
        };
        tokio::select! {
            r = tokio::time::timeout(PREPARE_BUDGET, provider.prepare(&self.base.base, &progress)) => match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("could not prepare the {} variant: {e}", provider.variant())),
                Err(_) => Err(format!("preparing the {} variant took over {}", provider.variant(), humantime::format_duration(PREPARE_BUDGET))),
            },
            () = self.cancel.cancelled() => Err(format!("{} while preparing", self.interruption())),
        }
    }

    /// Runs `scenario` on `provider`, its result marked [`Source::Live`]. `not_ready` fails
    /// the first step with that reason (a variant that could not be prepared); cleanup runs
    /// in every case.
    pub async fn run_scenario(
        &self,
        provider: Arc<dyn Provider>,
        scenario: &Scenario,
        not_ready: Option<String>,
    ) -> ScenarioResult {
        self.run_scenario_checked(provider, scenario, not_ready, None, Source::Live, 1)
            .await
    }

    /// [`Runner::run_scenario`] as repetition `repetition` (from 1), its numbers coming from
    /// `source`, then `session`, reported as one more step.
    pub async fn run_scenario_checked(
        &self,
        provider: Arc<dyn Provider>,
        scenario: &Scenario,
        not_ready: Option<String>,
        session: Option<SessionCheck>,
        source: Source,
        repetition: u32,
    ) -> ScenarioResult {
        let variant = provider.variant().to_owned();
        self.sink.emit(&RunEvent::ScenarioStarted {
            variant: variant.clone(),
            scenario: scenario.name.clone(),
            source: source.clone(),
        });
        let labels = RunLabels {
            run_id: self.run_id.clone(),
            variant: variant.clone(),
            scenario: scenario.name.clone(),
        };
        let state = Arc::new(Mutex::new(ScenarioState {
            began: Some(Instant::now()),
            ..ScenarioState::default()
        }));
        let capabilities = provider.capabilities();
        let mut steps = scenario.steps.clone();
        if !steps.iter().any(|s| s.kind == StepKind::Cleanup) {
            steps.push(Step {
                kind: StepKind::Cleanup,
                budget: IMPLICIT_CLEANUP_BUDGET,
                expect: Expectation::Default,
            });
        }
        let mut results: Vec<StepResult> = Vec::with_capacity(steps.len());
        let mut stop_reason: Option<String> = None;
        let run = ScenarioRun {
            provider: &provider,
            scenario,
            labels: &labels,
            state: &state,
            capabilities: &capabilities,
            not_ready: not_ready.as_deref(),
        };
        let emit_started = |step: &Step| {
            self.sink.emit(&RunEvent::StepStarted {
                variant: variant.clone(),
                scenario: scenario.name.clone(),
                step: step.name().to_owned(),
            })
        };
        let emit_finished = |result: &StepResult| {
            self.sink.emit(&RunEvent::StepFinished {
                variant: variant.clone(),
                scenario: scenario.name.clone(),
                result: result.clone(),
            })
        };
        // A block of consecutive checks of a live run runs as `run_block` says (the
        // independent checks at once, the ordered ones one at a time after those of the
        // code channel); every result is reported in the scenario's order. Replayed and recorded sessions keep their
        // cassettes' order of exchanges, so they run one step at a time (whatever source
        // the caller names: the provider says when its calls are being recorded or replayed).
        let concurrent =
            matches!(source, Source::Live | Source::Emulated { .. }) && !provider.ordered_calls();
        // Whether a step since the launch has used the sandbox's code channel (on docker,
        // started its kernel).
        let mut channel_used = false;
        let mut at = 0;
        while at < steps.len() {
            let block = if concurrent && stop_reason.is_none() && not_ready.is_none() {
                steps[at..]
                    .iter()
                    .take_while(|step| matches!(step.kind, StepKind::Check | StepKind::Doctor))
                    .count()
            } else {
                0
            };
            let block = &steps[at..at + block];
            if block.iter().filter(|step| runs_concurrently(step)).count() > 1 {
                at += block.len();
                let done = self
                    .run_block(&run, block, channel_used, &mut stop_reason, &emit_started)
                    .await;
                channel_used = true;
                for result in done {
                    if self.cancel.is_cancelled()
                        && matches!(result.status, StepStatus::Failed { .. })
                    {
                        stop_reason = Some("the run was interrupted".to_owned());
                    }
                    emit_finished(&result);
                    results.push(result);
                }
                continue;
            }
            let step = &steps[at];
            at += 1;
            emit_started(step);
            let result = self.one_step(&run, step, &mut stop_reason).await;
            match step.kind {
                StepKind::Launch => channel_used = false,
                StepKind::FirstResult | StepKind::Restart | StepKind::Doctor | StepKind::Check => {
                    channel_used = true
                }
                _ => {}
            }
            emit_finished(&result);
            results.push(result);
        }
        if let Some(session) = session {
            let started = Instant::now();
            let (status, log) = match (session.check)() {
                Ok(line) => (StepStatus::Passed, vec![line]),
                Err(reason) => (StepStatus::Failed { reason }, Vec::new()),
            };
            let result = StepResult {
                step: session.name.to_owned(),
                status,
                duration: started.elapsed(),
                started: None,
                budget: Duration::ZERO,
                timings: Vec::new(),
                log,
                data: None,
                reused: None,
            };
            self.sink.emit(&RunEvent::StepFinished {
                variant: variant.clone(),
                scenario: scenario.name.clone(),
                result: result.clone(),
            });
            results.push(result);
        }
        let state = std::mem::take(&mut *state.lock().expect("scenario state lock"));
        // Live settings that reached one of our emulators (as `emulate` prints them) are
        // not the provider: the emulator said so in its answers.
        let source = match (source, provider.emulator()) {
            (Source::Live | Source::Record, Some(emulator)) => Source::Emulated { emulator },
            (source, _) => source,
        };
        let result = ScenarioResult {
            variant,
            scenario: scenario.name.clone(),
            source,
            scenario_hash: scenario.hash.clone(),
            artifact_id: state.artifact.map(|a| a.id),
            provider_version: provider.provider_version(),
            region: provider.region(),
            capabilities: Some(capabilities),
            steps: results,
            timings: state.timings,
            leaked_resources: state.leaked,
            secrets_found: state.secrets_found,
            repetition,
            samples: state.samples,
            base_credential: state.base_credential,
            secrets_scan: state.secrets_scan,
            base_chain: state.base_chain,
            lifetime: state.lifetime,
        };
        self.sink.emit(&RunEvent::ScenarioFinished {
            result: Box::new(result.clone()),
        });
        result
    }

    /// Runs a block of consecutive checks of a live run, returning their results in the
    /// block's order. Two legs run at once. The code channel's: the first check to reach
    /// an unused channel opens it alone, so that a channel that cannot open (a kernel that
    /// never starts) costs that one check its wait and the others, started after it,
    /// learn at once that it failed and probe through python3 (instead of queueing behind
    /// the opening until their budgets run out); then the channel's other independent
    /// checks all at once; then the ordered checks (restart, shutdown, cold start,
    /// concurrent kernels), one at a time. The other leg: the independent checks that do
    /// not use the channel (the secrets scan, through exec), all at once from the start.
    async fn run_block(
        &self,
        run: &ScenarioRun<'_>,
        block: &[Step],
        channel_used: bool,
        stop_reason: &mut Option<String>,
        started: &(dyn Fn(&Step) + Sync),
    ) -> Vec<StepResult> {
        let channel = |step: &Step| match &step.expect {
            Expectation::Check(check, _) => suite::uses_code_channel(*check, run.capabilities),
            _ => true,
        };
        let one = |i: usize| async move {
            let mut no_stop = None;
            (i, self.one_step(run, &block[i], &mut no_stop).await)
        };
        let independent = |i: &usize| runs_concurrently(&block[*i]);
        let (together, ordered): (Vec<usize>, Vec<usize>) = (0..block.len()).partition(independent);
        let (on_channel, free): (Vec<usize>, Vec<usize>) =
            together.into_iter().partition(|&i| channel(&block[i]));
        let (lead, rest) = match on_channel.split_first() {
            Some((&lead, rest)) if !channel_used => (Some(lead), rest),
            _ => (None, &on_channel[..]),
        };
        lead.iter().chain(&free).for_each(|&i| started(&block[i]));
        let channel_leg = async {
            let mut out = Vec::new();
            if let Some(i) = lead {
                out.push(one(i).await);
            }
            rest.iter().for_each(|&i| started(&block[i]));
            out.extend(futures_util::future::join_all(rest.iter().map(|&i| one(i))).await);
            for &i in &ordered {
                started(&block[i]);
                let result = self.one_step(run, &block[i], stop_reason).await;
                if self.cancel.is_cancelled() && matches!(result.status, StepStatus::Failed { .. })
                {
                    *stop_reason = Some("the run was interrupted".to_owned());
                }
                out.push((i, result));
            }
            out
        };
        let free_leg = futures_util::future::join_all(free.iter().map(|&i| one(i)));
        let (on_channel, free) = tokio::join!(channel_leg, free_leg);
        let mut slots: Vec<Option<StepResult>> = block.iter().map(|_| None).collect();
        for (i, result) in on_channel.into_iter().chain(free) {
            slots[i] = Some(result);
        }
        slots
            .into_iter()
            .map(|result| result.expect("every check of the block ran"))
            .collect()
    }

    /// Runs `step` of `run` unless an earlier failure, an unready variant or the variant's
    /// capabilities say it cannot run (cleanup always runs); sets `stop_reason` when a
    /// failed lifecycle step leaves nothing for the steps after it.
    async fn one_step(
        &self,
        run: &ScenarioRun<'_>,
        step: &Step,
        stop_reason: &mut Option<String>,
    ) -> StepResult {
        if step.kind != StepKind::Cleanup
            && let Some(reason) = stop_reason
        {
            return skipped(step, reason.clone());
        }
        if step.kind != StepKind::Cleanup
            && let Some(reason) = run.not_ready
        {
            *stop_reason = Some("the variant was not ready".to_owned());
            return not_run(
                step,
                StepStatus::Failed {
                    reason: reason.to_owned(),
                },
            );
        }
        if let Some(reason) = skip_reason(run.capabilities, step) {
            // A platform that builds its own environments still hands launch what to start.
            if step.kind == StepKind::Build
                && let Some((artifact, why)) = run.provider.platform_artifact()
            {
                run.state.lock().expect("scenario state lock").artifact = Some(artifact);
                return skipped(step, why);
            }
            return skipped(step, reason);
        }
        let mut result = self
            .run_step(run.provider, run.scenario, step, run.labels, run.state)
            .await;
        if step.kind == StepKind::Build {
            result.reused = run.state.lock().expect("scenario state lock").reused.take();
        }
        if step.kind == StepKind::FirstResult
            && run.capabilities.floor
            && result.status == StepStatus::Passed
        {
            let artifact = run
                .state
                .lock()
                .expect("scenario state lock")
                .artifact
                .clone();
            if let Some(artifact) = artifact {
                let key = (run.labels.variant.clone(), artifact.id.clone());
                let measured_in = self.floors.lock().expect("floors lock").get(&key).cloned();
                match measured_in {
                    Some(scenario) => result.log.push(format!(
                        "floor: measured once per artifact and run, in scenario `{scenario}`"
                    )),
                    None => match self
                        .measure_floor(run.provider, &artifact, run.labels)
                        .await
                    {
                        Ok(timings) => {
                            result.timings.extend(timings);
                            self.floors
                                .lock()
                                .expect("floors lock")
                                .insert(key, run.scenario.name.clone());
                        }
                        Err(reason) => result.log.push(reason),
                    },
                }
            }
        }
        // A failed check is an observation: the next checks still run. A failed
        // lifecycle step leaves nothing for the steps after it to work on.
        let is_check = matches!(step.kind, StepKind::Check | StepKind::Doctor);
        if step.kind != StepKind::Cleanup
            && (!is_check || self.cancel.is_cancelled())
            && matches!(result.status, StepStatus::Failed { .. })
        {
            *stop_reason = Some(if self.cancel.is_cancelled() {
                "the run was interrupted".to_owned()
            } else {
                format!("an earlier step failed: {}", step.name())
            });
        }
        result
    }

    /// Runs one step in its own task, so that a panic fails the step rather than the run,
    /// under the step's budget and the run's cancellation.
    async fn run_step(
        &self,
        provider: &Arc<dyn Provider>,
        scenario: &Scenario,
        step: &Step,
        labels: &RunLabels,
        state: &Arc<Mutex<ScenarioState>>,
    ) -> StepResult {
        let log = StepLog::new(
            self.sink.clone(),
            labels.variant.clone(),
            step.kind,
            self.secrets(),
        );
        let ctx = StepContext {
            provider: provider.clone(),
            step: step.clone(),
            environment: scenario.environment.clone(),
            labels: labels.clone(),
            secrets: self.secrets(),
            canary: self.canary.clone(),
            base: self.base.clone(),
            state: state.clone(),
            log: log.clone(),
            volatiles: self.volatiles.lock().expect("volatiles lock").clone(),
            ledger: self.ledger.get().cloned(),
            sharing: self
                .shared
                .planned(&labels.variant, scenario)
                .then(|| Sharing {
                    builds: self.shared.clone(),
                    scenario: scenario.clone(),
                }),
            interrupted: self.cancel.is_cancelled(),
        };
        let started = Instant::now();
        let mut task = tokio::spawn(ctx.run());
        // Cleanup is not interrupted by Ctrl-C: it is what Ctrl-C is waiting for.
        let cancelled = async {
            if step.kind == StepKind::Cleanup {
                std::future::pending::<()>().await
            } else {
                self.cancel.cancelled().await
            }
        };
        let outcome = tokio::select! {
            joined = tokio::time::timeout(step.budget, &mut task) => match joined {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(e)) if e.is_panic() => Err(StepEnd::Failed(format!("panicked: {}", panic_message(e.into_panic())))),
                Ok(Err(e)) => Err(StepEnd::Failed(format!("the step's task ended abnormally: {e}"))),
                Err(_) => {
                    task.abort();
                    Err(StepEnd::Failed(format!("exceeded its budget of {}{}", humantime::format_duration(step.budget), waited_for(step.kind))))
                }
            },
            () = cancelled => {
                task.abort();
                Err(StepEnd::Failed(self.interruption()))
            }
        };
        let duration = started.elapsed();
        // A step that talked to the sandbox and failed says what happened to the sandbox,
        // where the provider can tell; what the step itself saw stays in its log.
        let outcome = match outcome {
            Err(StepEnd::Failed(reason))
                if talks_to_the_sandbox(step.kind) && !self.cancel.is_cancelled() =>
            {
                let sandbox = state.lock().expect("scenario state lock").sandbox.clone();
                let said = match sandbox {
                    Some(sandbox) => sandbox_said(provider, &sandbox, step, &reason).await,
                    None => None,
                };
                match said {
                    Some(said) => {
                        log.line(&format!("what the step saw: {reason}"));
                        Err(StepEnd::Failed(said))
                    }
                    None => Err(StepEnd::Failed(reason)),
                }
            }
            other => other,
        };
        let record = log.take();
        let status = match outcome {
            Ok(()) => StepStatus::Passed,
            Err(StepEnd::Failed(reason)) => StepStatus::Failed {
                reason: log.redact(&reason),
            },
            Err(StepEnd::Skipped(reason)) => StepStatus::Skipped {
                reason: log.redact(&reason),
            },
        };
        let began = state.lock().expect("scenario state lock").began;
        StepResult {
            step: step.name().to_owned(),
            status,
            duration,
            started: began.map(|b| started.duration_since(b)),
            budget: step.budget,
            timings: record.timings,
            log: record.lines,
            data: record.data,
            reused: None,
        }
    }

    /// Measures the floor after a first result, outside the step's own timing; a failure
    /// is logged on the step, never failing it.
    async fn measure_floor(
        &self,
        provider: &Arc<dyn Provider>,
        artifact: &Artifact,
        labels: &RunLabels,
    ) -> Result<Vec<Timing>, String> {
        match tokio::time::timeout(FLOOR_BUDGET, provider.floor(artifact, labels)).await {
            Ok(Ok(timings)) => Ok(timings),
            Ok(Err(e)) => Err(format!("floor not measured: {e}")),
            Err(_) => Err(format!(
                "floor not measured: over {}",
                humantime::format_duration(FLOOR_BUDGET)
            )),
        }
    }
}

/// What steps of one scenario hand to each other.
#[derive(Debug, Default)]
struct ScenarioState {
    artifact: Option<Artifact>,
    sandbox: Option<SandboxId>,
    launched_at: Option<Instant>,
    timings: Vec<Timing>,
    leaked: Vec<sandbox_providers::Resource>,
    secrets_found: Vec<String>,
    /// How much the secrets scan covered, once it scanned.
    secrets_scan: Option<ScanCoverage>,
    /// The launched artifact's base as its pulled provenance names it, once read.
    base_chain: Option<BaseChain>,
    /// What the `lifetime` step saw, once it launched.
    lifetime: Option<LifetimeSeen>,
    samples: Vec<Sample>,
    /// What the variant did with the base's credential, once it built.
    base_credential: Option<String>,
    /// The artifact the build step took from an earlier scenario instead of building.
    reused: Option<ReusedArtifact>,
    /// The scenario whose build made the artifact (this one, or the one it reused from).
    built_in: Option<String>,
    /// When the scenario started: steps' start times are counted from it.
    began: Option<Instant>,
}

/// Whether `step` is a check that neither changes the sandbox for the others nor is timed
/// against them, so that it can run at the same time as its neighbours: restart, shutdown,
/// cold start and concurrent kernels keep their place.
fn runs_concurrently(step: &Step) -> bool {
    match (&step.kind, &step.expect) {
        (StepKind::Doctor, _) => true,
        (StepKind::Check, Expectation::Check(check, _)) => matches!(
            check,
            Check::Doctor
                | Check::Identity
                | Check::Python
                | Check::Kernel
                | Check::Imports
                | Check::Filesystem
                | Check::Secrets
                | Check::Egress
                | Check::Gpu
                | Check::Throughput
        ),
        _ => false,
    }
}

/// What every step of one scenario's run is given.
struct ScenarioRun<'a> {
    provider: &'a Arc<dyn Provider>,
    scenario: &'a Scenario,
    labels: &'a RunLabels,
    state: &'a Arc<Mutex<ScenarioState>>,
    capabilities: &'a Capabilities,
    not_ready: Option<&'a str>,
}

/// A scenario that shares its environment's build with others of the run.
struct Sharing {
    builds: Arc<SharedBuilds>,
    scenario: Scenario,
}

/// Everything a step's task owns.
/// What a step that ran out of budget was waiting for, as its failure names it.
fn waited_for(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Launch => {
            " waiting for the sandbox to run and its code channel to answer (it neither answered nor exited)"
        }
        _ => "",
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests;
