//! Compares two runs metric by metric and tells a change from noise.
//!
//! The rule, for each variant × scenario × metric in both runs, with every failed attempt
//! counted as +∞ and the ratio taken between the medians (current / baseline):
//!
//! - With at least [`MIN_N_FOR_TEST`] attempts on each side, a two-sided Mann–Whitney U test
//!   (mid-ranks for ties; the exact permutation distribution up to [`EXACT_LIMIT`] attempts in
//!   all, the normal approximation with tie correction beyond) must give p < [`ALPHA`], and
//!   the ratio must be at least [`MIN_EFFECT`] (or at most its inverse). The test makes no
//!   assumption about the distribution's shape, which latencies with long tails and failures
//!   do not have; the minimum effect keeps a real but small shift (3%) from being flagged.
//!   With three attempts a side the smallest exact p is 0.1, so the test needs four.
//! - With fewer attempts, only a wide fixed band: the ratio must be at least
//!   [`SMALL_N_BAND`] (or at most its inverse) and the two ranges must not overlap.
//!
//! When both medians are failures the ratio is undefined and nothing is flagged: the success
//! rates beside the medians say what happened.
//!
//! A measured (live or recorded) metric is never compared with a replayed one: the replay's
//! timings are the cassette's, or the harness's own at instant pace. Nor are replays at
//! two paces compared: an instant-pace replay times the harness, a recorded-pace one the
//! recording. An instant-pace (or fixed-pace) replay shows no number: its medians read
//! `replayed` and it is not judged. An emulated metric (`run --emulated`, measured against
//! sandbox-matrix's emulator over the local engine) is compared only with an emulated one,
//! and judged as a measurement of the emulator.

use std::collections::BTreeSet;
use std::fmt;

use crate::analyze::stats::{Metric, Summary, Value, metrics};
use crate::model::results::{Modes, ReplayPace, RunResults};

/// Significance level of the U test.
pub const ALPHA: f64 = 0.05;
/// Attempts each side needs before the U test is used.
pub const MIN_N_FOR_TEST: usize = 4;
/// Smallest ratio of medians flagged when the U test is used.
pub const MIN_EFFECT: f64 = 1.10;
/// Smallest ratio of medians flagged with fewer attempts.
pub const SMALL_N_BAND: f64 = 2.0;
/// Most attempts in all for which the U test's exact distribution is enumerated.
pub const EXACT_LIMIT: usize = 60;

/// Whether a metric changed beyond noise, and which way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Slower (or failing more) beyond noise.
    Slower,
    /// Faster (or failing less) beyond noise.
    Faster,
    /// Within noise.
    None,
}

/// How a metric was judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Basis {
    /// The U test, with its two-sided p-value.
    UTest {
        /// The p-value.
        p: f64,
    },
    /// Too few attempts for the test: the fixed band.
    Band,
    /// Replayed at instant or fixed pace: the harness's own timing, not judged.
    HarnessTiming,
}

/// One metric in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Variant name.
    pub variant: String,
    /// Scenario name.
    pub scenario: String,
    /// Metric name, as [`crate::analyze::stats::metrics`] names it.
    pub metric: String,
    /// How both runs obtained it: measured, replayed or emulated.
    pub modes: Modes,
    /// The pace of both runs' replays, when it was replayed.
    pub pace: Option<ReplayPace>,
    /// The baseline's summary.
    pub baseline: Summary,
    /// The current run's summary.
    pub current: Summary,
    /// Current median / baseline median: +∞ when only the current median failed, 0 when
    /// only the baseline's did, `None` when both did.
    pub ratio: Option<f64>,
    /// How it was judged.
    pub basis: Basis,
    /// The verdict.
    pub change: Change,
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Metrics in both runs, in the current run's order.
    pub rows: Vec<Row>,
    /// `variant / scenario / metric` only the baseline has.
    pub only_baseline: Vec<String>,
    /// `variant / scenario / metric` only the current run has.
    pub only_current: Vec<String>,
}

