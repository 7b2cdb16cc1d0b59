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
mod tests {
    use sandbox_providers::Resource;

    use super::*;
    use crate::model::results::ReplayPace;
    use crate::report::fixture::{failed, replay_source, run, scenario, skipped, step, timing};

    fn policy(text: &str) -> Result<Policy, String> {
        Policy::parse(Path::new("policy.yaml"), text).map_err(|e| e.to_string())
    }

    /// Ten repetitions of docker / lifecycle: first-result fails in the last three, and
    /// create-to-first-result takes 1.0 s, 1.1 s, ... where it was measured.
    fn seventy_percent() -> RunResults {
        lifecycle(3)
    }

    /// Ten repetitions of docker / lifecycle, first-result failing in the last `failures`.
    fn lifecycle(failures: u32) -> RunResults {
        run((1..=10)
            .map(|repetition| {
                let ok = repetition <= 10 - failures;
                let status = if ok {
                    StepStatus::Passed
                } else {
                    failed("expected `2`, got `3`")
                };
                ScenarioResult {
                    steps: vec![
                        step("build", StepStatus::Passed, 30_000, 600, vec![], &[]),
                        step("first-result", status, 900, 90, vec![], &[]),
                    ],
                    timings: if ok {
                        vec![timing(
                            "create-to-first-result",
                            900 + 100 * u64::from(repetition),
                            None,
                        )]
                    } else {
                        vec![]
                    },
                    repetition,
                    ..scenario("docker", "lifecycle")
                }
            })
            .collect())
    }

    #[test]
    fn a_policy_parses_with_its_budgets_and_requirements() {
        let p = policy(
            "variants: [docker]\nrequired:\n  - lifecycle/first-result\n  - core-tier/*\nsuccess_rate: 0.9\np90_budgets:\n  lifecycle/create-to-first-result: 5s\n  lifecycle/step:build: 3m\nregression:\n  tolerance: 0.25\n",
        )
        .expect("parses");
        assert_eq!(p.variants, ["docker"]);
        assert_eq!(
            p.required[1],
            Requirement {
                scenario: "core-tier".to_owned(),
                step: "*".to_owned()
            }
        );
        assert_eq!(p.success_rate, Some(0.9));
        assert_eq!(
            p.p90_budgets,
            [
                Budget {
                    scenario: "lifecycle".to_owned(),
                    metric: "create-to-first-result".to_owned(),
                    within: Duration::from_secs(5)
                },
                Budget {
                    scenario: "lifecycle".to_owned(),
                    metric: "step:build".to_owned(),
                    within: Duration::from_secs(180)
                },
            ]
        );
        assert_eq!(p.regression_tolerance, Some(0.25));
    }

    #[test]
    fn policy_errors_are_for_people() {
        let e = policy("success_rate: 0.5\nsuccess_rate: 0.9\n").expect_err("twice");
        assert_eq!(
            e,
            "policy.yaml:2:1: `success_rate` is given twice; give each key once"
        );
        let e = policy(&format!("required:\n  - {}\n", "x".repeat(10_000))).expect_err("no slash");
        assert!(
            e.len() < 700 && e.contains("10000 bytes in all"),
            "{}",
            &e[..300.min(e.len())]
        );
    }

    #[test]
    fn a_policy_that_checks_nothing_is_refused() {
        for text in [
            "",
            "\n# only a comment\n",
            "{}\n",
            "---\n{}\n",
            "variants: [docker]\n",
        ] {
            let e = policy(text).expect_err("checks nothing");
            assert_eq!(
                e,
                "policy.yaml: policy checks nothing: name at least one rule (`required`, `success_rate`, `max_orphans_per_1000`, `max_readiness_ratio`, `p90_budgets` or `regression`)",
                "{text:?}"
            );
        }
    }

