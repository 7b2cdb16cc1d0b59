//! `merge`, `compare`, `gate` and `report` as a user runs them: the built binary on files, its exit
//! codes and what it prints. The example in examples/gate/ is generated here, and checked to
//! be current (`SANDBOX_MATRIX_BLESS=1` rewrites it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sandbox_matrix::model::results::{
    Provenance, RESULTS_SCHEMA_VERSION, Replay, ReplayPace, RunResults, ScenarioResult, Source,
    StepResult, StepStatus,
};
use sandbox_providers::Timing;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/gate");

fn example(name: &str) -> PathBuf {
    Path::new(EXAMPLE).join(name)
}

/// Runs the built binary with `args`.
fn sandbox_matrix(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sm-gate-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn timing(name: &str, millis: u64, poll: Option<u64>) -> Timing {
    Timing {
        name: name.to_owned(),
        duration: ms(millis),
        resolution: poll.map(ms),
    }
}

fn step(name: &str, status: StepStatus, millis: u64, budget_s: u64, log: &[&str]) -> StepResult {
    StepResult {
        step: name.to_owned(),
        status,
        duration: ms(millis),
        started: None,
        budget: Duration::from_secs(budget_s),
        timings: Vec::new(),
        log: log.iter().map(|l| (*l).to_owned()).collect(),
        data: None,
        reused: None,
    }
}

fn passed(name: &str, millis: u64, budget_s: u64) -> StepResult {
    step(name, StepStatus::Passed, millis, budget_s, &[])
}

fn skipped(name: &str, budget_s: u64) -> StepResult {
    step(
        name,
        StepStatus::Skipped {
            reason: "an earlier step failed: restart".to_owned(),
        },
        0,
        budget_s,
        &[],
    )
}

/// An example run: docker, lifecycle and core-tier, three repetitions each. The first build
/// is cold and later ones hit the cache; the third lifecycle's kernel restart timed out.
fn example_results() -> RunResults {
    let image = "sha256:3f1a9c0e5b7d2468ace13579bdf02468ace13579bdf02468ace13579bdf0246a";
    let base = |scenario: &str, hash: &str, repetition: u32| ScenarioResult {
        variant: "docker".to_owned(),
        scenario: scenario.to_owned(),
        source: Source::Live,
        scenario_hash: hash.repeat(64 / hash.len()),
        artifact_id: Some(image.to_owned()),
        provider_version: Some("Docker Engine 28.3.2 (API 1.51)".to_owned()),
        region: Some("local".to_owned()),
        // The example is a docker run: the docker variant's own capabilities.
        capabilities: Some(sandbox_providers::docker::CAPABILITIES),
        steps: Vec::new(),
        timings: Vec::new(),
        leaked_resources: Vec::new(),
        secrets_found: Vec::new(),
        repetition,
        samples: Vec::new(),
        // Built from the local bootstrap's base, as a docker run with no registry is.
        base_credential: Some("none: local base".to_owned()),
        secrets_scan: None,
        base_chain: None,
        lifetime: None,
    };
    let mut scenarios = Vec::new();
    let lifecycle = [
        (41_310, 812, 2_105, 1_234, 2_310),
        (2_084, 776, 1_932, 1_311, 2_127),
        (1_913, 843, 2_288, 0, 2_561),
    ];
    for ((build, launch, first, restart, create_to_first), repetition) in lifecycle.iter().zip(1..)
    {
        let mut launch = passed("launch", *launch, 90);
        launch.timings = vec![timing("container-running", 405, Some(50))];
        let mut first_result = step(
            "first-result",
            StepStatus::Passed,
            *first,
            90,
            &["answer: 2"],
        );
        first_result.timings = vec![timing("kernel-start-to-first-answer", first - 232, None)];
        let mut steps = vec![passed("build", *build, 600), launch, first_result];
        if *restart > 0 {
            steps.extend([
                step("restart", StepStatus::Passed, *restart, 60, &["answer: 2"]),
                passed("secrets-scan", 903, 120),
                step(
                    "shutdown",
                    StepStatus::Passed,
                    21,
                    30,
                    &["ending: exited on SIGTERM, exit code 0"],
                ),
            ]);
        } else {
            steps.extend([
                step(
                    "restart",
                    StepStatus::Failed {
                        reason: "exceeded its budget of 1m".to_owned(),
                    },
                    60_000,
                    60,
                    &[],
                ),
                skipped("secrets-scan", 120),
                skipped("shutdown", 30),
            ]);
        }
        steps.push(passed("cleanup", 350, 120));
        scenarios.push(ScenarioResult {
            steps,
            timings: vec![timing("create-to-first-result", *create_to_first, None)],
            ..base("lifecycle", "5d41402abc4b2a76", repetition)
        });
    }
    let checks = [
        "core-1-doctor",
        "core-2-identity",
        "core-3-python",
        "core-4-kernel",
        "core-5-imports",
        "core-6-filesystem",
        "core-7-restart",
        "core-8-shutdown",
        "core-9-secrets",
    ];
    let check_ms = [1_812, 96, 88, 2_140, 431, 205, 1_377, 1_024, 2_563];
    for (repetition, jitter) in [(1, 0), (2, 37), (3, 81)] {
        let mut steps = vec![
            passed("build", [1_978, 1_902, 2_011][repetition as usize - 1], 600),
            passed("launch", 790 + jitter, 90),
        ];
        for (check, millis) in checks.iter().zip(check_ms) {
            let mut result = passed(check, millis + jitter, 120);
            if *check == "core-1-doctor" {
                result.data = Some(serde_json::json!({"rows": 15, "rowsPassed": 15}));
            }
            steps.push(result);
        }
        steps.push(passed("cleanup", 342, 120));
        scenarios.push(ScenarioResult {
            steps,
            ..base("core-tier", "8b1a9953c4611296", repetition)
        });
    }
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
        provenance: Provenance {
            run_id: "example-20251129T121314Z".to_owned(),
            harness_version: "0.1.0".to_owned(),
            host: "example-host".to_owned(),
            started_at: "2025-11-29T12:13:14Z".to_owned(),
            base: None,
            shards: Vec::new(),
            partition: None,
        },
        scenarios,
        orphans: Vec::new(),
    }
}

