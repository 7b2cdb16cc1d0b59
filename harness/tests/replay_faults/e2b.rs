//! The e2b variant, replayed from its lifecycle cassette with one exchange broken: a
//! sandbox that never gets ready, a socket reset mid-answer, a rate-limited create.

use std::time::{Duration, Instant};

use crate::{assert_terminal, common, junit, reason};

use sandbox_matrix::model::results::{Replay, ReplayPace, ScenarioResult, Source, StepStatus};
use sandbox_providers::api::cassette::Body;
use sandbox_providers::api::replay::{Observed, Pace};
use sandbox_providers::api::{Cassette, Exchange};

const LIFECYCLE: &str = "  - step: build\n    budget: 60s\n  - step: launch\n    budget: 2s\n  - step: first-result\n    budget: 10s\n  - step: cleanup\n    budget: 30s\n";

/// The lifecycle cassette's exchanges, and the index of the first one `what` picks.
struct Cut {
    exchanges: Vec<Exchange>,
}

impl Cut {
    fn lifecycle() -> Self {
        let cassette =
            Cassette::load(&common::root().join("fixtures/cassettes/e2b/lifecycle.yaml"))
                .expect("the e2b lifecycle cassette");
        Self {
            exchanges: cassette.exchanges,
        }
    }

    fn find(&self, method: &str, path: impl Fn(&str) -> bool) -> usize {
        self.exchanges
            .iter()
            .position(|e| e.request.method == method && path(&e.request.path))
            .expect("the lifecycle cassette has this exchange")
    }

    /// E2B's answer about `sandbox` after a step failed: the recorded `GET
    /// /sandboxes/{id}` of the lifecycle (its 404 after the kill), or, with a `state`, the
    /// sandbox's detail in that state, answered as often as it is asked.
    fn sandbox_state(&self, sandbox: &str, state: Option<&str>) -> Exchange {
        let at = self.find("GET", |p| p == format!("/sandboxes/{sandbox}"));
        let mut asked = self.exchanges[at].clone();
        assert_eq!(asked.response.status, 404, "{asked:?}");
        if let Some(state) = state {
            asked.response.status = 200;
            asked.response.body = Some(Body::Json(serde_json::json!({
                "templateID": "tpl0001", "sandboxID": sandbox, "clientID": "replay",
                "startedAt": "2026-12-06T00:00:00Z", "endAt": "2026-12-06T01:00:00Z",
                "cpuCount": 2, "memoryMB": 1024, "diskSizeMB": 5120, "state": state,
                "envdVersion": "0.1.3",
            })));
            asked.repeat = true;
        }
        asked
    }

    /// Cleanup that finds the sandbox still running and deletes it, then what the
    /// recorded cleanup did (templates).
    fn cleanup_finding_the_sandbox(&self, sandbox: &str) -> Vec<Exchange> {
        let list = self.find("GET", |p| p.starts_with("/v2/sandboxes?"));
        let mut listed = self.exchanges[list].clone();
        listed.response.body = Some(Body::Json(serde_json::json!([{
            "sandboxID": sandbox,
            "metadata": {
                "sandbox-matrix.run": "<run-id>",
                "sandbox-matrix.scenario": "lifecycle",
                "sandbox-matrix.variant": "e2b",
            },
        }])));
        let delete = self.find("DELETE", |p| p.starts_with("/sandboxes/"));
        let mut out = vec![listed];
        out.push(self.exchanges[list + 1].clone());
        out.push(self.exchanges[delete].clone());
        out.extend_from_slice(&self.exchanges[list + 2..]);
        out
    }
}

fn cassette(exchanges: Vec<Exchange>, note: &str) -> Cassette {
    Cassette {
        origin: "cut from the e2b lifecycle cassette".into(),
        written: None,
        variant: "e2b".into(),
        scenario: "lifecycle".into(),
        note: Some(note.into()),
        exchanges,
    }
}

