//! `preflight`: what a live run needs, per variant, checked without creating anything.
//!
//! For each variant: its credentials are in the environment (names only, never values), a
//! read-only call answers ([`Provider::check_access`]: the engine's version, a page of
//! templates or snapshots), and the base is reachable by digest with the run's registry
//! credential (the same resolution a run makes, then the registry's `GET /v2/` handshake
//! and a `HEAD` of the manifest). Each row that is not ready says what to set or run.

use std::path::Path;
use std::sync::Arc;

use comfy_table::{Table, presets::ASCII_MARKDOWN};
use sandbox_providers::api::{Mode, Volatiles};
use sandbox_providers::registry::check::{check_base, describe};
use sandbox_providers::{Provider, datalayer};

use crate::run::base::{BASE_VAR, RunBase};
use crate::run::{local_registry, variants};

/// Whether one check is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Met.
    Ready,
    /// Not met; the row's detail says how to fix it.
    Missing,
    /// Not checked because an earlier check of the variant was not met.
    NotChecked,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::Missing => "missing",
            Status::NotChecked => "not checked",
        }
    }
}

/// One check of one variant.
#[derive(Debug, Clone)]
pub struct Row {
    /// The variant.
    pub variant: String,
    /// What was checked: `credentials`, `API answers`, `base by digest`.
    pub check: &'static str,
    /// Whether it is met.
    pub status: Status,
    /// What was seen, or what to set or run.
    pub detail: String,
}

/// Every row of a preflight, in variant order.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// The rows.
    pub rows: Vec<Row>,
}

impl Preflight {
    /// Whether every check of `variant` is met.
    pub fn ready(&self, variant: &str) -> bool {
        self.rows
            .iter()
            .filter(|r| r.variant == variant)
            .all(|r| r.status == Status::Ready)
    }

    /// The variants with a check not met.
    pub fn not_ready(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for row in &self.rows {
            if row.status != Status::Ready && !out.contains(&row.variant) {
                out.push(row.variant.clone());
            }
        }
        out
    }

    /// The rows as a Markdown table.
    pub fn render(&self) -> String {
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header(["Variant", "Check", "Status", "Seen, or how to fix it"]);
        for row in &self.rows {
            table.add_row([
                row.variant.as_str(),
                row.check,
                row.status.label(),
                row.detail.as_str(),
            ]);
        }
        table.to_string()
    }
}

/// What the base check found, shared by every variant.
enum BaseCheck {
    /// No registry base is configured: only the docker variant can build (from the local
    /// bootstrap).
    Local,
    /// The base answered by digest.
    Reachable(String),
    /// Something is wrong; the text says what and how to fix it.
    Broken(String),
}

/// Checks `selected` variants (every known variant when empty) for a live run, with the
/// base from `base_arg` or [`BASE_VAR`] and the approved bases at `approved`.
pub async fn preflight(
    root: &Path,
    harness: &Path,
    selected: &[String],
    base_arg: Option<&str>,
    approved: &Path,
) -> Result<Preflight, String> {
    let known = variants::known();
    let names: Vec<String> = if selected.is_empty() {
        known.iter().map(|s| (*s).to_owned()).collect()
    } else {
        for name in selected {
            if !known.contains(&name.as_str()) {
                return Err(format!(
                    "unknown variant `{name}`; known: {}",
                    known.join(", ")
                ));
            }
        }
        selected.to_vec()
    };
    let base = check_run_base(base_arg, approved).await;
    let mut report = Preflight::default();
    for name in names {
        let (access, provider) = connect(root, harness, &name).await;
        let connected = access.status == Status::Ready;
        report.rows.push(access);
        let answers = match provider {
            Some(provider) => match provider.check_access().await {
                Ok(seen) => row(&name, "API answers", Status::Ready, seen),
                Err(e) => row(
                    &name,
                    "API answers",
                    Status::Missing,
                    format!("{e}; check the credential and the API address variables"),
                ),
            },
            None => row(
                &name,
                "API answers",
                Status::NotChecked,
                "needs the credentials above".to_owned(),
            ),
        };
        report.rows.push(answers);
        let builds = variants::capabilities(&name).is_none_or(|c| c.build);
        let base_row = match (&base, name.as_str(), connected) {
            _ if !builds => row(
                &name,
                "base by digest",
                Status::Ready,
                "not needed: this variant builds nothing (its platform builds the environments it launches)".to_owned(),
            ),
            (BaseCheck::Local, "docker" | "datalayer", _) => row(
                &name,
                "base by digest",
                Status::Ready,
                format!(
                    "no {BASE_VAR}: the local bootstrap's base (made on the first run if missing), not a registry"
                ),
            ),
            (BaseCheck::Local, _, _) => row(
                &name,
                "base by digest",
                Status::Missing,
                format!(
                    "set {BASE_VAR}=<registry>/<repository>@sha256:<digest>; `sandbox-matrix bootstrap --push <registry>/<repository>` prints it"
                ),
            ),
            (BaseCheck::Reachable(seen), _, _) => {
                row(&name, "base by digest", Status::Ready, seen.clone())
            }
            (BaseCheck::Broken(what), _, _) => {
                row(&name, "base by digest", Status::Missing, what.clone())
            }
        };
        report.rows.push(base_row);
    }
    Ok(report)
}

