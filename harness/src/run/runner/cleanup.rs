//! The `cleanup` step: everything the scenario created, deleted, then listed again by the
//! run's labels to prove nothing is left.

use super::*;

impl StepContext {
    /// Records in the ledger that `resource` is gone; a write that fails is a warning.
    pub(super) fn record_gone(&self, resource: &sandbox_providers::Resource) {
        if let Some(ledger) = &self.ledger
            && let Err(e) = ledger.gone(&self.labels, resource)
        {
            self.log.line(&format!("warning: {e}"));
        }
    }

    pub(super) async fn cleanup(&self) -> Result<(), StepEnd> {
        // What the ledger says this scenario created and is not gone, in case a label never
        // landed.
        let mut named = Vec::new();
        let mut errors = Vec::new();
        if let Some(ledger) = &self.ledger {
            match crate::run::ledger::LedgerView::read(ledger.path()) {
                Ok(view) => {
                    named = view.created(&self.labels.variant, Some(&self.labels.scenario));
                }
                // Without it, what a label never reached is not known: the step fails.
                Err(e) => errors.push(format!("the run's ledger, which names what was made: {e}")),
            }
        }
        // A BuildKit build the step left (interrupted) goes on in the engine and commits its
        // image later: it is cancelled and waited for before anything is listed.
        let (builds, named): (Vec<_>, Vec<_>) = named
            .into_iter()
            .partition(|r| r.kind == sandbox_providers::docker::BUILD_RESOURCE);
        for build in &builds {
            match self.provider.delete_resource(build).await {
                Ok(done) => {
                    self.log.line(&format!(
                        "BuildKit build {} left by the build step: {done}",
                        build.id
                    ));
                    self.record_gone(build);
                }
                Err(e) => errors.push(format!("BuildKit build {}: {e}", build.id)),
            }
        }
        let mut found = self.provider.list_resources(&self.labels).await?;
        for resource in named {
            if !found.contains(&resource) {
                found.push(resource);
            }
        }
        let keep = match &self.sharing {
            Some(sharing) => {
                sharing
                    .builds
                    .finish(&self.labels.variant, &sharing.scenario, self.interrupted)
            }
            None => AtCleanup::Nothing,
        };
        // A kept artifact stays with what it is made of (a docker image's parent images
        // carry the same labels): every resource of its kind.
        let mut released = None;
        let kept = match keep {
            AtCleanup::Keep { shared, remaining } => {
                let kind = shared.resource.kind;
                found.retain(|r| r.kind != kind);
                self.log.line(&format!(
                    "kept {} {}: {remaining} more scenario(s) of this run use it",
                    kind,
                    short(&shared.resource.id)
                ));
                Some(kind)
            }
            AtCleanup::Release(shared) => {
                if !found.contains(&shared.resource) {
                    found.push(shared.resource.clone());
                }
                // A rebuild of it carries the same labels; what it made (a pushed
                // artifact's local image too) is under them, of whatever kind.
                if shared.built_in != self.labels.scenario {
                    let builder = RunLabels {
                        scenario: shared.built_in.clone(),
                        ..self.labels.clone()
                    };
                    for resource in self.provider.list_resources(&builder).await? {
                        if !found.contains(&resource) {
                            found.push(resource);
                        }
                    }
                }
                released = Some(shared);
                None
            }
            AtCleanup::Nothing => None,
        };
        // Containers before the images they run.
        found.sort_by_key(|r| r.kind != "container");
        let mut failed = Vec::new();
        for resource in &found {
            let what = format!("{} {}", resource.kind, short(&resource.id));
            match self.provider.delete_resource(resource).await {
                Ok(Deleted::Removed) => {
                    self.log.line(&format!("removed {what}"));
                    self.record_gone(resource);
                }
                Ok(done) => {
                    self.log.line(&format!("{what}: {done}"));
                    self.record_gone(resource);
                }
                Err(e) => {
                    errors.push(format!("{what}: {e}"));
                    failed.push(resource.clone());
                }
            }
        }
        let mut left = self.provider.list_resources(&self.labels).await?;
        left.retain(|r| Some(&r.kind) != kept.as_ref());
        // A released artifact carries the labels of the scenario that built it: what is
        // left under those labels, or failed to go, is a leak of this scenario's.
        if let Some(shared) = released {
            let builder = RunLabels {
                scenario: shared.built_in.clone(),
                ..self.labels.clone()
            };
            if shared.built_in != self.labels.scenario {
                for resource in self.provider.list_resources(&builder).await? {
                    if !left.contains(&resource) {
                        left.push(resource);
                    }
                }
            }
            if failed.contains(&shared.resource) && !left.contains(&shared.resource) {
                left.push(shared.resource);
            }
        }
        // Where the provider's API lists no artifact (Capabilities::artifacts_listed), what
        // is not a sandbox is known only from this client's memory: a leak is counted from
        // the provider's own listing, so those are not counted (a delete of one that failed
        // has failed this step above, named).
        if !self.provider.capabilities().artifacts_listed {
            let sandbox_kind = self
                .provider
                .sandbox_resource(&SandboxId(String::new()))
                .map(|r| r.kind);
            left.retain(|r| Some(&r.kind) == sandbox_kind.as_ref());
        }
        self.log.line(&format!(
            "{} resources listed under the run label after cleanup",
            left.len()
        ));
        let leaked: Vec<String> = left
            .iter()
            .map(|r| format!("{} {}", r.kind, short(&r.id)))
            .collect();
        self.state().leaked = left;
        let mut failures = Vec::new();
        if !errors.is_empty() {
            failures.push(format!("could not remove {}", errors.join("; ")));
        }
        if !leaked.is_empty() {
            failures.push(format!(
                "still listed under the run label: {}{}",
                leaked.join(", "),
                if errors.is_empty() {
                    " (every delete answered; it was made again, or came after the listing)"
                } else {
                    ""
                }
            ));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; ").into())
        }
    }
}
