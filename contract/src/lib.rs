//! sandbox-contract/v1 as data: the identity every sandbox must present, the limits it must
//! keep, the doctor's rows and report ([`doctor`]), and what a Dockerfile may not do
//! ([`dockerfile`]). The doctor, the conformance checks and the linter all read this one source.

pub mod dockerfile;
pub mod doctor;

/// The contract's version string.
pub const CONTRACT_VERSION: &str = "sandbox-contract/v1";

/// The identity a sandbox presents to code it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// User name.
    pub user: &'static str,
    /// Numeric user id.
    pub uid: u32,
    /// Numeric group id (100 is `users`).
    pub gid: u32,
    /// Home directory.
    pub home: &'static str,
    /// Working directory: the home itself.
    pub workdir: &'static str,
    /// Reserved, read-only to the user.
    pub reserved_path: &'static str,
    /// The doctor binary.
    pub doctor: &'static str,
    /// Locale.
    pub locale: &'static str,
    /// Time zone.
    pub timezone: &'static str,
}

/// sandbox-contract/v1's identity table.
pub const IDENTITY: Identity = Identity {
    user: "datalayer",
    uid: 1000,
    gid: 100,
    home: "/home/datalayer",
    workdir: "/home/datalayer",
    reserved_path: "/opt/datalayer",
    doctor: "/opt/datalayer/bin/datalayer-sandbox",
    locale: "C.UTF-8",
    timezone: "UTC",
};

/// Seconds PID 1 has to exit after SIGTERM before it is killed.
pub const GRACEFUL_SHUTDOWN_SECS: u64 = 10;
