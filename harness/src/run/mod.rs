//! Running scenarios: the scenario files, the variants, the runner and the events it
//! emits (the terminal that shows them is a reporter, [`crate::report::terminal`]).

pub mod base;
pub mod ledger;
pub mod lifetime;
pub mod live_runs;
pub mod local_registry;
pub mod orphans;
pub mod partition;
pub mod plan;
pub mod preflight;
pub mod runner;
pub mod scenario;
pub mod shared;
pub mod variant_names;
pub mod variants;
