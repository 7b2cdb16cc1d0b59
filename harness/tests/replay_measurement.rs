//! A burst against a replayed provider, where every failure is known: how the statistics
//! report it. No Docker. (What the harness adds to a timing is measured by
//! `cargo bench -p sandbox-matrix --bench overhead`.)

mod common;

use std::time::Duration;

use sandbox_matrix::analyze::stats::{self, Value};
use sandbox_matrix::model::results::{
    FIRST_COMMAND, Provenance, RESULTS_SCHEMA_VERSION, RunResults, ScenarioResult,
};
use sandbox_providers::api::cassette::Body;
use sandbox_providers::api::replay::Pace;
use sandbox_providers::api::{Cassette, Exchange};

/// The e2b lifecycle cassette cut into a burst of `launches`: its build, then each launch
/// up to its first answer with the boards' first command run before and after it
/// (`failures` of them refused at create with a 500), each stop, and
/// its cleanup; the scenario label reads `burst`. Each launch gets a sandbox and kernel id
/// of its own, as a live burst does.
fn burst_cassette(launches: usize, failures: usize) -> Cassette {
    let lifecycle = common::e2b_lifecycle();
    let ex = &lifecycle.exchanges;
    let find = |from: usize, what: &dyn Fn(&Exchange) -> bool| {
        from + ex[from..]
            .iter()
            .position(what)
            .expect("the lifecycle cassette has this exchange")
    };
    let create = find(0, &|e| {
        e.request.method == "POST" && e.request.path == "/sandboxes"
    });
    let kernel = find(create, &|e| e.request.path.ends_with("/api/kernels"));
    let answer = find(create, &|e| e.request.path.ends_with("-2"));
    let stop = find(answer, &|e| e.request.method == "DELETE");
    let cleanup = find(stop, &|e| e.request.path.starts_with("/v2/sandboxes?"));
    let mut refused = ex[create].clone();
    refused.response.status = 500;
    refused.response.body = Some(Body::Json(
        serde_json::json!({"code": 500, "message": "injected failure: no capacity"}),
    ));
    // The launches run at once, then the stops: each is one group, served in any order.
    let grouped = |exchanges: Vec<Exchange>, label: &'static str| {
        exchanges.into_iter().map(move |mut e| {
            e.group = Some(label.to_owned());
            e
        })
    };
    let sandbox = ex[create]
        .response
        .body
        .as_ref()
        .expect("a create answer")
        .json_documents()[0]["sandboxID"]
        .as_str()
        .expect("a sandbox id")
        .to_owned();
    let kernel_id = ex[kernel]
        .response
        .body
        .as_ref()
        .expect("a kernel")
        .json_documents()[0]["id"]
        .as_str()
        .expect("a kernel id")
        .to_owned();
    // Copy `n` of `exchanges`, naming sandbox and kernel `n`.
    let copy = |exchanges: &[Exchange], n: usize| -> Vec<Exchange> {
        let text = serde_json::to_string(exchanges)
            .expect("exchanges serialize")
            .replace(&sandbox, &format!("sbx-burst-{n:04}"))
            .replace(&kernel_id, &format!("{n:08x}{}", &kernel_id[8..]));
        serde_json::from_str(&text).expect("exchanges parse")
    };
    // Each launch also runs the boards' first command before its first answer, and again
    // after it: made from the cassette's exec (the secrets scan's), as the sandbox's user.
    let scan = find(answer, &|e| {
        e.request.path.ends_with("/process.Process/Start")
    });
    let mut command = serde_json::to_value(&ex[scan]).expect("an exchange serializes");
    command["request"]["headers"]["authorization"] = serde_json::json!(format!(
        "Basic {}",
        base64::engine::Engine::encode(&base64::engine::general_purpose::STANDARD, "datalayer:")
    ));
    let process = &mut command["request"]["body"]["connect"][0]["message"]["process"];
    process["cmd"] = serde_json::json!(FIRST_COMMAND[0]);
    process["args"] = serde_json::json!([FIRST_COMMAND[1]]);
    for frame in command["response"]["body"]["connect"]
        .as_array_mut()
        .expect("a Connect stream")
    {
        if frame["message"]["event"]["data"].is_object() {
            frame["message"]["event"]["data"]["stdout"] =
                serde_json::json!(base64::engine::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    "Python 3.13.5\n"
                ));
        }
    }
    let command: Exchange = serde_json::from_value(command).expect("an exchange");
    let mut exchanges: Vec<Exchange> = ex[..create].to_vec();
    let mut launched = Vec::new();
    for n in 0..launches - failures {
        launched.extend(copy(&ex[create..=answer], n));
        launched.extend(copy(&[command.clone(), command.clone()], n));
    }
    launched.extend(std::iter::repeat_n(refused, failures));
    exchanges.extend(grouped(launched, "launches"));
    let mut stops = Vec::new();
    for n in 0..launches - failures {
        stops.extend(copy(&ex[stop..cleanup], n));
    }
    exchanges.extend(grouped(stops, "stops"));
    exchanges.extend_from_slice(&ex[cleanup..]);
    let text = serde_json::to_string(&exchanges)
        .expect("exchanges serialize")
        .replace("lifecycle", "burst");
    Cassette {
        origin: format!("cut from the e2b lifecycle cassette ({})", lifecycle.origin),
        written: None,
        variant: "e2b".into(),
        scenario: "burst".into(),
        note: Some(format!("{launches} launches, {failures} refused at create")),
        exchanges: serde_json::from_str(&text).expect("exchanges parse"),
    }
}

