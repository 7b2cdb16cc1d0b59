//! The control plane, `modal.client.ModalClient`: apps, images, sandboxes, secrets and
//! mounts.

use super::*;
use sandbox_providers::Housekeeping as _;

/// The control plane, naming the router at `router_url`.
pub(super) struct Control {
    pub(super) emulator: Emulator,
    pub(super) router_url: String,
}

/// A stream of one RPC's responses.
pub(super) type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ModalClient for Control {
    async fn app_get_or_create(
        &self,
        request: Request<api::AppGetOrCreateRequest>,
    ) -> Result<Response<api::AppGetOrCreateResponse>, Status> {
        self.emulator.fault("AppGetOrCreate")?;
        let name = request.into_inner().app_name;
        if name.is_empty() {
            return Err(Status::invalid_argument("AppGetOrCreate names no app"));
        }
        let mut world = self.emulator.world();
        let app_id = world
            .apps
            .entry(name)
            .or_insert_with(|| format!("ap-{}", random_id(22)))
            .clone();
        Ok(Response::new(api::AppGetOrCreateResponse { app_id }))
    }

    async fn auth_token_get(
        &self,
        _request: Request<api::AuthTokenGetRequest>,
    ) -> Result<Response<api::AuthTokenGetResponse>, Status> {
        self.emulator.fault("AuthTokenGet")?;
        let token = jwt(&serde_json::json!({
            "sub": self.emulator.inner.token_id,
            "exp": now_secs() as u64 + AUTH_TOKEN_TTL.as_secs(),
        }));
        Ok(Response::new(api::AuthTokenGetResponse { token }))
    }

    async fn client_hello(
        &self,
        _request: Request<()>,
    ) -> Result<Response<api::ClientHelloResponse>, Status> {
        self.emulator.fault("ClientHello")?;
        Ok(Response::new(api::ClientHelloResponse::default()))
    }

    async fn environment_get_or_create(
        &self,
        request: Request<api::EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<api::EnvironmentGetOrCreateResponse>, Status> {
        self.emulator.fault("EnvironmentGetOrCreate")?;
        let name = request.into_inner().deployment_name;
        Ok(Response::new(api::EnvironmentGetOrCreateResponse {
            environment_id: "en-emulator".into(),
            metadata: Some(api::EnvironmentMetadata {
                name: if name.is_empty() { "main".into() } else { name },
                settings: Some(api::EnvironmentSettings {
                    image_builder_version: IMAGE_BUILDER_VERSION.into(),
                    webhook_suffix: String::new(),
                }),
            }),
        }))
    }

    async fn image_delete(
        &self,
        request: Request<api::ImageDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        self.emulator.fault("ImageDelete")?;
        let id = request.into_inner().image_id;
        let build = {
            let mut world = self.emulator.world();
            let build = world
                .images
                .remove(&id)
                .ok_or_else(|| Status::not_found(format!("no image {id}")))?;
            world.by_commands.retain(|_, v| *v != id);
            build
        };
        let outcome = lock(&build.outcome).clone();
        match outcome {
            Some(Ok(artifact)) => {
                let docker = &self.emulator.inner.site.backend();
                let image = docker.artifact_resource(&artifact).ok_or_else(|| {
                    Status::internal("the docker variant names no resource for its image")
                })?;
                docker
                    .delete_resource(&image)
                    .await
                    .map_err(|e| Status::failed_precondition(format!("image {id}: {e}")))?;
            }
            Some(Err(_)) => {}
            None => {
                return Err(Status::failed_precondition(format!(
                    "image {id} is still building"
                )));
            }
        }
        Ok(Response::new(()))
    }

    async fn image_get_or_create(
        &self,
        request: Request<api::ImageGetOrCreateRequest>,
    ) -> Result<Response<api::ImageGetOrCreateResponse>, Status> {
        self.emulator.fault("ImageGetOrCreate")?;
        let request = request.into_inner();
        let image = request
            .image
            .ok_or_else(|| Status::invalid_argument("ImageGetOrCreate has no image"))?;
        from_reference(&image.dockerfile_commands).map_err(Status::invalid_argument)?;
        let mut world = self.emulator.world();
        let inputs = build_inputs(&world, &image)?;
        // An image is reused for the same commands, context and bases, as Modal reuses one.
        let mut key = image.dockerfile_commands.clone();
        key.extend(
            image
                .context_files
                .iter()
                .map(|f| format!("{}:{}", f.filename, mounts::hex_sha256(&f.data))),
        );
        key.extend(inputs.mounted.iter().map(|f| {
            let mode = f.mode.map(|m| format!("{m:o}")).unwrap_or_default();
            format!("mount:{}:{}:{mode}", f.path.display(), f.sha256_hex)
        }));
        key.extend(
            inputs
                .bases
                .iter()
                .map(|(tag, id, _)| format!("base:{tag}={id}")),
        );
        if !request.force_build
            && let Some(id) = world.by_commands.get(&key).cloned()
            && let Some(build) = world.images.get(&id)
            && matches!(*lock(&build.outcome), Some(Ok(_)))
        {
            return Ok(Response::new(api::ImageGetOrCreateResponse {
                image_id: id,
                result: Some(success()),
                metadata: Some(image_metadata()),
            }));
        }
        let id = format!("im-{}", random_id(22));
        let build = Arc::new(Build::default());
        world.images.insert(id.clone(), build.clone());
        world.by_commands.insert(key, id.clone());
        drop(world);
        self.emulator.start_build(id.clone(), image, inputs, build);
        Ok(Response::new(api::ImageGetOrCreateResponse {
            image_id: id,
            result: None,
            metadata: None,
        }))
    }

    type ImageJoinStreamingStream = Streamed<api::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<api::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.emulator.fault("ImageJoinStreaming")?;
        let request = request.into_inner();
        let build = self.emulator.image(&request.image_id)?;
        let next: usize = request.last_entry_id.parse().unwrap_or(0);
        let deadline = Instant::now() + long_poll(request.timeout);
        let stream = futures_util::stream::unfold(Some(next), move |next| {
            let build = build.clone();
            async move {
                let mut next = next?;
                loop {
                    // The outcome first: once set, every log line is in.
                    let outcome = lock(&build.outcome).clone();
                    let lines: Vec<String> = lock(&build.logs).iter().skip(next).cloned().collect();
                    if !lines.is_empty() {
                        next += lines.len();
                        let task_logs = lines
                            .into_iter()
                            .map(|line| api::TaskLogs {
                                data: line + "\n",
                                file_descriptor: api::FileDescriptor::Stdout as i32,
                                timestamp: now_secs(),
                                ..Default::default()
                            })
                            .collect();
                        let response = api::ImageJoinStreamingResponse {
                            task_logs,
                            entry_id: next.to_string(),
                            ..Default::default()
                        };
                        return Some((Ok(response), Some(next)));
                    }
                    if let Some(outcome) = outcome {
                        let result = match outcome {
                            Ok(_) => success(),
                            Err(e) => api::GenericResult {
                                status: GenericStatus::Failure as i32,
                                exception: e,
                                ..Default::default()
                            },
                        };
                        let response = api::ImageJoinStreamingResponse {
                            result: Some(result),
                            entry_id: next.to_string(),
                            eof: true,
                            metadata: Some(image_metadata()),
                            ..Default::default()
                        };
                        return Some((Ok(response), None));
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn mount_batched_check_existence(
        &self,
        request: Request<api::MountBatchedCheckExistenceRequest>,
    ) -> Result<Response<api::MountBatchedCheckExistenceResponse>, Status> {
        self.emulator.fault("MountBatchedCheckExistence")?;
        let request = request.into_inner();
        Ok(Response::new(
            self.emulator.world().mounts.check_existence(&request),
        ))
    }

    async fn mount_get_or_create(
        &self,
        request: Request<api::MountGetOrCreateRequest>,
    ) -> Result<Response<api::MountGetOrCreateResponse>, Status> {
        self.emulator.fault("MountGetOrCreate")?;
        let request = request.into_inner();
        let mut world = self.emulator.world();
        // An anonymous mount is owned by the app it names (api.proto's `app_id`).
        if !world.apps.values().any(|id| *id == request.app_id) {
            return Err(Status::not_found(format!(
                "MountGetOrCreate: no app {}",
                sandbox_providers::quoted(&request.app_id)
            )));
        }
        let id = format!("mo-{}", random_id(22));
        world.mounts.get_or_create(request, id).map(Response::new)
    }

    async fn mount_put_file(
        &self,
        request: Request<api::MountPutFileRequest>,
    ) -> Result<Response<api::MountPutFileResponse>, Status> {
        self.emulator.fault("MountPutFile")?;
        let request = request.into_inner();
        self.emulator
            .world()
            .mounts
            .put_file(request)
            .map(Response::new)
    }

    async fn sandbox_create(
        &self,
        request: Request<api::SandboxCreateRequest>,
    ) -> Result<Response<api::SandboxCreateResponse>, Status> {
        self.emulator.fault("SandboxCreate")?;
        let request = request.into_inner();
        let definition = request
            .definition
            .ok_or_else(|| Status::invalid_argument("SandboxCreate has no definition"))?;
        if !definition.entrypoint_args.is_empty() {
            return Err(Status::invalid_argument(
                "the emulator's sandbox runs the docker variant's main process: entrypoint \
                 arguments are not emulated",
            ));
        }
        let build = self.emulator.image(&definition.image_id)?;
        let artifact = match lock(&build.outcome).clone() {
            Some(Ok(artifact)) => artifact,
            Some(Err(e)) => {
                return Err(Status::failed_precondition(format!(
                    "image {} failed to build: {e}",
                    definition.image_id
                )));
            }
            None => {
                return Err(Status::failed_precondition(format!(
                    "image {} is still building",
                    definition.image_id
                )));
            }
        };
        let tag = |name: &str| {
            request
                .tags
                .iter()
                .find(|t| t.tag_name == name)
                .map(|t| t.tag_value.clone())
        };
        let labels = self.emulator.labels(
            tag("sandbox-matrix.run").as_deref(),
            &tag("sandbox-matrix.scenario").unwrap_or_else(|| "sandbox".into()),
        );
        let region = match definition.scheduler_placement {
            Some(placement) => placement.regions.first().cloned().ok_or_else(|| {
                Status::unimplemented(
                    "definition.scheduler_placement without regions (a zone, lifecycle or \
                         instance types) is not emulated",
                )
            })?,
            None => UNASKED_REGION.to_owned(),
        };
        let id = format!("sb-{}", random_id(22));
        let sandbox = Arc::new(SandboxEntry {
            app_id: request.app_id,
            region,
            image_id: definition.image_id,
            tags: request.tags,
            created_at: now_secs(),
            state: Mutex::default(),
        });
        self.emulator.inner.site.made_under(&labels);
        self.emulator
            .world()
            .sandboxes
            .insert(id.clone(), sandbox.clone());
        self.emulator
            .end_at_timeout(sandbox.clone(), definition.timeout_secs);
        if !self.emulator.inner.no_task {
            self.emulator
                .start_sandbox(id.clone(), sandbox, artifact, labels);
        }
        Ok(Response::new(api::SandboxCreateResponse { sandbox_id: id }))
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.emulator.fault("SandboxGetTaskId")?;
        let request = request.into_inner();
        let sandbox = self.emulator.sandbox(&request.sandbox_id)?;
        let deadline = Instant::now() + request.timeout.map_or(Duration::ZERO, long_poll);
        loop {
            let response = {
                let state = lock(&sandbox.state);
                match (&state.task, &state.result) {
                    (Some((task_id, _)), _) => Some(api::SandboxGetTaskIdResponse {
                        task_id: Some(task_id.clone()),
                        task_result: state.result.clone(),
                    }),
                    (None, Some(result)) => Some(api::SandboxGetTaskIdResponse {
                        task_id: None,
                        task_result: Some(result.clone()),
                    }),
                    (None, None) => None,
                }
            };
            if let Some(response) = response {
                return Ok(Response::new(response));
            }
            if Instant::now() >= deadline {
                return Ok(Response::new(api::SandboxGetTaskIdResponse::default()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn sandbox_list(
        &self,
        request: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.emulator.fault("SandboxList")?;
        let request = request.into_inner();
        let world = self.emulator.world();
        let mut sandboxes: Vec<api::SandboxInfo> = world
            .sandboxes
            .iter()
            .filter(|(_, s)| request.app_id.is_empty() || s.app_id == request.app_id)
            .filter(|(_, s)| request.tags.iter().all(|t| s.tags.contains(t)))
            // A page: those created before the last one the client has (0: the first).
            .filter(|(_, s)| {
                request.before_timestamp <= 0.0 || s.created_at < request.before_timestamp
            })
            .filter_map(|(id, s)| {
                let state = lock(&s.state);
                if state.result.is_some() && !request.include_finished {
                    return None;
                }
                Some(api::SandboxInfo {
                    id: id.clone(),
                    created_at: s.created_at,
                    task_info: Some(api::TaskInfo {
                        id: state
                            .task
                            .as_ref()
                            .map(|(t, _)| t.clone())
                            .unwrap_or_default(),
                        started_at: s.created_at,
                        finished_at: 0.0,
                        result: state.result.clone(),
                    }),
                    app_id: s.app_id.clone(),
                    tags: s.tags.clone(),
                    image_id: s.image_id.clone(),
                })
            })
            .collect();
        sandboxes.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        Ok(Response::new(api::SandboxListResponse { sandboxes }))
    }

    async fn sandbox_terminate(
        &self,
        request: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        self.emulator.fault("SandboxTerminate")?;
        let sandbox = self.emulator.sandbox(&request.into_inner().sandbox_id)?;
        let existing_result = self.emulator.end(&sandbox, terminated()).await?;
        Ok(Response::new(api::SandboxTerminateResponse {
            existing_result,
        }))
    }

    async fn sandbox_wait(
        &self,
        request: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.emulator.fault("SandboxWait")?;
        let request = request.into_inner();
        let sandbox = self.emulator.sandbox(&request.sandbox_id)?;
        let deadline = Instant::now() + long_poll(request.timeout);
        loop {
            if let Some(result) = lock(&sandbox.state).result.clone() {
                return Ok(Response::new(api::SandboxWaitResponse {
                    result: Some(result),
                }));
            }
            if let Some(result) = self.emulator.exited(&sandbox).await {
                let result = self
                    .emulator
                    .end(&sandbox, result.clone())
                    .await?
                    .unwrap_or(result);
                return Ok(Response::new(api::SandboxWaitResponse {
                    result: Some(result),
                }));
            }
            if Instant::now() >= deadline {
                return Ok(Response::new(api::SandboxWaitResponse::default()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn secret_delete(
        &self,
        request: Request<api::SecretDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        self.emulator.fault("SecretDelete")?;
        let id = request.into_inner().secret_id;
        let mut world = self.emulator.world();
        if world.secrets.remove(&id).is_none() {
            return Err(Status::not_found(format!("no secret {id}")));
        }
        world.named_secrets.retain(|_, v| *v != id);
        Ok(Response::new(()))
    }

    async fn secret_get_or_create(
        &self,
        request: Request<api::SecretGetOrCreateRequest>,
    ) -> Result<Response<api::SecretGetOrCreateResponse>, Status> {
        self.emulator.fault("SecretGetOrCreate")?;
        let request = request.into_inner();
        let mut world = self.emulator.world();
        if !request.deployment_name.is_empty()
            && let Some(id) = world.named_secrets.get(&request.deployment_name).cloned()
        {
            return Ok(Response::new(api::SecretGetOrCreateResponse {
                secret_id: id,
            }));
        }
        if request.env_dict.is_empty() {
            return Err(Status::not_found(format!(
                "no secret {} (and no values to create it with)",
                request.deployment_name
            )));
        }
        let id = format!("st-{}", random_id(22));
        world
            .secrets
            .insert(id.clone(), request.env_dict.into_iter().collect());
        if !request.deployment_name.is_empty() {
            world
                .named_secrets
                .insert(request.deployment_name, id.clone());
        }
        Ok(Response::new(api::SecretGetOrCreateResponse {
            secret_id: id,
        }))
    }

    async fn task_get_command_router_access(
        &self,
        request: Request<api::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::TaskGetCommandRouterAccessResponse>, Status> {
        self.emulator.fault("TaskGetCommandRouterAccess")?;
        let task_id = request.into_inner().task_id;
        self.emulator.task(&task_id)?;
        let exp = now_secs() as u64 + self.emulator.inner.router_jwt_ttl.as_secs();
        let token = jwt(&serde_json::json!({
            "task_id": task_id,
            "exp": exp,
            "jti": random_id(16),
        }));
        self.emulator
            .world()
            .jwts
            .insert(token.clone(), (task_id, exp));
        Ok(Response::new(api::TaskGetCommandRouterAccessResponse {
            jwt: token,
            url: self.router_url.clone(),
        }))
    }
}