/// How a run obtained a metric: its modes and, for replays, their paces.
#[derive(Debug, Clone, PartialEq)]
pub struct Obtained {
    /// Live, record, replay, emulated.
    pub modes: Modes,
    /// The paces of its replays.
    pub paces: BTreeSet<ReplayPace>,
}

impl fmt::Display for Obtained {
    /// `live`, `replay at instant pace`, `live+replay at instant and recorded pace`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.modes)?;
        if !self.paces.is_empty() {
            let paces: Vec<String> = self.paces.iter().map(ToString::to_string).collect();
            write!(f, " at {} pace", paces.join(" and "))?;
        }
        Ok(())
    }
}

/// A metric measured in one run and replayed or emulated in the other, or replayed at two
/// paces, which [`compare`] refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "cannot compare {variant} × {scenario} × {metric}: it is {baseline} in the baseline and {current} in the current run; {}",
    why_not(.baseline, .current)
)]
pub struct MixedModes {
    /// Variant name.
    pub variant: String,
    /// Scenario name.
    pub scenario: String,
    /// Metric name.
    pub metric: String,
    /// How the baseline obtained it.
    pub baseline: Box<Obtained>,
    /// How the current run obtained it.
    pub current: Box<Obtained>,
}

/// Why a metric obtained as `baseline` and as `current` cannot be compared.
fn why_not(baseline: &Obtained, current: &Obtained) -> &'static str {
    if baseline.modes.any_emulated() != current.modes.any_emulated() {
        "an emulated timing is of sandbox-matrix's emulator over the local engine, not a measurement of the provider (compare live with live, emulated with emulated)"
    } else {
        "a replayed timing is not a measurement of the provider, and replays at two paces are two measurements (compare live with live, replay with replay at one pace)"
    }
}

/// Whether `a` and `b` were obtained the same way: both measured, both emulated, or both
/// replayed at one pace.
fn same_class(a: &Metric, b: &Metric) -> bool {
    a.modes.any_replayed() == b.modes.any_replayed()
        && a.modes.any_emulated() == b.modes.any_emulated()
        && a.pace == b.pace
}

/// Compares every metric `baseline` and `current` share; refuses, naming the first, when a
/// metric is measured in one and replayed or emulated in the other.
pub fn compare(baseline: &RunResults, current: &RunResults) -> Result<Comparison, MixedModes> {
    let before = metrics(baseline);
    let now = metrics(current);
    let key = |m: &Metric| format!("{} / {} / {}", m.variant, m.scenario, m.name);
    let same_name = |a: &Metric, b: &Metric| {
        a.variant == b.variant && a.scenario == b.scenario && a.name == b.name
    };
    let obtained = |all: &[Metric], m: &Metric| -> Obtained {
        let same: Vec<&Metric> = all.iter().filter(|other| same_name(other, m)).collect();
        Obtained {
            modes: same.iter().flat_map(|other| other.modes.iter()).collect(),
            paces: same.iter().filter_map(|other| other.pace).collect(),
        }
    };
    for current in &now {
        if let Some(baseline) = before.iter().find(|b| same_name(b, current)) {
            let (b, c) = (obtained(&before, baseline), obtained(&now, current));
            let (bm, cm) = (&b.modes, &c.modes);
            if bm.any_replayed() != cm.any_replayed()
                || bm.any_measured() != cm.any_measured()
                || bm.any_emulated() != cm.any_emulated()
                || b.paces != c.paces
            {
                return Err(MixedModes {
                    variant: current.variant.clone(),
                    scenario: current.scenario.clone(),
                    metric: current.name.clone(),
                    baseline: Box::new(b),
                    current: Box::new(c),
                });
            }
        }
    }
    let same = |a: &Metric, b: &Metric| same_name(a, b) && same_class(a, b);
    let rows = now
        .iter()
        .filter_map(|current| {
            let baseline = before.iter().find(|b| same(b, current))?;
            Some(judge(baseline, current))
        })
        .collect();
    Ok(Comparison {
        rows,
        only_baseline: before
            .iter()
            .filter(|b| !now.iter().any(|c| same(b, c)))
            .map(key)
            .collect(),
        only_current: now
            .iter()
            .filter(|c| !before.iter().any(|b| same(b, c)))
            .map(key)
            .collect(),
    })
}

