//! The release gate: ship or hold each variant of a run against a policy file.
//!
//! A variant holds, with a reason for each, when a required step or check did not pass in
//! every repetition, a metric's success rate is under the floor, a metric's p90 is over its
//! budget or failed, a metric is slower than the baseline beyond noise (the rule of
//! [`crate::analyze::compare`]) and beyond the policy's tolerance, a resource leaked, or a secret was
//! found. Leaks and secrets always hold; the policy cannot allow them. A secrets scan that
//! passed only partially (as non-root, or with unreadable files, which its scenario
//! accepted for the variant) holds unless the policy sets `ship_partial_scans: true`; it
//! then ships with a note.
//!
//! Every rule judges live results only (live or recorded runs: the service answered). A
//! replay proves one thing, that the client still speaks the recorded protocol, and a
//! recording of an emulator says nothing of the service; an emulated result (`run
//! --emulated`) measured sandbox-matrix's own emulator of the provider over the local
//! engine, not the provider. A variant with no live result holds with `no live result for
//! <variant>`, and the replayed or emulated repetitions of a variant that has live ones are
//! left out (a note says how many). A policy may set `allow_replay: true` (the local replay
//! of the nightly, tests of the gate itself): replayed results are then judged too, and a
//! variant that ships on replays alone reads `ship (replay only)`. Likewise
//! `allow_emulated: true` (which `allow_replay` does not imply) judges emulated results,
//! and a variant that ships on them alone reads `ship (emulated only)`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::analyze::board;
use crate::analyze::compare::{self, Change};
use crate::analyze::stats::{self, Value};
use crate::model::results::{Class, RunResults, ScenarioResult, Source, StepStatus};

/// What a policy file holds, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    variants: Vec<String>,
    #[serde(default)]
    required: Vec<Spanned<String>>,
    success_rate: Option<Spanned<f64>>,
    max_orphans_per_1000: Option<Spanned<f64>>,
    max_readiness_ratio: Option<Spanned<f64>>,
    #[serde(default)]
    p90_budgets: BTreeMap<String, Spanned<String>>,
    regression: Option<RegressionFile>,
    #[serde(default)]
    allow_replay: bool,
    #[serde(default)]
    allow_emulated: bool,
    #[serde(default)]
    ship_partial_scans: bool,
    /// The key `allow_replay` replaced, refused with a message saying so.
    allow_replayed_timings: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegressionFile {
    tolerance: Spanned<f64>,
}

/// A release policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Variants that must have results; others present are gated too.
    pub variants: Vec<String>,
    /// Steps or checks that must pass in every repetition.
    pub required: Vec<Requirement>,
    /// The lowest share of successful attempts any metric may have, from 0 to 1.
    pub success_rate: Option<f64>,
    /// The most orphans a variant's live run may leave per 1,000 sandbox creates, as its
    /// orphan audit counts them; a variant run live without an audit holds.
    pub max_orphans_per_1000: Option<f64>,
    /// The largest median of first command ÷ second command a variant's launches may
    /// have: a larger one is a "ready" that is not ready. A variant with no launch that
    /// answered both holds.
    pub max_readiness_ratio: Option<f64>,
    /// p90 budgets, by scenario and metric, in the order of their keys.
    pub p90_budgets: Vec<Budget>,
    /// How much slower than the baseline's median a metric may be, as a fraction (0.25 is
    /// 25%), when the difference is beyond noise; `None` when the policy does not compare.
    pub regression_tolerance: Option<f64>,
    /// Whether replayed results are judged too; when not, only live ones are, and a
    /// variant without one holds.
    pub allow_replay: bool,
    /// Whether emulated results (against sandbox-matrix's emulator) are judged too; when
    /// not, they are left out like unjudged replays. `allow_replay` does not imply it.
    pub allow_emulated: bool,
    /// Whether a secrets scan that passed as partial (run as non-root, or with unreadable
    /// files, accepted by its scenario) ships, with a note; when not, it holds.
    pub ship_partial_scans: bool,
}

/// `scenario/step`: a step (or check, by its step name) that must pass; `scenario/*`: no
/// step of the scenario may fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Scenario name.
    pub scenario: String,
    /// Step name, or `*`.
    pub step: String,
}

