//! WebSocket exchanges recorded by the client's recorder and served back by the replay
//! server as strictly as HTTP: frames in order, a client frame that differs fails with a
//! diff naming the cassette, the exchange and the frame, an exchange never opened fails
//! `finish()`, and sockets open at once are a group. All on loopback.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::ws::{WsMessage, accept, close_with, split_upgrades};
use sandbox_providers::api::{
    ApiClient, ApiRequest, ApiSettings, Cassette, Endpoints, Mode, Recorder, Target, Volatiles,
    WsFrame,
};
use sandbox_providers::{ErrorKind, Secret};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// A fake key, made up for these tests; it grants nothing anywhere.
fn fake_key() -> Secret {
    Secret::new("WS_TEST_KEY", "fake-ws-key-0000")
}

const HEADERS: &[&str] = &["authorization"];

fn client(base: &str, mode: Mode) -> ApiClient {
    ApiClient::new(ApiSettings {
        endpoints: Endpoints {
            api_base: base.to_owned(),
            sandbox_domain: String::new(),
        },
        mode,
        credentials: vec![fake_key()],
        volatiles: Arc::new(Volatiles::default()),
        call_timeout: Duration::from_secs(10),
    })
    .expect("the client starts")
}

/// A server that answers each JSON frame `{code}` with a stdout frame echoing the code
/// (after `delay`), a completion frame and a close, as Daytona's interpreter does.
async fn interpreter(delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Nothing but upgrades comes: the upstream is never dialled.
    let upstream = "127.0.0.1:9".parse().unwrap();
    split_upgrades(listener, upstream, move |stream| async move {
        let Some(mut socket) = accept(stream, |_| Ok(())).await else {
            return;
        };
        let Some(Ok(Message::Text(text))) = socket.next().await else {
            return;
        };
        let request: Value = serde_json::from_str(text.as_str()).unwrap();
        tokio::time::sleep(delay).await;
        for frame in [
            json!({"type": "stdout", "text": request["code"]}),
            json!({"type": "control", "text": "completed"}),
        ] {
            socket.send(Message::text(frame.to_string())).await.unwrap();
        }
        close_with(&mut socket, 1000, "").await;
    });
    url
}

/// Opens a socket, sends `{code}` and returns what came back until the close.
async fn run(client: &ApiClient, code: &str) -> sandbox_providers::Result<Vec<WsMessage>> {
    let mut socket = client
        .websocket(
            ApiRequest::get(Target::Api, "/process/interpreter/execute")
                .header("Authorization", format!("Bearer {}", fake_key().expose()))
                .what("execute"),
        )
        .await?;
    socket.send_json(&json!({ "code": code })).await?;
    let mut got = Vec::new();
    loop {
        let message = socket.next(Duration::from_secs(5)).await?;
        let closed = matches!(message, WsMessage::Closed { .. });
        got.push(message);
        if closed {
            return Ok(got);
        }
    }
}

fn temp_cassette(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "sandbox-matrix-ws-{name}-{}.yaml",
        std::process::id()
    ))
}

/// Records `codes` run one after the other (or at once, `together`) into a cassette.
async fn record(name: &str, codes: &[&str], together: bool) -> (Cassette, PathBuf) {
    let live = interpreter(Duration::from_millis(if together { 200 } else { 0 })).await;
    let path = temp_cassette(name);
    let recorder = Arc::new(Recorder::new(&path, "authored for a test", "ws", name));
    let client = client(&live, Mode::Record(recorder.clone()));
    if together {
        let runs = codes.iter().map(|code| run(&client, code));
        for got in futures_util::future::join_all(runs).await {
            got.unwrap();
        }
    } else {
        for code in codes {
            run(&client, code).await.unwrap();
        }
    }
    recorder.finish().unwrap();
    (Cassette::load(&path).unwrap(), path)
}

/// Serves `cassette`; the file it was recorded to at `path` is named in messages only, and
/// removed here, as every test replays after it reads what it recorded.
async fn replay(cassette: Cassette, path: PathBuf) -> (ReplayServer, ApiClient) {
    let _ = std::fs::remove_file(&path);
    let server = ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: vec![fake_key()],
            matched_headers: HEADERS,
            cassette_path: Some(path),
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let client = client(
        "http://127.0.0.1:9",
        Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
    );
    (server, client)
}

