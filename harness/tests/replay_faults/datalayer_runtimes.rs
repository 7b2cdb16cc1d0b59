//! The datalayer-runtimes variant (Datalayer's runtimes API), replayed from its lifecycle
//! cassette with what `emulate datalayer` recorded under a fault put in its place: a
//! create refused with a 200 that says `success: false`, an ingress warming up (503s), one
//! that never warms up, and a delete of a runtime the platform no longer knows.

use std::time::Duration;

use sandbox_providers::api::cassette::Body;
use sandbox_providers::api::replay::Pace;
use sandbox_providers::api::{Cassette, Exchange};

use crate::{
    EVERY_STEP, assert_passed, assert_skipped, assert_terminal, common, junit, reason, replay,
};

const VARIANT: &str = "datalayer-runtimes";

/// The exchanges of a recorded cassette of this variant, `lifecycle` or `faults/<name>`.
fn recorded(name: &str) -> Vec<Exchange> {
    Cassette::load(
        &common::root()
            .join("fixtures/cassettes")
            .join(VARIANT)
            .join(format!("{name}.yaml")),
    )
    .unwrap_or_else(|e| panic!("the {name} cassette loads: {e}"))
    .exchanges
}

/// The recorded lifecycle, by the steps of [`crate::STEPS`]: the environment's burning rate and
/// the create, launch's wait for the ingress and its kernel, the 1+1, shutdown's delete
/// and its check, cleanup's two listings. The restart and the secrets scan are left out.
struct Lifecycle {
    exchanges: Vec<Exchange>,
}

impl Lifecycle {
    fn load() -> Self {
        Self {
            exchanges: recorded("lifecycle"),
        }
    }

    fn find(&self, method: &str, path: impl Fn(&str) -> bool) -> usize {
        self.exchanges
            .iter()
            .position(|e| e.request.method == method && path(&e.request.path))
            .expect("the lifecycle cassette has this exchange")
    }

    /// The create (`POST …/runtimes`), its index.
    fn create(&self) -> usize {
        self.find("POST", |p| p == "/api/runtimes/v1/runtimes")
    }

    /// Launch up to the ingress (the burning rate, the create).
    fn to_create(&self) -> Vec<Exchange> {
        self.exchanges[..=self.create()].to_vec()
    }

    /// Launch from the ingress's first answer, then the 1+1 (the kernel's second socket).
    fn ingress_to_first_result(&self) -> Vec<Exchange> {
        let first_result = self.find("GET", |p| p.contains("/channels?") && p.ends_with("-2"));
        self.exchanges[self.create() + 1..=first_result].to_vec()
    }

    /// Shutdown's delete by `pod_name`, its index.
    fn delete(&self) -> usize {
        self.find("DELETE", |p| p.starts_with("/api/runtimes/v1/runtimes/"))
    }

    /// Shutdown (the delete and the check that the runtime is gone), then cleanup.
    fn shutdown_and_cleanup(&self) -> Vec<Exchange> {
        self.exchanges[self.delete()..].to_vec()
    }

    /// Cleanup's listings.
    fn cleanup(&self) -> Vec<Exchange> {
        self.exchanges[self.delete() + 2..].to_vec()
    }

    /// Cleanup finding the runtime still there: its listing answered with the runtime the
    /// create made, then the delete by `pod_name` that shutdown made, then the listing that
    /// finds nothing left.
    fn cleanup_finding_the_runtime(&self) -> Vec<Exchange> {
        let runtime = match &self.exchanges[self.create()].response.body {
            Some(Body::Json(created)) => created["runtime"].clone(),
            other => panic!("the create answers JSON: {other:?}"),
        };
        let mut listed = self.exchanges[self.delete() + 2].clone();
        listed.response.body = Some(Body::Json(serde_json::json!({
            "message": "",
            "runtimes": [runtime],
            "success": true,
        })));
        let mut out = vec![listed];
        out.push(self.exchanges[self.delete()].clone());
        out.extend_from_slice(&self.exchanges[self.delete() + 3..]);
        out
    }
}

fn cassette(exchanges: Vec<Exchange>, note: &str) -> Cassette {
    Cassette {
        origin: "cut from the datalayer-runtimes lifecycle and fault cassettes, both \
                 authored through emulate datalayer"
            .into(),
        written: None,
        variant: VARIANT.into(),
        scenario: "lifecycle".into(),
        note: Some(note.into()),
        exchanges,
    }
}

/// The last segment of a runtime's path: its `pod_name`.
fn pod_name(path: &str) -> String {
    path.rsplit('/').next().expect("a pod_name").to_owned()
}

