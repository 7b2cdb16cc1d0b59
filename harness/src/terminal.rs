//! The terminal reporter: a spinner on the running step with its latest log line, and
//! one line per finished step on stderr.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{EventSink, RunEvent};
use crate::results::StepStatus;

/// Prints progress to stderr; the spinner hides itself when stderr is not a terminal.
pub struct Terminal {
    spinner: Mutex<Option<ProgressBar>>,
}

impl Default for Terminal {
    fn default() -> Self {
        Self::new()
    }
}

impl Terminal {
    /// A reporter with no step running.
    pub fn new() -> Self {
        Self {
            spinner: Mutex::new(None),
        }
    }

    fn start(&self, prefix: String) {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {prefix:<32} {elapsed:>4} {wide_msg}")
                .expect("a valid template"),
        );
        bar.set_prefix(prefix);
        bar.enable_steady_tick(Duration::from_millis(120));
        if let Some(old) = self.spinner.lock().expect("spinner lock").replace(bar) {
            old.finish_and_clear();
        }
    }

    fn message(&self, line: &str) {
        if let Some(bar) = self.spinner.lock().expect("spinner lock").as_ref() {
            bar.set_message(line.chars().take(120).collect::<String>());
        }
    }

    fn println(&self, line: &str) {
        match self.spinner.lock().expect("spinner lock").as_ref() {
            Some(bar) if !bar.is_hidden() => bar.suspend(|| eprintln!("{line}")),
            _ => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.spinner.lock().expect("spinner lock").take() {
            bar.finish_and_clear();
        }
    }
}

impl EventSink for Terminal {
    fn emit(&self, event: &RunEvent) {
        match event {
            RunEvent::Preparing { variant, line } => {
                if self.spinner.lock().expect("spinner lock").is_none() {
                    self.start(format!("prepare {variant}"));
                }
                self.message(line);
                self.println(&format!("  [{variant}] {line}"));
            }
            RunEvent::ScenarioStarted { variant, scenario } => {
                self.finish();
                eprintln!("{variant} · {scenario}");
            }
            RunEvent::StepStarted { step, .. } => {
                self.start(step.clone());
                if self
                    .spinner
                    .lock()
                    .expect("spinner lock")
                    .as_ref()
                    .is_some_and(ProgressBar::is_hidden)
                {
                    // No terminal to animate: say what started, so a long step is visible in CI logs.
                    eprintln!("  ▸ {step}");
                }
            }
            RunEvent::StepLog { line, .. } => self.message(line),
            RunEvent::StepFinished { result, .. } => {
                self.finish();
                let secs = format!("{:>7.2} s", result.duration.as_secs_f64());
                let line = match &result.status {
                    StepStatus::Passed => format!("  ✓ {:<32}{secs}", result.step),
                    StepStatus::Failed { reason } => {
                        format!("  ✗ {:<32}{secs}  {reason}", result.step)
                    }
                    StepStatus::Skipped { reason } => {
                        format!("  - {:<32}{:>9}  skipped: {reason}", result.step, "")
                    }
                };
                eprintln!("{line}");
            }
            RunEvent::ScenarioFinished { .. } => self.finish(),
        }
    }
}
