//! What the emulator does on the docker engine: builds images, starts and ends
//! sandboxes, runs and kills execs.

use super::*;
use sandbox_providers::Housekeeping as _;

impl Emulator {
    /// Builds `commands` as image `id`: a Dockerfile of them, on the local base, a base
    /// image of `inputs`, or the one its `FROM` names by digest, pulled with the registry
    /// Secret's credential.
    pub(super) fn start_build(
        &self,
        id: String,
        image: api::Image,
        inputs: Inputs,
        build: Arc<Build>,
    ) {
        let emulator = self.clone();
        tokio::spawn(async move {
            let dir =
                std::env::temp_dir().join(format!("sm-modal-emulator-{}-{id}", std::process::id()));
            let result = emulator.build(&dir, &image, &inputs, &build).await;
            let _ = std::fs::remove_dir_all(&dir);
            *lock(&build.outcome) = Some(result);
        });
    }

    pub(super) async fn build(
        &self,
        dir: &std::path::Path,
        image: &api::Image,
        inputs: &Inputs,
        build: &Arc<Build>,
    ) -> Result<Artifact, String> {
        let mut commands = image.dockerfile_commands.clone();
        for (docker_tag, image_id, artifact) in &inputs.bases {
            // The engine knows the emulator's build of a base image by its id alone: a
            // local tag names it where the Dockerfile names the base's `docker_tag`.
            let options = bollard::query_parameters::TagImageOptionsBuilder::default()
                .repo(mounts::BASE_REPOSITORY)
                .tag(image_id)
                .build();
            self.inner
                .engine
                .tag_image(&artifact.id, Some(options))
                .await
                .map_err(|e| format!("cannot tag base image {image_id} ({}): {e}", artifact.id))?;
            let local = format!("{}:{image_id}", mounts::BASE_REPOSITORY);
            commands = mounts::from_base(&commands, docker_tag, &local);
        }
        let reference = from_reference(&commands)?;
        let secret_id = image
            .image_registry_config
            .as_ref()
            .map(|r| r.secret_id.clone())
            .unwrap_or_default();
        // The build's Secrets reach the builder as build arguments, as a registry token would.
        let mut build_secrets = Vec::new();
        for id in &image.secret_ids {
            let env = self
                .world()
                .secrets
                .get(id)
                .cloned()
                .ok_or_else(|| format!("the image's Secret {id} does not exist"))?;
            let mut env: Vec<(String, String)> = env.into_iter().collect();
            env.sort();
            build_secrets.extend(env.into_iter().map(|(k, v)| Secret::new(k, v)));
        }
        let (base, registry_credential) = if secret_id.is_empty() {
            (BaseImage::local(reference), None)
        } else {
            let env = self
                .world()
                .secrets
                .get(&secret_id)
                .cloned()
                .ok_or_else(|| format!("the image's registry Secret {secret_id} does not exist"))?;
            let host = reference.split('/').next().unwrap_or_default().to_owned();
            let credential = match (env.get("REGISTRY_USERNAME"), env.get("REGISTRY_PASSWORD")) {
                (Some(user), Some(password)) => RegistryCredential {
                    registry: host.clone(),
                    username: user.clone(),
                    password: Secret::new("REGISTRY_PASSWORD", password),
                    source: CredentialSource::Static,
                },
                _ => {
                    return Err(format!(
                        "the registry Secret {secret_id} holds no REGISTRY_USERNAME and \
                         REGISTRY_PASSWORD (the emulator pulls with static credentials only)"
                    ));
                }
            };
            (
                BaseImage {
                    reference,
                    registry: Some(host),
                },
                Some(credential),
            )
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        mounts::write_context(dir, &inputs.mounted)?;
        for file in &image.context_files {
            let relative = std::path::Path::new(&file.filename);
            if file.filename.is_empty()
                || relative
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!(
                    "context file {} is not a path inside the build context",
                    sandbox_providers::quoted(&file.filename)
                ));
            }
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            std::fs::write(&path, &file.data).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if dir.join("Dockerfile").exists() {
            return Err(
                "the build context holds a file named Dockerfile, which the emulator's docker \
                 build would take for the image's commands: not emulated"
                    .into(),
            );
        }
        std::fs::write(dir.join("Dockerfile"), commands.join("\n") + "\n").map_err(|e| {
            format!(
                "cannot write the build's Dockerfile in {}: {e}",
                dir.display()
            )
        })?;
        let request = BuildRequest {
            environment_dir: dir.to_owned(),
            base,
            registry_credential,
            build_secrets,
            labels: self.labels(None, "build"),
        };
        let sink = build.clone();
        let log = move |line: &str| lock(&sink.logs).push(line.to_owned());
        self.inner
            .site
            .backend()
            .build(&request, &log)
            .await
            .map_err(|e| e.to_string())
    }