/// A p90 budget for one metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Scenario name.
    pub scenario: String,
    /// Metric name, as [`stats::metrics`] names it (`create-to-first-result`, `step:build`).
    pub metric: String,
    /// The most the p90 may be.
    pub within: Duration,
}

/// Why a policy could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file names no rule (empty, comments only, `{}`, or only `variants`), so every
    /// run would ship.
    #[error(
        "{}: policy checks nothing: name at least one rule (`required`, `success_rate`, `max_orphans_per_1000`, `max_readiness_ratio`, `p90_budgets` or `regression`)",
        path.display()
    )]
    ChecksNothing {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a valid policy.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line, 0 when unknown.
        line: u64,
        /// 1-based column, 0 when unknown.
        column: u64,
        /// What is wrong there.
        message: String,
    },
}

impl Policy {
    /// Whether the rules judge a result from `source`: always when it was measured against
    /// the provider, a replay under `allow_replay`, an emulated one under `allow_emulated`.
    pub fn judges(&self, source: &Source) -> bool {
        match source.class() {
            Class::Measured => true,
            Class::Replayed => self.allow_replay,
            Class::Emulated => self.allow_emulated,
        }
    }

    /// What the rules judge, for notes on what they left out: `only live results are`.
    fn judged_results(&self) -> &'static str {
        match (self.allow_replay, self.allow_emulated) {
            (false, false) => "only live results are",
            (true, false) => "only live and replayed results are",
            (false, true) => "only live and emulated results are",
            (true, true) => "every result is",
        }
    }

    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses policy text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Policy, PolicyError> {
        let invalid = |location: &serde_saphyr::Location, message: String| PolicyError::Invalid {
            path: path.to_owned(),
            line: location.line(),
            column: location.column(),
            // Values from the file are quoted in messages: long ones are cut.
            message: sandbox_providers::yaml::humane(&message),
        };
        let nothing = || PolicyError::ChecksNothing {
            path: path.to_owned(),
        };
        // Empty or comments only: nothing to parse, and nothing checked.
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
        {
            return Err(nothing());
        }
        let file: PolicyFile = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column, message) = sandbox_providers::yaml::describe(&e);
            PolicyError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        })?;
        let split = |key: &str, location: &serde_saphyr::Location, what: &str| {
            key.split_once('/')
                .filter(|(scenario, name)| !scenario.is_empty() && !name.is_empty())
                .map(|(scenario, name)| (scenario.to_owned(), name.to_owned()))
                .ok_or_else(|| invalid(location, format!("`{key}` is not `<scenario>/<{what}>`")))
        };
        let required = file
            .required
            .iter()
            .map(|r| {
                let (scenario, step) = split(&r.value, &r.referenced, "step")?;
                Ok(Requirement { scenario, step })
            })
            .collect::<Result<_, _>>()?;
        let p90_budgets = file
            .p90_budgets
            .iter()
            .map(|(key, within)| {
                let (scenario, metric) = split(key, &within.referenced, "metric")?;
                let within = humantime::parse_duration(&within.value).map_err(|e| {
                    invalid(
                        &within.referenced,
                        format!(
                            "budget of `{key}`: `{}` is not a duration: {e}",
                            within.value
                        ),
                    )
                })?;
                Ok(Budget {
                    scenario,
                    metric,
                    within,
                })
            })
            .collect::<Result<_, _>>()?;
        if let Some(rate) = &file.success_rate
            && !(0.0..=1.0).contains(&rate.value)
        {
            return Err(invalid(
                &rate.referenced,
                format!("success_rate is {}, and must be from 0 to 1", rate.value),
            ));
        }
        if let Some(regression) = &file.regression
            && !(regression.tolerance.value >= 0.0 && regression.tolerance.value.is_finite())
        {
            return Err(invalid(
                &regression.tolerance.referenced,
                format!(
                    "regression tolerance is {}, and must be a fraction of 0 or more (0.25 is 25%)",
                    regression.tolerance.value
                ),
            ));
        }
        if let Some(rate) = &file.max_orphans_per_1000
            && !(rate.value >= 0.0 && rate.value.is_finite())
        {
            return Err(invalid(
                &rate.referenced,
                format!(
                    "max_orphans_per_1000 is {}, and must be a number of 0 or more",
                    rate.value
                ),
            ));
        }
        if let Some(ratio) = &file.max_readiness_ratio
            && !(ratio.value >= 1.0 && ratio.value.is_finite())
        {
            return Err(invalid(
                &ratio.referenced,
                format!(
                    "max_readiness_ratio is {}, and must be a number of 1 or more (the first command over the second)",
                    ratio.value
                ),
            ));
        }
        if let Some(old) = &file.allow_replayed_timings {
            return Err(invalid(
                &old.referenced,
                "`allow_replayed_timings` is now `allow_replay`, which lets every rule judge \
                 replayed results (not only timings) and marks a variant shipped on them \
                 `ship (replay only)`"
                    .to_owned(),
            ));
        }
        if file.required.is_empty()
            && file.success_rate.is_none()
            && file.max_orphans_per_1000.is_none()
            && file.max_readiness_ratio.is_none()
            && file.p90_budgets.is_empty()
            && file.regression.is_none()
        {
            return Err(nothing());
        }
        Ok(Policy {
            variants: file.variants,
            required,
            success_rate: file.success_rate.map(|r| r.value),
            max_orphans_per_1000: file.max_orphans_per_1000.map(|r| r.value),
            max_readiness_ratio: file.max_readiness_ratio.map(|r| r.value),
            p90_budgets,
            regression_tolerance: file.regression.map(|r| r.tolerance.value),
            allow_replay: file.allow_replay,
            allow_emulated: file.allow_emulated,
            ship_partial_scans: file.ship_partial_scans,
        })
    }
}

