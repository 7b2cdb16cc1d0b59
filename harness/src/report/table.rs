//! A markdown "at a glance" table comparing variants, and a run summary around it.

use std::time::Duration;

use comfy_table::Table;
use comfy_table::presets::ASCII_MARKDOWN;
use sandbox_providers::{BuildLogMode, Timing};

use crate::analyze::{board, stats};
use crate::model::results::{
    COMPRESSED_BYTES, CREATE_TO_FIRST_RESULT, Class, FIRST_COMMAND, Modes, ReplayPace, RunResults,
    ScenarioResult, StepResult, StepStatus, TTI,
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

/// The first artifact id, shortened.
/// A reference by digest (`<registry>/<repository>@sha256:…`) shows its digest.
fn artifact(scenarios: &[&ScenarioResult]) -> String {
    scenarios
        .iter()
        .find_map(|scenario| Some((scenario, scenario.artifact_id.as_deref()?)))
        .map_or_else(
            || NOTHING.to_owned(),
            |(scenario, id)| {
                // A variant that builds nothing launches an environment its platform names.
                if scenario.capabilities.as_ref().is_some_and(|c| !c.build) {
                    return format!("environment `{}`", shorten(id, ARTIFACT_ID_CHARS));
                }
                let digest = id.rsplit_once('@').map_or(id, |(_, digest)| digest);
                shorten(digest, ARTIFACT_ID_CHARS)
            },
        )
}

/// The launched artifact's digest, then the base digest its pulled provenance names, then
/// whether that base is approved: `sha256:1f2e… ← base sha256:9a8b… · local, approved by
/// tag`. Without a chain read, the `base-chain` step's state.
fn base_chain(scenarios: &[&ScenarioResult]) -> String {
    match scenarios.iter().find_map(|s| s.base_chain.as_ref()) {
        Some(chain) => {
            let launched = chain
                .launched
                .rsplit_once('@')
                .map_or(chain.launched.as_str(), |(_, digest)| digest);
            format!(
                "{} ← base {} · {}",
                shorten(launched, ARTIFACT_ID_CHARS),
                shorten(&chain.base_digest, ARTIFACT_ID_CHARS),
                chain.approval
            )
        }
        None => step_cell(scenarios, "base-chain", |_| NOTHING.to_owned()),
    }
}

/// Where the build pushed its artifact to a registry: the build step's `push` timing, the
/// launch step's `pull` (the first launch pulls), and the bytes pushed.
fn registry_transfer<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let Some((from, build)) = scenarios.iter().find_map(|scenario| {
        let build = scenario.step("build")?;
        build
            .timings
            .iter()
            .any(|t| t.name == PUSH)
            .then_some((*scenario, build))
    }) else {
        return Timed::Text(NOTHING.to_owned());
    };
    let timing = |step: &StepResult, name: &str| {
        step.timings
            .iter()
            .find(|t| t.name == name)
            .map(|t| seconds(t.duration, 1))
    };
    let pull = scenarios
        .iter()
        .filter_map(|scenario| scenario.step("launch"))
        .find_map(|launch| timing(launch, PULL))
        .unwrap_or_else(|| NOTHING.to_owned());
    let size = build
        .data
        .as_ref()
        .and_then(|data| data[COMPRESSED_BYTES].as_u64())
        .map(|bytes| format!(" · {:.1} MB compressed", bytes as f64 / 1e6))
        .unwrap_or_default();
    Timed::Value {
        from,
        value: format!(
            "push {} · pull {pull}",
            timing(build, PUSH).unwrap_or_default()
        ),
        rest: size,
    }
}

/// The build step's duration, to a tenth of a second.
/// A scenario whose build reused an earlier scenario's artifact timed no build: the
/// scenario that built it is the one shown.
fn build<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let built: Vec<&ScenarioResult> = scenarios
        .iter()
        .filter(|s| s.step("build").is_none_or(|b| b.reused.is_none()))
        .copied()
        .collect();
    repeated_step(&built, "build").unwrap_or_else(|| step_duration(&built, "build", 1))
}

/// The rebuild step's duration (the same environment built again with the provider's
/// cache), to a tenth of a second.
fn rebuild<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    repeated_step(scenarios, "rebuild").unwrap_or_else(|| step_duration(scenarios, "rebuild", 1))
}

