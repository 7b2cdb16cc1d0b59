use sandbox_providers::Resource;

use super::*;
use crate::model::results::ReplayPace;
use crate::report::fixture::{failed, replay_source, run, scenario, skipped, step, timing};

fn policy(text: &str) -> Result<Policy, String> {
    Policy::parse(Path::new("policy.yaml"), text).map_err(|e| e.to_string())
}

/// Ten repetitions of docker / lifecycle: first-result fails in the last three, and
/// create-to-first-result takes 1.0 s, 1.1 s, ... where it was measured.
fn seventy_percent() -> RunResults {
    lifecycle(3)
}

/// Ten repetitions of docker / lifecycle, first-result failing in the last `failures`.
fn lifecycle(failures: u32) -> RunResults {
    run((1..=10)
        .map(|repetition| {
            let ok = repetition <= 10 - failures;
            let status = if ok {
                StepStatus::Passed
            } else {
                failed("expected `2`, got `3`")
            };
            ScenarioResult {
                steps: vec![
                    step("build", StepStatus::Passed, 30_000, 600, vec![], &[]),
                    step("first-result", status, 900, 90, vec![], &[]),
                ],
                timings: if ok {
                    vec![timing(
                        "create-to-first-result",
                        900 + 100 * u64::from(repetition),
                        None,
                    )]
                } else {
                    vec![]
                },
                repetition,
                ..scenario("docker", "lifecycle")
            }
        })
        .collect())
}

#[test]
fn a_policy_parses_with_its_budgets_and_requirements() {
    let p = policy(
            "variants: [docker]\nrequired:\n  - lifecycle/first-result\n  - core-tier/*\nsuccess_rate: 0.9\np90_budgets:\n  lifecycle/create-to-first-result: 5s\n  lifecycle/step:build: 3m\nregression:\n  tolerance: 0.25\n",
        )
        .expect("parses");
    assert_eq!(p.variants, ["docker"]);
    assert_eq!(
        p.required[1],
        Requirement {
            scenario: "core-tier".to_owned(),
            step: "*".to_owned()
        }
    );
    assert_eq!(p.success_rate, Some(0.9));
    assert_eq!(
        p.p90_budgets,
        [
            Budget {
                scenario: "lifecycle".to_owned(),
                metric: "create-to-first-result".to_owned(),
                within: Duration::from_secs(5)
            },
            Budget {
                scenario: "lifecycle".to_owned(),
                metric: "step:build".to_owned(),
                within: Duration::from_secs(180)
            },
        ]
    );
    assert_eq!(p.regression_tolerance, Some(0.25));
}

#[test]
fn policy_errors_are_for_people() {
    let e = policy("success_rate: 0.5\nsuccess_rate: 0.9\n").expect_err("twice");
    assert_eq!(
        e,
        "policy.yaml:2:1: `success_rate` is given twice; give each key once"
    );
    let e = policy(&format!("required:\n  - {}\n", "x".repeat(10_000))).expect_err("no slash");
    assert!(
        e.len() < 700 && e.contains("10000 bytes in all"),
        "{}",
        &e[..300.min(e.len())]
    );
}

#[test]
fn a_policy_that_checks_nothing_is_refused() {
    for text in [
        "",
        "\n# only a comment\n",
        "{}\n",
        "---\n{}\n",
        "variants: [docker]\n",
    ] {
        let e = policy(text).expect_err("checks nothing");
        assert_eq!(
            e,
            "policy.yaml: policy checks nothing: name at least one rule (`required`, `success_rate`, `max_orphans_per_1000`, `max_readiness_ratio`, `p90_budgets` or `regression`)",
            "{text:?}"
        );
    }
}

