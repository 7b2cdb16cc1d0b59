//! What cleanup and `sweep` find and delete: runtimes, by their `given_name`.

use super::*;

#[async_trait]
impl Housekeeping for RuntimesProvider {
    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let name = given_name(labels);
        Ok(self
            .listed()
            .await?
            .into_iter()
            .filter(|r| r.given_name.as_deref() == Some(name.as_str()))
            .map(|r| Resource {
                kind: KIND_RUNTIME.into(),
                id: r.pod_name,
            })
            .collect())
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            KIND_RUNTIME if lock(&self.gone)?.contains(&resource.id) => Ok(Deleted::AlreadyGone),
            KIND_RUNTIME => self.delete(&resource.id).await,
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!("the {VARIANT} variant has no resource kind `{other}`"),
            )),
        }
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: KIND_RUNTIME.into(),
            id: sandbox.0.clone(),
        })
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        Ok(self
            .listed()
            .await?
            .into_iter()
            .filter_map(|r| {
                let (run, scenario) = crate::run_of_name(NAME_PREFIX, r.given_name.as_deref()?)?;
                run_id.is_none_or(|want| want == run).then(|| Labelled {
                    run_id: run,
                    scenario: Some(scenario),
                    created: crate::parse_time(r.started_at.as_deref()),
                    resource: Resource {
                        kind: KIND_RUNTIME.into(),
                        id: r.pod_name,
                    },
                })
            })
            .collect())
    }
}
