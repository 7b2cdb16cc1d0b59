//! The HTTP layer against the replay server: matching, retries, faults, record and the
//! placeholders that keep credentials out of cassettes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_providers::api::cassette::{RecordedRequest, RecordedResponse};
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{
    ApiClient, ApiRequest, ApiSettings, Body, Cassette, Endpoints, Exchange, Mode, Recorder,
    ReqBody, Target, Volatiles,
};
use sandbox_providers::{ErrorKind, Secret};
use serde_json::json;

/// A fake credential, made up for these tests; it grants nothing anywhere.
fn fake_key() -> Secret {
    Secret::new("EXAMPLE_API_KEY", "fake-key-0f9e8d7c6b5a")
}

fn exchange(
    method: &str,
    path: &str,
    body: Option<Body>,
    status: u16,
    reply: Option<Body>,
) -> Exchange {
    Exchange {
        request: RecordedRequest {
            method: method.into(),
            path: path.into(),
            headers: Default::default(),
            body,
        },
        response: RecordedResponse {
            status,
            headers: Default::default(),
            body: reply,
            latency_ms: 40.0,
            reset_after_bytes: None,
        },
        repeat: false,
        group: None,
        websocket: None,
    }
}

fn cassette(exchanges: Vec<Exchange>) -> Cassette {
    Cassette {
        origin: "authored for the api_replay tests".into(),
        written: None,
        variant: "example".into(),
        scenario: "unit".into(),
        note: None,
        exchanges,
    }
}

async fn serve(c: Cassette, volatiles: Arc<Volatiles>) -> (ReplayServer, ApiClient) {
    let server = ReplayServer::start(
        c,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: vec![fake_key()],
            volatiles: volatiles.clone(),
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let client = client(
        Mode::Replay {
            server_url: server.url(),
            pace: sandbox_providers::api::replay::Pace::Instant,
        },
        volatiles,
    );
    (server, client)
}

fn client(mode: Mode, volatiles: Arc<Volatiles>) -> ApiClient {
    ApiClient::new(ApiSettings {
        endpoints: Endpoints {
            api_base: "http://127.0.0.1:9".into(),
            sandbox_domain: "sandbox.invalid".into(),
        },
        mode,
        credentials: vec![fake_key()],
        volatiles,
        call_timeout: Duration::from_secs(10),
    })
    .unwrap()
}

#[tokio::test]
async fn serves_in_order_with_volatiles_and_flags_what_differs() {
    let volatiles = Arc::new(Volatiles::default());
    let c = cassette(vec![
        exchange(
            "POST",
            "/sandboxes",
            Some(Body::Json(json!({"metadata": {"run": "<run-id>"}}))),
            201,
            Some(Body::Json(json!({"sandboxID": "sb-1"}))),
        ),
        exchange(
            "GET",
            "/sandboxes/sb-1",
            None,
            200,
            Some(Body::Json(json!({"state": "pending"}))),
        ),
        exchange(
            "GET",
            "/sandboxes/sb-1",
            None,
            200,
            Some(Body::Json(json!({"state": "running"}))),
        ),
        exchange("DELETE", "/sandboxes/sb-1", None, 204, None),
    ]);
    let (server, client) = serve(c, volatiles.clone()).await;
    // This run's id differs from the recording's; the placeholder makes them equal.
    volatiles.register("run-id", "20261129T000000Z-abcdef");
    let created = client
        .call(
            ApiRequest::post(Target::Api, "/sandboxes")
                .json(json!({"metadata": {"run": "20261129T000000Z-abcdef"}})),
        )
        .await
        .unwrap();
    assert_eq!(created.status, 201);
    let first: serde_json::Value = client
        .call(ApiRequest::get(Target::Api, "/sandboxes/sb-1"))
        .await
        .unwrap()
        .json()
        .unwrap();
    let second: serde_json::Value = client
        .call(ApiRequest::get(Target::Api, "/sandboxes/sb-1"))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        (first["state"].as_str(), second["state"].as_str()),
        (Some("pending"), Some("running"))
    );
    // A request the cassette lacks: 418, not retried, with the nearest exchange named.
    let err = client
        .call(ApiRequest::delete(Target::Api, "/sandboxes/sb-2"))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Api);
    assert!(
        err.message.contains("418")
            && err.message.contains(
                "exchange #3: expected DELETE /sandboxes/sb-1, came DELETE /sandboxes/sb-2"
            ),
        "{err}"
    );
    let problems = server.finish().unwrap_err().to_string();
    assert!(
        problems.contains(
            "did not go as recorded: exchange #3: expected DELETE /sandboxes/sb-1, came DELETE /sandboxes/sb-2;"
        ),
        "{problems}"
    );
    assert!(
        problems.contains("exchange #3 (DELETE /sandboxes/sb-1) was never requested"),
        "{problems}"
    );
}

