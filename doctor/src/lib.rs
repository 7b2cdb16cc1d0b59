//! `datalayer-sandbox doctor [--json]`: checks the sandbox it runs in against
//! sandbox-contract/v1, one row per requirement ([`DoctorRow::ALL`]);
//! `datalayer-sandbox scan-secrets`: looks for build secrets' fingerprints ([`scan`]).
//!
//! The checks read the machine only through [`Host`]; [`SystemHost`] is the real one, and
//! tests hand [`check`] or [`run_on`] a fake. [`run`] is the command line, and
//! [`main_from_env`] lets any binary act as the doctor (a multi-call binary invoked as
//! `datalayer-sandbox`).
//!
//! [`DoctorRow::ALL`]: sandbox_contract::doctor::DoctorRow::ALL

mod check;
pub mod scan;
mod system;

use std::io::{self, Write};
use std::process::ExitCode;

use sandbox_contract::doctor::{DOCTOR, DOCTOR_VERSION, DoctorReport, RowReport, RowValue};

pub use check::check;
pub use system::SystemHost;

/// Everything the doctor reads from the machine (from more than one thread). Paths and names are UTF-8 strings; a
/// value that cannot be read is `None` (or `false`), never a panic.
pub trait Host: Sync {
    /// `uname`'s system name, as the kernel spells it (`Linux`).
    fn system(&self) -> Option<String>;
    /// `uname`'s machine name (`x86_64`).
    fn machine(&self) -> Option<String>;
    /// A text file's contents.
    fn read_file(&self, path: &str) -> Option<String>;
    /// Where a symbolic link points.
    fn read_link(&self, path: &str) -> Option<String>;
    /// The real uid.
    fn uid(&self) -> u32;
    /// The real gid.
    fn gid(&self) -> u32;
    /// The user database's name for a uid.
    fn user_name(&self, uid: u32) -> Option<String>;
    /// An environment variable; `Some("")` when it is set and empty.
    fn env(&self, name: &str) -> Option<String>;
    /// The working directory.
    fn cwd(&self) -> Option<String>;
    /// Whether a path is a directory (following links).
    fn is_dir(&self, path: &str) -> bool;
    /// Whether a path is a non-directory the user may execute.
    fn is_executable(&self, path: &str) -> bool;
    /// The size of a regular file (following links).
    fn file_len(&self, path: &str) -> Option<u64>;
    /// Whether the user can really create a file in a directory.
    fn can_write(&self, dir: &str) -> bool;
    /// Runs `python3 -c script args...` and returns its stdout, or why it gave none.
    fn run_python(&self, python3: &str, script: &str, args: &[&str]) -> Result<String, String>;
    /// The C library's name for the local time zone's standard time (`time.tzname[0]`).
    fn local_zone_name(&self) -> Option<String>;
    /// How many zombies PID 1 leaves unreaped a moment after an orphan exits, or `None`
    /// when that cannot be observed.
    fn orphan_zombies(&self) -> Option<u32>;
}

const USAGE: &str = "\
usage: datalayer-sandbox doctor [--json]
       datalayer-sandbox scan-secrets TARGETS_JSON [--root DIR]... [--no-processes]
                                      [--deadline SECONDS] [--readers N]

doctor: checks this sandbox against sandbox-contract/v1, one line per row.
  --json   write the whole report as JSON on stdout
  Exits 0 when every row passes, 1 when one fails, 2 on bad usage.

scan-secrets: looks for the forms TARGETS_JSON describes (name, length, rolling hash,
character class; never a value) in every file under /, the home and the working directory,
then in every process's environment and command line, and writes one JSON report on stdout.
  --root DIR        walk only DIR (repeatable) instead of /, the home and working directory
  --no-processes    skip process environments and command lines
  --deadline SECS   stop walking after SECS seconds and report the scan incomplete (90)
  --readers N       read files with N threads, 1 to 64 (twice the cores, 4 to 16)
  Exits 0 when the report is written, whatever it found, 2 on bad usage.
";

/// The doctor on this machine: `args` without the program name; returns the exit code.
pub fn run(args: impl IntoIterator<Item = String>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    run_on(&SystemHost, args, out, err)
}