/// Every repetition, in `scenarios`, of the scenario `first` is one of.
fn repetitions<'a>(
    scenarios: &[&'a ScenarioResult],
    first: &ScenarioResult,
) -> Vec<&'a ScenarioResult> {
    scenarios
        .iter()
        .filter(|scenario| scenario.scenario == first.scenario)
        .copied()
        .collect()
}

/// Where the first scenario with `has` ran more than once and measured `metric` more than
/// once: `p50 6.30 s · p90 failed · 7/10 ok` over all its repetitions.
fn repeated<'a>(
    scenarios: &[&'a ScenarioResult],
    has: impl Fn(&ScenarioResult) -> bool,
    metric: &str,
) -> Option<Timed<'a>> {
    let first = scenarios.iter().find(|scenario| has(scenario))?;
    let reps = repetitions(scenarios, first);
    let attempts = stats::attempts(&reps, metric);
    if attempts.len() < 2 {
        return None;
    }
    let summary = stats::Summary::of(&attempts)?;
    Some(Timed::Value {
        from: first,
        value: format!("p50 {} · p90 {}", summary.p50, summary.p90),
        rest: format!(" · {}/{} ok", summary.successes, summary.n),
    })
}

/// [`repeated`] for the duration of the step `name`.
fn repeated_step<'a>(scenarios: &[&'a ScenarioResult], name: &str) -> Option<Timed<'a>> {
    repeated(
        scenarios,
        |scenario| scenario.step(name).is_some(),
        &format!("{}{name}", stats::STEP_PREFIX),
    )
}

/// A burst's launches, each timed from create to first 1+1, over every repetition of the
/// first scenario that burst: `p50 · p90 · p99 · k/n ok`, a failed launch counting as +∞.
fn burst<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let Some(first) = scenarios.iter().find(|scenario| {
        scenario.step("burst").is_some()
            && scenario
                .samples
                .iter()
                .any(|sample| sample.name == CREATE_TO_FIRST_RESULT)
    }) else {
        return Timed::Text(NOTHING.to_owned());
    };
    let reps = repetitions(scenarios, first);
    match stats::Summary::of(&stats::attempts(&reps, CREATE_TO_FIRST_RESULT)) {
        Some(summary) => Timed::Value {
            from: first,
            value: format!(
                "p50 {} · p90 {} · p99 {}",
                summary.p50, summary.p90, summary.p99
            ),
            rest: format!(" · {}/{} ok", summary.successes, summary.n),
        },
        None => Timed::Text(NOTHING.to_owned()),
    }
}

/// The public boards' figures of the launches of the first scenario with a `step` step
/// (`sequential`, `staggered` or `burst`), over its repetitions: `score 97.3 · p50 0.41 s ·
/// p95 0.52 s · p99 0.60 s · trimmed 0.41 · 0.50 · 0.55 s · 16/16 ok`, TTI being the
/// create to the first command's success ([`board::METHODOLOGY`]); untrimmed, a failure
/// is +∞.
fn launch_mode<'a>(scenarios: &[&'a ScenarioResult], step: &str) -> Timed<'a> {
    let Some(first) = scenarios.iter().find(|s| s.step(step).is_some()) else {
        return Timed::Text(NOTHING.to_owned());
    };
    let reps = repetitions(scenarios, first);
    match board::BoardFigures::of(&stats::attempts(&reps, TTI)) {
        Some(figures) => {
            let trimmed = figures.trimmed.map_or_else(
                || "none".to_owned(),
                |t| {
                    format!(
                        "{} · {} · {}",
                        seconds_of(t.p50),
                        seconds_of(t.p95),
                        seconds_of(t.p99)
                    )
                },
            );
            Timed::Value {
                from: first,
                value: format!(
                    "score {:.1} · p50 {} · p95 {} · p99 {} · trimmed {trimmed}",
                    figures.score,
                    figures.untrimmed.p50,
                    figures.untrimmed.p95,
                    figures.untrimmed.p99
                ),
                rest: format!(" · {}/{} ok", figures.successes, figures.n),
            }
        }
        None => match first.step(step).map(|s| &s.status) {
            Some(StepStatus::Skipped { .. }) => Timed::Text("skipped".to_owned()),
            _ => Timed::Text(NOTHING.to_owned()),
        },
    }
}

/// A trimmed percentile without its unit: `0.41`, or `failed`.
fn seconds_of(value: stats::Value) -> String {
    match value {
        stats::Value::Measured(d) => format!("{:.2}", d.as_secs_f64()),
        stats::Value::Failed => "failed".to_owned(),
    }
}