    #[test]
    fn policy_errors_name_file_and_line() {
        let unknown = policy("required: []\nsucess_rate: 0.9\n").expect_err("a typo");
        assert!(unknown.starts_with("policy.yaml:2:"), "{unknown}");
        assert!(unknown.contains("sucess_rate"), "{unknown}");
        assert!(
            !unknown.contains("at line"),
            "the location is said once: {unknown}"
        );
        let rate = policy("# floor\nsuccess_rate: 90\n").expect_err("not a fraction");
        assert!(
            rate.starts_with("policy.yaml:2:") && rate.contains("from 0 to 1"),
            "{rate}"
        );
        let key = policy("required:\n  - lifecycle/first-result\n  - first-result\n")
            .expect_err("no scenario");
        assert!(
            key.starts_with("policy.yaml:3:")
                && key.contains("`first-result` is not `<scenario>/<step>`"),
            "{key}"
        );
        let duration = policy("p90_budgets:\n  lifecycle/step:build: fast\n").expect_err("no unit");
        assert!(
            duration.starts_with("policy.yaml:2:") && duration.contains("`fast` is not a duration"),
            "{duration}"
        );
        let tolerance = policy("regression:\n  tolerance: -1\n").expect_err("negative");
        assert!(tolerance.starts_with("policy.yaml:2:"), "{tolerance}");
        let wrong_type = policy("success_rate: high\n").expect_err("a word");
        assert!(wrong_type.starts_with("policy.yaml:1:"), "{wrong_type}");
    }

    #[test]
    fn an_all_pass_run_ships() {
        let results = run(vec![ScenarioResult {
            steps: vec![step(
                "first-result",
                StepStatus::Passed,
                900,
                90,
                vec![],
                &[],
            )],
            timings: vec![timing("create-to-first-result", 1_200, None)],
            ..scenario("docker", "lifecycle")
        }]);
        let p = policy(
            "required: [lifecycle/first-result, lifecycle/*]\nsuccess_rate: 1\np90_budgets:\n  lifecycle/create-to-first-result: 2s\n",
        )
        .expect("parses");
        let verdicts = gate(&p, &results, None);
        assert_eq!(verdicts.len(), 1);
        assert!(verdicts[0].ships(), "{verdicts:?}");
        assert_eq!(render(&verdicts), "docker: ship\n");
    }

    #[test]
    fn seventy_percent_success_holds_on_every_rule_it_breaks() {
        let p = policy(
            "required: [lifecycle/first-result]\nsuccess_rate: 0.9\np90_budgets:\n  lifecycle/create-to-first-result: 5s\n  lifecycle/step:build: 1m\n  lifecycle/step:restart: 1m\n",
        )
        .expect("parses");
        let verdicts = gate(&p, &seventy_percent(), None);
        assert_eq!(
            verdicts[0].reasons,
            [
                "required lifecycle/first-result did not pass in 3 of 10 repetition(s) (repetition 8: failed: expected `2`, got `3`)",
                "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
                "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
                "p90 of lifecycle/create-to-first-result is failed (7/10 ok), over its budget of 5s",
                "lifecycle/step:restart has a p90 budget of 1m and no measurements",
            ]
        );
        let loose = policy("success_rate: 0.7\np90_budgets:\n  lifecycle/step:build: 31s\n")
            .expect("parses");
        assert!(gate(&loose, &seventy_percent(), None)[0].ships());
    }

    #[test]
    fn leaks_and_secrets_always_hold() {
        let mut results = seventy_percent();
        results.scenarios[3].leaked_resources = vec![Resource {
            kind: "container".to_owned(),
            id: "9c2e41d07a5b".to_owned(),
        }];
        results.scenarios[5].secrets_found = vec!["REGISTRY_TOKEN at /etc/leak".to_owned()];
        let verdicts = gate(
            &policy("success_rate: 0\n").expect("parses"),
            &results,
            None,
        );
        assert_eq!(
            verdicts[0].reasons,
            [
                "lifecycle (repetition 4) leaked container `9c2e41d07a5b`",
                "lifecycle (repetition 6) found a secret: REGISTRY_TOKEN at /etc/leak",
            ]
        );
    }