#[tokio::test]
async fn a_socket_is_recorded_as_readable_frames_in_order_and_replays() {
    let (cassette, path) = record("order", &["1+1"], false).await;
    let exchange = &cassette.exchanges[0];
    assert_eq!(exchange.request.method, "GET");
    assert_eq!(exchange.request.path, "/process/interpreter/execute");
    assert_eq!(
        exchange
            .request
            .headers
            .get("authorization")
            .map(String::as_str),
        Some("Bearer <redacted:WS_TEST_KEY>")
    );
    assert_eq!(exchange.response.status, 101);
    assert_eq!(
        exchange.websocket.as_deref().unwrap(),
        [
            WsFrame::Client(json!({"code": "1+1"})),
            WsFrame::Server(json!({"type": "stdout", "text": "1+1"})),
            WsFrame::Server(json!({"type": "control", "text": "completed"})),
            WsFrame::Close {
                code: 1000,
                reason: String::new()
            },
        ]
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("- client:") && text.contains("code: 1+1"),
        "frames are readable YAML: {text}"
    );
    assert!(!text.contains(fake_key().expose()));

    let (server, client) = replay(cassette, path).await;
    let got = run(&client, "1+1").await.unwrap();
    assert_eq!(
        got,
        [
            WsMessage::Json(json!({"type": "stdout", "text": "1+1"})),
            WsMessage::Json(json!({"type": "control", "text": "completed"})),
            WsMessage::Closed {
                code: 1000,
                reason: String::new()
            },
        ]
    );
    server.finish().unwrap();
}

#[tokio::test]
async fn a_client_frame_that_differs_fails_the_replay_with_a_diff() {
    let (cassette, path) = record("mismatch", &["1+1"], false).await;
    let (server, client) = replay(cassette, path.clone()).await;
    let got = run(&client, "2+2").await.unwrap();
    let Some(WsMessage::Closed { code, reason }) = got.last() else {
        panic!("the socket is closed: {got:?}");
    };
    assert_eq!(*code, 1008, "{reason}");
    assert!(reason.contains("frame #0"), "{reason}");
    let e = server.finish().unwrap_err();
    let shown = e.to_string();
    for part in [
        path.display().to_string().as_str(),
        "exchange #0",
        "frame #0",
        r#"frame /code: expected "1+1", came "2+2""#,
    ] {
        assert!(shown.contains(part), "`{part}` in: {shown}");
    }
}

#[tokio::test]
async fn a_wrong_header_on_the_upgrade_is_refused_like_an_http_request() {
    let (cassette, path) = record("header", &["1+1"], false).await;
    let (server, _) = replay(cassette, path).await;
    let other = client(
        "http://127.0.0.1:9",
        Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
    );
    let e = other
        .websocket(
            ApiRequest::get(Target::Api, "/process/interpreter/execute")
                .header("Authorization", "Bearer someone-else")
                .what("execute"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Api, "{e}");
    assert!(e.to_string().contains("HTTP 418"), "{e}");
    assert!(
        e.to_string().contains("header authorization"),
        "the refusal says why: {e}"
    );
    assert!(server.finish().is_err());
}

#[tokio::test]
async fn a_socket_never_opened_fails_finish() {
    let (cassette, path) = record("unused", &["1+1"], false).await;
    let (server, _) = replay(cassette, path).await;
    let e = server.finish().unwrap_err();
    assert!(
        e.to_string()
            .contains("exchange #0 (GET /process/interpreter/execute) was never requested"),
        "{e}"
    );
}

#[tokio::test]
async fn sockets_open_at_once_are_a_group_and_replay_in_any_order() {
    let (cassette, path) = record("group", &["a = 1", "b = 2"], true).await;
    let groups: Vec<Option<&str>> = cassette
        .exchanges
        .iter()
        .map(|e| e.group.as_deref())
        .collect();
    assert_eq!(groups, [Some("concurrent-1"), Some("concurrent-1")]);
    let (server, client) = replay(cassette.clone(), path.clone()).await;
    // The second recorded first: within a group, order is free.
    let second = cassette.exchanges[1].websocket.as_ref().unwrap()[0].clone();
    let WsFrame::Client(second) = second else {
        panic!("the first frame is the client's")
    };
    let first = if second["code"] == "a = 1" {
        "b = 2"
    } else {
        "a = 1"
    };
    run(&client, second["code"].as_str().unwrap())
        .await
        .unwrap();
    run(&client, first).await.unwrap();
    server.finish().unwrap();
}