/// How much slower each launch's first command was than its second, over every launch of
/// the column: `×3.1 median, ×12.0 worst (40 launches)`. A provider whose "ready" is not
/// ready shows a large ratio. Each launch records one first and one second command, in
/// launch order, so the k-th of each belong to one launch.
/// The lifetime asked for and what became of the sandbox, from when create was asked:
/// `6 s from create · gone at 6.4 s (+0.2 s)`, `6 s from create · died early at 2.1 s`,
/// `60 s from last activity · outlived it`. Without one, the `lifetime`
/// step's state.
fn lifetime<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let Some((scenario, seen)) = scenarios
        .iter()
        .find_map(|s| Some((*s, s.lifetime.as_ref()?)))
    else {
        return Timed::Text(step_cell(scenarios, "lifetime", |_| NOTHING.to_owned()));
    };
    let asked = format!("{} from {}", seconds(seen.asked, 0), seen.counts_from);
    let failed = matches!(
        scenario.step("lifetime").map(|s| &s.status),
        Some(StepStatus::Failed { .. })
    );
    let ended = match (seen.gone_at, seen.early) {
        (Some(gone), true) => format!("died early at {}", seconds(gone, 1)),
        (Some(gone), false) if failed => {
            format!("gone at {}, not seen alive before", seconds(gone, 1))
        }
        (Some(gone), false) => format!(
            "gone at {} (+{})",
            seconds(gone, 1),
            seconds(seen.overrun().unwrap_or_default(), 1)
        ),
        (None, _) if failed && seen.alive_at.is_some() => "outlived it".to_owned(),
        (None, _) => "not seen to end".to_owned(),
    };
    Timed::value(scenario, format!("{asked} · {ended}"))
}

fn readiness(scenarios: &[&ScenarioResult]) -> String {
    match board::readiness(scenarios) {
        None => NOTHING.to_owned(),
        Some(r) => format!(
            "×{:.1} median, ×{:.1} worst ({} launches)",
            r.median, r.worst, r.launches
        ),
    }
}

/// The label of the orphan audit's row.
const ORPHANS_ROW: &str = "Orphans per 1,000 creates";

/// The variant's orphan audit ([`crate::model::results::OrphanAudit`]): `0 of 17 sandbox
/// creates`, or `2 of 17 sandbox creates: 117.6 per 1,000, swept 2 (container 3f2a…)`;
/// `—` where none was made (a replay, an emulated or interrupted run).
fn orphan_cell(results: &RunResults, variant: &str) -> String {
    let Some(audit) = results.orphans.iter().find(|a| a.variant == variant) else {
        return NOTHING.to_owned();
    };
    let count = format!(
        "{} of {} sandbox creates",
        audit.orphans.len(),
        audit.creates
    );
    match (audit.orphans.first(), audit.per_1000()) {
        (None, _) => count,
        (Some(first), rate) => format!(
            "{count}: {} per 1,000, swept {} ({})",
            rate.map_or_else(|| "—".to_owned(), |r| format!("{r:.1}")),
            audit.swept,
            shorten(first, ARTIFACT_ID_CHARS + 10)
        ),
    }
}

/// What the variant did with the base's registry credential, as the first scenario that
/// built says (`ECR login token, made for this run; …`, `none: local base`).
fn base_credential(scenarios: &[&ScenarioResult]) -> String {
    scenarios
        .iter()
        .find_map(|scenario| scenario.base_credential.as_deref())
        .unwrap_or(NOTHING)
        .to_owned()
}

/// How build logs arrive, as the variant's capabilities declare.
fn build_logs(scenarios: &[&ScenarioResult]) -> String {
    let mode = scenarios
        .iter()
        .find_map(|scenario| scenario.capabilities.as_ref());
    let cell = mode.map_or(NOTHING, |capabilities| match capabilities.build_logs {
        BuildLogMode::Streamed => "streamed",
        BuildLogMode::Polled => "polled",
        BuildLogMode::None => "none",
    });
    cell.to_owned()
}

