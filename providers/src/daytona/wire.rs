//! The JSON bodies Daytona's API answers with, as far as the provider reads them.

use super::*;

/// A snapshot record (`SnapshotDto`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SnapshotRecord {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) error_reason: Option<String>,
    #[serde(default)]
    pub(super) created_at: Option<String>,
}

/// A page of snapshots (`PaginatedSnapshots`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SnapshotPage {
    pub(super) items: Vec<SnapshotRecord>,
    pub(super) page: f64,
    pub(super) total_pages: f64,
}

/// A sandbox record (`Sandbox` or `SandboxListItem`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SandboxRecord {
    pub(super) id: String,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) error_reason: Option<String>,
    pub(super) toolbox_proxy_url: String,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    /// The region the sandbox was created in.
    #[serde(default)]
    pub(super) target: Option<String>,
    #[serde(default)]
    pub(super) created_at: Option<String>,
}

/// A page of sandboxes (`ListSandboxesResponse`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SandboxPage {
    pub(super) items: Vec<SandboxRecord>,
    pub(super) next_cursor: Option<String>,
}

/// A docker-registry entry (`DockerRegistry`), the fields this client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RegistryRecord {
    pub(super) id: String,
    pub(super) name: String,
    #[serde(default)]
    pub(super) created_at: Option<String>,
}

/// A URL answer (`Url`, `ToolboxProxyUrl`).
#[derive(Debug, Deserialize)]
pub(super) struct UrlRecord {
    pub(super) url: String,
}

/// An interpreter context (`InterpreterContext`), the field this client reads.
#[derive(Debug, Deserialize)]
pub(super) struct ContextRecord {
    pub(super) id: String,
}

/// What `process/execute` answers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunRecord {
    #[serde(default)]
    pub(super) exit_code: Option<i64>,
    #[serde(default)]
    pub(super) result: Option<String>,
}
