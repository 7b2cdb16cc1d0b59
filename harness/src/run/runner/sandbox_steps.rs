//! The steps that start, ask and end one sandbox: launch (recorded in the ledger), first
//! result, restart, run-code and shutdown.

use super::*;

impl StepContext {
    pub(super) async fn launch(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        self.state().launched_at = Some(Instant::now());
        let sandbox = self.launch_recorded(&artifact, None).await?;
        self.state().sandbox = Some(sandbox);
        Ok(())
    }
    /// Launches a sandbox from `artifact` (with a lifetime limit, when given), recorded in
    /// the ledger before and after its create, and logs it and its timings.
    pub(super) async fn launch_recorded(
        &self,
        artifact: &Artifact,
        lifetime: Option<Duration>,
    ) -> Result<SandboxId, StepEnd> {
        let seq = self.intend("sandbox")?;
        let (sandbox, timings) = match lifetime {
            None => self.provider.launch(artifact, &self.labels).await?,
            Some(asked) => {
                self.provider
                    .launch_for(artifact, &self.labels, asked)
                    .await?
            }
        };
        self.record_created(
            seq,
            self.provider.sandbox_resource(&sandbox),
            "sandbox",
            &sandbox.0,
        );
        self.log.line(&format!("sandbox: {}", sandbox.0));
        self.log.timings(timings);
        Ok(sandbox)
    }
    pub(super) async fn first_result(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let Expectation::Answer { code, answer } = &self.step.expect else {
            return Err(StepEnd::Failed(
                "first-result has no expected answer".to_owned(),
            ));
        };
        let (output, timings) = self.provider.run_code(&sandbox, code).await?;
        let answered_at = Instant::now();
        self.log.timings(timings);
        self.log.line(&format!(
            "answer: {}",
            output.result.as_deref().unwrap_or("(none)")
        ));
        check_answer(code, answer, &output)?;
        let mut state = self.state();
        if let Some(launched_at) = state.launched_at.take() {
            state.timings.push(Timing {
                name: "create-to-first-result".into(),
                duration: answered_at - launched_at,
                resolution: None,
            });
        }
        Ok(())
    }
    pub(super) async fn restart(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let marker = format!("sm-marker-{:08x}", rand::rng().random::<u32>());
        self.volatiles.register("marker", &marker);
        let set = self
            .run_code(
                &sandbox,
                &format!("__sandbox_matrix_marker = \"{marker}\"\n__sandbox_matrix_marker"),
            )
            .await?;
        if set.result.as_deref() != Some(&format!("'{marker}'")) {
            return Err(StepEnd::Failed(format!(
                "could not set the marker before restarting: {}",
                describe(&set)
            )));
        }
        // The variant declares a stateful channel (stateless ones skip this step): a
        // marker that is gone before any restart would make the restart look right.
        let kept = self.run_code(&sandbox, "__sandbox_matrix_marker").await?;
        if kept.result.as_deref() != Some(&format!("'{marker}'")) {
            return Err(format!(
                "the code channel is declared stateful but kept nothing between two calls ({}), so the restart cannot be shown",
                describe(&kept)
            )
            .into());
        }
        let started = Instant::now();
        let timings = self.provider.restart(&sandbox).await?;
        self.log.timings(timings);
        let output = self.run_code(&sandbox, "1+1").await?;
        let answered = started.elapsed();
        check_answer("1+1", "2", &output).map_err(|e| format!("after the restart: {e}"))?;
        self.log.timings(vec![Timing {
            name: "restart-to-answer".into(),
            duration: answered,
            resolution: None,
        }]);
        let probe = self.run_code(&sandbox, "__sandbox_matrix_marker").await?;
        match probe.error.as_deref() {
            Some(e) if e.starts_with("NameError") => Ok(()),
            _ => Err(format!(
                "the marker set before the restart survived it: {}",
                describe(&probe)
            )
            .into()),
        }
    }
    pub(super) async fn run_code(
        &self,
        sandbox: &SandboxId,
        code: &str,
    ) -> Result<sandbox_providers::CodeOutput, StepEnd> {
        let (output, timings) = self.provider.run_code(sandbox, code).await?;
        self.log.timings(timings);
        Ok(output)
    }
    pub(super) async fn shutdown(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let Expectation::StoppedWithin(within) = self.step.expect else {
            return Err(StepEnd::Failed("shutdown has no deadline".to_owned()));
        };
        let grace = Duration::from_secs(sandbox_contract::GRACEFUL_SHUTDOWN_SECS);
        let started = Instant::now();
        let report = self.provider.shutdown(&sandbox, grace).await?;
        let took = started.elapsed();
        self.state().sandbox = None;
        let exit = report
            .exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default();
        let (ending, graceful) = match report.ending {
            ShutdownEnding::ExitedOnSigterm => ("exited on SIGTERM", Some(true)),
            ShutdownEnding::ExitedWithError => (
                "exited on SIGTERM with a code neither 0 nor SIGTERM's 143",
                Some(false),
            ),
            ShutdownEnding::AlreadyExited => {
                ("had already exited before the stop was sent", Some(false))
            }
            ShutdownEnding::Killed => ("killed after the grace period", Some(false)),
            ShutdownEnding::NotObservable => (NOT_OBSERVABLE, None),
            ShutdownEnding::Unknown => ("ended, how is not reported", None),
        };
        self.log.line(&format!("ending: {ending}{exit}"));
        // `graceful` is null when it could not be seen: never counted as a graceful exit.
        self.log.data(serde_json::json!({
            "graceful": graceful,
            "seconds": took.as_secs_f64(),
        }));
        let seconds = format!("{:.2} s", took.as_secs_f64());
        match report.ending {
            ShutdownEnding::Killed => Err(format!(
                "{ending} ({}s grace{exit}); stopped after {seconds}",
                grace.as_secs()
            )
            .into()),
            ShutdownEnding::Unknown => Err(format!(
                "the provider did not say how the sandbox ended, so a graceful exit cannot be told from a kill; stopped after {seconds}"
            )
            .into()),
            ShutdownEnding::ExitedWithError => {
                Err(format!("{ending}{exit}: not a clean exit; stopped after {seconds}").into())
            }
            ShutdownEnding::AlreadyExited => Err(format!(
                "the sandbox {ending}{exit}: it ended on its own (a crash, say), and no shutdown \
                 was seen"
            )
            .into()),
            _ if took > within => Err(format!(
                "stopped after {seconds}, over {}",
                humantime::format_duration(within)
            )
            .into()),
            ShutdownEnding::ExitedOnSigterm | ShutdownEnding::NotObservable => Ok(()),
        }
    }
}
