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

mod build;
mod cleanup;
mod launches;
mod secrets_scan;

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

struct StepContext {
    provider: Arc<dyn Provider>,
    step: Step,
    environment: std::path::PathBuf,
    labels: RunLabels,
    /// Every secret of the run, searched for and redacted.
    secrets: Vec<Secret>,
    /// The fake canary, the one secret handed to builds as a build argument.
    canary: Secret,
    base: Arc<RunBase>,
    state: Arc<Mutex<ScenarioState>>,
    log: StepLog,
    volatiles: Arc<Volatiles>,
    ledger: Option<Arc<Ledger>>,
    /// Set when the scenario shares its build (see [`SharedBuilds`]).
    sharing: Option<Sharing>,
    /// The run was interrupted before the step started.
    interrupted: bool,
}

impl StepContext {
    fn state(&self) -> std::sync::MutexGuard<'_, ScenarioState> {
        self.state.lock().expect("scenario state lock")
    }

    /// Records in the ledger, fsynced, that a `kind` is about to be created; nothing is
    /// created when it cannot be recorded.
    fn intend(&self, kind: &str) -> Result<Option<u64>, StepEnd> {
        self.ledger
            .as_ref()
            .map(|l| l.intent(&self.labels, kind))
            .transpose()
            .map_err(|e| StepEnd::Failed(format!("{e}: nothing created")))
    }

    /// Records the provider's id for what intent `seq` created, as the resource
    /// `removable` names (which cleanup and sweep then delete), else as `kind` and `id`.
    fn record_created(
        &self,
        seq: Option<u64>,
        removable: Option<sandbox_providers::Resource>,
        kind: &str,
        id: &str,
    ) {
        let (Some(ledger), Some(seq)) = (&self.ledger, seq) else {
            return;
        };
        let written = match removable {
            Some(resource) => ledger.created(seq, &self.labels, &resource, true),
            None => ledger.created(
                seq,
                &self.labels,
                &sandbox_providers::Resource {
                    kind: kind.to_owned(),
                    id: id.to_owned(),
                },
                false,
            ),
        };
        if let Err(e) = written {
            self.log.line(&format!("warning: {e}"));
        }
    }

    fn artifact(&self) -> Result<Artifact, StepEnd> {
        self.state().artifact.clone().ok_or_else(|| {
            StepEnd::Failed(format!(
                "`{}` needs an artifact: put a `build` step before it",
                self.step.kind
            ))
        })
    }

    fn sandbox(&self) -> Result<SandboxId, StepEnd> {
        self.state().sandbox.clone().ok_or_else(|| {
            StepEnd::Failed(format!(
                "`{}` needs a running sandbox: put a `launch` step before it",
                self.step.kind
            ))
        })
    }

    async fn run(self) -> Result<(), StepEnd> {
        match self.step.kind {
            StepKind::Build => self.build().await,
            StepKind::Rebuild => self.rebuild().await,
            StepKind::Launch => self.launch().await,
            StepKind::FirstResult => self.first_result().await,
            StepKind::Restart => self.restart().await,
            StepKind::BaseChain => self.base_chain().await,
            StepKind::SecretsScan => self.secrets_scan().await,
            StepKind::Shutdown => self.shutdown().await,
            StepKind::Cleanup => self.cleanup().await,
            StepKind::Lifetime => self.lifetime().await,
            StepKind::Burst | StepKind::Sequential | StepKind::Staggered => {
                self.launch_many().await
            }
            StepKind::Doctor | StepKind::Check => match &self.step.expect {
                Expectation::Check(check, params) => self.check(*check, params).await,
                _ => Err(StepEnd::Failed("a check step without its check".to_owned())),
            },
        }
    }

    async fn launch(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        self.state().launched_at = Some(Instant::now());
        let sandbox = self.launch_recorded(&artifact, None).await?;
        self.state().sandbox = Some(sandbox);
        Ok(())
    }

    /// Launches a sandbox from `artifact` (with a lifetime limit, when given), recorded in
    /// the ledger before and after its create, and logs it and its timings.
    async fn launch_recorded(
        &self,
        artifact: &Artifact,
        lifetime: Option<Duration>,
    ) -> Result<SandboxId, StepEnd> {
        let seq = self.intend("sandbox")?;
        let (sandbox, timings) = match lifetime {
            None => self.provider.launch(artifact, &self.labels).await?,
            Some(asked) => {
                self.provider
                    .launch_for(artifact, &self.labels, asked)
                    .await?
            }
        };
        self.record_created(
            seq,
            self.provider.sandbox_resource(&sandbox),
            "sandbox",
            &sandbox.0,
        );
        self.log.line(&format!("sandbox: {}", sandbox.0));
        self.log.timings(timings);
        Ok(sandbox)
    }

    async fn first_result(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let Expectation::Answer { code, answer } = &self.step.expect else {
            return Err(StepEnd::Failed(
                "first-result has no expected answer".to_owned(),
            ));
        };
        let (output, timings) = self.provider.run_code(&sandbox, code).await?;
        let answered_at = Instant::now();
        self.log.timings(timings);
        self.log.line(&format!(
            "answer: {}",
            output.result.as_deref().unwrap_or("(none)")
        ));
        check_answer(code, answer, &output)?;
        let mut state = self.state();
        if let Some(launched_at) = state.launched_at.take() {
            state.timings.push(Timing {
                name: "create-to-first-result".into(),
                duration: answered_at - launched_at,
                resolution: None,
            });
        }
        Ok(())
    }

    async fn restart(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let marker = format!("sm-marker-{:08x}", rand::rng().random::<u32>());
        self.volatiles.register("marker", &marker);
        let set = self
            .run_code(
                &sandbox,
                &format!("__sandbox_matrix_marker = \"{marker}\"\n__sandbox_matrix_marker"),
            )
            .await?;
        if set.result.as_deref() != Some(&format!("'{marker}'")) {
            return Err(StepEnd::Failed(format!(
                "could not set the marker before restarting: {}",
                describe(&set)
            )));
        }
        // The variant declares a stateful channel (stateless ones skip this step): a
        // marker that is gone before any restart would make the restart look right.
        let kept = self.run_code(&sandbox, "__sandbox_matrix_marker").await?;
        if kept.result.as_deref() != Some(&format!("'{marker}'")) {
            return Err(format!(
                "the code channel is declared stateful but kept nothing between two calls ({}), so the restart cannot be shown",
                describe(&kept)
            )
            .into());
        }
        let started = Instant::now();
        let timings = self.provider.restart(&sandbox).await?;
        self.log.timings(timings);
        let output = self.run_code(&sandbox, "1+1").await?;
        let answered = started.elapsed();
        check_answer("1+1", "2", &output).map_err(|e| format!("after the restart: {e}"))?;
        self.log.timings(vec![Timing {
            name: "restart-to-answer".into(),
            duration: answered,
            resolution: None,
        }]);
        let probe = self.run_code(&sandbox, "__sandbox_matrix_marker").await?;
        match probe.error.as_deref() {
            Some(e) if e.starts_with("NameError") => Ok(()),
            _ => Err(format!(
                "the marker set before the restart survived it: {}",
                describe(&probe)
            )
            .into()),
        }
    }

    async fn run_code(
        &self,
        sandbox: &SandboxId,
        code: &str,
    ) -> Result<sandbox_providers::CodeOutput, StepEnd> {
        let (output, timings) = self.provider.run_code(sandbox, code).await?;
        self.log.timings(timings);
        Ok(output)
    }

    /// Pulls the artifact's provenance from where the provider keeps it and judges the base
    /// it names ([`chain::audit`]): fails on a provenance it cannot read as the launched
    /// image's, and on a base that is not approved.
    async fn base_chain(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        let pulled = self.provider.provenance(&artifact).await?;
        self.log
            .line(&format!("provenance pulled from {}", pulled.from));
        let chain = chain::audit(
            &artifact.id,
            &pulled,
            self.base.approved.as_ref(),
            sandbox_providers::docker::base::BASE_IMAGE,
        )
        .map_err(StepEnd::Failed)?;
        self.log.line(&format!(
            "base {} ({}): {}",
            chain.base, chain.base_digest, chain.approval
        ));
        let verdict = chain.approved.then_some(()).ok_or_else(|| {
            StepEnd::Failed(format!(
                "the provenance of {} names the base {} ({}), {}",
                chain.launched, chain.base, chain.base_digest, chain.approval
            ))
        });
        self.state().base_chain = Some(chain);
        verdict
    }

    /// Runs a probe: through the kernel, or, where the kernel cannot run code and the
    /// variant has a shell, through `python3 -c` as the sandbox's default user, so that a
    /// broken kernel fails the kernel checks without hiding what the others would find.
    async fn probe(&self, code: &str) -> Result<serde_json::Value, StepEnd> {
        let sandbox = self.sandbox()?;
        let stdout = match self.provider.run_code(&sandbox, code).await {
            Ok((output, timings)) => {
                self.log.timings(timings);
                if let Some(error) = output.error {
                    return Err(format!("the probe raised {error}").into());
                }
                output.stdout
            }
            Err(kernel_error) if self.provider.capabilities().exec_as_root => {
                self.log.line(&format!(
                    "the kernel cannot run code ({kernel_error}); probing through python3 instead"
                ));
                self.python_exec(&sandbox, code, false).await?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(conformance::parse_answer(&stdout)?)
    }

    /// Runs conformance check `check`; its verdict decides the step and its answer is kept.
    async fn check(&self, check: Check, params: &CheckParams) -> Result<(), StepEnd> {
        let verdict = suite::run(self, check, params).await?;
        self.log.data(verdict.data);
        if let Some(reason) = verdict.skipped {
            return Err(StepEnd::Skipped(reason));
        }
        match (verdict.passed, verdict.detail) {
            (true, Some(detail)) => {
                self.log.line(&detail);
                Ok(())
            }
            (true, None) => Ok(()),
            (false, detail) => Err(StepEnd::Failed(
                detail.unwrap_or_else(|| "failed".to_owned()),
            )),
        }
    }

    async fn shutdown(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let Expectation::StoppedWithin(within) = self.step.expect else {
            return Err(StepEnd::Failed("shutdown has no deadline".to_owned()));
        };
        let grace = Duration::from_secs(sandbox_contract::GRACEFUL_SHUTDOWN_SECS);
        let started = Instant::now();
        let report = self.provider.shutdown(&sandbox, grace).await?;
        let took = started.elapsed();
        self.state().sandbox = None;
        let exit = report
            .exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default();
        let (ending, graceful) = match report.ending {
            ShutdownEnding::ExitedOnSigterm => ("exited on SIGTERM", Some(true)),
            ShutdownEnding::ExitedWithError => (
                "exited on SIGTERM with a code neither 0 nor SIGTERM's 143",
                Some(false),
            ),
            ShutdownEnding::AlreadyExited => {
                ("had already exited before the stop was sent", Some(false))
            }
            ShutdownEnding::Killed => ("killed after the grace period", Some(false)),
            ShutdownEnding::NotObservable => (NOT_OBSERVABLE, None),
            ShutdownEnding::Unknown => ("ended, how is not reported", None),
        };
        self.log.line(&format!("ending: {ending}{exit}"));
        // `graceful` is null when it could not be seen: never counted as a graceful exit.
        self.log.data(serde_json::json!({
            "graceful": graceful,
            "seconds": took.as_secs_f64(),
        }));
        let seconds = format!("{:.2} s", took.as_secs_f64());
        match report.ending {
            ShutdownEnding::Killed => Err(format!(
                "{ending} ({}s grace{exit}); stopped after {seconds}",
                grace.as_secs()
            )
            .into()),
            ShutdownEnding::Unknown => Err(format!(
                "the provider did not say how the sandbox ended, so a graceful exit cannot be told from a kill; stopped after {seconds}"
            )
            .into()),
            ShutdownEnding::ExitedWithError => {
                Err(format!("{ending}{exit}: not a clean exit; stopped after {seconds}").into())
            }
            ShutdownEnding::AlreadyExited => Err(format!(
                "the sandbox {ending}{exit}: it ended on its own (a crash, say), and no shutdown \
                 was seen"
            )
            .into()),
            _ if took > within => Err(format!(
                "stopped after {seconds}, over {}",
                humantime::format_duration(within)
            )
            .into()),
            ShutdownEnding::ExitedOnSigterm | ShutdownEnding::NotObservable => Ok(()),
        }
    }
}

impl CheckTarget for StepContext {
    fn capabilities(&self) -> Capabilities {
        self.provider.capabilities()
    }

    async fn probe(&self, code: &str) -> Result<serde_json::Value, StepEnd> {
        StepContext::probe(self, code).await
    }

    async fn run_code(&self, code: &str) -> Result<sandbox_providers::CodeOutput, StepEnd> {
        let sandbox = self.sandbox()?;
        StepContext::run_code(self, &sandbox, code).await
    }

    async fn run_code_in(
        &self,
        context: &str,
        code: &str,
    ) -> Result<sandbox_providers::CodeOutput, ProviderError> {
        let sandbox = self
            .sandbox()
            .map_err(|_| ProviderError::new(ErrorKind::Config, "no running sandbox"))?;
        self.provider.run_code_in(&sandbox, context, code).await
    }

    async fn restart(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let timings = self.provider.restart(&sandbox).await?;
        self.log.timings(timings);
        Ok(())
    }

    async fn find_secrets(&self) -> Result<Vec<String>, StepEnd> {
        StepContext::find_secrets(self).await
    }

    fn measured(&self, name: &str) -> Option<Duration> {
        self.state()
            .timings
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.duration)
    }
}

