//! The page's SVG charts: a strip plot of every repetition per metric, and each metric's
//! trend over the history of runs, on linear or log scales.

use super::*;

/// A strip plot per scenario × metric: a row per variant, every attempt a dot.
pub(super) fn distributions(page: &mut String, results: &RunResults) {
    let metrics = stats::metrics(results);
    if metrics.is_empty() {
        return;
    }
    page.push_str("<h2>Distributions</h2>\n<p class=\"note\">Every attempt is a dot; the solid mark is p50, the dashed one p90. Failed attempts count as +∞ and sit in the failed column. A row marked <code>replay</code> timed the harness against a cassette, and one marked <code>emulated</code> sandbox-matrix's emulator over the local engine, not the provider.</p>\n");
    let mut scenario = None;
    for (key, rows) in by_scenario_metric(&metrics) {
        if scenario != Some(key.0) {
            scenario = Some(key.0);
            let _ = writeln!(page, "<h3>Scenario {}</h3>", esc(key.0));
        }
        strip_plot(page, key.1, &rows);
    }
}

/// The metrics grouped by scenario × metric name in order of first appearance.
#[allow(clippy::type_complexity)]
fn by_scenario_metric(metrics: &[stats::Metric]) -> Vec<((&str, &str), Vec<&stats::Metric>)> {
    let mut grouped: Vec<((&str, &str), Vec<&stats::Metric>)> = Vec::new();
    for metric in metrics {
        let key = (metric.scenario.as_str(), metric.name.as_str());
        match grouped.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push(metric),
            None => grouped.push((key, vec![metric])),
        }
    }
    // Keep a scenario's metrics together even when variants list them in different orders.
    let mut ordered: Vec<((&str, &str), Vec<&stats::Metric>)> = Vec::new();
    let scenarios: Vec<&str> = grouped.iter().fold(Vec::new(), |mut seen, (key, _)| {
        if !seen.contains(&key.0) {
            seen.push(key.0);
        }
        seen
    });
    for scenario in scenarios {
        ordered.extend(grouped.iter().filter(|(k, _)| k.0 == scenario).cloned());
    }
    ordered
}

/// What a metric's row or chart is called: `variant · mode`, so that a replayed series is
/// never read as the provider's, nor drawn with a measured one.
fn series_name(metric: &stats::Metric) -> String {
    format!("{} · {}", metric.variant, metric.modes)
}

const STRIP_WIDTH: f64 = 960.0;

const STRIP_LABEL_END: f64 = 140.0;

const STRIP_PLOT: (f64, f64) = (155.0, 575.0);

const STRIP_FAILED: f64 = 630.0;

const STRIP_TOP: f64 = 22.0;

const STRIP_ROW: f64 = 30.0;

const STRIP_AXIS: f64 = 32.0;

/// Right edges of the text columns: n, ok, p50, p90, p99.
const STRIP_COLUMNS: [(f64, &str); 5] = [
    (690.0, "n"),
    (740.0, "ok"),
    (810.0, "p50"),
    (880.0, "p90"),
    (950.0, "p99"),
];

