//! A self-contained HTML page of a run: provenance, the comparison table, what failed, a strip
//! plot per metric with one row per variant, and each metric's p50 and p90 across earlier
//! runs. Inline CSS and SVG only: no JavaScript, no fonts, no other files.
//!
//! The page is well-formed XML as well as HTML, and every string from results is escaped.

mod charts;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::analyze::stats::{self, Summary, Value};
use crate::model::results::{self, Class, RunResults, ScenarioResult, StepStatus};

use charts::{distributions, trends};

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
