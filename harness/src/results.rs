//! The results of a run as data: what reporters render and `results.json` holds.

use std::time::Duration;

use sandbox_providers::{Timing, duration_ms};
use serde::{Deserialize, Serialize};

/// Version of the `results.json` schema; bump it on any incompatible change.
pub const RESULTS_SCHEMA_VERSION: &str = "sandbox-matrix/results/v1";

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    /// Always [`RESULTS_SCHEMA_VERSION`].
    pub schema_version: String,
    /// Where and with what the run happened.
    pub provenance: Provenance,
    /// One entry per variant × scenario, in run order.
    pub scenarios: Vec<ScenarioResult>,
}

/// Where a run happened and with what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Unique id of the run; also the label value on every resource it created.
    pub run_id: String,
    /// sandbox-matrix's version.
    pub harness_version: String,
    /// Host name of the machine that ran it.
    pub host: String,
    /// RFC 3339 time the run started.
    pub started_at: String,
    /// The provenance of each run merged into this one (`sandbox-matrix merge`), in order;
    /// empty for a run that was not merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Provenance>,
}

/// One scenario run on one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Variant name, such as `docker`.
    pub variant: String,
    /// Scenario name, such as `lifecycle`.
    pub scenario: String,
    /// sha256 of the scenario file's bytes.
    pub scenario_hash: String,
    /// The immutable id of the artifact built or launched, once known.
    pub artifact_id: Option<String>,
    /// The provider's API or engine version, where known.
    pub provider_version: Option<String>,
    /// Where the provider ran it (a region or location), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// What the variant could do, as it declared it.
    pub capabilities: Option<sandbox_providers::Capabilities>,
    /// Steps in order; steps after a failure are skipped, cleanup always runs.
    pub steps: Vec<StepResult>,
    /// Timings that span steps, such as `create-to-first-result`.
    pub timings: Vec<Timing>,
    /// Resources still listed under the run's label after cleanup.
    pub leaked_resources: Vec<sandbox_providers::Resource>,
    /// Build-time secrets found in the sandbox or artifact: `name at location`.
    pub secrets_found: Vec<String>,
    /// Which repetition of the scenario this is, from 1 (`run --repeat N`).
    #[serde(default = "first_repetition")]
    pub repetition: u32,
    /// Values measured many times within the scenario (a burst's launches), each a value or
    /// a failed attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
}

fn first_repetition() -> u32 {
    1
}

/// One attempt at a timing inside a scenario: its value, or why it failed. A failed
/// attempt counts as +∞ in percentiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The timing's name, such as `create-to-first-result`.
    pub name: String,
    /// The measured span, or `None` when the attempt failed.
    #[serde(default, with = "sandbox_providers::opt_duration_ms")]
    pub value: Option<Duration>,
    /// Why the attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum StepStatus {
    /// It met its expectation within its budget.
    Passed,
    /// It did not; `reason` says what happened instead.
    Failed {
        /// What failed, for a person.
        reason: String,
    },
    /// It did not run; `reason` says why (an earlier failure, a missing capability).
    Skipped {
        /// Why it did not run.
        reason: String,
    },
}

/// One step's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The step's name, such as `first-result`.
    pub step: String,
    /// Passed, failed or skipped.
    #[serde(flatten)]
    pub status: StepStatus,
    /// Wall time of the step, on a monotonic clock.
    #[serde(with = "duration_ms")]
    pub duration: Duration,
    /// The step's budget.
    #[serde(with = "duration_ms")]
    pub budget: Duration,
    /// Timings measured inside the step.
    pub timings: Vec<Timing>,
    /// Log lines (build output, answers), credentials redacted.
    pub log: Vec<String>,
    /// What a conformance check's probe answered and measured, when the step is a check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl ScenarioResult {
    /// The step named `step`, if it is part of this scenario.
    pub fn step(&self, step: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.step == step)
    }

    /// A cross-step timing by name.
    pub fn timing(&self, name: &str) -> Option<&Timing> {
        self.timings.iter().find(|t| t.name == name)
    }

    /// True when no step failed.
    pub fn passed(&self) -> bool {
        !self
            .steps
            .iter()
            .any(|s| matches!(s.status, StepStatus::Failed { .. }))
    }
}
