//! What renders a run for people and CI: the terminal's lines as its events come
//! ([`terminal`]), and from its results ([`crate::model::results`]) JUnit XML
//! ([`junit`]), a markdown comparison table with a run summary ([`table`]), an HTML page
//! with charts ([`html`]), and the run folder that holds them all ([`run_folder`]),
//! checked before the run ends for every credential it used ([`self_scan`]).

pub mod html;
pub mod junit;
pub mod run_folder;
pub mod self_scan;
pub mod table;
pub mod terminal;

use crate::model::results::{Class, RunResults, ScenarioResult};

/// The scenarios of a run grouped by variant, a variant's measured (live, recorded),
/// replayed and emulated results apart ([`Class`]), so that neither a replay nor a run
/// against our emulator ever shares a column, suite or verdict with a measurement of the
/// provider: groups in order of first appearance, each group's scenarios in input order.
fn by_variant(results: &RunResults) -> Vec<(&str, Vec<&ScenarioResult>)> {
    let mut groups: Vec<(&str, Class, Vec<&ScenarioResult>)> = Vec::new();
    for scenario in &results.scenarios {
        let class = scenario.source.class();
        match groups
            .iter_mut()
            .find(|(variant, c, _)| *variant == scenario.variant && *c == class)
        {
            Some((_, _, scenarios)) => scenarios.push(scenario),
            None => groups.push((&scenario.variant, class, vec![scenario])),
        }
    }
    groups
        .into_iter()
        .map(|(variant, _, scenarios)| (variant, scenarios))
        .collect()
}

/// A two-variant run for the reporters' tests, and the insta settings that
/// redact its times and ids.
#[cfg(test)]
pub(crate) mod fixture {
    use std::time::Duration;

    use sandbox_providers::{BuildLogMode, Capabilities, RestartKind, ShutdownObservation, Timing};

    use crate::model::results::{
        Provenance, RESULTS_SCHEMA_VERSION, Replay, ReplayPace, RunResults, ScenarioResult, Source,
        StepResult, StepStatus,
    };

    const SKIPPED: &str = "an earlier step failed: first-result";

    /// A timing of `ms` milliseconds, polled every `poll_ms` when given.
    pub(crate) fn timing(name: &str, ms: u64, poll_ms: Option<u64>) -> Timing {
        Timing {
            name: name.to_owned(),
            duration: Duration::from_millis(ms),
            resolution: poll_ms.map(Duration::from_millis),
        }
    }

    /// A step that took `ms` milliseconds of a `budget_s` second budget.
    pub(crate) fn step(
        name: &str,
        status: StepStatus,
        ms: u64,
        budget_s: u64,
        timings: Vec<Timing>,
        log: &[&str],
    ) -> StepResult {
        StepResult {
            step: name.to_owned(),
            status,
            duration: Duration::from_millis(ms),
            started: None,
            budget: Duration::from_secs(budget_s),
            timings,
            log: log.iter().map(|line| (*line).to_owned()).collect(),
            data: None,
            reused: None,
        }
    }

    /// A failed status with `reason`.
    pub(crate) fn failed(reason: &str) -> StepStatus {
        StepStatus::Failed {
            reason: reason.to_owned(),
        }
    }

    /// A skipped status with `reason`.
    pub(crate) fn skipped(reason: &str) -> StepStatus {
        StepStatus::Skipped {
            reason: reason.to_owned(),
        }
    }

    /// Capabilities that build, restart as `restart` and deliver build logs as `build_logs`.
    fn capabilities(restart: RestartKind, build_logs: BuildLogMode) -> Option<Capabilities> {
        Some(Capabilities {
            build: true,
            restart,
            build_logs,
            exec_as_root: true,
            doctor_scan: false,
            artifact_metadata: true,
            floor: true,
            concurrent_contexts: 1,
            stateful_code: true,
            shutdown: ShutdownObservation::Signal,
            gpus: 0,
            egress_policy: false,
            artifacts_listed: true,
            provenance: false,
            lifetime: Default::default(),
        })
    }

