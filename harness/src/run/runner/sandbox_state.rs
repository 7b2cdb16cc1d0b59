//! What the provider says of a sandbox after a step that talked to it failed: killed,
//! stopped, ended by its provider, with its last log lines.

use super::*;

/// How long the provider is given to say what happened to a sandbox after a step failed.
const SANDBOX_STATE_BUDGET: Duration = Duration::from_secs(10);

/// How many more times a sandbox said running is asked again, and how far apart.
const STATE_ASKS: usize = 6;

const STATE_ASK_INTERVAL: Duration = Duration::from_millis(500);

/// Steps that talk to the launched sandbox and expect it to answer (not the shutdown,
/// which stops it, nor the burst, whose sandboxes are its own).
pub(super) fn talks_to_the_sandbox(kind: StepKind) -> bool {
    matches!(
        kind,
        StepKind::FirstResult
            | StepKind::Restart
            | StepKind::SecretsScan
            | StepKind::Doctor
            | StepKind::Check
    )
}

/// What happened to `sandbox`, as its provider tells, when `step` failed with `reason`:
/// `the sandbox stopped during restart: killed (exit 137)` and its last log lines, or
/// `the sandbox stopped answering during restart (paused)`, or, running, that the
/// connection broke and not the sandbox; `None` when it is running and answered (the
/// step's own reason says it best), or the provider cannot tell.
pub(super) async fn sandbox_said(
    provider: &Arc<dyn Provider>,
    sandbox: &SandboxId,
    step: &Step,
    reason: &str,
) -> Option<String> {
    let over_budget = reason.starts_with("exceeded its budget");
    let ask = async {
        // A connection reset can come in before the engine has marked the sandbox ended:
        // a sandbox still running is asked again, a few times, before it is believed.
        let mut state = provider.sandbox_state(sandbox).await;
        for _ in 0..STATE_ASKS {
            if over_budget || !matches!(state, Ok(Some(sandbox_providers::SandboxState::Running))) {
                break;
            }
            tokio::time::sleep(STATE_ASK_INTERVAL).await;
            state = provider.sandbox_state(sandbox).await;
        }
        state
    };
    let state = tokio::time::timeout(SANDBOX_STATE_BUDGET, ask)
        .await
        .ok()?
        .ok()??;
    let name = step.name();
    match state {
        sandbox_providers::SandboxState::Stopped {
            ending,
            last_log_lines,
            ..
        } => {
            let mut said = format!("the sandbox stopped during {name}: {ending}");
            if !last_log_lines.is_empty() {
                said.push_str(&format!(
                    "; its last {} log lines:\n{}",
                    last_log_lines.len(),
                    last_log_lines
                        .iter()
                        .map(|line| format!("    | {line}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            Some(said)
        }
        sandbox_providers::SandboxState::Paused => Some(format!(
            "the sandbox stopped answering during {name} (paused: it answers nothing until it is resumed)"
        )),
        sandbox_providers::SandboxState::Running if over_budget => Some(format!(
            "the sandbox stopped answering during {name} (running, no reply for {})",
            humantime::format_duration(step.budget)
        )),
        // The provider still has it running: the connection broke, not the sandbox.
        sandbox_providers::SandboxState::Running if reason.starts_with("transport error") => {
            Some(format!(
                "the sandbox was still running when the connection to it broke during {name}: {reason}"
            ))
        }
        sandbox_providers::SandboxState::Running => None,
    }
}