#[test]
fn policy_errors_name_file_and_line() {
    let unknown = policy("required: []\nsucess_rate: 0.9\n").expect_err("a typo");
    assert!(unknown.starts_with("policy.yaml:2:"), "{unknown}");
    assert!(unknown.contains("sucess_rate"), "{unknown}");
    assert!(
        !unknown.contains("at line"),
        "the location is said once: {unknown}"
    );
    let rate = policy("# floor\nsuccess_rate: 90\n").expect_err("not a fraction");
    assert!(
        rate.starts_with("policy.yaml:2:") && rate.contains("from 0 to 1"),
        "{rate}"
    );
    let key = policy("required:\n  - lifecycle/first-result\n  - first-result\n")
        .expect_err("no scenario");
    assert!(
        key.starts_with("policy.yaml:3:")
            && key.contains("`first-result` is not `<scenario>/<step>`"),
        "{key}"
    );
    let duration = policy("p90_budgets:\n  lifecycle/step:build: fast\n").expect_err("no unit");
    assert!(
        duration.starts_with("policy.yaml:2:") && duration.contains("`fast` is not a duration"),
        "{duration}"
    );
    let tolerance = policy("regression:\n  tolerance: -1\n").expect_err("negative");
    assert!(tolerance.starts_with("policy.yaml:2:"), "{tolerance}");
    let wrong_type = policy("success_rate: high\n").expect_err("a word");
    assert!(wrong_type.starts_with("policy.yaml:1:"), "{wrong_type}");
}

#[test]
fn an_all_pass_run_ships() {
    let results = run(vec![ScenarioResult {
        steps: vec![step(
            "first-result",
            StepStatus::Passed,
            900,
            90,
            vec![],
            &[],
        )],
        timings: vec![timing("create-to-first-result", 1_200, None)],
        ..scenario("docker", "lifecycle")
    }]);
    let p = policy(
            "required: [lifecycle/first-result, lifecycle/*]\nsuccess_rate: 1\np90_budgets:\n  lifecycle/create-to-first-result: 2s\n",
        )
        .expect("parses");
    let verdicts = gate(&p, &results, None);
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].ships(), "{verdicts:?}");
    assert_eq!(render(&verdicts), "docker: ship\n");
}

#[test]
fn seventy_percent_success_holds_on_every_rule_it_breaks() {
    let p = policy(
            "required: [lifecycle/first-result]\nsuccess_rate: 0.9\np90_budgets:\n  lifecycle/create-to-first-result: 5s\n  lifecycle/step:build: 1m\n  lifecycle/step:restart: 1m\n",
        )
        .expect("parses");
    let verdicts = gate(&p, &seventy_percent(), None);
    assert_eq!(
        verdicts[0].reasons,
        [
            "required lifecycle/first-result did not pass in 3 of 10 repetition(s) (repetition 8: failed: expected `2`, got `3`)",
            "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
            "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
            "p90 of lifecycle/create-to-first-result is failed (7/10 ok), over its budget of 5s",
            "lifecycle/step:restart has a p90 budget of 1m and no measurements",
        ]
    );
    let loose =
        policy("success_rate: 0.7\np90_budgets:\n  lifecycle/step:build: 31s\n").expect("parses");
    assert!(gate(&loose, &seventy_percent(), None)[0].ships());
}

#[test]
fn leaks_and_secrets_always_hold() {
    let mut results = seventy_percent();
    results.scenarios[3].leaked_resources = vec![Resource {
        kind: "container".to_owned(),
        id: "9c2e41d07a5b".to_owned(),
    }];
    results.scenarios[5].secrets_found = vec!["REGISTRY_TOKEN at /etc/leak".to_owned()];
    let verdicts = gate(
        &policy("success_rate: 0\n").expect("parses"),
        &results,
        None,
    );
    assert_eq!(
        verdicts[0].reasons,
        [
            "lifecycle (repetition 4) leaked container `9c2e41d07a5b`",
            "lifecycle (repetition 6) found a secret: REGISTRY_TOKEN at /etc/leak",
        ]
    );
}

