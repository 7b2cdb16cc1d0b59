//! Steps that do not run: skipped with their reason (a capability the variant lacks, a
//! variant that cannot be reached), or not run after an earlier failure.

use super::*;

/// Why a variant that can do what `capabilities` say cannot run `step`, or why the step has
/// nothing to test on it; `None` when it has something. Such a step is skipped with this
/// reason, never passed.
pub fn skip_reason(capabilities: &Capabilities, step: &Step) -> Option<String> {
    if let Expectation::Check(check, params) = &step.expect {
        return conformance::nothing_to_test(*check, params, capabilities);
    }
    match step.kind {
        StepKind::Build | StepKind::Rebuild if !capabilities.build => {
            Some("this variant does not build artifacts".to_owned())
        }
        StepKind::Restart if capabilities.restart == RestartKind::Unsupported => {
            Some("this variant cannot restart a kernel or sandbox".to_owned())
        }
        StepKind::Restart if !capabilities.stateful_code => Some(conformance::STATELESS.to_owned()),
        StepKind::Lifetime if capabilities.lifetime == LifetimeLimit::None => Some(
            "this variant cannot bound a sandbox's lifetime: a sandbox runs until it is stopped"
                .to_owned(),
        ),
        StepKind::BaseChain if !capabilities.provenance => {
            Some("this variant keeps no provenance beside its artifacts".to_owned())
        }
        _ => None,
    }
}

/// The result of `scenario` on a variant that could not be reached in the mode `source`
/// says: the first step fails with `reason`, the rest are skipped, and there was nothing to
/// clean up.
pub fn unreachable_variant(
    variant: &str,
    scenario: &Scenario,
    source: Source,
    reason: &str,
) -> ScenarioResult {
    let steps = scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let status = if i == 0 {
                StepStatus::Failed {
                    reason: reason.to_owned(),
                }
            } else {
                StepStatus::Skipped {
                    reason: "the variant is unreachable".to_owned(),
                }
            };
            not_run(step, status)
        })
        .collect();
    ScenarioResult {
        variant: variant.to_owned(),
        scenario: scenario.name.clone(),
        source,
        scenario_hash: scenario.hash.clone(),
        artifact_id: None,
        provider_version: None,
        region: None,
        capabilities: None,
        steps,
        timings: Vec::new(),
        leaked_resources: Vec::new(),
        secrets_found: Vec::new(),
        repetition: 1,
        samples: Vec::new(),
        base_credential: None,
        secrets_scan: None,
        base_chain: None,
        lifetime: None,
    }
}

pub(super) fn skipped(step: &Step, reason: String) -> StepResult {
    not_run(step, StepStatus::Skipped { reason })
}

/// A step that did not run: skipped, or failed before it could start.
pub(super) fn not_run(step: &Step, status: StepStatus) -> StepResult {
    StepResult {
        step: step.name().to_owned(),
        status,
        duration: Duration::ZERO,
        started: None,
        budget: step.budget,
        timings: Vec::new(),
        log: Vec::new(),
        data: None,
        reused: None,
    }
}
