//! JUnit XML: one test suite per variant, one test case per step.

use std::path::Path;
use std::time::Duration;
use std::{fs, io};

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use sandbox_providers::Timing;

use crate::analyze::{board, stats};
use crate::model::results::{Mode, Modes, RunResults, ScenarioResult, StepResult, StepStatus, TTI};

/// The JUnit report's name.
pub const REPORT_NAME: &str = "sandbox-matrix";

/// The `type` of a failed step's `<failure>` element.
pub const FAILURE_TYPE: &str = "step-failed";

/// Renders `results` as a JUnit XML document.
///
/// Each variant × mode is a `<testsuite>` named `<variant> · <mode>` (`e2b · replay`,
/// `e2b · emulated`, `docker · live`), in order of first appearance, so that a dashboard
/// never counts a replay (our client against a recording) or an emulated run (against
/// sandbox-matrix's emulator) as a provider's passing tests, nor merges them with live
/// results of one variant; each step of each of its scenarios is a
/// `<testcase>` named after the step with classname `<variant>.<scenario>`, in input order.
/// A scenario that ran more than once has one case per step per repetition,
/// named `<step> (repetition <k>)`: repetitions are separate measurements, not
/// retries, so they are not written as reruns.
/// A variant's measured, replayed and emulated results are separate suites. Suite
/// properties hold the provenance, `mode` (the suite's modes: `live`, `replay`, `emulated`,
/// `live+record`…) and, per scenario (`<scenario>`, or `<scenario>[<k>]` for repetition k
/// of a repeated one), `<scenario>.mode`, for a replay `<scenario>.cassette`,
/// `<scenario>.cassette-origin`, `<scenario>.cassette-written` (when known) and
/// `<scenario>.pace`, for an emulated result `<scenario>.emulator`, then `<scenario>.scenario_hash`,
/// `<scenario>.artifact_id`, `<scenario>.provider_version` and `<scenario>.region`
/// (when known), the cross-step timings as `<scenario>.timing.<name>_ms`, and for a
/// scenario with a `sequential`, `staggered` or `burst` step the boards' score of its TTIs
/// as `<scenario>.board_score`, `<scenario>.board_tti_ok` and
/// `<scenario>.board_methodology`. Case
/// properties hold `budget_ms`, `duration_ms` and the step's timings as
/// `timing.<name>_ms` (and `timing.<name>.resolution_ms` when polled); the step's log
/// is its `<system-out>`. Milliseconds are written as decimals, such as `1234.5`.
pub fn render(results: &RunResults) -> String {
    let mut report = Report::new(REPORT_NAME);
    let mut total = Duration::ZERO;
    for (variant, scenarios) in super::by_variant(results) {
        let mut modes: Vec<(Mode, Vec<&ScenarioResult>)> = Vec::new();
        for scenario in scenarios {
            let mode = scenario.source.mode();
            match modes.iter_mut().find(|(m, _)| *m == mode) {
                Some((_, of_mode)) => of_mode.push(scenario),
                None => modes.push((mode, vec![scenario])),
            }
        }
        for (mode, scenarios) in modes {
            let suite = suite(results, &format!("{variant} · {mode}"), &scenarios);
            total += suite.time.unwrap_or_default();
            report.add_test_suite(suite);
        }
    }
    report.set_time(total);
    report
        .to_string()
        .expect("a JUnit report serializes into memory without I/O errors")
}

/// Writes [`render`]'s output to `path`, replacing any file there.
///
/// # Errors
///
/// The error of creating or writing the file.
pub fn write(results: &RunResults, path: impl AsRef<Path>) -> io::Result<()> {
    fs::write(path, render(results))
}