/// The create-to-first-result timing, or "failed" when the first result was wrong.
fn create_to_first_result<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let has = |scenario: &ScenarioResult| {
        scenario.step("first-result").is_some() || scenario.timing(CREATE_TO_FIRST_RESULT).is_some()
    };
    if let Some(cell) = repeated(scenarios, has, CREATE_TO_FIRST_RESULT) {
        return cell;
    }
    let cell = scenarios.iter().find_map(|scenario| {
        let status = scenario.step("first-result").map(|step| &step.status);
        match (status, scenario.timing(CREATE_TO_FIRST_RESULT)) {
            (Some(StepStatus::Failed { .. }), _) => Some(Timed::Text("failed".to_owned())),
            (_, Some(timing)) => Some(Timed::Value {
                from: scenario,
                value: timing_cell(timing),
                rest: floor_ratio(scenarios, scenario, timing),
            }),
            (Some(StepStatus::Skipped { .. }), None) => Some(Timed::Text("skipped".to_owned())),
            (Some(StepStatus::Passed) | None, None) => None,
        }
    });
    cell.unwrap_or_else(|| Timed::Text(NOTHING.to_owned()))
}

/// ` · ×1.21 the kernel's floor`: create-to-first over the kernel floor (container create
/// to a bare kernel's first answer) of the same scenario, else of another of `scenarios`
/// of the same class that launched the same artifact (the floor is measured once per
/// artifact and run), which it then names (` · ×1.21 the kernel's floor, measured in
/// `lifecycle``), or nothing without one. A replay has none: its timings are not
/// measurements. An emulated result has one, a real ratio of timings of the emulator,
/// which its column marks.
fn floor_ratio(
    scenarios: &[&ScenarioResult],
    scenario: &ScenarioResult,
    create_to_first: &Timing,
) -> String {
    if scenario.source.class() == Class::Replayed {
        return String::new();
    }
    let kernel_floor = |s: &&ScenarioResult| {
        s.step("first-result")?
            .timings
            .iter()
            .find(|t| t.name == "floor-kernel")
            .filter(|floor| !floor.duration.is_zero())
            .cloned()
    };
    let same_artifact = |s: &&&ScenarioResult| {
        s.source.class() == scenario.source.class()
            && scenario.artifact_id.is_some()
            && s.artifact_id == scenario.artifact_id
    };
    let measured = kernel_floor(&scenario)
        .map(|floor| (floor, String::new()))
        .or_else(|| {
            scenarios.iter().filter(same_artifact).find_map(|s| {
                let floor = kernel_floor(s)?;
                Some((floor, format!(", measured in `{}`", s.scenario)))
            })
        });
    measured
        .map(|(floor, elsewhere)| {
            format!(
                " · ×{:.2} the kernel's floor{elsewhere}",
                create_to_first.duration.as_secs_f64() / floor.duration.as_secs_f64()
            )
        })
        .unwrap_or_default()
}

/// The first-result step's timing `name`.
fn floor<'a>(scenarios: &[&'a ScenarioResult], name: &str) -> Timed<'a> {
    scenarios
        .iter()
        .find_map(|scenario| {
            let step = scenario.step("first-result")?;
            let timing = step.timings.iter().find(|timing| timing.name == name)?;
            Some(Timed::value(scenario, timing_cell(timing)))
        })
        .unwrap_or_else(|| Timed::Text(NOTHING.to_owned()))
}

/// The restart step's duration.
fn restart<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    repeated_step(scenarios, "restart").unwrap_or_else(|| step_duration(scenarios, "restart", 2))
}

/// The shutdown step's duration and, from its log, how the sandbox ended.
fn shutdown<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    if let Some(cell) = repeated_step(scenarios, "shutdown") {
        return cell;
    }
    let Some((scenario, step)) = scenarios
        .iter()
        .find_map(|scenario| Some((*scenario, scenario.step("shutdown")?)))
    else {
        return Timed::Text(NOTHING.to_owned());
    };
    match &step.status {
        StepStatus::Passed => Timed::Value {
            from: scenario,
            value: seconds(step.duration, 2),
            rest: step
                .log
                .iter()
                .find_map(|line| line.strip_prefix("ending: "))
                .map(|ending| format!(", {ending}"))
                .unwrap_or_default(),
        },
        StepStatus::Failed { reason } => Timed::Text(shorten(
            &format!("failed: {reason}"),
            SHUTDOWN_FAILURE_CHARS,
        )),
        StepStatus::Skipped { .. } => Timed::Text("skipped".to_owned()),
    }
}

