//! The steps that check a sandbox: the base-image chain, the conformance checks and their
//! probes, run through [`CheckTarget`].

use super::*;

impl StepContext {
    /// Pulls the artifact's provenance from where the provider keeps it and judges the base
    /// it names ([`chain::audit`]): fails on a provenance it cannot read as the launched
    /// image's, and on a base that is not approved.
    pub(super) async fn base_chain(&self) -> Result<(), StepEnd> {
        let artifact = self.artifact()?;
        let pulled = self.provider.provenance(&artifact).await?;
        self.log
            .line(&format!("provenance pulled from {}", pulled.from));
        let chain = chain::audit(
            &artifact.id,
            &pulled,
            self.base.approved.as_ref(),
            sandbox_providers::docker::base::BASE_IMAGE,
        )
        .map_err(StepEnd::Failed)?;
        self.log.line(&format!(
            "base {} ({}): {}",
            chain.base, chain.base_digest, chain.approval
        ));
        let verdict = chain.approved.then_some(()).ok_or_else(|| {
            StepEnd::Failed(format!(
                "the provenance of {} names the base {} ({}), {}",
                chain.launched, chain.base, chain.base_digest, chain.approval
            ))
        });
        self.state().base_chain = Some(chain);
        verdict
    }
    /// Runs a probe: through the kernel, or, where the kernel cannot run code and the
    /// variant has a shell, through `python3 -c` as the sandbox's default user, so that a
    /// broken kernel fails the kernel checks without hiding what the others would find.
    pub(super) async fn probe(&self, code: &str) -> Result<serde_json::Value, StepEnd> {
        let sandbox = self.sandbox()?;
        let stdout = match self.provider.run_code(&sandbox, code).await {
            Ok((output, timings)) => {
                self.log.timings(timings);
                if let Some(error) = output.error {
                    return Err(format!("the probe raised {error}").into());
                }
                output.stdout
            }
            Err(kernel_error) if self.provider.capabilities().exec_as_root => {
                self.log.line(&format!(
                    "the kernel cannot run code ({kernel_error}); probing through python3 instead"
                ));
                self.python_exec(&sandbox, code, false).await?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(conformance::parse_answer(&stdout)?)
    }
    /// Runs conformance check `check`; its verdict decides the step and its answer is kept.
    pub(super) async fn check(&self, check: Check, params: &CheckParams) -> Result<(), StepEnd> {
        let verdict = suite::run(self, check, params).await?;
        self.log.data(verdict.data);
        if let Some(reason) = verdict.skipped {
            return Err(StepEnd::Skipped(reason));
        }
        match (verdict.passed, verdict.detail) {
            (true, Some(detail)) => {
                self.log.line(&detail);
                Ok(())
            }
            (true, None) => Ok(()),
            (false, detail) => Err(StepEnd::Failed(
                detail.unwrap_or_else(|| "failed".to_owned()),
            )),
        }
    }
}

impl CheckTarget for StepContext {
    fn capabilities(&self) -> Capabilities {
        self.provider.capabilities()
    }

    async fn probe(&self, code: &str) -> Result<serde_json::Value, StepEnd> {
        StepContext::probe(self, code).await
    }

    async fn run_code(&self, code: &str) -> Result<sandbox_providers::CodeOutput, StepEnd> {
        let sandbox = self.sandbox()?;
        StepContext::run_code(self, &sandbox, code).await
    }

    async fn run_code_in(
        &self,
        context: &str,
        code: &str,
    ) -> Result<sandbox_providers::CodeOutput, ProviderError> {
        let sandbox = self
            .sandbox()
            .map_err(|_| ProviderError::new(ErrorKind::Config, "no running sandbox"))?;
        self.provider.run_code_in(&sandbox, context, code).await
    }

    async fn restart(&self) -> Result<(), StepEnd> {
        let sandbox = self.sandbox()?;
        let timings = self.provider.restart(&sandbox).await?;
        self.log.timings(timings);
        Ok(())
    }

    async fn find_secrets(&self) -> Result<Vec<String>, StepEnd> {
        StepContext::find_secrets(self).await
    }

    fn measured(&self, name: &str) -> Option<Duration> {
        self.state()
            .timings
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.duration)
    }
}

/// Whether a secrets scan that found nothing tested something: it read a file, and read
/// everything as root unless `accepted` (the step's `accept_partial:` names `variant`).
pub(super) fn judge_coverage(
    coverage: &ScanCoverage,
    accepted: bool,
    variant: &str,
) -> Result<(), String> {
    if coverage.files_scanned == 0 {
        return Err(format!(
            "{} read 0 files, so it tested nothing",
            coverage.scanner
        ));
    }
    if coverage.partial() && !accepted {
        return Err(format!(
            "the secrets scan was {}: {} ran as uid {} and could not read {} files, so a secret readable only by root would not be seen; where the variant offers no root, accept it with `accept_partial: [{variant}]` on the step",
            coverage.describe(),
            coverage.scanner,
            coverage.uid,
            coverage.unreadable,
        ));
    }
    Ok(())
}
