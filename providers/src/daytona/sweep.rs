//! What a Daytona run leaves behind: sandboxes, snapshots and registry entries, listed by
//! their labels or names and deleted.

use super::*;

impl DaytonaProvider {
    /// Lists the run's sandboxes by labels, following the cursor.
    async fn list_sandboxes(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        Ok(self
            .sandboxes_labelled(&labels.to_map())
            .await?
            .into_iter()
            .map(|s| Resource {
                kind: KIND_SANDBOX.into(),
                id: s.id,
            })
            .collect())
    }
    /// Every live sandbox carrying all of `labels`, following the cursor.
    async fn sandboxes_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxRecord>> {
        let selector = serde_json::to_string(labels).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("cannot encode the labels: {e}"),
            )
        })?;
        let mut found = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = vec![("labels", selector.as_str())];
            if let Some(c) = &cursor {
                params.push(("cursor", c.as_str()));
            }
            let page: SandboxPage = self
                .call(
                    ApiRequest::get(Target::Api, with_query("/sandbox", &params))
                        .what("list sandboxes"),
                )
                .await?
                .json()?;
            found.extend(
                page.items
                    .into_iter()
                    .filter(|s| !matches!(s.state.as_deref(), Some("destroyed" | "destroying"))),
            );
            match page.next_cursor {
                Some(next) if !next.is_empty() && cursor.as_deref() != Some(next.as_str()) => {
                    cursor = Some(next);
                }
                _ => return Ok(found),
            }
        }
    }
    /// Lists the run's snapshots by name (snapshots carry no labels).
    async fn list_snapshots(&self, name: &str) -> Result<Vec<Resource>> {
        Ok(self
            .snapshots_named(name)
            .await?
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| Resource {
                kind: KIND_SNAPSHOT.into(),
                id: s.id,
            })
            .collect())
    }
    /// The snapshots Daytona lists for the name filter `name` (a prefix), but those being
    /// removed, following the pages.
    async fn snapshots_named(&self, name: &str) -> Result<Vec<SnapshotRecord>> {
        let mut found = Vec::new();
        let mut page = 1u32;
        loop {
            let number = page.to_string();
            let answer: SnapshotPage = self
                .call(
                    ApiRequest::get(
                        Target::Api,
                        with_query("/snapshots", &[("name", name), ("page", &number)]),
                    )
                    .what("list snapshots"),
                )
                .await?
                .json()?;
            found.extend(answer.items.into_iter().filter(|s| s.state != "removing"));
            if answer.page >= answer.total_pages || page >= 100 {
                return Ok(found);
            }
            page += 1;
        }
    }
    /// Lists the run's docker-registry entries by name.
    async fn list_registries(&self, name: &str) -> Result<Vec<Resource>> {
        Ok(self
            .registries()
            .await?
            .into_iter()
            .filter(|r| r.name == name)
            .map(|r| Resource {
                kind: KIND_REGISTRY.into(),
                id: r.id,
            })
            .collect())
    }
    /// Every docker-registry entry of the organization.
    async fn registries(&self) -> Result<Vec<RegistryRecord>> {
        self.call(
            ApiRequest::get(Target::Api, "/docker-registry").what("list docker-registry entries"),
        )
        .await?
        .json()
    }
}

#[async_trait]
impl Housekeeping for DaytonaProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let name = resource_name(labels);
        let mut found = self.list_sandboxes(labels).await?;
        found.extend(self.list_snapshots(&name).await?);
        found.extend(self.list_registries(&name).await?);
        Ok(found)
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        Some(Resource {
            kind: KIND_SNAPSHOT.into(),
            id: artifact.id.clone(),
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
        // Sandboxes carry the run label; Daytona filters by key and value, so a listing of
        // every run's is filtered here.
        let filter: BTreeMap<String, String> = run_id
            .map(|id| (crate::RUN_LABEL.to_owned(), id.to_owned()))
            .into_iter()
            .collect();
        let mut found: Vec<Labelled> = self
            .sandboxes_labelled(&filter)
            .await?
            .into_iter()
            .filter_map(|s| {
                let run = s.labels.get(crate::RUN_LABEL)?.clone();
                run_id.is_none_or(|want| want == run).then(|| Labelled {
                    run_id: run,
                    scenario: s.labels.get(crate::SCENARIO_LABEL).cloned(),
                    created: crate::parse_time(s.created_at.as_deref()),
                    resource: Resource {
                        kind: KIND_SANDBOX.into(),
                        id: s.id,
                    },
                })
            })
            .collect();
        // Snapshots and registry entries carry no labels: their name holds the run id
        // (`sandbox-matrix-<run>-<scenario>`).
        let prefix = match run_id {
            Some(id) => format!("{RESOURCE_PREFIX}{id}-"),
            None => RESOURCE_PREFIX.to_owned(),
        };
        let named = |name: &str| {
            crate::run_of_name(RESOURCE_PREFIX, name)
                .filter(|(run, _)| run_id.is_none_or(|want| want == run))
        };
        let labelled =
            |kind: &str, id: String, (run, scenario), created: Option<String>| Labelled {
                run_id: run,
                scenario: Some(scenario),
                created: crate::parse_time(created.as_deref()),
                resource: Resource {
                    kind: kind.into(),
                    id,
                },
            };
        for s in self.snapshots_named(&prefix).await? {
            if let Some(run) = named(&s.name) {
                found.push(labelled(KIND_SNAPSHOT, s.id, run, s.created_at));
            }
        }
        for r in self.registries().await? {
            if let Some(run) = named(&r.name) {
                found.push(labelled(KIND_REGISTRY, r.id, run, r.created_at));
            }
        }
        Ok(found)
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        let id = &resource.id;
        match resource.kind.as_str() {
            KIND_SANDBOX => {
                self.delete(format!("/sandbox/{id}"), "delete sandbox")
                    .await
            }
            KIND_SNAPSHOT => {
                self.delete(format!("/snapshots/{id}"), "delete snapshot")
                    .await
            }
            KIND_REGISTRY if lock(&self.deleted).contains(id) => Ok(Deleted::AlreadyGone),
            KIND_REGISTRY => {
                self.delete(
                    format!("/docker-registry/{id}"),
                    "delete docker-registry entry",
                )
                .await
            }
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the daytona variant has no resource kind `{other}` (resource {id})"),
            )),
        }
    }
}