#[tokio::test]
async fn retries_429_after_retry_after_and_500_only_when_idempotent() {
    let mut limited = exchange(
        "GET",
        "/templates",
        None,
        429,
        Some(Body::Text("slow down".into())),
    );
    limited
        .response
        .headers
        .insert("retry-after".into(), "1".into());
    let c = cassette(vec![
        limited,
        exchange("GET", "/templates", None, 200, Some(Body::Json(json!([])))),
        exchange("GET", "/templates/t", None, 500, None),
        exchange(
            "GET",
            "/templates/t",
            None,
            200,
            Some(Body::Json(json!({}))),
        ),
        exchange(
            "POST",
            "/templates",
            None,
            500,
            Some(Body::Text("boom".into())),
        ),
    ]);
    let (server, client) = serve(c, Arc::new(Volatiles::default())).await;
    let started = Instant::now();
    client
        .call(ApiRequest::get(Target::Api, "/templates"))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    client
        .call(ApiRequest::get(Target::Api, "/templates/t"))
        .await
        .unwrap();
    let err = client
        .call(ApiRequest::post(Target::Api, "/templates").what("create template"))
        .await
        .unwrap_err();
    assert!(
        err.retryable && err.to_string().contains("HTTP 500: boom"),
        "{err}"
    );
    assert!(err.to_string().contains("create template"), "{err}");
    server.finish().unwrap();
    let served: Vec<u16> = server.observed().iter().map(|o| o.status).collect();
    assert_eq!(served, vec![429, 200, 500, 200, 500]);
}

