//! A markdown "at a glance" table comparing variants, and a run summary around it.

use std::time::Duration;

use comfy_table::Table;
use comfy_table::presets::ASCII_MARKDOWN;
use sandbox_providers::{BuildLogMode, Timing};

use crate::results::{RunResults, ScenarioResult, StepResult, StepStatus};
use crate::stats;

/// What a cell holds when the run has nothing to put in it.
const NOTHING: &str = "—";

/// The cross-step timing from creating a sandbox to the first correct result.
const CREATE_TO_FIRST_RESULT: &str = "create-to-first-result";

/// The longest a failed shutdown's cell runs before it is cut short.
const SHUTDOWN_FAILURE_CHARS: usize = 60;

/// How many characters of an artifact id the table shows.
const ARTIFACT_ID_CHARS: usize = 19;

/// How one variant's scenarios fill a row's cell.
type Fill = fn(&[&ScenarioResult]) -> String;

/// Every row: its label and how its cells are filled.
const ROWS: [(&str, Fill); 14] = [
    ("Artifact launched", artifact),
    ("Build", build),
    ("Build logs", build_logs),
    ("Create to first 1+1", create_to_first_result),
    ("Floor: python3 in a fresh container", |s| {
        floor(s, "floor-python3")
    }),
    ("Floor: kernel's first answer", |s| floor(s, "floor-kernel")),
    ("Burst: create to first 1+1", burst),
    ("Restart", restart),
    ("Shutdown", shutdown),
    ("Doctor and core tier", core_tier),
    ("Extended tier", extended_tier),
    ("Secrets found", secrets),
    ("Resources leaked", leaked),
    ("Scenario", outcome),
];

/// Renders a markdown table with one column per variant, in order of first
/// appearance, and one row per measurement.
///
/// Where a variant ran several scenarios, each cell comes from the first of
/// them that has the step or timing the row shows; "Secrets found",
/// "Resources leaked" and "Scenario" count every scenario. Missing values are
/// "—", steps that did not run are "skipped", and `|` in cells is escaped.
/// Where that scenario ran more than once, the build, create-to-first-1+1, restart and
/// shutdown cells show p50, p90 and the success count over its repetitions, a failed
/// attempt counting as +∞ (see [`crate::stats`]).
pub fn render(results: &RunResults) -> String {
    let (variants, rows) = grid(results);
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN).force_no_tty();
    table.set_header(std::iter::once(String::new()).chain(variants.iter().map(|v| cell(v))));
    for (label, cells) in rows {
        table.add_row(std::iter::once(label.to_owned()).chain(cells.iter().map(|c| cell(c))));
    }
    table.to_string()
}

