//! Property tests of the parsers that read what users and sandboxes hand the harness: the
//! scenario parser, the gate's policy parser and the doctor's report (the probe's answer
//! line and its judgement). Inputs are generated near the valid grammar (real keys with
//! random values, truncations, random bytes) so they reach past the first error. Each must
//! answer Ok or a clear error, never panic, and stay within a bounded peak of memory,
//! measured by a counting allocator in this test binary.
//!
//! `cargo test` runs 256 cases per parser; a longer run (the nightly's) sets
//! `PROPTEST_CASES=20000`. A 200,000-step scenario is parsed once the same way: it is
//! refused or listed, within the memory bound.

use std::path::Path;

use proptest::prelude::*;
use sandbox_matrix::analyze::gate::Policy;
use sandbox_matrix::checks::conformance::{ANSWER_MARKER, judge_doctor, parse_answer};
use sandbox_matrix::run::scenario::Scenario;

#[path = "../../providers/tests/support/peak.rs"]
mod peak;

use peak::{MEASURING, PEAK_BOUND, peak_of, runner};

#[global_allocator]
static ALLOCATOR: peak::Counting = peak::Counting;

/// A YAML scalar of the kinds a scenario or policy holds, and some it must refuse.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,25}(ms|s|m|h|d)?",
        "-?[0-9]{1,6}(\\.[0-9]{1,4})?(e[0-9]{1,3})?",
        "[a-z-]{0,12}",
        Just("18446744073709551615s".to_owned()),
        Just("~".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("\"../../etc\"".to_owned()),
        "\"[^\"\\\\]{0,20}\"",
        "[ -~]{0,30}",
    ]
}

/// A scenario: real keys and step kinds, random values, sometimes a random line.
fn scenario_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("budget"),
        Just("within"),
        Just("expect"),
        Just("kernels"),
        Just("launches"),
        Just("gpus"),
        Just("packages"),
        Just("unknown"),
    ];
    let kind = prop_oneof![
        Just("step: build"),
        Just("step: launch"),
        Just("step: first-result"),
        Just("step: cleanup"),
        Just("check: doctor"),
        Just("check: restart"),
        Just("check: shutdown"),
        Just("step: nonsense"),
    ];
    let step =
        (kind, proptest::collection::vec((key, scalar()), 0..3)).prop_map(|(kind, fields)| {
            let mut text = format!("  - {kind}\n");
            for (key, value) in fields {
                text.push_str(&format!("    {key}: {value}\n"));
            }
            text
        });
    (
        scalar(),
        scalar(),
        proptest::collection::vec(step, 0..6),
        proptest::option::of("[ -~\t]{0,40}"),
        any::<usize>(),
    )
        .prop_map(|(name, environment, steps, noise, cut)| {
            let mut text = format!("name: {name}\nenvironment: {environment}\nsteps:\n");
            for step in steps {
                text.push_str(&step);
            }
            if let Some(noise) = noise {
                text.push_str(&noise);
                text.push('\n');
            }
            // Sometimes cut short, at a character boundary.
            if cut % 4 == 0 && !text.is_empty() {
                let at = cut % text.len();
                let at = (0..=at)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text.truncate(at);
            }
            text
        })
}

/// A gate policy: its real keys with random values.
fn policy_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("required"),
        Just("min-success-rate"),
        Just("max-regression"),
        Just("variants"),
        Just("budgets"),
        Just("unknown"),
    ];
    proptest::collection::vec(
        (key, scalar(), proptest::collection::vec(scalar(), 0..3)),
        0..5,
    )
    .prop_map(|entries| {
        let mut text = String::new();
        for (key, value, items) in entries {
            if items.is_empty() {
                text.push_str(&format!("{key}: {value}\n"));
            } else {
                text.push_str(&format!("{key}:\n"));
                for item in items {
                    text.push_str(&format!("  - {item}\n"));
                }
            }
        }
        text
    })
}