/// Why `variant`'s orphan audit exceeds `most` per 1,000 creates, or why there is none
/// to judge; nothing when it is within.
/// Why the launches in `scenarios` hold under `max_readiness_ratio: most`, if they do.
fn not_ready(scenarios: &[&ScenarioResult], most: f64) -> Option<String> {
    match board::readiness(scenarios) {
        None => Some(
            "no launch answered its first and second command: max_readiness_ratio needs a \
             sequential, staggered or burst step whose launches answered"
                .to_owned(),
        ),
        Some(r) if r.median > most => Some(format!(
            "readiness: the first command took ×{:.1} the second (median of {} launches; worst ×{:.1}), over the most of ×{most}: \"ready\" is not ready",
            r.median, r.launches, r.worst
        )),
        Some(_) => None,
    }
}

fn orphans_over(results: &RunResults, variant: &str, most: f64) -> Option<String> {
    let Some(audit) = results.orphans.iter().find(|a| a.variant == variant) else {
        return Some(format!(
            "no orphan audit for {variant}: max_orphans_per_1000 needs a live run that finished (an interrupted run lists no inventory)"
        ));
    };
    let rate = audit.per_1000().unwrap_or(0.0);
    (rate > most).then(|| {
        format!(
            "{} orphans of {} sandbox creates ({rate:.1} per 1,000), over the most of {most}: {}",
            audit.orphans.len(),
            audit.creates,
            audit.orphans.join(", ")
        )
    })
}

/// Ship or hold for one variant, with why.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Variant name.
    pub variant: String,
    /// Why it holds; it ships when this is empty.
    pub reasons: Vec<String>,
    /// What was not checked, and why; notes never hold a variant.
    pub notes: Vec<String>,
    /// Whether it was judged on replayed results alone (only under `allow_replay`); with
    /// `emulated_only`, on replayed and emulated results alone.
    pub replay_only: bool,
    /// Whether it was judged on emulated results alone (only under `allow_emulated`); with
    /// `replay_only`, on replayed and emulated results alone.
    pub emulated_only: bool,
}

