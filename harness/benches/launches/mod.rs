//! What the overhead and concurrency benches share: the create-to-first-result exchanges
//! of a lifecycle cassette, one harness launch replaying the whole lifecycle, and one bare
//! launch sending only those exchanges with a plain HTTP and WebSocket client.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants::{CloudMode, CloudVariant};
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{Cassette, Exchange, PollIntervals};

use crate::common;

/// The exchanges from the launch's first request to the first answer to `1+1`: the first
/// WebSocket exchange after the create whose client sent that code.
pub fn create_to_first_result(cassette: &Cassette, method: &str, path: &str) -> Vec<Exchange> {
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

/// One harness launch: the whole lifecycle of `variant`, replayed from `cassettes` at
/// `pace` through the runner; its create-to-first-result.
pub async fn harness_once(
    variant: &CloudVariant,
    cassettes: &Path,
    scenario: &Scenario,
    pace: Pace,
) -> Duration {
    let runner = Runner::new(
        new_run_id(),
        fake_canary(),
        Arc::new(common::Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let mode = CloudMode::Replay {
        dir: cassettes.to_owned(),
        pace,
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

/// One bare launch: `exchanges` sent one after another with `http` (and, for WebSocket
/// exchanges, the recorded client frames, reading each recorded server frame in turn) to a
/// replay server of its own at `pace`, polling again what the exchange before asked after
/// the replay's poll interval, as any client polling a replay must.
pub async fn bare_once(
    variant: &str,
    exchanges: &[Exchange],
    http: &reqwest::Client,
    pace: Pace,
) -> Duration {
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
            pace,
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