/// Why a variant that can do what `capabilities` say cannot run `step`, or why the step has
/// nothing to test on it; `None` when it has something. Such a step is skipped with this
/// reason, never passed.
pub fn skip_reason(capabilities: &Capabilities, step: &Step) -> Option<String> {
    if let Expectation::Check(check, params) = &step.expect {
        return conformance::nothing_to_test(*check, params, capabilities);
    }
    match step.kind {
        StepKind::Build | StepKind::Rebuild if !capabilities.build => {
            Some("this variant does not build artifacts".to_owned())
        }
        StepKind::Restart if capabilities.restart == RestartKind::Unsupported => {
            Some("this variant cannot restart a kernel or sandbox".to_owned())
        }
        StepKind::Restart if !capabilities.stateful_code => Some(conformance::STATELESS.to_owned()),
        StepKind::Lifetime if capabilities.lifetime == LifetimeLimit::None => Some(
            "this variant cannot bound a sandbox's lifetime: a sandbox runs until it is stopped"
                .to_owned(),
        ),
        StepKind::BaseChain if !capabilities.provenance => {
            Some("this variant keeps no provenance beside its artifacts".to_owned())
        }
        _ => None,
    }
}

/// The result of `scenario` on a variant that could not be reached in the mode `source`
/// says: the first step fails with `reason`, the rest are skipped, and there was nothing to
/// clean up.
pub fn unreachable_variant(
    variant: &str,
    scenario: &Scenario,
    source: Source,
    reason: &str,
) -> ScenarioResult {
    let steps = scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let status = if i == 0 {
                StepStatus::Failed {
                    reason: reason.to_owned(),
                }
            } else {
                StepStatus::Skipped {
                    reason: "the variant is unreachable".to_owned(),
                }
            };
            not_run(step, status)
        })
        .collect();
    ScenarioResult {
        variant: variant.to_owned(),
        scenario: scenario.name.clone(),
        source,
        scenario_hash: scenario.hash.clone(),
        artifact_id: None,
        provider_version: None,
        region: None,
        capabilities: None,
        steps,
        timings: Vec::new(),
        leaked_resources: Vec::new(),
        secrets_found: Vec::new(),
        repetition: 1,
        samples: Vec::new(),
        base_credential: None,
        secrets_scan: None,
        base_chain: None,
        lifetime: None,
    }
}

