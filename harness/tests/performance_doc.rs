//! docs/measurements/performance.md's numbers are generated, not pasted:
//! `bench/performance.py` keeps every measurement in `docs/measurements/performance-runs/`
//! (the default runs' wall times and redacted results.json, the reference comparison, the
//! overhead bench's medians), and this test renders the document's tables from that
//! folder and fails when the document differs.
//! `SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test performance_doc` writes
//! them after a new measurement.

#[path = "common/generated_section.rs"]
mod generated_section;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_matrix::model::results::{self, RunResults};
use serde::Deserialize;

/// The line before the generated part of docs/measurements/performance.md.
const BEGIN: &str = "<!-- performance: generated from docs/measurements/performance-runs/ by `SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test performance_doc`; not edited by hand -->";
/// The line after it.
const END: &str = "<!-- /performance -->";

/// The targets this page judges the measurements against.
const DEFAULT_RUN_TARGET: Duration = Duration::from_secs(90);
const NO_BASE_TARGET: Duration = Duration::from_secs(300);
const FLOOR_RATIO_TARGET: f64 = 1.3;
const CORE_TIER_RATIO_TARGET: f64 = 0.5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// `measured.json`: when, where and the wall times.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Measured {
    date: String,
    revision: String,
    build: String,
    machine: Machine,
    default_run_s: Vec<f64>,
    no_base_run_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Machine {
    cpus: u32,
    memory_gib: u32,
    docker: String,
    storage_driver: String,
    cgroup: String,
}

/// `reference-core-tier.json`, written by `bench/compare_reference_core_tier.py --json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reference {
    repeat: usize,
    reference: String,
    checks: Vec<String>,
    runs: BTreeMap<String, Vec<SuiteRun>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteRun {
    create_to_first_s: f64,
    checks_wall_s: f64,
    passed: String,
    check_s: BTreeMap<String, f64>,
}

/// One variant's line of `overhead.json`, written by the overhead bench.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Overhead {
    variant: String,
    what: String,
    runs: usize,
    delay_ms: u64,
    harness_p50_ms: f64,
    bare_p50_ms: f64,
    overhead_p50_ms: f64,
    budget_ms: u64,
}

/// The median and range of `values`, which are not empty.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    (median, sorted[0], sorted[n - 1])
}

/// `12.3 s, n = 3 (11.9–13.0)`, or the one value with `n = 1`.
fn seconds(values: &[f64]) -> String {
    let (median, low, high) = spread(values);
    if values.len() == 1 {
        format!("{median:.1} s, n = 1")
    } else {
        format!("{median:.1} s, n = {} ({low:.1}–{high:.1})", values.len())
    }
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not read: {e}", path.display())),
    )
}

