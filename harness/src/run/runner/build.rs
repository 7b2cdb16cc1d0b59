//! The `build` and `rebuild` steps: the environment built (or taken from an earlier
//! scenario that built it), its artifact handed to the steps after.

use super::*;

impl StepContext {
    pub(super) async fn build(&self) -> Result<(), StepEnd> {
        if let Some(sharing) = &self.sharing
            && let Some(shared) = sharing.builds.take(&self.labels.variant, &sharing.scenario)
        {
            let reason = format!(
                "reused {} {} (built in {})",
                shared.artifact.kind, shared.artifact.id, shared.built_in
            );
            self.log.line(&reason);
            let mut state = self.state();
            state.base_credential = shared.credential_use;
            state.reused = Some(ReusedArtifact {
                artifact: shared.artifact.id.clone(),
                built_in: shared.built_in.clone(),
            });
            state.built_in = Some(shared.built_in);
            state.artifact = Some(shared.artifact);
            return Err(StepEnd::Skipped(reason));
        }
        let dockerfile = self.environment.join("Dockerfile");
        let findings = crate::checks::lint::lint_file(&dockerfile).map_err(|e| e.to_string())?;
        if !findings.is_empty() {
            for finding in &findings {
                self.log.line(&finding.to_string());
            }
            let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
            return Err(StepEnd::Failed(format!(
                "the Dockerfile is refused before building: {}",
                lines.join("; ")
            )));
        }
        if let (Some(reference), Some(approved)) = (&self.base.reference, &self.base.approved) {
            approved.check(reference).map_err(StepEnd::Failed)?;
            self.log.line(&format!(
                "base {reference} is approved in {}",
                approved.path.display()
            ));
        }
        let request = self.build_request(self.labels.clone());
        let log = self.log.clone();
        let sink = move |line: &str| log.line(line);
        let seq = self.intend("artifact")?;
        if let Some(ledger) = &self.ledger {
            self.provider.record_creates(ledger.clone());
        }
        let built = self.provider.build(&request, &sink).await;
        let credential_use = self.provider.credential_use(&request);
        self.state().base_credential = Some(credential_use.clone());
        let artifact = built?;
        let facts = self.provider.artifact_facts(&artifact);
        self.log.timings(facts.timings);
        if let Some(bytes) = facts.compressed_bytes {
            self.log
                .data(serde_json::json!({ COMPRESSED_BYTES: bytes }));
        }
        let resource = self.provider.artifact_resource(&artifact);
        self.record_created(seq, resource.clone(), &artifact.kind, &artifact.id);
        if let (Some(sharing), Some(resource)) = (&self.sharing, resource) {
            sharing.builds.offer(
                &self.labels.variant,
                &sharing.scenario,
                SharedArtifact {
                    artifact: artifact.clone(),
                    resource,
                    built_in: self.labels.scenario.clone(),
                    credential_use: Some(credential_use),
                },
            );
        }
        self.log
            .line(&format!("artifact: {} {}", artifact.kind, artifact.id));
        let mut state = self.state();
        state.artifact = Some(artifact);
        state.built_in = Some(self.labels.scenario.clone());
        Ok(())
    }

    /// What a build of this scenario's environment is given, its artifact labelled `labels`.
    pub(super) fn build_request(&self, labels: RunLabels) -> BuildRequest {
        BuildRequest {
            environment_dir: self.environment.clone(),
            base: self.base.base.clone(),
            registry_credential: self.base.credential.clone(),
            build_secrets: vec![self.canary.clone()],
            labels,
        }
    }

    /// Builds the environment again with the inputs of the build that made the artifact
    /// (its labels too: they are part of the docker variant's Dockerfile), so the
    /// provider's cache can serve it, and says whether the same artifact came back.
    pub(super) async fn rebuild(&self) -> Result<(), StepEnd> {
        let first = self.artifact().map_err(|_| {
            StepEnd::Failed("`rebuild` needs the artifact of a `build` step before it".to_owned())
        })?;
        let built_in = self.state().built_in.clone();
        let labels = RunLabels {
            scenario: built_in.unwrap_or_else(|| self.labels.scenario.clone()),
            ..self.labels.clone()
        };
        let request = self.build_request(labels);
        let log = self.log.clone();
        let sink = move |line: &str| log.line(line);
        let seq = self.intend("artifact")?;
        let again = self.provider.build(&request, &sink).await?;
        self.record_created(
            seq,
            self.provider.artifact_resource(&again),
            &again.kind,
            &again.id,
        );
        self.log.line(&if again == first {
            format!("rebuilt the same artifact: {} {}", again.kind, again.id)
        } else {
            format!(
                "rebuilt a new artifact: {} {} (the build made {})",
                again.kind, again.id, first.id
            )
        });
        Ok(())
    }
}
