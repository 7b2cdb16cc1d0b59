//! The daytona variant, replayed from its lifecycle cassette with one exchange broken: a
//! sandbox that stays `creating`.

use sandbox_providers::api::replay::Pace;
use sandbox_providers::api::{Cassette, Exchange};

use crate::{assert_passed, assert_skipped, assert_terminal, reason, replay};

const VARIANT: &str = "daytona";

/// The recorded lifecycle's exchanges.
fn lifecycle() -> Vec<Exchange> {
    Cassette::load(&crate::common::root().join("fixtures/cassettes/daytona/lifecycle.yaml"))
        .expect("the daytona lifecycle cassette")
        .exchanges
}

/// The index of the first exchange `method path` picks, from `from`.
fn find(exchanges: &[Exchange], from: usize, method: &str, path: impl Fn(&str) -> bool) -> usize {
    from + exchanges[from..]
        .iter()
        .position(|e| e.request.method == method && path(&e.request.path))
        .expect("the lifecycle cassette has this exchange")
}

/// A sandbox that stays `creating`: launch fails at its budget, the steps after it are
/// skipped, and cleanup still finds the sandbox and deletes it, with the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_stays_creating_fails_launch_at_its_budget_and_is_still_deleted() {
    let recorded = lifecycle();
    let create = find(&recorded, 0, "POST", |p| p == "/sandbox");
    let mut creating = recorded[create + 1].clone();
    assert!(
        creating.request.path.starts_with("/sandbox/"),
        "{creating:?}"
    );
    creating.repeat = true;
    // Cleanup as recorded: it lists the sandbox under the run's labels and deletes it.
    let cleanup = find(&recorded, create, "GET", |p| {
        p.starts_with("/sandbox?labels=")
    });
    let mut exchanges = recorded[..=create].to_vec();
    exchanges.push(creating);
    exchanges.extend_from_slice(&recorded[cleanup..]);
    let cassette = Cassette {
        origin: "cut from the daytona lifecycle cassette".into(),
        written: None,
        variant: VARIANT.into(),
        scenario: "lifecycle".into(),
        note: Some("the sandbox stays `creating`".into()),
        exchanges,
    };
    let (result, _) = replay(VARIANT, "daytona-creating", Pace::Instant, |path| {
        cassette.save(&path).expect("the cut cassette is written");
    })
    .await;
    assert_terminal(
        "daytona__a_sandbox_that_stays_creating_fails_launch_at_its_budget_and_is_still_deleted",
        &result,
    );
    assert!(
        reason(&result, "launch").starts_with("exceeded its budget of 2s"),
        "{}",
        reason(&result, "launch")
    );
    assert_skipped(&result, &["first-result", "shutdown"]);
    assert_passed(&result, &["build", "cleanup", "replay"]);
}
