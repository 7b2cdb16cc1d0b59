use std::time::Duration;

use boon::{Compiler, Schemas};
use serde_json::Value;

use super::*;
use crate::report::fixture::{EMULATOR, emulated_source, scenario, two_variants};

const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/schemas/results.schema.json"
);

/// Why `results` does not satisfy the checked-in schema, if it does not.
fn violations(results: &Value) -> Option<String> {
    let text = std::fs::read_to_string(SCHEMA).expect("the schema is readable");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    let id = schema["$id"].as_str().expect("an $id").to_owned();
    let mut compiler = Compiler::new();
    compiler.enable_format_assertions();
    compiler
        .add_resource(&id, schema)
        .expect("the schema loads");
    let mut schemas = Schemas::new();
    let index = compiler
        .compile(&id, &mut schemas)
        .unwrap_or_else(|e| panic!("the schema compiles: {e}"));
    schemas
        .validate(results, index)
        .err()
        .map(|e| format!("{e:#}"))
}

/// The fixture run (docker live, e2b replayed), with what it lacks: a merged provenance
/// with the base it built from, a region, a secrets scan's coverage, a second repetition with samples (one failed), a replay at recorded pace
/// from a cassette with no date, a recording, an emulated result, and a variant the
/// runner could not reach.
fn everything() -> RunResults {
    let mut results = two_variants();
    results.provenance.base = Some(
        "sandbox-matrix/contract-base:v1, made from the Debian image debian@sha256:ab".to_owned(),
    );
    let shard = results.provenance.clone();
    results.provenance.shards = vec![shard.clone(), shard];
    results.scenarios[0].region = Some("local".to_owned());
    results.scenarios[0].secrets_scan = Some(ScanCoverage {
        scanner: "the image's doctor".to_owned(),
        files_scanned: 5120,
        unreadable: 0,
        uid: 0,
    });
    let mut second = results.scenarios[0].clone();
    second.repetition = 2;
    second.samples = vec![
        Sample {
            name: "create-to-first-result".to_owned(),
            value: Some(Duration::from_micros(2_310_500)),
            error: None,
        },
        Sample {
            name: "create-to-first-result".to_owned(),
            value: None,
            error: Some("no answer within 90s".to_owned()),
        },
    ];
    results.scenarios.push(second);
    let mut undated = results.scenarios[1].clone();
    undated.repetition = 2;
    undated.source = Source::Replay {
        replay: Replay {
            written: None,
            pace: ReplayPace::Recorded,
            ..results.scenarios[1]
                .source
                .replay()
                .expect("the fixture's e2b is replayed")
                .clone()
        },
    };
    results.scenarios.push(undated);
    let mut recorded = results.scenarios[1].clone();
    recorded.variant = "daytona".to_owned();
    recorded.source = Source::Record;
    results.scenarios.push(recorded);
    let mut emulated = results.scenarios[1].clone();
    emulated.variant = "modal".to_owned();
    emulated.source = emulated_source();
    results.scenarios.push(emulated);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/t.yaml");
    let text = "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5s\n  - step: launch\n    budget: 5s\n";
    let parsed = crate::run::scenario::Scenario::parse(&path, text).expect("scenario parses");
    results
        .scenarios
        .push(crate::run::runner::unreachable_variant(
            "modal",
            &parsed,
            Source::Live,
            "no token",
        ));
    results
}

#[test]
fn results_satisfy_the_schema() {
    let results = everything();
    let value = serde_json::to_value(&results).expect("serializes");
    assert_eq!(violations(&value), None);
    let minimal = serde_json::to_value(crate::report::fixture::run(vec![scenario("a", "b")]))
        .expect("serializes");
    assert_eq!(violations(&minimal), None);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/gate/results.json");
    let text = std::fs::read_to_string(example).expect("the gate example is readable");
    assert_eq!(
        violations(&serde_json::from_str(&text).expect("JSON")),
        None
    );
}

#[test]
fn a_written_run_folder_satisfies_the_schema_and_loads_back() {
    let results = everything();
    let out = std::env::temp_dir().join(format!("sm-results-schema-{}", std::process::id()));
    let dir = crate::report::run_folder::write(&out, &results, &[])
        .expect("writes")
        .dir;
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path).expect("readable");
    let loaded = load(&path);
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(
        violations(&serde_json::from_str(&text).expect("JSON")),
        None
    );
    assert_eq!(loaded.expect("loads"), results);
}

