//! The doctor's checks, command line, report schema and report types, on a fake host.

mod cli;
mod fake;
mod reports;
mod rows;
mod schema;
