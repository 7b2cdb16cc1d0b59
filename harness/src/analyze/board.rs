//! The public sandbox boards' figures for a `sequential`, `staggered` or `burst` step, so
//! that a nightly can sit beside a board: TTI percentiles with every failure as +∞,
//! the same percentiles over the successes trimmed at each end, the success rate, and the
//! board's 0–100 score ([`METHODOLOGY`] says whose formula, and when it was read).
//!
//! Percentiles use the nearest rank, as [`super::stats`] does: p is the ⌈p·n/100⌉-th
//! smallest attempt, failures sorted last.

use std::time::Duration;

use super::stats::Value;
use crate::model::results::{FIRST_COMMAND_SAMPLE, SECOND_COMMAND_SAMPLE, ScenarioResult};

/// The methodology the score follows, and when it was read.
pub const METHODOLOGY: &str = "computesdk/benchmarks' 2026 formula: TTI from the create to a \
trivial first command; 5% of the successes trimmed at each end; median, p95 and p99 each \
scored 100 × (1 − v / 10 s), clamped to [0, 100], and weighted 0.60, 0.25 and 0.15; the sum \
times the success rate (the ceiling and the multiplier as its METHODOLOGY.md read on \
2026-12-07 gives them, the trim and the weights as issue 42 gives them)";

/// The value at which a timing scores 0.
const CEILING: Duration = Duration::from_secs(10);
/// The share of the successes trimmed at each end.
const TRIM: f64 = 0.05;
/// The weights of the median, p95 and p99.
const WEIGHTS: [f64; 3] = [0.60, 0.25, 0.15];

/// Median, 95th and 99th percentile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// The median.
    pub p50: Value,
    /// The 95th percentile.
    pub p95: Value,
    /// The 99th percentile.
    pub p99: Value,
}

/// One mode's figures, as a board shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardFigures {
    /// Attempts, failed or not.
    pub n: usize,
    /// Attempts that measured a value.
    pub successes: usize,
    /// Over every attempt, each failure +∞.
    pub untrimmed: Percentiles,
    /// Over the successes, [`TRIM`] of them dropped at each end; `None` with no success.
    pub trimmed: Option<Percentiles>,
    /// The score, 0 to 100 ([`METHODOLOGY`]).
    pub score: f64,
}

impl BoardFigures {
    /// The figures of `attempts` (`None` is a failed attempt); `None` when there are none.
    pub fn of(attempts: &[Option<Duration>]) -> Option<Self> {
        if attempts.is_empty() {
            return None;
        }
        let mut successes: Vec<Duration> = attempts.iter().flatten().copied().collect();
        successes.sort();
        let n = attempts.len();
        let untrimmed = percentiles(&successes, n);
        let cut = (successes.len() as f64 * TRIM).floor() as usize;
        let kept = &successes[cut..successes.len() - cut];
        let trimmed = (!kept.is_empty()).then(|| percentiles(kept, kept.len()));
        let score = match trimmed {
            None => 0.0,
            Some(t) => {
                let timing: f64 = [t.p50, t.p95, t.p99]
                    .iter()
                    .zip(WEIGHTS)
                    .map(|(value, weight)| weight * value_score(*value))
                    .sum();
                timing * successes.len() as f64 / n as f64
            }
        };
        Some(Self {
            n,
            successes: successes.len(),
            untrimmed,
            trimmed,
            score,
        })
    }
}

/// `100 × (1 − v / 10 s)`, clamped to [0, 100]; a failure scores 0.
fn value_score(value: Value) -> f64 {
    match value {
        Value::Measured(v) => {
            (100.0 * (1.0 - v.as_secs_f64() / CEILING.as_secs_f64())).clamp(0.0, 100.0)
        }
        Value::Failed => 0.0,
    }
}