/// How long the provider is given to say what happened to a sandbox after a step failed.
const SANDBOX_STATE_BUDGET: Duration = Duration::from_secs(10);
/// How many more times a sandbox said running is asked again, and how far apart.
const STATE_ASKS: usize = 6;
const STATE_ASK_INTERVAL: Duration = Duration::from_millis(500);

/// Steps that talk to the launched sandbox and expect it to answer (not the shutdown,
/// which stops it, nor the burst, whose sandboxes are its own).
fn talks_to_the_sandbox(kind: StepKind) -> bool {
    matches!(
        kind,
        StepKind::FirstResult
            | StepKind::Restart
            | StepKind::SecretsScan
            | StepKind::Doctor
            | StepKind::Check
    )
}

/// What happened to `sandbox`, as its provider tells, when `step` failed with `reason`:
/// `the sandbox stopped during restart: killed (exit 137)` and its last log lines, or
/// `the sandbox stopped answering during restart (paused)`, or, running, that the
/// connection broke and not the sandbox; `None` when it is running and answered (the
/// step's own reason says it best), or the provider cannot tell.
async fn sandbox_said(
    provider: &Arc<dyn Provider>,
    sandbox: &SandboxId,
    step: &Step,
    reason: &str,
) -> Option<String> {
    let over_budget = reason.starts_with("exceeded its budget");
    let ask = async {
        // A connection reset can come in before the engine has marked the sandbox ended:
        // a sandbox still running is asked again, a few times, before it is believed.
        let mut state = provider.sandbox_state(sandbox).await;
        for _ in 0..STATE_ASKS {
            if over_budget || !matches!(state, Ok(Some(sandbox_providers::SandboxState::Running))) {
                break;
            }
            tokio::time::sleep(STATE_ASK_INTERVAL).await;
            state = provider.sandbox_state(sandbox).await;
        }
        state
    };
    let state = tokio::time::timeout(SANDBOX_STATE_BUDGET, ask)
        .await
        .ok()?
        .ok()??;
    let name = step.name();
    match state {
        sandbox_providers::SandboxState::Stopped {
            ending,
            last_log_lines,
            ..
        } => {
            let mut said = format!("the sandbox stopped during {name}: {ending}");
            if !last_log_lines.is_empty() {
                said.push_str(&format!(
                    "; its last {} log lines:\n{}",
                    last_log_lines.len(),
                    last_log_lines
                        .iter()
                        .map(|line| format!("    | {line}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            Some(said)
        }
        sandbox_providers::SandboxState::Paused => Some(format!(
            "the sandbox stopped answering during {name} (paused: it answers nothing until it is resumed)"
        )),
        sandbox_providers::SandboxState::Running if over_budget => Some(format!(
            "the sandbox stopped answering during {name} (running, no reply for {})",
            humantime::format_duration(step.budget)
        )),
        // The provider still has it running: the connection broke, not the sandbox.
        sandbox_providers::SandboxState::Running if reason.starts_with("transport error") => {
            Some(format!(
                "the sandbox was still running when the connection to it broke during {name}: {reason}"
            ))
        }
        sandbox_providers::SandboxState::Running => None,
    }
}

/// Whether a secrets scan that found nothing tested something: it read a file, and read
/// everything as root unless `accepted` (the step's `accept_partial:` names `variant`).
fn judge_coverage(coverage: &ScanCoverage, accepted: bool, variant: &str) -> Result<(), String> {
    if coverage.files_scanned == 0 {
        return Err(format!(
            "{} read 0 files, so it tested nothing",
            coverage.scanner
        ));
    }
    if coverage.partial() && !accepted {
        return Err(format!(
            "the secrets scan was {}: {} ran as uid {} and could not read {} files, so a secret readable only by root would not be seen; where the variant offers no root, accept it with `accept_partial: [{variant}]` on the step",
            coverage.describe(),
            coverage.scanner,
            coverage.uid,
            coverage.unreadable,
        ));
    }
    Ok(())
}

fn skipped(step: &Step, reason: String) -> StepResult {
    not_run(step, StepStatus::Skipped { reason })
}

/// A step that did not run: skipped, or failed before it could start.
fn not_run(step: &Step, status: StepStatus) -> StepResult {
    StepResult {
        step: step.name().to_owned(),
        status,
        duration: Duration::ZERO,
        started: None,
        budget: step.budget,
        timings: Vec::new(),
        log: Vec::new(),
        data: None,
        reused: None,
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

/// What a step recorded while it ran.
#[derive(Default)]
struct StepRecord {
    lines: Vec<String>,
    timings: Vec<Timing>,
    data: Option<serde_json::Value>,
}

/// A step's log: lines (credentials redacted, newest kept), timings and a check's data;
/// lines are also sent as events.
#[derive(Clone)]
struct StepLog {
    inner: Arc<Mutex<StepRecord>>,
    sink: Arc<dyn EventSink>,
    variant: String,
    step: StepKind,
    secrets: Vec<Secret>,
}

impl StepLog {
    fn new(
        sink: Arc<dyn EventSink>,
        variant: String,
        step: StepKind,
        secrets: Vec<Secret>,
    ) -> Self {
        Self {
            inner: Arc::default(),
            sink,
            variant,
            step,
            secrets,
        }
    }

    fn redact(&self, line: &str) -> String {
        self.secrets.iter().fold(line.to_owned(), |l, s| {
            l.replace(s.expose(), &format!("[redacted {}]", s.name()))
        })
    }

    fn line(&self, line: &str) {
        let line = self.redact(line);
        self.sink.emit(&RunEvent::StepLog {
            variant: self.variant.clone(),
            step: self.step.name().to_owned(),
            line: line.clone(),
        });
        let mut inner = self.inner.lock().expect("step log lock");
        if inner.lines.len() == MAX_LOG_LINES {
            inner.lines.remove(0);
        }
        inner.lines.push(line);
    }

    fn timings(&self, timings: Vec<Timing>) {
        self.inner
            .lock()
            .expect("step log lock")
            .timings
            .extend(timings);
    }

    fn data(&self, data: serde_json::Value) {
        self.inner.lock().expect("step log lock").data = Some(data);
    }

    fn take(&self) -> StepRecord {
        std::mem::take(&mut *self.inner.lock().expect("step log lock"))
    }
}

#[cfg(test)]
mod tests;
