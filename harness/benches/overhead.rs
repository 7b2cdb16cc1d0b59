//! What the harness adds to create-to-first-result, measured against a replay server that
//! holds every response back a known delay, for every cloud variant.
//!
//! Each run replays a variant's lifecycle cassette (the whole lifecycle scenario, since
//! replay serves exchanges in order) through the runner, the variant's client and its HTTP
//! layer. The baseline is a bare HTTP client sending the same create-to-first-result
//! requests, one after another (and, for WebSocket exchanges, the recorded client frames,
//! reading each recorded server frame in turn), to the same kind of server at the same
//! delay: it pays the server's and the loopback's costs and nothing of the harness's. Where
//! the cassette polls (daytona's sandbox is `creating` for several polls before it is
//! `started`: a readiness that is not on the first poll), the bare client polls too, waiting
//! between two polls of the same request what any client polling a replay must (the
//! replay's poll interval), so the polling path's own cost is in the difference. The
//! harness's overhead is the difference of the medians. Exits 1 when it is over 5 ms for
//! any variant, or when a cloud variant has no entry in [`CREATE`].
//!
//! `cargo bench -p sandbox-matrix --bench overhead`

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants::{self, CloudMode, CloudVariant};
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Exchange, PollIntervals};

/// How long the server holds back each response.
const DELAY: Duration = Duration::from_millis(10);
/// Runs of each kind, per variant.
const RUNS: usize = 25;
/// The most the harness may add at the median.
const BUDGET: Duration = Duration::from_millis(5);
/// Each cloud variant's create request: its method and path in the cassette.
const CREATE: &[(&str, &str, &str)] = &[
    ("e2b", "POST", "/sandboxes"),
    ("daytona", "POST", "/sandbox"),
];

#[path = "../tests/common/mod.rs"]
mod common;

/// The exchanges from the create request to the first answer to `1+1`: the first
/// WebSocket exchange after the create whose client sent that code.
fn create_to_first_result(cassette: &Cassette, method: &str, path: &str) -> Vec<Exchange> {
    let ex = &cassette.exchanges;
    let create = ex
        .iter()
        .position(|e| e.request.method == method && e.request.path == path)
        .unwrap_or_else(|| panic!("the cassette has no {method} {path}"));
    let answer = create
        + ex[create..]
            .iter()
            .position(|e| {
                e.websocket.as_ref().is_some_and(|frames| {
                    frames
                        .iter()
                        .any(|f| f.from_client() && f.text().is_some_and(|t| t.contains("1+1")))
                })
            })
            .expect("the cassette runs 1+1 over a WebSocket after the create");
    ex[create..=answer].to_vec()
}

/// How many of `exchanges` poll again what the one before asked.
fn polls(exchanges: &[Exchange]) -> usize {
    exchanges
        .windows(2)
        .filter(|w| {
            w[0].request.method == w[1].request.method && w[0].request.path == w[1].request.path
        })
        .count()
}

async fn harness_once(variant: &CloudVariant, cassettes: &Path, scenario: &Scenario) -> Duration {
    let runner = Runner::new(
        new_run_id(),
        fake_canary(),
        std::sync::Arc::new(common::Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let mode = CloudMode::Replay {
        dir: cassettes.to_owned(),
        pace: Pace::Fixed(DELAY),
    };
    let result = common::run_cloud(&runner, variant, scenario, &mode).await;
    assert!(
        result.passed(),
        "the replayed {} run failed: {:#?}",
        variant.name,
        result.steps
    );
    result
        .timing("create-to-first-result")
        .expect("create-to-first-result measured")
        .duration
}

async fn bare_once(variant: &str, exchanges: &[Exchange], http: &reqwest::Client) -> Duration {
    let cassette = Cassette {
        origin: format!("the create-to-first-result exchanges of the {variant} lifecycle cassette"),
        written: None,
        variant: variant.into(),
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
    let mut previous: Option<&Exchange> = None;
    let started = Instant::now();
    for exchange in exchanges {
        let request = &exchange.request;
        if previous
            .is_some_and(|p| p.request.method == request.method && p.request.path == request.path)
        {
            tokio::time::sleep(PollIntervals::INSTANT.first).await;
        }
        previous = Some(exchange);
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
    let root = common::root();
    let cassettes = root.join("fixtures/cassettes");
    // The whole lifecycle, as the cassettes recorded it: replay serves exchanges in order.
    let scenario = Scenario::load(&root.join("scenarios/lifecycle.yaml"))
        .expect("the lifecycle scenario loads");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let mut over = Vec::new();
    for variant in variants::CLOUD {
        if variant.grpc.is_some() {
            // The bare client below speaks HTTP; a gRPC variant's overhead is not measured.
            println!(
                "{}: over gRPC, not measured here (the bare client replays HTTP exchanges)",
                variant.name
            );
            continue;
        }
        let Some((_, method, path)) = CREATE.iter().find(|(name, ..)| *name == variant.name) else {
            eprintln!(
                "{}: no create request in CREATE; add the variant's create request to benches/overhead.rs",
                variant.name
            );
            std::process::exit(1);
        };
        let cassette = variants::load_cassette(
            &variants::cassette_path(&cassettes, variant.name, &scenario.name),
            variant.name,
            &scenario.name,
        )
        .expect("the lifecycle cassette loads");
        let exchanges = create_to_first_result(&cassette, method, path);
        let (harness, bare): (Vec<Duration>, Vec<Duration>) = runtime.block_on(async {
            let mut harness = Vec::new();
            let mut bare = Vec::new();
            // Alternate, so that drift on a noisy machine hits both alike.
            for _ in 0..RUNS {
                harness.push(harness_once(variant, &cassettes, &scenario).await);
                bare.push(bare_once(variant.name, &exchanges, &http).await);
            }
            (harness, bare)
        });
        let (h, b) = (median(harness), median(bare));
        println!(
            "{}: create-to-first-result over {} responses ({} of them polls) held {} ms each, {RUNS} runs: harness p50 {:.2} ms, bare client p50 {:.2} ms, harness overhead p50 {:+.2} ms (budget {} ms)",
            variant.name,
            exchanges.len(),
            polls(&exchanges),
            DELAY.as_millis(),
            ms(h),
            ms(b),
            ms(h) - ms(b),
            BUDGET.as_millis()
        );
        if h.saturating_sub(b) > BUDGET {
            over.push(variant.name);
        }
    }
    if !over.is_empty() {
        eprintln!(
            "the harness adds more than {} ms at p50 on: {}",
            BUDGET.as_millis(),
            over.join(", ")
        );
        std::process::exit(1);
    }
}