    /// The source of a result replayed at `pace` from the e2b lifecycle cassette.
    pub(crate) fn replay_source(pace: ReplayPace) -> Source {
        Source::Replay {
            replay: Replay {
                cassette: "fixtures/cassettes/e2b/lifecycle.yaml".to_owned(),
                origin: Some(
                    "authored from e2b/openapi.yml@0.1.0, answered by an emulator".to_owned(),
                ),
                written: Some("2026-11-29".to_owned()),
                pace,
            },
        }
    }

    /// How `run --emulated` describes the e2b emulator.
    pub(crate) const EMULATOR: &str =
        "sandbox-matrix 0.x's e2b emulator over the local Docker engine (20.10.24)";

    /// The source of a result measured against the e2b emulator ([`EMULATOR`]).
    pub(crate) fn emulated_source() -> Source {
        Source::Emulated {
            emulator: EMULATOR.to_owned(),
        }
    }

    /// A live scenario result with no capabilities, steps, timings, leaks or secrets.
    pub(crate) fn scenario(variant: &str, scenario: &str) -> ScenarioResult {
        ScenarioResult {
            variant: variant.to_owned(),
            scenario: scenario.to_owned(),
            source: Source::Live,
            scenario_hash: "5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592"
                .to_owned(),
            artifact_id: None,
            provider_version: None,
            region: None,
            capabilities: None,
            steps: Vec::new(),
            timings: Vec::new(),
            leaked_resources: Vec::new(),
            secrets_found: Vec::new(),
            repetition: 1,
            samples: Vec::new(),
            base_credential: None,
            secrets_scan: None,
            base_chain: None,
            lifetime: None,
        }
    }

    /// A run of `scenarios`.
    pub(crate) fn run(scenarios: Vec<ScenarioResult>) -> RunResults {
        RunResults {
            schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
            provenance: Provenance {
                run_id: "20251129T121314Z-7f3a9c".to_owned(),
                harness_version: "0.1.0".to_owned(),
                host: "ci-runner-07".to_owned(),
                started_at: "2025-11-29T12:13:14.512+00:00".to_owned(),
                base: None,
                shards: Vec::new(),
                partition: None,
            },
            scenarios,
            orphans: Vec::new(),
        }
    }

    /// An all-pass docker lifecycle, live, then an e2b lifecycle replayed at instant pace
    /// whose first result was wrong, so that every later step but cleanup was skipped.
    pub(crate) fn two_variants() -> RunResults {
        let image = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let docker = ScenarioResult {
            artifact_id: Some(image.to_owned()),
            provider_version: Some("Docker Engine 28.3.2 (API 1.51)".to_owned()),
            capabilities: capabilities(RestartKind::Kernel, BuildLogMode::Streamed),
            steps: vec![
                step(
                    "build",
                    StepStatus::Passed,
                    12_345,
                    300,
                    vec![],
                    &[
                        "#1 [internal] load build definition from Dockerfile",
                        "#9 exporting to image",
                        &format!("#9 writing image {image} done"),
                    ],
                ),
                step(
                    "launch",
                    StepStatus::Passed,
                    812,
                    30,
                    vec![timing("container-running", 405, Some(50))],
                    &[],
                ),
                step(
                    "first-result",
                    StepStatus::Passed,
                    2_105,
                    60,
                    vec![
                        timing("kernel-start-to-first-answer", 1_873, None),
                        timing("floor-python3", 482, None),
                        timing("floor-kernel", 1_617, None),
                    ],
                    &["1+1 -> 2"],
                ),
                step(
                    "restart",
                    StepStatus::Passed,
                    1_234,
                    30,
                    vec![timing("kernel-restart-to-first-answer", 1_102, None)],
                    &["1+1 -> 2"],
                ),
                step(
                    "secrets-scan",
                    StepStatus::Passed,
                    903,
                    60,
                    vec![],
                    &["scanned env, labels, history and the filesystem as root: nothing found"],
                ),
                step(
                    "shutdown",
                    StepStatus::Passed,
                    21,
                    15,
                    vec![],
                    &["ending: exited on SIGTERM, exit code 0"],
                ),
                step(
                    "cleanup",
                    StepStatus::Passed,
                    350,
                    60,
                    vec![],
                    &[
                        "removed container 9c2e41d07a5b",
                        &format!("removed image {image}"),
                    ],
                ),
            ],
            timings: vec![timing("create-to-first-result", 2_310, None)],
            base_credential: Some("ECR login token, made for this run".to_owned()),
            secrets_scan: None,
            base_chain: None,
            lifetime: None,
            ..scenario("docker", "lifecycle")
        };
        let e2b = ScenarioResult {
            artifact_id: Some("tpl_k3x9w2m1q8v5z7r0p4s6".to_owned()),
            capabilities: capabilities(RestartKind::Sandbox, BuildLogMode::Polled),
            steps: vec![
                step(
                    "build",
                    StepStatus::Passed,
                    48_700,
                    600,
                    vec![],
                    &["template tpl_k3x9w2m1q8v5z7r0p4s6 ready"],
                ),
                step(
                    "launch",
                    StepStatus::Passed,
                    640,
                    30,
                    vec![timing("sandbox-running", 600, Some(250))],
                    &[],
                ),
                step(
                    "first-result",
                    failed("expected `2`, got `3`"),
                    1_904,
                    60,
                    vec![],
                    &["1+1 -> 3"],
                ),
                step("restart", skipped(SKIPPED), 0, 30, vec![], &[]),
                step("secrets-scan", skipped(SKIPPED), 0, 60, vec![], &[]),
                step("shutdown", skipped(SKIPPED), 0, 15, vec![], &[]),
                step(
                    "cleanup",
                    StepStatus::Passed,
                    512,
                    60,
                    vec![],
                    &["killed sandbox i7tq2v0dm3w5"],
                ),
            ],
            source: replay_source(ReplayPace::Instant),
            ..scenario("e2b", "lifecycle")
        };
        run(vec![docker, e2b])
    }

