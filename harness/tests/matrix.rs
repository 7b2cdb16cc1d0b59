//! The behaviour suite: every scenario in `scenarios/` on every known variant, one test per
//! step, named `variant::scenario::step`. A scenario runs once per process, the first time
//! one of its steps is asked for; each test then reports its own step. Trials are dealt
//! one scenario at a time in turn, so that the test threads run scenarios side by side. Cloud variants run
//! in replay, on every scenario they have a cassette for, with one more test,
//! `variant::scenario::replay`, passing when the cassette went as recorded. A step the
//! variant's capabilities leave nothing to test (`runner::skip_reason`) is registered as
//! ignored, its reason printed, as OpenDAL registers behaviour tests only where the
//! capability exists. Adding a variant adds it to `variants` and nothing here.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use sandbox_matrix::model::events::{EventSink, RunEvent};
use sandbox_matrix::model::results::{ScenarioResult, Source, StepStatus};
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id, skip_reason};
use sandbox_matrix::run::scenario::{Scenario, StepKind};
use sandbox_matrix::run::variants;
use tokio_util::sync::CancellationToken;

/// Prints each finished step, so a run under `--nocapture` shows progress.
struct Print;

impl EventSink for Print {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepFinished {
            variant,
            scenario,
            result,
        } = event
        {
            eprintln!(
                "{variant}::{scenario}::{} {:?} in {:.2?}",
                result.step, result.status, result.duration
            );
        }
    }
}

/// A scenario's result and the run id its resources were labelled with.
type Outcome = Arc<OnceLock<Result<(String, ScenarioResult), String>>>;

fn run_once(variant: &str, scenario: &Scenario) -> Result<(String, ScenarioResult), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let run_id = new_run_id();
        let runner = Runner::new(
            run_id.clone(),
            fake_canary(),
            Arc::new(Print),
            CancellationToken::new(),
        );
        // A local variant's registry, when it starts one, lives until the scenario ends.
        let mut local = None;
        let (provider, check, source) = match variants::cloud(variant) {
            Some(cloud) => {
                let session = variants::open_cloud(
                    cloud,
                    &scenario.name,
                    &replay_mode(),
                    runner.scenario_volatiles(),
                    &sandbox_providers::api::settings::Settings::environment(),
                )
                .await?;
                (session.provider, session.check, session.source)
            }
            None => {
                let scratch = common::out_dir(&format!("matrix-{variant}-{}", scenario.name));
                let session = variants::connect_local(
                    variant,
                    &common::root(),
                    std::path::Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
                    &scratch,
                )
                .await
                .map_err(|e| e.to_string())?;
                let provider = session.provider.clone();
                local = Some((session, scratch));
                (provider, None, Source::Live)
            }
        };
        let not_ready = runner.prepare(&provider).await.err();
        let result = runner
            .run_scenario_checked(provider, scenario, not_ready, check, source, 1)
            .await;
        if let Some((session, scratch)) = local {
            drop(session);
            let _ = std::fs::remove_dir_all(scratch);
        }
        Ok((run_id, result))
    })
}

fn cassettes() -> std::path::PathBuf {
    common::root().join(variants::CASSETTES_DIR)
}

fn replay_mode() -> variants::CloudMode {
    variants::CloudMode::Replay {
        dir: cassettes(),
        pace: sandbox_providers::api::replay::Pace::Instant,
    }
}

/// A step that cannot run on this machine, reported ignored with `reason`; under CI=true a
/// local variant's missing engine fails it instead (a cloud variant without a cassette is
/// ignored there too: not every scenario is recorded).
fn cannot_run_here(name: String, reason: String, cloud: bool) -> Trial {
    Trial::ignorable_test(name, move || {
        if !cloud && common::trials::ci() {
            return Err(format!("CI=true requires this test: {reason}").into());
        }
        Ok(Completion::ignored_with(reason))
    })
}

