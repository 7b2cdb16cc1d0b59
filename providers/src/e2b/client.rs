//! E2B's API as the provider calls it: templates and their builds, sandboxes, envd's
//! process calls and the code interpreter, each call with its timeout and retries.

use super::*;

impl E2bProvider {
    /// Creates a sandbox from the template build `artifact` names, with E2B's `timeout`
    /// set to `timeout` seconds, and waits until its code interpreter answers.
    pub(super) async fn launch_with_timeout(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        timeout: u64,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        if artifact.kind != ARTIFACT_KIND {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the e2b variant launches {ARTIFACT_KIND} artifacts, not {}",
                    artifact.kind
                ),
            ));
        }
        let started = Instant::now();
        let created: CreatedSandbox = self
            .client
            .call(
                self.api(Method::POST, "/sandboxes")
                    .json(json!({
                        "templateID": artifact.id,
                        "timeout": timeout,
                        "secure": true,
                        "metadata": labels.to_map(),
                        "envVars": locale_env(),
                        // The Jupyter Server has no token: the proxy's is the guard.
                        "network": { "allowPublicTraffic": false },
                    }))
                    .what("create sandbox"),
            )
            .await?
            .json()?;
        let mut timings = vec![Timing {
            name: "sandbox-create".into(),
            duration: started.elapsed(),
            resolution: None,
        }];
        let secret = |name: &str, value: Option<String>| {
            value.map(|t| {
                let secret = Secret::new(name, t);
                self.client.add_secret(secret.clone());
                secret
            })
        };
        let mut state = SandboxState {
            access_token: secret("E2B_ENVD_ACCESS_TOKEN", created.envd_access_token),
            traffic: secret("E2B_TRAFFIC_ACCESS_TOKEN", created.traffic_access_token),
            kernel: String::new(),
            named: HashMap::new(),
        };
        let sandbox = SandboxId(created.sandbox_id);
        match self.ready(&sandbox, &state, &mut timings).await {
            Ok(kernel) => {
                state.kernel = kernel;
                self.sandboxes
                    .lock()
                    .map_err(|_| poisoned())?
                    .insert(sandbox.0.clone(), state);
                Ok((sandbox, timings))
            }
            Err(e) => {
                // Never leave a sandbox behind that the caller has no id for.
                if let Err(kill) = self.kill(&sandbox.0).await {
                    tracing::warn!(sandbox = %sandbox.0, "could not kill a sandbox that never became ready: {kill}");
                }
                Err(e.context(format!("launch sandbox {}", sandbox.0)))
            }
        }
    }

    /// Connects with `E2B_API_KEY` (not needed in replay mode), `E2B_API_URL` and
    /// `E2B_DOMAIN` overriding the public addresses (`E2B_DOMAIN` may carry a port:
    /// `<domain>:<port>`), and the optional overrides `E2B_BASE_IMAGE`, `E2B_START_CMD` and
    /// `E2B_READY_CMD` of the build request's base and the environment's start and ready
    /// commands, all read from `settings`; live, with their test network settings.
    pub fn from_settings(
        mode: Mode,
        volatiles: Arc<Volatiles>,
        settings: &Settings,
    ) -> Result<Self> {
        let var = |name: &str| settings.var(name);
        let api_key = match (&mode, var("E2B_API_KEY")) {
            (Mode::Replay { .. }, _) => replay_key(),
            (_, Some(key)) => Secret::new("E2B_API_KEY", key),
            (_, None) => {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    "the e2b variant needs E2B_API_KEY in the environment",
                ));
            }
        };
        let endpoints = Endpoints {
            api_base: var("E2B_API_URL").unwrap_or_else(|| DEFAULT_API_URL.to_owned()),
            sandbox_domain: var("E2B_DOMAIN").unwrap_or_else(|| DEFAULT_DOMAIN.to_owned()),
        };
        let options = BuildOptions {
            base_image: var("E2B_BASE_IMAGE"),
            start_cmd: var("E2B_START_CMD"),
            ready_cmd: var("E2B_READY_CMD"),
        };
        let network = settings.network_for(&mode)?;
        Self::with_network(endpoints, mode, api_key, volatiles, options, &network)
    }

    /// A provider talking to `endpoints` with `api_key`; live, with the test network
    /// settings of the environment, if any (see [`crate::api::network`]).
    pub fn new(
        endpoints: Endpoints,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        options: BuildOptions,
    ) -> Result<Self> {
        let client = ApiClient::new(Self::settings(endpoints, mode, &api_key, volatiles))?;
        Ok(Self::with_client(client, api_key, options))
    }

    /// A provider talking to `endpoints` with `api_key`, trusting `network`'s extra roots
    /// and resolving through its pin (an emulator reached through the live host forms).
    pub fn with_network(
        endpoints: Endpoints,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        options: BuildOptions,
        network: &Network,
    ) -> Result<Self> {
        let client = ApiClient::with_network(
            Self::settings(endpoints, mode, &api_key, volatiles),
            network,
        )?;
        Ok(Self::with_client(client, api_key, options))
    }

    fn settings(
        endpoints: Endpoints,
        mode: Mode,
        api_key: &Secret,
        volatiles: Arc<Volatiles>,
    ) -> ApiSettings {
        ApiSettings {
            endpoints,
            mode,
            credentials: vec![api_key.clone()],
            volatiles,
            call_timeout: CALL_TIMEOUT,
        }
    }

    fn with_client(client: ApiClient, api_key: Secret, options: BuildOptions) -> Self {
        Self {
            client,
            api_key,
            options,
            ready_deadline: READY_DEADLINE,
            sandboxes: Mutex::new(HashMap::new()),
            sockets: Mutex::new(HashMap::new()),
            gone: Mutex::new(HashSet::new()),
            creates: CreateRecorder::default(),
        }
    }

    /// Sets how long launch waits for the Jupyter Server (60 s unless set).
    pub fn with_ready_deadline(mut self, deadline: Duration) -> Self {
        self.ready_deadline = deadline;
        self
    }

    /// The template name of a run's scenario, registered as a volatile value so that
    /// cassettes hold a placeholder for it.
    pub(super) fn template_name(&self, labels: &RunLabels) -> String {
        let name = template_name(labels);
        self.client.volatiles().register("template_name", &name);
        name
    }

    /// Compares two values as cassettes hold them: a recorded answer carries placeholders
    /// where a live one carries the run's values.
    fn same(&self) -> impl Fn(&str, &str) -> bool {
        let normalizer = Normalizer::new(&[], self.client.volatiles());
        move |a, b| a == b || normalizer.text(a) == normalizer.text(b)
    }

    pub(super) fn api(&self, method: Method, path: impl Into<String>) -> ApiRequest {
        ApiRequest::new(method, Target::Api, path).header("X-API-Key", self.api_key.expose())
    }

    pub(super) fn state(&self, sandbox: &SandboxId) -> Result<SandboxState> {
        self.sandboxes
            .lock()
            .map_err(|_| poisoned())?
            .get(&sandbox.0)
            .cloned()
            .ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::NotFound,
                    format!("sandbox {} was not launched by this provider", sandbox.0),
                )
            })
    }

    /// A request to a port inside the sandbox, carrying envd's access token.
    pub(super) fn in_sandbox(
        &self,
        method: Method,
        port: u16,
        sandbox: &SandboxId,
        token: Option<&Secret>,
        path: &str,
    ) -> ApiRequest {
        let request = ApiRequest::new(
            method,
            Target::Sandbox {
                port,
                sandbox_id: sandbox.0.clone(),
            },
            path,
        );
        match token {
            Some(token) => request.header("X-Access-Token", token.expose()),
            None => request,
        }
    }

    /// The code channel of a sandbox.
    pub(super) fn channel<'a>(
        &'a self,
        sandbox: &'a SandboxId,
        state: &'a SandboxState,
    ) -> Channel<'a> {
        Channel {
            client: &self.client,
            server: Server::SandboxPort {
                sandbox,
                port: CODE_PORT,
            },
            admit: state
                .traffic
                .as_ref()
                .map(|token| (TRAFFIC_TOKEN_HEADER, "", token)),
        }
    }

    /// The session number of the next socket to `kernel`.
    fn next_socket(&self, kernel: &str) -> Result<usize> {
        let mut sockets = self.sockets.lock().map_err(|_| poisoned())?;
        let n = sockets.entry(kernel.to_owned()).or_insert(0);
        *n += 1;
        Ok(*n)
    }

    /// Runs `code` on kernel `kernel` over a socket of its own.
    pub(super) async fn execute(
        &self,
        sandbox: &SandboxId,
        state: &SandboxState,
        kernel: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let n = self.next_socket(kernel)?;
        let mut socket = self
            .channel(sandbox, state)
            .open(kernel, n, CALL_TIMEOUT)
            .await?;
        let output = socket.execute(code, EXECUTE_TIMEOUT).await;
        socket.close().await;
        output.map_err(|e| e.context(format!("execute code on kernel {kernel}")))
    }

    /// Starts a kernel and waits until it answers.
    pub(super) async fn start_kernel(
        &self,
        sandbox: &SandboxId,
        state: &SandboxState,
    ) -> Result<String> {
        let kernel = self
            .channel(sandbox, state)
            .start_kernel(CALL_TIMEOUT)
            .await?;
        self.kernel_ready(sandbox, state, &kernel).await?;
        Ok(kernel)
    }

    /// Waits until `kernel` answers a `kernel_info_request`.
    pub(super) async fn kernel_ready(
        &self,
        sandbox: &SandboxId,
        state: &SandboxState,
        kernel: &str,
    ) -> Result<()> {
        let n = self.next_socket(kernel)?;
        let mut socket = self
            .channel(sandbox, state)
            .open(kernel, n, CALL_TIMEOUT)
            .await?;
        let ready = socket.wait_ready(self.ready_deadline).await;
        socket.close().await;
        ready.map_err(|e| e.context(format!("wait for kernel {kernel}")))
    }

    /// Deletes a sandbox; one already gone is not an error.
    pub(super) async fn kill(&self, sandbox: &str) -> Result<Deleted> {
        let outcome = self
            .client
            .call(
                self.api(Method::DELETE, format!("/sandboxes/{sandbox}"))
                    .what("kill sandbox"),
            )
            .await;
        self.sandboxes
            .lock()
            .map_err(|_| poisoned())?
            .remove(sandbox);
        gone_is_fine(outcome)
    }

    /// The sandbox's last log lines, oldest first; none when E2B answers none.
    pub(super) async fn last_log_lines(&self, sandbox: &str) -> Vec<String> {
        let path =
            format!("/v2/sandboxes/{sandbox}/logs?limit={LAST_LOG_LINES}&direction=backward");
        let Ok(response) = self
            .client
            .call(self.api(Method::GET, path).what("sandbox logs"))
            .await
        else {
            return Vec::new();
        };
        let Ok(logs) = response.json::<SandboxLogs>() else {
            return Vec::new();
        };
        logs.logs
            .into_iter()
            .rev()
            .map(|entry| entry.message)
            .collect()
    }

    /// Every item of a listing that pages with `nextToken` and `x-next-token`.
    pub(super) async fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = match &next {
                Some(token) => {
                    let joiner = if path.contains('?') { '&' } else { '?' };
                    format!("{path}{joiner}nextToken={}", encode(token))
                }
                None => path.to_owned(),
            };
            let response = self
                .client
                .call(self.api(Method::GET, page).what(what))
                .await?;
            items.extend(response.json::<Vec<T>>()?);
            next = response
                .header("x-next-token")
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if next.is_none() {
                return Ok(items);
            }
        }
    }

    /// Sandboxes carrying every label.
    pub(super) async fn list_sandboxes(&self, labels: &RunLabels) -> Result<Vec<String>> {
        let metadata = labels
            .to_map()
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let listed: Vec<ListedSandbox> = self
            .list_all(
                &format!("/v2/sandboxes?metadata={}", encode(&metadata)),
                "list sandboxes by metadata",
            )
            .await?;
        let same = self.same();
        Ok(listed
            .into_iter()
            .filter(|s| {
                labels
                    .to_map()
                    .iter()
                    .all(|(k, v)| s.metadata.get(k).is_some_and(|found| same(found, v)))
            })
            .map(|s| s.sandbox_id)
            .collect())
    }

    /// Templates named for this run and scenario.
    pub(super) async fn list_templates(&self, labels: &RunLabels) -> Result<Vec<String>> {
        let name = self.template_name(labels);
        let same = self.same();
        let listed: Vec<TemplateListed> = self.list_all("/v2/templates", "list templates").await?;
        Ok(listed
            .into_iter()
            .filter(|t| {
                t.names
                    .iter()
                    .chain(&t.aliases)
                    .any(|n| n.rsplit('/').next().is_some_and(|n| same(n, &name)))
            })
            .map(|t| t.template_id)
            .collect())
    }

    /// Polls a build's status, passing new log lines to `log`, until it is ready or failed.
    pub(super) async fn wait_for_build(
        &self,
        template_id: &str,
        build_id: &str,
        log: &LogFn,
    ) -> Result<Duration> {
        let offset = AtomicUsize::new(0);
        let (outcome, resolution) = self.client.poll_until("the template build", BUILD_DEADLINE, || async {
            let from = offset.load(Ordering::SeqCst);
            let response = self
                .client
                .call(
                    self.api(
                        Method::GET,
                        format!(
                            "/templates/{template_id}/builds/{build_id}/status?logsOffset={from}&limit={LOG_PAGE}"
                        ),
                    )
                    .what("poll build status"),
                )
                .await?;
            let info: BuildInfo = response.json()?;
            let lines = info.lines();
            offset.fetch_add(lines.len(), Ordering::SeqCst);
            for line in &lines {
                log(line);
            }
            Ok(match info.status.as_str() {
                "ready" => Some(Ok(())),
                "error" => Some(Err(info.reason)),
                _ => None,
            })
        })
        .await?;
        match outcome {
            Ok(()) => Ok(resolution),
            Err(reason) => {
                let reason = reason.unwrap_or_default();
                for entry in &reason.log_entries {
                    log(&entry.message);
                }
                let step = reason
                    .step
                    .as_deref()
                    .map(|s| format!(" at step {s}"))
                    .unwrap_or_default();
                Err(ProviderError::new(
                    ErrorKind::Build,
                    format!(
                        "the E2B build {build_id} of template {template_id} failed{step}: {}",
                        if reason.message.is_empty() {
                            "no reason given"
                        } else {
                            &reason.message
                        }
                    ),
                ))
            }
        }
    }

    /// The part of launch after the sandbox exists: wait for the Jupyter Server, start the
    /// kernel code runs in and wait for it.
    async fn ready(
        &self,
        sandbox: &SandboxId,
        state: &SandboxState,
        timings: &mut Vec<Timing>,
    ) -> Result<String> {
        let started = Instant::now();
        let channel = self.channel(sandbox, state);
        let ((), resolution) = self
            .client
            .poll_until("the Jupyter Server", self.ready_deadline, || async {
                // The poll is the retry: one attempt per probe, each short.
                let probe = channel
                    .request(Method::GET, "/api")
                    .idempotent(false)
                    .timeout(HEALTH_TIMEOUT)
                    .what("Jupyter Server status");
                Ok(self.client.call(probe).await.ok().map(|_| ()))
            })
            .await?;
        timings.push(Timing {
            name: "server-ready".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        });
        let started = Instant::now();
        let kernel = self.start_kernel(sandbox, state).await?;
        timings.push(Timing {
            name: "kernel-start".into(),
            duration: started.elapsed(),
            resolution: None,
        });
        Ok(kernel)
    }
}