#[test]
fn orphans_past_the_policy_rate_hold_and_a_live_run_without_an_audit_holds() {
    use crate::model::results::OrphanAudit;
    let strict = policy("max_orphans_per_1000: 5\n").expect("parses");
    let mut results = seventy_percent();
    // No audit: the run was interrupted, or never listed the inventory.
    let unaudited = gate(&strict, &results, None);
    assert!(
        unaudited[0].reasons[0].starts_with("no orphan audit for docker"),
        "{:?}",
        unaudited[0].reasons
    );
    results.orphans = vec![OrphanAudit {
        variant: "docker".to_owned(),
        creates: 100,
        before: Vec::new(),
        orphans: vec!["container 9c2e41d07a5b".to_owned()],
        swept: 1,
    }];
    // 1 in 100 is 10 per 1,000: over 5, within 10.
    assert_eq!(
        gate(&strict, &results, None)[0].reasons,
        [
            "1 orphans of 100 sandbox creates (10.0 per 1,000), over the most of 5: container 9c2e41d07a5b"
        ]
    );
    let loose = policy("max_orphans_per_1000: 10\n").expect("parses");
    assert!(gate(&loose, &results, None)[0].ships());
    let negative = policy("max_orphans_per_1000: -1\n").expect_err("negative");
    assert!(
        negative.to_string().contains("max_orphans_per_1000 is -1"),
        "{negative}"
    );
}

#[test]
fn a_first_command_far_slower_than_the_second_holds_under_max_readiness_ratio() {
    use crate::model::results::{FIRST_COMMAND_SAMPLE, SECOND_COMMAND_SAMPLE, Sample};
    let policy_of = |most: &str| policy(&format!("max_readiness_ratio: {most}\n"));
    let strict = policy_of("5").expect("parses");
    let mut results = seventy_percent();
    assert_eq!(
        gate(&strict, &results, None)[0].reasons,
        [
            "no launch answered its first and second command: max_readiness_ratio needs a \
              sequential, staggered or burst step whose launches answered"
        ]
    );
    // Three launches: 12×, 8× and 2× their second command; the median is 8×.
    let sample = |name: &str, ms: u64| Sample {
        name: name.to_owned(),
        value: Some(Duration::from_millis(ms)),
        error: None,
    };
    results.scenarios[0].samples = [(1_200, 100), (800, 100), (200, 100)]
        .iter()
        .flat_map(|&(first, second)| {
            [
                sample(FIRST_COMMAND_SAMPLE, first),
                sample(SECOND_COMMAND_SAMPLE, second),
            ]
        })
        .collect();
    assert_eq!(
        gate(&strict, &results, None)[0].reasons,
        [
            "readiness: the first command took ×8.0 the second (median of 3 launches; worst ×12.0), over the most of ×5: \"ready\" is not ready"
        ]
    );
    let loose = policy_of("10").expect("parses");
    assert!(gate(&loose, &results, None)[0].ships());
    let below_one = policy_of("0.5").expect_err("below 1");
    assert!(
        below_one.to_string().contains("max_readiness_ratio is 0.5"),
        "{below_one}"
    );
}

#[test]
fn a_partial_secrets_scan_holds_unless_the_policy_ships_it() {
    let mut results = seventy_percent();
    results.scenarios[2].secrets_scan = Some(crate::model::results::ScanCoverage {
        scanner: "the Python probe".to_owned(),
        files_scanned: 5120,
        unreadable: 8,
        uid: 1000,
    });
    let said = "lifecycle (repetition 3) scanned for secrets partial (uid 1000, 8 unreadable): a secret readable only by root would not be seen";
    let held = gate(
        &policy("success_rate: 0\n").expect("parses"),
        &results,
        None,
    );
    assert_eq!(
        held[0].reasons,
        [format!("{said} (ship_partial_scans: true ships it)")]
    );
    let shipping = policy("success_rate: 0\nship_partial_scans: true\n").expect("parses");
    let shipped = gate(&shipping, &results, None);
    assert!(shipped[0].ships(), "{shipped:?}");
    assert_eq!(
        shipped[0].notes,
        [format!("{said}; shipped (ship_partial_scans: true)")]
    );
}

#[test]
fn a_named_variant_without_results_holds() {
    let p = policy("variants: [docker, e2b]\nsuccess_rate: 0\n").expect("parses");
    let verdicts = gate(&p, &seventy_percent(), None);
    assert!(verdicts[0].ships());
    assert_eq!(verdicts[1].variant, "e2b");
    assert_eq!(
        verdicts[1].reasons,
        ["the policy requires it and the results have none"]
    );
    assert_eq!(
        render(&verdicts),
        "docker: ship\ne2b: hold (1 reason)\n  - the policy requires it and the results have none\n"
    );
}

