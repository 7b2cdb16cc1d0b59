//! The doctor's part of sandbox-contract/v1: the fifteen rows `datalayer-sandbox doctor`
//! checks, the values each row expects, and the report it writes with `--json`.
//!
//! The report types read a report written by either doctor: the reference checker
//! (`code_sandboxes.environments.doctor`, Python) or this workspace's Rust one. The doctor
//! itself lives at [`IDENTITY.doctor`](crate::Identity::doctor).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::IDENTITY;

/// The doctor's name: the report's `doctor` field and the binary's file name.
pub const DOCTOR: &str = "datalayer-sandbox";

/// The version of the doctor's rows and report, the same as the reference checker's.
pub const DOCTOR_VERSION: &str = "1";

/// The operating system a sandbox runs, as `uname` names it, lower-cased.
pub const SYSTEM: &str = "linux";

/// The platform a sandbox must be: the `expected` of the `architecture` row.
pub const ARCHITECTURE: &str = "linux/amd64";

/// The machine names (`uname -m`) that are amd64.
pub const AMD64_MACHINES: [&str; 2] = ["x86_64", "amd64"];

/// The base's OS family: Debian or a derivative of it.
pub const OS_FAMILY: &str = "debian";

/// The os-release `ID` or `ID_LIKE` values that make a base Debian-derived.
pub const DEBIAN_DERIVED_IDS: [&str; 2] = ["debian", "ubuntu"];

/// The `expected` of the `os` row.
pub const OS_EXPECTED: &str = "Debian-derived";

/// The Python interpreter that must be on `PATH`.
pub const PYTHON: &str = "python3";

/// The package installer that must be on `PATH`.
pub const PIP: &str = "pip";

/// The distributions the kernel needs, as `importlib.metadata` names them. The doctor checks
/// that each is installed for [`PYTHON`]; the versions Datalayer's protected constraints pin
/// are enforced when an environment is resolved, not by the doctor.
pub const KERNEL_PACKAGES: [&str; 2] = ["ipykernel", "jupyter_client"];

/// Time zone names that are UTC: the `timezone` row passes on any of them, compared exactly.
pub const UTC_ALIASES: [&str; 8] = [
    "UTC",
    "Etc/UTC",
    "UTC0",
    "Etc/UCT",
    "UCT",
    "Universal",
    "Etc/Universal",
    "Zulu",
];

/// One row of the doctor's report: what it checks, and its stable id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoctorRow {
    /// `uname` says linux on an amd64 machine.
    Architecture,
    /// `/etc/os-release` names Debian or Ubuntu as `ID` or in `ID_LIKE`.
    Os,
    /// The user's name is the contract's.
    User,
    /// The real uid is the contract's.
    Uid,
    /// The real gid is the contract's.
    Gid,
    /// `HOME` is the contract's home, and it is a directory.
    Home,
    /// The working directory can be written.
    Workdir,
    /// `python3` is on `PATH`.
    Python,
    /// `pip` is on `PATH`.
    Pip,
    /// `python3` has every kernel package installed.
    Kernel,
    /// The reserved path exists and the user cannot write it.
    ReservedPath,
    /// `LC_ALL`, or else `LANG`, is `C.UTF-8`.
    Locale,
    /// The time zone is UTC.
    Timezone,
    /// A non-empty CA bundle exists.
    CaCertificates,
    /// PID 1 reaps orphans.
    Init,
}

impl DoctorRow {
    /// Every row, in the order the report lists them.
    pub const ALL: [DoctorRow; 15] = [
        DoctorRow::Architecture,
        DoctorRow::Os,
        DoctorRow::User,
        DoctorRow::Uid,
        DoctorRow::Gid,
        DoctorRow::Home,
        DoctorRow::Workdir,
        DoctorRow::Python,
        DoctorRow::Pip,
        DoctorRow::Kernel,
        DoctorRow::ReservedPath,
        DoctorRow::Locale,
        DoctorRow::Timezone,
        DoctorRow::CaCertificates,
        DoctorRow::Init,
    ];

    /// The row's id, as the report and the contract's `doctor:<row>` references spell it.
    pub const fn id(self) -> &'static str {
        match self {
            DoctorRow::Architecture => "architecture",
            DoctorRow::Os => "os",
            DoctorRow::User => "user",
            DoctorRow::Uid => "uid",
            DoctorRow::Gid => "gid",
            DoctorRow::Home => "home",
            DoctorRow::Workdir => "workdir",
            DoctorRow::Python => "python",
            DoctorRow::Pip => "pip",
            DoctorRow::Kernel => "kernel",
            DoctorRow::ReservedPath => "reserved_path",
            DoctorRow::Locale => "locale",
            DoctorRow::Timezone => "timezone",
            DoctorRow::CaCertificates => "ca_certificates",
            DoctorRow::Init => "init",
        }
    }

    /// The row's `expected`, as the report writes it.
    pub fn expected(self) -> RowValue {
        let text = |value: &str| RowValue::Text(value.to_owned());
        match self {
            DoctorRow::Architecture => text(ARCHITECTURE),
            DoctorRow::Os => text(OS_EXPECTED),
            DoctorRow::User => text(IDENTITY.user),
            DoctorRow::Uid => RowValue::Integer(IDENTITY.uid.into()),
            DoctorRow::Gid => RowValue::Integer(IDENTITY.gid.into()),
            DoctorRow::Home => text(IDENTITY.home),
            DoctorRow::Workdir => text(IDENTITY.workdir),
            DoctorRow::Python => text(&format!("{PYTHON} on PATH")),
            DoctorRow::Pip => text(&format!("{PIP} on PATH")),
            DoctorRow::Kernel => RowValue::Names(
                KERNEL_PACKAGES
                    .iter()
                    .map(|&name| name.to_owned())
                    .collect(),
            ),
            DoctorRow::ReservedPath => {
                text(&format!("{} present and read-only", IDENTITY.reserved_path))
            }
            DoctorRow::Locale => text(IDENTITY.locale),
            DoctorRow::Timezone => text(IDENTITY.timezone),
            DoctorRow::CaCertificates => text("a CA bundle"),
            DoctorRow::Init => text("PID 1 reaps orphans"),
        }
    }
}

