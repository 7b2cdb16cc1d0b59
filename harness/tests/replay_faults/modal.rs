//! The modal variant, replayed at the gRPC layer from its lifecycle cassette with what
//! `emulate modal` recorded under a fault put in its place: a create answered UNAVAILABLE
//! once, a build that fails, a sandbox that never gets a task, a router JWT that expires
//! between two reads, and a terminate of a sandbox that has already ended.

use std::time::Duration;

use sandbox_matrix::model::results::ScenarioResult;
use sandbox_providers::api::grpc::{GrpcCassette, GrpcExchange};
use sandbox_providers::api::replay::Pace;
use sandbox_providers::modal;

use crate::{
    EVERY_STEP, assert_passed, assert_skipped, assert_terminal, common, junit, reason, replay,
};

const VARIANT: &str = "modal";

/// gRPC's UNAVAILABLE.
const UNAVAILABLE: i32 = 14;
/// gRPC's UNAUTHENTICATED.
const UNAUTHENTICATED: i32 = 16;

/// The calls of a recorded cassette of this variant, `lifecycle` or `faults/<name>`.
fn recorded(name: &str) -> Vec<GrpcExchange> {
    GrpcCassette::load(
        &common::root()
            .join("fixtures/cassettes/modal")
            .join(format!("{name}.yaml")),
        modal::proto::descriptors(),
    )
    .unwrap_or_else(|e| panic!("the {name} cassette loads: {e}"))
    .exchanges
}

/// The short name of a call's method (`SandboxCreate`).
fn rpc(exchange: &GrpcExchange) -> &str {
    exchange.method.rsplit('/').next().unwrap_or_default()
}

/// `call` answered as `fault` was: no message, its status and trailer message.
fn answered_as(call: &GrpcExchange, fault: &GrpcExchange) -> GrpcExchange {
    GrpcExchange {
        responses: Vec::new(),
        status: fault.status,
        message: fault.message.clone(),
        ..call.clone()
    }
}

/// The recorded lifecycle, by the steps of [`crate::STEPS`]; the restart's and the secrets
/// scan's execs are left out.
struct Lifecycle {
    calls: Vec<GrpcExchange>,
}

impl Lifecycle {
    fn load() -> Self {
        Self {
            calls: recorded("lifecycle"),
        }
    }

    /// The index of the `n`th call (from 0) to `method`.
    fn nth(&self, method: &str, n: usize) -> usize {
        self.calls
            .iter()
            .enumerate()
            .filter(|(_, c)| rpc(c) == method)
            .nth(n)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("the lifecycle has {} {method} calls", n + 1))
    }

    /// Build, launch (the channel's install and wait is the first exec) and the 1+1 (the
    /// second), up to and without the call at `end`.
    fn to(&self, end: usize) -> Vec<GrpcExchange> {
        self.calls[..end].to_vec()
    }

    /// The end of the 1+1's exec (one past its `TaskExecWait`).
    fn first_result_end(&self) -> usize {
        self.nth("TaskExecWait", 1) + 1
    }

    /// Shutdown (terminate and wait) and cleanup.
    fn shutdown_and_cleanup(&self) -> Vec<GrpcExchange> {
        self.calls[self.nth("SandboxTerminate", 0)..].to_vec()
    }

    /// Cleanup finding the sandbox still there: its listing answered with the sandbox the
    /// create made, under the run's tags, then shutdown's terminate and wait, the image's
    /// delete and the listing that finds nothing left.
    fn cleanup_finding_the_sandbox(&self) -> Vec<GrpcExchange> {
        let create = &self.calls[self.nth("SandboxCreate", 0)];
        let list = self.nth("SandboxList", 0);
        let mut listed = self.calls[list].clone();
        listed.responses = vec![serde_json::json!({
            "sandboxes": [{
                "id": create.responses[0]["sandbox_id"],
                "app_id": create.request["app_id"],
                "tags": create.request["tags"],
            }],
        })];
        let terminate = self.nth("SandboxTerminate", 0);
        let mut out = vec![listed];
        out.extend_from_slice(&self.calls[terminate..list]);
        out.extend_from_slice(&self.calls[list + 1..]);
        out
    }

    /// The calls from `start` to the end of the 1+1, then shutdown and cleanup.
    fn rest_from(&self, start: usize) -> Vec<GrpcExchange> {
        let mut calls = self.calls[start..self.first_result_end()].to_vec();
        calls.extend(self.shutdown_and_cleanup());
        calls
    }
}