/// The checks of the first scenario with any check named `core-…` or `extended-…`: those
/// that ran, and the names of those skipped; `None` when no scenario has one.
fn checks<'a>(
    scenarios: &[&'a ScenarioResult],
    tier: &str,
) -> Option<(Vec<&'a StepResult>, Vec<&'a str>)> {
    let steps = scenarios
        .iter()
        .map(|scenario| {
            scenario
                .steps
                .iter()
                .filter(|s| s.step.starts_with(tier))
                .collect::<Vec<_>>()
        })
        .find(|steps| !steps.is_empty())?;
    let (skipped, ran): (Vec<&StepResult>, Vec<&StepResult>) = steps
        .into_iter()
        .partition(|s| matches!(s.status, StepStatus::Skipped { .. }));
    Some((ran, skipped.into_iter().map(check_name).collect()))
}

/// The short name of a check step: `core-2-identity` is `identity`.
fn check_name(step: &StepResult) -> &str {
    step.step.splitn(3, '-').nth(2).unwrap_or(&step.step)
}

/// "n/m" of the core checks that ran and passed, the doctor's rows, which checks failed and
/// which were skipped (never counted as passed).
fn core_tier(scenarios: &[&ScenarioResult]) -> String {
    let (core, skipped) = match checks(scenarios, "core-") {
        None => return NOTHING.to_owned(),
        Some((core, _)) if core.is_empty() => return "skipped".to_owned(),
        Some(checks) => checks,
    };
    let passed = core
        .iter()
        .filter(|s| s.status == StepStatus::Passed)
        .count();
    let mut cell = format!("{passed}/{}", core.len());
    if let Some(rows) = core
        .iter()
        .find(|s| s.step == "core-1-doctor")
        .and_then(|s| s.data.as_ref())
        .and_then(|d| Some((d["rowsPassed"].as_u64()?, d["rows"].as_u64()?)))
    {
        cell.push_str(&format!(", doctor {}/{} rows", rows.0, rows.1));
    }
    let failed: Vec<&str> = core
        .iter()
        .filter(|s| matches!(s.status, StepStatus::Failed { .. }))
        .map(|s| check_name(s))
        .collect();
    if !failed.is_empty() {
        cell.push_str(&format!("; failed: {}", failed.join(", ")));
    }
    if !skipped.is_empty() {
        cell.push_str(&format!("; skipped: {}", skipped.join(", ")));
    }
    cell
}

/// What the extended tier recorded: throughput, concurrent kernels, cold start, and failures.
fn extended_tier(scenarios: &[&ScenarioResult]) -> String {
    let (extended, skipped) = match checks(scenarios, "extended-") {
        None => return NOTHING.to_owned(),
        Some((extended, _)) if extended.is_empty() => return "skipped".to_owned(),
        Some(checks) => checks,
    };
    let data = |name: &str| {
        extended
            .iter()
            .find(|s| check_name(s) == name)
            .and_then(|s| s.data.as_ref())
    };
    let mut parts = Vec::new();
    if let Some(speed) = data("throughput").and_then(|d| d["mibPerSecond"].as_f64()) {
        parts.push(format!("{speed:.0} MiB/s"));
    }
    if let Some(d) = data("concurrent-kernels") {
        parts.push(format!(
            "{}/{} kernels at once",
            d["answered"], d["kernels"]
        ));
    }
    if let Some(secs) = data("cold-start").and_then(|d| d["seconds"].as_f64()) {
        parts.push(format!("cold start {secs:.2} s"));
    }
    let failed: Vec<&str> = extended
        .iter()
        .filter(|s| matches!(s.status, StepStatus::Failed { .. }))
        .map(|s| check_name(s))
        .collect();
    if !failed.is_empty() {
        parts.push(format!("failed: {}", failed.join(", ")));
    }
    if !skipped.is_empty() {
        parts.push(format!("skipped: {}", skipped.join(", ")));
    }
    if parts.is_empty() {
        format!(
            "{}/{} passed",
            extended.len() - failed.len(),
            extended.len()
        )
    } else {
        parts.join("; ")
    }
}

/// How many secrets every scenario found, and where the first was; with none, what the
/// scan covered: `0 · partial (uid 1000, 8 unreadable)` or `0 · full (uid 0, 5120 files)`.
fn secrets(scenarios: &[&ScenarioResult]) -> String {
    let mut found = scenarios
        .iter()
        .flat_map(|scenario| &scenario.secrets_found);
    match found.next() {
        Some(first) => format!("{}: {first}", 1 + found.count()),
        None => step_cell(scenarios, "secrets-scan", |_| {
            // What the scan covered; a partial one first: a root-only secret would not be seen.
            let mut coverages: Vec<_> = scenarios
                .iter()
                .filter_map(|s| s.secrets_scan.as_ref())
                .collect();
            coverages.sort_by_key(|coverage| !coverage.partial());
            match coverages.first() {
                Some(coverage) => format!("0 · {}", coverage.describe()),
                None => "0".to_owned(),
            }
        }),
    }
}