/// Judges one metric by the module's rule.
pub fn judge(baseline: &Metric, current: &Metric) -> Row {
    let (b, c) = (baseline.summary(), current.summary());
    let harness_timing = matches!(current.pace, Some(ReplayPace::Instant | ReplayPace::Fixed));
    let ratio = match (b.p50, c.p50) {
        // An instant-pace replay times the harness: no ratio is the provider's.
        _ if harness_timing => None,
        (Value::Measured(b), Value::Measured(c)) if b.is_zero() && c.is_zero() => Some(1.0),
        (Value::Measured(b), Value::Measured(c)) => Some(c.as_secs_f64() / b.as_secs_f64()),
        (Value::Measured(_), Value::Failed) => Some(f64::INFINITY),
        (Value::Failed, Value::Measured(_)) => Some(0.0),
        (Value::Failed, Value::Failed) => None,
    };
    let direction = |threshold: f64| match ratio {
        Some(r) if r >= threshold => Change::Slower,
        Some(r) if r <= 1.0 / threshold => Change::Faster,
        _ => Change::None,
    };
    let (basis, change) = if harness_timing {
        (Basis::HarnessTiming, Change::None)
    } else if b.n >= MIN_N_FOR_TEST && c.n >= MIN_N_FOR_TEST {
        let p = mann_whitney_p(&ranks_of(&baseline.attempts), &ranks_of(&current.attempts));
        let change = if p < ALPHA {
            direction(MIN_EFFECT)
        } else {
            Change::None
        };
        (Basis::UTest { p }, change)
    } else {
        let lowest = |m: &Metric| m.attempts.iter().map(|a| value(*a)).min();
        let highest = |m: &Metric| m.attempts.iter().map(|a| value(*a)).max();
        let change = match direction(SMALL_N_BAND) {
            Change::Slower if lowest(current) > highest(baseline) => Change::Slower,
            Change::Faster if highest(current) < lowest(baseline) => Change::Faster,
            _ => Change::None,
        };
        (Basis::Band, change)
    };
    Row {
        variant: current.variant.clone(),
        scenario: current.scenario.clone(),
        metric: current.name.clone(),
        modes: current.modes.clone(),
        pace: current.pace,
        baseline: b,
        current: c,
        ratio,
        basis,
        change,
    }
}

/// An attempt as a value that sorts failures last.
fn value(attempt: Option<std::time::Duration>) -> Value {
    attempt.map_or(Value::Failed, Value::Measured)
}

/// The attempts as sortable values.
fn ranks_of(attempts: &[Option<std::time::Duration>]) -> Vec<Value> {
    attempts.iter().map(|a| value(*a)).collect()
}

/// The two-sided p-value of the Mann–Whitney U test of `a` against `b`, with mid-ranks for
/// ties: exact up to [`EXACT_LIMIT`] values in all, else the normal approximation with tie
/// and continuity corrections.
pub fn mann_whitney_p(a: &[Value], b: &[Value]) -> f64 {
    p_value(a, b, a.len() + b.len() <= EXACT_LIMIT)
}

