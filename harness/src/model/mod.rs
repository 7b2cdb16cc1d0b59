//! The data every part shares: a run's results as `results.json` holds them ([`results`]),
//! written by [`crate::run`], read by [`crate::analyze`] and rendered by
//! [`crate::report`], and how a step that did not pass ended ([`outcome`]), as the checks
//! and the runner return it, and the events a run emits and reporters read ([`events`]).

pub mod events;
pub mod outcome;
pub mod results;