    /// Launches sandbox `id` from `artifact`; ends it at once if it was terminated first.
    pub(super) fn start_sandbox(
        &self,
        id: String,
        sandbox: Arc<SandboxEntry>,
        artifact: Artifact,
        labels: RunLabels,
    ) {
        let emulator = self.clone();
        self.inner.launching.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let launched = emulator
                .inner
                .site
                .backend()
                .launch(&artifact, &labels)
                .await;
            match launched {
                Ok((inner, _)) => {
                    let task_id = format!("ta-{}", random_id(22));
                    let ended = {
                        let mut state = lock(&sandbox.state);
                        state.task = Some((task_id.clone(), inner));
                        state.result.is_some() || state.ending.is_some()
                    };
                    emulator.world().tasks.insert(task_id, id);
                    if ended && let Err(e) = emulator.stop_container(&sandbox).await {
                        eprintln!("emulate modal: {}", e.message());
                    }
                }
                Err(e) => {
                    let mut state = lock(&sandbox.state);
                    state.result.get_or_insert(api::GenericResult {
                        status: GenericStatus::InitFailure as i32,
                        exception: format!("the sandbox did not start: {e}"),
                        ..Default::default()
                    });
                }
            }
            emulator.inner.launching.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Ends `sandbox` at its `timeout_secs` unless it has ended by then, as Modal ends a
    /// sandbox at its timeout (`GENERIC_STATUS_TIMEOUT`; api.proto's `Sandbox.timeout_secs`,
    /// the official client's `Sandbox.create(timeout=)`).
    /// Under the [`Options::kill_after`] fault, a sandbox whose timeout is later (or none)
    /// is terminated at that time instead.
    pub(super) fn end_at_timeout(&self, sandbox: Arc<SandboxEntry>, timeout_secs: u32) {
        let emulator = self.clone();
        let timeout = (timeout_secs > 0).then(|| Duration::from_secs(timeout_secs.into()));
        let early = self
            .inner
            .kill_after
            .filter(|k| timeout.is_none_or(|t| *k < t));
        let Some(at) = early.or(timeout) else { return };
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if emulator.inner.stopped.load(Ordering::SeqCst) {
                return;
            }
            let timed_out = match early {
                Some(early) => api::GenericResult {
                    status: GenericStatus::Terminated as i32,
                    exception: format!(
                        "the emulator killed the sandbox {} s after its create (the kill-after fault)",
                        early.as_secs_f64()
                    ),
                    ..Default::default()
                },
                None => api::GenericResult {
                    status: GenericStatus::Timeout as i32,
                    exception: format!("the sandbox reached its timeout of {timeout_secs} s"),
                    ..Default::default()
                },
            };
            if let Err(e) = emulator.end(&sandbox, timed_out).await {
                eprintln!("emulate modal: ending a sandbox at its timeout: {e}");
            }
        });
    }

    /// Ends `sandbox` with `result` unless it has ended already; returns the result it
    /// had then. The sandbox is said ended only once its container is gone: a call while
    /// another is ending it waits for that. An error when its container could not be
    /// removed: the sandbox is then not gone, and no answer says it is.
    #[allow(clippy::result_large_err)]
    pub(super) async fn end(
        &self,
        sandbox: &SandboxEntry,
        result: api::GenericResult,
    ) -> Result<Option<api::GenericResult>, Status> {
        let ours = {
            let mut state = lock(&sandbox.state);
            if let Some(existing) = &state.result {
                return Ok(Some(existing.clone()));
            }
            state.ending.is_none() && state.ending.replace(result).is_none()
        };
        if !ours {
            loop {
                tokio::time::sleep(POLL).await;
                let state = lock(&sandbox.state);
                match (&state.result, &state.ending) {
                    (Some(ended), _) => return Ok(Some(ended.clone())),
                    (None, None) => {
                        return Err(Status::unavailable(
                            "the sandbox's container could not be removed; ask again",
                        ));
                    }
                    (None, Some(_)) => {}
                }
            }
        }
        let stopped = self.stop_container(sandbox).await;
        let mut state = lock(&sandbox.state);
        let ending = state.ending.take();
        stopped?;
        state.result = ending;
        Ok(None)
    }

    /// Stops and removes the sandbox's container, if it was launched: a terminated
    /// Modal sandbox is gone. A stop that fails is followed by the removal, which forces
    /// it; a removal that fails is the error.
    #[allow(clippy::result_large_err)]
    pub(super) async fn stop_container(&self, sandbox: &SandboxEntry) -> Result<(), Status> {
        let inner = lock(&sandbox.state)
            .task
            .as_ref()
            .map(|(_, inner)| inner.clone());
        if let Some(inner) = inner {
            let docker = self.inner.site.backend();
            if let Err(e) = docker.shutdown(&inner, TERMINATE_GRACE).await {
                eprintln!(
                    "emulate modal: stopping container {} failed ({e}); removing it",
                    inner.0
                );
            }
            let container = sandbox_providers::Resource {
                kind: "container".into(),
                id: inner.0.clone(),
            };
            docker.delete_resource(&container).await.map_err(|e| {
                Status::internal(format!(
                    "the sandbox's container {} could not be removed: {e}",
                    inner.0
                ))
            })?;
        }
        Ok(())
    }

    /// The result of a sandbox whose container exited on its own, if it did.
    pub(super) async fn exited(&self, sandbox: &SandboxEntry) -> Option<api::GenericResult> {
        let container = lock(&sandbox.state).task.as_ref()?.1.0.clone();
        let state = self
            .inner
            .engine
            .inspect_container(&container, None)
            .await
            .ok()?
            .state?;
        if state.running == Some(true) {
            return None;
        }
        let code = state.exit_code.unwrap_or(-1);
        Some(api::GenericResult {
            status: if code == 0 {
                GenericStatus::Success
            } else {
                GenericStatus::Failure
            } as i32,
            exitcode: i32::try_from(code).unwrap_or(-1),
            ..Default::default()
        })
    }

    /// Starts `argv` in `container` (placed in `region`) as a docker exec, its output
    /// pumped into `exec`.
    pub(super) async fn start_exec(
        &self,
        container: &str,
        region: &str,
        request: &router::TaskExecStartRequest,
        exec: Arc<Exec>,
    ) -> Result<(), Status> {
        let engine = &self.inner.engine;
        // Modal sets the container's location in every container's environment.
        let env: Vec<String> = std::iter::once(format!("MODAL_REGION={region}"))
            .chain(request.env.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        let created = engine
            .create_exec(
                container,
                CreateExecOptions {
                    cmd: Some(request.command_args.clone()),
                    // Modal runs a command as root unless it says otherwise.
                    user: Some("root".to_owned()),
                    working_dir: request.workdir.clone(),
                    env: Some(env),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| Status::internal(format!("creating the exec: {e}")))?;
        let started = engine
            .start_exec(&created.id, None)
            .await
            .map_err(|e| Status::internal(format!("starting the exec: {e}")))?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(Status::internal("the exec started detached"));
        };
        let keep_stdout = request.stdout_config() == router::TaskExecStdoutConfig::Pipe;
        let stderr_to = request.stderr_config();
        // The router ends an exec at its `timeout_secs` (task_command_router.proto's
        // TaskExecStartRequest; the official client's `exec(timeout=)`): killed, as a
        // signal 9 shows in its exit code (128 + 9, `container_process.py`).
        let deadline = request
            .timeout_secs
            .filter(|secs| *secs > 0)
            .map(|secs| tokio::time::Instant::now() + Duration::from_secs(secs.into()));
        let engine = engine.clone();
        tokio::spawn(async move {
            loop {
                let next = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, output.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            kill_exec(&engine, &created.id).await;
                            break;
                        }
                    },
                    None => output.next().await,
                };
                let Some(Ok(chunk)) = next else { break };
                match chunk {
                    LogOutput::StdOut { message } if keep_stdout => {
                        lock(&exec.stdout).extend_from_slice(&message);
                    }
                    LogOutput::StdErr { message } => match stderr_to {
                        router::TaskExecStderrConfig::Pipe => {
                            lock(&exec.stderr).extend_from_slice(&message);
                        }
                        router::TaskExecStderrConfig::Stdout => {
                            lock(&exec.stdout).extend_from_slice(&message);
                        }
                        router::TaskExecStderrConfig::Devnull => {}
                    },
                    _ => {}
                }
            }
            let mut code = engine
                .inspect_exec(&created.id)
                .await
                .ok()
                .and_then(|i| i.exit_code);
            for _ in 0..50 {
                if code.is_some() {
                    break;
                }
                // A killed exec's code comes once the engine has reaped it.
                tokio::time::sleep(Duration::from_millis(100)).await;
                code = engine
                    .inspect_exec(&created.id)
                    .await
                    .ok()
                    .and_then(|i| i.exit_code);
            }
            *lock(&exec.exit) = Some(i32::try_from(code.unwrap_or(-1)).unwrap_or(-1));
        });
        Ok(())
    }
}

