//! sandbox-matrix: runs scenario files against sandbox provider variants, checks each
//! sandbox, measures every step, and writes JUnit, a comparison table and results.json.
//!
//! Data flows one way: scenario file → matrix (variant × scenario) → [`runner`] →
//! provider trait → [`events`] → reporters ([`report`], [`terminal`], [`run_folder`]).

pub mod compare;
pub mod conformance;
pub mod events;
pub mod gate;
pub mod lint;
pub mod merge;
pub mod report;
pub mod results;
pub mod run_folder;
pub mod runner;
pub mod scenario;
pub mod secrets;
pub mod stats;
pub mod terminal;
pub mod variants;