fn strip_plot(page: &mut String, name: &str, rows: &[&stats::Metric]) {
    let summaries: Vec<Summary> = rows.iter().map(|m| m.summary()).collect();
    let marks = summaries.iter().flat_map(|s| [s.p50, s.p90]);
    let measured: Vec<f64> = rows
        .iter()
        .flat_map(|m| m.attempts.iter().flatten().copied())
        .chain(marks.filter_map(|v| match v {
            Value::Measured(d) => Some(d),
            Value::Failed => None,
        }))
        .map(ms)
        .collect();
    let scale = Scale::fit(&measured, STRIP_PLOT, 6);
    let height = STRIP_TOP + STRIP_ROW * rows.len() as f64 + STRIP_AXIS;
    let bottom = height - STRIP_AXIS;
    let _ = writeln!(
        page,
        "<h3><code>{}</code>{}</h3>",
        esc(name),
        if scale.log {
            " <span class=\"note\">(log scale)</span>"
        } else {
            ""
        }
    );
    let _ = writeln!(
        page,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{STRIP_WIDTH}\" height=\"{height}\" viewBox=\"0 0 {STRIP_WIDTH} {height}\" role=\"img\" aria-label=\"{}\">",
        esc(&format!("attempts at {name} per variant"))
    );
    let _ = writeln!(
        page,
        "<rect class=\"failzone\" x=\"{:.1}\" y=\"{STRIP_TOP}\" width=\"40\" height=\"{:.1}\"/>",
        STRIP_FAILED - 20.0,
        bottom - STRIP_TOP
    );
    for (tick, label) in scale.ticks() {
        let x = scale.x(tick);
        let _ = writeln!(
            page,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{STRIP_TOP}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            bottom + 15.0
        );
    }
    let _ = writeln!(
        page,
        "<line class=\"axis\" x1=\"{:.1}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>",
        STRIP_PLOT.0, STRIP_PLOT.1
    );
    let _ = writeln!(
        page,
        "<text class=\"failed\" x=\"{STRIP_FAILED}\" y=\"{:.1}\" text-anchor=\"middle\">failed</text>",
        bottom + 15.0
    );
    for (x, title) in STRIP_COLUMNS {
        let _ = writeln!(
            page,
            "<text x=\"{x}\" y=\"14\" text-anchor=\"end\" font-weight=\"bold\">{title}</text>"
        );
    }
    for (i, (metric, summary)) in rows.iter().zip(summaries).enumerate() {
        let y = STRIP_TOP + STRIP_ROW * (i as f64 + 0.5);
        let _ = writeln!(
            page,
            "<text x=\"{STRIP_LABEL_END}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            y + 4.0,
            esc(&series_name(metric))
        );
        let mut failed = 0;
        for (j, attempt) in metric.attempts.iter().enumerate() {
            let dy = jitter(j) * (STRIP_ROW - 12.0);
            match attempt {
                Some(d) => {
                    let _ = writeln!(
                        page,
                        "<circle class=\"dot\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"><title>{}</title></circle>",
                        scale.x(ms(*d)),
                        y + dy,
                        value_text(Value::Measured(*d))
                    );
                }
                None => {
                    let x = STRIP_FAILED + jitter(failed + 7) * 28.0;
                    failed += 1;
                    let _ = writeln!(
                        page,
                        "<path class=\"fail\" d=\"M{:.1} {:.1}l6 6m0 -6l-6 6\"><title>failed</title></path>",
                        x - 3.0,
                        y + dy - 3.0
                    );
                }
            }
        }
        for (value, class) in [(summary.p50, "p50"), (summary.p90, "p90")] {
            let x = match value {
                Value::Measured(d) => scale.x(ms(d)),
                Value::Failed => STRIP_FAILED,
            };
            let _ = writeln!(
                page,
                "<line class=\"{class}\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"><title>{class} {}</title></line>",
                y - STRIP_ROW / 2.0 + 2.0,
                y + STRIP_ROW / 2.0 - 2.0,
                value_text(value)
            );
        }
        let texts = [
            summary.n.to_string(),
            format!("{:.0}%", summary.success_rate() * 100.0),
            value_text(summary.p50),
            value_text(summary.p90),
            value_text(summary.p99),
        ];
        for ((x, _), text) in STRIP_COLUMNS.iter().zip(texts) {
            let class =
                if text == "failed" || (text.ends_with('%') && summary.successes < summary.n) {
                    " class=\"failed\""
                } else {
                    ""
                };
            let _ = writeln!(
                page,
                "<text{class} x=\"{x}\" y=\"{:.1}\" text-anchor=\"end\">{text}</text>",
                y + 4.0
            );
        }
    }
    page.push_str("</svg>\n");
}

const TREND_WIDTH: f64 = 310.0;

const TREND_HEIGHT: f64 = 150.0;

const TREND_X: (f64, f64) = (58.0, 300.0);

/// The plot's top (where failed values sit), its values' top, and its bottom.
const TREND_Y: (f64, f64, f64) = (22.0, 36.0, 112.0);

/// One run's summaries, keyed by variant, scenario and metric name.
type RunSummaries = HashMap<(String, String, String), Summary>;