fn row(variant: &str, check: &'static str, status: Status, detail: String) -> Row {
    Row {
        variant: variant.to_owned(),
        check,
        status,
        detail,
    }
}

/// The variant's provider made as a live run makes it: the credentials row, and the
/// provider when they were found.
async fn connect(root: &Path, harness: &Path, name: &str) -> (Row, Option<Arc<dyn Provider>>) {
    if name == "docker" {
        return match variants::connect_docker(root, harness).await {
            Ok(p) => (
                row(
                    name,
                    "credentials",
                    Status::Ready,
                    "none needed: the local engine".to_owned(),
                ),
                Some(p),
            ),
            Err(e) => (
                row(
                    name,
                    "credentials",
                    Status::Missing,
                    format!("{e}; start a Docker engine or set DOCKER_HOST"),
                ),
                None,
            ),
        };
    }
    if name == "datalayer" {
        return match variants::connect_datalayer_configured(root, harness).await {
            Ok(Some(p)) => (
                row(
                    name,
                    "credentials",
                    Status::Ready,
                    "a push and a read-only pull login, found in the environment".to_owned(),
                ),
                Some(p),
            ),
            Ok(None) => match local_registry::missing_tools() {
                None => (
                    row(
                        name,
                        "credentials",
                        Status::Ready,
                        format!(
                            "no {} set: a run starts its own registry on loopback, with logins of its own",
                            datalayer::REGISTRY_VAR
                        ),
                    ),
                    variants::connect_docker(root, harness).await.ok(),
                ),
                Some(missing) => (
                    row(
                        name,
                        "credentials",
                        Status::Missing,
                        format!(
                            "set {}, {} and {} (and their _PASSWORD; or {}=ecr for the push), or let a run start its own registry: {missing}",
                            datalayer::REGISTRY_VAR,
                            datalayer::PUSH_USER_VAR,
                            datalayer::PULL_USER_VAR,
                            datalayer::PUSH_AUTH_VAR
                        ),
                    ),
                    None,
                ),
            },
            Err(e) => (row(name, "credentials", Status::Missing, e), None),
        };
    }
    let Some(cloud) = variants::cloud(name) else {
        return (
            row(name, "credentials", Status::Missing, "not a variant".into()),
            None,
        );
    };
    match (cloud.connect)(
        Mode::Live,
        Arc::new(Volatiles::default()),
        &sandbox_providers::api::settings::Settings::environment(),
    ) {
        Ok(p) => (
            row(
                name,
                "credentials",
                Status::Ready,
                "found in the environment".to_owned(),
            ),
            Some(p),
        ),
        Err(e) => (
            row(name, "credentials", Status::Missing, e.message.clone()),
            None,
        ),
    }
}

/// The base as a run would resolve it, then asked of its registry by digest.
async fn check_run_base(base_arg: Option<&str>, approved: &Path) -> BaseCheck {
    let base = match RunBase::resolve(base_arg, approved).await {
        Ok(base) => base,
        Err(e) => return BaseCheck::Broken(e),
    };
    let Some(reference) = &base.reference else {
        return BaseCheck::Local;
    };
    if let Some(approved_bases) = &base.approved
        && let Err(e) = approved_bases.check(reference)
    {
        return BaseCheck::Broken(e);
    }
    match check_base(reference, base.credential.as_ref()).await {
        Ok(()) => BaseCheck::Reachable(format!(
            "{reference} answers, with {}",
            base.credential
                .as_ref()
                .map_or("no credential", |c| describe(c.source))
        )),
        Err(e) => BaseCheck::Broken(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Preflight {
        Preflight {
            rows: vec![
                row("docker", "credentials", Status::Ready, "x".into()),
                row(
                    "e2b",
                    "credentials",
                    Status::Missing,
                    "set E2B_API_KEY".into(),
                ),
                row("e2b", "API answers", Status::NotChecked, "y".into()),
            ],
        }
    }

    #[test]
    fn a_variant_is_ready_only_when_every_row_is() {
        let p = sample();
        assert!(p.ready("docker"));
        assert!(!p.ready("e2b"));
        assert_eq!(p.not_ready(), ["e2b"]);
    }

    #[test]
    fn the_table_names_the_fix() {
        let text = sample().render();
        assert!(
            text.contains("| e2b ") && text.contains("set E2B_API_KEY"),
            "{text}"
        );
        assert!(text.contains("not checked"), "{text}");
    }
}
