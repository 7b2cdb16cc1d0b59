//! Every row, passing and failing, on a fake host: its `ok`, `actual` and `message`.

use std::collections::BTreeMap;

use doctor::check;
use sandbox_contract::doctor::{DoctorRow, InitObservation, RowReport, RowValue};

use crate::fake::FakeHost;

fn row(host: &FakeHost, id: DoctorRow) -> RowReport {
    let report = check(host);
    report.row(id).cloned().expect("every row is reported")
}

fn text(value: &str) -> RowValue {
    RowValue::Text(value.to_owned())
}

#[track_caller]
fn passes(host: &FakeHost, id: DoctorRow, actual: RowValue) {
    let found = row(host, id);
    assert!(found.ok, "{id} failed: {:?}", found.message);
    assert!(found.required);
    assert_eq!(found.actual, actual);
    assert_eq!(found.expected, id.expected());
    assert_eq!(found.message, None);
}

#[track_caller]
fn fails(host: &FakeHost, id: DoctorRow, actual: RowValue, message: &str) {
    let found = row(host, id);
    assert!(!found.ok, "{id} passed");
    assert!(found.required);
    assert_eq!(found.actual, actual);
    assert_eq!(found.expected, id.expected());
    assert_eq!(found.message.as_deref(), Some(message));
}

#[test]
fn a_contract_sandbox_passes_every_row_in_order() {
    let report = check(&FakeHost::sandbox());
    let ids: Vec<DoctorRow> = report.rows.iter().map(|row| row.id).collect();
    assert_eq!(ids, DoctorRow::ALL);
    assert!(report.ok);
    assert_eq!(report.failed, None);
    assert_eq!(report.doctor, "datalayer-sandbox");
    assert_eq!(report.doctor_version, "1");
    assert_eq!(report.contract, "sandbox-contract/v1");
    assert_eq!(report.python.version, "3.13.5");
    assert_eq!(
        report.python.executable.as_deref(),
        Some("/usr/bin/python3")
    );
    assert_eq!(report.python.pip.as_deref(), Some("/usr/bin/pip"));
    assert_eq!(report.kernel["ipykernel"].as_deref(), Some("6.29.5"));
    assert_eq!(report.identity.user.as_deref(), Some("datalayer"));
    assert_eq!((report.identity.uid, report.identity.gid), (1000, 100));
    assert_eq!(report.identity.home.as_deref(), Some("/home/datalayer"));
    assert_eq!(report.identity.cwd, "/home/datalayer");
    assert_eq!(report.paths.writable, ["/home/datalayer"]);
    assert_eq!(report.paths.read_only, ["/opt/datalayer"]);
    assert_eq!(report.locale.as_deref(), Some("C.UTF-8"));
    assert_eq!(report.timezone.as_deref(), Some("UTC"));
    assert_eq!(
        report.ca_bundle.as_deref(),
        Some("/etc/ssl/certs/ca-certificates.crt")
    );
}

#[test]
fn the_first_failing_row_is_the_reports_failure() {
    let mut host = FakeHost::sandbox();
    host.orphan_zombies = None;
    host.gid = 0;
    let report = check(&host);
    assert!(!report.ok);
    assert_eq!(report.failed, Some(DoctorRow::Gid));
    assert_eq!(report.rows.iter().filter(|row| !row.ok).count(), 2);
}

#[test]
fn architecture() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Architecture, text("linux/x86_64"));
    host.machine = Some("amd64".into());
    passes(&host, DoctorRow::Architecture, text("linux/amd64"));
    host.machine = Some("aarch64".into());
    fails(
        &host,
        DoctorRow::Architecture,
        text("linux/aarch64"),
        "the sandbox is linux/aarch64, not linux/amd64",
    );
    host.system = Some("Darwin".into());
    host.machine = Some("x86_64".into());
    fails(
        &host,
        DoctorRow::Architecture,
        text("darwin/x86_64"),
        "the sandbox is darwin/x86_64, not linux/amd64",
    );
    host.system = None;
    host.machine = None;
    fails(
        &host,
        DoctorRow::Architecture,
        text("/"),
        "the sandbox is /, not linux/amd64",
    );
}

