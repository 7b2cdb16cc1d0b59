//! The runtimes API client: constructors, its calls, and a runtime's Jupyter Server.

use super::*;

/// What launch learned of a runtime.
#[derive(Clone)]
pub(super) struct RuntimeState {
    pub(super) ingress: String,
    pub(super) token: Secret,
    /// Kernel ids by context name (`""` is run_code's), each started once, on first use.
    pub(super) kernels: HashMap<String, Arc<tokio::sync::OnceCell<String>>>,
}

impl RuntimesProvider {
    /// Creates a runtime of the environment `artifact` names with credits for `minutes` at
    /// its burning rate (`credits_limit`), so the platform ends it then, and waits until its
    /// Jupyter Server answers.
    pub(super) async fn launch_with_credits_for(
        &self,
        artifact: &Artifact,
        labels: &RunLabels,
        minutes: f64,
    ) -> Result<(SandboxId, Vec<Timing>)> {
        let rate = self.environment().await?;
        let name = given_name(labels);
        self.client.volatiles().register("given_name", &name);
        let started = Instant::now();
        let created: Result<Created> = self
            .answer(
                self.api(Method::POST, "/runtimes")
                    .json(json!({
                        "type": "notebook",
                        "environment_name": artifact.id,
                        "given_name": name,
                        "credits_limit": rate * 60.0 * minutes,
                    }))
                    .idempotent(false),
                "create runtime",
            )
            .await;
        let runtime = match created {
            Ok(created) => created.runtime,
            Err(e) => {
                // An answer lost on the way (not a refusal) may still have made one: never
                // leave it behind, and say so when it cannot be removed.
                let mut left_behind = Vec::new();
                if e.retryable || matches!(e.kind, ErrorKind::Transport | ErrorKind::Timeout) {
                    match self.listed().await {
                        Ok(listed) => {
                            for left in listed
                                .iter()
                                .filter(|r| r.given_name.as_deref() == Some(&name))
                            {
                                if let Err(gone) = self.delete(&left.pod_name).await {
                                    left_behind.push(format!(
                                        "the runtime `{}` it made could not be deleted ({gone})",
                                        left.pod_name
                                    ));
                                }
                            }
                        }
                        Err(listing) => left_behind.push(format!(
                            "the runtimes could not be listed to find one it may have made \
                             ({listing})"
                        )),
                    }
                }
                let mut what = format!("launch environment `{}`", artifact.id);
                if !left_behind.is_empty() {
                    what.push_str(&format!(
                        "; {}: `sandbox-matrix sweep --run {}` removes what is left",
                        left_behind.join("; "),
                        labels.run_id
                    ));
                }
                return Err(e.context(what));
            }
        };
        let mut timings = vec![Timing {
            name: "runtime-create".into(),
            duration: started.elapsed(),
            resolution: None,
        }];
        let token = Secret::new("DATALAYER_RUNTIME_TOKEN", runtime.token.clone());
        self.client.add_secret(token.clone());
        let sandbox = SandboxId(runtime.pod_name.clone());
        let state = RuntimeState {
            ingress: runtime.ingress.clone(),
            token,
            kernels: HashMap::new(),
        };
        lock(&self.runtimes)?.insert(sandbox.0.clone(), state.clone());
        let ready = async {
            self.ingress_ready(&state, &mut timings).await?;
            let started = Instant::now();
            self.kernel(&sandbox, "").await?;
            timings.push(Timing {
                name: "kernel-start".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            Ok::<_, ProviderError>(())
        };
        match ready.await {
            Ok(()) => Ok((sandbox, timings)),
            Err(e) => {
                if let Err(delete) = self.delete(&sandbox.0).await {
                    tracing::warn!(runtime = %sandbox.0, "could not delete a runtime that never became ready: {delete}");
                }
                Err(e.context(format!("launch runtime {}", sandbox.0)))
            }
        }
    }

    /// Connects with [`API_KEY_VAR`] (not needed in replay), [`URL_VAR`] overriding the
    /// base URL and [`ENVIRONMENT_VAR`] naming the environment, all read from `settings`;
    /// live, with their test network settings.
    pub fn from_settings(
        mode: Mode,
        volatiles: Arc<Volatiles>,
        settings: &Settings,
    ) -> Result<Self> {
        let var = |name: &str| settings.var(name);
        let api_key = match (&mode, var(API_KEY_VAR)) {
            (Mode::Replay { .. }, _) => replay_key(),
            (_, Some(key)) => Secret::new(API_KEY_VAR, key),
            (_, None) => {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!("the {VARIANT} variant needs {API_KEY_VAR} in the environment"),
                ));
            }
        };
        let base = var(URL_VAR).unwrap_or_else(|| DEFAULT_RUNTIMES_URL.to_owned());
        let environment = var(ENVIRONMENT_VAR).unwrap_or_else(|| DEFAULT_ENVIRONMENT.to_owned());
        let network = settings.network_for(&mode)?;
        Self::with_network(&base, mode, api_key, volatiles, environment, &network)
    }