    #[test]
    fn orphans_past_the_policy_rate_hold_and_a_live_run_without_an_audit_holds() {
        use crate::model::results::OrphanAudit;
        let strict = policy("max_orphans_per_1000: 5\n").expect("parses");
        let mut results = seventy_percent();
        // No audit: the run was interrupted, or never listed the inventory.
        let unaudited = gate(&strict, &results, None);
        assert!(
            unaudited[0].reasons[0].starts_with("no orphan audit for docker"),
            "{:?}",
            unaudited[0].reasons
        );
        results.orphans = vec![OrphanAudit {
            variant: "docker".to_owned(),
            creates: 100,
            before: Vec::new(),
            orphans: vec!["container 9c2e41d07a5b".to_owned()],
            swept: 1,
        }];
        // 1 in 100 is 10 per 1,000: over 5, within 10.
        assert_eq!(
            gate(&strict, &results, None)[0].reasons,
            [
                "1 orphans of 100 sandbox creates (10.0 per 1,000), over the most of 5: container 9c2e41d07a5b"
            ]
        );
        let loose = policy("max_orphans_per_1000: 10\n").expect("parses");
        assert!(gate(&loose, &results, None)[0].ships());
        let negative = policy("max_orphans_per_1000: -1\n").expect_err("negative");
        assert!(
            negative.to_string().contains("max_orphans_per_1000 is -1"),
            "{negative}"
        );
    }

    #[test]
    fn a_first_command_far_slower_than_the_second_holds_under_max_readiness_ratio() {
        use crate::model::results::{FIRST_COMMAND_SAMPLE, SECOND_COMMAND_SAMPLE, Sample};
        let policy_of = |most: &str| policy(&format!("max_readiness_ratio: {most}\n"));
        let strict = policy_of("5").expect("parses");
        let mut results = seventy_percent();
        assert_eq!(
            gate(&strict, &results, None)[0].reasons,
            [
                "no launch answered its first and second command: max_readiness_ratio needs a \
              sequential, staggered or burst step whose launches answered"
            ]
        );
        // Three launches: 12×, 8× and 2× their second command; the median is 8×.
        let sample = |name: &str, ms: u64| Sample {
            name: name.to_owned(),
            value: Some(Duration::from_millis(ms)),
            error: None,
        };
        results.scenarios[0].samples = [(1_200, 100), (800, 100), (200, 100)]
            .iter()
            .flat_map(|&(first, second)| {
                [
                    sample(FIRST_COMMAND_SAMPLE, first),
                    sample(SECOND_COMMAND_SAMPLE, second),
                ]
            })
            .collect();
        assert_eq!(
            gate(&strict, &results, None)[0].reasons,
            [
                "readiness: the first command took ×8.0 the second (median of 3 launches; worst ×12.0), over the most of ×5: \"ready\" is not ready"
            ]
        );
        let loose = policy_of("10").expect("parses");
        assert!(gate(&loose, &results, None)[0].ships());
        let below_one = policy_of("0.5").expect_err("below 1");
        assert!(
            below_one.to_string().contains("max_readiness_ratio is 0.5"),
            "{below_one}"
        );
    }

    #[test]
    fn a_partial_secrets_scan_holds_unless_the_policy_ships_it() {
        let mut results = seventy_percent();
        results.scenarios[2].secrets_scan = Some(crate::model::results::ScanCoverage {
            scanner: "the Python probe".to_owned(),
            files_scanned: 5120,
            unreadable: 8,
            uid: 1000,
        });
        let said = "lifecycle (repetition 3) scanned for secrets partial (uid 1000, 8 unreadable): a secret readable only by root would not be seen";
        let held = gate(
            &policy("success_rate: 0\n").expect("parses"),
            &results,
            None,
        );
        assert_eq!(
            held[0].reasons,
            [format!("{said} (ship_partial_scans: true ships it)")]
        );
        let shipping = policy("success_rate: 0\nship_partial_scans: true\n").expect("parses");
        let shipped = gate(&shipping, &results, None);
        assert!(shipped[0].ships(), "{shipped:?}");
        assert_eq!(
            shipped[0].notes,
            [format!("{said}; shipped (ship_partial_scans: true)")]
        );
    }