#[test]
fn os() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Os, text("Debian GNU/Linux 13 (trixie)"));

    host.files.remove("/etc/os-release");
    host.files.insert(
        "/usr/lib/os-release".into(),
        "ID=pop\nID_LIKE=\"ubuntu debian\"\n".into(),
    );
    passes(&host, DoctorRow::Os, text("pop"));

    host.files.insert(
        "/etc/os-release".into(),
        "PRETTY_NAME=\"Fedora Linux 42\"\nID=fedora\n".into(),
    );
    fails(
        &host,
        DoctorRow::Os,
        text("Fedora Linux 42"),
        "the base is not Debian or Ubuntu (ID=fedora, ID_LIKE=)",
    );

    host.files
        .insert("/etc/os-release".into(), "garbage\n\0\u{fffd}".into());
    fails(
        &host,
        DoctorRow::Os,
        RowValue::Null,
        "the base is not Debian or Ubuntu (ID=, ID_LIKE=)",
    );

    host.files.remove("/etc/os-release");
    host.files.remove("/usr/lib/os-release");
    fails(
        &host,
        DoctorRow::Os,
        RowValue::Null,
        "neither /etc/os-release nor /usr/lib/os-release can be read",
    );
}

#[test]
fn user() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::User, text("datalayer"));
    host.uid = 0;
    fails(
        &host,
        DoctorRow::User,
        text("root"),
        "runs as root, not datalayer",
    );
    host.uid = 4242;
    fails(
        &host,
        DoctorRow::User,
        RowValue::Null,
        "runs as uid 4242, which has no name, not datalayer",
    );
}

#[test]
fn uid() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Uid, RowValue::Integer(1000));
    host.uid = 0;
    fails(
        &host,
        DoctorRow::Uid,
        RowValue::Integer(0),
        "runs as uid 0, not 1000",
    );
}

#[test]
fn gid() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Gid, RowValue::Integer(100));
    host.gid = 1000;
    fails(
        &host,
        DoctorRow::Gid,
        RowValue::Integer(1000),
        "runs as gid 1000, not 100",
    );
}

#[test]
fn home() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Home, text("/home/datalayer"));
    host.set_env("HOME", "/root");
    fails(
        &host,
        DoctorRow::Home,
        text("/root"),
        "HOME is /root, not /home/datalayer",
    );
    host.unset_env("HOME");
    fails(
        &host,
        DoctorRow::Home,
        RowValue::Null,
        "HOME is unset, not /home/datalayer",
    );
    host.set_env("HOME", "/home/datalayer");
    host.dirs.remove("/home/datalayer");
    fails(
        &host,
        DoctorRow::Home,
        text("/home/datalayer"),
        "/home/datalayer is not a directory",
    );
}

#[test]
fn workdir() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Workdir, text("/home/datalayer"));
    // The row asks whether the workdir can be written, wherever the process stands.
    host.cwd = Some("/tmp".into());
    passes(&host, DoctorRow::Workdir, text("/tmp"));
    host.writable.remove("/home/datalayer");
    fails(
        &host,
        DoctorRow::Workdir,
        text("/tmp"),
        "/home/datalayer is missing or not writable",
    );
    assert!(check(&host).paths.writable.is_empty());
    host.cwd = None;
    fails(
        &host,
        DoctorRow::Workdir,
        RowValue::Null,
        "/home/datalayer is missing or not writable",
    );
    assert_eq!(check(&host).identity.cwd, "");
}

#[test]
fn python() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Python, text("/usr/bin/python3"));
    // An unset PATH is /bin:/usr/bin; an empty entry is the working directory.
    host.unset_env("PATH");
    passes(&host, DoctorRow::Python, text("/usr/bin/python3"));
    host.executables.insert("python3".into());
    host.set_env("PATH", "/nowhere/::/usr/bin");
    passes(&host, DoctorRow::Python, text("python3"));
    host.set_env("PATH", "/usr/local/bin:/bin");
    fails(
        &host,
        DoctorRow::Python,
        RowValue::Null,
        "python3 is not on PATH",
    );
    host.set_env("PATH", "");
    fails(
        &host,
        DoctorRow::Python,
        RowValue::Null,
        "python3 is not on PATH",
    );
}

