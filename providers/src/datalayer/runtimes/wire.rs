//! The JSON bodies the runtimes API answers with, as far as the client reads them.

use super::*;

/// A runtime as the API describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct RuntimeRecord {
    /// The key of get and delete.
    pub pod_name: String,
    /// The platform's record id (not a key of the API's paths).
    #[serde(default)]
    pub uid: Option<String>,
    /// The name the client gave.
    #[serde(default)]
    pub given_name: Option<String>,
    /// The environment it runs.
    #[serde(default)]
    pub environment_name: Option<String>,
    /// Jupyter Server's base URL.
    pub ingress: String,
    /// The token Jupyter Server wants.
    pub token: String,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// When its reservation ends (RFC 3339).
    #[serde(default)]
    pub expired_at: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Answer<T> {
    #[serde(default = "yes")]
    pub(super) success: bool,
    #[serde(default)]
    pub(super) message: Option<String>,
    #[serde(flatten)]
    pub(super) body: Option<T>,
}

pub(super) fn yes() -> bool {
    true
}

#[derive(Deserialize)]
pub(super) struct Created {
    pub(super) runtime: RuntimeRecord,
}

#[derive(Deserialize)]
pub(super) struct Listed {
    #[serde(default)]
    pub(super) runtimes: Vec<RuntimeRecord>,
}

#[derive(Deserialize)]
pub(super) struct Environments {
    #[serde(default)]
    pub(super) environments: Vec<EnvironmentRecord>,
}

#[derive(Deserialize)]
pub(super) struct EnvironmentRecord {
    pub(super) name: String,
    #[serde(default)]
    pub(super) burning_rate: Option<f64>,
}