/// `calls` as the cassette of scenario `lifecycle`.
fn cassette(calls: Vec<GrpcExchange>, note: &str) -> GrpcCassette {
    GrpcCassette {
        origin: "cut from the modal lifecycle and fault cassettes, both authored through \
                 emulate modal"
            .into(),
        written: None,
        variant: VARIANT.into(),
        scenario: "lifecycle".into(),
        note: Some(note.into()),
        exchanges: calls,
    }
}

async fn run(test: &str, cassette: GrpcCassette, pace: Pace) -> (ScenarioResult, Duration) {
    replay(VARIANT, test, pace, |path| {
        cassette.save(&path).expect("the cut cassette is written")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_create_is_retried_and_the_run_passes() {
    let lifecycle = Lifecycle::load();
    let fault = recorded("faults/unavailable-create");
    let refused = fault
        .iter()
        .find(|c| rpc(c) == "SandboxCreate" && c.status == UNAVAILABLE)
        .expect("the emulator's UNAVAILABLE create");
    let create = lifecycle.nth("SandboxCreate", 0);
    let first = answered_as(&lifecycle.calls[create], refused);
    let mut again = lifecycle.calls[create].clone();
    again.metadata.insert("x-retry-attempt".into(), "1".into());
    let mut calls = lifecycle.to(create);
    calls.push(first);
    calls.push(again);
    calls.extend(lifecycle.rest_from(create + 1));
    let (result, _) = run(
        "unavailable-create",
        cassette(calls, "SandboxCreate answers UNAVAILABLE once"),
        Pace::Instant,
    )
    .await;
    assert_terminal(
        "modal__an_unavailable_create_is_retried_and_the_run_passes",
        &result,
    );
    // The replay passing says the create was sent again, as retry attempt 1.
    assert_passed(&result, EVERY_STEP);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_fails_build_with_its_log_and_its_secret_is_deleted() {
    let lifecycle = Lifecycle::load();
    let fault = recorded("faults/build-fails");
    let failed = fault
        .iter()
        .find(|c| rpc(c) == "ImageJoinStreaming")
        .expect("the failed build's stream");
    let join = lifecycle.nth("ImageJoinStreaming", 0);
    let mut calls = lifecycle.to(join);
    let mut answer = lifecycle.calls[join].clone();
    answer.responses = failed.responses.clone();
    calls.push(answer);
    // The build's Secret, deleted whatever happened.
    calls.push(lifecycle.calls[lifecycle.nth("SecretDelete", 0)].clone());
    // Cleanup: no sandbox listed, the failed build's image deleted, nothing left.
    calls.extend_from_slice(&lifecycle.calls[lifecycle.nth("SandboxList", 0)..]);
    let (result, _) = run(
        "build-fails",
        cassette(
            calls,
            "the image build ends in failure (GENERIC_STATUS_FAILURE), with its log",
        ),
        Pace::Instant,
    )
    .await;
    assert_terminal(
        "modal__a_failed_build_fails_build_with_its_log_and_its_secret_is_deleted",
        &result,
    );
    let why = reason(&result, "build");
    // The emulator's builder is the engine's BuildKit, which words the step's failure so.
    assert!(why.contains("exit code: 1"), "{why}");
    assert!(
        why.contains("the next step fails"),
        "the build's log: {why}"
    );
    assert_skipped(&result, &["launch", "first-result", "shutdown"]);
    // The replay passing says SecretDelete was called after the failed build.
    assert_passed(&result, &["cleanup", "replay"]);
    assert!(junit(&result).contains("exit code: 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_never_gets_a_task_fails_launch_at_its_budget_and_is_terminated() {
    let lifecycle = Lifecycle::load();
    let fault = recorded("faults/no-task");
    let no_task = fault
        .iter()
        .find(|c| rpc(c) == "SandboxGetTaskId")
        .expect("the emulator's answer without a task");
    let task = lifecycle.nth("SandboxGetTaskId", 0);
    let mut waiting = lifecycle.calls[task].clone();
    waiting.responses = no_task.responses.clone();
    let mut calls = lifecycle.to(task);
    calls.push(waiting);
    calls.extend(lifecycle.cleanup_finding_the_sandbox());
    // Every answer at once but the task's, held past the launch's budget, as a sandbox
    // stuck without a task holds the call.
    for (i, call) in calls.iter_mut().enumerate() {
        call.latency_ms = if i == task { 5_000.0 } else { 0.0 };
    }
    let (result, took) = run(
        "no-task",
        cassette(calls, "the sandbox never gets a task"),
        Pace::Recorded,
    )
    .await;
    assert_terminal(
        "modal__a_sandbox_that_never_gets_a_task_fails_launch_at_its_budget_and_is_terminated",
        &result,
    );
    let why = reason(&result, "launch");
    assert!(why.contains("exceeded its budget of 2s"), "{why}");
    assert!(took < Duration::from_secs(20), "the run took {took:?}");
    assert_passed(&result, &["cleanup", "replay"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_router_jwt_is_fetched_again_and_the_first_result_passes() {
    let lifecycle = Lifecycle::load();
    let fault = recorded("faults/jwt-expires");
    // The router's refusal of an expired JWT, whichever call met it in the recording.
    let expired = fault
        .iter()
        .find(|c| rpc(c).starts_with("TaskExec") && c.status == UNAUTHENTICATED)
        .expect("the emulator's expired JWT");
    // The 1+1's second read (its end of output) meets the expired JWT.
    let read = lifecycle.nth("TaskExecStdioRead", 3);
    let refused = answered_as(&lifecycle.calls[read], expired);
    let access = lifecycle.calls[lifecycle.nth("TaskGetCommandRouterAccess", 0)].clone();
    let mut calls = lifecycle.to(read);
    calls.push(refused);
    calls.push(access);
    calls.extend(lifecycle.rest_from(read));
    let (result, _) = run(
        "jwt-expires",
        cassette(calls, "the router answers UNAUTHENTICATED mid-exec"),
        Pace::Instant,
    )
    .await;
    assert_terminal(
        "modal__an_expired_router_jwt_is_fetched_again_and_the_first_result_passes",
        &result,
    );
    assert_passed(&result, EVERY_STEP);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_a_sandbox_that_has_ended_is_no_error() {
    let lifecycle = Lifecycle::load();
    let fault = recorded("faults/terminate-ended");
    let ended = fault
        .iter()
        .filter(|c| rpc(c) == "SandboxTerminate")
        .nth(1)
        .expect("the emulator's second terminate");
    assert!(
        ended.responses[0].get("existing_result").is_some(),
        "{:?}",
        ended.responses
    );
    let mut calls = lifecycle.to(lifecycle.first_result_end());
    let mut rest = lifecycle.shutdown_and_cleanup();
    // Shutdown's terminate, answered with the sandbox's earlier ending.
    rest[0].responses = ended.responses.clone();
    calls.extend(rest);
    let (result, _) = run(
        "terminate-ended",
        cassette(
            calls,
            "shutdown's terminate finds the sandbox ended already",
        ),
        Pace::Instant,
    )
    .await;
    assert_terminal(
        "modal__terminating_a_sandbox_that_has_ended_is_no_error",
        &result,
    );
    assert_passed(&result, EVERY_STEP);
}