    #[test]
    fn a_named_variant_without_results_holds() {
        let p = policy("variants: [docker, e2b]\nsuccess_rate: 0\n").expect("parses");
        let verdicts = gate(&p, &seventy_percent(), None);
        assert!(verdicts[0].ships());
        assert_eq!(verdicts[1].variant, "e2b");
        assert_eq!(
            verdicts[1].reasons,
            ["the policy requires it and the results have none"]
        );
        assert_eq!(
            render(&verdicts),
            "docker: ship\ne2b: hold (1 reason)\n  - the policy requires it and the results have none\n"
        );
    }

    #[test]
    fn regressions_hold_beyond_noise_and_tolerance() {
        let slower = |factor: f64| {
            let mut results = lifecycle(0);
            for s in &mut results.scenarios {
                for t in &mut s.timings {
                    t.duration = t.duration.mul_f64(factor);
                }
            }
            results
        };
        let p = policy("regression:\n  tolerance: 0.25\n").expect("parses");
        let verdicts = gate(&p, &slower(2.0), Some(&lifecycle(0)));
        assert_eq!(verdicts[0].reasons.len(), 1, "{verdicts:?}");
        assert!(
            verdicts[0].reasons[0]
                == ("lifecycle/create-to-first-result is slower than the baseline beyond noise: p50 1.40 s → 2.80 s (×2.00, U test p<0.001), over the tolerance of +25%"),
            "{verdicts:?}"
        );
        assert!(gate(&p, &slower(1.2), Some(&lifecycle(0)))[0].ships());
        let diluted = gate(&p, &slower(2.0), Some(&lifecycle(3)));
        assert!(
            diluted[0].ships(),
            "three failures a side (tied at +∞) leave the doubling within noise"
        );
        let unchecked = gate(&p, &slower(2.0), None);
        assert!(unchecked[0].ships());
        assert_eq!(
            unchecked[0].notes,
            ["regression not checked: no --baseline"]
        );
    }

    /// `results` with every scenario result replayed at instant pace.
    fn replayed(mut results: RunResults) -> RunResults {
        for s in &mut results.scenarios {
            s.source = replay_source(ReplayPace::Instant);
        }
        results
    }

    #[test]
    fn a_variant_with_replays_alone_holds_unless_the_policy_allows_replay() {
        let rules = "required:\n  - lifecycle/*\n";
        let replay = replayed(lifecycle(0));
        let strict = policy(rules).expect("parses");
        let verdicts = gate(&strict, &replay, None);
        assert_eq!(
            verdicts[0].reasons,
            [
                "no live result for docker: its 10 scenario result(s) are replayed from cassettes, which show only that the client still speaks the recorded protocol (allow_replay: true judges them)"
            ]
        );
        assert_eq!(
            render(&verdicts).lines().next(),
            Some("docker: hold (1 reason)")
        );

        let allowing = policy(&format!("{rules}allow_replay: true\n")).expect("parses");
        assert!(allowing.allow_replay);
        let verdicts = gate(&allowing, &replay, Some(&replay));
        assert!(
            verdicts[0].ships() && verdicts[0].replay_only,
            "{verdicts:?}"
        );
        assert_eq!(render(&verdicts), "docker: ship (replay only)\n");

        // Allowed, replays meet every rule: the floor, budgets, the regression rule.
        let floor = policy("success_rate: 0.9\nallow_replay: true\n").expect("parses");
        assert_eq!(
            gate(&floor, &replayed(seventy_percent()), None)[0].reasons,
            [
                "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
                "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
            ]
        );
        let tight = policy(
            "p90_budgets:\n  lifecycle/create-to-first-result: 1s\nregression:\n  tolerance: 0.25\nallow_replay: true\n",
        )
        .expect("parses");
        let verdicts = gate(&tight, &replay, Some(&lifecycle(0)));
        assert_eq!(
            verdicts[0].reasons,
            ["p90 of lifecycle/create-to-first-result is 1.80 s (10/10 ok), over its budget of 1s"]
        );
        assert!(
            verdicts[0].notes[0].starts_with(
                "regression not checked: cannot compare docker × lifecycle × step:build: it is live in the baseline and replay at instant pace in the current run"
            ),
            "{verdicts:?}"
        );

        // The key it replaced is refused where it stands, saying what replaced it.
        let old = policy("success_rate: 0.5\nallow_replayed_timings: true\n")
            .expect_err("the old key is refused");
        assert!(
            old.starts_with("policy.yaml:2:") && old.contains("is now `allow_replay`"),
            "{old}"
        );
    }

