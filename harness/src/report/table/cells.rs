//! Each row's cell: what one variant's scenarios say for that row, with where it came from.

use super::*;

/// The first artifact id, shortened.
/// A reference by digest (`<registry>/<repository>@sha256:…`) shows its digest.
pub(super) fn artifact(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn base_chain(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn registry_transfer<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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
pub(super) fn build<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    let built: Vec<&ScenarioResult> = scenarios
        .iter()
        .filter(|s| s.step("build").is_none_or(|b| b.reused.is_none()))
        .copied()
        .collect();
    repeated_step(&built, "build").unwrap_or_else(|| step_duration(&built, "build", 1))
}

/// The rebuild step's duration (the same environment built again with the provider's
/// cache), to a tenth of a second.
pub(super) fn rebuild<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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
pub(super) fn burst<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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
pub(super) fn launch_mode<'a>(scenarios: &[&'a ScenarioResult], step: &str) -> Timed<'a> {
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
pub(super) fn lifetime<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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

pub(super) fn readiness(scenarios: &[&ScenarioResult]) -> String {
    match board::readiness(scenarios) {
        None => NOTHING.to_owned(),
        Some(r) => format!(
            "×{:.1} median, ×{:.1} worst ({} launches)",
            r.median, r.worst, r.launches
        ),
    }
}

/// The label of the orphan audit's row.
pub(super) const ORPHANS_ROW: &str = "Orphans per 1,000 creates";

/// The variant's orphan audit ([`crate::model::results::OrphanAudit`]): `0 of 17 sandbox
/// creates`, or `2 of 17 sandbox creates: 117.6 per 1,000, swept 2 (container 3f2a…)`;
/// `—` where none was made (a replay, an emulated or interrupted run).
pub(super) fn orphan_cell(results: &RunResults, variant: &str) -> String {
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
pub(super) fn base_credential(scenarios: &[&ScenarioResult]) -> String {
    scenarios
        .iter()
        .find_map(|scenario| scenario.base_credential.as_deref())
        .unwrap_or(NOTHING)
        .to_owned()
}

/// How build logs arrive, as the variant's capabilities declare.
pub(super) fn build_logs(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn create_to_first_result<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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
pub(super) fn floor<'a>(scenarios: &[&'a ScenarioResult], name: &str) -> Timed<'a> {
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
pub(super) fn restart<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
    repeated_step(scenarios, "restart").unwrap_or_else(|| step_duration(scenarios, "restart", 2))
}

/// The shutdown step's duration and, from its log, how the sandbox ended.
pub(super) fn shutdown<'a>(scenarios: &[&'a ScenarioResult]) -> Timed<'a> {
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
pub(super) fn core_tier(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn extended_tier(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn secrets(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn leaked(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn outcome(scenarios: &[&ScenarioResult]) -> String {
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
pub(super) fn seconds(duration: Duration, decimals: usize) -> String {
    format!("{:.decimals$} s", duration.as_secs_f64())
}

/// The first `keep` characters of `text`, followed by "…" when there were more.
pub(super) fn shorten(text: &str, keep: usize) -> String {
    match text.char_indices().nth(keep) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `text` on one line: line breaks become spaces.
pub(super) fn one_line(text: &str) -> String {
    text.replace("\r\n", " ").replace(['\r', '\n'], " ")
}

/// `text` as a markdown table cell: on one line, with `|` escaped.
pub(super) fn cell(text: &str) -> String {
    one_line(text).replace('|', r"\|")
}
