//! A self-contained HTML page of a run: provenance, the comparison table, what failed, a strip
//! plot per metric with one row per variant, and each metric's p50 and p90 across earlier
//! runs. Inline CSS and SVG only: no JavaScript, no fonts, no other files.
//!
//! The page is well-formed XML as well as HTML, and every string from results is escaped.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::analyze::stats::{self, Summary, Value};
use crate::model::results::{self, Class, RunResults, ScenarioResult, StepStatus};

/// How many earlier runs the history shows at most.
pub const HISTORY_RUNS: usize = 30;

/// Values spanning more than this ratio are drawn on a log scale.
const LOG_SCALE_SPAN: f64 = 10.0;

/// Earlier runs for the history charts, and the files that could not be read for them.
#[derive(Debug, Default)]
pub struct History {
    /// Runs, oldest first.
    pub runs: Vec<RunResults>,
    /// One line per file skipped: which, and why.
    pub warnings: Vec<String>,
}

impl History {
    /// Reads the results files `paths` in order, skipping (with a warning) any that cannot be
    /// read and any run that is `current` or was already read, until `at_most` runs are read;
    /// then orders them oldest first by start time, then run id.
    pub fn load(
        paths: impl IntoIterator<Item = PathBuf>,
        current: &str,
        at_most: usize,
    ) -> History {
        let mut history = History::default();
        for path in paths {
            if history.runs.len() >= at_most {
                break;
            }
            match results::load(&path) {
                Ok(run) if run.provenance.run_id == current => {}
                Ok(run)
                    if history
                        .runs
                        .iter()
                        .any(|r| r.provenance.run_id == run.provenance.run_id) => {}
                Ok(run) => history.runs.push(run),
                Err(e) => history.warnings.push(format!("history skipped: {e}")),
            }
        }
        history.runs.sort_by(|a, b| {
            let time = |r: &RunResults| unix_seconds(&r.provenance.started_at).unwrap_or(f64::MIN);
            time(a)
                .total_cmp(&time(b))
                .then_with(|| a.provenance.run_id.cmp(&b.provenance.run_id))
        });
        history
    }

    /// Keeps the newest `n` runs.
    pub fn keep_newest(&mut self, n: usize) {
        let extra = self.runs.len().saturating_sub(n);
        self.runs.drain(..extra);
    }
}

/// The results files named by a `--history` argument: the file itself, or in a folder its
/// `*.json` files and its sub-folders' `results.json`, newest name first. A folder that
/// cannot be listed is a warning.
pub fn history_files(arg: &Path, warnings: &mut Vec<String>) -> Vec<PathBuf> {
    if !arg.is_dir() {
        return vec![arg.to_owned()];
    }
    let entries = match std::fs::read_dir(arg) {
        Ok(entries) => entries,
        Err(e) => {
            warnings.push(format!(
                "history skipped: cannot list {}: {e}",
                arg.display()
            ));
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|path| {
            if path.is_dir() {
                Some(path.join("results.json")).filter(|p| p.is_file())
            } else {
                Some(path).filter(|p| p.extension().is_some_and(|x| x == "json"))
            }
        })
        .collect();
    files.sort_by(|a, b| b.cmp(a));
    files
}

/// Renders the page for `results`, with `history`'s runs (oldest first) before it in the
/// history charts.
pub fn render(results: &RunResults, history: &History) -> String {
    let provenance = &results.provenance;
    let mut page = String::new();
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n");
    let _ = writeln!(
        page,
        "<title>sandbox-matrix run {}</title>",
        esc(&provenance.run_id)
    );
    let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        page,
        "<h1>sandbox-matrix run <code>{}</code></h1>",
        esc(&provenance.run_id)
    );
    header(&mut page, results);
    at_a_glance(&mut page, results);
    failures(&mut page, results);
    distributions(&mut page, results);
    trends(&mut page, results, history);
    page.push_str("</body>\n</html>\n");
    page
}

