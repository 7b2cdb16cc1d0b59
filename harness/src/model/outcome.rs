//! How a step ended when it did not pass, as the checks and the runner return it.

use sandbox_providers::{ErrorKind, ProviderError};

/// What a shutdown through an API call says of how the sandbox ended.
pub const NOT_OBSERVABLE: &str = "ended through the API; exit on SIGTERM not observable";

/// Why a step did not pass: it failed, or it had nothing to test.
#[derive(Debug)]
pub enum StepEnd {
    /// It ran and did not meet its expectation, for this reason.
    Failed(String),
    /// It had nothing to test, for this reason; never counted as a pass.
    Skipped(String),
}

impl From<String> for StepEnd {
    fn from(reason: String) -> Self {
        StepEnd::Failed(reason)
    }
}

impl From<ProviderError> for StepEnd {
    /// A call the variant cannot serve makes the step a skip naming it; any other error
    /// fails the step.
    fn from(error: ProviderError) -> Self {
        match error.kind {
            ErrorKind::Unsupported => StepEnd::Skipped(error.message),
            _ => StepEnd::Failed(error.to_string()),
        }
    }
}