#[test]
fn the_example_results_are_current() {
    let generated = serde_json::to_string_pretty(&example_results()).expect("serializes") + "\n";
    let path = example("results.json");
    if std::env::var_os("SANDBOX_MATRIX_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writable");
    }
    let checked_in = std::fs::read_to_string(&path).expect("examples/gate/results.json");
    assert!(
        checked_in == generated,
        "examples/gate/results.json differs from example_results(); rerun with SANDBOX_MATRIX_BLESS=1"
    );
}

#[test]
fn the_ship_policy_ships_the_example() {
    let output = sandbox_matrix(&[
        Path::new("gate"),
        Path::new("--policy"),
        &example("ship.yaml"),
        &example("results.json"),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "docker: ship\n");
}

#[test]
fn the_hold_policy_holds_the_example_with_reasons() {
    let output = sandbox_matrix(&[
        Path::new("gate"),
        Path::new("--policy"),
        &example("hold.yaml"),
        &example("results.json"),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "docker: hold (6 reasons)\n\
         \x20 - required lifecycle/* did not pass in 1 of 3 repetition(s) (repetition 3: restart failed: exceeded its budget of 1m)\n\
         \x20 - lifecycle/step:restart succeeded 2/3 (67%), under the floor of 90%\n\
         \x20 - lifecycle/step:secrets-scan succeeded 2/3 (67%), under the floor of 90%\n\
         \x20 - lifecycle/step:shutdown succeeded 2/3 (67%), under the floor of 90%\n\
         \x20 - p90 of core-tier/step:core-1-doctor is 1.89 s (3/3 ok), over its budget of 1s 500ms\n\
         \x20 - p90 of lifecycle/create-to-first-result is 2.56 s (3/3 ok), over its budget of 2s\n\
         \x20 - note: regression not checked: no --baseline\n"
    );
}

#[test]
fn gate_refuses_bad_input_with_exit_2() {
    let dir = scratch("bad-input");
    let typo = dir.join("typo.yaml");
    std::fs::write(&typo, "required: []\nsucess_rate: 0.9\n").expect("writable");
    let output = sandbox_matrix(&[
        Path::new("gate"),
        Path::new("--policy"),
        &typo,
        &example("results.json"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with(&format!("error: {}:2:", typo.display())),
        "{}",
        stderr(&output)
    );
    let output = sandbox_matrix(&[
        Path::new("gate"),
        Path::new("--policy"),
        &example("ship.yaml"),
        &example("results.json"),
        Path::new("--baseline"),
        &example("results.json"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("the policy has no `regression` section"),
        "{}",
        stderr(&output)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example with every create-to-first-result scaled by `factor`, written into `dir`.
fn scaled(dir: &Path, factor: f64) -> PathBuf {
    let mut results = example_results();
    for s in &mut results.scenarios {
        for t in &mut s.timings {
            t.duration = t.duration.mul_f64(factor);
        }
    }
    let path = dir.join(format!("x{factor}.json"));
    std::fs::write(&path, serde_json::to_string(&results).expect("serializes")).expect("writable");
    path
}

#[test]
fn compare_prints_a_table_and_exits_0() {
    let dir = scratch("compare");
    // Three repetitions a side: only the wide band applies.
    let output = sandbox_matrix(&[
        Path::new("compare"),
        Path::new("--baseline"),
        &example("results.json"),
        &scaled(&dir, 2.5),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let row = text
        .lines()
        .find(|l| l.contains("| create-to-first-result |"))
        .expect("a row for create-to-first-result");
    assert_eq!(
        row,
        "| docker | lifecycle | create-to-first-result | 3 → 3 | 2.31 s · 3/3 ok | 5.78 s · 3/3 ok | ×2.50 | **slower** | n<4: ×2 band |"
    );
    assert!(
        text.contains("| docker | core-tier | step:core-1-doctor | 3 → 3 |"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example as if e2b had run it replayed from its cassettes at instant pace, written
/// into `dir`.
fn replayed(dir: &Path) -> PathBuf {
    let mut results = example_results();
    for s in &mut results.scenarios {
        s.variant = "e2b".to_owned();
        s.source = Source::Replay {
            replay: Replay {
                cassette: format!("fixtures/cassettes/e2b/{}.yaml", s.scenario),
                origin: Some("authored from e2b/openapi.yml@0.1.0".to_owned()),
                written: Some("2026-11-29".to_owned()),
                pace: ReplayPace::Instant,
            },
        };
    }
    let path = dir.join("replayed.json");
    std::fs::write(&path, serde_json::to_string(&results).expect("serializes")).expect("writable");
    path
}

#[test]
fn compare_refuses_a_live_run_against_a_replayed_one() {
    let dir = scratch("compare-modes");
    let replay = replayed(&dir);
    let mut live = example_results();
    for s in &mut live.scenarios {
        s.variant = "e2b".to_owned();
    }
    let live_path = dir.join("live.json");
    std::fs::write(
        &live_path,
        serde_json::to_string(&live).expect("serializes"),
    )
    .expect("writable");
    let output = sandbox_matrix(&[
        Path::new("compare"),
        Path::new("--baseline"),
        &live_path,
        &replay,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert_eq!(stdout(&output), "", "no table is printed");
    assert_eq!(
        stderr(&output),
        "error: cannot compare e2b × lifecycle × step:build: it is live in the baseline and replay at instant pace in the current run; a replayed timing is not a measurement of the provider, and replays at two paces are two measurements (compare live with live, replay with replay at one pace)\n"
    );
    let output = sandbox_matrix(&[
        Path::new("compare"),
        Path::new("--baseline"),
        &replay,
        &replay,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(
            "| e2b · replay (instant) | lifecycle | step:build | 3 → 3 | replayed · 3/3 ok | replayed · 3/3 ok | — |"
        ),
        "{}",
        stdout(&output)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gate_holds_a_variant_replayed_alone_unless_the_policy_allows_replay() {
    let dir = scratch("gate-replayed");
    let replay = replayed(&dir);
    let output = sandbox_matrix(&[
        Path::new("gate"),
        Path::new("--policy"),
        &example("ship.yaml"),
        &replay,
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "docker: hold (1 reason)\n\
         \x20 - the policy requires it and the results have none\n\
         e2b: hold (1 reason)\n\
         \x20 - no live result for e2b: its 6 scenario result(s) are replayed from cassettes, which show only that the client still speaks the recorded protocol (allow_replay: true judges them)\n"
    );
    let allowing = dir.join("allowing.yaml");
    std::fs::write(
        &allowing,
        std::fs::read_to_string(example("ship.yaml"))
            .expect("ship.yaml")
            .replace("variants: [docker]", "variants: [e2b]")
            + "allow_replay: true\n",
    )
    .expect("writable");
    let output = sandbox_matrix(&[Path::new("gate"), Path::new("--policy"), &allowing, &replay]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert_eq!(stdout(&output), "e2b: ship (replay only)\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn merge_writes_one_run_folder_and_refuses_mixed_versions() {
    let dir = scratch("merge");
    let out = dir.join("merged");
    // A second shard: the example's data under a run id of its own (the same run twice is
    // refused).
    let second = scaled(&dir, 1.0);
    let mut shard: RunResults =
        serde_json::from_str(&std::fs::read_to_string(&second).expect("shard")).expect("parses");
    shard.provenance.run_id.push_str("-shard-2");
    std::fs::write(&second, serde_json::to_string(&shard).expect("serializes")).expect("writable");
    let output = sandbox_matrix(&[
        Path::new("merge"),
        &example("results.json"),
        &second,
        Path::new("--out"),
        &out,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let merged: RunResults = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("parses");
    assert_eq!(merged.provenance.shards.len(), 2);
    assert_eq!(merged.scenarios.len(), 12);
    assert_eq!(
        merged
            .scenarios
            .iter()
            .filter(|s| s.scenario == "lifecycle")
            .map(|s| s.repetition)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    for file in ["junit.xml", "summary.md", "report.html"] {
        assert!(out.join(file).is_file(), "{file}");
    }

    let v1 = dir.join("v1.json");
    std::fs::write(
        &v1,
        r#"{"schema_version": "sandbox-matrix/results/v1", "provenance": {}, "scenarios": []}"#,
    )
    .expect("writable");
    let output = sandbox_matrix(&[
        Path::new("merge"),
        &example("results.json"),
        &v1,
        Path::new("--out"),
        &dir.join("refused"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with(&format!(
            "error: {}: schema_version is `sandbox-matrix/results/v1`",
            v1.display()
        )),
        "{}",
        stderr(&output)
    );
    assert!(!dir.join("refused").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_writes_a_page_with_history_and_skips_a_bad_file() {
    let dir = scratch("report");
    let history = dir.join("history");
    for day in [27, 28] {
        let mut earlier = example_results();
        earlier.provenance.run_id = format!("earlier-202511{day}");
        earlier.provenance.started_at = format!("2025-11-{day}T02:00:00Z");
        let folder = history.join(&earlier.provenance.run_id);
        std::fs::create_dir_all(&folder).expect("a folder");
        std::fs::write(
            folder.join("results.json"),
            serde_json::to_string(&earlier).expect("serializes"),
        )
        .expect("writable");
    }
    std::fs::write(history.join("broken.json"), "{").expect("writable");
    let page = dir.join("page.html");
    let output = sandbox_matrix(&[
        Path::new("report"),
        Path::new("--out"),
        &page,
        &example("results.json"),
        Path::new("--history"),
        &history,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let warned = stderr(&output);
    assert!(
        warned.contains(&format!(
            "warning: history skipped: {}",
            history.join("broken.json").display()
        )),
        "{warned}"
    );
    assert!(
        warned.contains("(2 earlier run(s) in its history)"),
        "{warned}"
    );
    let html = std::fs::read_to_string(&page).expect("the page is written");
    assert!(html.contains("<h2>History</h2>"));
    assert!(html.contains("run earlier-20251127 (2025-11-27T02:00:00Z)"));
    assert!(html.contains("run earlier-20251128 (2025-11-28T02:00:00Z)"));

    let output = sandbox_matrix(&[
        Path::new("report"),
        Path::new("--out"),
        &page,
        &history.join("broken.json"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let _ = std::fs::remove_dir_all(&dir);
}
