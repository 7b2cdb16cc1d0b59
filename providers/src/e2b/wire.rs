//! The JSON bodies E2B's API answers with, as far as the provider reads them.

use super::*;

/// The one field of `SandboxDetail` read after a step failed.
#[derive(Deserialize)]
pub(super) struct StateOnly {
    pub(super) state: String,
}

/// `SandboxLogsV2Response`: the entries' messages.
#[derive(Deserialize)]
pub(super) struct SandboxLogs {
    #[serde(default)]
    pub(super) logs: Vec<SandboxLogEntry>,
}

#[derive(Deserialize)]
pub(super) struct SandboxLogEntry {
    pub(super) message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TemplateCreated {
    #[serde(rename = "templateID")]
    pub(super) template_id: String,
    #[serde(rename = "buildID")]
    pub(super) build_id: String,
}

#[derive(Deserialize)]
pub(super) struct FileUpload {
    pub(super) present: bool,
    pub(super) url: Option<String>,
    /// Headers the upload must carry, where the API says.
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct BuildReason {
    #[serde(default)]
    pub(super) message: String,
    pub(super) step: Option<String>,
    #[serde(default)]
    pub(super) log_entries: Vec<LogEntry>,
}

#[derive(Deserialize)]
pub(super) struct LogEntry {
    pub(super) message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BuildInfo {
    pub(super) status: String,
    #[serde(default)]
    pub(super) logs: Vec<String>,
    #[serde(default)]
    pub(super) log_entries: Vec<LogEntry>,
    pub(super) reason: Option<BuildReason>,
}

impl BuildInfo {
    /// The new log lines: the structured entries, or the plain lines when there are none.
    pub(super) fn lines(&self) -> Vec<String> {
        if self.log_entries.is_empty() {
            self.logs.clone()
        } else {
            self.log_entries.iter().map(|e| e.message.clone()).collect()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreatedSandbox {
    #[serde(rename = "sandboxID")]
    pub(super) sandbox_id: String,
    pub(super) envd_access_token: Option<String>,
    pub(super) traffic_access_token: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct ListedSandbox {
    #[serde(rename = "sandboxID")]
    pub(super) sandbox_id: String,
    #[serde(default)]
    pub(super) metadata: BTreeMap<String, String>,
    #[serde(default, rename = "startedAt")]
    pub(super) started_at: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct TemplateListed {
    #[serde(rename = "templateID")]
    pub(super) template_id: String,
    #[serde(default)]
    pub(super) names: Vec<String>,
    #[serde(default)]
    pub(super) aliases: Vec<String>,
    #[serde(default, rename = "createdAt")]
    pub(super) created_at: Option<String>,
}
