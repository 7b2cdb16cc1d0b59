//! The data every part shares: a run's results as `results.json` holds them, written by
//! [`crate::run`], read by [`crate::analyze`] and rendered by [`crate::report`].

pub mod results;
