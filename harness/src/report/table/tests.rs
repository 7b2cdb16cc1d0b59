use sandbox_providers::Resource;

use super::cells::shorten;
use super::*;
use crate::model::results::{FIRST_COMMAND_SAMPLE, SECOND_COMMAND_SAMPLE, Source};
use crate::report::fixture::{
    failed, replay_source, run, scenario, skipped, step, timing, two_variants, with_repetitions,
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
        ["p50 2.48 s · p90 failed · 2/3 ok", "replayed: failed"]
    );
    assert_eq!(
        row(&table, "Build"),
        ["p50 12.35 s · p90 12.36 s · 3/3 ok", "replayed"]
    );
    assert_eq!(
        row(&table, "Restart"),
        ["p50 1.24 s · p90 failed · 2/3 ok", "replayed: skipped"]
    );
    assert_eq!(
        row(&table, "Scenario"),
        [
            "fail (lifecycle #3: first-result)",
            "replayed: fail (first-result)"
        ]
    );
}

#[test]
fn table_is_github_markdown() {
    let mut results = two_variants();
    results.scenarios[1].steps[2].status = failed("got `3`\n| not 2 |");
    results.scenarios[1].scenario = "pipe|name".to_owned();
    results.scenarios[1].variant = "e2b|x".to_owned();
    let table = render(&results);
    let (table, notes) = table.split_once("\n\n").expect("a note on the replay");
    assert!(notes.starts_with(r"e2b|x · replay: "), "{notes}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3 + ROWS.len(), "{table}");
    assert_eq!(cells(lines[0]), ["", r"docker · live", r"e2b\|x · replay"]);
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
    let mut wanted: Vec<&str> = ROWS.iter().map(|(label, _)| *label).collect();
    let leaked = wanted
        .iter()
        .position(|l| *l == "Resources leaked")
        .unwrap();
    wanted.insert(leaked + 1, ORPHANS_ROW);
    assert_eq!(labels, wanted);
}

#[test]
fn cells_of_the_two_variants() {
    let table = render(&two_variants());
    let expected = [
        (
            "Artifact launched",
            ["sha256:0123456789ab…", "replayed: tpl_k3x9w2m1q8v5z7r…"],
        ),
        ("Build", ["12.3 s", "replayed"]),
        ("Build logs", ["streamed", "replayed: polled"]),
        (
            "Create to first 1+1",
            ["2.31 s · ×1.43 the kernel's floor", "replayed: failed"],
        ),
        ("Floor: python3 in a fresh container", ["0.48 s", "—"]),
        ("Floor: kernel's first answer", ["1.62 s", "—"]),
        ("Restart", ["1.23 s", "replayed: skipped"]),
        (
            "Shutdown",
            [
                "0.02 s, exited on SIGTERM, exit code 0",
                "replayed: skipped",
            ],
        ),
        ("Doctor and core tier", ["—", "—"]),
        ("Extended tier", ["—", "—"]),
        ("Secrets found", ["0", "replayed: skipped"]),
        ("Resources leaked", ["0", "replayed: 0"]),
        ("Scenario", ["pass", "replayed: fail (first-result)"]),
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
    assert_eq!(
        row(&table, "Create to first 1+1"),
        ["2.00 s · ×1.33 the kernel's floor"]
    );
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
fn the_floor_ratio_takes_the_floor_measured_for_the_same_artifact_elsewhere() {
    let first_result = |timings| step("first-result", StepStatus::Passed, 10, 60, timings, &[]);
    let with = |name: &str, artifact: &str, timings| ScenarioResult {
        artifact_id: Some(artifact.to_owned()),
        steps: vec![first_result(timings)],
        timings: vec![timing(CREATE_TO_FIRST_RESULT, 3_000, None)],
        ..scenario("docker", name)
    };
    // The first scenario with a first result has no floor of its own: the run measured
    // it with another scenario of the same artifact.
    let measured_later = vec![
        with("extended-tier", "sha256:0abc", vec![]),
        with(
            "lifecycle",
            "sha256:0abc",
            vec![timing("floor-kernel", 2_000, None)],
        ),
    ];
    assert_eq!(
        row(&render(&run(measured_later)), "Create to first 1+1"),
        ["3.00 s · ×1.50 the kernel's floor, measured in `lifecycle`"]
    );
    // Another artifact's floor is not this one's.
    let other_artifact = vec![
        with("extended-tier", "sha256:0abc", vec![]),
        with(
            "lifecycle",
            "sha256:0def",
            vec![timing("floor-kernel", 2_000, None)],
        ),
    ];
    assert_eq!(
        row(&render(&run(other_artifact)), "Create to first 1+1"),
        ["3.00 s"]
    );
}

#[test]
fn a_pushed_artifact_shows_its_digest_push_pull_and_size() {
    let build = StepResult {
        data: Some(serde_json::json!({ COMPRESSED_BYTES: 123_456_789 })),
        ..step(
            "build",
            StepStatus::Passed,
            40_000,
            600,
            vec![timing(PUSH, 12_340, None)],
            &[],
        )
    };
    let launch = step(
        "launch",
        StepStatus::Passed,
        9_000,
        90,
        vec![timing(PULL, 6_780, None)],
        &[],
    );
    let pushed = ScenarioResult {
        artifact_id: Some(
            "127.0.0.1:5000/sandbox-matrix/environment@sha256:0123456789abcdef0123".into(),
        ),
        steps: vec![build, launch],
        ..scenario("datalayer", "lifecycle")
    };
    let local = ScenarioResult {
        artifact_id: Some("sha256:fedcba9876543210fedc".into()),
        steps: vec![step("build", StepStatus::Passed, 4_000, 600, vec![], &[])],
        ..scenario("docker", "lifecycle")
    };
    let table = render(&run(vec![pushed, local]));
    assert_eq!(
        row(&table, "Artifact launched"),
        ["sha256:0123456789ab…", "sha256:fedcba987654…"]
    );
    assert_eq!(
        row(&table, "Registry: push · pull · size"),
        ["push 12.3 s · pull 6.8 s · 123.5 MB compressed", "—"]
    );
}

#[test]
fn tier_rows_count_checks_that_ran_and_name_failures() {
    let with_data = |name: &str, status: StepStatus, data: serde_json::Value| StepResult {
        data: Some(data),
        reused: None,
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
        .split_once("## modal / lifecycle · live\n\n")
        .expect("a section")
        .1;
    assert_eq!(
        tail,
        "- `restart` skipped: this variant cannot restart\n\
             - secret found: TOKEN at /root/.netrc\n\
             - resource leaked: volume `v1`\n\
             \n\
             ## modal / empty · live\n\
             \n\
             - no steps ran\n"
    );
}

/// A passed lifecycle of `variant` from `source`: build 30 s, launch 2 s, create to
/// first 1+1 4.5 s (polled every 250 ms), restart 2.2 s, a shutdown of 1.1 s on SIGTERM.
fn lifecycle(variant: &str, source: Source) -> ScenarioResult {
    let passed = |name: &str, ms, log: &[&str]| step(name, StepStatus::Passed, ms, 60, vec![], log);
    ScenarioResult {
        steps: vec![
            passed("build", 30_000, &[]),
            passed("launch", 2_000, &[]),
            step(
                "first-result",
                StepStatus::Passed,
                2_500,
                60,
                vec![timing("floor-kernel", 1_500, None)],
                &[],
            ),
            passed("restart", 2_200, &[]),
            passed(
                "shutdown",
                1_100,
                &["ending: exited on SIGTERM, exit code 0"],
            ),
            passed("cleanup", 100, &[]),
        ],
        timings: vec![timing(CREATE_TO_FIRST_RESULT, 4_500, Some(250))],
        source,
        ..scenario(variant, "lifecycle")
    }
}

#[test]
fn the_credential_row_says_what_each_variant_did_with_it() {
    let docker = ScenarioResult {
        base_credential: Some("ECR login token, made for this run".to_owned()),
        secrets_scan: None,
        base_chain: None,
        lifetime: None,
        ..lifecycle("docker", Source::Live)
    };
    let local = ScenarioResult {
        base_credential: Some("none: local base".to_owned()),
        secrets_scan: None,
        base_chain: None,
        lifetime: None,
        ..lifecycle("local", Source::Live)
    };
    // Nothing built: nothing to say.
    let unbuilt = lifecycle("e2b", Source::Live);
    let table = render(&run(vec![docker, local, unbuilt]));
    assert_eq!(
        row(&table, "Credential for the private base"),
        [
            "ECR login token, made for this run",
            "none: local base",
            "—"
        ]
    );
}

/// The timing rows of `table`'s first column.
fn timing_cells(table: &str) -> Vec<String> {
    [
        "Build",
        "Create to first 1+1",
        "Floor: kernel's first answer",
        "Restart",
        "Shutdown",
    ]
    .iter()
    .map(|label| row(table, label).remove(0))
    .collect()
}

#[test]
fn the_platform_launch_is_headed_datalayer_unless_the_registry_launch_reads_the_same() {
    let header = |results: &RunResults| cells(render(results).lines().next().expect("a header"));
    let replayed = run(vec![
        lifecycle("datalayer", Source::Live),
        lifecycle("datalayer-runtimes", replay_source(ReplayPace::Instant)),
    ]);
    assert_eq!(
        header(&replayed),
        ["", "datalayer · live", "datalayer · replay"]
    );
    assert!(
        render(&replayed).contains("\n\ndatalayer · replay: replayed, not measured, from:"),
        "{}",
        render(&replayed)
    );
    let both_live = run(vec![
        lifecycle("datalayer", Source::Live),
        lifecycle("datalayer-runtimes", Source::Live),
    ]);
    assert_eq!(
        header(&both_live),
        ["", "datalayer · live", "datalayer-runtimes · live"]
    );
}

#[test]
fn replayed_timings_read_replayed_or_carry_their_recording_date() {
    let instant = render(&run(vec![lifecycle(
        "e2b",
        replay_source(ReplayPace::Instant),
    )]));
    assert_eq!(
        cells(instant.lines().next().expect("a header")),
        ["", "e2b · replay"]
    );
    assert_eq!(
        timing_cells(&instant),
        [
            "replayed",
            "replayed",
            "replayed",
            "replayed",
            "replayed, exited on SIGTERM, exit code 0"
        ]
    );
    assert_eq!(
        row(&instant, "Scenario"),
        ["replayed: client matches cassette"]
    );
    assert_eq!(row(&instant, "Resources leaked"), ["replayed: 0"]);
    assert!(
            instant.ends_with(
                "\n\ne2b · replay: replayed, not measured, from:\n- `fixtures/cassettes/e2b/lifecycle.yaml`, written 2026-11-29, instant pace, timings read `replayed`: authored from e2b/openapi.yml@0.1.0, answered by an emulator"
            ),
            "{instant}"
        );

    let recorded = render(&run(vec![lifecycle(
        "e2b",
        replay_source(ReplayPace::Recorded),
    )]));
    assert_eq!(
        timing_cells(&recorded),
        [
            "30.0 s (recorded 2026-11-29)",
            "4.50 s (polled every 250 ms) (recorded 2026-11-29)",
            "1.50 s (recorded 2026-11-29)",
            "2.20 s (recorded 2026-11-29)",
            "1.10 s (recorded 2026-11-29), exited on SIGTERM, exit code 0"
        ]
    );
    let mut undated = lifecycle("e2b", replay_source(ReplayPace::Recorded));
    if let Source::Replay { replay } = &mut undated.source {
        replay.written = None;
    }
    let undated = render(&run(vec![undated]));
    assert_eq!(
        row(&undated, "Restart"),
        ["2.20 s (recorded at an unknown date)"]
    );
    assert!(undated.contains("written at an unknown date"), "{undated}");

    let mut repeated = lifecycle("e2b", replay_source(ReplayPace::Instant));
    repeated.repetition = 2;
    let repeated = render(&run(vec![
        lifecycle("e2b", replay_source(ReplayPace::Instant)),
        repeated,
    ]));
    assert_eq!(row(&repeated, "Build"), ["replayed · 2/2 ok"]);
}

#[test]
fn a_variants_live_and_replayed_results_are_two_columns() {
    let mut live = lifecycle("e2b", Source::Live);
    live.steps[0].duration = Duration::from_millis(61_000);
    live.steps.retain(|step| step.step != "restart");
    let table = render(&run(vec![
        lifecycle("e2b", replay_source(ReplayPace::Instant)),
        live,
    ]));
    assert_eq!(
        cells(table.lines().next().expect("a header")),
        ["", "e2b · replay", "e2b · live"]
    );
    assert_eq!(row(&table, "Build"), ["replayed", "61.0 s"]);
    assert_eq!(
        row(&table, "Restart"),
        ["replayed", "—"],
        "the replay's restart is not shown as live"
    );
    assert_eq!(
        row(&table, "Scenario"),
        ["replayed: client matches cassette", "pass"]
    );
    assert!(
        table.contains(
            "e2b · replay: replayed, not measured, from:\n- `fixtures/cassettes/e2b/lifecycle.yaml`"
        ),
        "{table}"
    );
}

#[test]
fn an_emulated_column_is_apart_and_every_cell_of_it_is_marked() {
    use crate::report::fixture::{EMULATOR, emulated_source};
    let mut live = lifecycle("e2b", Source::Live);
    live.steps[0].duration = Duration::from_millis(61_000);
    let mut other = lifecycle("e2b", emulated_source());
    other.scenario = "burst".to_owned();
    if let Source::Emulated { emulator } = &mut other.source {
        *emulator = emulator.replace("20.10.24", "28.3.2");
    }
    let table = render(&run(vec![
        lifecycle("e2b", emulated_source()),
        live,
        lifecycle("e2b", replay_source(ReplayPace::Instant)),
        other,
    ]));
    assert_eq!(
        cells(table.lines().next().expect("a header")),
        ["", "e2b · emulated", "e2b · live", "e2b · replay"]
    );
    assert_eq!(
        row(&table, "Build"),
        ["emulated: 30.0 s", "61.0 s", "replayed"]
    );
    assert_eq!(
        row(&table, "Create to first 1+1"),
        [
            "emulated: 4.50 s (polled every 250 ms) · ×3.00 the kernel's floor",
            "4.50 s (polled every 250 ms) · ×3.00 the kernel's floor",
            "replayed"
        ]
    );
    assert_eq!(
        row(&table, "Shutdown")[0],
        "emulated: 1.10 s, exited on SIGTERM, exit code 0"
    );
    assert_eq!(
        row(&table, "Artifact launched")[0],
        "—",
        "nothing is not marked"
    );
    assert_eq!(
        row(&table, "Scenario"),
        [
            "emulated: pass",
            "pass",
            "replayed: client matches cassette"
        ]
    );
    let (_, notes) = table.split_once("\n\n").expect("notes under the table");
    let emulated_note = notes
        .split("\n\n")
        .find(|note| note.starts_with("e2b · emulated"))
        .expect("a note on the emulated column");
    assert_eq!(
        emulated_note,
        format!(
            "e2b · emulated: measured against sandbox-matrix's emulator over the local engine, not against the provider:\n- {EMULATOR}\n- {}",
            EMULATOR.replace("20.10.24", "28.3.2")
        )
    );
    assert!(
        notes.contains("e2b · replay: replayed, not measured, from:"),
        "{notes}"
    );
    assert!(!notes.contains("e2b · live"), "{notes}");
    let grid = grid(&run(vec![
        lifecycle("e2b", emulated_source()),
        lifecycle("e2b", Source::Live),
        lifecycle("e2b", replay_source(ReplayPace::Instant)),
    ]));
    assert_eq!(
        grid.classes,
        [Class::Emulated, Class::Measured, Class::Replayed]
    );
}

#[test]
fn the_summary_says_an_emulated_pass_was_against_the_emulator() {
    let emulated = lifecycle("e2b", crate::report::fixture::emulated_source());
    let mut failing = emulated.clone();
    failing.repetition = 2;
    failing.steps[3].status = failed("no answer");
    let summary = render_summary(&run(vec![emulated, failing]));
    let section = |heading: &str| {
        summary
            .split_once(&format!("{heading}\n\n"))
            .unwrap_or_else(|| panic!("no {heading} in {summary}"))
            .1
            .lines()
            .next()
            .expect("a bullet")
            .to_owned()
    };
    assert_eq!(
        section("## e2b / lifecycle · emulated (repetition 1)"),
        "- all steps passed against the emulator (not the provider)"
    );
    assert_eq!(
        section("## e2b / lifecycle · emulated (repetition 2)"),
        "- `restart` failed: no answer"
    );
}

#[test]
fn a_shutdown_through_the_api_never_reads_as_a_graceful_exit() {
    let ending = format!("ending: {}", crate::model::outcome::NOT_OBSERVABLE);
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
        "0.52 s, ended through the API; exit on SIGTERM not observable"
    );
    assert!(!cell.contains("exited on SIGTERM"), "{cell}");
}

#[test]
fn the_secrets_row_says_what_the_scan_covered() {
    use crate::model::results::ScanCoverage;
    let scanned = |variant: &str, unreadable, uid| {
        let mut scenario = lifecycle(variant, Source::Live);
        scenario.steps.push(step(
            "secrets-scan",
            StepStatus::Passed,
            1000,
            120,
            vec![],
            &[],
        ));
        scenario.secrets_scan = Some(ScanCoverage {
            scanner: "the Python probe".to_owned(),
            files_scanned: 5120,
            unreadable,
            uid,
        });
        scenario
    };
    let table = render(&run(vec![
        scanned("docker", 0, 0),
        scanned("daytona", 8, 1000),
    ]));
    assert_eq!(
        row(&table, "Secrets found"),
        [
            "0 · full (uid 0, 5120 files)",
            "0 · partial (uid 1000, 8 unreadable)"
        ]
    );
}

/// A scenario named `mode` with one `mode` step and launches whose first command took
/// `first` ms and second `second` ms, their TTI `tti` ms; `None` is a failed launch.
fn launched(variant: &str, mode: &str, launches: &[Option<(u64, u64, u64)>]) -> ScenarioResult {
    use crate::model::results::Sample;
    let mut scenario = crate::report::fixture::scenario(variant, mode);
    scenario
        .steps
        .push(step(mode, StepStatus::Passed, 1_000, 600, vec![], &[]));
    for launch in launches {
        let sample = |name: &str, ms: Option<u64>| Sample {
            name: name.to_owned(),
            value: ms.map(Duration::from_millis),
            error: ms.is_none().then(|| "launch: refused".to_owned()),
        };
        scenario.samples.extend([
            sample(TTI, launch.map(|l| l.0)),
            sample(FIRST_COMMAND_SAMPLE, launch.map(|l| l.1)),
            sample(SECOND_COMMAND_SAMPLE, launch.map(|l| l.2)),
        ]);
    }
    scenario
}

#[test]
fn the_mode_rows_score_tti_as_the_boards_do_and_readiness_shows_a_slow_first_command() {
    // Ten sequential launches of 2 s TTI: every percentile 2 s, score 80.
    let sequential = launched("docker", "sequential", &[Some((2_000, 50, 50)); 10]);
    // A burst where one of four failed: its untrimmed p95 is +inf, its score times 3/4.
    let mut burst = vec![Some((1_000, 40, 40)); 3];
    burst.push(None);
    let burst = launched("docker", "burst", &burst);
    // A provider whose "ready" is not: its first command costs 20 times its second.
    let unready = launched("slow", "sequential", &[Some((2_000, 400, 20)); 2]);
    let table = render(&run(vec![sequential, burst, unready]));
    assert_eq!(
        row(&table, "Sequential: score · TTI"),
        [
            "score 80.0 · p50 2.00 s · p95 2.00 s · p99 2.00 s · trimmed 2.00 · 2.00 · 2.00 · 10/10 ok",
            "score 80.0 · p50 2.00 s · p95 2.00 s · p99 2.00 s · trimmed 2.00 · 2.00 · 2.00 · 2/2 ok"
        ]
    );
    assert_eq!(
        row(&table, "Burst: score · TTI"),
        [
            "score 67.5 · p50 1.00 s · p95 failed · p99 failed · trimmed 1.00 · 1.00 · 1.00 · 3/4 ok",
            "—"
        ]
    );
    assert_eq!(row(&table, "Staggered: score · TTI"), ["—", "—"]);
    assert_eq!(
        row(&table, "Readiness: first ÷ second command"),
        [
            "×1.0 median, ×1.0 worst (13 launches)",
            "×20.0 median, ×20.0 worst (2 launches)"
        ]
    );
    assert!(table.contains(board::METHODOLOGY), "{table}");
}

#[test]
fn the_orphan_row_counts_what_the_inventory_still_held_per_1000_creates() {
    use crate::model::results::OrphanAudit;
    let mut results = run(vec![
        lifecycle("docker", Source::Live),
        lifecycle("datalayer", Source::Live),
        lifecycle("e2b", replay_source(ReplayPace::Instant)),
    ]);
    results.orphans = vec![
        OrphanAudit {
            variant: "docker".to_owned(),
            creates: 17,
            before: Vec::new(),
            orphans: Vec::new(),
            swept: 0,
        },
        OrphanAudit {
            variant: "datalayer".to_owned(),
            creates: 8,
            before: Vec::new(),
            orphans: vec!["container 3f2a9c1d5e7b8a0f".to_owned()],
            swept: 1,
        },
    ];
    let table = render(&results);
    assert_eq!(
        row(&table, ORPHANS_ROW),
        [
            "0 of 17 sandbox creates",
            "1 of 8 sandbox creates: 125.0 per 1,000, swept 1 (container 3f2a9c1d5e7b8a0f)",
            "—"
        ]
    );
}

#[test]
fn the_lifetime_row_shows_an_end_in_time_an_early_death_and_an_overrun() {
    use crate::model::results::LifetimeSeen;
    let ms = Duration::from_millis;
    let watched = |variant: &str, gone: Option<u64>, early: bool, status: StepStatus| {
        let mut scenario = lifecycle(variant, Source::Live);
        scenario
            .steps
            .push(step("lifetime", status, 40_000, 300_000, vec![], &[]));
        scenario.lifetime = Some(LifetimeSeen {
            asked: ms(6_000),
            counts_from: "create".to_owned(),
            created: ms(1_500),
            alive_at: (!early).then(|| ms(4_000)),
            gone_at: gone.map(ms),
            ending: gone.map(|_| "killed".to_owned()),
            early,
            every: ms(1_000),
        });
        scenario
    };
    let mut docker = lifecycle("docker", Source::Live);
    docker.steps.push(step(
        "lifetime",
        skipped("this variant cannot bound a sandbox's lifetime"),
        0,
        300_000,
        vec![],
        &[],
    ));
    let table = render(&run(vec![
        watched("in-time", Some(8_000), false, StepStatus::Passed),
        watched("early", Some(3_100), true, failed("died early")),
        watched("overrun", None, false, failed("still running")),
        docker,
    ]));
    assert_eq!(
        row(&table, "Lifetime: asked · ended"),
        [
            "6 s from create · gone at 8.0 s (+0.5 s)",
            "6 s from create · died early at 3.1 s",
            "6 s from create · outlived it",
            "skipped"
        ]
    );
}

#[test]
fn the_base_chain_row_shows_the_launched_digest_the_base_and_its_approval() {
    use crate::model::results::BaseChain;
    let chained = |variant: &str, approved: bool, approval: &str| {
        let mut scenario = lifecycle(variant, Source::Live);
        let status = if approved {
            StepStatus::Passed
        } else {
            failed(approval)
        };
        scenario
            .steps
            .push(step("base-chain", status, 40, 60, vec![], &[]));
        scenario.base_chain = Some(BaseChain {
            launched: format!("127.0.0.1:5000/sm/env@sha256:{}", "1f".repeat(32)),
            read_from: "registry 127.0.0.1:5000, index sha256:1f1f…".to_owned(),
            base: "sandbox-matrix/contract-base:v1".to_owned(),
            base_digest: format!("sha256:{}", "9a".repeat(32)),
            local: true,
            approved,
            approval: approval.to_owned(),
        });
        scenario
    };
    let mut docker = lifecycle("docker", Source::Live);
    docker.steps.push(step(
        "base-chain",
        skipped("this variant keeps no provenance beside its artifacts"),
        0,
        60,
        vec![],
        &[],
    ));
    let table = render(&run(vec![
        chained("datalayer", true, "local, approved by tag"),
        chained("tampered", false, "not approved: a local base other than x"),
        docker,
    ]));
    assert_eq!(
        row(&table, "Base-image chain"),
        [
            "sha256:1f1f1f1f1f1f… ← base sha256:9a9a9a9a9a9a… · local, approved by tag",
            "sha256:1f1f1f1f1f1f… ← base sha256:9a9a9a9a9a9a… · not approved: a local base other than x",
            "skipped"
        ]
    );
}

#[test]
fn leaks_of_a_kind_the_provider_cannot_list_never_read_0() {
    let mut modal = lifecycle("modal", Source::Live);
    modal
        .steps
        .push(step("cleanup", StepStatus::Passed, 10, 120, vec![], &[]));
    modal.capabilities = Some(sandbox_providers::modal::CAPABILITIES);
    let table = render(&run(vec![modal]));
    assert_eq!(
        row(&table, "Resources leaked"),
        ["0 · built artifacts: the API lists none, not counted"]
    );
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
