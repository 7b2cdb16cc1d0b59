//! A markdown "at a glance" table comparing variants, and a run summary around it.

mod cells;

use std::time::Duration;

use comfy_table::Table;
use comfy_table::presets::ASCII_MARKDOWN;
use sandbox_providers::{BuildLogMode, Timing};

use crate::analyze::{board, stats};
use crate::model::results::{
    COMPRESSED_BYTES, CREATE_TO_FIRST_RESULT, Class, FIRST_COMMAND, Modes, ReplayPace, RunResults,
    ScenarioResult, StepResult, StepStatus, TTI,
};

use cells::{
    ORPHANS_ROW, artifact, base_chain, base_credential, build, build_logs, burst, cell, core_tier,
    create_to_first_result, extended_tier, floor, launch_mode, leaked, lifetime, one_line,
    orphan_cell, outcome, readiness, rebuild, registry_transfer, restart, secrets, shutdown,
};

/// The build step's timing of a push to a registry, and the launch step's of the pull.
const PUSH: &str = sandbox_providers::datalayer::PUSH_TIMING;
const PULL: &str = sandbox_providers::datalayer::PULL_TIMING;

/// What a cell holds when the run has nothing to put in it.
const NOTHING: &str = "—";

/// The longest a failed shutdown's cell runs before it is cut short.
const SHUTDOWN_FAILURE_CHARS: usize = 60;

/// How many characters of an artifact id the table shows.
const ARTIFACT_ID_CHARS: usize = 19;

/// How one variant's scenarios fill a row's cell.
#[derive(Clone, Copy)]
enum Fill {
    /// A cell that is not a timing: every scenario counts, whatever its mode.
    Plain(fn(&[&ScenarioResult]) -> String),
    /// A timing cell: from the measured scenarios when the column has any, and marked when
    /// it comes from a replay.
    Timed(for<'a> fn(&[&'a ScenarioResult]) -> Timed<'a>),
}

/// A timing row's cell before its source is applied.
enum Timed<'a> {
    /// No number: `—`, `failed`, `skipped`, a failure.
    Text(String),
    /// A number, measured in `from`: `value`, then `rest`, which is not a timing (a success
    /// count, how a sandbox ended).
    Value {
        /// The scenario the number comes from.
        from: &'a ScenarioResult,
        /// The number, such as `2.31 s` or `p50 2.48 s · p90 failed`.
        value: String,
        /// What follows it, such as ` · 2/3 ok`.
        rest: String,
    },
}

impl Timed<'_> {
    /// A number from `from`, with nothing after it.
    fn value(from: &ScenarioResult, value: String) -> Timed<'_> {
        Timed::Value {
            from,
            value,
            rest: String::new(),
        }
    }

    /// The cell's text: a replayed number reads `replayed` at instant pace, and is marked
    /// `(recorded <date>)` at recorded pace.
    fn show(self) -> String {
        match self {
            Timed::Text(text) => text,
            Timed::Value { from, value, rest } => match from.source.replay() {
                None => format!("{value}{rest}"),
                Some(replay) => match replay.pace {
                    ReplayPace::Recorded => format!(
                        "{value} (recorded {}){rest}",
                        replay.written_date().unwrap_or("at an unknown date")
                    ),
                    ReplayPace::Instant | ReplayPace::Fixed => format!("replayed{rest}"),
                },
            },
        }
    }
}

/// Every row: its label and how its cells are filled.
const ROWS: [(&str, Fill); 23] = [
    ("Artifact launched", Fill::Plain(artifact)),
    ("Base-image chain", Fill::Plain(base_chain)),
    ("Build", Fill::Timed(build)),
    ("Rebuild", Fill::Timed(rebuild)),
    (
        "Registry: push · pull · size",
        Fill::Timed(registry_transfer),
    ),
    ("Build logs", Fill::Plain(build_logs)),
    (
        "Credential for the private base",
        Fill::Plain(base_credential),
    ),
    ("Create to first 1+1", Fill::Timed(create_to_first_result)),
    (
        "Floor: python3 in a fresh container",
        Fill::Timed(|s| floor(s, "floor-python3")),
    ),
    (
        "Floor: kernel's first answer",
        Fill::Timed(|s| floor(s, "floor-kernel")),
    ),
    ("Burst: create to first 1+1", Fill::Timed(burst)),
    (
        "Sequential: score · TTI",
        Fill::Timed(|s| launch_mode(s, "sequential")),
    ),
    (
        "Staggered: score · TTI",
        Fill::Timed(|s| launch_mode(s, "staggered")),
    ),
    (
        "Burst: score · TTI",
        Fill::Timed(|s| launch_mode(s, "burst")),
    ),
    ("Readiness: first ÷ second command", Fill::Plain(readiness)),
    ("Lifetime: asked · ended", Fill::Timed(lifetime)),
    ("Restart", Fill::Timed(restart)),
    ("Shutdown", Fill::Timed(shutdown)),
    ("Doctor and core tier", Fill::Plain(core_tier)),
    ("Extended tier", Fill::Plain(extended_tier)),
    ("Secrets found", Fill::Plain(secrets)),
    ("Resources leaked", Fill::Plain(leaked)),
    ("Scenario", Fill::Plain(outcome)),
];