    /// [`two_variants`] with docker's lifecycle repeated: a second repetition that passed a
    /// little slower, then a third whose first result was wrong.
    pub(crate) fn with_repetitions() -> RunResults {
        let mut results = two_variants();
        let mut second = results.scenarios[0].clone();
        second.repetition = 2;
        for step in &mut second.steps {
            step.duration += Duration::from_millis(10);
        }
        second.timings = vec![timing("create-to-first-result", 2_480, None)];
        let mut third = results.scenarios[0].clone();
        third.repetition = 3;
        third.timings = Vec::new();
        third.steps[2] = step(
            "first-result",
            failed("expected `2`, got `3`"),
            1_904,
            60,
            vec![],
            &["1+1 -> 3"],
        );
        for later in &mut third.steps[3..6] {
            later.status = skipped(SKIPPED);
            later.duration = Duration::ZERO;
            later.timings = Vec::new();
            later.log = Vec::new();
        }
        results.scenarios.insert(1, third);
        results.scenarios.insert(1, second);
        results
    }

    /// Snapshot settings: snapshots named without the module path, with
    /// measured durations, run ids, sha256 ids, host names and dates
    /// redacted; budgets and poll intervals stay. Durations in seconds keep
    /// their width so that tables stay aligned.
    pub(crate) fn redacted() -> insta::Settings {
        let mut settings = insta::Settings::clone_current();
        settings.set_prepend_module_to_snapshot(false);
        settings.add_filter(
            r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
            "[date]",
        );
        settings.add_filter(r"\b[0-9a-f]{64}\b", "[sha256]");
        settings.add_filter(r"sha256:[0-9a-f]{12}…", "sha256:[short-hash]…");
        settings.add_filter(r#"\btime="[0-9.]+""#, r#"time="[time]""#);
        settings.add_filter(
            r#"(name="(duration|[^"]*timing\.[^".]+)_ms" value=")[^"]*""#,
            r#"${1}[ms]""#,
        );
        for whole in 1..=4 {
            for decimals in 1..=2 {
                settings.add_filter(
                    &format!(r"\b\d{{{whole}}}\.\d{{{decimals}}} s\b"),
                    format!("{}.{} s", "#".repeat(whole), "#".repeat(decimals)),
                );
            }
        }
        settings.add_filter(r#"(name="run_id" value=")[^"]*""#, r#"${1}[run-id]""#);
        settings.add_filter(r"(# sandbox-matrix run )\S+", "${1}[run-id]");
        settings.add_filter(r#"(name="host" value=")[^"]*""#, r#"${1}[host]""#);
        settings.add_filter(r"(on host `)[^`]*`", "${1}[host]`");
        settings
    }
}
