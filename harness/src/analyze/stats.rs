//! Summaries of repeated measurements (DESIGN.md §7): n, successes, p50/p90/p99, min and max,
//! with every failed attempt counted as +∞.
//!
//! Values go into an HDR histogram in microseconds with 3 significant digits, so every number
//! read back is the upper end of its bucket: at most 0.1% above what was measured, never
//! below it. Percentiles use the nearest rank: p is the ⌈p·n/100⌉-th smallest attempt, with
//! the failures sorted last; a rank that falls among the failures reads [`Value::Failed`].

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::model::results::{Class, Modes, ReplayPace, RunResults, ScenarioResult, StepStatus};

/// Significant decimal digits the histogram keeps.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Prefix of a metric that is a step's duration, such as `step:build`.
pub const STEP_PREFIX: &str = "step:";

/// A value read from a distribution: a measured span, or a failed attempt (+∞).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// A measured span.
    Measured(Duration),
    /// A failed attempt, which sorts after every measured span.
    Failed,
}

impl fmt::Display for Value {
    /// Seconds to two decimals, such as `6.30 s`, or `failed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Measured(d) => write!(f, "{:.2} s", d.as_secs_f64()),
            Value::Failed => f.write_str("failed"),
        }
    }
}

/// The summary of one metric's attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Attempts, failed or not.
    pub n: usize,
    /// Attempts that measured a value.
    pub successes: usize,
    /// Median.
    pub p50: Value,
    /// 90th percentile.
    pub p90: Value,
    /// 99th percentile.
    pub p99: Value,
    /// The smallest measured value; `None` when every attempt failed.
    pub min: Option<Duration>,
    /// The largest attempt: [`Value::Failed`] when any attempt failed.
    pub max: Value,
}

impl Summary {
    /// Summarizes `attempts`, where `None` is a failed attempt; `None` when there are none.
    pub fn of(attempts: &[Option<Duration>]) -> Option<Summary> {
        if attempts.is_empty() {
            return None;
        }
        let mut histogram = Histogram::<u64>::new(SIGNIFICANT_DIGITS)
            .expect("3 significant digits is a valid histogram precision");
        for value in attempts.iter().flatten() {
            histogram
                .record(micros(*value))
                .expect("an auto-resizing histogram records any u64");
        }
        let n = attempts.len();
        let successes = attempts.iter().flatten().count();
        let at = |percent: usize| value_at_rank(&histogram, successes, rank(percent, n));
        Some(Summary {
            n,
            successes,
            p50: at(50),
            p90: at(90),
            p99: at(99),
            min: match value_at_rank(&histogram, successes, 1) {
                Value::Measured(d) => Some(d),
                Value::Failed => None,
            },
            max: value_at_rank(&histogram, successes, n),
        })
    }

    /// The share of attempts that succeeded, from 0 to 1.
    pub fn success_rate(&self) -> f64 {
        self.successes as f64 / self.n as f64
    }
}

/// The nearest rank of percentile `percent` among `n` attempts: ⌈percent·n/100⌉, at least 1.
fn rank(percent: usize, n: usize) -> usize {
    (percent * n).div_ceil(100).max(1)
}

/// The `rank`-th smallest attempt (from 1) when the histogram holds the `successes` and the
/// failures sort after them.
fn value_at_rank(histogram: &Histogram<u64>, successes: usize, rank: usize) -> Value {
    if rank > successes {
        return Value::Failed;
    }
    let mut seen = 0;
    for bucket in histogram.iter_recorded() {
        seen += bucket.count_at_value() as usize;
        if seen >= rank {
            let upper = histogram.highest_equivalent(bucket.value_iterated_to());
            return Value::Measured(Duration::from_micros(upper));
        }
    }
    unreachable!("the histogram holds {successes} values and rank {rank} is among them")
}

/// `value` in whole microseconds, rounded to the nearest.
fn micros(value: Duration) -> u64 {
    u64::try_from((value.as_nanos() + 500) / 1_000).unwrap_or(u64::MAX)
}

