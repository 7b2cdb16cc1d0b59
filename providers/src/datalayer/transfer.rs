//! What goes to the registry and back: the base's digest, the push by digest (the image's
//! layers, its index and attestations), the read-only pull, and the engine's copy of both.

use super::*;

impl DatalayerProvider {
    /// The base's digest: from its reference in a registry, else the local image's id.
    pub(super) async fn base_digest(&self, base: &BaseImage) -> Result<String> {
        if base.registry.is_some() {
            return Ok(DigestReference::parse(&base.reference)?.digest);
        }
        let inspect = self
            .docker
            .engine()
            .inspect_image(&base.reference)
            .await
            .map_err(|e| {
                crate::docker::engine_error(e)
                    .context(format!("inspecting the base {}", base.reference))
            })?;
        inspect.id.ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("the engine gave the base {} no id", base.reference),
            )
        })
    }

    /// Exports image `image_id`, makes its attestations and pushes it all by digest.
    pub(super) async fn push(
        &self,
        request: &BuildRequest,
        image_id: &str,
        started: &str,
        log: &LogFn,
    ) -> Result<(DigestReference, Pushed)> {
        let began = Instant::now();
        let dockerfile = crate::read_dockerfile(&request.environment_dir)?;
        let base_digest = self.base_digest(&request.base).await?;
        let exported = oci::export(self.docker.engine(), image_id).await?;
        if oci::sha256(&exported.config) != image_id {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!("the engine exported a config that is not image {image_id}"),
            ));
        }
        let platform = oci::platform(&exported.config)?;
        // Only a saving: a registry that will not say what it holds gets every layer.
        let in_registry = match self.layers_held(&exported.diff_ids()?).await {
            Ok(held) => held,
            Err(e) => {
                log(&format!("{e}; gzipping every layer"));
                HashMap::new()
            }
        };
        let (image, installed) = tokio::task::spawn_blocking(move || {
            let installed = attest::installed(&exported.layers)?;
            let image = oci::image_manifest(&exported, &in_registry)?;
            Ok::<_, ProviderError>((image, installed))
        })
        .await
        .map_err(|e| ProviderError::new(ErrorKind::Protocol, format!("packing layers: {e}")))??;
        log(&format!(
            "SBOM: {} Debian packages and {} Python distributions read from the image",
            installed.debian.len(),
            installed.python.len()
        ));
        let repository = &self.settings.repository;
        let subject = attest::Subject {
            name: format!(
                "pkg:docker/{repository}@{}?platform={}%2F{}",
                image.manifest.digest,
                platform["os"].as_str().unwrap_or_default(),
                platform["architecture"].as_str().unwrap_or_default()
            ),
            digest: image.manifest.digest.clone(),
        };
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let mut build_arg_names: Vec<String> = request
            .build_secrets
            .iter()
            .map(|s| s.name().to_owned())
            .chain(std::iter::once(BASE_ARG.to_owned()))
            .collect();
        build_arg_names.sort();
        let provenance = attest::Provenance {
            dockerfile_digest: oci::sha256(dockerfile.as_bytes()),
            base_reference: request.base.reference.clone(),
            base_digest,
            base_local: request.base.registry.is_none(),
            build_arg_names,
            invocation_id: request.labels.run_id.clone(),
            builder: format!(
                "{}, {}",
                self.docker.provider_version().unwrap_or_default(),
                self.builder().await?.describe()
            ),
            started: started.to_owned(),
            finished: now.clone(),
        };
        let tool = format!("sandbox-matrix-{}", env!("CARGO_PKG_VERSION"));
        let statements = [
            (
                attest::SPDX_PREDICATE,
                attest::sbom(&subject, &installed, &now, &tool),
            ),
            (
                attest::SLSA_PREDICATE,
                attest::provenance(&subject, &provenance),
            ),
        ];
        let image_manifest = image.manifest.digest.clone();
        let (layers, reused) = (image.layers.clone(), image.reused);
        let artifact = oci::assemble(image, platform, &statements);
        let reference = oci::push(repository, &self.settings.push, &artifact).await?;
        let count = layers.len();
        self.layers
            .lock()
            .expect("pushed layers lock")
            .extend(layers);
        let pushed = Pushed {
            image_id: image_id.to_owned(),
            image_manifest,
            push: began.elapsed(),
            size: artifact.size(),
            pulled: false,
        };
        log(&format!(
            "pushed {reference} as {} ({} bytes in all) in {:.1} s{}",
            self.settings.push.username,
            pushed.size,
            pushed.push.as_secs_f64(),
            if reused > 0 {
                format!(
                    "; {reused} of {count} layers already in the registry, named and not gzipped again"
                )
            } else {
                String::new()
            }
        ));
        Ok((reference, pushed))
    }

    /// The layers among `diff_ids` that this provider pushed before and the repository
    /// still holds, as a registry client remembers its layers' digests so that a push
    /// compresses and uploads only what is new.
    pub(super) async fn layers_held(
        &self,
        diff_ids: &[String],
    ) -> Result<HashMap<String, oci::PushedLayer>> {
        let known: HashMap<String, oci::PushedLayer> = {
            let layers = self.layers.lock().expect("pushed layers lock");
            diff_ids
                .iter()
                .filter_map(|id| Some((id.clone(), layers.get(id)?.clone())))
                .collect()
        };
        let digests: Vec<String> = known.values().map(|l| l.digest.clone()).collect();
        let held =
            oci::blobs_held(&self.settings.repository, &self.settings.push, &digests).await?;
        Ok(known
            .into_iter()
            .filter(|(_, layer)| held.contains(&layer.digest))
            .collect())
    }

    /// Removes the local copy of `pushed`'s image, pulls `reference` by digest as the
    /// read-only user and checks the engine now holds the very image that was pushed.
    pub(super) async fn pull(&self, reference: &str, pushed: &Pushed) -> Result<()> {
        let engine = self.docker.engine();
        match engine
            .remove_image(
                &pushed.image_id,
                Some(RemoveImageOptionsBuilder::default().force(true).build()),
                None,
            )
            .await
        {
            Ok(_)
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => {
                return Err(crate::docker::engine_error(e)
                    .context("removing the local copy before the pull"));
            }
        }
        crate::docker::pull::pull_as(
            engine,
            reference,
            Some(crate::docker::docker_credentials(&self.settings.pull)),
            &|line| tracing::debug!("{line}"),
        )
        .await?;
        let pulled = engine
            .inspect_image(reference)
            .await
            .map_err(|e| crate::docker::engine_error(e).context(format!("inspecting {reference}")))?
            .id
            .unwrap_or_default();
        if pulled != pushed.image_id {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{reference} pulled as image {pulled}, but the image pushed was {}",
                    pushed.image_id
                ),
            ));
        }
        Ok(())
    }

    /// Whether the engine holds the image `reference` names.
    pub(super) async fn holds(&self, reference: &str) -> Result<bool> {
        match self.docker.engine().inspect_image(reference).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => {
                Err(crate::docker::engine_error(e).context(format!("inspecting {reference}")))
            }
        }
    }

    /// The local image of `artifact`, by the engine's id.
    pub(super) fn local(&self, artifact: &Artifact) -> Result<Artifact> {
        let pushed = self.pushed(artifact).ok_or_else(|| {
            ProviderError::new(
                ErrorKind::NotFound,
                format!("{} was not pushed by this run", artifact.id),
            )
        })?;
        Ok(Artifact {
            id: pushed.image_id,
            kind: "image-id".into(),
        })
    }
}
