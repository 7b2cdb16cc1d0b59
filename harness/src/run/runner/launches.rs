//! The steps that launch sandboxes of their own and watch them: the boards' modes
//! (`sequential`, `staggered`, `burst`), each launch timed from its create, and `lifetime`.

use super::*;

impl StepContext {
    /// Launches `n` sandboxes as the step's [`LaunchMode`] paces them and times each
    /// ([`launch_once`]): the public boards' TTI, our stricter create to first `1+1`, and
    /// the first and second command's own durations. A launch that fails is a failed
    /// attempt of every timing it did not reach. Sandboxes are stopped once timed (in
    /// `sequential`, each before the next create); cleanup removes them.
    pub(super) async fn launch_many(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        let Expectation::Launches(launches, mode) = self.step.expect else {
            return Err(StepEnd::Failed(format!(
                "{} has no launch count",
                self.step.name()
            )));
        };
        let grace = Duration::from_secs(sandbox_contract::GRACEFUL_SHUTDOWN_SECS);
        let mut attempts: Vec<Option<LaunchTimes>> = vec![None; launches as usize];
        let mut sandboxes = Vec::new();
        if mode == LaunchMode::Sequential {
            for index in 0..launches {
                self.intend("sandbox")?;
                let (times, sandbox) =
                    launch_once(self.provider.clone(), artifact.clone(), self.labels.clone()).await;
                if let Some(sandbox) = sandbox
                    && let Err(e) = self.provider.shutdown(&sandbox, grace).await
                {
                    self.log
                        .line(&format!("stopping {}: {e} (cleanup removes it)", sandbox.0));
                }
                attempts[index as usize] = Some(times);
            }
        } else {
            let interval = match mode {
                LaunchMode::Staggered(interval) => interval,
                _ => Duration::ZERO,
            };
            let began = tokio::time::Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for index in 0..launches {
                self.intend("sandbox")?;
                let (provider, artifact, labels) =
                    (self.provider.clone(), artifact.clone(), self.labels.clone());
                let at = began + interval * index;
                tasks.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    (index, launch_once(provider, artifact, labels).await)
                });
            }
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok((index, (times, sandbox))) => {
                        sandboxes.extend(sandbox);
                        attempts[index as usize] = Some(times);
                    }
                    Err(e) => self
                        .log
                        .line(&format!("a launch task ended abnormally: {e}")),
                }
            }
            // Stopped after every launch was timed, so stopping does not load the others.
            let stops = sandboxes
                .iter()
                .map(|sandbox| self.provider.shutdown(sandbox, grace));
            for (sandbox, stopped) in sandboxes
                .iter()
                .zip(futures_util::future::join_all(stops).await)
            {
                if let Err(e) = stopped {
                    self.log
                        .line(&format!("stopping {}: {e} (cleanup removes it)", sandbox.0));
                }
            }
        }
        let mut samples = Vec::new();
        let mut failures = Vec::new();
        for (index, times) in attempts.into_iter().enumerate() {
            let times = times.unwrap_or_else(|| LaunchTimes::failed("its task ended abnormally"));
            if let Some(error) = &times.error {
                failures.push(format!("launch {}: {error}", index + 1));
            }
            samples.extend(times.samples(index + 1));
        }
        self.log.line(&format!(
            "{} of {launches}: {} answered `1+1`, {} failed; TTI's first command: {}",
            self.step.name(),
            launches as usize - failures.len(),
            failures.len(),
            FIRST_COMMAND.join(" ")
        ));
        let first_failure = failures.first().cloned();
        let failed = failures.len();
        self.state().samples.extend(samples);
        match first_failure {
            None => Ok(()),
            Some(first) => Err(StepEnd::Failed(format!(
                "{failed} of {launches} launches failed; the first: {first}"
            ))),
        }
    }

    /// Launches a sandbox asking the provider to end it after the step's `timeout`, and
    /// watches it ([`lifetime::watch`]): fails when it dies before, or outlives it by more
    /// than `within`. The sandbox is stopped if it is still there; cleanup removes it.
    pub(super) async fn lifetime(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        let Expectation::Ends { timeout, within } = self.step.expect else {
            return Err(StepEnd::Failed("lifetime has no timeout".to_owned()));
        };
        let limit = self.provider.capabilities().lifetime;
        let Some(asked) = limit.asked(timeout) else {
            return Err(StepEnd::Failed(
                "this variant cannot bound a sandbox's lifetime".to_owned(),
            ));
        };
        if asked != timeout {
            self.log.line(&format!(
                "asking {} (the provider's unit) for the {} timeout",
                humantime::format_duration(asked),
                humantime::format_duration(timeout)
            ));
        }
        let started = Instant::now();
        let sandbox = self.launch_recorded(&artifact, Some(asked)).await?;
        let line = |text: &str| self.log.line(text);
        let (seen, verdict) = lifetime::watch(
            self.provider.as_ref(),
            limit,
            lifetime::Watch::new(asked, within),
            started,
            sandbox.clone(),
            &line,
        )
        .await;
        if seen.gone_at.is_none() {
            let grace = Duration::from_secs(sandbox_contract::GRACEFUL_SHUTDOWN_SECS);
            if let Err(e) = self.provider.shutdown(&sandbox, grace).await {
                self.log
                    .line(&format!("stopping {}: {e} (cleanup removes it)", sandbox.0));
            }
        }
        self.state().lifetime = Some(seen);
        verdict.map_err(StepEnd::Failed)
    }
}