/// The test suite `name` of one variant's results in one mode.
fn suite(results: &RunResults, name: &str, scenarios: &[&ScenarioResult]) -> TestSuite {
    let provenance = &results.provenance;
    let mut suite = TestSuite::new(name);
    suite.add_properties([
        Property::new("run_id", &provenance.run_id),
        Property::new("harness_version", &provenance.harness_version),
        Property::new("host", &provenance.host),
        Property::new("started_at", &provenance.started_at),
        Property::new(
            "mode",
            Modes::of(scenarios.iter().map(|s| &s.source)).to_string(),
        ),
    ]);
    let mut time = Duration::ZERO;
    for scenario in scenarios {
        let repeated = scenarios
            .iter()
            .filter(|other| other.scenario == scenario.scenario)
            .count()
            > 1;
        let name = if repeated {
            format!("{}[{}]", scenario.scenario, scenario.repetition)
        } else {
            scenario.scenario.clone()
        };
        suite.add_property(Property::new(
            format!("{name}.mode"),
            scenario.source.mode().to_string(),
        ));
        if let Some(replay) = scenario.source.replay() {
            suite.add_property(Property::new(format!("{name}.cassette"), &replay.cassette));
            if let Some(origin) = &replay.origin {
                suite.add_property(Property::new(format!("{name}.cassette-origin"), origin));
            }
            if let Some(written) = &replay.written {
                suite.add_property(Property::new(format!("{name}.cassette-written"), written));
            }
            suite.add_property(Property::new(
                format!("{name}.pace"),
                replay.pace.to_string(),
            ));
        }
        if let Some(emulator) = scenario.source.emulator() {
            suite.add_property(Property::new(format!("{name}.emulator"), emulator));
        }
        suite.add_property(Property::new(
            format!("{name}.scenario_hash"),
            &scenario.scenario_hash,
        ));
        if let Some(id) = &scenario.artifact_id {
            suite.add_property(Property::new(format!("{name}.artifact_id"), id));
        }
        if let Some(version) = &scenario.provider_version {
            suite.add_property(Property::new(format!("{name}.provider_version"), version));
        }
        if let Some(region) = &scenario.region {
            suite.add_property(Property::new(format!("{name}.region"), region));
        }
        suite.add_properties(timing_properties(&format!("{name}."), &scenario.timings));
        // A sequential, staggered or burst step: the public boards' score of its TTIs.
        let launched = scenario
            .steps
            .iter()
            .any(|s| matches!(s.step.as_str(), "sequential" | "staggered" | "burst"));
        if launched
            && let Some(figures) = board::BoardFigures::of(&stats::attempts(&[scenario], TTI))
        {
            suite.add_property(Property::new(
                format!("{name}.board_score"),
                format!("{:.1}", figures.score),
            ));
            suite.add_property(Property::new(
                format!("{name}.board_tti_ok"),
                format!("{}/{}", figures.successes, figures.n),
            ));
            suite.add_property(Property::new(
                format!("{name}.board_methodology"),
                board::METHODOLOGY,
            ));
        }
        let classname = format!("{}.{}", scenario.variant, scenario.scenario);
        for step in &scenario.steps {
            time += step.duration;
            let mut case = case(&classname, step);
            if repeated {
                case.name = format!("{} (repetition {})", step.step, scenario.repetition).into();
            }
            suite.add_test_case(case);
        }
    }
    suite.set_time(time);
    suite
}

/// The test case of one step.
fn case(classname: &str, step: &StepResult) -> TestCase {
    let status = match &step.status {
        StepStatus::Passed => TestCaseStatus::success(),
        StepStatus::Failed { reason } => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_message(reason).set_type(FAILURE_TYPE);
            status
        }
        StepStatus::Skipped { reason } => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(reason);
            status
        }
    };
    let mut case = TestCase::new(&step.step, status);
    case.set_classname(classname).set_time(step.duration);
    case.add_properties([
        Property::new("budget_ms", millis(step.budget)),
        Property::new("duration_ms", millis(step.duration)),
    ]);
    case.add_properties(timing_properties("", &step.timings));
    if !step.log.is_empty() {
        case.set_system_out(step.log.join("\n"));
    }
    case
}

/// `<prefix>timing.<name>_ms` for each timing, followed by
/// `<prefix>timing.<name>.resolution_ms` when it was polled.
fn timing_properties(prefix: &str, timings: &[Timing]) -> Vec<Property> {
    let mut properties = Vec::new();
    for timing in timings {
        let name = &timing.name;
        properties.push(Property::new(
            format!("{prefix}timing.{name}_ms"),
            millis(timing.duration),
        ));
        if let Some(resolution) = timing.resolution {
            properties.push(Property::new(
                format!("{prefix}timing.{name}.resolution_ms"),
                millis(resolution),
            ));
        }
    }
    properties
}