#[tokio::test]
async fn a_reset_mid_stream_is_a_transport_error_and_not_retried() {
    let mut cut = exchange(
        "POST",
        "/sandbox/49999/sb-1/execute",
        Some(Body::Json(json!({"code": "1+1"}))),
        200,
        Some(Body::JsonLines(vec![
            json!({"type": "stdout", "text": "a"}),
            json!({"type": "result", "text": "2"}),
        ])),
    );
    cut.response.reset_after_bytes = Some(20);
    let (server, client) = serve(cassette(vec![cut]), Arc::new(Volatiles::default())).await;
    let err = client
        .call(
            ApiRequest::post(
                Target::Sandbox {
                    port: 49999,
                    sandbox_id: "sb-1".into(),
                },
                "/execute",
            )
            .json(json!({"code": "1+1"}))
            .what("execute"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport, "{err}");
    assert!(
        err.message.contains("reset mid-stream after 20 bytes"),
        "{err}"
    );
    server.finish().unwrap();
    assert_eq!(
        server.observed().len(),
        1,
        "a non-idempotent call was retried"
    );
}

#[tokio::test]
async fn a_repeating_poll_answers_until_the_budget_ends() {
    let mut pending = exchange(
        "GET",
        "/sandboxes/sb-1",
        None,
        200,
        Some(Body::Json(json!({"state": "pending"}))),
    );
    pending.repeat = true;
    let (server, client) = serve(cassette(vec![pending]), Arc::new(Volatiles::default())).await;
    let poller = client.clone();
    let err = poller
        .poll_until("sandbox sb-1 running", Duration::from_millis(400), || {
            let client = client.clone();
            async move {
                let state: serde_json::Value = client
                    .call(ApiRequest::get(Target::Api, "/sandboxes/sb-1"))
                    .await?
                    .json()?;
                Ok((state["state"] == "running").then_some(()))
            }
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert!(server.observed().len() >= 3);
    server.finish().unwrap();
}

#[tokio::test]
async fn recording_writes_placeholders_and_replays_what_it_wrote() {
    let volatiles = Arc::new(Volatiles::default());
    let original = cassette(vec![
        exchange(
            "POST",
            "/sandbox/49983/sb-1/process.Process/Start",
            Some(Body::Connect(vec![sandbox_providers::api::ConnectFrame {
                flags: 0,
                message: json!({"process": {"cmd": "echo", "args": ["<marker>"]}}),
            }])),
            200,
            Some(Body::Connect(vec![
                sandbox_providers::api::ConnectFrame {
                    flags: 0,
                    message: json!({"event": {"end": {"exitCode": 0}}}),
                },
                sandbox_providers::api::ConnectFrame {
                    flags: 2,
                    message: json!({}),
                },
            ])),
        ),
        exchange(
            "GET",
            "/tokens",
            None,
            200,
            Some(Body::Json(json!({"token": "<redacted:EXAMPLE_API_KEY>"}))),
        ),
    ]);
    let (server, _) = serve(original.clone(), volatiles.clone()).await;
    volatiles.register("marker", "sm-marker-1234");
    let dir = std::env::temp_dir().join(format!("sm-record-{}", std::process::id()));
    let recorder = Arc::new(Recorder::new(
        dir.join("unit.yaml"),
        "recorded from a replay in a test",
        "example",
        "unit",
    ));
    // Record mode against the replay server, as a live provider would be recorded.
    let recording = ApiClient::new(ApiSettings {
        endpoints: Endpoints {
            api_base: server.url(),
            sandbox_domain: "sandbox.invalid".into(),
        },
        mode: Mode::Record(recorder.clone()),
        credentials: vec![fake_key()],
        volatiles: volatiles.clone(),
        call_timeout: Duration::from_secs(10),
    })
    .unwrap();
    // Sandbox targets go to a live domain in record mode; use the absolute form here.
    let frames = recording
        .call(
            ApiRequest::post(
                Target::Absolute(format!(
                    "{}/sandbox/49983/sb-1/process.Process/Start",
                    server.url()
                )),
                "",
            )
            .body(ReqBody::ConnectStream(
                json!({"process": {"cmd": "echo", "args": ["sm-marker-1234"]}}),
            ))
            .header("authorization", format!("Bearer {}", fake_key().expose())),
        )
        .await
        .unwrap()
        .connect_frames()
        .unwrap();
    assert_eq!(frames[1].flags, 2);
    recording
        .call(ApiRequest::get(Target::Api, "/tokens").header("x-api-key", fake_key().expose()))
        .await
        .unwrap();
    server.finish().unwrap();
    let path = recorder.finish().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains(fake_key().expose()),
        "the fake key reached the cassette:\n{text}"
    );
    assert!(
        !text.contains("sm-marker-1234"),
        "a volatile reached the cassette:\n{text}"
    );
    assert!(
        text.contains("<redacted:EXAMPLE_API_KEY>") && text.contains("<marker>"),
        "{text}"
    );
    let written = Cassette::load(&path).unwrap();
    let dated = humantime::parse_rfc3339(written.written.as_deref().expect("dated"))
        .expect("an RFC 3339 time");
    let age = std::time::SystemTime::now()
        .duration_since(dated)
        .expect("not in the future");
    assert!(
        age.as_secs() < 60,
        "the recorder dates what it writes: {age:?} ago"
    );
    assert_eq!(
        written.exchanges[0].request.body,
        original.exchanges[0].request.body
    );
    assert_eq!(
        written.exchanges[0].response.body,
        original.exchanges[0].response.body
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Serves `exchanges`, each a GET of its path answering 200, grouped as `group` says.
async fn paths(paths: &[&str], group: Option<&str>) -> (ReplayServer, ApiClient) {
    let exchanges = paths
        .iter()
        .map(|path| Exchange {
            group: group.map(str::to_owned),
            ..exchange("GET", path, None, 200, Some(Body::Json(json!({}))))
        })
        .collect();
    serve(cassette(exchanges), Arc::new(Volatiles::default())).await
}

async fn get(client: &ApiClient, path: &str) -> sandbox_providers::Result<u16> {
    Ok(client
        .call(ApiRequest::get(Target::Api, path))
        .await?
        .status)
}

#[tokio::test]
async fn inside_a_group_either_order_passes() {
    for order in [["/a", "/b"], ["/b", "/a"]] {
        let (server, client) = paths(&["/a", "/b"], Some("pair")).await;
        for path in order {
            assert_eq!(get(&client, path).await.unwrap(), 200, "{order:?}");
        }
        server.finish().unwrap();
    }
    // At once, as concurrent launches would be.
    let (server, client) = paths(&["/a", "/b"], Some("pair")).await;
    let (a, b) = tokio::join!(get(&client, "/b"), get(&client, "/a"));
    assert_eq!((a.unwrap(), b.unwrap()), (200, 200));
    server.finish().unwrap();
}

#[tokio::test]
async fn outside_a_group_the_wrong_order_fails_naming_the_exchange() {
    let (server, client) = paths(&["/a", "/b"], None).await;
    let err = get(&client, "/b").await.unwrap_err();
    assert!(
        err.message.contains(
            "exchange #0: expected GET /a, came GET /b; it matches #1, later in the cassette"
        ),
        "{err}"
    );
    assert_eq!(get(&client, "/a").await.unwrap(), 200);
    let problems = server.finish().unwrap_err().to_string();
    assert!(
        problems.contains("replay of the example unit cassette did not go as recorded")
            && problems.contains("exchange #1 (GET /b) was never requested"),
        "{problems}"
    );
    // The same two, ordered as recorded, pass.
    let (server, client) = paths(&["/a", "/b"], None).await;
    for path in ["/a", "/b"] {
        get(&client, path).await.unwrap();
    }
    server.finish().unwrap();
}

#[tokio::test]
async fn an_exchange_never_requested_fails_the_replay() {
    let (server, client) = paths(&["/a", "/b"], None).await;
    get(&client, "/a").await.unwrap();
    let problems = server.finish().unwrap_err().to_string();
    assert!(
        problems.ends_with("exchange #1 (GET /b) was never requested"),
        "{problems}"
    );
}

#[tokio::test]
async fn a_repeat_answers_again_only_until_the_next_exchange_is_served() {
    let mut unhealthy = exchange("GET", "/health", None, 404, None);
    unhealthy.repeat = true;
    let (server, client) = serve(
        cassette(vec![
            unhealthy,
            exchange("DELETE", "/sandboxes/sb-1", None, 204, None),
        ]),
        Arc::new(Volatiles::default()),
    )
    .await;
    for _ in 0..3 {
        let err = get(&client, "/health").await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    }
    client
        .call(ApiRequest::delete(Target::Api, "/sandboxes/sb-1"))
        .await
        .unwrap();
    let err = get(&client, "/health").await.unwrap_err();
    assert!(
        err.message
            .contains("came GET /health after every exchange was served"),
        "{err}"
    );
    assert!(server.finish().is_err());
}

#[tokio::test]
async fn a_body_mismatch_is_a_short_diff_of_the_first_differing_keys() {
    let long = "x".repeat(500);
    let (server, client) = serve(
        cassette(vec![exchange(
            "POST",
            "/execute",
            Some(Body::Json(
                json!({"code": "1+1", "context_id": "ctx-1", "env": {"LANG": "C.UTF-8"}, "note": long}),
            )),
            200,
            None,
        )]),
        Arc::new(Volatiles::default()),
    )
    .await;
    let err = client
        .call(
            ApiRequest::post(Target::Api, "/execute")
                .json(json!({"code": "2+2", "context_id": "ctx-1", "env": {}, "note": "short"})),
        )
        .await
        .unwrap_err();
    let message = err.message;
    assert!(
        message.contains(r#"exchange #0, POST /execute: body /code: expected "1+1", came "2+2""#)
            && message.contains(r#"body /env/LANG: expected "C.UTF-8", came none"#),
        "{message}"
    );
    // A long value is cut, so the whole answer stays short.
    assert!(message.contains("xxx…, came \"short\""), "{message}");
    assert!(message.len() < 600, "{} bytes: {message}", message.len());
    assert!(server.finish().is_err());
}

#[tokio::test]
async fn the_recorder_groups_requests_in_flight_together_and_keeps_matched_headers() {
    // Served slowly, so that two requests sent at once are in flight together.
    let grouped = |e: Exchange| Exchange {
        group: Some("pair".into()),
        ..e
    };
    let original = cassette(vec![
        grouped(exchange(
            "GET",
            "/a",
            None,
            200,
            Some(Body::Json(json!({}))),
        )),
        grouped(exchange(
            "GET",
            "/b",
            None,
            200,
            Some(Body::Json(json!({}))),
        )),
        exchange("POST", "/c", Some(Body::Json(json!({}))), 200, None),
    ]);
    let server = ReplayServer::start(
        original,
        ReplayOptions {
            pace: Pace::Fixed(Duration::from_millis(150)),
            credentials: vec![fake_key()],
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("sm-record-groups-{}", std::process::id()));
    let recorder = Arc::new(Recorder::new(
        dir.join("unit.yaml"),
        "recorded from a replay in a test",
        "example",
        "unit",
    ));
    let recording = ApiClient::new(ApiSettings {
        endpoints: Endpoints {
            api_base: server.url(),
            sandbox_domain: "sandbox.invalid".into(),
        },
        mode: Mode::Record(recorder.clone()),
        credentials: vec![fake_key()],
        volatiles: Arc::new(Volatiles::default()),
        call_timeout: Duration::from_secs(10),
    })
    .unwrap();
    let (a, b) = tokio::join!(
        recording.call(ApiRequest::get(Target::Api, "/a")),
        recording.call(ApiRequest::get(Target::Api, "/b")),
    );
    a.unwrap();
    b.unwrap();
    // Every header either variant's replay matches, as the clients set them.
    let mut matched: Vec<&str> = sandbox_providers::e2b::REPLAY_MATCHED_HEADERS
        .iter()
        .chain(sandbox_providers::daytona::REPLAY_MATCHED_HEADERS)
        .copied()
        .collect();
    matched.sort_unstable();
    matched.dedup();
    let mut request = ApiRequest::post(Target::Api, "/c").json(json!({}));
    for name in matched.iter().filter(|n| **n != "content-type") {
        request = request.header(name, format!("Bearer {}", fake_key().expose()));
    }
    recording.call(request).await.unwrap();
    server.finish().unwrap();
    let written = Cassette::load(&recorder.finish().unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let groups: Vec<Option<&str>> = written
        .exchanges
        .iter()
        .map(|e| e.group.as_deref())
        .collect();
    assert_eq!(
        groups,
        vec![Some("concurrent-1"), Some("concurrent-1"), None],
        "{written:#?}"
    );
    let kept = &written.exchanges[2].request.headers;
    for name in &matched {
        assert!(kept.contains_key(*name), "{name} not recorded: {kept:?}");
    }
    assert_eq!(kept["authorization"], "Bearer <redacted:EXAMPLE_API_KEY>");
}
