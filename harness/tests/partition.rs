//! `--partition K/N`: the N shares of a selection are disjoint and together are the whole
//! selection, item by item (variant × scenario × repetition), for `list` and `run`; bad
//! forms are refused naming the flag. And the nightly's live shards list every scenario in
//! scenarios/, its replayed ones those with a cassette. No Docker, no network.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};

fn sandbox_matrix(args: &[&str]) -> Output {
    common::sandbox_matrix_without_credentials(args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines `list` prints with `args`, which must succeed.
fn listed(args: &[&str]) -> Vec<String> {
    let output = sandbox_matrix(&[&["list"], args].concat());
    assert_eq!(
        output.status.code(),
        Some(0),
        "list {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout).lines().map(str::to_owned).collect()
}

/// The item a `list` line belongs to: `variant::scenario` or `variant::scenario[k]`.
fn item(line: &str) -> &str {
    let step = line.split_whitespace().next().expect("a step");
    step.rsplit_once("::").expect("variant::scenario::step").0
}

#[test]
fn the_partitions_of_list_are_disjoint_and_cover_it() {
    for options in [
        vec![],
        vec!["--repeat", "3"],
        vec!["--live"],
        vec!["--live", "--repeat", "3"],
    ] {
        let full = listed(&options);
        let unique: BTreeSet<&String> = full.iter().collect();
        assert_eq!(unique.len(), full.len(), "list {options:?} repeats a line");
        if options.contains(&"--repeat") {
            assert!(
                full.iter().any(|l| item(l).ends_with("[3]")),
                "list {options:?} names repetitions: {full:#?}"
            );
        }
        for n in 1..=4 {
            // Which shares hold each line, and each item.
            let mut lines: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            let mut items: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for k in 1..=n {
                let partition = format!("{k}/{n}");
                let share = listed(&[options.as_slice(), &["--partition", &partition]].concat());
                for line in share {
                    items.entry(item(&line).to_owned()).or_default().insert(k);
                    lines.entry(line).or_default().push(k);
                }
            }
            for (line, shares) in &lines {
                assert_eq!(
                    shares.len(),
                    1,
                    "list {options:?}, {n} partitions: `{line}` is in partitions {shares:?}"
                );
            }
            for (item, shares) in &items {
                assert_eq!(
                    shares.len(),
                    1,
                    "list {options:?}, {n} partitions: the steps of {item} are split over {shares:?}"
                );
            }
            let union: BTreeSet<&String> = lines.keys().collect();
            assert_eq!(
                union, unique,
                "list {options:?}: the {n} partitions together are not the whole list"
            );
        }
    }
}

#[test]
fn the_partitions_of_a_run_are_its_list_shares_and_merge_back_whole() {
    let out = common::out_dir("partition-run");
    let options = ["--variant", "e2b", "--repeat", "3"];
    let mut merged_inputs = Vec::new();
    let mut union = Vec::new();
    for k in 1..=3 {
        let partition = format!("{k}/3");
        let dir = out.join(format!("p{k}"));
        let output = sandbox_matrix(
            &[
                &["run"],
                options.as_slice(),
                &["--partition", &partition, "--out"],
                &[dir.to_str().expect("utf-8 path")],
            ]
            .concat(),
        );
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let results = dir.join("latest/results.json");
        let run = sandbox_matrix::model::results::load(&results).expect("results.json");
        assert_eq!(
            run.provenance.partition.as_deref(),
            Some(partition.as_str()),
            "results.json names its partition"
        );
        let ran: BTreeSet<String> = run
            .scenarios
            .iter()
            .map(|s| format!("{}::{}[{}]", s.variant, s.scenario, s.repetition))
            .collect();
        let share: BTreeSet<String> =
            listed(&[&options[..], &["--partition", &partition]].concat())
                .iter()
                .map(|l| item(l).to_owned())
                .collect();
        assert_eq!(ran, share, "run --partition {partition} runs list's share");
        union.extend(ran);
        merged_inputs.push(results);
    }
    let all: BTreeSet<String> = listed(&options)
        .iter()
        .map(|l| item(l).to_owned())
        .collect();
    assert_eq!(union.len(), all.len(), "the runs overlap: {union:?}");
    assert_eq!(union.into_iter().collect::<BTreeSet<_>>(), all);
    let merged = out.join("merged");
    let mut args = vec!["merge"];
    args.extend(
        merged_inputs
            .iter()
            .map(|p| p.to_str().expect("utf-8 path")),
    );
    args.extend(["--out", merged.to_str().expect("utf-8 path")]);
    let output = sandbox_matrix(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let run = sandbox_matrix::model::results::load(&merged.join("results.json")).expect("merged");
    assert_eq!(run.scenarios.len(), all.len(), "merge joins every share");
    let partitions: Vec<Option<&str>> = run
        .provenance
        .shards
        .iter()
        .map(|s| s.partition.as_deref())
        .collect();
    assert_eq!(
        partitions,
        [Some("1/3"), Some("2/3"), Some("3/3")],
        "each shard's provenance names its partition"
    );
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_bad_partition_is_refused_naming_the_flag() {
    for (partition, why) in [
        ("0/3", "K must be 1..=3"),
        ("4/3", "K must be 1..=3"),
        ("1/0", "N must be at least 1"),
        ("2", "expected K/N, two whole numbers such as 2/3"),
        ("1/2/3", "expected K/N, two whole numbers such as 2/3"),
    ] {
        for command in ["list", "run"] {
            let output = sandbox_matrix(&[command, "--variant", "e2b", "--partition", partition]);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{command} --partition {partition}"
            );
            assert_eq!(
                text(&output.stderr),
                format!("error: --partition {partition}: {why}\n"),
                "{command}"
            );
        }
    }
}

/// The `name:` of every scenario file in scenarios/.
fn scenario_names() -> BTreeSet<String> {
    let dir = common::root().join("scenarios");
    std::fs::read_dir(&dir)
        .expect("scenarios/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .map(|p| {
            sandbox_matrix::run::scenario::Scenario::load(&p)
                .expect("a scenario")
                .name
        })
        .collect()
}

/// The scenarios `nightly.sh plan VARIANT MODE 1` lists.
fn nightly_plan(variant: &str, mode: &str) -> BTreeSet<String> {
    let root = common::root();
    let output = Command::new("bash")
        .arg(root.join(".github/scripts/nightly.sh"))
        .args(["plan", variant, mode, "1"])
        .current_dir(&root)
        .env("SANDBOX_MATRIX", env!("CARGO_BIN_EXE_sandbox-matrix"))
        .output()
        .expect("bash runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "nightly.sh plan {variant} {mode}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
        .lines()
        .map(|l| {
            let (_, scenario) = item(l).split_once("::").expect("variant::scenario");
            scenario.to_owned()
        })
        .collect()
}

#[test]
fn the_nightly_runs_every_scenario_live_and_replays_those_with_a_cassette() {
    let scenarios = scenario_names();
    let cassettes = common::root().join("fixtures/cassettes");
    for variant in sandbox_matrix::run::variants::known() {
        assert_eq!(
            nightly_plan(variant, "live"),
            scenarios,
            "the nightly's live {variant} shard runs every scenario in scenarios/"
        );
        let replayable: BTreeSet<String> =
            if sandbox_matrix::run::variants::cloud(variant).is_some() {
                scenarios
                    .iter()
                    .filter(|s| cassettes.join(variant).join(format!("{s}.yaml")).is_file())
                    .cloned()
                    .collect()
            } else {
                scenarios.clone()
            };
        assert_eq!(
            nightly_plan(variant, "replay"),
            replayable,
            "the nightly's replayed {variant} shard keeps to the scenarios with a cassette"
        );
    }
}