#[test]
fn regressions_hold_beyond_noise_and_tolerance() {
    let slower = |factor: f64| {
        let mut results = lifecycle(0);
        for s in &mut results.scenarios {
            for t in &mut s.timings {
                t.duration = t.duration.mul_f64(factor);
            }
        }
        results
    };
    let p = policy("regression:\n  tolerance: 0.25\n").expect("parses");
    let verdicts = gate(&p, &slower(2.0), Some(&lifecycle(0)));
    assert_eq!(verdicts[0].reasons.len(), 1, "{verdicts:?}");
    assert!(
        verdicts[0].reasons[0]
            == ("lifecycle/create-to-first-result is slower than the baseline beyond noise: p50 1.40 s → 2.80 s (×2.00, U test p<0.001), over the tolerance of +25%"),
        "{verdicts:?}"
    );
    assert!(gate(&p, &slower(1.2), Some(&lifecycle(0)))[0].ships());
    let diluted = gate(&p, &slower(2.0), Some(&lifecycle(3)));
    assert!(
        diluted[0].ships(),
        "three failures a side (tied at +∞) leave the doubling within noise"
    );
    let unchecked = gate(&p, &slower(2.0), None);
    assert!(unchecked[0].ships());
    assert_eq!(
        unchecked[0].notes,
        ["regression not checked: no --baseline"]
    );
}

/// `results` with every scenario result replayed at instant pace.
fn replayed(mut results: RunResults) -> RunResults {
    for s in &mut results.scenarios {
        s.source = replay_source(ReplayPace::Instant);
    }
    results
}

#[test]
fn a_variant_with_replays_alone_holds_unless_the_policy_allows_replay() {
    let rules = "required:\n  - lifecycle/*\n";
    let replay = replayed(lifecycle(0));
    let strict = policy(rules).expect("parses");
    let verdicts = gate(&strict, &replay, None);
    assert_eq!(
        verdicts[0].reasons,
        [
            "no live result for docker: its 10 scenario result(s) are replayed from cassettes, which show only that the client still speaks the recorded protocol (allow_replay: true judges them)"
        ]
    );
    assert_eq!(
        render(&verdicts).lines().next(),
        Some("docker: hold (1 reason)")
    );

    let allowing = policy(&format!("{rules}allow_replay: true\n")).expect("parses");
    assert!(allowing.allow_replay);
    let verdicts = gate(&allowing, &replay, Some(&replay));
    assert!(
        verdicts[0].ships() && verdicts[0].replay_only,
        "{verdicts:?}"
    );
    assert_eq!(render(&verdicts), "docker: ship (replay only)\n");

    // Allowed, replays meet every rule: the floor, budgets, the regression rule.
    let floor = policy("success_rate: 0.9\nallow_replay: true\n").expect("parses");
    assert_eq!(
        gate(&floor, &replayed(seventy_percent()), None)[0].reasons,
        [
            "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
            "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
        ]
    );
    let tight = policy(
            "p90_budgets:\n  lifecycle/create-to-first-result: 1s\nregression:\n  tolerance: 0.25\nallow_replay: true\n",
        )
        .expect("parses");
    let verdicts = gate(&tight, &replay, Some(&lifecycle(0)));
    assert_eq!(
        verdicts[0].reasons,
        ["p90 of lifecycle/create-to-first-result is 1.80 s (10/10 ok), over its budget of 1s"]
    );
    assert!(
            verdicts[0].notes[0].starts_with(
                "regression not checked: cannot compare docker × lifecycle × step:build: it is live in the baseline and replay at instant pace in the current run"
            ),
            "{verdicts:?}"
        );

    // The key it replaced is refused where it stands, saying what replaced it.
    let old = policy("success_rate: 0.5\nallow_replayed_timings: true\n")
        .expect_err("the old key is refused");
    assert!(
        old.starts_with("policy.yaml:2:") && old.contains("is now `allow_replay`"),
        "{old}"
    );
}

