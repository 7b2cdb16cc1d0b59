//! The report types read reports from either doctor, and write what they read.

use std::collections::BTreeMap;

use doctor::check;
use sandbox_contract::doctor::{DoctorReport, DoctorRow, InitObservation, RowValue};

use crate::fake::FakeHost;

fn reference(text: &str) -> DoctorReport {
    serde_json::from_str(text).expect("the reference report reads")
}

#[test]
fn a_passing_reference_report_reads_as_ours_would_be() {
    let report = reference(include_str!("reference-passing.json"));
    assert!(report.ok);
    assert_eq!(report.failed, None);
    let ids: Vec<DoctorRow> = report.rows.iter().map(|row| row.id).collect();
    assert_eq!(ids, DoctorRow::ALL);
    for row in &report.rows {
        assert_eq!(row.expected, row.id.expected(), "{}", row.id);
    }
    let kernel = report.row(DoctorRow::Kernel).unwrap();
    assert_eq!(
        kernel.actual,
        RowValue::Versions(BTreeMap::from([
            ("ipykernel".to_owned(), Some("6.29.5".to_owned())),
            ("jupyter_client".to_owned(), Some("8.6.3".to_owned())),
        ]))
    );
    assert_eq!(
        report.row(DoctorRow::Init).unwrap().actual,
        RowValue::Init(InitObservation {
            pid1: Some("tini".into()),
            orphan_zombies: Some(0),
        })
    );
    assert_eq!(
        report.row(DoctorRow::Uid).unwrap().actual,
        RowValue::Integer(1000)
    );
    assert_eq!(report.paths.read_only, ["/opt/datalayer"]);
    assert_eq!(report.ca_bundle.as_deref(), Some("/usr/lib/ssl/cert.pem"));
}

#[test]
fn a_failing_reference_report_reads() {
    let report = reference(include_str!("reference-failing.json"));
    assert!(!report.ok);
    assert_eq!(report.failed, Some(DoctorRow::User));
    let init = report.row(DoctorRow::Init).unwrap();
    assert_eq!(init.message.as_deref(), Some("PID 1 does not reap orphans"));
    assert_eq!(report.identity.uid, 0);
}

#[test]
fn our_reports_round_trip() {
    let mut host = FakeHost::sandbox();
    host.orphan_zombies = None;
    host.files.clear();
    for report in [check(&FakeHost::sandbox()), check(&host)] {
        let text = serde_json::to_string(&report).unwrap();
        let back: DoctorReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
    }
}
