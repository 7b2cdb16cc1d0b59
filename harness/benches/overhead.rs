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
//! harness's overhead is the difference of the medians. A variant over gRPC (modal) is
//! measured the same way at its layer: the bare client is tonic's generic gRPC client
//! sending each recorded request message with its recorded metadata, one call after
//! another, and reading every response frame. Exits 1 when the overhead is over 5 ms for
//! any variant, or when a cloud variant over HTTP has no entry in [`LAUNCH_STARTS`].
//!
//! `cargo bench -p sandbox-matrix --bench overhead`; with `SANDBOX_MATRIX_BENCH_JSON=<file>`
//! it also writes every variant's medians there (`bench/performance.py` does).

use std::time::{Duration, Instant};

use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;
use sandbox_providers::api::Exchange;
use sandbox_providers::api::grpc::{
    self, GrpcCassette, GrpcExchange, GrpcOptions, GrpcReplayServer,
};
use sandbox_providers::api::replay::Pace;
use sandbox_providers::modal;

/// How long the server holds back each response.
const DELAY: Duration = Duration::from_millis(10);
/// Runs of each kind, per variant.
const RUNS: usize = 25;
/// The most the harness may add at the median.
const BUDGET: Duration = Duration::from_millis(5);
/// Each cloud variant's first request of its launch, where create-to-first-result starts:
/// its method and path in the cassette (datalayer-runtimes reads the environment's
/// burning rate before it creates the runtime).
const LAUNCH_STARTS: &[(&str, &str, &str)] = &[
    ("e2b", "POST", "/sandboxes"),
    ("daytona", "POST", "/sandbox"),
    ("datalayer-runtimes", "GET", "/api/runtimes/v1/environments"),
];

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "launches/mod.rs"]
mod launches;

/// How many of `exchanges` poll again what the one before asked.
fn polls(exchanges: &[Exchange]) -> usize {
    exchanges
        .windows(2)
        .filter(|w| {
            w[0].request.method == w[1].request.method && w[0].request.path == w[1].request.path
        })
        .count()
}

/// A gRPC codec passing messages through as bytes: the bare client encodes them itself.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Self::Item,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n)))
    }
}

/// The calls of a gRPC lifecycle cassette from the sandbox's create to the end of the
/// first code call that runs `1+1` (its `TaskExecWait`).
fn grpc_create_to_first_result(cassette: &GrpcCassette) -> Vec<GrpcExchange> {
    let ex = &cassette.exchanges;
    let create = ex
        .iter()
        .position(|e| e.method.ends_with("/SandboxCreate"))
        .expect("the cassette creates a sandbox");
    let code = create
        + ex[create..]
            .iter()
            .position(|e| {
                e.method.ends_with("/TaskExecStart") && e.request.to_string().contains("1+1")
            })
            .expect("the cassette runs 1+1 after the create");
    let wait = code
        + ex[code..]
            .iter()
            .position(|e| e.method.ends_with("/TaskExecWait"))
            .expect("the code call is waited for");
    ex[create..=wait].to_vec()
}

/// The bare gRPC client: each of `exchanges` sent as recorded to a replay of them at the
/// bench's delay, its response frames read; the time from the first call to the last.
async fn bare_grpc_once(exchanges: &[GrpcExchange]) -> Duration {
    use std::str::FromStr as _;
    let pool = modal::proto::descriptors();
    let cassette = GrpcCassette {
        origin: "the create-to-first-result calls of the modal lifecycle cassette".to_owned(),
        written: None,
        variant: "modal".to_owned(),
        scenario: "lifecycle".to_owned(),
        note: None,
        exchanges: exchanges.to_vec(),
    };
    // The same server as the harness's run meets: a run's credentials and volatiles to
    // normalize requests with, so that only the client differs.
    let runner = Runner::new(
        new_run_id(),
        fake_canary(),
        std::sync::Arc::new(common::Quiet),
        tokio_util::sync::CancellationToken::new(),
    );
    let server = GrpcReplayServer::start(
        cassette,
        pool.clone(),
        GrpcOptions {
            credentials: modal::replay_credentials(),
            volatiles: runner.scenario_volatiles(),
            matched_metadata: modal::MATCHED_METADATA
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            pace: Pace::Fixed(DELAY),
            name: None,
        },
    )
    .await
    .expect("replay server");
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .expect("a URL")
        .connect()
        .await
        .expect("connects");
    // Encoded before the clock starts: a client holds its messages, it does not parse JSON.
    let calls: Vec<_> = exchanges
        .iter()
        .map(|e| {
            let method = grpc::method(pool, &e.method).expect("a method of the protos");
            let message = grpc::from_json(method.input(), &e.request).expect("a request");
            (
                e,
                method.is_server_streaming(),
                bytes::Bytes::from(prost::Message::encode_to_vec(&message)),
            )
        })
        .collect();
    let started = Instant::now();
    // The task's command router is a service of its own, at the URL its access call
    // answers: any client opens a second connection to it, on its first router call.
    let mut router: Option<tonic::transport::Channel> = None;
    for (exchange, streaming, message) in calls {
        let mut request = tonic::Request::new(message);
        for (key, value) in &exchange.metadata {
            request.metadata_mut().insert(
                tonic::metadata::MetadataKey::from_str(key).expect("a metadata key"),
                value.parse().expect("a metadata value"),
            );
        }
        let path =
            tonic::codegen::http::uri::PathAndQuery::from_str(&exchange.method).expect("a path");
        let to = if exchange.method.contains(".TaskCommandRouter/") {
            if router.is_none() {
                router = Some(
                    tonic::transport::Endpoint::from_shared(server.url())
                        .expect("a URL")
                        .connect()
                        .await
                        .expect("connects to the router"),
                );
            }
            router.clone().expect("just made")
        } else {
            channel.clone()
        };
        let mut client = tonic::client::Grpc::new(to);
        client.ready().await.expect("the channel is ready");
        if streaming {
            if let Ok(response) = client.server_streaming(request, path, RawCodec).await {
                let mut stream = response.into_inner();
                while let Ok(Some(_)) = stream.message().await {}
            }
        } else {
            // A recorded failure (a JWT refused) is an answer like any other.
            let _ = client.unary(request, path, RawCodec).await;
        }
    }
    let elapsed = started.elapsed();
    server
        .finish()
        .expect("the bare client sent what the cassette holds");
    elapsed
}