/// A probe's stdout: noise lines and an answer line holding doctor-shaped JSON or junk.
fn doctor_stdout() -> impl Strategy<Value = String> {
    let row = ("[a-z-]{1,12}", any::<bool>(), "[ -~]{0,20}").prop_map(
        |(id, passed, detail)| serde_json::json!({"id": id, "ok": passed, "message": detail}),
    );
    let report = (
        prop_oneof![Just("sandbox-contract/v1".to_owned()), "[ -~]{0,20}"],
        proptest::collection::vec(row, 0..5),
    )
        .prop_map(|(contract, rows)| {
            serde_json::json!({"contract": contract, "rows": rows}).to_string()
        });
    let answer = (
        any::<i64>(),
        prop_oneof![report, "[ -~]{0,60}"],
        any::<bool>(),
    )
        .prop_map(|(exit, stdout, found)| {
            serde_json::json!({"exit": exit, "stdout": stdout, "found": found}).to_string()
        });
    (
        "[ -~\n]{0,200}",
        prop_oneof![answer, "[ -~]{0,80}"],
        any::<bool>(),
    )
        .prop_map(|(noise, answer, marked)| {
            if marked {
                format!("{noise}\n{ANSWER_MARKER}{answer}\n")
            } else {
                format!("{noise}\n{answer}\n")
            }
        })
}

#[test]
fn the_scenario_parser_answers_every_input_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let path = Path::new("/nonexistent/scenarios/generated.yaml");
    runner()
        .run(&scenario_text(), |text| {
            let (result, peak) = peak_of(|| {
                Scenario::parse(path, &text)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
            prop_assert!(
                peak < PEAK_BOUND,
                "{peak} bytes for {} bytes of input",
                text.len()
            );
            if let Err(message) = result {
                prop_assert!(!message.trim().is_empty());
                prop_assert!(
                    message.contains("generated.yaml"),
                    "the error names the file: {message}"
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_scenario_parser_answers_random_text() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let path = Path::new("random.yaml");
    runner()
        .run(&"(?s).{0,400}", |text| {
            let (_, peak) = peak_of(|| {
                Scenario::parse(path, &text)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes");
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_policy_parser_answers_every_input_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let path = Path::new("generated-policy.yaml");
    runner()
        .run(&policy_text(), |text| {
            let (result, peak) = peak_of(|| {
                Policy::parse(path, &text)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes");
            if let Err(message) = result {
                prop_assert!(message.contains("generated-policy.yaml"), "{message}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_doctor_report_reader_answers_every_stdout_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&doctor_stdout(), |stdout| {
            let (verdict, peak) =
                peak_of(|| parse_answer(&stdout).map(|answer| judge_doctor(&answer)));
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes");
            if let Ok(verdict) = verdict {
                prop_assert!(
                    verdict.passed || verdict.detail.as_ref().is_some_and(|d| !d.is_empty()),
                    "a failed verdict says why: {verdict:?}"
                );
            }
            Ok(())
        })
        .unwrap();
}

/// 200,000 steps (about 7 MB of YAML): refused with a clear error or parsed, and either
/// way within a bounded peak (the text itself is 6 MB; the bound is 40 times that).
#[test]
fn a_scenario_of_200_000_steps_is_refused_or_parsed_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let mut text =
        String::from("name: huge\nenvironment: ../fixtures/environments/reference\nsteps:\n");
    for _ in 0..200_000 {
        text.push_str("  - check: doctor\n    budget: 60s\n");
    }
    let (result, peak) = peak_of(|| {
        Scenario::parse(Path::new("huge.yaml"), &text)
            .map(|s| s.steps.len())
            .map_err(|e| e.to_string())
    });
    eprintln!(
        "200,000 steps ({} bytes): {:?}, peak {} MiB",
        text.len(),
        result.as_ref().map_err(|e| sandbox_providers::tail(e, 200)),
        peak >> 20
    );
    assert!(
        peak < 40 * text.len(),
        "{peak} bytes for {} bytes",
        text.len()
    );
    match result {
        Ok(steps) => assert_eq!(steps, 200_000),
        Err(message) => assert!(
            message.contains("huge.yaml") && !message.contains("Nodes {"),
            "refused naming the file, in words: {message}"
        ),
    }
}