/// For each scenario × metric, a small chart per variant of p50 and p90 across the runs.
pub(super) fn trends(page: &mut String, results: &RunResults, history: &History) {
    if history.runs.is_empty() {
        if !history.warnings.is_empty() {
            page.push_str("<h2>History</h2>\n");
            warnings(page, history);
        }
        return;
    }
    let runs: Vec<&RunResults> = history.runs.iter().chain([results]).collect();
    let summaries: Vec<RunSummaries> = runs
        .iter()
        .map(|run| {
            stats::metrics(run)
                .into_iter()
                .map(|m| {
                    let summary = m.summary();
                    ((series_name(&m), m.scenario, m.name), summary)
                })
                .collect()
        })
        .collect();
    // Scenario × metric keys and variants, in order of appearance: this run's first.
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut variants: Vec<String> = Vec::new();
    for run in runs.iter().rev() {
        for metric in stats::metrics(run) {
            let series = series_name(&metric);
            let key = (metric.scenario, metric.name);
            if !keys.contains(&key) {
                keys.push(key);
            }
            if !variants.contains(&series) {
                variants.push(series);
            }
        }
    }
    let mut scenarios: Vec<&str> = Vec::new();
    for (scenario, _) in &keys {
        if !scenarios.contains(&scenario.as_str()) {
            scenarios.push(scenario);
        }
    }
    let times: Option<Vec<f64>> = runs
        .iter()
        .map(|r| unix_seconds(&r.provenance.started_at))
        .collect();
    let xs: Vec<f64> = match times {
        Some(t) if t.last() > t.first() => t,
        _ => (0..runs.len()).map(|i| i as f64).collect(),
    };
    let x_of = |i: usize| {
        let (lo, hi) = (xs[0], xs[xs.len() - 1]);
        let share = if hi > lo {
            (xs[i] - lo) / (hi - lo)
        } else {
            0.5
        };
        TREND_X.0 + share * (TREND_X.1 - TREND_X.0)
    };
    let _ = writeln!(
        page,
        "<h2>History</h2>\n<p class=\"note\">p50 (solid) and p90 (dashed) of each metric in the last {} runs, this one last, by start time; a hollow red point is a run with failed attempts; a value at the top is a percentile that failed. Hover a point for its run.</p>",
        runs.len()
    );
    warnings(page, history);
    for scenario in scenarios {
        let _ = writeln!(page, "<h3>Scenario {}</h3>", esc(scenario));
        for (_, name) in keys.iter().filter(|(s, _)| s == scenario) {
            let series: Vec<(&str, Vec<Option<&Summary>>)> = variants
                .iter()
                .map(|variant| {
                    let key = (variant.clone(), scenario.to_owned(), name.clone());
                    (
                        variant.as_str(),
                        summaries.iter().map(|s| s.get(&key)).collect::<Vec<_>>(),
                    )
                })
                .filter(|(_, points)| points.iter().any(Option::is_some))
                .collect();
            let values: Vec<f64> = series
                .iter()
                .flat_map(|(_, points)| points.iter().flatten())
                .flat_map(|s| [s.p50, s.p90])
                .filter_map(|v| match v {
                    Value::Measured(d) => Some(ms(d)),
                    Value::Failed => None,
                })
                .collect();
            let scale = Scale::fit(&values, (TREND_Y.2, TREND_Y.1), 4);
            let _ = writeln!(
                page,
                "<p><code>{}</code>{}</p>\n<div class=\"multiples\">",
                esc(name),
                if scale.log {
                    " <span class=\"note\">(log scale)</span>"
                } else {
                    ""
                }
            );
            for (variant, points) in &series {
                trend_chart(page, variant, points, &runs, &scale, &x_of);
            }
            page.push_str("</div>\n");
        }
    }
}

