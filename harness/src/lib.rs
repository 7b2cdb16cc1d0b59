//! sandbox-matrix: runs scenario files against sandbox provider variants, checks each
//! sandbox, measures every step, and writes JUnit, a comparison table and results.json.
//!
//! Folders follow what flows through them, one way: a scenario file is run ([`run`]:
//! scenario → variant × scenario → runner → provider trait → events → terminal), each
//! sandbox is checked on the way ([`checks`]: conformance checks, the secrets scan, the
//! Dockerfile linter), its results are data every part shares ([`model`]: what
//! results.json holds), runs are analyzed ([`analyze`]: statistics, comparison, the gate,
//! merging shards) and reported ([`report`]: results.json, the table, JUnit, HTML, the run
//! folder). What runs that are gone left is removed by [`sweep`].

pub mod analyze;
pub mod checks;
pub mod model;
pub mod paths;
pub mod report;
pub mod run;
pub mod sweep;
