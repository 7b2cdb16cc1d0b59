//! What the harness itself costs: parsing scenarios, rendering reports, and serving
//! replayed exchanges. `cargo bench -p sandbox-matrix --bench harness`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sandbox_matrix::model::results::{
    Provenance, RESULTS_SCHEMA_VERSION, RunResults, ScenarioResult, Source, StepResult, StepStatus,
};
use sandbox_matrix::report;
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::Timing;
use sandbox_providers::api::cassette::{RecordedRequest, RecordedResponse};
use sandbox_providers::api::replay::{ReplayOptions, ReplayServer};
use sandbox_providers::api::{
    ApiClient, ApiRequest, ApiSettings, Body, Cassette, Endpoints, Exchange, Mode, Target,
    Volatiles,
};

#[path = "../tests/common/mod.rs"]
mod common;

use common::root;

fn parsing(c: &mut Criterion) {
    for name in ["lifecycle", "core-tier"] {
        let path = root().join(format!("scenarios/{name}.yaml"));
        let text = std::fs::read_to_string(&path).expect("scenario file");
        c.bench_function(&format!("parse scenario {name}"), |b| {
            b.iter(|| Scenario::parse(&path, black_box(&text)).expect("parses"))
        });
    }
}

/// Three variants × three scenarios × ten repetitions of eight steps: a nightly's worth.
fn nightly_results() -> RunResults {
    let steps = [
        "build",
        "launch",
        "first-result",
        "restart",
        "secrets-scan",
        "shutdown",
        "cleanup",
        "core-1-doctor",
    ];
    let mut scenarios = Vec::new();
    for variant in ["docker", "e2b", "daytona"] {
        for scenario in ["lifecycle", "core-tier", "burst"] {
            for repetition in 1..=10u32 {
                let ms = |base: u64| Duration::from_millis(base + u64::from(repetition) * 7);
                scenarios.push(ScenarioResult {
                    variant: variant.into(),
                    scenario: scenario.into(),
                    source: Source::Live,
                    scenario_hash: "0".repeat(64),
                    artifact_id: Some(format!("sha256:{}", "ab".repeat(32))),
                    provider_version: Some("v1".into()),
                    region: None,
                    capabilities: None,
                    steps: steps
                        .iter()
                        .enumerate()
                        .map(|(i, step)| StepResult {
                            step: (*step).into(),
                            status: if repetition == 3 && i == 3 {
                                StepStatus::Failed {
                                    reason: "kernel did not come back".into(),
                                }
                            } else {
                                StepStatus::Passed
                            },
                            duration: ms(400 * i as u64 + 100),
                            started: None,
                            budget: Duration::from_secs(60),
                            timings: Vec::new(),
                            log: vec!["a log line of moderate length, as builds print".into(); 20],
                            data: None,
                            reused: None,
                        })
                        .collect(),
                    timings: vec![Timing {
                        name: "create-to-first-result".into(),
                        duration: ms(6_000),
                        resolution: Some(Duration::from_millis(50)),
                    }],
                    leaked_resources: Vec::new(),
                    secrets_found: Vec::new(),
                    repetition,
                    samples: Vec::new(),
                    base_credential: Some("none: local base".into()),
                    secrets_scan: None,
                    base_chain: None,
                    lifetime: None,
                });
            }
        }
    }
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.into(),
        provenance: Provenance {
            run_id: "20261129T000000Z-000000".into(),
            harness_version: env!("CARGO_PKG_VERSION").into(),
            host: "bench".into(),
            started_at: "2026-11-29T00:00:00Z".into(),
            base: None,
            shards: Vec::new(),
            partition: None,
        },
        scenarios,
        orphans: Vec::new(),
    }
}

fn rendering(c: &mut Criterion) {
    let results = nightly_results();
    c.bench_function("render table (90 scenario runs)", |b| {
        b.iter(|| report::table::render(black_box(&results)))
    });
    c.bench_function("render junit (90 scenario runs)", |b| {
        b.iter(|| report::junit::render(black_box(&results)))
    });
    let history = report::html::History {
        runs: vec![results.clone(); report::html::HISTORY_RUNS],
        warnings: Vec::new(),
    };
    c.bench_function("render html (90 scenario runs, 30 runs of history)", |b| {
        b.iter(|| report::html::render(black_box(&results), black_box(&history)))
    });
    c.bench_function("stats of every metric (90 scenario runs)", |b| {
        b.iter(|| {
            sandbox_matrix::analyze::stats::metrics(black_box(&results))
                .iter()
                .map(|m| m.summary())
                .collect::<Vec<_>>()
        })
    });
    c.bench_function("compare two runs (90 scenario runs each)", |b| {
        b.iter(|| {
            sandbox_matrix::analyze::compare::compare(black_box(&results), black_box(&results))
        })
    });
    c.bench_function("results.json round trip (90 scenario runs)", |b| {
        b.iter(|| {
            let text = serde_json::to_string(black_box(&results)).expect("serializes");
            serde_json::from_str::<RunResults>(&text).expect("parses")
        })
    });
}