/// Kills exec `id`'s process (SIGKILL, by the host pid the engine reports): the router
/// ending an exec at its timeout. Only a pid whose cgroup names the exec's container is
/// signalled: an engine in another pid namespace (a VM) reports pids that are not this
/// machine's, and the exec is then said unkilled rather than some other process killed.
async fn kill_exec(engine: &bollard::Docker, id: &str) {
    let inspected = engine.inspect_exec(id).await.ok();
    let pid = inspected
        .as_ref()
        .and_then(|i| i.pid)
        .and_then(|pid| libc::pid_t::try_from(pid).ok())
        .filter(|pid| *pid > 0);
    let container = inspected.and_then(|i| i.container_id).unwrap_or_default();
    let ours = pid.filter(|pid| {
        !container.is_empty()
            && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cgroups| cgroups.contains(&container))
    });
    // SAFETY: kill(2) with a pid checked above to be in the exec's container, and a
    // signal number; no memory is passed.
    let killed = ours.map(|pid| unsafe { libc::kill(pid, libc::SIGKILL) } == 0);
    if killed != Some(true) {
        eprintln!(
            "emulate modal: the exec {id} reached its timeout but could not be killed ({})",
            match (pid, ours) {
                (None, _) => "the engine reported no pid for it",
                (Some(_), None) =>
                    "the pid the engine reported is not in its container on this machine: the engine runs in another pid namespace",
                (Some(_), Some(_)) => "kill(2) failed",
            }
        );
    }
}