fn trend_chart(
    page: &mut String,
    variant: &str,
    points: &[Option<&Summary>],
    runs: &[&RunResults],
    scale: &Scale,
    x_of: &dyn Fn(usize) -> f64,
) {
    let (failed_y, _, bottom) = TREND_Y;
    let _ = writeln!(
        page,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{TREND_WIDTH}\" height=\"{TREND_HEIGHT}\" viewBox=\"0 0 {TREND_WIDTH} {TREND_HEIGHT}\" role=\"img\" aria-label=\"{}\">",
        esc(&format!("{variant}: p50 and p90 across runs"))
    );
    let _ = writeln!(
        page,
        "<text x=\"{:.1}\" y=\"12\" font-weight=\"bold\">{}</text>",
        TREND_X.0,
        esc(variant)
    );
    let _ = writeln!(
        page,
        "<text class=\"failed\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">failed</text>",
        TREND_X.0 - 4.0,
        failed_y + 4.0
    );
    for (tick, label) in scale.ticks() {
        let y = scale.x(tick);
        let _ = writeln!(
            page,
            "<line class=\"grid\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            TREND_X.0,
            TREND_X.1,
            TREND_X.0 - 4.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        page,
        "<line class=\"axis\" x1=\"{:.1}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>",
        TREND_X.0, TREND_X.1
    );
    let first = &runs[0].provenance.started_at;
    let last = &runs[runs.len() - 1].provenance.started_at;
    let _ = writeln!(
        page,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"start\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
        TREND_X.0,
        bottom + 15.0,
        esc(&minute(first)),
        TREND_X.1,
        bottom + 15.0,
        esc(&minute(last))
    );
    let y_of = |value: Value| match value {
        Value::Measured(d) => scale.x(ms(d)),
        Value::Failed => failed_y,
    };
    for (class, pick) in [
        ("line90", (|s: &Summary| s.p90) as fn(&Summary) -> Value),
        ("line50", |s: &Summary| s.p50),
    ] {
        let coordinates: Vec<String> = points
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| format!("{:.1},{:.1}", x_of(i), y_of(pick(s)))))
            .collect();
        if coordinates.len() > 1 {
            let _ = writeln!(
                page,
                "<polyline class=\"{class}\" points=\"{}\"/>",
                coordinates.join(" ")
            );
        }
    }
    for (i, summary) in points.iter().enumerate() {
        let Some(s) = summary else { continue };
        let run = &runs[i].provenance;
        let class = if s.successes < s.n {
            "pt hasfail"
        } else {
            "pt"
        };
        let _ = writeln!(
            page,
            "<circle class=\"{class}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"><title>{}</title></circle>",
            x_of(i),
            y_of(s.p50),
            esc(&format!(
                "run {} ({}): p50 {}, p90 {}, {}/{} ok",
                run.run_id,
                run.started_at,
                value_text(s.p50),
                value_text(s.p90),
                s.successes,
                s.n
            ))
        );
    }
    page.push_str("</svg>\n");
}

/// An RFC 3339 time to the minute, such as `2025-11-29 12:13`, or as it is when it is shorter.
pub(super) fn minute(time: &str) -> String {
    time.get(..16).unwrap_or(time).replacen('T', " ", 1)
}

/// A map from milliseconds to a coordinate, linear or logarithmic.
pub(super) struct Scale {
    /// Whether the values are spaced by their logarithm.
    pub(super) log: bool,
    /// The domain in milliseconds.
    pub(super) domain: (f64, f64),
    /// The coordinates of the domain's ends.
    pub(super) range: (f64, f64),
    /// The linear ticks' step in milliseconds.
    pub(super) step: f64,
    /// The linear ticks' unit: its size in milliseconds and its name.
    pub(super) unit: (f64, &'static str),
    /// About how many ticks the axis has room for.
    pub(super) ticks: usize,
}

impl Scale {
    /// A scale for `values` (milliseconds) onto `range`: logarithmic when they are all
    /// above zero and span more than [`LOG_SCALE_SPAN`] times, else linear on round ticks.
    pub(super) fn fit(values: &[f64], range: (f64, f64), ticks: usize) -> Scale {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() {
            return Scale::linear(0.0, 1_000.0, range, ticks);
        }
        if lo > 0.0 && hi / lo > LOG_SCALE_SPAN {
            return Scale {
                log: true,
                domain: (lo / 1.25, hi * 1.25),
                range,
                step: 0.0,
                unit: (1.0, "ms"),
                ticks,
            };
        }
        // Differences under a few percent are within the histogram's rounding and the
        // clock's noise: the axis spans at least 4% of the largest value.
        let pad = ((hi - lo) * 0.08).max(hi * 0.02).max(1.0);
        Scale::linear((lo - pad).max(0.0), hi + pad, range, ticks)
    }

