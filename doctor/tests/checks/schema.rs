//! Reports against fixtures/schemas/doctor-report.schema.json.

use boon::{Compiler, SchemaIndex, Schemas};
use serde_json::{Value, json};

use crate::cli::doctor;
use crate::fake::FakeHost;

const SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/schemas/doctor-report.schema.json"
);

/// The compiled schema.
fn schema() -> (Schemas, SchemaIndex) {
    let text = std::fs::read_to_string(SCHEMA_PATH).expect("the schema is readable");
    let value: Value = serde_json::from_str(&text).expect("the schema is JSON");
    let id = value["$id"]
        .as_str()
        .expect("the schema has an $id")
        .to_owned();
    let mut schemas = Schemas::new();
    let mut compiler = Compiler::new();
    compiler.add_resource(&id, value).unwrap();
    let index = compiler
        .compile(&id, &mut schemas)
        .unwrap_or_else(|error| panic!("the schema compiles: {error}"));
    (schemas, index)
}

/// Why `report` does not satisfy the schema, if it does not.
fn violations(report: &Value) -> Option<String> {
    let (schemas, index) = schema();
    schemas
        .validate(report, index)
        .err()
        .map(|error| format!("{error:#}"))
}

#[track_caller]
fn assert_valid(report: &Value) {
    if let Some(error) = violations(report) {
        panic!("the report breaks the schema: {error}\n{report:#}");
    }
}

/// The report `doctor --json` writes on `host`, and its exit code.
fn report_of(host: &FakeHost) -> (u8, Value) {
    let (code, out, _) = doctor(host, &["doctor", "--json"]);
    (
        code,
        serde_json::from_str(&out).expect("the report is JSON"),
    )
}

#[test]
fn the_schema_is_draft_2020_12_with_its_own_id() {
    let text = std::fs::read_to_string(SCHEMA_PATH).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        value["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        value["$id"],
        "https://sandbox-matrix.invalid/schemas/doctor-report.json"
    );
}

#[test]
fn a_passing_report_is_valid() {
    let (code, report) = report_of(&FakeHost::sandbox());
    assert_eq!((code, &report["ok"]), (0, &json!(true)));
    assert_valid(&report);
}

#[test]
fn a_failing_report_full_of_nulls_is_valid() {
    let mut host = FakeHost::sandbox();
    host.uid = 4242;
    host.env.clear();
    host.files.clear();
    host.links.clear();
    host.cwd = None;
    host.executables.clear();
    host.file_lens.clear();
    host.zone_name = None;
    host.orphan_zombies = None;
    let (code, report) = report_of(&host);
    assert_eq!((code, &report["failed"]), (1, &json!("os")));
    assert_eq!(report["identity"]["user"], Value::Null);
    assert_eq!(report["kernel"]["ipykernel"], Value::Null);
    assert_valid(&report);
}

#[test]
fn the_reference_doctors_reports_are_valid() {
    for text in [
        include_str!("reference-passing.json"),
        include_str!("reference-failing.json"),
    ] {
        assert_valid(&serde_json::from_str(text).unwrap());
    }
}

/// A way to spoil a valid report.
type Spoil = fn(&mut Value);

#[test]
fn a_wrong_type_or_a_missing_field_is_rejected() {
    let (_, report) = report_of(&FakeHost::sandbox());
    let broken: [(&str, Spoil); 9] = [
        ("uid as a string", |r| r["identity"]["uid"] = json!("1000")),
        ("ok as a string", |r| r["ok"] = json!("true")),
        ("a row message as a number", |r| {
            r["rows"][0]["message"] = json!(1)
        }),
        ("no caBundle", |r| {
            r.as_object_mut().unwrap().remove("caBundle");
        }),
        ("a row without actual", |r| {
            r["rows"][3].as_object_mut().unwrap().remove("actual");
        }),
        ("no jupyter_client", |r| {
            r["kernel"]
                .as_object_mut()
                .unwrap()
                .remove("jupyter_client");
        }),
        ("fourteen rows", |r| {
            r["rows"].as_array_mut().unwrap().pop();
        }),
        ("an unknown row", |r| r["rows"][0]["id"] = json!("gpu")),
        ("another contract", |r| r["contract"] = json!("other/v1")),
    ];
    for (what, spoil) in broken {
        let mut spoiled = report.clone();
        spoil(&mut spoiled);
        assert!(violations(&spoiled).is_some(), "{what} was accepted");
    }
}