    /// `results` as e2b's, every scenario result run against sandbox-matrix's e2b emulator.
    fn emulated(mut results: RunResults) -> RunResults {
        for s in &mut results.scenarios {
            s.variant = "e2b".to_owned();
            s.source = crate::report::fixture::emulated_source();
        }
        results
    }

    #[test]
    fn a_variant_with_emulated_results_alone_holds_unless_the_policy_allows_emulated() {
        let rules = "required:\n  - lifecycle/*\n";
        let only = emulated(lifecycle(0));
        let held = "no live result for e2b: its 10 scenario result(s) ran against sandbox-matrix's emulator, not the provider (allow_emulated: true judges them)";
        let strict = policy(rules).expect("parses");
        assert!(!strict.allow_emulated);
        let verdicts = gate(&strict, &only, None);
        assert_eq!(verdicts[0].reasons, [held]);
        assert_eq!(
            render(&verdicts),
            format!("e2b: hold (1 reason)\n  - {held}\n")
        );

        // allow_replay does not cover emulated results.
        let replays = policy(&format!("{rules}allow_replay: true\n")).expect("parses");
        let verdicts = gate(&replays, &only, None);
        assert_eq!(verdicts[0].reasons, [held]);
        assert!(!verdicts[0].ships());

        let allowing = policy(&format!("{rules}allow_emulated: true\n")).expect("parses");
        assert!(allowing.allow_emulated && !allowing.allow_replay);
        let verdicts = gate(&allowing, &only, Some(&only));
        assert!(
            verdicts[0].ships() && verdicts[0].emulated_only && !verdicts[0].replay_only,
            "{verdicts:?}"
        );
        assert_eq!(render(&verdicts), "e2b: ship (emulated only)\n");

        // Allowed, emulated results meet every rule.
        let floor = policy("success_rate: 0.9\nallow_emulated: true\n").expect("parses");
        let verdicts = gate(&floor, &emulated(seventy_percent()), None);
        assert_eq!(
            verdicts[0].reasons,
            [
                "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
                "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
            ]
        );
        assert_eq!(
            render(&verdicts).lines().next(),
            Some("e2b: hold (2 reasons)")
        );
    }

    #[test]
    fn emulated_results_of_a_live_variant_are_left_out_with_a_note() {
        let budget =
            policy("p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\n").expect("parses");
        // Emulated repetitions over the budget do not count against the live ones.
        let mut merged = emulated(lifecycle(0));
        for s in &mut merged.scenarios {
            s.timings[0].duration *= 10;
        }
        merged.scenarios.extend(
            emulated(lifecycle(0))
                .scenarios
                .into_iter()
                .take(4)
                .map(|s| ScenarioResult {
                    source: crate::model::results::Source::Live,
                    ..s
                }),
        );
        let verdicts = gate(&budget, &merged, None);
        assert!(
            verdicts[0].ships() && !verdicts[0].emulated_only,
            "{verdicts:?}"
        );
        assert_eq!(
            verdicts[0].notes,
            [
                "10 emulated scenario result(s) not judged: they ran against sandbox-matrix's emulator, not the provider; only live results are"
            ]
        );
        assert_eq!(render(&verdicts).lines().next(), Some("e2b: ship"));
        // Judged, the emulated repetitions hold it.
        let judging = policy(
            "p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\nallow_emulated: true\n",
        )
        .expect("parses");
        let verdicts = gate(&judging, &merged, None);
        assert_eq!(
            verdicts[0].reasons,
            [
                "p90 of lifecycle/create-to-first-result is 18.01 s (10/10 ok), over its budget of 1s 500ms"
            ]
        );
    }