async fn burst(launches: usize, failures: usize) -> (ScenarioResult, stats::Summary, String) {
    let scenario = common::temp_scenario(
        "burst",
        &format!(
            "  - step: build\n    budget: 60s\n  - step: burst\n    launches: {launches}\n    budget: 60s\n  - step: cleanup\n    budget: 30s\n"
        ),
    );
    let (result, server) = common::replay_e2b(
        burst_cassette(launches, failures),
        &scenario,
        Pace::Fixed(Duration::from_millis(2)),
    )
    .await;
    server
        .finish()
        .expect("the burst went as the cassette says");
    let results = RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.into(),
        provenance: Provenance {
            run_id: "burst".into(),
            harness_version: env!("CARGO_PKG_VERSION").into(),
            host: "test".into(),
            started_at: "2026-11-29T00:00:00Z".into(),
            base: None,
            shards: Vec::new(),
            partition: None,
        },
        scenarios: vec![result.clone()],
        orphans: Vec::new(),
    };
    let summary = stats::metrics(&results)
        .into_iter()
        .find(|m| m.name == "create-to-first-result")
        .expect("the burst's samples are a metric")
        .summary();
    (
        result,
        summary,
        sandbox_matrix::report::table::render(&results),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_100_with_30_percent_failures_reads_70_percent_and_p90_failed() {
    let (result, summary, table) = burst(100, 30).await;
    eprintln!("100 launches, 30 refused: {summary:?}");
    assert_eq!((summary.n, summary.successes), (100, 70));
    assert!((summary.success_rate() - 0.7).abs() < f64::EPSILON);
    assert!(matches!(summary.p50, Value::Measured(_)), "{summary:?}");
    assert_eq!(summary.p90, Value::Failed);
    assert_eq!(summary.p99, Value::Failed);
    assert_eq!(summary.max, Value::Failed);
    let step = result.step("burst").expect("a burst step");
    let reason = format!("{:?}", step.status);
    assert!(reason.contains("30 of 100 launches failed"), "{reason}");
    assert!(reason.contains("injected failure"), "{reason}");
    assert!(
        table.contains("p90 failed · p99 failed · 70/100 ok"),
        "the table should say so:\n{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_burst_without_failures_reads_real_percentiles() {
    let (result, summary, table) = burst(100, 0).await;
    eprintln!("100 launches, none refused: {summary:?}");
    assert!(result.passed(), "{:#?}", result.steps);
    assert_eq!((summary.n, summary.successes), (100, 100));
    let (Value::Measured(p50), Value::Measured(p90), Value::Measured(p99)) =
        (summary.p50, summary.p90, summary.p99)
    else {
        panic!("every percentile should be a number: {summary:?}");
    };
    // Each launch waits on four responses held back 2 ms each.
    assert!(p50 >= Duration::from_millis(8), "{summary:?}");
    assert!(p50 <= p90 && p90 <= p99, "{summary:?}");
    assert!(summary.min.is_some_and(|min| min <= p50));
    assert!(table.contains("100/100 ok"), "{table}");
}
