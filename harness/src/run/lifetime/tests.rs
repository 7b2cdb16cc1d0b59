use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandbox_providers::{
    Artifact, BuildRequest, Capabilities, CodeOutput, CommandOutput, Deleted, Housekeeping,
    LifetimeLimit, LogFn, Provider, ProviderError, Resource, Result, RunLabels, SandboxId,
    SandboxState, ShutdownReport, Timing,
};

use super::{Watch, watch};

#[test]
fn the_watch_scales_with_the_lifetime_within_bounds() {
    let s = Duration::from_secs;
    let short = Watch::new(s(6), s(30));
    assert_eq!((short.margin, short.every), (s(2), s(1)));
    let minute = Watch::new(s(60), s(90));
    assert_eq!((minute.margin, minute.every), (s(6), s(6)));
    let hour = Watch::new(s(3600), s(90));
    assert_eq!((hour.margin, hour.every), (s(360), s(30)));
    let tiny = Watch::new(s(1), s(30));
    assert_eq!(
        (tiny.margin, tiny.every),
        (Duration::from_millis(500), s(1))
    );
}

/// A sandbox that runs, answering `1+1`, until `ends` after `since`, and is stopped after.
struct EndsAt {
    since: Instant,
    ends: Duration,
}

#[async_trait]
impl Housekeeping for EndsAt {
    async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
        Ok(Vec::new())
    }

    async fn delete_resource(&self, _: &Resource) -> Result<Deleted> {
        Ok(Deleted::AlreadyGone)
    }
}

#[async_trait]
impl Provider for EndsAt {
    fn variant(&self) -> &str {
        "ends-at"
    }

    fn capabilities(&self) -> Capabilities {
        sandbox_providers::datalayer::runtimes::CAPABILITIES
    }

    async fn build(&self, _: &BuildRequest, _: &LogFn) -> Result<Artifact> {
        Err(ProviderError::unsupported("build"))
    }

    async fn launch(&self, _: &Artifact, _: &RunLabels) -> Result<(SandboxId, Vec<Timing>)> {
        Err(ProviderError::unsupported("launch"))
    }

    async fn run_code(&self, _: &SandboxId, _: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        let output = CodeOutput {
            result: Some("2".to_owned()),
            ..CodeOutput::default()
        };
        Ok((output, Vec::new()))
    }

    async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
        Err(ProviderError::unsupported("exec"))
    }

    async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
        Err(ProviderError::unsupported("restart"))
    }

    async fn shutdown(&self, _: &SandboxId, _: Duration) -> Result<ShutdownReport> {
        Err(ProviderError::unsupported("shutdown"))
    }

    async fn artifact_metadata(&self, _: &Artifact) -> Result<String> {
        Err(ProviderError::unsupported("artifact metadata"))
    }

    async fn sandbox_state(&self, _: &SandboxId) -> Result<Option<SandboxState>> {
        Ok(Some(if self.since.elapsed() < self.ends {
            SandboxState::Running
        } else {
            SandboxState::Stopped {
                ending: "ended by the test".to_owned(),
                exit_code: None,
                last_log_lines: Vec::new(),
            }
        }))
    }
}

/// Watches a sandbox asked to live 6 s (seen alive at 4 s, then looked at each second)
/// that ends `ends` after its create.
async fn watched(ends: Duration) -> (Option<Duration>, bool, std::result::Result<(), String>) {
    let started = Instant::now();
    let provider = Arc::new(EndsAt {
        since: started,
        ends,
    });
    let s = Duration::from_secs;
    let (seen, verdict) = watch(
        provider.as_ref(),
        LifetimeLimit::SinceCreate { unit_secs: 1 },
        Watch::new(s(6), s(30)),
        started,
        SandboxId("box".to_owned()),
        &|_: &str| {},
    )
    .await;
    (seen.gone_at, seen.early, verdict)
}

#[tokio::test]
async fn a_sandbox_gone_after_its_last_alive_look_but_before_its_limit_died_early() {
    // Alive at the look at 4 s, gone by the look at 5 s, one second before its limit.
    let (gone_at, early, verdict) = watched(Duration::from_millis(4_500)).await;
    let why = verdict.expect_err("a sandbox that ends before its limit fails the step");
    assert!(why.starts_with("died early: gone at "), "{why}");
    assert!(early, "{why}");
    assert!(
        gone_at.is_some_and(|at| at < Duration::from_secs(6)),
        "{gone_at:?}"
    );
}

#[tokio::test]
async fn a_sandbox_gone_just_after_its_limit_kept_it() {
    let (gone_at, early, verdict) = watched(Duration::from_millis(6_300)).await;
    assert_eq!(verdict, Ok(()));
    assert!(!early);
    assert!(
        gone_at.is_some_and(|at| at >= Duration::from_millis(6_300)),
        "{gone_at:?}"
    );
}