/// How many resources every scenario left behind, as the provider lists them; where it
/// cannot list the artifacts a run built (`Capabilities::artifacts_listed`), the cell says so.
fn leaked(scenarios: &[&ScenarioResult]) -> String {
    let leaked: usize = scenarios
        .iter()
        .map(|scenario| scenario.leaked_resources.len())
        .sum();
    // A kind the provider cannot list is never counted as 0.
    let unlisted = scenarios
        .iter()
        .any(|s| s.capabilities.as_ref().is_some_and(|c| !c.artifacts_listed));
    let note = if unlisted {
        " · built artifacts: the API lists none, not counted"
    } else {
        ""
    };
    if leaked > 0 {
        format!("{leaked}{note}")
    } else {
        step_cell(scenarios, "cleanup", |_| format!("0{note}"))
    }
}

/// "pass", or "fail" naming each failed scenario's first failed step.
fn outcome(scenarios: &[&ScenarioResult]) -> String {
    let failures: Vec<String> = scenarios
        .iter()
        .filter_map(|scenario| {
            let step = scenario
                .steps
                .iter()
                .find(|step| matches!(step.status, StepStatus::Failed { .. }))?;
            let repeated = scenarios
                .iter()
                .filter(|other| other.scenario == scenario.scenario)
                .count()
                > 1;
            Some(if repeated {
                format!(
                    "{} #{}: {}",
                    scenario.scenario, scenario.repetition, step.step
                )
            } else if scenarios.len() > 1 {
                format!("{}: {}", scenario.scenario, step.step)
            } else {
                step.step.clone()
            })
        })
        .collect();
    if failures.is_empty() {
        "pass".to_owned()
    } else {
        format!("fail ({})", failures.join(", "))
    }
}

/// The first step named `name`: `passed` of it when it passed, else
/// "failed" or "skipped"; "—" when no scenario has it.
fn step_cell(
    scenarios: &[&ScenarioResult],
    name: &str,
    passed: impl FnOnce(&StepResult) -> String,
) -> String {
    match scenarios.iter().find_map(|scenario| scenario.step(name)) {
        None => NOTHING.to_owned(),
        Some(step) => match step.status {
            StepStatus::Passed => passed(step),
            StepStatus::Failed { .. } => "failed".to_owned(),
            StepStatus::Skipped { .. } => "skipped".to_owned(),
        },
    }
}

/// The duration of the first step named `name`, in seconds to `decimals` decimals, when it
/// passed; else "failed" or "skipped"; "—" when no scenario has it.
fn step_duration<'a>(scenarios: &[&'a ScenarioResult], name: &str, decimals: usize) -> Timed<'a> {
    match scenarios
        .iter()
        .find_map(|scenario| Some((*scenario, scenario.step(name)?)))
    {
        None => Timed::Text(NOTHING.to_owned()),
        Some((scenario, step)) => match step.status {
            StepStatus::Passed => Timed::value(scenario, seconds(step.duration, decimals)),
            StepStatus::Failed { .. } => Timed::Text("failed".to_owned()),
            StepStatus::Skipped { .. } => Timed::Text("skipped".to_owned()),
        },
    }
}

/// A timing in seconds to two decimals, with its poll interval when it was polled.
fn timing_cell(timing: &Timing) -> String {
    let duration = seconds(timing.duration, 2);
    match timing.resolution {
        Some(poll) => format!("{duration} (polled every {} ms)", poll.as_millis()),
        None => duration,
    }
}

/// `duration` in seconds with `decimals` decimals, such as `12.3 s`.
fn seconds(duration: Duration, decimals: usize) -> String {
    format!("{:.decimals$} s", duration.as_secs_f64())
}

/// The first `keep` characters of `text`, followed by "…" when there were more.
fn shorten(text: &str, keep: usize) -> String {
    match text.char_indices().nth(keep) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `text` on one line: line breaks become spaces.
fn one_line(text: &str) -> String {
    text.replace("\r\n", " ").replace(['\r', '\n'], " ")
}

/// `text` as a markdown table cell: on one line, with `|` escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', r"\|")
}

#[cfg(test)]
mod tests;
