//! One step as it runs: [`StepContext`], what every step's code reaches (the provider,
//! the scenario's state, the ledger, the step's log), and the dispatch to the step's kind.

use super::*;

pub(super) struct StepContext {
    pub(super) provider: Arc<dyn Provider>,
    pub(super) step: Step,
    pub(super) environment: std::path::PathBuf,
    pub(super) labels: RunLabels,
    /// Every secret of the run, searched for and redacted.
    pub(super) secrets: Vec<Secret>,
    /// The fake canary, the one secret handed to builds as a build argument.
    pub(super) canary: Secret,
    pub(super) base: Arc<RunBase>,
    pub(super) state: Arc<Mutex<ScenarioState>>,
    pub(super) log: StepLog,
    pub(super) volatiles: Arc<Volatiles>,
    pub(super) ledger: Option<Arc<Ledger>>,
    /// Set when the scenario shares its build (see [`SharedBuilds`]).
    pub(super) sharing: Option<Sharing>,
    /// The run was interrupted before the step started.
    pub(super) interrupted: bool,
}

impl StepContext {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, ScenarioState> {
        self.state.lock().expect("scenario state lock")
    }

    /// Records in the ledger, fsynced, that a `kind` is about to be created; nothing is
    /// created when it cannot be recorded.
    pub(super) fn intend(&self, kind: &str) -> Result<Option<u64>, StepEnd> {
        self.ledger
            .as_ref()
            .map(|l| l.intent(&self.labels, kind))
            .transpose()
            .map_err(|e| StepEnd::Failed(format!("{e}: nothing created")))
    }

    /// Records the provider's id for what intent `seq` created, as the resource
    /// `removable` names (which cleanup and sweep then delete), else as `kind` and `id`.
    pub(super) fn record_created(
        &self,
        seq: Option<u64>,
        removable: Option<sandbox_providers::Resource>,
        kind: &str,
        id: &str,
    ) {
        let (Some(ledger), Some(seq)) = (&self.ledger, seq) else {
            return;
        };
        let written = match removable {
            Some(resource) => ledger.created(seq, &self.labels, &resource, true),
            None => ledger.created(
                seq,
                &self.labels,
                &sandbox_providers::Resource {
                    kind: kind.to_owned(),
                    id: id.to_owned(),
                },
                false,
            ),
        };
        if let Err(e) = written {
            self.log.line(&format!("warning: {e}"));
        }
    }

    pub(super) fn artifact(&self) -> Result<Artifact, StepEnd> {
        self.state().artifact.clone().ok_or_else(|| {
            StepEnd::Failed(format!(
                "`{}` needs an artifact: put a `build` step before it",
                self.step.kind
            ))
        })
    }

    pub(super) fn sandbox(&self) -> Result<SandboxId, StepEnd> {
        self.state().sandbox.clone().ok_or_else(|| {
            StepEnd::Failed(format!(
                "`{}` needs a running sandbox: put a `launch` step before it",
                self.step.kind
            ))
        })
    }

    pub(super) async fn run(self) -> Result<(), StepEnd> {
        match self.step.kind {
            StepKind::Build => self.build().await,
            StepKind::Rebuild => self.rebuild().await,
            StepKind::Launch => self.launch().await,
            StepKind::FirstResult => self.first_result().await,
            StepKind::Restart => self.restart().await,
            StepKind::BaseChain => self.base_chain().await,
            StepKind::SecretsScan => self.secrets_scan().await,
            StepKind::Shutdown => self.shutdown().await,
            StepKind::Cleanup => self.cleanup().await,
            StepKind::Lifetime => self.lifetime().await,
            StepKind::Burst | StepKind::Sequential | StepKind::Staggered => {
                self.launch_many().await
            }
            StepKind::Doctor | StepKind::Check => match &self.step.expect {
                Expectation::Check(check, params) => self.check(*check, params).await,
                _ => Err(StepEnd::Failed("a check step without its check".to_owned())),
            },
        }
    }
}
