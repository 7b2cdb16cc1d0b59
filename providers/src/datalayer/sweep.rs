//! What cleanup and `sweep` find and delete: the engine's builds and containers, as the
//! docker variant's, and the index pushed to the registry with the manifests it lists.

use super::*;

#[async_trait]
impl Housekeeping for DatalayerProvider {
    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.docker.record_creates(log);
    }

    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        self.docker.list_resources(labels).await
    }

    /// A `manifest` (an index pushed by digest, with the manifests it lists) is deleted
    /// from the registry with the push credential, then from the engine its pulled copy
    /// and the image built for it, where the engine still holds them (a rebuild's image is
    /// pushed but never launched, so no pull removed it); anything else is the engine's.
    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        if resource.kind == MANIFEST_RESOURCE {
            let reference = DigestReference::parse(&resource.id)?;
            let deleted = oci::delete(&reference, &self.settings.push).await?;
            let built = self
                .pushed
                .lock()
                .expect("pushed table lock")
                .get(&resource.id)
                .map(|p| p.image_id.clone());
            // The engine's image delete: forced, and done where the image is gone already.
            for id in std::iter::once(resource.id.clone()).chain(built) {
                self.docker
                    .delete_resource(&Resource {
                        kind: "image".into(),
                        id,
                    })
                    .await?;
            }
            return Ok(deleted);
        }
        self.docker.delete_resource(resource).await
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        (artifact.kind == ARTIFACT_KIND).then(|| Resource {
            kind: MANIFEST_RESOURCE.into(),
            id: artifact.id.clone(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        self.docker.sandbox_resource(sandbox)
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        self.docker.list_labelled(run_id).await
    }
}
