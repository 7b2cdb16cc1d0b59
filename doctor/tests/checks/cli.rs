//! The command line on a fake host: output, exit codes and usage.

use std::io::{self, Write};

use doctor::{check, run_on};
use sandbox_contract::doctor::DoctorReport;

use crate::fake::FakeHost;

/// Runs the doctor on `host` with `args`: exit code, stdout, stderr.
pub fn doctor(host: &FakeHost, args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_on(
        host,
        args.iter().map(|&arg| arg.to_owned()),
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn a_passing_sandbox_prints_a_line_per_row_and_exits_0() {
    let (code, out, err) = doctor(&FakeHost::sandbox(), &["doctor"]);
    assert_eq!(code, 0);
    assert_eq!(err, "");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 15);
    assert_eq!(lines[0], "ok   architecture     linux/x86_64");
    assert_eq!(lines[3], "ok   uid              1000");
    assert_eq!(
        lines[9],
        "ok   kernel           ipykernel 6.29.5, jupyter_client 8.6.3"
    );
    assert_eq!(lines[10], "ok   reserved_path    read-only");
    assert_eq!(
        lines[14],
        "ok   init             PID 1 is tini, 0 orphan zombies"
    );
}

#[test]
fn a_failing_sandbox_names_its_first_failure_on_stderr_and_exits_1() {
    let mut host = FakeHost::sandbox();
    host.uid = 0;
    host.gid = 0;
    let (code, out, err) = doctor(&host, &["doctor"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "datalayer-sandbox: doctor: user failed: runs as root, not datalayer\n"
    );
    assert!(out.contains("FAIL user             runs as root, not datalayer\n"));
    assert!(out.contains("FAIL gid              runs as gid 0, not 100\n"));
}

#[test]
fn json_writes_the_report_on_one_line() {
    let mut host = FakeHost::sandbox();
    let (code, out, err) = doctor(&host, &["doctor", "--json"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out.lines().count(), 1);
    let report: DoctorReport = serde_json::from_str(&out).unwrap();
    assert_eq!(report, check(&host));

    host.orphan_zombies = None;
    let (code, out, err) = doctor(&host, &["doctor", "--json"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "datalayer-sandbox: doctor: init failed: PID 1 cannot be observed\n"
    );
    let report: DoctorReport = serde_json::from_str(&out).unwrap();
    assert!(!report.ok);
}

#[test]
fn bad_usage_prints_usage_on_stderr_and_exits_2() {
    let host = FakeHost::sandbox();
    for (args, problem) in [
        (&[][..], "no command given"),
        (&["check"][..], "unknown command `check`"),
        (&["--json"][..], "unknown command `--json`"),
        (&["doctor", "--yaml"][..], "unexpected argument `--yaml`"),
        (
            &["doctor", "--json", "extra"][..],
            "unexpected argument `extra`",
        ),
    ] {
        let (code, out, err) = doctor(&host, args);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(out, "", "{args:?}");
        assert!(
            err.starts_with(&format!(
                "datalayer-sandbox: {problem}\nusage: datalayer-sandbox doctor [--json]\n"
            )),
            "{args:?}: {err}"
        );
        assert!(
            host.python_calls.lock().unwrap().is_empty(),
            "nothing is checked"
        );
    }
}

#[test]
fn help_and_version_go_to_stdout() {
    let host = FakeHost::sandbox();
    for args in [
        &["--help"][..],
        &["-h"],
        &["doctor", "--help"],
        &["scan-secrets", "--help"],
        &["scan-secrets", "-h"],
    ] {
        let (code, out, err) = doctor(&host, args);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
        assert!(out.starts_with("usage: datalayer-sandbox doctor [--json]\n"));
        // Every option the usage lines name is described on a line of its own.
        let synopsis = out.split("\n\n").next().unwrap_or_default();
        let options: Vec<&str> = synopsis
            .split_whitespace()
            .map(|word| word.trim_matches(|c| c == '[' || c == ']'))
            .filter(|word| word.starts_with("--"))
            .collect();
        assert_eq!(
            options.len(),
            5,
            "the usage lines name five options: {synopsis}"
        );
        for option in options {
            assert!(
                out.lines()
                    .any(|line| line.trim_start().starts_with(option)),
                "{args:?}: `{option}` is not described in\n{out}"
            );
        }
    }
    let (code, out, _) = doctor(&host, &["--version"]);
    assert_eq!((code, out.as_str()), (0, "datalayer-sandbox 1\n"));
}

/// A stdout that is closed.
struct Closed;

impl Write for Closed {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::from(io::ErrorKind::BrokenPipe))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_report_that_cannot_be_written_exits_1() {
    let mut err = Vec::new();
    let code = run_on(
        &FakeHost::sandbox(),
        ["doctor".to_owned(), "--json".to_owned()],
        &mut Closed,
        &mut err,
    );
    assert_eq!(code, 1);
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.starts_with("datalayer-sandbox: doctor: cannot write the report: "),
        "{err}"
    );
}

#[test]
fn scan_secrets_writes_one_json_report_and_names_bad_targets() {
    let dir = std::env::temp_dir().join(format!("sm-doctor-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A fake canary made up for this test, not a credential.
    let value = b"sm-fake-canary-feedc0de";
    std::fs::write(dir.join("leak"), [b"x=".as_slice(), value].concat()).unwrap();
    let targets = format!(
        r#"[{{"name":"T","len":{},"hash":{},"class":"{}","wrapped":false}}]"#,
        value.len(),
        doctor::scan::rolling_hash(value),
        doctor::scan::class_of(value)
    );
    let root = dir.to_str().unwrap();
    let (code, out, err) = doctor(
        &FakeHost::sandbox(),
        &["scan-secrets", &targets, "--root", root, "--no-processes"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((code, err.as_str()), (0, ""));
    let report: doctor::scan::ScanReport = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report.found.len(), 1, "{out}");
    assert_eq!(report.found[0].location, format!("{root}/leak"));
    assert_eq!(report.files_scanned, 1);

    let (code, out, err) = doctor(&FakeHost::sandbox(), &["scan-secrets", "{not json"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("datalayer-sandbox: scan-secrets: the targets are not a JSON list"),
        "{err}"
    );
    let (code, _, err) = doctor(&FakeHost::sandbox(), &["scan-secrets"]);
    assert_eq!(code, 2);
    assert!(err.contains("no targets given"), "{err}");
}