    /// A provider for the runtimes API at `base`; live, with the test network settings of
    /// the environment, if any (see [`crate::api::network`]).
    pub fn new(
        base: &str,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        environment: String,
    ) -> Result<Self> {
        let client = ApiClient::new(Self::settings(base, mode, &api_key, volatiles))?;
        Ok(Self::with_client(client, api_key, environment))
    }

    /// [`Self::new`], trusting `network`'s extra roots and resolving through its pin (an
    /// emulator reached through its HTTPS names).
    pub fn with_network(
        base: &str,
        mode: Mode,
        api_key: Secret,
        volatiles: Arc<Volatiles>,
        environment: String,
        network: &Network,
    ) -> Result<Self> {
        let client =
            ApiClient::with_network(Self::settings(base, mode, &api_key, volatiles), network)?;
        Ok(Self::with_client(client, api_key, environment))
    }

    pub(super) fn settings(
        base: &str,
        mode: Mode,
        api_key: &Secret,
        volatiles: Arc<Volatiles>,
    ) -> ApiSettings {
        ApiSettings {
            endpoints: Endpoints {
                api_base: base.trim_end_matches('/').to_owned(),
                // Unused: Jupyter is reached at each runtime's ingress.
                sandbox_domain: String::new(),
            },
            mode,
            credentials: vec![api_key.clone()],
            volatiles,
            call_timeout: CALL_TIMEOUT,
        }
    }

    pub(super) fn with_client(client: ApiClient, api_key: Secret, environment: String) -> Self {
        Self {
            client,
            api_key,
            environment,
            ready_deadline: READY_DEADLINE,
            runtimes: Mutex::default(),
            sockets: Mutex::default(),
            gone: Mutex::default(),
        }
    }

    /// Sets how long launch waits for the ingress and the first kernel (120 s unless set).
    pub fn with_ready_deadline(mut self, deadline: Duration) -> Self {
        self.ready_deadline = deadline;
        self
    }

    pub(super) fn api(&self, method: Method, path: &str) -> ApiRequest {
        ApiRequest::new(method, Target::Api, format!("{API}{path}"))
            .header("Authorization", format!("Bearer {}", self.api_key.expose()))
    }