/// What one launch of a `burst`, `sequential` or `staggered` step measured.
#[derive(Debug, Clone, Default)]
struct LaunchTimes {
    /// From the create to the launch's return.
    created: Option<Duration>,
    /// From the create to the first command's success: the boards' TTI.
    tti: Option<Duration>,
    /// The first command's own duration.
    first_command: Option<Duration>,
    /// From the create to the first correct `1+1`.
    first_result: Option<Duration>,
    /// The second command's own duration, after the first `1+1`.
    second_command: Option<Duration>,
    /// Why the launch stopped short, where it did.
    error: Option<String>,
}

impl LaunchTimes {
    pub(super) fn failed(error: &str) -> Self {
        Self {
            error: Some(error.to_owned()),
            ..Self::default()
        }
    }

    /// One sample per timing of launch `number`, a failed attempt where it was not reached.
    pub(super) fn samples(&self, number: usize) -> Vec<Sample> {
        [
            (CREATED, self.created),
            (TTI, self.tti),
            (FIRST_COMMAND_SAMPLE, self.first_command),
            (CREATE_TO_FIRST_RESULT, self.first_result),
            (SECOND_COMMAND_SAMPLE, self.second_command),
        ]
        .into_iter()
        .map(|(name, value)| Sample {
            name: name.to_owned(),
            value,
            error: match (value, &self.error) {
                (None, Some(error)) => Some(format!("launch {number}: {error}")),
                (None, None) => Some(format!("launch {number}: not measured")),
                (Some(_), _) => None,
            },
        })
        .collect()
    }
}

/// One launch, timed from its create: the launch, [`FIRST_COMMAND`] (TTI), the first
/// correct `1+1`, then the command again. Returns its times and the sandbox, if one came.
async fn launch_once(
    provider: Arc<dyn Provider>,
    artifact: Artifact,
    labels: RunLabels,
) -> (LaunchTimes, Option<SandboxId>) {
    let started = Instant::now();
    let mut times = LaunchTimes::default();
    let sandbox = match provider.launch(&artifact, &labels).await {
        Ok((sandbox, _)) => sandbox,
        Err(e) => return (LaunchTimes::failed(&format!("launch: {e}")), None),
    };
    times.created = Some(started.elapsed());
    let command: Vec<String> = FIRST_COMMAND.iter().map(|s| (*s).to_owned()).collect();
    let run_command = async || {
        let called = Instant::now();
        match provider.exec(&sandbox, &command, false).await {
            Ok(out) if out.exit_code == Some(0) => Ok(called.elapsed()),
            Ok(out) => Err(format!(
                "`{}` {}: {}",
                FIRST_COMMAND.join(" "),
                out.exit_code.map_or_else(
                    || "ended with no exit code".to_owned(),
                    |c| format!("exited {c}")
                ),
                out.stderr.trim()
            )),
            Err(e) => Err(format!("`{}`: {e}", FIRST_COMMAND.join(" "))),
        }
    };
    match run_command().await {
        Ok(took) => {
            times.first_command = Some(took);
            times.tti = Some(started.elapsed());
        }
        Err(e) => {
            times.error = Some(format!("first command: {e}"));
            return (times, Some(sandbox));
        }
    }
    let answered = provider
        .run_code(&sandbox, crate::run::scenario::DEFAULT_CODE)
        .await
        .map_err(|e| e.to_string())
        .and_then(|(output, _)| {
            check_answer(
                crate::run::scenario::DEFAULT_CODE,
                crate::run::scenario::DEFAULT_ANSWER,
                &output,
            )
        });
    match answered {
        Ok(()) => times.first_result = Some(started.elapsed()),
        Err(e) => {
            times.error = Some(format!("first result: {e}"));
            return (times, Some(sandbox));
        }
    }
    match run_command().await {
        Ok(took) => times.second_command = Some(took),
        Err(e) => times.error = Some(format!("second command: {e}")),
    }
    (times, Some(sandbox))
}