impl fmt::Display for DoctorRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// A row's `expected` or `actual`: the JSON shapes the doctors write there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RowValue {
    /// Nothing could be read (`null`).
    Null,
    /// A number: a uid or a gid.
    Integer(i64),
    /// A string: a name, a path, a state.
    Text(String),
    /// A list of names: the kernel packages.
    Names(Vec<String>),
    /// What the `init` row saw.
    Init(InitObservation),
    /// Installed versions by distribution name, `null` when one is missing.
    Versions(BTreeMap<String, Option<String>>),
}

impl From<Option<String>> for RowValue {
    fn from(value: Option<String>) -> Self {
        value.map_or(RowValue::Null, RowValue::Text)
    }
}

/// What the `init` row saw: PID 1's name and how many orphans it left unreaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitObservation {
    /// `/proc/1/comm`, when readable.
    pub pid1: Option<String>,
    /// Zombies whose parent is PID 1 a moment after an orphan exited; `None` when PID 1
    /// could not be observed.
    pub orphan_zombies: Option<u32>,
}

/// One row of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowReport {
    /// Which row.
    pub id: DoctorRow,
    /// Whether a failure fails the report: every row of sandbox-contract/v1 is.
    pub required: bool,
    /// Whether the sandbox satisfies the row.
    pub ok: bool,
    /// What the contract asks for.
    pub expected: RowValue,
    /// What the sandbox has.
    pub actual: RowValue,
    /// Why the row failed; `None` when it passed.
    pub message: Option<String>,
}

/// The Python the doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonReport {
    /// `platform.python_version()`; empty when Python could not be asked.
    pub version: String,
    /// Where `python3` is on `PATH`.
    pub executable: Option<String>,
    /// Where `pip` is on `PATH`.
    pub pip: Option<String>,
}

/// Who the sandbox runs code as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityReport {
    /// The user's name, when the user database has one.
    pub user: Option<String>,
    /// The real uid.
    pub uid: u32,
    /// The real gid.
    pub gid: u32,
    /// `HOME`.
    pub home: Option<String>,
    /// The working directory; empty when it cannot be read.
    pub cwd: String,
}

/// The contract's paths, by what the doctor found them to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathsReport {
    /// Contract paths the user can write: the workdir, when it is.
    pub writable: Vec<String>,
    /// Contract paths present and read-only to the user: the reserved path, when it is.
    pub read_only: Vec<String>,
}

/// The report `datalayer-sandbox doctor --json` writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// Always [`DOCTOR`].
    pub doctor: String,
    /// [`DOCTOR_VERSION`] of the doctor that wrote it.
    pub doctor_version: String,
    /// The contract checked: [`CONTRACT_VERSION`](crate::CONTRACT_VERSION).
    pub contract: String,
    /// Whether every required row passed.
    pub ok: bool,
    /// The first required row that failed.
    pub failed: Option<DoctorRow>,
    /// Every row, in [`DoctorRow::ALL`]'s order.
    pub rows: Vec<RowReport>,
    /// The Python found.
    pub python: PythonReport,
    /// The kernel packages' installed versions, `None` when missing.
    pub kernel: BTreeMap<String, Option<String>>,
    /// Who the sandbox runs code as.
    pub identity: IdentityReport,
    /// The contract's paths that are writable or read-only.
    pub paths: PathsReport,
    /// `LC_ALL`, or else `LANG`.
    pub locale: Option<String>,
    /// The time zone found.
    pub timezone: Option<String>,
    /// The CA bundle found.
    pub ca_bundle: Option<String>,
}

impl DoctorReport {
    /// The report's row `id`, if it has one.
    pub fn row(&self, id: DoctorRow) -> Option<&RowReport> {
        self.rows.iter().find(|row| row.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_each_row_once_with_distinct_ids() {
        let mut ids: Vec<&str> = DoctorRow::ALL.iter().map(|row| row.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 15);
        assert_eq!(DoctorRow::ReservedPath.to_string(), "reserved_path");
        assert_eq!(DoctorRow::CaCertificates.id(), "ca_certificates");
    }

    #[test]
    fn the_doctor_is_named_after_its_path_in_the_identity() {
        assert_eq!(IDENTITY.doctor.rsplit('/').next(), Some(DOCTOR));
        assert!(IDENTITY.doctor.starts_with(IDENTITY.reserved_path));
    }

    #[test]
    fn expected_values_come_from_the_identity() {
        assert_eq!(
            DoctorRow::Uid.expected(),
            RowValue::Integer(i64::from(IDENTITY.uid))
        );
        assert_eq!(
            DoctorRow::ReservedPath.expected(),
            RowValue::Text("/opt/datalayer present and read-only".into())
        );
        assert_eq!(
            DoctorRow::Kernel.expected(),
            RowValue::Names(vec!["ipykernel".into(), "jupyter_client".into()])
        );
        assert!(UTC_ALIASES.contains(&IDENTITY.timezone));
        assert!(ARCHITECTURE.starts_with(SYSTEM));
        assert!(DEBIAN_DERIVED_IDS.contains(&OS_FAMILY));
    }
}
