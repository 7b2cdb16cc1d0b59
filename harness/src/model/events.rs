//! The one event stream the runner emits; reporters only read it.

use crate::model::results::{ScenarioResult, Source, StepResult};

/// Something that happened during a run.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// A variant is being made ready (base image bootstrap); one line of progress.
    Preparing {
        /// The variant.
        variant: String,
        /// What is happening.
        line: String,
    },
    /// A scenario starts on a variant.
    ScenarioStarted {
        /// The variant.
        variant: String,
        /// The scenario.
        scenario: String,
        /// Where its numbers come from.
        source: Source,
    },
    /// A step starts.
    StepStarted {
        /// The variant.
        variant: String,
        /// The scenario.
        scenario: String,
        /// The step's name.
        step: String,
    },
    /// A log line from a running step (build output), credentials already redacted.
    StepLog {
        /// The variant.
        variant: String,
        /// The step's name.
        step: String,
        /// The line.
        line: String,
    },
    /// A step ended, passed, failed or skipped.
    StepFinished {
        /// The variant.
        variant: String,
        /// The scenario.
        scenario: String,
        /// Its result.
        result: StepResult,
    },
    /// A scenario ended; its result is complete.
    ScenarioFinished {
        /// The whole scenario's result.
        result: Box<ScenarioResult>,
    },
}

/// Receives events as they happen. Implementations must be quick: they run inline.
pub trait EventSink: Send + Sync {
    /// Handles one event.
    fn emit(&self, event: &RunEvent);
}

/// Forwards every event to several sinks, in order.
pub struct Fanout(pub Vec<Box<dyn EventSink>>);

impl EventSink for Fanout {
    fn emit(&self, event: &RunEvent) {
        for sink in &self.0 {
            sink.emit(event);
        }
    }
}

impl<T: EventSink + ?Sized> EventSink for std::sync::Arc<T> {
    fn emit(&self, event: &RunEvent) {
        (**self).emit(event);
    }
}