impl Verdict {
    /// True when nothing holds the variant.
    pub fn ships(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// Gates every variant of `results` (and every variant the policy names) against `policy`,
/// comparing with `baseline` when given.
pub fn gate(policy: &Policy, results: &RunResults, baseline: Option<&RunResults>) -> Vec<Verdict> {
    let mut variants: Vec<&str> = Vec::new();
    for name in policy
        .variants
        .iter()
        .map(String::as_str)
        .chain(results.scenarios.iter().map(|s| s.variant.as_str()))
    {
        if !variants.contains(&name) {
            variants.push(name);
        }
    }
    // Unless the policy allows replayed or emulated results, the rules see live ones only.
    let judged = only_judged(policy, results);
    let metrics = stats::metrics(&judged);
    let comparison = baseline.map(|b| compare::compare(&only_judged(policy, b), &judged));
    variants
        .into_iter()
        .map(|variant| {
            let all: Vec<&ScenarioResult> = results
                .scenarios
                .iter()
                .filter(|s| s.variant == variant)
                .collect();
            let scenarios: Vec<&ScenarioResult> = judged
                .scenarios
                .iter()
                .filter(|s| s.variant == variant)
                .collect();
            let count = |of: &[&ScenarioResult], class: Class| {
                of.iter().filter(|s| s.source.class() == class).count()
            };
            let no_live = count(&scenarios, Class::Measured) == 0;
            let mut verdict = Verdict {
                variant: variant.to_owned(),
                reasons: Vec::new(),
                notes: Vec::new(),
                replay_only: no_live && count(&scenarios, Class::Replayed) > 0,
                emulated_only: no_live && count(&scenarios, Class::Emulated) > 0,
            };
            if all.is_empty() {
                verdict
                    .reasons
                    .push("the policy requires it and the results have none".to_owned());
                return verdict;
            }
            let (replayed, emulated) = (count(&all, Class::Replayed), count(&all, Class::Emulated));
            if scenarios.is_empty() {
                let mut why = Vec::new();
                if replayed > 0 {
                    why.push(format!(
                        "its {replayed} scenario result(s) are replayed from cassettes, which show \
                         only that the client still speaks the recorded protocol (allow_replay: \
                         true judges them)"
                    ));
                }
                if emulated > 0 {
                    why.push(format!(
                        "its {emulated} scenario result(s) ran against sandbox-matrix's emulator, \
                         not the provider (allow_emulated: true judges them)"
                    ));
                }
                verdict
                    .reasons
                    .push(format!("no live result for {variant}: {}", why.join("; ")));
                return verdict;
            }
            if !policy.allow_replay && replayed > 0 {
                verdict.notes.push(format!(
                    "{replayed} replayed scenario result(s) not judged: {}",
                    policy.judged_results()
                ));
            }
            if !policy.allow_emulated && emulated > 0 {
                verdict.notes.push(format!(
                    "{emulated} emulated scenario result(s) not judged: they ran against \
                     sandbox-matrix's emulator, not the provider; {}",
                    policy.judged_results()
                ));
            }
            leaks_and_secrets(&scenarios, &mut verdict.reasons);
            if let Some(most) = policy.max_orphans_per_1000
                && count(&scenarios, Class::Measured) > 0
            {
                verdict.reasons.extend(orphans_over(results, variant, most));
            }
            if let Some(most) = policy.max_readiness_ratio {
                verdict.reasons.extend(not_ready(&scenarios, most));
            }
            partial_scans(&scenarios, policy.ship_partial_scans, &mut verdict);
            for requirement in &policy.required {
                verdict.reasons.extend(required(requirement, &scenarios));
            }
            let own: Vec<&stats::Metric> =
                metrics.iter().filter(|m| m.variant == variant).collect();
            if let Some(floor) = policy.success_rate {
                for metric in &own {
                    let summary = metric.summary();
                    if summary.success_rate() < floor {
                        verdict.reasons.push(format!(
                            "{}/{} succeeded {}/{} ({:.0}%), under the floor of {:.0}%",
                            metric.scenario,
                            metric.name,
                            summary.successes,
                            summary.n,
                            summary.success_rate() * 100.0,
                            floor * 100.0
                        ));
                    }
                }
            }
            for budget in &policy.p90_budgets {
                match built_where(budget, &scenarios) {
                    Built::Here => verdict.reasons.extend(over_budget(budget, &own)),
                    Built::In(scenario) => {
                        let moved = Budget {
                            scenario: scenario.clone(),
                            ..budget.clone()
                        };
                        verdict.reasons.extend(over_budget(&moved, &own).map(|r| {
                            format!(
                                "{r} (the build {}/{} asks of: {} reused the artifact {scenario} built)",
                                budget.scenario, budget.metric, budget.scenario
                            )
                        }));
                    }
                    Built::Nothing(why) => verdict.notes.push(format!(
                        "{}/{} not judged: {variant} built nothing in this run ({why})",
                        budget.scenario, budget.metric
                    )),
                }
            }
            match (policy.regression_tolerance, &comparison) {
                (None, _) => {}
                (Some(_), None) => verdict
                    .notes
                    .push("regression not checked: no --baseline".to_owned()),
                (Some(_), Some(Err(mixed))) => verdict
                    .notes
                    .push(format!("regression not checked: {mixed}")),
                (Some(tolerance), Some(Ok(comparison))) => {
                    regressions(variant, tolerance, comparison, &mut verdict)
                }
            }
            verdict
        })
        .collect()
}

/// The step a budget of a scenario's build judges.
enum Built {
    /// The scenario's own build step (or it did not run: the budget says so).
    Here,
    /// The build of the scenario named, whose artifact this scenario reused.
    In(String),
    /// No build at all: the variant builds nothing (it launches by name), with why.
    Nothing(String),
}

/// Where the build `budget` asks of ran: a budget of `<scenario>/step:build` judges the
/// build that made the artifact the scenario used, whichever scenario of the run built it;
/// a variant that built nothing has no build to judge. Other budgets judge their own step.
fn built_where(budget: &Budget, scenarios: &[&ScenarioResult]) -> Built {
    if budget.metric != format!("{}build", stats::STEP_PREFIX) {
        return Built::Here;
    }
    let reps: Vec<&&ScenarioResult> = scenarios
        .iter()
        .filter(|s| s.scenario == budget.scenario)
        .collect();
    let ran = |s: &ScenarioResult| {
        s.step("build")
            .is_some_and(|b| !matches!(b.status, StepStatus::Skipped { .. }))
    };
    if reps.is_empty() || reps.iter().any(|s| ran(s)) {
        return Built::Here;
    }
    if let Some(reused) = reps
        .iter()
        .find_map(|s| s.step("build").and_then(|b| b.reused.as_ref()))
    {
        return Built::In(reused.built_in.clone());
    }
    match reps.iter().find_map(|s| s.step("build")).map(|b| &b.status) {
        Some(StepStatus::Skipped { reason }) => Built::Nothing(reason.clone()),
        _ => Built::Here,
    }
}

/// `results` with only the scenario results `policy` judges ([`Policy::judges`]).
fn only_judged(policy: &Policy, results: &RunResults) -> RunResults {
    RunResults {
        scenarios: results
            .scenarios
            .iter()
            .filter(|s| policy.judges(&s.source))
            .cloned()
            .collect(),
        ..results.clone()
    }
}

/// Reasons for every leaked resource and every secret found.
fn leaks_and_secrets(scenarios: &[&ScenarioResult], reasons: &mut Vec<String>) {
    for s in scenarios {
        for resource in &s.leaked_resources {
            reasons.push(format!(
                "{} (repetition {}) leaked {} `{}`",
                s.scenario, s.repetition, resource.kind, resource.id
            ));
        }
        for secret in &s.secrets_found {
            reasons.push(format!(
                "{} (repetition {}) found a secret: {secret}",
                s.scenario, s.repetition
            ));
        }
    }
}

/// A reason (or, when the policy ships them, a note) for every secrets scan that passed
/// only partially: a secret readable only by root would not have been seen.
fn partial_scans(scenarios: &[&ScenarioResult], ship: bool, verdict: &mut Verdict) {
    for s in scenarios {
        let Some(coverage) = s.secrets_scan.as_ref().filter(|c| c.partial()) else {
            continue;
        };
        let said = format!(
            "{} (repetition {}) scanned for secrets {}: a secret readable only by root would not be seen",
            s.scenario,
            s.repetition,
            coverage.describe()
        );
        if ship {
            verdict
                .notes
                .push(format!("{said}; shipped (ship_partial_scans: true)"));
        } else {
            verdict
                .reasons
                .push(format!("{said} (ship_partial_scans: true ships it)"));
        }
    }
}

/// The reason `requirement` holds the variant, if it does.
fn required(requirement: &Requirement, scenarios: &[&ScenarioResult]) -> Option<String> {
    let name = format!("{}/{}", requirement.scenario, requirement.step);
    let reps: Vec<&&ScenarioResult> = scenarios
        .iter()
        .filter(|s| s.scenario == requirement.scenario)
        .collect();
    if reps.is_empty() {
        return Some(format!(
            "required {name}: scenario {} did not run",
            requirement.scenario
        ));
    }
    let problems: Vec<String> = reps
        .iter()
        .filter_map(|rep| {
            let problem = if requirement.step == "*" {
                rep.steps.iter().find_map(|step| match &step.status {
                    StepStatus::Failed { reason } => {
                        Some(format!("{} failed: {reason}", step.step))
                    }
                    _ => None,
                })
            } else {
                match rep.step(&requirement.step).map(|s| &s.status) {
                    None => Some("no such step".to_owned()),
                    Some(StepStatus::Passed) => None,
                    Some(StepStatus::Failed { reason }) => Some(format!("failed: {reason}")),
                    Some(StepStatus::Skipped { reason }) => Some(format!("skipped: {reason}")),
                }
            }?;
            Some(format!("repetition {}: {problem}", rep.repetition))
        })
        .collect();
    let first = problems.first()?;
    Some(format!(
        "required {name} did not pass in {} of {} repetition(s) ({first})",
        problems.len(),
        reps.len()
    ))
}

/// The reason `budget` holds the variant, if it does.
fn over_budget(budget: &Budget, metrics: &[&stats::Metric]) -> Option<String> {
    let name = format!("{}/{}", budget.scenario, budget.metric);
    let within = humantime::format_duration(budget.within);
    let Some(metric) = metrics
        .iter()
        .find(|m| m.scenario == budget.scenario && m.name == budget.metric)
    else {
        return Some(format!(
            "{name} has a p90 budget of {within} and no measurements"
        ));
    };
    let summary = metric.summary();
    match summary.p90 {
        Value::Measured(p90) if p90 <= budget.within => None,
        p90 => Some(format!(
            "p90 of {name} is {p90} ({}/{} ok), over its budget of {within}",
            summary.successes, summary.n
        )),
    }
}

/// Reasons for every metric of `variant` slower than the baseline beyond noise and tolerance.
fn regressions(
    variant: &str,
    tolerance: f64,
    comparison: &compare::Comparison,
    verdict: &mut Verdict,
) {
    let rows: Vec<&compare::Row> = comparison
        .rows
        .iter()
        .filter(|r| r.variant == variant)
        .collect();
    if rows.is_empty() {
        verdict.notes.push(
            "regression not checked: the baseline has no metric in common with it".to_owned(),
        );
    }
    for row in rows {
        if row.change == Change::Slower && row.ratio.is_some_and(|r| r > 1.0 + tolerance) {
            verdict.reasons.push(format!(
                "{}/{} is slower than the baseline beyond noise: p50 {} → {} ({}, {}), over the tolerance of +{:.0}%",
                row.scenario,
                row.metric,
                row.baseline.p50,
                row.current.p50,
                compare::ratio_cell(row.ratio),
                compare::basis_cell(row.basis),
                tolerance * 100.0
            ));
        }
    }
}

/// One line per variant, `<variant>: ship` or `<variant>: hold`, each followed by its
/// reasons and notes as indented bullets. A variant shipped on no live result says on what:
/// `ship (replay only)`, `ship (emulated only)` or `ship (replay and emulated only)`.
pub fn render(verdicts: &[Verdict]) -> String {
    let mut lines = Vec::new();
    for verdict in verdicts {
        let word = match (verdict.ships(), verdict.replay_only, verdict.emulated_only) {
            (false, _, _) => "hold",
            (true, true, true) => "ship (replay and emulated only)",
            (true, true, false) => "ship (replay only)",
            (true, false, true) => "ship (emulated only)",
            (true, false, false) => "ship",
        };
        let count = match verdict.reasons.len() {
            0 => String::new(),
            1 => " (1 reason)".to_owned(),
            n => format!(" ({n} reasons)"),
        };
        lines.push(format!("{}: {word}{count}", verdict.variant));
        lines.extend(verdict.reasons.iter().map(|r| format!("  - {r}")));
        lines.extend(verdict.notes.iter().map(|n| format!("  - note: {n}")));
    }
    lines.push(String::new());
    lines.join("\n")
}

#[cfg(test)]
mod tests;
