//! What a docker run leaves behind: containers, images and BuildKit builds, listed by
//! their labels and removed (an image after its children, a build step after its commit).

use super::*;

impl DockerProvider {
    /// Every container (running or not) and image (intermediate ones too) whose labels
    /// match `filters`.
    async fn labelled(
        &self,
        filters: &HashMap<String, Vec<String>>,
    ) -> Result<(
        Vec<bollard::models::ContainerSummary>,
        Vec<bollard::models::ImageSummary>,
    )> {
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(filters)
                    .build(),
            ))
            .await
            .map_err(|e| engine_error(e).context("listing containers by run label"))?;
        let images = self
            .docker
            .list_images(Some(
                ListImagesOptionsBuilder::default()
                    .all(true)
                    .filters(filters)
                    .build(),
            ))
            .await
            .map_err(|e| engine_error(e).context("listing images by run label"))?;
        Ok((containers, images))
    }
}

#[async_trait]
impl Housekeeping for DockerProvider {
    fn record_creates(&self, log: Arc<dyn CreateLog>) {
        self.creates.set(log);
    }

    async fn list_resources(&self, labels: &RunLabels) -> Result<Vec<Resource>> {
        let filters = HashMap::from([(
            "label".to_owned(),
            labels
                .to_map()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
        )]);
        let (containers, images) = self.labelled(&filters).await?;
        Ok(containers
            .into_iter()
            .filter_map(|c| c.id)
            .map(|id| Resource {
                kind: "container".into(),
                id,
            })
            .chain(children_first(images).into_iter().map(|id| Resource {
                kind: "image".into(),
                id,
            }))
            .collect())
    }

    fn artifact_resource(&self, artifact: &Artifact) -> Option<Resource> {
        Some(Resource {
            kind: "image".into(),
            id: artifact.id.clone(),
        })
    }

    fn sandbox_resource(&self, sandbox: &SandboxId) -> Option<Resource> {
        Some(Resource {
            kind: "container".into(),
            id: sandbox.0.clone(),
        })
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        let filter = match run_id {
            Some(id) => format!("{}={id}", crate::RUN_LABEL),
            None => crate::RUN_LABEL.to_owned(),
        };
        let filters = HashMap::from([("label".to_owned(), vec![filter])]);
        let (containers, images) = self.labelled(&filters).await?;
        let at = |secs: i64| {
            u64::try_from(secs)
                .ok()
                .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s))
        };
        let label = |labels: Option<&HashMap<String, String>>, key: &str| {
            labels.and_then(|l| l.get(key)).cloned()
        };
        let mut found = Vec::new();
        for c in containers {
            let Some(id) = c.id else { continue };
            found.push(Labelled {
                run_id: label(c.labels.as_ref(), crate::RUN_LABEL).unwrap_or_default(),
                scenario: label(c.labels.as_ref(), crate::SCENARIO_LABEL),
                created: c.created.and_then(at),
                resource: Resource {
                    kind: "container".into(),
                    id,
                },
            });
        }
        let by_id: HashMap<String, (HashMap<String, String>, i64)> = images
            .iter()
            .map(|i| (i.id.clone(), (i.labels.clone(), i.created)))
            .collect();
        for id in children_first(images) {
            let (labels, created) = &by_id[&id];
            found.push(Labelled {
                run_id: label(Some(labels), crate::RUN_LABEL).unwrap_or_default(),
                scenario: label(Some(labels), crate::SCENARIO_LABEL),
                created: at(*created),
                resource: Resource {
                    kind: "image".into(),
                    id,
                },
            });
        }
        Ok(found)
    }

    /// A [`BUILD_RESOURCE`] whose holder runs is cancelled, then waited for until its
    /// holder exits: the build has ended, and its image, if it got so far, is committed.
    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        match resource.kind.as_str() {
            BUILD_RESOURCE => BuildRecord::parse(&resource.id)?.settle(&self.docker).await,
            "container" => remove_after_its_commit(&self.docker, &resource.id).await,
            "image" => match self
                .docker
                .remove_image(
                    &resource.id,
                    Some(RemoveImageOptionsBuilder::default().force(true).build()),
                    None,
                )
                .await
            {
                Ok(_) => Ok(Deleted::Removed),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(Deleted::AlreadyGone),
                Err(e) => Err(engine_error(e).context(format!("removing image {}", resource.id))),
            },
            other => Err(ProviderError::new(
                ErrorKind::Unsupported,
                format!("docker has no resource kind {other}"),
            )),
        }
    }
}

/// The ids of `images`, every image before its parent, so that removing them in order
/// never meets an image that still has a child (the intermediate images of a build).
pub(super) fn children_first(images: Vec<bollard::models::ImageSummary>) -> Vec<String> {
    let parents: HashMap<String, String> = images
        .iter()
        .map(|i| (i.id.clone(), i.parent_id.clone()))
        .collect();
    let depth = |id: &str| {
        let mut depth = 0usize;
        let mut at = id;
        while let Some(parent) = parents.get(at) {
            depth += 1;
            if depth > parents.len() {
                break;
            }
            at = parent;
        }
        depth
    };
    let mut ids: Vec<(usize, String)> = images
        .iter()
        .map(|i| (depth(&i.id), i.id.clone()))
        .collect();
    ids.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ids.into_iter().map(|(_, id)| id).collect()
}

pub(super) async fn remove_container(docker: &Docker, id: &str) -> Result<Deleted> {
    match docker
        .remove_container(
            id,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
    {
        Ok(()) => Ok(Deleted::Removed),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(Deleted::AlreadyGone),
        // The engine is removing it already (a cancelled build's step container).
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => Ok(Deleted::AlreadyGone),
        Err(e) => Err(engine_error(e).context(format!("removing container {id}"))),
    }
}