    /// Calls the API and reads its answer, failing with the platform's message on a body
    /// that says `success: false`, whatever the status.
    pub(super) async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        request: ApiRequest,
        what: &str,
    ) -> Result<T> {
        let response = self.client.call(request.what(what)).await?;
        let answer: Answer<T> = response.json()?;
        let refused = |message: Option<String>| {
            ProviderError::new(
                ErrorKind::Api,
                format!(
                    "{what}: the platform answered success: false: {}",
                    message.as_deref().unwrap_or("(no message)")
                ),
            )
        };
        match answer {
            Answer {
                success: false,
                message,
                ..
            } => Err(refused(message)),
            Answer {
                body: Some(body), ..
            } => Ok(body),
            Answer { message, .. } => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{what}: the answer lacks what it should hold{}",
                    message.map(|m| format!(" ({m})")).unwrap_or_default()
                ),
            )),
        }
    }

    pub(super) fn channel<'a>(&'a self, state: &'a RuntimeState) -> Channel<'a> {
        Channel {
            client: &self.client,
            server: Server::Url(&state.ingress),
            // As Datalayer's kernel client sends it (jupyter-kernel-client 0.15.0,
            // `manager.py`); Jupyter Server takes `token` or `bearer` alike.
            admit: Some(("Authorization", "Bearer ", &state.token)),
        }
    }

    pub(super) fn next_socket(&self, kernel: &str) -> Result<usize> {
        let mut sockets = lock(&self.sockets)?;
        let n = sockets.entry(kernel.to_owned()).or_insert(0);
        *n += 1;
        Ok(*n)
    }

    /// The environment to launch, with its burning rate (credits a second).
    pub(super) async fn environment(&self) -> Result<f64> {
        let listed: Environments = self
            .answer(self.api(Method::GET, "/environments"), "list environments")
            .await?;
        let names: Vec<&str> = listed
            .environments
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        let found = listed
            .environments
            .iter()
            .find(|e| e.name == self.environment)
            .ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "the platform has no environment `{}` ({ENVIRONMENT_VAR}); it has: {}",
                        self.environment,
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ),
                )
            })?;
        match found.burning_rate {
            Some(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
            other => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "environment `{}` has no positive burning_rate ({}): no credits can be reserved",
                    self.environment,
                    other.map_or("none given".to_owned(), |rate| format!("it is {rate}"))
                ),
            )),
        }
    }

    /// Runtimes whose `given_name` is the run's, of `run_id` or of any run.
    pub(super) async fn listed(&self) -> Result<Vec<RuntimeRecord>> {
        let listed: Listed = self
            .answer(self.api(Method::GET, "/runtimes"), "list runtimes")
            .await?;
        Ok(listed.runtimes)
    }

    /// Deletes a runtime by its `pod_name`; one already gone is not an error.
    pub(super) async fn delete(&self, pod_name: &str) -> Result<Deleted> {
        let outcome = self
            .client
            .call(
                self.api(Method::DELETE, &format!("/runtimes/{pod_name}"))
                    .what("delete runtime"),
            )
            .await;
        lock(&self.runtimes)?.remove(pod_name);
        match outcome {
            Ok(_) => {
                lock(&self.gone)?.insert(pod_name.to_owned());
                Ok(Deleted::Removed)
            }
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e),
        }
    }

    /// Waits for the ingress's Jupyter Server, retrying 502, 503 and 504 (and a connection
    /// refused) while it warms up; any other answer fails at once.
    pub(super) async fn ingress_ready(
        &self,
        state: &RuntimeState,
        timings: &mut Vec<Timing>,
    ) -> Result<()> {
        let started = Instant::now();
        let channel = self.channel(state);
        let ((), resolution) = self
            .client
            .poll_until(
                "the runtime's Jupyter Server at its ingress",
                self.ready_deadline,
                || async {
                    let probe = channel
                        .request(Method::GET, "/api/status")
                        .idempotent(false)
                        .timeout(PROBE_TIMEOUT)
                        .what("Jupyter Server status");
                    match self.client.call(probe).await {
                        Ok(_) => Ok(Some(())),
                        Err(e) if e.retryable || e.kind == ErrorKind::Transport => Ok(None),
                        Err(e) => Err(e.context("the ingress refused the runtime's token")),
                    }
                },
            )
            .await?;
        timings.push(Timing {
            name: "ingress-ready".into(),
            duration: started.elapsed(),
            resolution: Some(resolution),
        });
        Ok(())
    }

    /// Starts a kernel on the runtime and waits until it answers.
    pub(super) async fn start_kernel(&self, state: &RuntimeState) -> Result<String> {
        let channel = self.channel(state);
        let kernel = channel.start_kernel(CALL_TIMEOUT).await?;
        let n = self.next_socket(&kernel)?;
        let mut socket = channel.open(&kernel, n, CALL_TIMEOUT).await?;
        let ready = socket.wait_ready(self.ready_deadline).await;
        socket.close().await;
        ready.map_err(|e| e.context(format!("wait for kernel {kernel}")))?;
        Ok(kernel)
    }

    /// The kernel of `context` on `sandbox`, started on first use (once, however many
    /// callers ask at the same time; contexts start side by side).
    pub(super) async fn kernel(
        &self,
        sandbox: &SandboxId,
        context: &str,
    ) -> Result<(RuntimeState, String)> {
        let (state, cell) = {
            let mut runtimes = lock(&self.runtimes)?;
            let kept = runtimes.get_mut(&sandbox.0).ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::NotFound,
                    format!("runtime {} was not launched by this provider", sandbox.0),
                )
            })?;
            let cell = kept.kernels.entry(context.to_owned()).or_default().clone();
            (kept.clone(), cell)
        };
        let kernel = cell
            .get_or_try_init(|| self.start_kernel(&state))
            .await?
            .clone();
        Ok((state, kernel))
    }

    /// Runs `code` on `kernel` over a socket of its own.
    pub(super) async fn execute(
        &self,
        state: &RuntimeState,
        kernel: &str,
        code: &str,
    ) -> Result<CodeOutput> {
        let n = self.next_socket(kernel)?;
        let mut socket = self.channel(state).open(kernel, n, CALL_TIMEOUT).await?;
        let output = socket.execute(code, EXECUTE_TIMEOUT).await;
        socket.close().await;
        output.map_err(|e| e.context(format!("execute code on kernel {kernel}")))
    }
}