/// Every attempt at one metric of one variant × scenario, measured, replayed or emulated.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Variant name.
    pub variant: String,
    /// Scenario name.
    pub scenario: String,
    /// A cross-step timing or sample name, or `step:<name>` for a step's duration.
    pub name: String,
    /// How the attempts were obtained: measured (live, record), replayed or emulated, never
    /// two of these.
    pub modes: Modes,
    /// The pace of the replay, when the attempts were replayed (all at one pace).
    pub pace: Option<ReplayPace>,
    /// Each attempt's value; `None` is a failed attempt.
    pub attempts: Vec<Option<Duration>>,
}

impl Metric {
    /// The summary of the attempts (there is always at least one).
    pub fn summary(&self) -> Summary {
        Summary::of(&self.attempts).expect("a metric has at least one attempt")
    }
}

/// Every metric of `results`, grouped by variant × scenario in order of first appearance,
/// each group's repetitions pooled; a group's measured repetitions, its replays at each
/// pace and its emulated repetitions are separate groups, so that replayed or emulated
/// timings never mix with measured ones, nor instant-pace ones with recorded-pace ones.
///
/// A group's metrics are, in order: `step:<name>` for each step that passed or failed in
/// some repetition (a repetition where it did not pass has a failed attempt), then each name
/// recorded as a cross-step timing or a sample. For those, a repetition contributes its
/// timing and its samples of that name, or one failed attempt when it recorded neither.
pub fn metrics(results: &RunResults) -> Vec<Metric> {
    // Measured repetitions are one group, replayed ones one group per pace, emulated ones
    // one group.
    type Key<'a> = (&'a str, &'a str, Class, Option<ReplayPace>);
    let mut groups: Vec<(Key, Vec<&ScenarioResult>)> = Vec::new();
    for result in &results.scenarios {
        let key = (
            result.variant.as_str(),
            result.scenario.as_str(),
            result.source.class(),
            result.source.pace(),
        );
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, reps)) => reps.push(result),
            None => groups.push((key, vec![result])),
        }
    }
    let mut metrics = Vec::new();
    for ((variant, scenario, _, pace), reps) in groups {
        let modes = Modes::of(reps.iter().map(|rep| &rep.source));
        let mut names: Vec<String> = Vec::new();
        let mut named: Vec<String> = Vec::new();
        for rep in &reps {
            for step in &rep.steps {
                let name = format!("{STEP_PREFIX}{}", step.step);
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            let recorded = rep.timings.iter().map(|t| &t.name);
            for name in recorded.chain(rep.samples.iter().map(|s| &s.name)) {
                if !named.contains(name) {
                    named.push(name.clone());
                }
            }
        }
        names.extend(named);
        for name in names {
            let attempts = attempts(&reps, &name);
            if !attempts.is_empty() {
                metrics.push(Metric {
                    variant: variant.to_owned(),
                    scenario: scenario.to_owned(),
                    name,
                    modes: modes.clone(),
                    pace,
                    attempts,
                });
            }
        }
    }
    metrics
}

/// The attempts at `metric` over `reps`, the repetitions of one variant × scenario, as
/// [`metrics`] counts them; empty when no repetition measured it (a step that never ran).
pub fn attempts(reps: &[&ScenarioResult], metric: &str) -> Vec<Option<Duration>> {
    if let Some(step) = metric.strip_prefix(STEP_PREFIX) {
        // A build that reused an earlier scenario's artifact timed no build: not an attempt.
        let reps: Vec<&ScenarioResult> = reps
            .iter()
            .filter(|rep| rep.step(step).is_none_or(|s| s.reused.is_none()))
            .copied()
            .collect();
        let ran = reps.iter().any(|rep| {
            rep.step(step)
                .is_some_and(|s| !matches!(s.status, StepStatus::Skipped { .. }))
        });
        if !ran {
            return Vec::new();
        }
        return reps
            .iter()
            .map(|rep| {
                rep.step(step)
                    .filter(|s| s.status == StepStatus::Passed)
                    .map(|s| s.duration)
            })
            .collect();
    }
    let recorded = |rep: &ScenarioResult| {
        rep.timing(metric).is_some() || rep.samples.iter().any(|s| s.name == metric)
    };
    if !reps.iter().any(|rep| recorded(rep)) {
        return Vec::new();
    }
    let mut attempts = Vec::new();
    for rep in reps {
        if !recorded(rep) {
            attempts.push(None);
            continue;
        }
        attempts.extend(rep.timing(metric).map(|t| Some(t.duration)));
        attempts.extend(
            rep.samples
                .iter()
                .filter(|s| s.name == metric)
                .map(|s| s.value),
        );
    }
    attempts
}