    /// A linear scale on round ticks, about `ticks` of them, that covers `lo` to `hi`.
    fn linear(lo: f64, hi: f64, range: (f64, f64), ticks: usize) -> Scale {
        let unit = unit_for(hi);
        let raw = (hi - lo) / ticks as f64 / unit.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .find(|n| n * magnitude >= raw)
            .unwrap_or(10.0);
        let step = nice * magnitude * unit.0;
        let domain = ((lo / step).floor() * step, (hi / step).ceil() * step);
        Scale {
            log: false,
            domain,
            range,
            step,
            unit,
            ticks,
        }
    }

    /// The coordinate of `value` milliseconds, kept within the range.
    pub(super) fn x(&self, value: f64) -> f64 {
        let (lo, hi) = self.domain;
        let value = value.clamp(lo, hi);
        let share = if self.log {
            (value.ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (value - lo) / (hi - lo)
        };
        self.range.0 + share * (self.range.1 - self.range.0)
    }

    /// Ticks in milliseconds with their labels.
    pub(super) fn ticks(&self) -> Vec<(f64, String)> {
        let (lo, hi) = self.domain;
        if !self.log {
            let count = ((hi - lo) / self.step).round() as i64;
            let step = self.step / self.unit.0;
            // As many decimals as the step has, so that neighbouring ticks read differently.
            let decimals = (0..6)
                .find(|d| {
                    let scaled = step * 10f64.powi(*d);
                    (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
                })
                .unwrap_or(6) as usize;
            return (0..=count)
                .map(|i| {
                    let tick = lo + self.step * i as f64;
                    let value = tick / self.unit.0;
                    (
                        tick,
                        format!("{} {}", trimmed(value, decimals), self.unit.1),
                    )
                })
                .collect();
        }
        let units = [(1.0, "ms"), (1_000.0, "s"), (60_000.0, "min")];
        let steps: [&[f64]; 3] = [
            &[
                0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0,
            ],
            &[1.0, 2.0, 5.0, 10.0, 20.0, 30.0],
            &[1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0],
        ];
        let mut ticks: Vec<(f64, String)> = units
            .iter()
            .zip(steps)
            .flat_map(|((size, name), steps)| {
                steps
                    .iter()
                    .map(move |step| (step * size, format!("{} {name}", trimmed(*step, 1))))
            })
            .filter(|(tick, _)| *tick >= lo && *tick <= hi)
            .collect();
        if ticks.len() > self.ticks {
            let every = ticks.len().div_ceil(self.ticks);
            ticks = ticks.into_iter().step_by(every).collect();
        }
        ticks
    }
}

/// The unit an axis reaching `ms` milliseconds is labelled in: its size in ms and its name.
fn unit_for(ms: f64) -> (f64, &'static str) {
    if ms < 1_000.0 {
        (1.0, "ms")
    } else if ms < 120_000.0 {
        (1_000.0, "s")
    } else {
        (60_000.0, "min")
    }
}

/// `value` with at most `decimals` decimals and no trailing zeros after the point.
fn trimmed(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A percentile or attempt as text with its unit: `412 ms`, `2.31 s`, `2.5 min` or `failed`.
pub(super) fn value_text(value: Value) -> String {
    match value {
        Value::Failed => "failed".to_owned(),
        Value::Measured(d) => {
            let ms = ms(d);
            if ms < 10.0 {
                format!("{ms:.1} ms")
            } else if ms < 1_000.0 {
                format!("{ms:.0} ms")
            } else if ms < 120_000.0 {
                format!("{:.2} s", ms / 1_000.0)
            } else {
                format!("{:.1} min", ms / 60_000.0)
            }
        }
    }
}

pub(super) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// A vertical offset for the `i`-th dot of a row, from -0.5 to 0.5, spread evenly
/// (the golden ratio's fractional steps) and the same on every render.
fn jitter(i: usize) -> f64 {
    (i as f64 * 0.618_034).fract() - 0.5
}
