//! A replayed scenario whose client does things in another order than the cassette fails
//! its `replay` step, naming the cassette file, the exchange and what came instead. The
//! e2b core-tier scenario through the harness, as `run` opens it; no Docker.

mod common;

use std::path::Path;

use sandbox_matrix::model::results::{ScenarioResult, StepStatus};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;
use sandbox_providers::api::Cassette;
use sandbox_providers::api::replay::Pace;

/// Runs the core-tier scenario on e2b, replayed from the cassettes under `dir`, with the
/// replay check `run` adds.
async fn core_tier(dir: &Path) -> ScenarioResult {
    let scenario = Scenario::load(&common::root().join("scenarios/core-tier.yaml"))
        .expect("the scenario loads");
    let runner = common::quiet_runner();
    let session = variants::open_cloud(
        variants::cloud("e2b").expect("the e2b variant"),
        &scenario.name,
        &variants::CloudMode::Replay {
            dir: dir.to_path_buf(),
            pace: Pace::Instant,
        },
        runner.scenario_volatiles(),
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .await
    .expect("the cassette opens");
    let not_ready = runner.prepare(&session.provider).await.err();
    runner
        .run_scenario_checked(
            session.provider,
            &scenario,
            not_ready,
            session.check,
            session.source,
            1,
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_in_another_order_than_recorded_fails_the_replay_step() {
    let committed = common::root().join(variants::CASSETTES_DIR);
    let recorded = core_tier(&committed).await;
    assert!(recorded.passed(), "{:#?}", recorded.steps);

    // The same cassette with its two cleanup deletions swapped: the client, which deletes
    // the sandbox before its template, now does them in the other order than recorded.
    let mut cassette =
        Cassette::load(&variants::cassette_path(&committed, "e2b", "core-tier")).unwrap();
    let deletes: Vec<usize> = cassette
        .exchanges
        .iter()
        .enumerate()
        .filter(|(_, e)| e.request.method == "DELETE")
        .map(|(i, _)| i)
        .collect();
    let [sandbox, template] = deletes[..] else {
        panic!("the core-tier cassette deletes a sandbox and a template: {deletes:?}");
    };
    assert_eq!(template, sandbox + 1, "the deletions are consecutive");
    cassette.exchanges.swap(sandbox, template);
    let dir = std::env::temp_dir().join(format!("sm-replay-order-{}", std::process::id()));
    let path = variants::cassette_path(&dir, "e2b", "core-tier");
    cassette.save(&path).unwrap();
    let swapped = core_tier(&dir).await;
    std::fs::remove_dir_all(&dir).unwrap();

    let replay = swapped.step("replay").expect("a replay step");
    let StepStatus::Failed { reason } = &replay.status else {
        panic!("the replay step should fail: {:?}", replay.status);
    };
    let expected = format!(
        "replay of {} did not go as recorded: exchange #{sandbox}: expected DELETE /templates/tpl0001, came DELETE /sandboxes/sbx0002; it matches #{template}, later in the cassette",
        path.display()
    );
    assert!(reason.contains(&expected), "{reason}");
    assert!(
        reason.contains(&format!(
            "were never requested, from #{template} (DELETE /sandboxes/sbx0002)"
        )),
        "{reason}"
    );
}
