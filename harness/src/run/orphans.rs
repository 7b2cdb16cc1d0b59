//! The orphan audit of a variant's part of a live run: the provider's own inventory, listed
//! by the run's labels for every scenario the variant runs, before its first repetition
//! and again after its last repetition's cleanup. What is still listed then is an orphan
//! (a create the run lost track of, or a sandbox that appeared after its create failed or
//! timed out); the audit deletes each and counts them against the creates the ledger
//! recorded, failed ones included.

use std::path::Path;
use std::time::Duration;

use sandbox_providers::{Deleted, Provider, Resource, RunLabels};

use crate::model::results::OrphanAudit;
use crate::run::ledger::{LedgerView, Record};

/// The kind of create an orphan rate counts: sandboxes.
pub const SANDBOX_KIND: &str = "sandbox";

/// The longest one listing of the inventory may take: a service that does not answer
/// leaves the variant without an audit rather than holding the run.
pub const LIST_BUDGET: Duration = Duration::from_secs(15);

/// Every resource `provider` lists under the run's labels for each of `scenarios`, within
/// [`LIST_BUDGET`]; an error names the scenario whose listing failed, or the budget.
pub async fn inventory(
    provider: &dyn Provider,
    run_id: &str,
    variant: &str,
    scenarios: &[String],
) -> Result<Vec<Resource>, String> {
    let listing = async {
        let mut found = Vec::new();
        for scenario in scenarios {
            let labels = RunLabels {
                run_id: run_id.to_owned(),
                variant: variant.to_owned(),
                scenario: scenario.clone(),
            };
            let listed = provider.list_resources(&labels).await.map_err(|e| {
                format!("listing {variant}'s resources of {scenario} for the orphan audit: {e}")
            })?;
            for resource in listed {
                if !found.contains(&resource) {
                    found.push(resource);
                }
            }
        }
        Ok(found)
    };
    tokio::time::timeout(LIST_BUDGET, listing)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{variant}'s inventory did not answer within {} s for the orphan audit",
                LIST_BUDGET.as_secs()
            ))
        })
}

/// The sandbox creates the ledger at `ledger` records for `variant`: every intent, whether
/// its create then returned, failed or timed out.
pub fn creates(ledger: &Path, variant: &str) -> Result<u64, String> {
    let view = LedgerView::read(ledger)?;
    Ok(view
        .records
        .iter()
        .filter(|record| {
            matches!(record, Record::Intent { variant: v, kind, .. }
                if v == variant && kind == SANDBOX_KIND)
        })
        .count() as u64)
}

/// Lists the inventory after the last repetition, deletes what is still there and returns
/// the audit, `before` being what the first listing found. `log` receives a line per orphan.
pub async fn audit(
    provider: &dyn Provider,
    run_id: &str,
    variant: &str,
    scenarios: &[String],
    creates: u64,
    before: Vec<Resource>,
    log: &dyn Fn(&str),
) -> Result<OrphanAudit, String> {
    let after = inventory(provider, run_id, variant, scenarios).await?;
    let mut swept = 0;
    for orphan in &after {
        match provider.delete_resource(orphan).await {
            Ok(Deleted::Removed) => {
                swept += 1;
                log(&format!("orphan {} {}: deleted", orphan.kind, orphan.id));
            }
            Ok(Deleted::AlreadyGone) => log(&format!(
                "orphan {} {}: gone before the sweep",
                orphan.kind, orphan.id
            )),
            Ok(Deleted::Settled(how)) => {
                swept += 1;
                log(&format!("orphan {} {}: {how}", orphan.kind, orphan.id));
            }
            Err(e) => log(&format!(
                "orphan {} {}: not deleted: {e}",
                orphan.kind, orphan.id
            )),
        }
    }
    let named = |resources: &[Resource]| {
        resources
            .iter()
            .map(|r| format!("{} {}", r.kind, r.id))
            .collect()
    };
    Ok(OrphanAudit {
        variant: variant.to_owned(),
        creates,
        before: named(&before),
        orphans: named(&after),
        swept,
    })
}