async fn run(cassette: Cassette) -> (ScenarioResult, Vec<Observed>, String, Duration) {
    let scenario = common::temp_scenario("lifecycle", LIFECYCLE);
    let started = Instant::now();
    let origin = cassette.origin.clone();
    let (mut result, server) = common::replay_e2b(cassette, &scenario, Pace::Instant).await;
    let took = started.elapsed();
    // Served from a cassette built here, not through `run`'s replay session: said so, as
    // `run` says it.
    result.source = Source::Replay {
        replay: Replay {
            cassette: "a cut of fixtures/cassettes/e2b/lifecycle.yaml".into(),
            origin: Some(origin),
            written: None,
            pace: ReplayPace::Instant,
        },
    };
    let junit = junit(&result);
    (result, server.observed(), junit, took)
}

fn deleted(observed: &[Observed], sandbox: &str) -> bool {
    observed.iter().any(|o| {
        o.method == "DELETE" && o.path == format!("/sandboxes/{sandbox}") && o.exchange.is_some()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_never_gets_ready_fails_launch_at_its_budget_and_is_still_deleted() {
    let cut = Cut::lifecycle();
    let create = cut.find("POST", |p| p == "/sandboxes");
    let mut unhealthy = cut.exchanges[create + 1].clone();
    assert!(unhealthy.request.path.ends_with("/api"), "{unhealthy:?}");
    unhealthy.response.status = 502;
    unhealthy.response.body = Some(Body::Text("upstream not ready".into()));
    unhealthy.repeat = true;
    let mut exchanges = cut.exchanges[..=create].to_vec();
    exchanges.push(unhealthy);
    exchanges.extend(cut.cleanup_finding_the_sandbox("sbx0002"));
    let (result, observed, junit, took) = run(cassette(
        exchanges,
        "the template's Jupyter Server never answers",
    ))
    .await;
    assert_terminal(
        "e2b__a_sandbox_that_never_gets_ready_fails_launch_at_its_budget_and_is_still_deleted",
        &result,
    );
    let why = reason(&result, "launch");
    assert!(why.contains("exceeded its budget of 2s"), "{why}");
    assert!(took < Duration::from_secs(10), "the run took {took:?}");
    assert_eq!(
        result.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed)
    );
    assert!(
        deleted(&observed, "sbx0002"),
        "cleanup never deleted the sandbox: {observed:#?}"
    );
    assert!(junit.contains("exceeded its budget of 2s"), "{junit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_answer_fails_first_result_with_the_cause_in_junit() {
    let cut = Cut::lifecycle();
    // The kernel's second socket: the first waited for the kernel at launch.
    let execute = cut.find("GET", |p| {
        p.contains("/channels?session_id=") && p.ends_with("-2")
    });
    let mut exchanges = cut.exchanges[..=execute].to_vec();
    exchanges[execute].response.reset_after_bytes = Some(20);
    // E2B still has the sandbox running: the failure keeps what the step saw.
    exchanges.push(cut.sandbox_state("sbx0002", Some("running")));
    exchanges.extend(cut.cleanup_finding_the_sandbox("sbx0002"));
    let (result, observed, junit, _) = run(cassette(
        exchanges,
        "the kernel's socket drops, with no close, 20 bytes into the answer to 1+1; the sandbox runs on",
    ))
    .await;
    assert_terminal(
        "e2b__a_reset_mid_answer_fails_first_result_with_the_cause_in_junit",
        &result,
    );
    let why = reason(&result, "first-result");
    assert!(
        why.contains("Connection reset without closing handshake"),
        "{why}"
    );
    let executes = observed
        .iter()
        .filter(|o| o.path.contains("/channels?"))
        .count();
    assert_eq!(
        executes, 2,
        "code was sent again after a reset (one socket at launch, one for 1+1): {observed:#?}"
    );
    assert!(
        deleted(&observed, "sbx0002"),
        "cleanup never deleted the sandbox: {observed:#?}"
    );
    assert!(
        junit.contains("Connection reset without closing handshake"),
        "{junit}"
    );
    let asked = observed
        .iter()
        .filter(|o| o.method == "GET" && o.path == "/sandboxes/sbx0002")
        .count();
    assert!(
        asked > 1,
        "a running sandbox is asked again before it is believed: {observed:#?}"
    );
    assert!(
        observed.iter().all(|o| o.exchange.is_some()),
        "the client asked only what the cassette holds: {observed:#?}"
    );
}

/// The sandbox dies while it computes 1+1: the socket drops, E2B no longer has the
/// sandbox, and its last log lines are read; the failure says so, with those lines, and
/// what the step saw stays in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_ends_mid_answer_is_said_gone_with_its_last_log_lines() {
    let cut = Cut::lifecycle();
    let execute = cut.find("GET", |p| {
        p.contains("/channels?session_id=") && p.ends_with("-2")
    });
    let mut exchanges = cut.exchanges[..=execute].to_vec();
    exchanges[execute].response.reset_after_bytes = Some(20);
    exchanges.push(cut.sandbox_state("sbx0002", None));
    let mut logs = cut.sandbox_state("sbx0002", Some("running"));
    logs.request.path = "/v2/sandboxes/sbx0002/logs?limit=20&direction=backward".into();
    logs.repeat = false;
    logs.response.body = Some(Body::Json(serde_json::json!({"logs": [
        {"timestamp": "2026-12-06T00:00:02Z", "level": "error", "message": "Killed", "fields": {}},
        {"timestamp": "2026-12-06T00:00:01Z", "level": "info", "message": "[I ServerApp] Kernel started", "fields": {}},
    ]})));
    exchanges.push(logs);
    exchanges.extend(cut.cleanup_finding_the_sandbox("sbx0002"));
    let (result, observed, junit, _) = run(cassette(
        exchanges,
        "the sandbox ends 20 bytes into the answer to 1+1; E2B no longer has it",
    ))
    .await;
    assert_terminal(
        "e2b__a_sandbox_that_ends_mid_answer_is_said_gone_with_its_last_log_lines",
        &result,
    );
    assert_eq!(
        reason(&result, "first-result"),
        "the sandbox stopped during first-result: E2B no longer has it (it was killed, ran out of memory or passed its timeout); its last 2 log lines:\n    | [I ServerApp] Kernel started\n    | Killed"
    );
    let log = &result.step("first-result").expect("ran").log;
    assert!(
        log.iter().any(|l| l.starts_with("what the step saw: ")
            && l.contains("Connection reset without closing handshake")),
        "{log:#?}"
    );
    assert!(junit.contains("E2B no longer has it"), "{junit}");
    assert!(
        deleted(&observed, "sbx0002"),
        "cleanup never deleted the sandbox: {observed:#?}"
    );
    assert!(
        observed.iter().all(|o| o.exchange.is_some()),
        "the client asked only what the cassette holds: {observed:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_create_is_retried_after_retry_after_and_the_run_passes() {
    let cut = Cut::lifecycle();
    let create = cut.find("POST", |p| p == "/sandboxes");
    let mut limited = cut.exchanges[create].clone();
    limited.response.status = 429;
    limited
        .response
        .headers
        .insert("retry-after".into(), "1".into());
    limited.response.body = Some(Body::Json(
        serde_json::json!({"code": 429, "message": "rate limited"}),
    ));
    // The lifecycle's steps of this scenario: up to the answer to 1+1, then cleanup.
    let execute = cut.find("GET", |p| {
        p.contains("/channels?session_id=") && p.ends_with("-2")
    });
    let mut exchanges = cut.exchanges[..=execute].to_vec();
    exchanges.insert(create, limited);
    exchanges.extend(cut.cleanup_finding_the_sandbox("sbx0002"));
    let (result, observed, _, _) =
        run(cassette(exchanges, "the create is answered 429 once")).await;
    assert_terminal(
        "e2b__a_rate_limited_create_is_retried_after_retry_after_and_the_run_passes",
        &result,
    );
    for step in ["build", "launch", "first-result", "cleanup"] {
        assert_eq!(
            result.step(step).map(|s| &s.status),
            Some(&StepStatus::Passed),
            "{step}"
        );
    }
    assert!(
        observed.iter().all(|o| o.exchange.is_some()),
        "the client asked only what the cassette holds: {observed:#?}"
    );
    let creates: Vec<u16> = observed
        .iter()
        .filter(|o| o.method == "POST" && o.path == "/sandboxes")
        .map(|o| o.status)
        .collect();
    assert_eq!(creates, vec![429, 201]);
}