/// The doctor on `host`: 0 when every row passes, 1 when one fails (named on `err`) or the
/// report cannot be written, 2 on bad usage.
pub fn run_on(
    host: &dyn Host,
    args: impl IntoIterator<Item = String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let args: Vec<String> = args.into_iter().collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let json = match words.as_slice() {
        ["--help" | "-h"] | ["doctor" | "scan-secrets", "--help" | "-h"] => {
            return finish(out.write_all(USAGE.as_bytes()), 0, err);
        }
        ["scan-secrets", rest @ ..] => return scan_secrets(rest, out, err),
        ["doctor"] => false,
        ["doctor", "--json"] => true,
        ["--version" | "-V"] => {
            let line = format!("{DOCTOR} {DOCTOR_VERSION}\n");
            return finish(out.write_all(line.as_bytes()), 0, err);
        }
        _ => {
            let problem = match words.as_slice() {
                [] => "no command given".to_owned(),
                ["doctor", "--json", extra, ..] | ["doctor", extra, ..] => {
                    format!("unexpected argument `{extra}`")
                }
                [other, ..] => format!("unknown command `{other}`"),
            };
            // Nothing more can be said if stderr itself is closed.
            let _ = write!(err, "{DOCTOR}: {problem}\n{USAGE}");
            return 2;
        }
    };
    let report = check(host);
    let written = if json {
        serde_json::to_string(&report)
            .map_err(io::Error::other)
            .and_then(|text| writeln!(out, "{text}"))
    } else {
        write_rows(&report, out)
    };
    let code = match report.failed.and_then(|id| report.row(id)) {
        Some(row) => {
            let message = row.message.as_deref().unwrap_or("failed");
            let _ = writeln!(err, "{DOCTOR}: doctor: {} failed: {message}", row.id);
            1
        }
        None if report.ok => 0,
        None => 1,
    };
    finish(written, code, err)
}

/// The doctor as a whole program: reads the arguments after the program name from the
/// environment and writes to stdout and stderr.
pub fn main_from_env() -> ExitCode {
    let args = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned());
    let code = run(args, &mut io::stdout().lock(), &mut io::stderr().lock());
    ExitCode::from(code)
}

/// `scan-secrets` with `args`: the report as one JSON line.
fn scan_secrets(args: &[&str], out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let report =
        scan::parse_args(args).and_then(|(targets, options)| scan::scan(&targets, &options));
    match report {
        Ok(report) => {
            let written = serde_json::to_string(&report)
                .map_err(io::Error::other)
                .and_then(|text| writeln!(out, "{text}"));
            finish(written, 0, err)
        }
        Err(problem) => {
            let _ = write!(err, "{DOCTOR}: scan-secrets: {problem}\n{USAGE}");
            2
        }
    }
}

/// `code`, or 1 when writing the output failed.
fn finish(written: io::Result<()>, code: u8, err: &mut dyn Write) -> u8 {
    match written {
        Ok(()) => code,
        Err(error) => {
            let _ = writeln!(err, "{DOCTOR}: doctor: cannot write the report: {error}");
            1
        }
    }
}

/// One line per row: `ok` or `FAIL`, the row, and what was found or why it failed.
fn write_rows(report: &DoctorReport, out: &mut dyn Write) -> io::Result<()> {
    for row in &report.rows {
        let status = if row.ok { "ok" } else { "FAIL" };
        let line = format!("{status:<4} {:<16} {}", row.id.id(), detail(row));
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A failed row's message, or what a passing row found.
fn detail(row: &RowReport) -> String {
    match (&row.message, row.ok) {
        (Some(message), false) => message.clone(),
        _ => describe(&row.actual),
    }
}

/// A row value in a few words.
fn describe(value: &RowValue) -> String {
    match value {
        RowValue::Null => "none".to_owned(),
        RowValue::Integer(number) => number.to_string(),
        RowValue::Text(text) => text.clone(),
        RowValue::Names(names) => names.join(", "),
        RowValue::Init(init) => format!(
            "PID 1 is {}, {} orphan zombies",
            init.pid1.as_deref().unwrap_or("unknown"),
            init.orphan_zombies
                .map_or_else(|| "unknown".to_owned(), |count| count.to_string())
        ),
        RowValue::Versions(versions) => versions
            .iter()
            .map(|(name, version)| format!("{name} {}", version.as_deref().unwrap_or("missing")))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
