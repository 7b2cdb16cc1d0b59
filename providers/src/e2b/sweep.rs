//! What an E2B run leaves behind: templates and sandboxes, listed by their labels and
//! deleted.

use super::*;

#[async_trait]
impl Housekeeping for E2bProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        // Sandboxes first: E2B refuses to delete a template a sandbox still runs from.
        let sandboxes = self.list_sandboxes(labels).await?;
        let templates = self.list_templates(labels).await?;
        Ok(sandboxes
            .into_iter()
            .map(|id| Resource {
                kind: KIND_SANDBOX.into(),
                id,
            })
            .chain(templates.into_iter().map(|id| Resource {
                kind: KIND_TEMPLATE.into(),
                id,
            }))
            .collect())
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        let (template, _build) = artifact.id.split_once(':')?;
        Some(Resource {
            kind: KIND_TEMPLATE.into(),
            id: template.to_owned(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: KIND_SANDBOX.into(),
            id: sandbox.0.clone(),
        })
    }

    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.creates.set(log);
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        // Sandboxes carry the run label in their metadata; E2B filters by key and value, so
        // a listing of every run's is filtered here.
        let path = match run_id {
            Some(id) => {
                let query = format!("{}={}", encode(crate::RUN_LABEL), encode(id));
                format!("/v2/sandboxes?metadata={}", encode(&query))
            }
            None => "/v2/sandboxes".to_owned(),
        };
        let sandboxes: Vec<ListedSandbox> =
            self.list_all(&path, "list sandboxes by run label").await?;
        let mut found: Vec<Labelled> = sandboxes
            .into_iter()
            .filter_map(|s| {
                let run = s.metadata.get(crate::RUN_LABEL)?.clone();
                run_id.is_none_or(|want| want == run).then(|| Labelled {
                    run_id: run,
                    scenario: s.metadata.get(crate::SCENARIO_LABEL).cloned(),
                    created: crate::parse_time(s.started_at.as_deref()),
                    resource: Resource {
                        kind: KIND_SANDBOX.into(),
                        id: s.sandbox_id,
                    },
                })
            })
            .collect();
        // Templates carry no metadata: their name holds the run id (`sm-<run>-<scenario>`).
        let templates: Vec<TemplateListed> =
            self.list_all("/v2/templates", "list templates").await?;
        for t in templates {
            let run = t
                .names
                .iter()
                .chain(&t.aliases)
                .filter_map(|n| crate::run_of_name("sm-", n.rsplit('/').next()?))
                .find(|(run, _)| run_id.is_none_or(|want| want.eq_ignore_ascii_case(run)));
            if let Some((run, scenario)) = run {
                found.push(Labelled {
                    run_id: run_id.map_or(run, str::to_owned),
                    scenario: Some(scenario),
                    created: crate::parse_time(t.created_at.as_deref()),
                    resource: Resource {
                        kind: KIND_TEMPLATE.into(),
                        id: t.template_id,
                    },
                });
            }
        }
        Ok(found)
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            KIND_SANDBOX => {
                if self
                    .gone
                    .lock()
                    .map_err(|_| poisoned())?
                    .contains(&resource.id)
                {
                    return Ok(Deleted::AlreadyGone);
                }
                self.kill(&resource.id).await
            }
            KIND_TEMPLATE => gone_is_fine(
                self.client
                    .call(
                        self.api(Method::DELETE, format!("/templates/{}", resource.id))
                            .what("delete template"),
                    )
                    .await,
            ),
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the e2b variant has no resource kind `{other}`"),
            )),
        }
    }
}
