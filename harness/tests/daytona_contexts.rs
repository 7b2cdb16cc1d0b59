//! Daytona's code channel on interpreter contexts, replayed: a restart that does not drop
//! the context's state fails check 7, and a frame sent other than recorded fails the
//! replay with its diff. No Docker.

mod common;

use std::sync::Arc;

use sandbox_matrix::model::results::{ScenarioResult, StepStatus};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Mode, WsFrame};
use sandbox_providers::daytona::{self, DaytonaProvider};

fn core_tier() -> Cassette {
    Cassette::load(&common::root().join("fixtures/cassettes/daytona/core-tier.yaml"))
        .expect("the daytona core-tier cassette loads")
}

/// Replays core-tier on daytona against `cassette`.
async fn replay(cassette: Cassette) -> (ScenarioResult, ReplayServer) {
    let scenario = Scenario::load(&common::root().join("scenarios/core-tier.yaml"))
        .expect("the scenario loads");
    let runner = common::quiet_runner();
    let volatiles = runner.scenario_volatiles();
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            volatiles: volatiles.clone(),
            credentials: daytona::replay_credentials(),
            matched_headers: daytona::REPLAY_MATCHED_HEADERS,
            ..ReplayOptions::default()
        },
    )
    .await
    .expect("replay server");
    let provider = DaytonaProvider::from_settings(
        Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
        volatiles,
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .expect("replay needs no credential");
    let result = runner
        .run_scenario(Arc::new(provider), &scenario, None)
        .await;
    (result, server)
}

fn status<'a>(result: &'a ScenarioResult, step: &str) -> &'a StepStatus {
    &result
        .step(step)
        .unwrap_or_else(|| panic!("core-tier has no {step}"))
        .status
}

/// The client code of a WebSocket exchange's first frame.
fn code(frames: &[WsFrame]) -> &str {
    match frames.first() {
        Some(WsFrame::Client(v)) => v["code"].as_str().unwrap_or_default(),
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_core_tier_passes_check_7_on_contexts() {
    let (result, server) = replay(core_tier()).await;
    assert!(
        matches!(status(&result, "core-7-restart"), StepStatus::Passed),
        "{:?}",
        status(&result, "core-7-restart")
    );
    server.finish().expect("the cassette went as recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_that_keeps_its_state_across_the_restart_fails_check_7() {
    let mut cassette = core_tier();
    // After the restart deletes the context, the probe of the marker answers True, as a
    // context that kept its globals would.
    let deleted = cassette
        .exchanges
        .iter()
        .position(|e| e.request.method == "DELETE" && e.request.path.contains("/context/"))
        .expect("the restart deletes the context");
    let probe = cassette.exchanges[deleted..]
        .iter_mut()
        .filter_map(|e| e.websocket.as_mut())
        .find(|frames| code(frames).contains("_sm_restart_marker"))
        .expect("the marker is probed after the restart");
    let mut edited = 0;
    for frame in probe.iter_mut() {
        if let WsFrame::Server(v) = frame
            && let Some(text) = v["text"].as_str()
            && text.contains(r#"{"result": "False"}"#)
        {
            v["text"] = text.replace("False", "True").into();
            edited += 1;
        }
    }
    assert_eq!(edited, 1, "the probe's answer line was found");
    let (result, _server) = replay(cassette).await;
    match status(&result, "core-7-restart") {
        StepStatus::Failed { reason } => {
            assert!(reason.contains("state survived the restart"), "{reason}")
        }
        other => panic!("check 7 should fail, was {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_frame_other_than_recorded_fails_the_replay_with_its_diff() {
    let mut cassette = core_tier();
    // The first code sent is recorded as other code: the client's real frame differs.
    let frames = cassette
        .exchanges
        .iter_mut()
        .find_map(|e| e.websocket.as_mut())
        .expect("core-tier runs code over the WebSocket");
    let Some(WsFrame::Client(first)) = frames.first_mut() else {
        panic!("the client speaks first");
    };
    let code = first["code"].as_str().unwrap().to_owned();
    first["code"] = code.replacen("_daytona_cell", "_other_cell", 1).into();
    let (result, server) = replay(cassette).await;
    assert!(!result.passed(), "a wrong frame cannot pass");
    let e = server.finish().unwrap_err().to_string();
    assert!(e.contains("core-tier"), "names the cassette: {e}");
    assert!(e.contains("frame #0: frame /code: expected "), "{e}");
    assert!(e.contains("_other_cell"), "shows the recorded value: {e}");
}