/// `results` as e2b's, every scenario result run against sandbox-matrix's e2b emulator.
fn emulated(mut results: RunResults) -> RunResults {
    for s in &mut results.scenarios {
        s.variant = "e2b".to_owned();
        s.source = crate::report::fixture::emulated_source();
    }
    results
}

#[test]
fn a_variant_with_emulated_results_alone_holds_unless_the_policy_allows_emulated() {
    let rules = "required:\n  - lifecycle/*\n";
    let only = emulated(lifecycle(0));
    let held = "no live result for e2b: its 10 scenario result(s) ran against sandbox-matrix's emulator, not the provider (allow_emulated: true judges them)";
    let strict = policy(rules).expect("parses");
    assert!(!strict.allow_emulated);
    let verdicts = gate(&strict, &only, None);
    assert_eq!(verdicts[0].reasons, [held]);
    assert_eq!(
        render(&verdicts),
        format!("e2b: hold (1 reason)\n  - {held}\n")
    );

    // allow_replay does not cover emulated results.
    let replays = policy(&format!("{rules}allow_replay: true\n")).expect("parses");
    let verdicts = gate(&replays, &only, None);
    assert_eq!(verdicts[0].reasons, [held]);
    assert!(!verdicts[0].ships());

    let allowing = policy(&format!("{rules}allow_emulated: true\n")).expect("parses");
    assert!(allowing.allow_emulated && !allowing.allow_replay);
    let verdicts = gate(&allowing, &only, Some(&only));
    assert!(
        verdicts[0].ships() && verdicts[0].emulated_only && !verdicts[0].replay_only,
        "{verdicts:?}"
    );
    assert_eq!(render(&verdicts), "e2b: ship (emulated only)\n");

    // Allowed, emulated results meet every rule.
    let floor = policy("success_rate: 0.9\nallow_emulated: true\n").expect("parses");
    let verdicts = gate(&floor, &emulated(seventy_percent()), None);
    assert_eq!(
        verdicts[0].reasons,
        [
            "lifecycle/step:first-result succeeded 7/10 (70%), under the floor of 90%",
            "lifecycle/create-to-first-result succeeded 7/10 (70%), under the floor of 90%",
        ]
    );
    assert_eq!(
        render(&verdicts).lines().next(),
        Some("e2b: hold (2 reasons)")
    );
}

#[test]
fn emulated_results_of_a_live_variant_are_left_out_with_a_note() {
    let budget =
        policy("p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\n").expect("parses");
    // Emulated repetitions over the budget do not count against the live ones.
    let mut merged = emulated(lifecycle(0));
    for s in &mut merged.scenarios {
        s.timings[0].duration *= 10;
    }
    merged.scenarios.extend(
        emulated(lifecycle(0))
            .scenarios
            .into_iter()
            .take(4)
            .map(|s| ScenarioResult {
                source: crate::model::results::Source::Live,
                ..s
            }),
    );
    let verdicts = gate(&budget, &merged, None);
    assert!(
        verdicts[0].ships() && !verdicts[0].emulated_only,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts[0].notes,
        [
            "10 emulated scenario result(s) not judged: they ran against sandbox-matrix's emulator, not the provider; only live results are"
        ]
    );
    assert_eq!(render(&verdicts).lines().next(), Some("e2b: ship"));
    // Judged, the emulated repetitions hold it.
    let judging =
        policy("p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\nallow_emulated: true\n")
            .expect("parses");
    let verdicts = gate(&judging, &merged, None);
    assert_eq!(
        verdicts[0].reasons,
        [
            "p90 of lifecycle/create-to-first-result is 18.01 s (10/10 ok), over its budget of 1s 500ms"
        ]
    );
}