    #[test]
    fn replayed_and_emulated_results_without_a_live_one_hold_on_both_counts() {
        let mut results = emulated(lifecycle(0));
        for s in results.scenarios.iter_mut().take(4) {
            s.source = replay_source(ReplayPace::Instant);
        }
        let strict = policy("required:\n  - lifecycle/*\n").expect("parses");
        assert_eq!(
            gate(&strict, &results, None)[0].reasons,
            [
                "no live result for e2b: its 4 scenario result(s) are replayed from cassettes, which show only that the client still speaks the recorded protocol (allow_replay: true judges them); its 6 scenario result(s) ran against sandbox-matrix's emulator, not the provider (allow_emulated: true judges them)"
            ]
        );
        let replays = policy("required:\n  - lifecycle/*\nallow_replay: true\n").expect("parses");
        let verdicts = gate(&replays, &results, None);
        assert_eq!(
            verdicts[0].notes,
            [
                "6 emulated scenario result(s) not judged: they ran against sandbox-matrix's emulator, not the provider; only live and replayed results are"
            ]
        );
        assert_eq!(
            render(&verdicts).lines().next(),
            Some("e2b: ship (replay only)")
        );
        let both = policy("required:\n  - lifecycle/*\nallow_replay: true\nallow_emulated: true\n")
            .expect("parses");
        let verdicts = gate(&both, &results, None);
        assert!(verdicts[0].notes.is_empty(), "{verdicts:?}");
        assert_eq!(render(&verdicts), "e2b: ship (replay and emulated only)\n");
    }

    #[test]
    fn a_build_budget_judges_the_build_that_made_the_artifact_and_no_build_is_not_held() {
        // docker: burst built the artifact, lifecycle reused it.
        let burst = ScenarioResult {
            steps: vec![step("build", StepStatus::Passed, 40_000, 600, vec![], &[])],
            ..scenario("docker", "burst")
        };
        let mut reused = step(
            "build",
            skipped("reused image-id sha256:ab (built in burst)"),
            0,
            600,
            vec![],
            &[],
        );
        reused.reused = Some(crate::model::results::ReusedArtifact {
            artifact: "sha256:ab".to_owned(),
            built_in: "burst".to_owned(),
        });
        let lifecycle = ScenarioResult {
            steps: vec![reused],
            ..scenario("docker", "lifecycle")
        };
        // datalayer-runtimes launches an environment by name: it builds nothing.
        let by_name = ScenarioResult {
            steps: vec![step(
                "build",
                skipped("the variant launches an environment by name: nothing to build"),
                0,
                600,
                vec![],
                &[],
            )],
            ..scenario("datalayer-runtimes", "lifecycle")
        };
        let results = run(vec![burst, lifecycle, by_name]);

        let tight = policy("p90_budgets:\n  lifecycle/step:build: 30s\n").expect("parses");
        let verdicts = gate(&tight, &results, None);
        assert_eq!(
            verdicts[0].reasons,
            [
                "p90 of burst/step:build is 40.01 s (1/1 ok), over its budget of 30s (the build lifecycle/step:build asks of: lifecycle reused the artifact burst built)"
            ]
        );
        assert!(verdicts[1].ships(), "{verdicts:?}");
        assert_eq!(
            verdicts[1].notes,
            [
                "lifecycle/step:build not judged: datalayer-runtimes built nothing in this run (the variant launches an environment by name: nothing to build)"
            ]
        );
        let roomy = policy("p90_budgets:\n  lifecycle/step:build: 1m\n").expect("parses");
        assert!(gate(&roomy, &results, None).iter().all(Verdict::ships));
    }

    #[test]
    fn a_live_variant_is_judged_on_its_live_timings_only() {
        let budget =
            policy("p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\n").expect("parses");
        // Replayed repetitions, first and over the budget, do not count against the live ones.
        let mut merged = replayed(lifecycle(0));
        for s in &mut merged.scenarios {
            s.timings[0].duration *= 10;
        }
        merged
            .scenarios
            .extend(lifecycle(0).scenarios.into_iter().take(4));
        let verdicts = gate(&budget, &merged, None);
        assert!(
            verdicts[0].ships() && !verdicts[0].replay_only,
            "{verdicts:?}"
        );
        assert_eq!(
            verdicts[0].notes,
            ["10 replayed scenario result(s) not judged: only live results are"]
        );
    }
}