/// Renders a markdown table with one column per variant, in order of first
/// appearance, headed `variant · mode`, and one row per measurement, then a note for each
/// column with replayed results naming their cassettes, and for each column of emulated
/// results naming the emulators.
///
/// Where a variant ran several scenarios, each cell comes from the first of
/// them that has the step or timing the row shows; "Secrets found",
/// "Resources leaked" and "Scenario" count every scenario. Missing values are
/// "—", steps that did not run are "skipped", and `|` in cells is escaped.
/// Where that scenario ran more than once, the build, create-to-first-1+1, restart and
/// shutdown cells show p50, p90 and the success count over its repetitions, a failed
/// attempt counting as +∞ (see [`crate::analyze::stats`]).
///
/// A replayed timing is never shown as the provider's: at instant pace it reads
/// `replayed`, at recorded pace it is marked `(recorded <date>)`; every other cell of a
/// column of replays reads `replayed: …`, its Scenario row `replayed: client matches
/// cassette`. An emulated column's timings are real measurements, but of sandbox-matrix's
/// emulator over the local engine, not of the provider: every cell of it reads
/// `emulated: …`. A variant's measured, replayed and emulated results (a merge of them) are
/// separate columns.
pub fn render(results: &RunResults) -> String {
    let grid = grid(results);
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN).force_no_tty();
    table.set_header(std::iter::once(String::new()).chain(grid.columns.iter().map(|v| cell(v))));
    for (label, cells) in &grid.rows {
        table.add_row(std::iter::once((*label).to_owned()).chain(cells.iter().map(|c| cell(c))));
    }
    let mut text = table.to_string();
    for note in &grid.notes {
        text.push_str(&format!("\n\n{}:", note.heading));
        for line in &note.lines {
            text.push_str(&format!("\n- {}", one_line(line)));
        }
    }
    text
}