/// Nearest-rank percentiles of `n` attempts of which `sorted` are the successes.
fn percentiles(sorted: &[Duration], n: usize) -> Percentiles {
    let at = |percent: usize| {
        let rank = (percent * n).div_ceil(100).max(1);
        sorted
            .get(rank - 1)
            .map_or(Value::Failed, |v| Value::Measured(*v))
    };
    Percentiles {
        p50: at(50),
        p95: at(95),
        p99: at(99),
    }
}

/// Readiness: each launch's first command over its second, as the launch modes record
/// them, across `scenarios`.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// The median ratio.
    pub median: f64,
    /// The largest ratio.
    pub worst: f64,
    /// How many launches answered both commands.
    pub launches: usize,
}

/// The readiness of the launches in `scenarios`; `None` when no launch answered both
/// commands (no launch mode ran, or every launch failed before its second command).
pub fn readiness(scenarios: &[&ScenarioResult]) -> Option<Readiness> {
    let mut ratios: Vec<f64> = Vec::new();
    for scenario in scenarios {
        let of = |name: &str| {
            scenario
                .samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.value)
                .collect::<Vec<_>>()
        };
        for (first, second) in of(FIRST_COMMAND_SAMPLE)
            .into_iter()
            .zip(of(SECOND_COMMAND_SAMPLE))
        {
            if let (Some(first), Some(second)) = (first, second)
                && !second.is_zero()
            {
                ratios.push(first.as_secs_f64() / second.as_secs_f64());
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    Some(Readiness {
        median: *ratios.get((ratios.len().checked_sub(1)?) / 2)?,
        worst: *ratios.last()?,
        launches: ratios.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Option<Duration>> {
        values
            .iter()
            .map(|v| Some(Duration::from_millis(*v)))
            .collect()
    }

    #[test]
    fn a_uniform_run_scores_by_the_formula() {
        // 100 launches all at 2 s: every percentile is 2 s, each scores 80, the weights sum
        // to 1 and every launch succeeded.
        let figures = BoardFigures::of(&ms(&[2_000; 100])).unwrap();
        assert!((figures.score - 80.0).abs() < 1e-9, "{figures:?}");
        assert_eq!(figures.successes, 100);
    }

    #[test]
    fn trimming_drops_five_percent_at_each_end_and_failures_stay_in_the_untrimmed() {
        // 1..=100 ms, then 5 failures: 105 attempts.
        let mut attempts = ms(&(1..=100).collect::<Vec<_>>());
        attempts.extend([None; 5]);
        let figures = BoardFigures::of(&attempts).unwrap();
        // Untrimmed, over 105: the 100th smallest (p95: ⌈99.75⌉) is 100 ms, p99's rank 104
        // is a failure.
        assert_eq!(
            figures.untrimmed.p95,
            Value::Measured(Duration::from_millis(100))
        );
        assert_eq!(figures.untrimmed.p99, Value::Failed);
        // Trimmed: 5 of the 100 successes dropped at each end leaves 6..=95 ms; its median
        // is the 45th of 90 (50 ms), its p95 the 86th (91 ms), its p99 the 90th (95 ms).
        let trimmed = figures.trimmed.unwrap();
        assert_eq!(trimmed.p50, Value::Measured(Duration::from_millis(50)));
        assert_eq!(trimmed.p95, Value::Measured(Duration::from_millis(91)));
        assert_eq!(trimmed.p99, Value::Measured(Duration::from_millis(95)));
        // 0.6·99.5 + 0.25·99.09 + 0.15·99.05 = 99.3325, times 100/105.
        let expected = (0.6 * 99.5 + 0.25 * 99.09 + 0.15 * 99.05) * 100.0 / 105.0;
        assert!((figures.score - expected).abs() < 1e-9, "{figures:?}");
    }

    #[test]
    fn slow_or_failed_runs_score_zero_not_below() {
        let slow = BoardFigures::of(&ms(&[30_000; 10])).unwrap();
        assert_eq!(slow.score, 0.0);
        let failed = BoardFigures::of(&[None, None]).unwrap();
        assert_eq!(failed.score, 0.0);
        assert!(failed.trimmed.is_none());
        assert!(BoardFigures::of(&[]).is_none());
    }
}