/// Requests per second through the replay server and the same client the variants use.
fn replay(c: &mut Criterion) {
    const CALLS: usize = 200;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let exchange = |i: usize| Exchange {
        request: RecordedRequest {
            method: "POST".into(),
            path: "/sandbox/49999/sb-1/execute".into(),
            headers: Default::default(),
            body: Some(Body::Json(serde_json::json!({"code": "1+1", "n": i}))),
        },
        response: RecordedResponse {
            status: 200,
            headers: Default::default(),
            body: Some(Body::JsonLines(vec![
                serde_json::json!({"type": "result", "text": "2"}),
                serde_json::json!({"type": "end_of_execution"}),
            ])),
            latency_ms: 0.0,
            reset_after_bytes: None,
        },
        repeat: false,
        group: None,
        websocket: None,
    };
    let cassette = Cassette {
        origin: "authored for the replay benchmark".into(),
        written: None,
        variant: "bench".into(),
        scenario: "throughput".into(),
        note: None,
        exchanges: (0..CALLS).map(exchange).collect(),
    };
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(CALLS as u64));
    group.sample_size(20);
    group.bench_function(format!("{CALLS} sequential exchanges"), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let volatiles = Arc::new(Volatiles::default());
                let server = ReplayServer::start(
                    cassette.clone(),
                    ReplayOptions {
                        volatiles: volatiles.clone(),
                        ..ReplayOptions::default()
                    },
                )
                .await
                .expect("replay server");
                let client = ApiClient::new(ApiSettings {
                    endpoints: Endpoints {
                        api_base: server.url(),
                        sandbox_domain: "sandbox.invalid".into(),
                    },
                    mode: Mode::Replay {
                        server_url: server.url(),
                        pace: sandbox_providers::api::replay::Pace::Instant,
                    },
                    credentials: Vec::new(),
                    volatiles,
                    call_timeout: Duration::from_secs(10),
                })
                .expect("client");
                for i in 0..CALLS {
                    let target = Target::Sandbox {
                        port: 49999,
                        sandbox_id: "sb-1".into(),
                    };
                    client
                        .call(
                            ApiRequest::post(target, "/execute")
                                .json(serde_json::json!({"code": "1+1", "n": i})),
                        )
                        .await
                        .expect("served");
                }
                server.finish().expect("every exchange served");
            })
        })
    });
    group.finish();
}

/// Every cloud variant × scenario that has a cassette, replayed at instant pace through
/// the runner, one after the other, as `sandbox-matrix run` does without Docker.
fn replayed_matrix(c: &mut Criterion) {
    use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
    use sandbox_matrix::run::variants::{self, CloudMode};
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let cassettes = root().join(variants::CASSETTES_DIR);
    let mode = CloudMode::Replay {
        dir: cassettes.clone(),
        pace: sandbox_providers::api::replay::Pace::Instant,
    };
    let mut plan = Vec::new();
    for cloud in variants::CLOUD {
        for name in ["lifecycle", "core-tier"] {
            if variants::cassette_path(&cassettes, cloud.name, name).is_file() {
                let scenario = Scenario::load(&root().join(format!("scenarios/{name}.yaml")))
                    .expect("scenario");
                plan.push((cloud, scenario));
            }
        }
    }
    let mut group = c.benchmark_group("replayed matrix");
    group.sample_size(10);
    group.bench_function(format!("{} variant × scenario runs", plan.len()), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let runner = Runner::new(
                    new_run_id(),
                    fake_canary(),
                    Arc::new(common::Quiet),
                    tokio_util::sync::CancellationToken::new(),
                );
                for (cloud, scenario) in &plan {
                    let result = common::run_cloud(&runner, cloud, scenario, &mode).await;
                    assert!(
                        result.passed(),
                        "{} {} failed",
                        result.variant,
                        result.scenario
                    );
                }
            })
        })
    });
    group.finish();
}

criterion_group!(benches, parsing, rendering, replay, replayed_matrix);
criterion_main!(benches);