fn main() {
    let mut args = Arguments::from_args();
    common::trials::waiting_threads(&mut args);
    let dir = common::root().join("scenarios");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    let scenarios: Vec<Arc<Scenario>> = paths
        .iter()
        .map(|p| Arc::new(Scenario::load(p).unwrap_or_else(|e| panic!("{e}"))))
        .collect();

    // Listing needs no engine; running does, and says why it cannot run without one.
    let engine_missing = if args.list {
        None
    } else {
        common::trials::docker_missing()
    };
    let mut outcomes: HashMap<(String, String), Outcome> = HashMap::new();
    // One list of trials per variant × scenario; they are dealt out one of each in turn
    // below, so that the test threads run different scenarios side by side instead of
    // waiting on the one scenario all of its steps' trials share.
    let mut groups: Vec<Vec<Trial>> = Vec::new();
    for variant in variants::known() {
        for scenario in &scenarios {
            let cloud = variants::cloud(variant).is_some();
            let cassette = variants::cassette_path(&cassettes(), variant, &scenario.name);
            // Why none of this variant × scenario's steps can run here, if none can: a
            // cloud variant replays its cassette, the local ones need the engine.
            let cannot_run = if cloud {
                (!cassette.is_file()).then(|| {
                    format!(
                        "no cassette {} (record one: sandbox-matrix run --record --variant {variant} --scenario {})",
                        cassette.display(),
                        scenario.name
                    )
                })
            } else {
                engine_missing.clone()
            };
            let outcome = outcomes
                .entry(((*variant).to_owned(), scenario.name.clone()))
                .or_default()
                .clone();
            let capabilities = variants::capabilities(variant).expect("a known variant");
            let unavailable = variants::local_skip(variant);
            let mut steps: Vec<(&'static str, Option<String>)> = scenario
                .steps
                .iter()
                .map(|s| {
                    (
                        s.name(),
                        unavailable
                            .clone()
                            .or_else(|| skip_reason(&capabilities, s)),
                    )
                })
                .collect();
            if scenario.step(StepKind::Cleanup).is_none() {
                steps.push((StepKind::Cleanup.name(), unavailable.clone()));
            }
            if cloud {
                steps.push(("replay", None));
            }
            let mut trials = Vec::new();
            for (step, skip) in steps {
                if let Some(reason) = &skip
                    && !args.list
                {
                    eprintln!("{variant}::{}::{step}: ignored, {reason}", scenario.name);
                }
                let ignore = skip.is_some();
                let (variant, scenario, outcome) =
                    (variant.to_owned(), scenario.clone(), outcome.clone());
                let name = format!("{variant}::{}::{step}", scenario.name);
                if let Some(reason) = &cannot_run {
                    trials.push(
                        cannot_run_here(name, reason.clone(), cloud).with_ignored_flag(ignore),
                    );
                    continue;
                }
                let trial = Trial::test(name, move || {
                    let (run_id, result) = outcome
                        .get_or_init(|| run_once(&variant, &scenario))
                        .as_ref()
                        .map_err(Failed::from)?;
                    let step_result = result
                        .step(step)
                        .ok_or_else(|| Failed::from(format!("the run has no {step} step")))?;
                    match &step_result.status {
                        // Cleanup is also checked from outside: the docker CLI lists nothing by the run's label.
                        StepStatus::Passed if step == StepKind::Cleanup.name() && !cloud => {
                            let left = common::left_by_run(run_id);
                            if left.is_empty() {
                                Ok(())
                            } else {
                                Err(format!("still listed under the run label: {left:?}").into())
                            }
                        }
                        StepStatus::Passed => Ok(()),
                        StepStatus::Failed { reason } => Err(reason.as_str().into()),
                        // Run anyway (`--include-ignored`): the skip it was registered for.
                        StepStatus::Skipped { reason }
                            if skip.as_deref() == Some(reason.as_str()) =>
                        {
                            Ok(())
                        }
                        StepStatus::Skipped { reason } => Err(format!("skipped: {reason}").into()),
                    }
                })
                .with_ignored_flag(ignore);
                trials.push(trial);
            }
            groups.push(trials);
        }
    }
    let mut dealt = Vec::new();
    let mut queues: Vec<_> = groups.into_iter().map(Vec::into_iter).collect();
    while !queues.is_empty() {
        queues.retain_mut(|queue| match queue.next() {
            Some(trial) => {
                dealt.push(trial);
                true
            }
            None => false,
        });
    }
    libtest_mimic::run(&args, dealt).exit();
}