#[test]
fn the_schema_rejects_a_wrong_type_and_a_missing_field() {
    let good = serde_json::to_value(everything()).expect("serializes");

    let mut wrong_type = good.clone();
    wrong_type["scenarios"][0]["repetition"] = Value::from("two");
    let why = violations(&wrong_type).expect("a string repetition is rejected");
    assert!(why.contains("/scenarios/0/repetition"), "{why}");

    assert_eq!(good["scenarios"][0]["mode"], "live");
    assert_eq!(good["scenarios"][1]["mode"], "replay");
    assert_eq!(
        good["scenarios"][1]["replay"]["cassette"],
        "fixtures/cassettes/e2b/lifecycle.yaml"
    );
    let mut no_mode = good.clone();
    no_mode["scenarios"][0]
        .as_object_mut()
        .expect("an object")
        .remove("mode");
    let why = violations(&no_mode).expect("a result without mode is rejected");
    assert!(why.contains("mode"), "{why}");
    let mut no_cassette = good.clone();
    no_cassette["scenarios"][1]
        .as_object_mut()
        .expect("an object")
        .remove("replay");
    let why = violations(&no_cassette).expect("a replay without its cassette is rejected");
    assert!(why.contains("replay"), "{why}");
    let mut live_with_cassette = good.clone();
    live_with_cassette["scenarios"][0]["replay"] = good["scenarios"][1]["replay"].clone();
    assert!(
        violations(&live_with_cassette).is_some(),
        "a live result names no cassette"
    );
    let mut bad_date = good.clone();
    bad_date["scenarios"][1]["replay"]["written"] = Value::from("last week");
    assert!(violations(&bad_date).is_some(), "written is a date");

    let mut missing = good.clone();
    missing["provenance"]
        .as_object_mut()
        .expect("an object")
        .remove("host");
    let why = violations(&missing).expect("a provenance without host is rejected");
    assert!(why.contains("host"), "{why}");

    let mut no_reason = good;
    no_reason["scenarios"][1]["steps"][2]
        .as_object_mut()
        .expect("an object")
        .remove("reason");
    assert!(
        violations(&no_reason).is_some(),
        "a failed step needs its reason"
    );
}

#[test]
fn an_emulated_result_round_trips_through_results_json() {
    let mut results = two_variants();
    results.scenarios[1].source = emulated_source();
    let value = serde_json::to_value(&results).expect("serializes");
    assert_eq!(value["scenarios"][1]["mode"], "emulated");
    assert_eq!(value["scenarios"][1]["emulator"], EMULATOR);
    assert!(value["scenarios"][1].get("replay").is_none(), "{value}");
    let text = serde_json::to_string_pretty(&results).expect("serializes");
    let back: RunResults = serde_json::from_str(&text).expect("reads back");
    assert_eq!(back, results);

    let out = std::env::temp_dir().join(format!("sm-results-emulated-{}", std::process::id()));
    let dir = crate::report::run_folder::write(&out, &results, &[])
        .expect("writes")
        .dir;
    let loaded = load(&dir.join("results.json"));
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(loaded.expect("loads"), results);
}

#[test]
fn an_emulated_result_is_not_measured_and_has_its_own_mode() {
    let emulated = emulated_source();
    assert_eq!(emulated.mode(), Mode::Emulated);
    assert_eq!(emulated.mode().to_string(), "emulated");
    assert_eq!(emulated.class(), Class::Emulated);
    assert!(!emulated.is_measured());
    assert!(emulated.is_emulated());
    assert_eq!(emulated.emulator(), Some(EMULATOR));
    assert_eq!(emulated.replay(), None);
    assert_eq!(emulated.pace(), None);
    for measured in [Source::Live, Source::Record] {
        assert!(measured.is_measured() && !measured.is_emulated());
        assert_eq!(measured.emulator(), None);
    }
    let replayed = crate::report::fixture::replay_source(ReplayPace::Instant);
    assert!(!replayed.is_measured() && !replayed.is_emulated());

    let only = Modes::of([&emulated]);
    assert_eq!(only.to_string(), "emulated");
    assert!(only.any_emulated() && !only.any_measured() && !only.any_replayed());
    let all = Modes::of([&emulated, &replayed, &Source::Live]);
    assert_eq!(all.to_string(), "live+replay+emulated");
    assert!(all.any_emulated() && all.any_measured() && all.any_replayed());
    assert!(!Modes::of([&Source::Live, &replayed]).any_emulated());
}

#[test]
fn load_names_the_file_and_refuses_other_versions() {
    let dir = std::env::temp_dir().join(format!("sm-results-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writable");
        path
    };
    let v1 = write(
        "v1.json",
        r#"{"schema_version": "sandbox-matrix/results/v1"}"#,
    );
    let none = write("none.json", r#"{"scenarios": []}"#);
    let broken = write("broken.json", "{\n  \"schema_version\": 1,\n");
    let errors = [&v1, &none, &broken].map(|p| load(p).expect_err("refused").to_string());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        errors[0],
        format!(
            "{}: schema_version is `sandbox-matrix/results/v1`, and this sandbox-matrix reads `sandbox-matrix/results/v2`",
            v1.display()
        )
    );
    assert!(errors[1].starts_with(&format!("{}: no `schema_version`", none.display())));
    assert!(
        errors[2].starts_with(&format!("{}:3:1: ", broken.display())),
        "{}",
        errors[2]
    );
}