/// The default runs' results, in order.
fn default_runs(dir: &Path, n: usize) -> Vec<RunResults> {
    (1..=n)
        .map(|i| {
            let path = dir.join(format!("default-{i}.results.json"));
            results::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// Seconds of every step of `variant`'s measured scenarios in `run`.
fn step_seconds(run: &RunResults, keep: impl Fn(&str, bool) -> bool) -> f64 {
    run.scenarios
        .iter()
        .filter(|s| keep(&s.variant, s.source.is_measured()))
        .flat_map(|s| &s.steps)
        .map(|step| step.duration.as_secs_f64())
        .sum()
}

/// The longest `build` step of `variant` in `run` (the one that built; the others reused).
fn build_seconds(run: &RunResults, variant: &str) -> Option<f64> {
    run.scenarios
        .iter()
        .filter(|s| s.variant == variant && s.source.is_measured())
        .flat_map(|s| &s.steps)
        .filter(|step| step.step == "build" && step.reused.is_none())
        .map(|step| step.duration.as_secs_f64())
        .max_by(f64::total_cmp)
}

/// Every docker create to first 1+1 of `run` over its run's kernel floor.
fn floor_ratios(run: &RunResults) -> Vec<f64> {
    let docker: Vec<_> = run
        .scenarios
        .iter()
        .filter(|s| s.variant == "docker" && s.source.is_measured())
        .collect();
    let timing = |s: &&results::ScenarioResult, name: &str| {
        s.timings
            .iter()
            .find(|t| t.name == name && !t.duration.is_zero())
            .map(|t| t.duration.as_secs_f64())
    };
    // Measured once per artifact and run, in the first-result step that measured it.
    let Some(floor) = docker.iter().find_map(|s| {
        s.step("first-result")?
            .timings
            .iter()
            .find(|t| t.name == "floor-kernel" && !t.duration.is_zero())
            .map(|t| t.duration.as_secs_f64())
    }) else {
        return Vec::new();
    };
    docker
        .iter()
        .filter_map(|s| timing(s, "create-to-first-result"))
        .map(|first| first / floor)
        .collect()
}

/// The generated part of docs/measurements/performance.md.
fn generated() -> String {
    let dir = root().join("docs/measurements/performance-runs");
    let measured: Measured = read(&dir.join("measured.json")).expect(
        "docs/measurements/performance-runs/measured.json (bench/performance.py writes it)",
    );
    let m = &measured.machine;
    let mut out = vec![
        format!(
            "Measured on {} at `{}`, {} build, on a {}-core, {} GiB machine whose Docker Engine ({}, cgroup v{}) uses the {} storage driver. Medians, with the range; n is the number of runs.",
            measured.date,
            measured.revision,
            measured.build,
            m.cpus,
            m.memory_gib,
            m.docker,
            m.cgroup,
            m.storage_driver
        ),
        String::new(),
        "| what | measured | target | how to measure it again |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ];
    // The default run, and where its time goes.
    let runs = default_runs(&dir, measured.default_run_s.len());
    let wall = spread(&measured.default_run_s).0;
    let per_run = |f: &dyn Fn(&RunResults) -> Option<f64>| -> Option<String> {
        let values: Vec<f64> = runs.iter().filter_map(f).collect();
        (values.len() == runs.len() && !values.is_empty()).then(|| seconds(&values))
    };
    let mut live: Vec<&str> = runs
        .iter()
        .flat_map(|r| &r.scenarios)
        .filter(|s| s.source.is_measured())
        .map(|s| s.variant.as_str())
        .collect();
    live.sort();
    live.dedup();
    let mut parts = Vec::new();
    for variant in &live {
        if let Some(steps) = per_run(&|r| Some(step_seconds(r, |v, m| v == *variant && m))) {
            parts.push(format!("{variant}'s steps {steps}"));
        }
    }
    if let Some(replayed) = per_run(&|r| Some(step_seconds(r, |_, m| !m))) {
        parts.push(format!("the replayed variants' steps {replayed}"));
    }
    for variant in &live {
        if let Some(build) = per_run(&|r| build_seconds(r, variant)) {
            parts.push(format!("{variant}'s build {build}"));
        }
    }
    let variants = runs.first().map_or(0, |r| {
        let mut v: Vec<&str> = r.scenarios.iter().map(|s| s.variant.as_str()).collect();
        v.sort();
        v.dedup();
        v.len()
    });
    let scenarios = runs.first().map_or(0, |r| {
        let mut v: Vec<&str> = r.scenarios.iter().map(|s| s.scenario.as_str()).collect();
        v.sort();
        v.dedup();
        v.len()
    });
    out.push(format!(
        "| default `run`, base present | {variants} variants × {scenarios} scenarios ({} live, the others replayed): {}. Where the time goes: {} | under {} s: {} | `time target/release/sandbox-matrix run` |",
        live.join(" and "),
        seconds(&measured.default_run_s),
        parts.join("; "),
        DEFAULT_RUN_TARGET.as_secs(),
        met(wall < DEFAULT_RUN_TARGET.as_secs_f64()),
    ));
    out.push(match measured.no_base_run_s {
        Some(s) => format!(
            "| default `run` with no base image (mmdebstrap from the mirror, the base's build, then the run) | {} | under 5 min: {} | `python3 bench/performance.py --no-base` (removes the base first) |",
            seconds(&[s]),
            met(s < NO_BASE_TARGET.as_secs_f64())
        ),
        None => "| default `run` with no base image | not measured in this folder | under 5 min | `python3 bench/performance.py --no-base` (removes the base first) |".to_owned(),
    });
    let ratios: Vec<f64> = runs.iter().flat_map(floor_ratios).collect();
    out.push(if ratios.is_empty() {
        "| docker create to first 1+1, as a ratio to the kernel's floor | no docker floor in these runs | at most ×1.3 | the table's \"Create to first 1+1\" row |".to_owned()
    } else {
        let (median, low, high) = spread(&ratios);
        format!(
            "| docker create to first 1+1, as a ratio to the kernel's floor | ×{median:.2}, n = {} (×{low:.2}–×{high:.2}; every docker scenario with a first result, over its run's floor) | at most ×{FLOOR_RATIO_TARGET}: {} | the table's \"Create to first 1+1\" row, or `create-to-first-result` over `floor-kernel` in results.json |",
            ratios.len(),
            met(median <= FLOOR_RATIO_TARGET)
        )
    });
    let reference: Option<Reference> = read(&dir.join("reference-core-tier.json"));
    let wall_of = |r: &Reference, suite: &str| {
        let values: Vec<f64> = r.runs[suite].iter().map(|x| x.checks_wall_s).collect();
        spread(&values).0
    };
    out.push(match &reference {
        Some(r) => {
            let (ours, theirs) = (wall_of(r, "sandbox-matrix"), wall_of(r, "reference"));
            format!(
                "| core tier's checks, sandbox-matrix / the reference suite ({}) | ×{:.2} ({ours:.2} s against {theirs:.2} s), n = {} each, interleaved | at most ×{CORE_TIER_RATIO_TARGET}: {} | `bench/compare_reference_core_tier.py`, below |",
                r.reference,
                ours / theirs,
                r.repeat,
                met(ours / theirs <= CORE_TIER_RATIO_TARGET)
            )
        }
        None => "| core tier's checks, sandbox-matrix / the reference suite | not measured in this folder | at most ×0.5 | `bench/compare_reference_core_tier.py` |".to_owned(),
    });
    let overhead: Option<Vec<Overhead>> = read(&dir.join("overhead.json"));
    out.push(match &overhead {
        Some(lines) if !lines.is_empty() => {
            let each: Vec<String> = lines
                .iter()
                .map(|o| {
                    format!(
                        "{} {:+.2} ms ({}; {:.2} against {:.2} ms, {} runs each, responses held {} ms)",
                        o.variant,
                        o.overhead_p50_ms,
                        o.what,
                        o.harness_p50_ms,
                        o.bare_p50_ms,
                        o.runs,
                        o.delay_ms
                    )
                })
                .collect();
            let budget = lines[0].budget_ms;
            format!(
                "| what the harness adds to create to first result, at p50 | {} | at most {budget} ms: {} | `cargo bench -p sandbox-matrix --bench overhead` |",
                each.join("; "),
                met(lines.iter().all(|o| o.overhead_p50_ms <= o.budget_ms as f64))
            )
        }
        _ => "| what the harness adds to create to first result, at p50 | not measured in this folder | at most 5 ms | `cargo bench -p sandbox-matrix --bench overhead` |".to_owned(),
    });
    if let Some(r) = &reference {
        out.push(String::new());
        out.push(format!(
            "The core tier against the reference suite, `bench/compare_reference_core_tier.py --repeat {}`, interleaved on the same image; median (range):",
            r.repeat
        ));
        out.push(String::new());
        out.push(
            "| suite | core tier passed | create to first 1+1 | wall time of checks 1-9 |"
                .to_owned(),
        );
        out.push("|---|---|---|---|".to_owned());
        let cell = |values: Vec<f64>| {
            let (median, low, high) = spread(&values);
            format!("{median:.2} s ({low:.2}–{high:.2})")
        };
        let suites = [
            ("reference", r.reference.as_str()),
            ("sandbox-matrix", "sandbox-matrix"),
        ];
        for (key, name) in suites {
            let runs = &r.runs[key];
            out.push(format!(
                "| {name} | {} | {} | {} |",
                runs.last().map_or("", |x| x.passed.as_str()),
                cell(runs.iter().map(|x| x.create_to_first_s).collect()),
                cell(runs.iter().map(|x| x.checks_wall_s).collect()),
            ));
        }
        out.push(String::new());
        out.push("Each check's own time, median (the reference runs them one after another; sandbox-matrix runs 1-6 and 9 at once, then 7 and 8):".to_owned());
        out.push(String::new());
        out.push(format!("| check | {} | sandbox-matrix |", r.reference));
        out.push("|---|---|---|".to_owned());
        for (number, check) in r.checks.iter().enumerate() {
            let cells: Vec<String> = suites
                .iter()
                .map(|(key, _)| {
                    let values: Vec<f64> = r.runs[*key]
                        .iter()
                        .filter_map(|x| x.check_s.get(check).copied())
                        .collect();
                    if values.is_empty() {
                        "did not run".to_owned()
                    } else {
                        format!("{:.2} s", spread(&values).0)
                    }
                })
                .collect();
            out.push(format!(
                "| {} {check} | {} |",
                number + 1,
                cells.join(" | ")
            ));
        }
    }
    out.join("\n")
}

#[test]
fn the_performance_tables_are_what_the_committed_measurements_render_to() {
    generated_section::check(
        &root().join("docs/measurements/performance.md"),
        BEGIN,
        END,
        &generated(),
        "docs/measurements/performance-runs/",
    );
}

#[test]
fn the_measurements_name_no_machine() {
    let dir = root().join("docs/measurements/performance-runs");
    let machine = [
        Some(root().display().to_string()),
        std::env::var("HOME").ok(),
    ];
    for entry in std::fs::read_dir(&dir).expect("docs/measurements/performance-runs/") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a text file");
        for place in machine.iter().flatten().filter(|p| p.len() > 1) {
            assert!(
                !text.contains(&format!("{place}/")),
                "{} names {place}",
                path.display()
            );
        }
        if path.to_string_lossy().ends_with(".results.json") {
            let run = results::load(&path).expect("it loads");
            assert_eq!(run.provenance.host, "[host]", "{}", path.display());
        }
    }
}