/// The two-sided p-value of the U test, exact or by the normal approximation.
fn p_value(a: &[Value], b: &[Value], exact: bool) -> f64 {
    let n = a.len() + b.len();
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    // Doubled mid-ranks, so that ranks stay integers: a tie group over positions i..j
    // (1-based) has mid-rank (i + j) / 2, doubled i + j.
    let mut pooled: Vec<(Value, bool)> = a
        .iter()
        .map(|v| (*v, true))
        .chain(b.iter().map(|v| (*v, false)))
        .collect();
    pooled.sort_by_key(|(v, _)| *v);
    let mut doubled = Vec::with_capacity(n);
    let mut ties = Vec::new();
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        ties.push(j - i + 1);
        for _ in i..=j {
            doubled.push(i + j + 2);
        }
        i = j + 1;
    }
    let observed: usize = pooled
        .iter()
        .zip(&doubled)
        .filter(|((_, in_a), _)| *in_a)
        .map(|(_, r)| r)
        .sum();
    let k = a.len();
    // The doubled rank sum's mean is k(n + 1).
    let mean = k * (n + 1);
    let distance = observed.abs_diff(mean);
    if exact {
        exact_p(&doubled, k, mean, distance)
    } else {
        normal_p(a.len(), b.len(), &ties, distance)
    }
}

/// The share of the ways to choose `k` of the `doubled` ranks whose sum is at least
/// `distance` away from `mean`.
fn exact_p(doubled: &[usize], k: usize, mean: usize, distance: usize) -> f64 {
    let max_sum: usize = doubled.iter().sum();
    // ways[j][s]: the number of ways to choose j ranks summing to s.
    let mut ways = vec![vec![0u64; max_sum + 1]; k + 1];
    ways[0][0] = 1;
    for &rank in doubled {
        for j in (1..=k).rev() {
            for s in (rank..=max_sum).rev() {
                ways[j][s] += ways[j - 1][s - rank];
            }
        }
    }
    let total: u64 = ways[k].iter().sum();
    let extreme: u64 = ways[k]
        .iter()
        .enumerate()
        .filter(|(s, _)| s.abs_diff(mean) >= distance)
        .map(|(_, w)| w)
        .sum();
    extreme as f64 / total as f64
}

/// The normal approximation of the two-sided p-value, with tie and continuity corrections.
fn normal_p(n1: usize, n2: usize, ties: &[usize], doubled_distance: usize) -> f64 {
    let (n1, n2) = (n1 as f64, n2 as f64);
    let n = n1 + n2;
    let tie_term: f64 = ties
        .iter()
        .map(|&t| {
            let t = t as f64;
            t * t * t - t
        })
        .sum();
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 1.0;
    }
    let z = ((doubled_distance as f64 / 2.0) - 0.5).max(0.0) / variance.sqrt();
    erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function for x ≥ 0 (Numerical Recipes' erfcc, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.5 * x);
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    t * poly.exp()
}

impl fmt::Display for Change {
    /// `slower`, `faster` or `no change`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Change::Slower => "slower",
            Change::Faster => "faster",
            Change::None => "no change",
        })
    }
}

/// A ratio as `×1.03`, `×∞`, or `—` when undefined.
pub fn ratio_cell(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) if r.is_infinite() => "×∞".to_owned(),
        Some(r) => format!("×{r:.2}"),
        None => "—".to_owned(),
    }
}

/// How a row was judged, for a person: `U test p=0.008`, `U test p<0.001` or `n<4: ×2 band`.
pub fn basis_cell(basis: Basis) -> String {
    match basis {
        Basis::UTest { p } if p < 0.001 => "U test p<0.001".to_owned(),
        Basis::UTest { p } => format!("U test p={p:.3}"),
        Basis::Band => format!("n<{MIN_N_FOR_TEST}: ×{SMALL_N_BAND} band"),
        Basis::HarnessTiming => "instant pace: the harness's timing, not judged".to_owned(),
    }
}

/// A median with its success count, such as `6.30 s · 7/10 ok`; `replayed · 7/10 ok` for
/// a replay at instant or fixed pace, whose timings are the harness's own.
fn median_cell(summary: &Summary, pace: Option<ReplayPace>) -> String {
    let p50 = match pace {
        Some(ReplayPace::Instant | ReplayPace::Fixed) => "replayed".to_owned(),
        _ => summary.p50.to_string(),
    };
    format!("{p50} · {}/{} ok", summary.successes, summary.n)
}

