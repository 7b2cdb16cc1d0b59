//! The terminal reporter: a spinner on the running step with its latest log line, and
//! one line per finished step on stderr, every line scrubbed of the run's credentials.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use sandbox_providers::Secret;

use super::self_scan;
use crate::model::events::{EventSink, RunEvent};
use crate::model::results::{ReplayPace, RunResults, Source, StepResult, StepStatus};

/// Prints progress to stderr; the spinner hides itself when stderr is not a terminal.
pub struct Terminal {
    spinner: Mutex<Option<ProgressBar>>,
    source: Mutex<Source>,
    secrets: Mutex<Vec<Secret>>,
    /// Whether a failed step's own log is printed under it.
    failed_step_logs: bool,
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
            source: Mutex::new(Source::Live),
            secrets: Mutex::new(Vec::new()),
            failed_step_logs: false,
        }
    }

    /// Prints, when `on`, a failed step's own log under its line (`run --verbose`).
    pub fn with_failed_step_logs(mut self, on: bool) -> Self {
        self.failed_step_logs = on;
        self
    }

    /// From now on, replaces every form of these credentials in what it prints by
    /// `<redacted:NAME>` (a provider may echo a key back in an error).
    pub fn scrub_with(&self, secrets: Vec<Secret>) {
        *self.secrets.lock().expect("secrets lock") = secrets;
    }

    /// `line` with the credentials scrubbed.
    fn clean(&self, line: &str) -> String {
        let secrets = self.secrets.lock().expect("secrets lock");
        if secrets.is_empty() {
            line.to_owned()
        } else {
            self_scan::scrub(line, &secrets).0
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
            bar.set_message(self.clean(line).chars().take(120).collect::<String>());
        }
    }

    fn println(&self, line: &str) {
        let line = self.clean(line);
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
            RunEvent::ScenarioStarted {
                variant,
                scenario,
                source,
            } => {
                self.finish();
                self.println(&scenario_line(variant, scenario, source));
                *self.source.lock().expect("source lock") = source.clone();
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
                let source = self.source.lock().expect("source lock").clone();
                self.println(&step_line(result, &source));
                if self.failed_step_logs && matches!(result.status, StepStatus::Failed { .. }) {
                    for line in &result.log {
                        self.println(&format!("    · {line}"));
                    }
                }
            }
            RunEvent::ScenarioFinished { .. } => self.finish(),
        }
    }
}

/// What the terminal printed for each scenario of `results` and its finished steps, in run
/// order, as the run printed it (without the progress of steps under way): the README's
/// sample is made from it.
pub fn transcript(results: &RunResults) -> Vec<String> {
    let mut lines = Vec::new();
    for scenario in &results.scenarios {
        lines.push(scenario_line(
            &scenario.variant,
            &scenario.scenario,
            &scenario.source,
        ));
        lines.extend(
            scenario
                .steps
                .iter()
                .map(|step| step_line(step, &scenario.source)),
        );
    }
    lines
}

/// The line that opens a scenario: `variant · scenario`, with the mode when it is not live.
fn scenario_line(variant: &str, scenario: &str, source: &Source) -> String {
    match source {
        Source::Live => format!("{variant} · {scenario}"),
        Source::Record => format!("{variant} · {scenario} · record"),
        Source::Replay { replay } => {
            format!("{variant} · {scenario} · replay of {}", replay.cassette)
        }
        Source::Emulated { .. } => format!("{variant} · {scenario} · emulated"),
    }
}

/// The line of a finished step: its mark, name and duration, and the reason when it did not
/// pass. A replayed step's duration is not the provider's: at instant pace it reads
/// `replayed`, at recorded pace it is marked `(replay)`.
fn step_line(result: &StepResult, source: &Source) -> String {
    let seconds = format!("{:>7.2} s", result.duration.as_secs_f64());
    let took = match source.replay().map(|replay| replay.pace) {
        None => seconds,
        Some(ReplayPace::Recorded) => format!("{seconds} (replay)"),
        Some(ReplayPace::Instant | ReplayPace::Fixed) => format!("{:>9}", "replayed"),
    };
    match &result.status {
        StepStatus::Passed => format!("  ✓ {:<32}{took}", result.step),
        StepStatus::Failed { reason } => {
            format!("  ✗ {:<32}{took}  {}", result.step, indented(reason))
        }
        StepStatus::Skipped { reason } => {
            format!("  - {:<32}{:>9}  skipped: {reason}", result.step, "")
        }
    }
}

/// A reason of several lines (a build's log tail, a sandbox's last log lines) with every
/// line after the first set under the step's line as `    | …`, blank lines dropped, so
/// that nothing a provider printed starts at the margin among the step lines.
fn indented(reason: &str) -> String {
    let mut lines = reason.lines();
    let mut out = lines.next().unwrap_or_default().to_owned();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        out.push('\n');
        if !line.starts_with("    | ") {
            out.push_str("    | ");
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture::{failed, replay_source, step};

    #[test]
    fn a_reason_of_several_lines_is_set_under_its_step() {
        let built = step(
            "build",
            failed("build failed; log tail:\nstep 1\n\n    | kept\nstep 2\n"),
            1_000,
            60,
            vec![],
            &[],
        );
        assert_eq!(
            step_line(&built, &Source::Live),
            format!(
                "  ✗ {:<32}   1.00 s  build failed; log tail:\n    | step 1\n    | kept\n    | step 2",
                "build"
            )
        );
    }

    #[test]
    fn a_replayed_step_never_shows_a_bare_duration() {
        let launch = step("launch", StepStatus::Passed, 640, 30, vec![], &[]);
        let wrong = step("first-result", failed("got `3`"), 1_904, 60, vec![], &[]);
        assert_eq!(
            step_line(&launch, &Source::Live),
            format!("  ✓ {:<32}   0.64 s", "launch")
        );
        let instant = replay_source(ReplayPace::Instant);
        assert_eq!(
            step_line(&launch, &instant),
            format!("  ✓ {:<32} replayed", "launch")
        );
        assert_eq!(
            step_line(&wrong, &instant),
            format!("  ✗ {:<32} replayed  got `3`", "first-result")
        );
        assert_eq!(
            step_line(&launch, &replay_source(ReplayPace::Recorded)),
            format!("  ✓ {:<32}   0.64 s (replay)", "launch")
        );
        assert_eq!(
            scenario_line("e2b", "lifecycle", &instant),
            "e2b · lifecycle · replay of fixtures/cassettes/e2b/lifecycle.yaml"
        );
        assert_eq!(
            scenario_line("docker", "lifecycle", &Source::Live),
            "docker · lifecycle"
        );
    }

    #[test]
    fn an_emulated_scenario_says_so_and_its_steps_show_their_durations() {
        let emulated = crate::report::fixture::emulated_source();
        assert_eq!(
            scenario_line("e2b", "lifecycle", &emulated),
            "e2b · lifecycle · emulated"
        );
        let launch = step("launch", StepStatus::Passed, 640, 30, vec![], &[]);
        assert_eq!(
            step_line(&launch, &emulated),
            format!("  ✓ {:<32}   0.64 s", "launch")
        );
    }
}