#[cfg(test)]
mod tests {
    use sandbox_providers::Timing;

    use super::*;
    use crate::model::results::{Provenance, RESULTS_SCHEMA_VERSION, Sample, StepResult};

    fn ms(ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(ms))
    }

    /// Microseconds: values under 2048 µs are exact in a 3-digit histogram.
    fn us(us: u64) -> Option<Duration> {
        Some(Duration::from_micros(us))
    }

    fn at(us: u64) -> Value {
        Value::Measured(Duration::from_micros(us))
    }

    #[test]
    fn one_attempt_is_every_percentile() {
        let s = Summary::of(&[us(1_500)]).unwrap();
        assert_eq!((s.n, s.successes), (1, 1));
        assert_eq!([s.p50, s.p90, s.p99, s.max], [at(1_500); 4]);
        assert_eq!(s.min, Some(Duration::from_micros(1_500)));
        assert_eq!(s.success_rate(), 1.0);

        let failed = Summary::of(&[None]).unwrap();
        assert_eq!([failed.p50, failed.max], [Value::Failed; 2]);
        assert_eq!(failed.min, None);
    }

    #[test]
    fn nothing_to_summarize_is_none() {
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn all_failed_reads_failed_everywhere() {
        let s = Summary::of(&[None, None, None]).unwrap();
        assert_eq!((s.n, s.successes, s.min), (3, 0, None));
        assert_eq!([s.p50, s.p90, s.p99, s.max], [Value::Failed; 4]);
        assert_eq!(s.success_rate(), 0.0);
    }

    #[test]
    fn seventy_percent_success_has_a_median_but_no_p90() {
        // Out of order on purpose: failures sort last whatever their position.
        let attempts = [
            None,
            us(700),
            us(100),
            None,
            us(400),
            us(200),
            us(600),
            None,
            us(300),
            us(500),
        ];
        let s = Summary::of(&attempts).unwrap();
        assert_eq!((s.n, s.successes), (10, 7));
        assert_eq!(s.p50, at(500), "the 5th of 10");
        assert_eq!(s.p90, Value::Failed, "the 9th of 10 is a failure");
        assert_eq!(s.p99, Value::Failed);
        assert_eq!(s.max, Value::Failed);
        assert_eq!(s.min, Some(Duration::from_micros(100)));
        assert_eq!(s.success_rate(), 0.7);
    }

    #[test]
    fn small_n_percentiles_use_the_nearest_rank() {
        let s = Summary::of(&[us(40), us(10), us(30), us(20)]).unwrap();
        assert_eq!(
            [s.p50, s.p90, s.p99, s.max],
            [at(20), at(40), at(40), at(40)]
        );
        let s = Summary::of(&[us(30), us(10), us(20)]).unwrap();
        assert_eq!([s.p50, s.p90], [at(20), at(30)], "⌈1.5⌉ = 2nd, ⌈2.7⌉ = 3rd");
        let ten: Vec<_> = (1..=10).map(|v| us(v * 100)).collect();
        let s = Summary::of(&ten).unwrap();
        assert_eq!([s.p50, s.p90, s.p99], [at(500), at(900), at(1_000)]);
        let hundred: Vec<_> = (1..=100).map(|v| us(v * 10)).collect();
        let s = Summary::of(&hundred).unwrap();
        assert_eq!([s.p50, s.p90, s.p99], [at(500), at(900), at(990)]);
        assert_eq!(s.min, Some(Duration::from_micros(10)));
    }

    #[test]
    fn large_values_round_up_by_at_most_a_thousandth() {
        let values = [6_300_123_u64, 1_000_000, 123_456_789];
        for v in values {
            let s = Summary::of(&[Some(Duration::from_micros(v))]).unwrap();
            let Value::Measured(read) = s.p50 else {
                panic!("{v} read as failed")
            };
            let read = read.as_micros() as u64;
            assert!(read >= v, "{read} < {v}");
            assert!(
                (read - v) * 1_000 <= v,
                "{read} is more than 0.1% above {v}"
            );
        }
    }

    #[test]
    fn values_display_in_seconds() {
        assert_eq!(at(6_304_000).to_string(), "6.30 s");
        assert_eq!(Value::Failed.to_string(), "failed");
    }

    fn step(name: &str, status: StepStatus, ms: u64) -> StepResult {
        StepResult {
            step: name.to_owned(),
            status,
            duration: Duration::from_millis(ms),
            started: None,
            budget: Duration::from_secs(60),
            timings: Vec::new(),
            log: Vec::new(),
            data: None,
            reused: None,
        }
    }

    fn rep(repetition: u32, steps: Vec<StepResult>, timing_ms: Option<u64>) -> ScenarioResult {
        ScenarioResult {
            variant: "docker".to_owned(),
            scenario: "lifecycle".to_owned(),
            source: crate::model::results::Source::Live,
            scenario_hash: "0".repeat(64),
            artifact_id: None,
            provider_version: None,
            region: None,
            capabilities: None,
            steps,
            timings: timing_ms
                .map(|ms| Timing {
                    name: "create-to-first-result".to_owned(),
                    duration: Duration::from_millis(ms),
                    resolution: None,
                })
                .into_iter()
                .collect(),
            leaked_resources: Vec::new(),
            secrets_found: Vec::new(),
            repetition,
            samples: Vec::new(),
            base_credential: None,
            secrets_scan: None,
            base_chain: None,
            lifetime: None,
        }
    }

    #[test]
    fn metrics_pool_repetitions_and_count_what_is_missing_as_failed() {
        let failed = || StepStatus::Failed {
            reason: "wrong".to_owned(),
        };
        let skipped = || StepStatus::Skipped {
            reason: "cannot".to_owned(),
        };
        let mut burst = rep(
            2,
            vec![
                step("first-result", failed(), 900),
                step("restart", skipped(), 0),
            ],
            None,
        );
        burst.samples = vec![
            Sample {
                name: "create-to-first-result".to_owned(),
                value: ms(2_000),
                error: None,
            },
            Sample {
                name: "create-to-first-result".to_owned(),
                value: None,
                error: Some("timed out".to_owned()),
            },
        ];
        let results = RunResults {
            schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
            provenance: Provenance {
                run_id: "r".to_owned(),
                harness_version: "0".to_owned(),
                host: "h".to_owned(),
                started_at: "2025-01-01T00:00:00Z".to_owned(),
                base: None,
                shards: Vec::new(),
                partition: None,
            },
            scenarios: vec![
                rep(
                    1,
                    vec![
                        step("first-result", StepStatus::Passed, 1_000),
                        step("restart", skipped(), 0),
                    ],
                    Some(1_200),
                ),
                burst,
                rep(
                    3,
                    vec![step("first-result", StepStatus::Passed, 1_100)],
                    None,
                ),
            ],
            orphans: Vec::new(),
        };
        let metrics = metrics(&results);
        let got: Vec<(&str, &[Option<Duration>])> = metrics
            .iter()
            .map(|m| (m.name.as_str(), m.attempts.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                ("step:first-result", &[ms(1_000), None, ms(1_100)][..]),
                (
                    "create-to-first-result",
                    &[ms(1_200), ms(2_000), None, None][..]
                ),
            ],
            "restart never ran, so it is no metric"
        );
        assert!(
            metrics
                .iter()
                .all(|m| m.variant == "docker" && m.scenario == "lifecycle")
        );
    }

    #[test]
    fn emulated_repetitions_are_never_pooled_with_live_ones() {
        let live = rep(
            1,
            vec![step("first-result", StepStatus::Passed, 1_000)],
            None,
        );
        let emulated = ScenarioResult {
            source: crate::report::fixture::emulated_source(),
            repetition: 2,
            ..rep(2, vec![step("first-result", StepStatus::Passed, 100)], None)
        };
        let results = crate::report::fixture::run(vec![live, emulated]);
        let got: Vec<(String, Vec<Option<Duration>>)> = metrics(&results)
            .into_iter()
            .map(|m| (m.modes.to_string(), m.attempts))
            .collect();
        assert_eq!(
            got,
            [
                ("live".to_owned(), vec![ms(1_000)]),
                ("emulated".to_owned(), vec![ms(100)]),
            ]
        );
    }
}