const STYLE: &str = "
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1000px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; margin: 1.2em 0 0.3em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.replay { background: repeating-linear-gradient(135deg, #fafafa, #fafafa 6px, #f0f0f0 6px, #f0f0f0 12px); color: #555; font-style: italic; }
.emulated { background: repeating-linear-gradient(45deg, #f6f9fd, #f6f9fd 6px, #e9f0f8 6px, #e9f0f8 12px); color: #345; font-style: italic; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; font-size: 0.9em; }
dt { font-weight: bold; } dd { margin: 0; }
code { font-size: 0.95em; }
.failed { color: #c0392b; } .skipped { color: #777; }
.note { color: #555; font-size: 0.85em; }
.multiples { display: flex; flex-wrap: wrap; gap: 0.5em; }
svg { display: block; font-family: system-ui, sans-serif; }
svg text { font-size: 11px; fill: #333; }
svg .axis { stroke: #888; stroke-width: 1; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .dot { fill: #2c6fbb; fill-opacity: 0.55; }
svg .fail { stroke: #c0392b; stroke-width: 2; }
svg .p50 { stroke: #111; stroke-width: 2.5; }
svg .p90 { stroke: #111; stroke-width: 1.5; stroke-dasharray: 3 2; }
svg .line50 { fill: none; stroke: #2c6fbb; stroke-width: 2; }
svg .line90 { fill: none; stroke: #2c6fbb; stroke-width: 1.2; stroke-dasharray: 4 3; }
svg .pt { fill: #2c6fbb; } svg .pt.hasfail { fill: #fff; stroke: #c0392b; stroke-width: 2; }
svg .failzone { fill: #fbeeec; }
svg text.failed { fill: #c0392b; }
";

/// Provenance, and per variant × scenario what ran: scenario hash, artifact, provider, region.
fn header(page: &mut String, results: &RunResults) {
    let p = &results.provenance;
    page.push_str("<dl>\n");
    let mut item = |term: &str, value: &str| {
        let _ = writeln!(page, "<dt>{term}</dt><dd>{value}</dd>");
    };
    item(
        "harness",
        &format!("sandbox-matrix {}", esc(&p.harness_version)),
    );
    item("host", &format!("<code>{}</code>", esc(&p.host)));
    item("started", &esc(&p.started_at));
    item("run id", &format!("<code>{}</code>", esc(&p.run_id)));
    if !p.shards.is_empty() {
        let shards: Vec<String> = p
            .shards
            .iter()
            .map(|s| {
                format!(
                    "<code>{}</code> on <code>{}</code>",
                    esc(&s.run_id),
                    esc(&s.host)
                )
            })
            .collect();
        item("merged from", &shards.join(", "));
    }
    page.push_str("</dl>\n");
    if results.scenarios.is_empty() {
        page.push_str("<p>No scenario ran.</p>\n");
        return;
    }
    page.push_str("<table>\n<tr><th>variant</th><th>scenario</th><th>runs</th><th>scenario hash</th><th>artifact</th><th>provider version</th><th>region</th></tr>\n");
    for ((variant, scenario), reps) in groups(results) {
        let distinct = |field: fn(&ScenarioResult) -> Option<&str>| {
            let mut values: Vec<&str> = Vec::new();
            for value in reps.iter().filter_map(|rep| field(rep)) {
                if !values.contains(&value) {
                    values.push(value);
                }
            }
            if values.is_empty() {
                "—".to_owned()
            } else {
                values
                    .iter()
                    .map(|v| short_code(v))
                    .collect::<Vec<_>>()
                    .join("<br/>")
            }
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(variant),
            esc(scenario),
            reps.len(),
            distinct(|r| Some(r.scenario_hash.as_str())),
            distinct(|r| r.artifact_id.as_deref()),
            distinct(|r| r.provider_version.as_deref()),
            distinct(|r| r.region.as_deref()),
        );
    }
    page.push_str("</table>\n");
}

/// How many characters of an id the header shows; the whole id is its tooltip.
const ID_CHARS: usize = 24;

/// `text` as code, cut to [`ID_CHARS`] characters with the whole of it as a tooltip.
fn short_code(text: &str) -> String {
    match text.char_indices().nth(ID_CHARS) {
        Some((end, _)) => format!(
            "<code title=\"{}\">{}…</code>",
            esc(text),
            esc(&text[..end])
        ),
        None => format!("<code>{}</code>", esc(text)),
    }
}

/// The comparison table of [`super::table`].
fn at_a_glance(page: &mut String, results: &RunResults) {
    if results.scenarios.is_empty() {
        return;
    }
    let grid = super::table::grid(results);
    page.push_str("<h2>At a glance</h2>\n<table>\n<tr><th></th>");
    // A column of replays is set apart: what it shows is our client against a cassette; so
    // is a column of emulated results: what it shows is our emulator over the local engine.
    let class = |class: Class| match class {
        Class::Measured => "",
        Class::Replayed => " class=\"replay\"",
        Class::Emulated => " class=\"emulated\"",
    };
    for (column, of) in grid.columns.iter().zip(&grid.classes) {
        let _ = write!(page, "<th{}>{}</th>", class(*of), esc(column));
    }
    page.push_str("</tr>\n");
    for (label, cells) in &grid.rows {
        let _ = write!(page, "<tr><th>{}</th>", esc(label));
        for (cell, of) in cells.iter().zip(&grid.classes) {
            let _ = write!(page, "<td{}>{}</td>", class(*of), esc(cell));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
    for note in &grid.notes {
        let _ = writeln!(
            page,
            "<p class=\"note\">{}:</p>\n<ul class=\"note\">",
            esc(&note.heading)
        );
        for line in &note.lines {
            let _ = writeln!(page, "<li>{}</li>", esc(line));
        }
        page.push_str("</ul>\n");
    }
}

/// Each failed step with its reason, each secret found and each leaked resource under
/// "Failures"; each skipped step with its reason under "Skipped".
fn failures(page: &mut String, results: &RunResults) {
    let (mut failed, mut skipped) = (Vec::new(), Vec::new());
    for scenario in &results.scenarios {
        let name = format!(
            "{} / {} #{}",
            esc(&scenario.variant),
            esc(&scenario.scenario),
            scenario.repetition
        );
        for step in &scenario.steps {
            match &step.status {
                StepStatus::Passed => {}
                StepStatus::Failed { reason } => failed.push(format!(
                    "<li class=\"failed\">{name}: <code>{}</code> failed: {}</li>",
                    esc(&step.step),
                    esc(reason)
                )),
                StepStatus::Skipped { reason } => skipped.push(format!(
                    "<li class=\"skipped\">{name}: <code>{}</code> skipped: {}</li>",
                    esc(&step.step),
                    esc(reason)
                )),
            }
        }
        for secret in &scenario.secrets_found {
            failed.push(format!(
                "<li class=\"failed\">{name}: secret found: {}</li>",
                esc(secret)
            ));
        }
        for resource in &scenario.leaked_resources {
            failed.push(format!(
                "<li class=\"failed\">{name}: resource leaked: {} <code>{}</code></li>",
                esc(&resource.kind),
                esc(&resource.id)
            ));
        }
    }
    for (heading, items) in [("Failures", failed), ("Skipped", skipped)] {
        if items.is_empty() {
            continue;
        }
        let _ = writeln!(page, "<h2>{heading}</h2>\n<ul>");
        for item in items {
            page.push_str(&item);
            page.push('\n');
        }
        page.push_str("</ul>\n");
    }
}

/// A strip plot per scenario × metric: a row per variant, every attempt a dot.
fn distributions(page: &mut String, results: &RunResults) {
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
fn trends(page: &mut String, results: &RunResults, history: &History) {
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
fn minute(time: &str) -> String {
    time.get(..16).unwrap_or(time).replacen('T', " ", 1)
}

/// The history files that were skipped, if any.
fn warnings(page: &mut String, history: &History) {
    if history.warnings.is_empty() {
        return;
    }
    page.push_str("<ul class=\"note\">\n");
    for warning in &history.warnings {
        let _ = writeln!(page, "<li>{}</li>", esc(warning));
    }
    page.push_str("</ul>\n");
}

/// A map from milliseconds to a coordinate, linear or logarithmic.
struct Scale {
    /// Whether the values are spaced by their logarithm.
    log: bool,
    /// The domain in milliseconds.
    domain: (f64, f64),
    /// The coordinates of the domain's ends.
    range: (f64, f64),
    /// The linear ticks' step in milliseconds.
    step: f64,
    /// The linear ticks' unit: its size in milliseconds and its name.
    unit: (f64, &'static str),
    /// About how many ticks the axis has room for.
    ticks: usize,
}

impl Scale {
    /// A scale for `values` (milliseconds) onto `range`: logarithmic when they are all
    /// above zero and span more than [`LOG_SCALE_SPAN`] times, else linear on round ticks.
    fn fit(values: &[f64], range: (f64, f64), ticks: usize) -> Scale {
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
    fn x(&self, value: f64) -> f64 {
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
    fn ticks(&self) -> Vec<(f64, String)> {
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
fn value_text(value: Value) -> String {
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

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// A vertical offset for the `i`-th dot of a row, from -0.5 to 0.5, spread evenly
/// (the golden ratio's fractional steps) and the same on every render.
fn jitter(i: usize) -> f64 {
    (i as f64 * 0.618_034).fract() - 0.5
}

/// The scenarios of `results` grouped by variant × scenario, in order of first appearance.
fn groups(results: &RunResults) -> Vec<((&str, &str), Vec<&ScenarioResult>)> {
    let mut groups: Vec<((&str, &str), Vec<&ScenarioResult>)> = Vec::new();
    for scenario in &results.scenarios {
        let key = (scenario.variant.as_str(), scenario.scenario.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, reps)) => reps.push(scenario),
            None => groups.push((key, vec![scenario])),
        }
    }
    groups
}

/// `text` escaped for HTML and XML text and attribute values.
fn esc(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            // Control characters other than tab and line breaks are not allowed in XML.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => escaped.push('\u{fffd}'),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Seconds since the Unix epoch of an RFC 3339 time such as `2025-11-29T12:13:14.5+01:00`.
fn unix_seconds(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let number = |from: usize, to: usize| -> Option<i64> {
        let part = text.get(from..to)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if bytes.len() < 20
        || separators.iter().any(|(i, c)| bytes[*i] != *c)
        || !matches!(bytes[10], b'T' | b't' | b' ')
    {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut fraction = 0.0;
    if let Some(after) = rest.strip_prefix('.') {
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        fraction = format!("0.{}", &after[..digits]).parse().ok()?;
        rest = &after[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 3_600 + minutes * 60)
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset;
    Some(seconds as f64 + fraction)
}

#[cfg(test)]
mod tests;