#[test]
fn pip() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Pip, text("/usr/bin/pip"));
    host.executables.remove("/usr/bin/pip");
    host.executables.insert("/usr/bin/pip3".into());
    fails(&host, DoctorRow::Pip, RowValue::Null, "pip is not on PATH");
    assert_eq!(check(&host).python.pip, None);
}

fn versions(ipykernel: Option<&str>, jupyter_client: Option<&str>) -> RowValue {
    RowValue::Versions(BTreeMap::from([
        ("ipykernel".to_owned(), ipykernel.map(str::to_owned)),
        (
            "jupyter_client".to_owned(),
            jupyter_client.map(str::to_owned),
        ),
    ]))
}

#[test]
fn kernel() {
    let mut host = FakeHost::sandbox();
    passes(
        &host,
        DoctorRow::Kernel,
        versions(Some("6.29.5"), Some("8.6.3")),
    );
    // The python3 found on PATH is asked about exactly the kernel packages.
    assert_eq!(
        host.python_calls.lock().unwrap()[0],
        (
            "/usr/bin/python3".to_owned(),
            vec!["ipykernel".to_owned(), "jupyter_client".to_owned()]
        )
    );

    host.python = Ok(
        "noise\n{\"version\": \"3.13.5\", \"packages\": {\"ipykernel\": \"6.29.5\", \"jupyter_client\": null}}\n"
            .into(),
    );
    fails(
        &host,
        DoctorRow::Kernel,
        versions(Some("6.29.5"), None),
        "missing jupyter_client",
    );
    assert_eq!(check(&host).python.version, "3.13.5");

    host.python = Ok("Segmentation fault\n".into());
    fails(
        &host,
        DoctorRow::Kernel,
        versions(None, None),
        "missing ipykernel, jupyter_client (/usr/bin/python3 gave an unreadable answer: `Segmentation fault`)",
    );
    assert_eq!(check(&host).python.version, "");

    host.python = Err("/usr/bin/python3 gave no answer within 15 s".into());
    fails(
        &host,
        DoctorRow::Kernel,
        versions(None, None),
        "missing ipykernel, jupyter_client (/usr/bin/python3 gave no answer within 15 s)",
    );

    host.executables.remove("/usr/bin/python3");
    host.python_calls.lock().unwrap().clear();
    fails(
        &host,
        DoctorRow::Kernel,
        versions(None, None),
        "missing ipykernel, jupyter_client (python3 is not on PATH)",
    );
    assert!(host.python_calls.lock().unwrap().is_empty());
}

#[test]
fn reserved_path() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::ReservedPath, text("read-only"));
    host.writable.insert("/opt/datalayer".into());
    fails(
        &host,
        DoctorRow::ReservedPath,
        text("writable"),
        "/opt/datalayer is writable",
    );
    assert!(check(&host).paths.read_only.is_empty());
    host.dirs.remove("/opt/datalayer");
    fails(
        &host,
        DoctorRow::ReservedPath,
        text("missing"),
        "/opt/datalayer is missing",
    );
}

#[test]
fn locale() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Locale, text("C.UTF-8"));
    // LANG counts when LC_ALL is unset or empty, and spellings compare loosely.
    host.set_env("LC_ALL", "");
    host.set_env("LANG", "C.utf8");
    passes(&host, DoctorRow::Locale, text("C.utf8"));
    // LC_ALL wins over LANG.
    host.set_env("LC_ALL", "en_US.UTF-8");
    host.set_env("LANG", "C.UTF-8");
    fails(
        &host,
        DoctorRow::Locale,
        text("en_US.UTF-8"),
        "the locale is en_US.UTF-8, not C.UTF-8",
    );
    host.unset_env("LC_ALL");
    host.unset_env("LANG");
    fails(
        &host,
        DoctorRow::Locale,
        RowValue::Null,
        "the locale is unset, not C.UTF-8",
    );
}

