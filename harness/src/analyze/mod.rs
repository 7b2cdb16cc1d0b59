//! What is made of results: statistics per metric, comparison with a baseline, the release
//! gate, and merging sharded runs.

pub mod board;
pub mod compare;
pub mod gate;
pub mod merge;
pub mod stats;
