//! What one step records while it runs: its log lines (redacted), timings and data.

use super::*;

/// What a step recorded while it ran.
#[derive(Default)]
pub(super) struct StepRecord {
    pub(super) lines: Vec<String>,
    pub(super) timings: Vec<Timing>,
    pub(super) data: Option<serde_json::Value>,
}

/// A step's log: lines (credentials redacted, newest kept), timings and a check's data;
/// lines are also sent as events.
#[derive(Clone)]
pub(super) struct StepLog {
    inner: Arc<Mutex<StepRecord>>,
    sink: Arc<dyn EventSink>,
    variant: String,
    step: StepKind,
    secrets: Vec<Secret>,
}

impl StepLog {
    pub(super) fn new(
        sink: Arc<dyn EventSink>,
        variant: String,
        step: StepKind,
        secrets: Vec<Secret>,
    ) -> Self {
        Self {
            inner: Arc::default(),
            sink,
            variant,
            step,
            secrets,
        }
    }

    pub(super) fn redact(&self, line: &str) -> String {
        self.secrets.iter().fold(line.to_owned(), |l, s| {
            l.replace(s.expose(), &format!("[redacted {}]", s.name()))
        })
    }

    pub(super) fn line(&self, line: &str) {
        let line = self.redact(line);
        self.sink.emit(&RunEvent::StepLog {
            variant: self.variant.clone(),
            step: self.step.name().to_owned(),
            line: line.clone(),
        });
        let mut inner = self.inner.lock().expect("step log lock");
        if inner.lines.len() == MAX_LOG_LINES {
            inner.lines.remove(0);
        }
        inner.lines.push(line);
    }

    pub(super) fn timings(&self, timings: Vec<Timing>) {
        self.inner
            .lock()
            .expect("step log lock")
            .timings
            .extend(timings);
    }

    pub(super) fn data(&self, data: serde_json::Value) {
        self.inner.lock().expect("step log lock").data = Some(data);
    }

    pub(super) fn take(&self) -> StepRecord {
        std::mem::take(&mut *self.inner.lock().expect("step log lock"))
    }
}