/// `duration` in milliseconds, rounded to the microsecond, without trailing zeros.
fn millis(duration: Duration) -> String {
    let micros = (duration.as_nanos() + 500) / 1_000;
    let (whole, fraction) = (micros / 1_000, micros % 1_000);
    if fraction == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{fraction:03}")
            .trim_end_matches('0')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use roxmltree::{Document, Node};

    use super::*;
    use crate::report::fixture::{run, scenario, step, timing, two_variants, with_repetitions};

    /// The value of the property `name` directly under `node`.
    fn property<'a>(node: Node<'a, 'a>, name: &str) -> Option<&'a str> {
        node.children()
            .filter(|child| child.has_tag_name("properties"))
            .flat_map(|properties| properties.children())
            .find(|property| property.attribute("name") == Some(name))
            .and_then(|property| property.attribute("value"))
    }

    /// The child elements of `node` named `tag`.
    fn elements<'a>(node: Node<'a, 'a>, tag: &str) -> Vec<Node<'a, 'a>> {
        node.children()
            .filter(|child| child.has_tag_name(tag))
            .collect()
    }

    /// `node`'s attribute `name` as a number.
    fn count(node: Node<'_, '_>, name: &str) -> usize {
        node.attribute(name).expect(name).parse().expect(name)
    }

    #[test]
    fn snapshot() {
        let xml = render(&two_variants());
        crate::report::fixture::redacted().bind(|| insta::assert_snapshot!("junit", xml));
    }

    #[test]
    fn repetitions_are_distinct_cases_with_their_own_properties() {
        let xml = render(&with_repetitions());
        let document = Document::parse(&xml).expect("well-formed XML");
        let docker = document
            .root_element()
            .first_element_child()
            .expect("a suite");
        let cases = elements(docker, "testcase");
        assert_eq!(cases.len(), 21);
        let names: Vec<&str> = cases
            .iter()
            .filter(|case| case.attribute("classname") == Some("docker.lifecycle"))
            .filter_map(|case| case.attribute("name"))
            .filter(|name| name.starts_with("first-result"))
            .collect();
        assert_eq!(
            names,
            [
                "first-result (repetition 1)",
                "first-result (repetition 2)",
                "first-result (repetition 3)"
            ]
        );
        assert_eq!(
            [
                count(docker, "tests"),
                count(docker, "failures"),
                count(docker, "skipped")
            ],
            [21, 1, 3]
        );
        assert!(
            cases
                .iter()
                .all(|case| elements(*case, "rerunFailure").is_empty()
                    && elements(*case, "flakyFailure").is_empty())
        );
        assert_eq!(
            property(docker, "lifecycle[2].timing.create-to-first-result_ms"),
            Some("2480")
        );
        assert_eq!(
            property(docker, "lifecycle[3].timing.create-to-first-result_ms"),
            None
        );
        assert!(property(docker, "lifecycle[1].scenario_hash").is_some());
        assert!(property(docker, "lifecycle.scenario_hash").is_none());
        let e2b = elements(document.root_element(), "testsuite")[1];
        assert!(
            property(e2b, "lifecycle.scenario_hash").is_some(),
            "e2b ran once"
        );
    }

    #[test]
    fn parses_back_with_counts_per_suite() {
        let xml = render(&two_variants());
        let document = Document::parse(&xml).expect("well-formed XML");
        let root = document.root_element();
        assert!(root.has_tag_name("testsuites"));
        assert_eq!(root.attribute("name"), Some(REPORT_NAME));
        assert_eq!(
            [
                count(root, "tests"),
                count(root, "failures"),
                count(root, "skipped")
            ],
            [14, 1, 3]
        );

        let suites = elements(root, "testsuite");
        let names: Vec<_> = suites.iter().map(|suite| suite.attribute("name")).collect();
        assert_eq!(names, [Some("docker · live"), Some("e2b · replay")]);
        for (suite, [tests, failures, skipped]) in suites.iter().zip([[7, 0, 0], [7, 1, 3]]) {
            let cases = elements(*suite, "testcase");
            let with = |tag| {
                cases
                    .iter()
                    .filter(|case| !elements(**case, tag).is_empty())
                    .count()
            };
            assert_eq!(cases.len(), tests);
            assert_eq!(with("failure"), failures);
            assert_eq!(with("skipped"), skipped);
            assert_eq!(
                [
                    count(*suite, "tests"),
                    count(*suite, "failures"),
                    count(*suite, "skipped")
                ],
                [tests, failures, skipped]
            );
            assert_eq!(count(*suite, "errors"), 0);
        }
    }

    #[test]
    fn cases_carry_status_properties_and_log() {
        let xml = render(&two_variants());
        let document = Document::parse(&xml).expect("well-formed XML");
        let case = |classname: &str, name: &str| {
            document
                .descendants()
                .find(|node| {
                    node.has_tag_name("testcase")
                        && node.attribute("classname") == Some(classname)
                        && node.attribute("name") == Some(name)
                })
                .expect(name)
        };

        let failed = case("e2b.lifecycle", "first-result");
        let failure = elements(failed, "failure")[0];
        assert_eq!(failure.attribute("message"), Some("expected `2`, got `3`"));
        assert_eq!(failure.attribute("type"), Some(FAILURE_TYPE));
        assert_eq!(failed.attribute("time"), Some("1.904"));
        assert_eq!(property(failed, "budget_ms"), Some("60000"));
        assert_eq!(property(failed, "duration_ms"), Some("1904"));
        assert_eq!(elements(failed, "system-out")[0].text(), Some("1+1 -> 3"));

        let skipped = elements(case("e2b.lifecycle", "restart"), "skipped")[0];
        assert_eq!(
            skipped.attribute("message"),
            Some("an earlier step failed: first-result")
        );
        assert!(elements(case("e2b.lifecycle", "restart"), "system-out").is_empty());

        let launch = case("docker.lifecycle", "launch");
        assert_eq!(property(launch, "timing.container-running_ms"), Some("405"));
        assert_eq!(
            property(launch, "timing.container-running.resolution_ms"),
            Some("50")
        );
        let cleanup = case("docker.lifecycle", "cleanup");
        let log = elements(cleanup, "system-out")[0].text().expect("a log");
        assert!(log.starts_with("removed container 9c2e41d07a5b\nremoved image sha256:"));

        let docker = document
            .root_element()
            .first_element_child()
            .expect("a suite");
        assert_eq!(property(docker, "run_id"), Some("20251129T121314Z-7f3a9c"));
        assert_eq!(property(docker, "harness_version"), Some("0.1.0"));
        assert_eq!(property(docker, "host"), Some("ci-runner-07"));
        assert_eq!(
            property(docker, "started_at"),
            Some("2025-11-29T12:13:14.512+00:00")
        );
        assert_eq!(
            property(docker, "lifecycle.scenario_hash").map(str::len),
            Some(64)
        );
        assert!(property(docker, "lifecycle.artifact_id").is_some_and(|id| id.len() == 71));
        assert_eq!(
            property(docker, "lifecycle.timing.create-to-first-result_ms"),
            Some("2310")
        );
    }

    #[test]
    fn suites_say_where_their_numbers_come_from() {
        let xml = render(&two_variants());
        let document = Document::parse(&xml).expect("well-formed XML");
        let suites = elements(document.root_element(), "testsuite");
        let (docker, e2b) = (suites[0], suites[1]);
        assert_eq!(property(docker, "mode"), Some("live"));
        assert_eq!(property(docker, "lifecycle.mode"), Some("live"));
        assert_eq!(property(docker, "lifecycle.cassette"), None);
        assert_eq!(property(e2b, "mode"), Some("replay"));
        assert_eq!(property(e2b, "lifecycle.mode"), Some("replay"));
        assert_eq!(
            property(e2b, "lifecycle.cassette"),
            Some("fixtures/cassettes/e2b/lifecycle.yaml")
        );
        assert_eq!(
            property(e2b, "lifecycle.cassette-origin"),
            Some("authored from e2b/openapi.yml@0.1.0, answered by an emulator")
        );
        assert_eq!(
            property(e2b, "lifecycle.cassette-written"),
            Some("2026-11-29")
        );
        assert_eq!(property(e2b, "lifecycle.pace"), Some("instant"));

        let mut merged = two_variants();
        let mut live = merged.scenarios[1].clone();
        live.source = crate::model::results::Source::Live;
        live.repetition = 2;
        merged.scenarios.push(live);
        let xml = render(&merged);
        let document = Document::parse(&xml).expect("well-formed XML");
        // Live and replayed results of one variant are two suites, never one.
        let suites = elements(document.root_element(), "testsuite");
        let names: Vec<_> = suites.iter().map(|suite| suite.attribute("name")).collect();
        assert_eq!(
            names,
            [
                Some("docker · live"),
                Some("e2b · replay"),
                Some("e2b · live")
            ]
        );
        assert_eq!(property(suites[1], "mode"), Some("replay"));
        assert_eq!(property(suites[2], "mode"), Some("live"));
        assert_eq!(property(suites[2], "lifecycle.mode"), Some("live"));
        assert_eq!(property(suites[2], "lifecycle.cassette"), None);
    }

    #[test]
    fn an_emulated_result_is_its_own_suite_naming_the_emulator() {
        use crate::report::fixture::{EMULATOR, emulated_source};
        let mut results = two_variants();
        let mut emulated = results.scenarios[1].clone();
        emulated.source = emulated_source();
        let mut live = results.scenarios[1].clone();
        live.source = crate::model::results::Source::Live;
        results.scenarios.push(emulated);
        results.scenarios.push(live);
        let xml = render(&results);
        let document = Document::parse(&xml).expect("well-formed XML");
        let suites = elements(document.root_element(), "testsuite");
        let names: Vec<_> = suites.iter().map(|suite| suite.attribute("name")).collect();
        assert_eq!(
            names,
            [
                Some("docker · live"),
                Some("e2b · replay"),
                Some("e2b · emulated"),
                Some("e2b · live")
            ]
        );
        let emulated = suites[2];
        assert_eq!(property(emulated, "mode"), Some("emulated"));
        assert_eq!(property(emulated, "lifecycle.mode"), Some("emulated"));
        assert_eq!(property(emulated, "lifecycle.emulator"), Some(EMULATOR));
        assert_eq!(property(emulated, "lifecycle.cassette"), None);
        assert_eq!(elements(emulated, "testcase").len(), 7);
        for other in [suites[0], suites[1], suites[3]] {
            assert_eq!(property(other, "lifecycle.emulator"), None);
        }
    }

    #[test]
    fn suites_group_variants_in_first_appearance_order() {
        let case = |name: &str| step(name, StepStatus::Passed, 1, 1, vec![], &[]);
        let results = run(vec![
            ScenarioResult {
                steps: vec![case("a")],
                ..scenario("docker", "lifecycle")
            },
            ScenarioResult {
                steps: vec![case("b")],
                ..scenario("modal", "lifecycle")
            },
            ScenarioResult {
                steps: vec![case("c")],
                ..scenario("docker", "secrets")
            },
        ]);
        let xml = render(&results);
        let document = Document::parse(&xml).expect("well-formed XML");
        let layout: Vec<(&str, Vec<(&str, &str)>)> = elements(document.root_element(), "testsuite")
            .into_iter()
            .map(|suite| {
                let cases = elements(suite, "testcase")
                    .into_iter()
                    .map(|case| {
                        (
                            case.attribute("classname").unwrap(),
                            case.attribute("name").unwrap(),
                        )
                    })
                    .collect();
                (suite.attribute("name").unwrap(), cases)
            })
            .collect();
        assert_eq!(
            layout,
            [
                (
                    "docker · live",
                    vec![("docker.lifecycle", "a"), ("docker.secrets", "c")]
                ),
                ("modal · live", vec![("modal.lifecycle", "b")]),
            ]
        );
        let docker = document
            .root_element()
            .first_element_child()
            .expect("a suite");
        assert!(property(docker, "secrets.scenario_hash").is_some());
        assert!(property(docker, "lifecycle.artifact_id").is_none());
    }

    #[test]
    fn timings_prefix_their_scenario_and_resolution() {
        let properties = timing_properties("lifecycle.", &[timing("t", 7, Some(250))]);
        let pairs: Vec<_> = properties
            .iter()
            .map(|p| (p.name.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("lifecycle.timing.t_ms", "7"),
                ("lifecycle.timing.t.resolution_ms", "250")
            ]
        );
    }

    #[test]
    fn millis_are_decimal_milliseconds() {
        assert_eq!(millis(Duration::ZERO), "0");
        assert_eq!(millis(Duration::from_secs(60)), "60000");
        assert_eq!(millis(Duration::from_micros(2_310_500)), "2310.5");
        assert_eq!(millis(Duration::from_nanos(1_234_567)), "1.235");
        assert_eq!(millis(Duration::from_nanos(499)), "0");
    }

    #[test]
    fn write_saves_the_rendered_report() {
        let results = two_variants();
        let path =
            std::env::temp_dir().join(format!("sandbox-matrix-junit-{}.xml", std::process::id()));
        write(&results, &path).expect("writable temp dir");
        let written = fs::read_to_string(&path).expect("readable");
        fs::remove_file(&path).expect("removable");
        assert_eq!(written, render(&results));
    }
}