/// What [`render`] shows, before markdown.
pub(crate) struct Grid {
    /// Each column's header, `variant · mode`, in order of first appearance.
    pub(crate) columns: Vec<String>,
    /// Each row's label with one cell per column, as plain text.
    pub(crate) rows: Vec<(&'static str, Vec<String>)>,
    /// A note per column with replayed or emulated results.
    pub(crate) notes: Vec<Note>,
    /// Per column: whose numbers it holds; every cell of a replayed or emulated column
    /// carries the mark.
    pub(crate) classes: Vec<Class>,
}

/// What a column's replayed results were replayed from, or what its emulated results ran
/// against.
pub(crate) struct Note {
    /// Such as `e2b · replay: replayed, not measured, from`.
    pub(crate) heading: String,
    /// Each distinct cassette (path, date, pace and origin) or emulator.
    pub(crate) lines: Vec<String>,
}

/// The table of `results` as plain text: headers, rows and notes.
pub(crate) fn grid(results: &RunResults) -> Grid {
    let variants = super::by_variant(results);
    // A column holds results of one class (see `by_variant`).
    let classes: Vec<Class> = variants
        .iter()
        .map(|(_, scenarios)| {
            scenarios
                .first()
                .map_or(Class::Measured, |s| s.source.class())
        })
        .collect();
    let rows: Vec<(&str, Vec<String>)> = ROWS
        .iter()
        .map(|(label, fill)| {
            let cells = variants
                .iter()
                .zip(&classes)
                .map(|((_, scenarios), class)| {
                    let cell = match fill {
                        Fill::Plain(fill) => fill(scenarios),
                        Fill::Timed(fill) => fill(scenarios).show(),
                    };
                    match class {
                        Class::Measured => cell,
                        Class::Replayed => replay_cell(label, cell),
                        Class::Emulated => emulated_cell(cell),
                    }
                })
                .collect();
            (*label, cells)
        })
        .collect();
    // The orphan audit is the run's, per variant, not any scenario's: it sits after the
    // leaks its scenarios counted.
    let mut rows = rows;
    let orphans: Vec<String> = variants
        .iter()
        .zip(&classes)
        .map(|((variant, _), class)| match class {
            Class::Measured => orphan_cell(results, variant),
            Class::Replayed => replay_cell(ORPHANS_ROW, NOTHING.to_owned()),
            Class::Emulated => emulated_cell(NOTHING.to_owned()),
        })
        .collect();
    let at = rows
        .iter()
        .position(|(label, _)| *label == "Resources leaked")
        .map_or(rows.len(), |i| i + 1);
    rows.insert(at, (ORPHANS_ROW, orphans));
    let columns = headers(&variants);
    let mut notes: Vec<Note> = variants
        .iter()
        .zip(&columns)
        .filter_map(|((_, scenarios), header)| note(header, scenarios))
        .collect();
    let scored = rows.iter().any(|(label, cells)| {
        label.ends_with("score · TTI") && cells.iter().any(|c| c.contains("score "))
    });
    if scored {
        notes.push(Note {
            heading: "Scores".to_owned(),
            lines: vec![
                board::METHODOLOGY.to_owned(),
                format!(
                    "TTI's first command: `{}` through the provider's exec; `create to first 1+1` adds the first correct 1+1",
                    FIRST_COMMAND.join(" ")
                ),
            ],
        });
    }
    Grid {
        columns,
        rows,
        notes,
        classes,
    }
}

/// A cell of a column that holds only replays, marked so that no reader takes it for the
/// provider's answer: `replayed: 0`. What a replay proves is that our client still speaks
/// the recorded protocol, so its Scenario row reads `replayed: client matches cassette`.
fn replay_cell(label: &str, cell: String) -> String {
    // Timings carry their own mark: `replayed`, or `(recorded <date>)` at recorded pace.
    if cell == NOTHING || cell.starts_with("replayed") || cell.contains("(recorded ") {
        cell
    } else if label == "Scenario" && cell == "pass" {
        "replayed: client matches cassette".to_owned()
    } else {
        format!("replayed: {cell}")
    }
}

/// A cell of a column of emulated results, marked so that no reader takes it for the
/// provider's answer: `emulated: 2.31 s`, `emulated: pass`. Its timings are real
/// measurements, of sandbox-matrix's emulator over the local engine.
fn emulated_cell(cell: String) -> String {
    if cell == NOTHING {
        cell
    } else {
        format!("emulated: {cell}")
    }
}

/// Variants that are a launch mode of a provider shown under the provider's name:
/// `datalayer-runtimes` is Datalayer's platform launch of the environment, beside
/// `datalayer`, the artifact pulled from its registry.
const LAUNCH_MODES: &[(&str, &str)] =
    &[(sandbox_providers::datalayer::runtimes::VARIANT, "datalayer")];

/// Each column's header: `provider · mode` ([`LAUNCH_MODES`]), or `variant · mode` where
/// two columns would otherwise read the same.
fn headers(variants: &[(&str, Vec<&ScenarioResult>)]) -> Vec<String> {
    let provider = |variant: &str| {
        LAUNCH_MODES
            .iter()
            .find(|(launch, _)| *launch == variant)
            .map_or(variant.to_owned(), |(_, provider)| (*provider).to_owned())
    };
    let short: Vec<String> = variants
        .iter()
        .map(|(variant, scenarios)| column(&provider(variant), scenarios))
        .collect();
    variants
        .iter()
        .zip(&short)
        .map(|((variant, scenarios), header)| {
            if short.iter().filter(|h| *h == header).count() > 1 {
                column(variant, scenarios)
            } else {
                header.clone()
            }
        })
        .collect()
}

/// A column's header: `name · mode`, modes joined by `+` when they are mixed.
fn column(variant: &str, scenarios: &[&ScenarioResult]) -> String {
    format!(
        "{variant} · {}",
        Modes::of(scenarios.iter().map(|s| &s.source))
    )
}

/// The note of the column headed `header`: for replayed results what they were replayed
/// from, for emulated ones what they ran against; `None` for a column of measurements.
fn note(header: &str, scenarios: &[&ScenarioResult]) -> Option<Note> {
    let mut cassettes: Vec<String> = Vec::new();
    for replay in scenarios.iter().filter_map(|s| s.source.replay()) {
        let pace = match replay.pace {
            ReplayPace::Instant => "instant pace, timings read `replayed`",
            ReplayPace::Recorded => "recorded pace, timings are its recorded latencies",
            ReplayPace::Fixed => "a fixed pace, timings read `replayed`",
        };
        let line = format!(
            "`{}`, written {}, {pace}: {}",
            replay.cassette,
            replay.written_date().unwrap_or("at an unknown date"),
            replay
                .origin
                .as_deref()
                .unwrap_or("origin unknown (the cassette could not be read)")
        );
        if !cassettes.contains(&line) {
            cassettes.push(line);
        }
    }
    if !cassettes.is_empty() {
        return Some(Note {
            heading: format!("{header}: replayed, not measured, from"),
            lines: cassettes,
        });
    }
    let mut emulators: Vec<String> = Vec::new();
    for emulator in scenarios.iter().filter_map(|s| s.source.emulator()) {
        if !emulators.iter().any(|e| e == emulator) {
            emulators.push(emulator.to_owned());
        }
    }
    if !emulators.is_empty() {
        return Some(Note {
            heading: format!(
                "{header}: measured against sandbox-matrix's emulator over the local engine, \
                 not against the provider"
            ),
            lines: emulators,
        });
    }
    None
}

/// Renders a markdown document: a title naming the run, its provenance, the
/// [`render`] table, then for each variant × scenario (× repetition, when it ran more than
/// once) its failed and skipped
/// steps with their reasons (or "all steps passed", said against the emulator for an
/// emulated result), secrets found and resources leaked.
pub fn render_summary(results: &RunResults) -> String {
    let provenance = &results.provenance;
    let mut lines = vec![
        format!("# sandbox-matrix run {}", provenance.run_id),
        String::new(),
        format!(
            "sandbox-matrix {} on host `{}`, started {}.",
            provenance.harness_version, provenance.host, provenance.started_at
        ),
        String::new(),
        render(results),
    ];
    for scenario in &results.scenarios {
        let repeated = results
            .scenarios
            .iter()
            .filter(|other| {
                other.variant == scenario.variant && other.scenario == scenario.scenario
            })
            .count()
            > 1;
        lines.push(String::new());
        let mode = scenario.source.mode();
        lines.push(if repeated {
            format!(
                "## {} / {} · {mode} (repetition {})",
                scenario.variant, scenario.scenario, scenario.repetition
            )
        } else {
            format!("## {} / {} · {mode}", scenario.variant, scenario.scenario)
        });
        lines.push(String::new());
        lines.extend(scenario_bullets(scenario));
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The summary's bullets for one scenario.
fn scenario_bullets(scenario: &ScenarioResult) -> Vec<String> {
    let mut bullets: Vec<String> = scenario
        .steps
        .iter()
        .filter_map(|step| match &step.status {
            StepStatus::Passed => None,
            StepStatus::Failed { reason } => {
                Some(format!("- `{}` failed: {}", step.step, one_line(reason)))
            }
            StepStatus::Skipped { reason } => {
                Some(format!("- `{}` skipped: {}", step.step, one_line(reason)))
            }
        })
        .collect();
    if scenario.steps.is_empty() {
        bullets.push("- no steps ran".to_owned());
    } else if bullets.is_empty() && scenario.source.is_emulated() {
        bullets.push("- all steps passed against the emulator (not the provider)".to_owned());
    } else if bullets.is_empty() && !scenario.source.is_measured() {
        bullets.push(
            "- every step went as recorded: our client matches the cassette (a replay tests \
             the client, not the provider)"
                .to_owned(),
        );
    } else if bullets.is_empty() {
        bullets.push("- all steps passed".to_owned());
    }
    if let Some(region) = &scenario.region {
        bullets.push(format!("- ran in region `{region}`, as the provider said"));
    }
    bullets.extend(
        scenario
            .secrets_found
            .iter()
            .map(|secret| format!("- secret found: {}", one_line(secret))),
    );
    bullets.extend(
        scenario
            .leaked_resources
            .iter()
            .map(|resource| format!("- resource leaked: {} `{}`", resource.kind, resource.id)),
    );
    bullets
}

#[cfg(test)]
mod tests;