/// Renders the comparison as markdown: a table of the shared metrics, then the metrics only
/// one run has.
pub fn render(comparison: &Comparison) -> String {
    let mut lines = vec![
        "| variant | scenario | metric | n | p50 baseline | p50 current | ratio | change | basis |"
            .to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for row in &comparison.rows {
        let change = match row.change {
            Change::None => row.change.to_string(),
            _ => format!("**{}**", row.change),
        };
        lines.push(format!(
            "| {} | {} | {} | {} → {} | {} | {} | {} | {} | {} |",
            cell(&variant_cell(row)),
            cell(&row.scenario),
            cell(&row.metric),
            row.baseline.n,
            row.current.n,
            median_cell(&row.baseline, row.pace),
            median_cell(&row.current, row.pace),
            ratio_cell(row.ratio),
            change,
            basis_cell(row.basis),
        ));
    }
    for (label, keys) in [
        ("Only in the baseline", &comparison.only_baseline),
        ("Only in the current run", &comparison.only_current),
    ] {
        if !keys.is_empty() {
            lines.push(String::new());
            lines.push(format!("{label}: {}.", keys.join(", ")));
        }
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The variant, followed by ` · replay (<pace>)` when its metric was replayed in both runs,
/// or ` · emulated` when it was measured against the emulator in both.
fn variant_cell(row: &Row) -> String {
    match row.pace {
        Some(pace) => format!("{} · {} ({pace})", row.variant, row.modes),
        None if row.modes.any_emulated() => format!("{} · {}", row.variant, row.modes),
        None => row.variant.clone(),
    }
}

/// `text` as a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', r"\|")
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::results::ScenarioResult;

    /// A metric of docker / lifecycle / create-to-first-result with `attempts`.
    pub(crate) fn metric(attempts: &[Option<f64>]) -> Metric {
        Metric {
            variant: "docker".to_owned(),
            scenario: "lifecycle".to_owned(),
            name: "create-to-first-result".to_owned(),
            modes: Modes::of([&crate::model::results::Source::Live]),
            pace: None,
            attempts: attempts
                .iter()
                .map(|a| a.map(Duration::from_secs_f64))
                .collect(),
        }
    }

    const BASE: [Option<f64>; 5] = [
        Some(1.000),
        Some(1.008),
        Some(0.992),
        Some(1.004),
        Some(0.996),
    ];

    fn scaled(by: f64) -> Vec<Option<f64>> {
        BASE.iter().map(|v| v.map(|v| v * by)).collect()
    }

    fn p_of(row: &Row) -> f64 {
        match row.basis {
            Basis::UTest { p } => p,
            other => panic!("judged by {other:?}"),
        }
    }

    #[test]
    fn a_two_fold_slowdown_at_n5_is_flagged() {
        let row = judge(&metric(&BASE), &metric(&scaled(2.0)));
        assert_eq!(row.change, Change::Slower);
        assert!((p_of(&row) - 2.0 / 252.0).abs() < 1e-12, "{}", p_of(&row));
        assert!((row.ratio.unwrap() - 2.0).abs() < 0.01);
        let back = judge(&metric(&scaled(2.0)), &metric(&BASE));
        assert_eq!(back.change, Change::Faster);
    }

    #[test]
    fn a_three_percent_shift_at_n5_is_not_flagged_though_significant() {
        let row = judge(&metric(&BASE), &metric(&scaled(1.03)));
        assert!(
            p_of(&row) < ALPHA,
            "the shift is clean, so the test sees it"
        );
        assert_eq!(
            row.change,
            Change::None,
            "but it is under the minimum effect"
        );
    }

    #[test]
    fn overlapping_samples_are_noise_even_with_a_large_median_ratio() {
        let baseline = metric(&[Some(1.0), Some(1.1), Some(5.0), Some(6.0), Some(0.9)]);
        let current = metric(&[Some(2.2), Some(0.8), Some(5.5), Some(1.0), Some(6.5)]);
        let row = judge(&baseline, &current);
        assert!(row.ratio.unwrap() >= 2.0);
        assert_eq!(row.change, Change::None);
        assert!(p_of(&row) > 0.5);
    }

    #[test]
    fn failures_count_as_infinitely_slow() {
        let row = judge(&metric(&BASE), &metric(&[None; 5]));
        assert_eq!(row.change, Change::Slower);
        assert_eq!(row.ratio, Some(f64::INFINITY));
        let mut mostly = scaled(1.0);
        mostly[1..].fill(None);
        let row = judge(&metric(&BASE), &metric(&mostly));
        assert_eq!(row.change, Change::Slower, "4 of 5 failed: {row:?}");
        let row = judge(&metric(&[None; 5]), &metric(&[None; 5]));
        assert_eq!((row.ratio, row.change), (None, Change::None));
        assert_eq!(p_of(&row), 1.0);
    }

    #[test]
    fn small_n_uses_only_the_wide_band() {
        let baseline = metric(&[Some(1.0), Some(1.1)]);
        let row = judge(&baseline, &metric(&[Some(1.6), Some(1.7)]));
        assert_eq!((row.basis, row.change), (Basis::Band, Change::None));
        let row = judge(&baseline, &metric(&[Some(2.5), Some(2.6)]));
        assert_eq!(row.change, Change::Slower);
        let row = judge(&baseline, &metric(&[Some(2.5), Some(0.5)]));
        assert_eq!(row.change, Change::None, "the ranges overlap");
        let row = judge(&metric(&[Some(3.0)]), &metric(&[Some(1.0)]));
        assert_eq!(row.change, Change::Faster);
        let row = judge(&metric(&[Some(1.0), None]), &metric(&[Some(3.0)]));
        assert_eq!(
            row.change,
            Change::None,
            "a failure in the baseline overlaps anything"
        );
    }

    #[test]
    fn exact_p_values_match_the_tables() {
        let v = |s: &[u64]| -> Vec<Value> {
            s.iter()
                .map(|ms| Value::Measured(Duration::from_millis(*ms)))
                .collect()
        };
        // Fully separated 4 vs 4: 2 / C(8,4).
        assert!((mann_whitney_p(&v(&[1, 2, 3, 4]), &v(&[5, 6, 7, 8])) - 2.0 / 70.0).abs() < 1e-12);
        // 3 vs 3 cannot go below 2 / C(6,3) = 0.1.
        assert!((mann_whitney_p(&v(&[1, 2, 3]), &v(&[4, 5, 6])) - 0.1).abs() < 1e-12);
        // Interleaved: the rank sum is at its mean.
        assert_eq!(mann_whitney_p(&v(&[1, 4, 5, 8]), &v(&[2, 3, 6, 7])), 1.0);
        // One swap from fully separated, 5 vs 5: U = 1, P(U ≤ 1) = 2/252, two-sided 4/252.
        let p = mann_whitney_p(&v(&[1, 2, 3, 4, 6]), &v(&[5, 7, 8, 9, 10]));
        assert!((p - 4.0 / 252.0).abs() < 1e-12, "{p}");
        // Everything tied.
        assert_eq!(mann_whitney_p(&v(&[1, 1, 1, 1]), &v(&[1, 1, 1, 1])), 1.0);
    }

    #[test]
    fn the_normal_approximation_agrees_with_the_exact_test_near_the_limit() {
        let v = |range: std::ops::Range<u64>| -> Vec<Value> {
            range
                .map(|ms| Value::Measured(Duration::from_millis(ms * 7 % 61)))
                .collect()
        };
        for (a, b) in [
            (v(0..30), v(30..60)),
            (v(0..25), v(20..55)),
            (v(0..20), v(40..60)),
        ] {
            let exact = p_value(&a, &b, true);
            let normal = p_value(&a, &b, false);
            assert!(
                (exact - normal).abs() < 0.01,
                "exact {exact}, normal {normal}"
            );
        }
        let many = |from: u64| -> Vec<Value> {
            (from..from + 40)
                .map(|ms| Value::Measured(Duration::from_millis(ms)))
                .collect()
        };
        let p = mann_whitney_p(&many(0), &many(100));
        assert!(p < 1e-10, "80 values use the normal approximation: {p}");
    }

    /// Five repetitions of docker / lifecycle: build takes `build_s`, and
    /// create-to-first-result `first_s`, each scaled by the spread of [`BASE`].
    fn five(build_s: f64, first_s: f64) -> RunResults {
        use crate::report::fixture::{run, scenario, step, timing};
        let scenarios = BASE
            .iter()
            .zip(1..)
            .map(|(spread, repetition)| {
                let spread = spread.expect("measured");
                ScenarioResult {
                    steps: vec![step(
                        "build",
                        crate::model::results::StepStatus::Passed,
                        (build_s * spread * 1_000.0) as u64,
                        600,
                        vec![],
                        &[],
                    )],
                    timings: vec![timing(
                        "create-to-first-result",
                        (first_s * spread * 1_000.0) as u64,
                        None,
                    )],
                    repetition,
                    ..scenario("docker", "lifecycle")
                }
            })
            .collect();
        run(scenarios)
    }

    #[test]
    fn compare_flags_a_doubling_and_not_three_percent_across_runs() {
        let comparison = compare(&five(60.0, 2.0), &five(61.8, 4.0)).expect("both live");
        let verdicts: Vec<(&str, usize, usize, Change)> = comparison
            .rows
            .iter()
            .map(|r| (r.metric.as_str(), r.baseline.n, r.current.n, r.change))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("step:build", 5, 5, Change::None),
                ("create-to-first-result", 5, 5, Change::Slower),
            ]
        );
        assert!(comparison.only_baseline.is_empty() && comparison.only_current.is_empty());
    }

    #[test]
    fn render_shows_medians_success_and_verdict() {
        let comparison = Comparison {
            rows: vec![judge(&metric(&BASE), &metric(&scaled(2.0)))],
            only_baseline: vec!["docker / lifecycle / step:restart".to_owned()],
            only_current: Vec::new(),
        };
        let text = render(&comparison);
        let row = text.lines().nth(2).expect("a row");
        assert_eq!(
            row,
            "| docker | lifecycle | create-to-first-result | 5 → 5 | 1.00 s · 5/5 ok | 2.00 s · 5/5 ok | ×2.00 | **slower** | U test p=0.008 |"
        );
        assert!(text.contains("Only in the baseline: docker / lifecycle / step:restart."));
        assert!(!text.contains("Only in the current run"));
    }

    /// [`five`] with every repetition replayed at `pace`.
    fn replayed(mut results: RunResults, pace: crate::model::results::ReplayPace) -> RunResults {
        for s in &mut results.scenarios {
            s.source = crate::report::fixture::replay_source(pace);
        }
        results
    }

    #[test]
    fn a_live_metric_is_never_compared_with_a_replayed_one() {
        use crate::model::results::ReplayPace;
        let live = five(60.0, 2.0);
        let replay = replayed(five(60.0, 2.0), ReplayPace::Instant);
        let refused = compare(&live, &replay).expect_err("live against replay");
        assert_eq!(
            refused.to_string(),
            "cannot compare docker × lifecycle × step:build: it is live in the baseline and replay at instant pace in the current run; a replayed timing is not a measurement of the provider, and replays at two paces are two measurements (compare live with live, replay with replay at one pace)"
        );
        let backwards = compare(&replay, &live).expect_err("replay against live");
        assert_eq!(
            (
                backwards.baseline.to_string(),
                backwards.current.to_string()
            ),
            ("replay at instant pace".to_owned(), "live".to_owned())
        );
        let mut merged = five(60.0, 2.0);
        merged.scenarios[4].source = crate::report::fixture::replay_source(ReplayPace::Instant);
        let mixed = compare(&live, &merged).expect_err("live against live+replay");
        assert_eq!(mixed.current.to_string(), "live+replay at instant pace");

        let recorded = replayed(five(60.0, 2.0), ReplayPace::Recorded);
        let paces = compare(&replay, &recorded).expect_err("instant against recorded pace");
        assert_eq!(
            (paces.baseline.to_string(), paces.current.to_string()),
            (
                "replay at instant pace".to_owned(),
                "replay at recorded pace".to_owned()
            )
        );
        let slower_recording = replayed(five(60.0, 4.0), ReplayPace::Recorded);
        let both = compare(&recorded, &slower_recording).expect("recorded against recorded");
        assert_eq!(both.rows.len(), 2);
        let text = render(&both);
        assert!(
            text.contains("| docker · replay (recorded) | lifecycle | create-to-first-result | 5 → 5 | 2.00 s · 5/5 ok | 4.00 s · 5/5 ok | ×2.00 | **slower** |"),
            "{text}"
        );
    }

    /// [`five`] with every repetition run against the e2b emulator.
    fn emulated(mut results: RunResults) -> RunResults {
        for s in &mut results.scenarios {
            s.source = crate::report::fixture::emulated_source();
        }
        results
    }

    #[test]
    fn an_emulated_metric_is_compared_only_with_an_emulated_one() {
        use crate::model::results::ReplayPace;
        let live = five(60.0, 2.0);
        let refused =
            compare(&live, &emulated(five(60.0, 2.0))).expect_err("live against emulated");
        assert_eq!(
            refused.to_string(),
            "cannot compare docker × lifecycle × step:build: it is live in the baseline and emulated in the current run; an emulated timing is of sandbox-matrix's emulator over the local engine, not a measurement of the provider (compare live with live, emulated with emulated)"
        );
        let replay = replayed(five(60.0, 2.0), ReplayPace::Recorded);
        let refused =
            compare(&emulated(five(60.0, 2.0)), &replay).expect_err("emulated against replay");
        assert_eq!(
            (refused.baseline.to_string(), refused.current.to_string()),
            ("emulated".to_owned(), "replay at recorded pace".to_owned())
        );
        let mut merged = five(60.0, 2.0);
        merged.scenarios[4].source = crate::report::fixture::emulated_source();
        let mixed = compare(&live, &merged).expect_err("live against live+emulated");
        assert_eq!(mixed.current.to_string(), "live+emulated");

        let both = compare(&emulated(five(60.0, 2.0)), &emulated(five(60.0, 4.0)))
            .expect("emulated against emulated");
        assert_eq!(both.rows.len(), 2);
        let text = render(&both);
        assert!(
            text.contains("| docker · emulated | lifecycle | create-to-first-result | 5 → 5 | 2.00 s · 5/5 ok | 4.00 s · 5/5 ok | ×2.00 | **slower** |"),
            "{text}"
        );
    }

    #[test]
    fn an_instant_pace_replay_shows_no_number_and_is_not_judged() {
        use crate::model::results::ReplayPace;
        let fast = replayed(five(60.0, 0.001), ReplayPace::Instant);
        let slow = replayed(five(60.0, 2.0), ReplayPace::Instant);
        let both = compare(&fast, &slow).expect("instant against instant");
        assert!(both.rows.iter().all(|row| row.change == Change::None
            && row.ratio.is_none()
            && row.basis == Basis::HarnessTiming));
        let text = render(&both);
        assert!(
            text.contains("| docker · replay (instant) | lifecycle | create-to-first-result | 5 → 5 | replayed · 5/5 ok | replayed · 5/5 ok | — | no change | instant pace: the harness's timing, not judged |"),
            "{text}"
        );
    }
}