/// Prints what the harness added over `what` at p50 for `variant`, keeps it in `measured`
/// (written where `SANDBOX_MATRIX_BENCH_JSON` says); whether it is within the budget.
fn within_budget(
    measured: &mut Vec<serde_json::Value>,
    variant: &str,
    what: &str,
    harness: Vec<Duration>,
    bare: Vec<Duration>,
) -> bool {
    let (h, b) = (median(harness), median(bare));
    measured.push(serde_json::json!({
        "variant": variant,
        "what": what,
        "runs": RUNS,
        "delay_ms": DELAY.as_millis() as u64,
        "harness_p50_ms": ms(h),
        "bare_p50_ms": ms(b),
        "overhead_p50_ms": ms(h) - ms(b),
        "budget_ms": BUDGET.as_millis() as u64,
    }));
    println!(
        "{variant}: create-to-first-result over {what} held {} ms each, {RUNS} runs: harness p50 {:.2} ms, bare client p50 {:.2} ms, harness overhead p50 {:+.2} ms (budget {} ms)",
        DELAY.as_millis(),
        ms(h),
        ms(b),
        ms(h) - ms(b),
        BUDGET.as_millis()
    );
    h.saturating_sub(b) <= BUDGET
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
    let mut measured = Vec::new();
    for variant in variants::CLOUD {
        if let Some(wire) = &variant.grpc {
            let path = variants::cassette_path(&cassettes, variant.name, &scenario.name);
            let cassette = GrpcCassette::load(&path, (wire.descriptors)())
                .expect("the lifecycle cassette loads");
            let calls = grpc_create_to_first_result(&cassette);
            let (harness, bare): (Vec<Duration>, Vec<Duration>) = runtime.block_on(async {
                let (mut harness, mut bare) = (Vec::new(), Vec::new());
                for _ in 0..RUNS {
                    harness.push(
                        launches::harness_once(variant, &cassettes, &scenario, Pace::Fixed(DELAY))
                            .await,
                    );
                    bare.push(bare_grpc_once(&calls).await);
                }
                (harness, bare)
            });
            let what = format!("{} gRPC calls", calls.len());
            if !within_budget(&mut measured, variant.name, &what, harness, bare) {
                over.push(variant.name);
            }
            continue;
        }
        let Some((_, method, path)) = LAUNCH_STARTS
            .iter()
            .find(|(name, ..)| *name == variant.name)
        else {
            eprintln!(
                "{}: no first launch request in LAUNCH_STARTS; add the first request of the variant's launch to benches/overhead.rs",
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
        let exchanges = launches::create_to_first_result(&cassette, method, path);
        let (harness, bare): (Vec<Duration>, Vec<Duration>) = runtime.block_on(async {
            let mut harness = Vec::new();
            let mut bare = Vec::new();
            // Alternate, so that drift on a noisy machine hits both alike.
            for _ in 0..RUNS {
                harness.push(
                    launches::harness_once(variant, &cassettes, &scenario, Pace::Fixed(DELAY))
                        .await,
                );
                bare.push(
                    launches::bare_once(variant.name, &exchanges, &http, Pace::Fixed(DELAY)).await,
                );
            }
            (harness, bare)
        });
        let what = format!(
            "{} responses ({} of them polls)",
            exchanges.len(),
            polls(&exchanges)
        );
        if !within_budget(&mut measured, variant.name, &what, harness, bare) {
            over.push(variant.name);
        }
    }
    if let Ok(path) = std::env::var("SANDBOX_MATRIX_BENCH_JSON") {
        let text = serde_json::to_string_pretty(&measured).expect("plain JSON");
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("cannot write SANDBOX_MATRIX_BENCH_JSON={path}: {e}");
            std::process::exit(1);
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