/// What a build takes besides its image definition: its context mount's files, and each
/// base image's build, by the `docker_tag` its Dockerfile names it by and its image id.
pub(super) struct Inputs {
    pub(super) mounted: Vec<mounts::MountedFile>,
    pub(super) bases: Vec<(String, String, Artifact)>,
}

/// The inputs of a build of `image`: the mount it names and the base images it names,
/// each built.
#[allow(clippy::result_large_err)]
pub(super) fn build_inputs(world: &World, image: &api::Image) -> Result<Inputs, Status> {
    let mounted = match image.context_mount_id.as_str() {
        "" => Vec::new(),
        id => world.mounts.files(id)?,
    };
    let mut bases = Vec::new();
    for base in &image.base_images {
        if base.docker_tag.is_empty() {
            return Err(Status::invalid_argument(format!(
                "base image {} has no docker_tag",
                base.image_id
            )));
        }
        let build = world
            .images
            .get(&base.image_id)
            .ok_or_else(|| Status::not_found(format!("no image {} (a base)", base.image_id)))?;
        match lock(&build.outcome).clone() {
            Some(Ok(artifact)) => {
                bases.push((base.docker_tag.clone(), base.image_id.clone(), artifact));
            }
            Some(Err(_)) => {
                return Err(Status::failed_precondition(format!(
                    "base image {} failed to build",
                    base.image_id
                )));
            }
            None => {
                return Err(Status::failed_precondition(format!(
                    "base image {} is still building",
                    base.image_id
                )));
            }
        }
    }
    Ok(Inputs { mounted, bases })
}

/// The base a Dockerfile's first command, `FROM [--flag ...] <reference> [AS name]`, names.
pub(super) fn from_reference(commands: &[String]) -> Result<String, String> {
    let first = commands.first().map(|c| c.trim()).unwrap_or_default();
    let mut words = first.split_whitespace();
    if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
        return Err(format!(
            "the image's first Dockerfile command must be FROM <base>, not `{first}`"
        ));
    }
    words
        .find(|w| !w.starts_with("--"))
        .map(str::to_owned)
        .ok_or_else(|| format!("the image's `{first}` names no base"))
}
