//! What the harness adds to create-to-first-result, measured against a replay server that
//! holds every response back a known delay.
//!
//! Each run replays the e2b lifecycle cassette (the whole lifecycle scenario, since replay
//! serves exchanges in order) through the runner, the e2b client and its HTTP layer. The
//! baseline is a bare HTTP client sending the same create-to-first-result requests, one
//! after another (and, for the kernel's WebSocket exchanges, the recorded client frames,
//! reading each recorded server frame in turn), to the same kind of server at the same
//! delay: it pays the server's and the loopback's costs and nothing of the harness's. The harness's overhead is the difference of the medians.
//! Exits 1 when it is over 5 ms.
//!
//! `cargo bench -p sandbox-matrix --bench overhead`

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Exchange};

/// How long the server holds back each response.
const DELAY: Duration = Duration::from_millis(10);
/// Runs of each kind.
const RUNS: usize = 25;
/// The most the harness may add at the median.
const BUDGET: Duration = Duration::from_millis(5);

#[path = "../tests/common/mod.rs"]
mod common;

/// The exchanges from the create request to the first answer to code.
fn create_to_first_result(cassette: &Cassette) -> Vec<Exchange> {
    let ex = &cassette.exchanges;
    let create = ex
        .iter()
        .position(|e| e.request.method == "POST" && e.request.path == "/sandboxes")
        .expect("the cassette creates a sandbox");
    let answer = create
        + ex[create..]
            .iter()
            .position(|e| {
                e.websocket.as_ref().is_some_and(|frames| {
                    frames.iter().any(|f| {
                        f.from_client() && f.text().is_some_and(|t| t.contains("execute_request"))
                    })
                })
            })
            .expect("the cassette runs code over the kernel's WebSocket");
    ex[create..=answer].to_vec()
}

async fn harness_once(cassette: &Cassette, scenario: &Scenario) -> Duration {
    let (result, _server) =
        common::replay_e2b(cassette.clone(), scenario, Pace::Fixed(DELAY)).await;
    assert!(
        result.passed(),
        "the replayed run failed: {:#?}",
        result.steps
    );
    result
        .timing("create-to-first-result")
        .expect("create-to-first-result measured")
        .duration
}

async fn bare_once(exchanges: &[Exchange], http: &reqwest::Client) -> Duration {
    let cassette = Cassette {
        origin: "the create-to-first-result exchanges of the e2b lifecycle cassette".into(),
        written: None,
        variant: "e2b".into(),
        scenario: "lifecycle".into(),
        note: None,
        exchanges: exchanges.to_vec(),
    };
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Fixed(DELAY),
            ..ReplayOptions::default()
        },
    )
    .await
    .expect("replay server");
    let started = Instant::now();
    for exchange in exchanges {
        let request = &exchange.request;
        if let Some(frames) = &exchange.websocket {
            let url = format!("{}{}", server.url().replacen("http", "ws", 1), request.path);
            let (mut socket, _) = tokio_tungstenite::connect_async(url)
                .await
                .expect("the WebSocket upgrade is served");
            for frame in frames {
                match frame.text() {
                    None => break,
                    Some(text) if frame.from_client() => {
                        socket
                            .send(Message::text(text))
                            .await
                            .expect("a frame sent");
                    }
                    Some(_) => {
                        socket
                            .next()
                            .await
                            .expect("a server frame")
                            .expect("a readable frame");
                    }
                }
            }
            continue;
        }
        let mut builder = http.request(
            reqwest::Method::from_bytes(request.method.as_bytes()).expect("a method"),
            format!("{}{}", server.url(), request.path),
        );
        if let Some(body) = &request.body {
            builder = builder
                .header("content-type", body.default_content_type())
                .body(body.to_bytes().expect("a body"));
        }
        let response = builder.send().await.expect("served");
        response.bytes().await.expect("a body");
    }
    let elapsed = started.elapsed();
    server
        .finish()
        .expect("the bare client sent what the cassette holds");
    elapsed
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo test --benches` runs bench targets once as tests; this one is a measurement.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let cassette = common::e2b_lifecycle();
    // The whole lifecycle, as the cassette recorded it: replay serves exchanges in order.
    let scenario = Scenario::load(&common::root().join("scenarios/lifecycle.yaml"))
        .expect("the lifecycle scenario loads");
    let exchanges = create_to_first_result(&cassette);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let (harness, bare): (Vec<Duration>, Vec<Duration>) = runtime.block_on(async {
        let mut harness = Vec::new();
        let mut bare = Vec::new();
        // Alternate, so that drift on a noisy machine hits both alike.
        for _ in 0..RUNS {
            harness.push(harness_once(&cassette, &scenario).await);
            bare.push(bare_once(&exchanges, &http).await);
        }
        (harness, bare)
    });
    let (h, b) = (median(harness), median(bare));
    let overhead = h.saturating_sub(b);
    println!(
        "create-to-first-result over {} responses held {} ms each, {RUNS} runs: harness p50 {:.2} ms, bare client p50 {:.2} ms, harness overhead p50 {:+.2} ms (budget {} ms)",
        exchanges.len(),
        DELAY.as_millis(),
        ms(h),
        ms(b),
        ms(h) - ms(b),
        BUDGET.as_millis()
    );
    if overhead > BUDGET {
        eprintln!(
            "the harness adds more than {} ms at p50",
            BUDGET.as_millis()
        );
        std::process::exit(1);
    }
}