/// What [`render`] shows, before markdown: the variants in order of first appearance, and
/// each row's label with one cell per variant, as plain text.
pub(crate) fn grid(results: &RunResults) -> (Vec<String>, Vec<(&'static str, Vec<String>)>) {
    let variants = super::by_variant(results);
    let rows = ROWS
        .iter()
        .map(|(label, fill)| {
            let cells = variants
                .iter()
                .map(|(_, scenarios)| fill(scenarios))
                .collect();
            (*label, cells)
        })
        .collect();
    let names = variants
        .into_iter()
        .map(|(variant, _)| variant.to_owned())
        .collect();
    (names, rows)
}

/// Renders a markdown document: a title naming the run, its provenance, the
/// [`render`] table, then for each variant × scenario (× repetition, when it ran more than
/// once) its failed and skipped
/// steps with their reasons (or "all steps passed"), secrets found and
/// resources leaked.
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
        lines.push(if repeated {
            format!(
                "## {} / {} (repetition {})",
                scenario.variant, scenario.scenario, scenario.repetition
            )
        } else {
            format!("## {} / {}", scenario.variant, scenario.scenario)
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
    } else if bullets.is_empty() {
        bullets.push("- all steps passed".to_owned());
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
fn artifact(scenarios: &[&ScenarioResult]) -> String {
    scenarios
        .iter()
        .find_map(|scenario| scenario.artifact_id.as_deref())
        .map_or_else(|| NOTHING.to_owned(), |id| shorten(id, ARTIFACT_ID_CHARS))
}

/// The build step's duration, to a tenth of a second.
fn build(scenarios: &[&ScenarioResult]) -> String {
    repeated_step(scenarios, "build")
        .unwrap_or_else(|| step_cell(scenarios, "build", |step| seconds(step.duration, 1)))
}

/// Where the first scenario with `has` ran more than once and measured `metric` more than
/// once: `p50 6.30 s · p90 failed · 7/10 ok` over all its repetitions.
fn repeated(
    scenarios: &[&ScenarioResult],
    has: impl Fn(&ScenarioResult) -> bool,
    metric: &str,
) -> Option<String> {
    let first = scenarios.iter().find(|scenario| has(scenario))?;
    let reps: Vec<&ScenarioResult> = scenarios
        .iter()
        .filter(|scenario| scenario.scenario == first.scenario)
        .copied()
        .collect();
    let attempts = stats::attempts(&reps, metric);
    if attempts.len() < 2 {
        return None;
    }
    let summary = stats::Summary::of(&attempts)?;
    Some(format!(
        "p50 {} · p90 {} · {}/{} ok",
        summary.p50, summary.p90, summary.successes, summary.n
    ))
}

/// [`repeated`] for the duration of the step `name`.
fn repeated_step(scenarios: &[&ScenarioResult], name: &str) -> Option<String> {
    repeated(
        scenarios,
        |scenario| scenario.step(name).is_some(),
        &format!("{}{name}", stats::STEP_PREFIX),
    )
}

/// A burst's launches, each timed from create to first 1+1, over every repetition of the
/// first scenario that burst: `p50 · p90 · p99 · k/n ok`, a failed launch counting as +∞.
fn burst(scenarios: &[&ScenarioResult]) -> String {
    let Some(first) = scenarios.iter().find(|scenario| {
        scenario
            .samples
            .iter()
            .any(|sample| sample.name == CREATE_TO_FIRST_RESULT)
    }) else {
        return NOTHING.to_owned();
    };
    let reps: Vec<&ScenarioResult> = scenarios
        .iter()
        .filter(|scenario| scenario.scenario == first.scenario)
        .copied()
        .collect();
    match stats::Summary::of(&stats::attempts(&reps, CREATE_TO_FIRST_RESULT)) {
        Some(summary) => format!(
            "p50 {} · p90 {} · p99 {} · {}/{} ok",
            summary.p50, summary.p90, summary.p99, summary.successes, summary.n
        ),
        None => NOTHING.to_owned(),
    }
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
fn create_to_first_result(scenarios: &[&ScenarioResult]) -> String {
    let has = |scenario: &ScenarioResult| {
        scenario.step("first-result").is_some() || scenario.timing(CREATE_TO_FIRST_RESULT).is_some()
    };
    if let Some(cell) = repeated(scenarios, has, CREATE_TO_FIRST_RESULT) {
        return cell;
    }
    let cell = scenarios.iter().find_map(|scenario| {
        let status = scenario.step("first-result").map(|step| &step.status);
        match (status, scenario.timing(CREATE_TO_FIRST_RESULT)) {
            (Some(StepStatus::Failed { .. }), _) => Some("failed".to_owned()),
            (_, Some(timing)) => Some(timing_cell(timing)),
            (Some(StepStatus::Skipped { .. }), None) => Some("skipped".to_owned()),
            (Some(StepStatus::Passed) | None, None) => None,
        }
    });
    cell.unwrap_or_else(|| NOTHING.to_owned())
}

/// The first-result step's timing `name`.
fn floor(scenarios: &[&ScenarioResult], name: &str) -> String {
    scenarios
        .iter()
        .filter_map(|scenario| scenario.step("first-result"))
        .find_map(|step| step.timings.iter().find(|timing| timing.name == name))
        .map_or_else(|| NOTHING.to_owned(), timing_cell)
}

/// The restart step's duration.
fn restart(scenarios: &[&ScenarioResult]) -> String {
    repeated_step(scenarios, "restart")
        .unwrap_or_else(|| step_cell(scenarios, "restart", |step| seconds(step.duration, 2)))
}

/// The shutdown step's duration and, from its log, how the sandbox ended.
fn shutdown(scenarios: &[&ScenarioResult]) -> String {
    if let Some(cell) = repeated_step(scenarios, "shutdown") {
        return cell;
    }
    let Some(step) = scenarios
        .iter()
        .find_map(|scenario| scenario.step("shutdown"))
    else {
        return NOTHING.to_owned();
    };
    match &step.status {
        StepStatus::Passed => {
            let duration = seconds(step.duration, 2);
            match step
                .log
                .iter()
                .find_map(|line| line.strip_prefix("ending: "))
            {
                // Never shown as a graceful exit: only the API call's end was seen.
                Some(crate::runner::NOT_OBSERVABLE) => {
                    format!("ended through the API in {duration}; exit on SIGTERM not observable")
                }
                Some(ending) => format!("{duration}, {ending}"),
                None => duration,
            }
        }
        StepStatus::Failed { reason } => {
            shorten(&format!("failed: {reason}"), SHUTDOWN_FAILURE_CHARS)
        }
        StepStatus::Skipped { .. } => "skipped".to_owned(),
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

/// How many secrets every scenario found, and where the first was.
fn secrets(scenarios: &[&ScenarioResult]) -> String {
    let mut found = scenarios
        .iter()
        .flat_map(|scenario| &scenario.secrets_found);
    match found.next() {
        Some(first) => format!("{}: {first}", 1 + found.count()),
        None => step_cell(scenarios, "secrets-scan", |_| "0".to_owned()),
    }
}

/// How many resources every scenario left behind.
fn leaked(scenarios: &[&ScenarioResult]) -> String {
    let leaked: usize = scenarios
        .iter()
        .map(|scenario| scenario.leaked_resources.len())
        .sum();
    if leaked > 0 {
        leaked.to_string()
    } else {
        step_cell(scenarios, "cleanup", |_| "0".to_owned())
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
mod tests {
    use sandbox_providers::Resource;

    use super::*;
    use crate::report::fixture::{
        failed, run, scenario, skipped, step, timing, two_variants, with_repetitions,
    };

    /// The cells of a markdown table row, split on unescaped `|`, trimmed.
    fn cells(line: &str) -> Vec<String> {
        let mut cells = vec![String::new()];
        let mut escaped = false;
        for c in line.chars() {
            match c {
                '|' if !escaped => cells.push(String::new()),
                _ => cells.last_mut().expect("one cell").push(c),
            }
            escaped = c == '\\';
        }
        assert_eq!(cells.first().map(String::as_str), Some(""), "{line}");
        assert_eq!(cells.last().map(String::as_str), Some(""), "{line}");
        cells[1..cells.len() - 1]
            .iter()
            .map(|cell| cell.trim().to_owned())
            .collect()
    }

    /// The cells after the label of the row labelled `label`.
    fn row(table: &str, label: &str) -> Vec<String> {
        table
            .lines()
            .map(cells)
            .find(|cells| cells[0] == label)
            .unwrap_or_else(|| panic!("no row {label} in\n{table}"))[1..]
            .to_vec()
    }

    #[test]
    fn summary_snapshot() {
        let summary = render_summary(&two_variants());
        crate::report::fixture::redacted().bind(|| insta::assert_snapshot!("summary", summary));
    }

    #[test]
    fn summary_with_repetitions_snapshot() {
        let summary = render_summary(&with_repetitions());
        crate::report::fixture::redacted()
            .bind(|| insta::assert_snapshot!("summary_with_repetitions", summary));
    }

    #[test]
    fn repeated_cells_show_percentiles_and_success() {
        let table = render(&with_repetitions());
        assert_eq!(
            row(&table, "Create to first 1+1"),
            ["p50 2.48 s · p90 failed · 2/3 ok", "failed"]
        );
        assert_eq!(
            row(&table, "Build"),
            ["p50 12.35 s · p90 12.36 s · 3/3 ok", "48.7 s"]
        );
        assert_eq!(
            row(&table, "Restart"),
            ["p50 1.24 s · p90 failed · 2/3 ok", "skipped"]
        );
        assert_eq!(
            row(&table, "Scenario"),
            ["fail (lifecycle #3: first-result)", "fail (first-result)"]
        );
    }

    #[test]
    fn table_is_github_markdown() {
        let mut results = two_variants();
        results.scenarios[1].steps[2].status = failed("got `3`\n| not 2 |");
        results.scenarios[1].scenario = "pipe|name".to_owned();
        results.scenarios[1].variant = "e2b|x".to_owned();
        let table = render(&results);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + ROWS.len(), "{table}");
        assert_eq!(cells(lines[0]), ["", r"docker", r"e2b\|x"]);
        assert!(
            cells(lines[1])
                .iter()
                .all(|cell| cell.len() >= 3 && cell.chars().all(|c| c == '-'))
        );
        for line in &lines {
            assert_eq!(cells(line).len(), 3, "{line}");
        }
        let labels: Vec<String> = lines[2..]
            .iter()
            .map(|line| cells(line).remove(0))
            .collect();
        assert_eq!(labels, ROWS.map(|(label, _)| label));
    }

    #[test]
    fn cells_of_the_two_variants() {
        let table = render(&two_variants());
        let expected = [
            (
                "Artifact launched",
                ["sha256:0123456789ab…", "tpl_k3x9w2m1q8v5z7r…"],
            ),
            ("Build", ["12.3 s", "48.7 s"]),
            ("Build logs", ["streamed", "polled"]),
            ("Create to first 1+1", ["2.31 s", "failed"]),
            ("Floor: python3 in a fresh container", ["0.48 s", "—"]),
            ("Floor: kernel's first answer", ["1.62 s", "—"]),
            ("Restart", ["1.23 s", "skipped"]),
            (
                "Shutdown",
                ["0.02 s, exited on SIGTERM, exit code 0", "skipped"],
            ),
            ("Doctor and core tier", ["—", "—"]),
            ("Extended tier", ["—", "—"]),
            ("Secrets found", ["0", "skipped"]),
            ("Resources leaked", ["0", "0"]),
            ("Scenario", ["pass", "fail (first-result)"]),
        ];
        for (label, cells) in expected {
            assert_eq!(row(&table, label), cells, "{label}");
        }
    }

    #[test]
    fn each_cell_comes_from_the_first_scenario_with_its_step() {
        let passed = |name: &str, ms| step(name, StepStatus::Passed, ms, 60, vec![], &[]);
        let secrets = ScenarioResult {
            steps: vec![
                passed("build", 4_000),
                step("secrets-scan", failed("found 2"), 10, 60, vec![], &[]),
                passed("cleanup", 10),
            ],
            secrets_found: vec![
                "REGISTRY_TOKEN at /etc/leak".to_owned(),
                "REGISTRY_TOKEN at image history".to_owned(),
            ],
            leaked_resources: vec![Resource {
                kind: "image".to_owned(),
                id: "sha256:feed".to_owned(),
            }],
            ..scenario("docker", "secrets")
        };
        let lifecycle = ScenarioResult {
            artifact_id: Some("sha256:0abc".to_owned()),
            steps: vec![
                passed("build", 9_000),
                step(
                    "first-result",
                    StepStatus::Passed,
                    10,
                    60,
                    vec![timing("floor-kernel", 1_500, Some(100))],
                    &[],
                ),
                step("shutdown", failed(&"x".repeat(80)), 10, 60, vec![], &[]),
                passed("cleanup", 10),
            ],
            timings: vec![timing(CREATE_TO_FIRST_RESULT, 2_000, None)],
            leaked_resources: vec![Resource {
                kind: "container".to_owned(),
                id: "c1".to_owned(),
            }],
            ..scenario("docker", "lifecycle")
        };
        let table = render(&run(vec![secrets, lifecycle]));
        assert_eq!(row(&table, "Artifact launched"), ["sha256:0abc"]);
        assert_eq!(row(&table, "Build"), ["4.0 s"]);
        assert_eq!(row(&table, "Build logs"), ["—"]);
        assert_eq!(row(&table, "Create to first 1+1"), ["2.00 s"]);
        assert_eq!(
            row(&table, "Floor: kernel's first answer"),
            ["1.50 s (polled every 100 ms)"]
        );
        assert_eq!(row(&table, "Floor: python3 in a fresh container"), ["—"]);
        assert_eq!(row(&table, "Restart"), ["—"]);
        assert_eq!(
            row(&table, "Shutdown"),
            [format!("failed: {}…", "x".repeat(52))]
        );
        assert_eq!(
            row(&table, "Secrets found"),
            ["2: REGISTRY_TOKEN at /etc/leak"]
        );
        assert_eq!(row(&table, "Resources leaked"), ["2"]);
        assert_eq!(
            row(&table, "Scenario"),
            ["fail (secrets: secrets-scan, lifecycle: shutdown)"]
        );
    }

    #[test]
    fn tier_rows_count_checks_that_ran_and_name_failures() {
        let with_data = |name: &str, status: StepStatus, data: serde_json::Value| StepResult {
            data: Some(data),
            ..step(name, status, 10, 60, vec![], &[])
        };
        let core = ScenarioResult {
            steps: vec![
                with_data(
                    "core-1-doctor",
                    failed("doctor rows failed: uid"),
                    serde_json::json!({"rows": 15, "rowsPassed": 14}),
                ),
                step("core-2-identity", failed("uid is 0"), 10, 60, vec![], &[]),
                step("core-3-python", StepStatus::Passed, 10, 60, vec![], &[]),
                step(
                    "core-4-kernel",
                    skipped("the variant was not ready"),
                    0,
                    60,
                    vec![],
                    &[],
                ),
            ],
            ..scenario("docker", "core-tier")
        };
        let extended = ScenarioResult {
            steps: vec![
                with_data(
                    "extended-12-throughput",
                    StepStatus::Passed,
                    serde_json::json!({"mibPerSecond": 612.34}),
                ),
                with_data(
                    "extended-13-cold-start",
                    failed("5.00 s, over"),
                    serde_json::json!({"seconds": 5.0}),
                ),
                with_data(
                    "extended-14-concurrent-kernels",
                    StepStatus::Passed,
                    serde_json::json!({"answered": 4, "kernels": 4}),
                ),
            ],
            ..scenario("docker", "extended-tier")
        };
        let table = render(&run(vec![core, extended]));
        assert_eq!(
            row(&table, "Doctor and core tier"),
            ["1/3, doctor 14/15 rows; failed: doctor, identity; skipped: kernel"]
        );
        assert_eq!(
            row(&table, "Extended tier"),
            ["612 MiB/s; 4/4 kernels at once; cold start 5.00 s; failed: cold-start"]
        );
        let skipped_only = ScenarioResult {
            steps: vec![step(
                "core-1-doctor",
                skipped("the variant was not ready"),
                0,
                60,
                vec![],
                &[],
            )],
            ..scenario("docker", "core-tier")
        };
        assert_eq!(
            row(&render(&run(vec![skipped_only])), "Doctor and core tier"),
            ["skipped"]
        );
    }

    #[test]
    fn summary_lists_skips_secrets_and_leaks() {
        let quiet = ScenarioResult {
            steps: vec![
                step("build", StepStatus::Passed, 1, 1, vec![], &[]),
                step(
                    "restart",
                    skipped("this variant cannot restart"),
                    0,
                    1,
                    vec![],
                    &[],
                ),
            ],
            secrets_found: vec!["TOKEN at /root/.netrc".to_owned()],
            leaked_resources: vec![Resource {
                kind: "volume".to_owned(),
                id: "v1".to_owned(),
            }],
            ..scenario("modal", "lifecycle")
        };
        let summary = render_summary(&run(vec![quiet, scenario("modal", "empty")]));
        let tail = summary
            .split_once("## modal / lifecycle\n\n")
            .expect("a section")
            .1;
        assert_eq!(
            tail,
            "- `restart` skipped: this variant cannot restart\n\
             - secret found: TOKEN at /root/.netrc\n\
             - resource leaked: volume `v1`\n\
             \n\
             ## modal / empty\n\
             \n\
             - no steps ran\n"
        );
    }

    #[test]
    fn a_shutdown_through_the_api_never_reads_as_a_graceful_exit() {
        let ending = format!("ending: {}", crate::runner::NOT_OBSERVABLE);
        let cloud = ScenarioResult {
            steps: vec![step(
                "shutdown",
                StepStatus::Passed,
                520,
                30,
                vec![],
                &[ending.as_str()],
            )],
            ..scenario("e2b", "lifecycle")
        };
        let table = render(&run(vec![cloud]));
        let cell = &row(&table, "Shutdown")[0];
        assert_eq!(
            cell,
            "ended through the API in 0.52 s; exit on SIGTERM not observable"
        );
        assert!(!cell.contains("exited on SIGTERM"), "{cell}");
    }

    #[test]
    fn shorten_keeps_whole_characters() {
        assert_eq!(
            shorten("sha256:0123456789abcdef", ARTIFACT_ID_CHARS),
            "sha256:0123456789ab…"
        );
        assert_eq!(
            shorten("sha256:0123456789ab", ARTIFACT_ID_CHARS),
            "sha256:0123456789ab"
        );
        assert_eq!(shorten("ééé", 2), "éé…");
    }
}