async fn run(
    test: &str,
    cassette: Cassette,
) -> (sandbox_matrix::model::results::ScenarioResult, Duration) {
    replay(VARIANT, test, Pace::Instant, |path| {
        cassette.save(&path).expect("the cut cassette is written")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_fails_launch_with_the_platforms_message_and_cleanup_finds_nothing() {
    let lifecycle = Lifecycle::load();
    let refused = recorded("faults/refused-create");
    let create = refused
        .iter()
        .position(|e| e.request.method == "POST")
        .expect("the refused create");
    assert_eq!(refused[create].response.status, 200, "a 200 that says no");
    let mut exchanges = lifecycle.to_create();
    let last = exchanges.len() - 1;
    exchanges[last].response = refused[create].response.clone();
    exchanges.extend(lifecycle.cleanup());
    let (result, _) = run(
        "refused-create",
        cassette(exchanges, "the create answers 200 with success: false"),
    )
    .await;
    assert_terminal(
        "datalayer_runtimes__a_refused_create_fails_launch_with_the_platforms_message_and_cleanup_finds_nothing",
        &result,
    );
    let why = reason(&result, "launch");
    assert!(why.contains("not enough credits"), "{why}");
    assert_skipped(&result, &["first-result", "shutdown"]);
    // The create was sent once (a refusal is not retried), and cleanup looked for the
    // runtime by its name and found none: the replay used exactly those exchanges.
    assert_passed(&result, &["cleanup", "replay"]);
    assert!(junit(&result).contains("not enough credits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_warming_up_is_waited_out_and_the_run_passes() {
    let lifecycle = Lifecycle::load();
    let warming: Vec<Exchange> = recorded("faults/warm-up")
        .into_iter()
        .filter(|e| e.response.status == 503)
        .collect();
    assert_eq!(warming.len(), 3, "the emulator's --warm-up 3");
    let mut exchanges = lifecycle.to_create();
    exchanges.extend(warming);
    exchanges.extend(lifecycle.ingress_to_first_result());
    exchanges.extend(lifecycle.shutdown_and_cleanup());
    let (result, _) = run(
        "warm-up",
        cassette(
            exchanges,
            "the ingress answers 503 three times, then Jupyter Server",
        ),
    )
    .await;
    assert_terminal(
        "datalayer_runtimes__an_ingress_warming_up_is_waited_out_and_the_run_passes",
        &result,
    );
    // The replay passing says the three 503s were each polled through.
    // The platform builds: build is skipped, naming the environment.
    assert_skipped(&result, &["build"]);
    assert_passed(&result, &EVERY_STEP[1..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_that_never_warms_up_fails_launch_at_its_budget_and_the_runtime_is_deleted_by_pod_name()
 {
    let lifecycle = Lifecycle::load();
    let mut warming = recorded("faults/warm-up")
        .into_iter()
        .find(|e| e.response.status == 503)
        .expect("a 503 from the warming ingress");
    warming.repeat = true;
    let mut exchanges = lifecycle.to_create();
    exchanges.push(warming);
    exchanges.extend(lifecycle.cleanup_finding_the_runtime());
    let (result, took) = run(
        "never-warm",
        cassette(
            exchanges,
            "the ingress answers 503 until the launch's budget runs out",
        ),
    )
    .await;
    assert_terminal(
        "datalayer_runtimes__an_ingress_that_never_warms_up_fails_launch_at_its_budget_and_the_runtime_is_deleted_by_pod_name",
        &result,
    );
    let why = reason(&result, "launch");
    assert!(why.contains("exceeded its budget of 2s"), "{why}");
    assert!(took < Duration::from_secs(15), "the run took {took:?}");
    // Cleanup deleted the runtime by its pod_name (a delete by uid would not match).
    assert_passed(&result, &["cleanup", "replay"]);
    assert!(junit(&result).contains("exceeded its budget of 2s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_platform_answers_unknown_pod_name_still_shuts_down() {
    let lifecycle = Lifecycle::load();
    let unknown = recorded("faults/delete-unknown");
    let pod = pod_name(&lifecycle.exchanges[lifecycle.delete()].request.path);
    let recorded_pod = pod_name(&unknown[0].request.path);
    let mut exchanges = lifecycle.to_create();
    exchanges.extend(lifecycle.ingress_to_first_result());
    let mut rest = lifecycle.shutdown_and_cleanup();
    // The recorded 404 for an unknown pod_name, naming this runtime's.
    let answer = serde_json::to_string(&unknown[0].response).expect("a response");
    rest[0].response =
        serde_json::from_str(&answer.replace(&recorded_pod, &pod)).expect("a response");
    assert_eq!(rest[0].response.status, 404);
    exchanges.extend(rest);
    let (result, _) = run(
        "delete-unknown",
        cassette(exchanges, "shutdown's delete answers 404: no such pod_name"),
    )
    .await;
    assert_terminal(
        "datalayer_runtimes__a_delete_the_platform_answers_unknown_pod_name_still_shuts_down",
        &result,
    );
    // The platform builds: build is skipped, naming the environment.
    assert_skipped(&result, &["build"]);
    assert_passed(&result, &EVERY_STEP[1..]);
}