#[test]
fn replayed_and_emulated_results_without_a_live_one_hold_on_both_counts() {
    let mut results = emulated(lifecycle(0));
    for s in results.scenarios.iter_mut().take(4) {
        s.source = replay_source(ReplayPace::Instant);
    }
    let strict = policy("required:\n  - lifecycle/*\n").expect("parses");
    assert_eq!(
        gate(&strict, &results, None)[0].reasons,
        [
            "no live result for e2b: its 4 scenario result(s) are replayed from cassettes, which show only that the client still speaks the recorded protocol (allow_replay: true judges them); its 6 scenario result(s) ran against sandbox-matrix's emulator, not the provider (allow_emulated: true judges them)"
        ]
    );
    let replays = policy("required:\n  - lifecycle/*\nallow_replay: true\n").expect("parses");
    let verdicts = gate(&replays, &results, None);
    assert_eq!(
        verdicts[0].notes,
        [
            "6 emulated scenario result(s) not judged: they ran against sandbox-matrix's emulator, not the provider; only live and replayed results are"
        ]
    );
    assert_eq!(
        render(&verdicts).lines().next(),
        Some("e2b: ship (replay only)")
    );
    let both = policy("required:\n  - lifecycle/*\nallow_replay: true\nallow_emulated: true\n")
        .expect("parses");
    let verdicts = gate(&both, &results, None);
    assert!(verdicts[0].notes.is_empty(), "{verdicts:?}");
    assert_eq!(render(&verdicts), "e2b: ship (replay and emulated only)\n");
}

#[test]
fn a_build_budget_judges_the_build_that_made_the_artifact_and_no_build_is_not_held() {
    // docker: burst built the artifact, lifecycle reused it.
    let burst = ScenarioResult {
        steps: vec![step("build", StepStatus::Passed, 40_000, 600, vec![], &[])],
        ..scenario("docker", "burst")
    };
    let mut reused = step(
        "build",
        skipped("reused image-id sha256:ab (built in burst)"),
        0,
        600,
        vec![],
        &[],
    );
    reused.reused = Some(crate::model::results::ReusedArtifact {
        artifact: "sha256:ab".to_owned(),
        built_in: "burst".to_owned(),
    });
    let lifecycle = ScenarioResult {
        steps: vec![reused],
        ..scenario("docker", "lifecycle")
    };
    // datalayer-runtimes launches an environment by name: it builds nothing.
    let by_name = ScenarioResult {
        steps: vec![step(
            "build",
            skipped("the variant launches an environment by name: nothing to build"),
            0,
            600,
            vec![],
            &[],
        )],
        ..scenario("datalayer-runtimes", "lifecycle")
    };
    let results = run(vec![burst, lifecycle, by_name]);

    let tight = policy("p90_budgets:\n  lifecycle/step:build: 30s\n").expect("parses");
    let verdicts = gate(&tight, &results, None);
    assert_eq!(
        verdicts[0].reasons,
        [
            "p90 of burst/step:build is 40.01 s (1/1 ok), over its budget of 30s (the build lifecycle/step:build asks of: lifecycle reused the artifact burst built)"
        ]
    );
    assert!(verdicts[1].ships(), "{verdicts:?}");
    assert_eq!(
        verdicts[1].notes,
        [
            "lifecycle/step:build not judged: datalayer-runtimes built nothing in this run (the variant launches an environment by name: nothing to build)"
        ]
    );
    let roomy = policy("p90_budgets:\n  lifecycle/step:build: 1m\n").expect("parses");
    assert!(gate(&roomy, &results, None).iter().all(Verdict::ships));
}

#[test]
fn a_live_variant_is_judged_on_its_live_timings_only() {
    let budget =
        policy("p90_budgets:\n  lifecycle/create-to-first-result: 1500ms\n").expect("parses");
    // Replayed repetitions, first and over the budget, do not count against the live ones.
    let mut merged = replayed(lifecycle(0));
    for s in &mut merged.scenarios {
        s.timings[0].duration *= 10;
    }
    merged
        .scenarios
        .extend(lifecycle(0).scenarios.into_iter().take(4));
    let verdicts = gate(&budget, &merged, None);
    assert!(
        verdicts[0].ships() && !verdicts[0].replay_only,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts[0].notes,
        ["10 replayed scenario result(s) not judged: only live results are"]
    );
}
