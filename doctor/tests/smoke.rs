//! The real binary on this machine, which is not a contract sandbox: whatever rows fail,
//! the report is whole and the exit code agrees with it.

use std::process::{Command, Output};

use sandbox_contract::doctor::{DoctorReport, DoctorRow};

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_datalayer-sandbox"))
        .args(args)
        .output()
        .expect("the doctor runs")
}

#[test]
fn json_report_is_whole_and_agrees_with_the_exit_code() {
    let output = doctor(&["doctor", "--json"]);
    let stdout = String::from_utf8(output.stdout).expect("stdout is UTF-8");
    let stderr = String::from_utf8(output.stderr).expect("stderr is UTF-8");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    assert_eq!(value["rows"].as_array().map(Vec::len), Some(15));
    let report: DoctorReport = serde_json::from_value(value).expect("stdout is a report");

    let ids: Vec<DoctorRow> = report.rows.iter().map(|row| row.id).collect();
    assert_eq!(ids, DoctorRow::ALL);
    let first_failure = report.rows.iter().find(|row| !row.ok);
    assert_eq!(report.failed, first_failure.map(|row| row.id));
    assert_eq!(report.ok, first_failure.is_none());
    for row in &report.rows {
        assert_eq!(
            row.message.is_none(),
            row.ok,
            "{}: {:?}",
            row.id,
            row.message
        );
    }
    match first_failure {
        None => {
            assert_eq!(output.status.code(), Some(0));
            assert_eq!(stderr, "");
        }
        Some(row) => {
            assert_eq!(output.status.code(), Some(1));
            let message = row.message.as_deref().unwrap();
            assert_eq!(
                stderr,
                format!("datalayer-sandbox: doctor: {} failed: {message}\n", row.id)
            );
        }
    }
}

#[test]
fn text_output_has_a_line_per_row_and_the_same_verdict() {
    let output = doctor(&["doctor"]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 15, "{stdout}");
    for (line, row) in lines.iter().zip(DoctorRow::ALL) {
        let mut words = line.split_whitespace();
        let status = words.next().unwrap();
        assert!(status == "ok" || status == "FAIL", "{line}");
        assert_eq!(words.next(), Some(row.id()), "{line}");
    }
    let any_failed = lines.iter().any(|line| line.starts_with("FAIL"));
    assert_eq!(output.status.code(), Some(if any_failed { 1 } else { 0 }));
}

#[test]
fn bad_usage_exits_2() {
    let output = doctor(&["doctor", "--yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage: datalayer-sandbox doctor"));
}