#[test]
fn timezone() {
    let mut host = FakeHost::sandbox();
    passes(&host, DoctorRow::Timezone, text("UTC"));
    host.set_env("TZ", ":Etc/UTC");
    passes(&host, DoctorRow::Timezone, text("Etc/UTC"));

    // Without TZ: /etc/timezone, then the zone /etc/localtime links to, then the C library.
    host.unset_env("TZ");
    host.files
        .insert("/etc/timezone".into(), "Etc/UCT\n".into());
    passes(&host, DoctorRow::Timezone, text("Etc/UCT"));
    host.files.remove("/etc/timezone");
    host.links.insert(
        "/etc/localtime".into(),
        "../usr/share/zoneinfo/Etc/Universal".into(),
    );
    passes(&host, DoctorRow::Timezone, text("Etc/Universal"));
    host.links.remove("/etc/localtime");
    passes(&host, DoctorRow::Timezone, text("UTC"));

    host.zone_name = Some("CET".into());
    fails(
        &host,
        DoctorRow::Timezone,
        text("CET"),
        "the time zone is CET, not UTC",
    );
    host.zone_name = None;
    fails(
        &host,
        DoctorRow::Timezone,
        RowValue::Null,
        "the time zone is unknown, not UTC",
    );
    // Names are compared exactly.
    host.set_env("TZ", "utc");
    fails(
        &host,
        DoctorRow::Timezone,
        text("utc"),
        "the time zone is utc, not UTC",
    );
    host.set_env("TZ", "Europe/Paris");
    host.links
        .insert("/etc/localtime".into(), "/usr/share/zoneinfo/UTC".into());
    fails(
        &host,
        DoctorRow::Timezone,
        text("Europe/Paris"),
        "the time zone is Europe/Paris, not UTC",
    );
}

#[test]
fn ca_certificates() {
    let mut host = FakeHost::sandbox();
    passes(
        &host,
        DoctorRow::CaCertificates,
        text("/etc/ssl/certs/ca-certificates.crt"),
    );
    // SSL_CERT_FILE first, OpenSSL's own default next; an empty bundle is no bundle.
    host.file_lens
        .insert("/usr/lib/ssl/cert.pem".into(), 219_000);
    passes(
        &host,
        DoctorRow::CaCertificates,
        text("/usr/lib/ssl/cert.pem"),
    );
    host.file_lens.insert("/srv/bundle.pem".into(), 1);
    host.set_env("SSL_CERT_FILE", "/srv/bundle.pem");
    passes(&host, DoctorRow::CaCertificates, text("/srv/bundle.pem"));

    host.file_lens.clear();
    host.file_lens
        .insert("/etc/ssl/certs/ca-certificates.crt".into(), 0);
    fails(
        &host,
        DoctorRow::CaCertificates,
        RowValue::Null,
        "no CA certificates",
    );
}

#[test]
fn init() {
    let mut host = FakeHost::sandbox();
    passes(
        &host,
        DoctorRow::Init,
        RowValue::Init(InitObservation {
            pid1: Some("tini".into()),
            orphan_zombies: Some(0),
        }),
    );
    host.files.insert("/proc/1/comm".into(), "sleep\n".into());
    host.orphan_zombies = Some(2);
    fails(
        &host,
        DoctorRow::Init,
        RowValue::Init(InitObservation {
            pid1: Some("sleep".into()),
            orphan_zombies: Some(2),
        }),
        "PID 1 (sleep) does not reap orphans: 2 left as zombies",
    );
    host.files.remove("/proc/1/comm");
    host.orphan_zombies = None;
    fails(
        &host,
        DoctorRow::Init,
        RowValue::Init(InitObservation {
            pid1: None,
            orphan_zombies: None,
        }),
        "PID 1 cannot be observed",
    );
}
