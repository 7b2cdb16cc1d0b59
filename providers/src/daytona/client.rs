//! Daytona's API as the provider calls it: snapshots and their build logs, sandboxes and
//! their states, the toolbox, the interpreter's contexts, each call authorized.

use super::*;

impl DaytonaProvider {
    /// Uses `waits` instead of the default deadlines.
    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.waits = waits;
        self
    }
    /// `req` with the bearer token (and the organization, with a JWT).
    fn authorized(&self, req: ApiRequest) -> ApiRequest {
        let mut req = req.header("Authorization", format!("Bearer {}", self.bearer.expose()));
        if let Some(org) = &self.organization {
            req = req.header("X-Daytona-Organization-ID", org.clone());
        }
        req
    }
    /// Sends `req` with the bearer token (and the organization, with a JWT).
    pub(super) async fn call(&self, req: ApiRequest) -> Result<crate::api::ApiResponse> {
        self.client.call(self.authorized(req)).await
    }
    /// The id of context `name` in `sandbox`, created on first use.
    pub(super) async fn context(&self, sandbox: &str, name: &str) -> Result<String> {
        let key = (sandbox.to_owned(), name.to_owned());
        if let Some(id) = lock(&self.contexts).get(&key) {
            return Ok(id.clone());
        }
        let target = self.toolbox(sandbox, "process/interpreter/context").await?;
        let created: ContextRecord = self
            .call(
                ApiRequest::post(target, "")
                    .json(json!({ "language": "python" }))
                    .what("create interpreter context"),
            )
            .await?
            .json()?;
        lock(&self.contexts).insert(key, created.id.clone());
        Ok(created.id)
    }
    /// Runs `code` in context `context` over the execute WebSocket.
    pub(super) async fn interpret(
        &self,
        sandbox: &str,
        context: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let target = self.toolbox(sandbox, "process/interpreter/execute").await?;
        let deadline = Duration::from_secs(RUN_TIMEOUT_SECS + 30);
        let mut socket = self
            .client
            .websocket(
                self.authorized(ApiRequest::get(target, ""))
                    .what("execute in interpreter context"),
            )
            .await?;
        socket
            .send_json(&json!({
                "code": code::wrap(code),
                "contextId": context,
                "timeout": RUN_TIMEOUT_SECS,
            }))
            .await?;
        let mut frames = Vec::new();
        let ended = loop {
            match socket.next(deadline).await? {
                WsMessage::Json(frame) => frames.push(frame),
                WsMessage::Text(text) => {
                    return Err(ProviderError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the interpreter sent a frame that is not JSON: {}",
                            crate::tail(&text, 200)
                        ),
                    ));
                }
                WsMessage::Closed { code, reason } => break (code, reason),
            }
        };
        socket.close().await;
        let context_of = |e: ProviderError| {
            e.context(format!(
                "interpreter context {context} in sandbox {sandbox}"
            ))
        };
        match ended {
            (1000 | 1005, _) => {}
            (4008, _) => {
                return Err(context_of(ProviderError::new(
                    ErrorKind::Timeout,
                    format!("the interpreter's timeout of {RUN_TIMEOUT_SECS} s passed"),
                )));
            }
            (code, reason) => {
                return Err(context_of(ProviderError::new(
                    ErrorKind::Transport,
                    format!("the interpreter closed the WebSocket with code {code}: {reason}"),
                )));
            }
        }
        code::output_from_frames(&frames).map_err(context_of)
    }
    /// Creates docker-registry entry `entry` under the run's `name`; returns its id.
    pub(super) async fn create_registry(
        &self,
        name: &str,
        entry: &RegistryEntry,
        log: &LogFn,
    ) -> Result<String> {
        let created: RegistryRecord = self
            .call(
                ApiRequest::post(Target::Api, "/docker-registry")
                    .json(json!({
                        "name": name,
                        "url": entry.url,
                        "username": entry.username,
                        "password": entry.password.expose(),
                    }))
                    .what("create docker-registry entry"),
            )
            .await?
            .json()?;
        log(&format!(
            "docker-registry entry {} created for {} ({})",
            created.id, entry.url, entry.what
        ));
        Ok(created.id)
    }
    /// Deletes by id; a resource already gone is success.
    pub(super) async fn delete(&self, path: String, what: &str) -> Result<Deleted> {
        match self
            .call(ApiRequest::delete(Target::Api, path).what(what.to_owned()))
            .await
        {
            Ok(_) => Ok(Deleted::Removed),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e),
        }
    }
    /// Creates the snapshot and polls it to `active`, passing new build log lines to `log`.
    pub(super) async fn build_snapshot(
        &self,
        name: &str,
        dockerfile: String,
        log: &LogFn,
    ) -> Result<String> {
        let (cpu, memory, disk) = SNAPSHOT_RESOURCES;
        let created: SnapshotRecord = self
            .call(
                ApiRequest::post(Target::Api, "/snapshots")
                    .json(json!({
                        "name": name,
                        "buildInfo": { "dockerfileContent": dockerfile, "contextHashes": [] },
                        "cpu": cpu,
                        "memory": memory,
                        "disk": disk,
                        "regionId": self.target,
                    }))
                    .what("create snapshot"),
            )
            .await?
            .json()?;
        log(&format!(
            "snapshot {} created as {}",
            created.id, created.name
        ));
        let id = created.id;
        match self.wait_for_snapshot(&id, log).await {
            Ok(()) => Ok(id),
            Err(e) => {
                if let Err(d) = self
                    .delete(format!("/snapshots/{id}"), "delete snapshot")
                    .await
                {
                    log(&format!("could not delete the failed snapshot {id}: {d}"));
                }
                Err(e)
            }
        }
    }
    /// Where snapshot `id`'s build logs are read.
    pub(super) async fn build_logs_url(&self, id: &str) -> Result<UrlRecord> {
        self.call(
            ApiRequest::get(Target::Api, format!("/snapshots/{id}/build-logs-url"))
                .what("get snapshot build logs URL"),
        )
        .await?
        .json()
    }
    /// Polls snapshot `id` until `active`, fetching its build logs on every poll once it
    /// has left `pending`. The build-logs URL is asked for only then, as Daytona's SDK asks
    /// (`daytona/_sync/snapshot.py`, 0.226.1): while the snapshot is `pending` no runner
    /// holds its build, and the service holds the request up to 30 s, then answers 404
    /// (`apps/api/src/sandbox/controllers/snapshot.controller.ts`, daytonaio/daytona
    /// v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8).
    async fn wait_for_snapshot(&self, id: &str, log: &LogFn) -> Result<()> {
        let seen = Mutex::new(0usize);
        let logs_url: Mutex<Option<String>> = Mutex::new(None);
        let (this, seen, logs_url) = (self, &seen, &logs_url);
        let started = Instant::now();
        let ((), resolution) = self
            .client
            .poll_until(
                &format!("snapshot {id} to become active"),
                self.waits.build,
                move || async move {
                    let snapshot: SnapshotRecord = this
                        .call(
                            ApiRequest::get(Target::Api, format!("/snapshots/{id}"))
                                .what("get snapshot"),
                        )
                        .await?
                        .json()?;
                    if snapshot.state != "pending" {
                        let known = logs_url.lock().expect("logs URL lock").clone();
                        let url = match known {
                            Some(url) => url,
                            None => {
                                let url = this.build_logs_url(id).await?.url;
                                *logs_url.lock().expect("logs URL lock") = Some(url.clone());
                                url
                            }
                        };
                        this.emit_new_log_lines(&url, seen, log).await?;
                    }
                    match snapshot.state.as_str() {
                        "active" => Ok(Some(())),
                        "error" | "build_failed" => Err(ProviderError::new(
                            ErrorKind::Build,
                            format!(
                                "snapshot {id} ended in state {}: {}",
                                snapshot.state,
                                snapshot
                                    .error_reason
                                    .as_deref()
                                    .unwrap_or("no reason given")
                            ),
                        )),
                        _ => Ok(None),
                    }
                },
            )
            .await?;
        log(&format!(
            "snapshot {id} active after {:.1} s (polled every {} ms at most)",
            started.elapsed().as_secs_f64(),
            resolution.as_millis()
        ));
        Ok(())
    }
    /// Fetches the build log and passes the lines not seen yet to `log`; a log not
    /// written yet (404) has no lines.
    async fn emit_new_log_lines(&self, url: &str, seen: &Mutex<usize>, log: &LogFn) -> Result<()> {
        let text = match self
            .call(
                ApiRequest::get(Target::Absolute(url.to_owned()), "")
                    .what("get snapshot build logs"),
            )
            .await
        {
            Ok(response) => response.text(),
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let lines: Vec<&str> = text.lines().collect();
        let mut seen = seen.lock().expect("build log counter lock");
        for line in lines.iter().skip(*seen) {
            log(line);
        }
        *seen = (*seen).max(lines.len());
        Ok(())
    }
    /// Polls sandbox `id` until it is in state `want`; returns the poll resolution.
    pub(super) async fn wait_for_sandbox(
        &self,
        id: &str,
        want: &str,
        deadline: Duration,
    ) -> Result<Duration> {
        let this = self;
        let (record, resolution) = self
            .client
            .poll_until(
                &format!("sandbox {id} to be {want}"),
                deadline,
                move || async move {
                    let record: SandboxRecord = this
                        .call(
                            ApiRequest::get(Target::Api, format!("/sandbox/{id}"))
                                .what("get sandbox"),
                        )
                        .await?
                        .json()?;
                    match record.state.as_deref().unwrap_or("unknown") {
                        state if state == want => Ok(Some(record)),
                        state if sandbox_failed(state) => Err(ProviderError::new(
                            ErrorKind::Api,
                            format!(
                                "sandbox {id} is {state} while waiting for {want}: {}",
                                record.error_reason.as_deref().unwrap_or("no reason given")
                            ),
                        )),
                        _ => Ok(None),
                    }
                },
            )
            .await?;
        self.remember(&record);
        Ok(resolution)
    }
    /// Keeps a sandbox's toolbox URL.
    pub(super) fn remember(&self, record: &SandboxRecord) {
        self.toolboxes.lock().expect("toolbox table lock").insert(
            record.id.clone(),
            record.toolbox_proxy_url.trim_end_matches('/').to_owned(),
        );
    }
    /// The toolbox URL of `endpoint` in sandbox `id`.
    pub(super) async fn toolbox(&self, id: &str, endpoint: &str) -> Result<Target> {
        let known = self
            .toolboxes
            .lock()
            .expect("toolbox table lock")
            .get(id)
            .cloned();
        let base = match known {
            Some(base) => base,
            None => {
                let answer: UrlRecord = self
                    .call(
                        ApiRequest::get(Target::Api, format!("/sandbox/{id}/toolbox-proxy-url"))
                            .what("get toolbox proxy URL"),
                    )
                    .await?
                    .json()?;
                let base = answer.url.trim_end_matches('/').to_owned();
                self.toolboxes
                    .lock()
                    .expect("toolbox table lock")
                    .insert(id.to_owned(), base.clone());
                base
            }
        };
        Ok(Target::Absolute(format!("{base}/{id}/{endpoint}")))
    }
    /// Stops sandbox `id` and polls until it is stopped; its contexts end with it.
    pub(super) async fn stop(&self, id: &str) -> Result<Timing> {
        lock(&self.contexts).retain(|(sandbox, _), _| sandbox != id);
        let started = Instant::now();
        self.call(
            ApiRequest::post(Target::Api, format!("/sandbox/{id}/stop"))
                .idempotent(true)
                .what("stop sandbox"),
        )
        .await?;
        let resolution = self
            .wait_for_sandbox(id, "stopped", self.waits.stop)
            .await?;
        Ok(Timing {
            name: "sandbox-stop".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        })
    }
}
