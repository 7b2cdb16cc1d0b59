//! What is checked of a sandbox: the conformance checks of sandbox-contract/v1 and their
//! probes, the secrets scan, and the Dockerfile linter that runs before every build.

pub mod approved;
pub mod chain;
pub mod conformance;
pub mod lint;
pub mod secrets;
pub mod suite;
