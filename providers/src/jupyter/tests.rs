use super::socket::parse_frame;
use super::*;

/// A readiness poll whose connection is accepted and never answered (as a server can
/// while it starts) is sent again after [`POLL_CALL_TIMEOUT`]; the next one answers.
#[tokio::test]
async fn a_poll_that_hangs_is_sent_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (hung, _) = listener.accept().await.unwrap();
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                .await;
            drop(socket);
            let _ = &hung;
        }
    });
    let started = std::time::Instant::now();
    let ready = JupyterServer::new(&url, "t")
        .wait_ready(Duration::from_secs(60))
        .await;
    server.abort();
    assert!(ready.is_ok(), "{ready:?}");
    assert!(
        started.elapsed() < POLL_CALL_TIMEOUT * 5,
        "the hung poll held the wait for {:?}",
        started.elapsed()
    );
}

#[test]
fn websocket_base_changes_only_the_scheme() {
    assert_eq!(
        websocket_base("http://127.0.0.1:8888").unwrap(),
        "ws://127.0.0.1:8888"
    );
    assert_eq!(
        websocket_base("https://example.test/user/x").unwrap(),
        "wss://example.test/user/x"
    );
    // "http" elsewhere in the URL stays as it is.
    assert_eq!(
        websocket_base("http://httpbin.test/http/").unwrap(),
        "ws://httpbin.test/http/"
    );
    assert_eq!(
        websocket_base("https://http.test").unwrap(),
        "wss://http.test"
    );
    let err = websocket_base("ftp://http.test").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(websocket_base("xhttp://a").is_err());
}

#[test]
fn new_drops_trailing_slash() {
    let server = JupyterServer::new("http://127.0.0.1:1/", "t");
    assert_eq!(server.base_url, "http://127.0.0.1:1");
    assert_eq!(
        websocket_base(&server.base_url).unwrap(),
        "ws://127.0.0.1:1"
    );
}

#[test]
fn debug_redacts_the_token() {
    // A made-up token for this test.
    let server = JupyterServer::new("http://127.0.0.1:8888", "fake-token-5150");
    let shown = format!("{server:?}");
    assert!(!shown.contains("fake-token-5150"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
    assert!(shown.contains("http://127.0.0.1:8888"), "{shown}");
}

#[test]
fn status_errors_carry_status_and_excerpt_and_hide_the_token() {
    let e = status_error(
        StatusCode::FORBIDDEN,
        "{\"message\": \"Forbidden\",\n \"reason\": null}",
        "t0k3n",
    )
    .context("POST /api/kernels");
    assert_eq!(e.kind, ErrorKind::Api);
    assert!(!e.retryable);
    assert_eq!(
        e.to_string(),
        "api error: HTTP 403 Forbidden: {\"message\": \"Forbidden\", \"reason\": null} (during POST /api/kernels)"
    );
    assert!(status_error(StatusCode::BAD_GATEWAY, "", "t").retryable);
    assert!(status_error(StatusCode::TOO_MANY_REQUESTS, "", "t").retryable);
    assert!(!status_error(StatusCode::NOT_FOUND, "", "t").retryable);
    let echoed = status_error(StatusCode::BAD_REQUEST, "bad token t0k3n here", "t0k3n");
    assert!(!echoed.to_string().contains("t0k3n"), "{echoed}");
}

#[test]
fn excerpt_is_short_and_single_line() {
    let long = "é".repeat(500);
    let cut = excerpt(&long, "");
    assert_eq!(cut.chars().count(), BODY_EXCERPT_CHARS + 1);
    assert!(cut.ends_with('…'));
    assert_eq!(excerpt("a\n\n  b", "tok"), "a b");
    assert_eq!(excerpt("  ", "tok"), "(empty body)");
}

#[test]
fn kernel_ids_must_be_id_like() {
    assert!(check_kernel_id("3f0c2a9e-5b1d-4c8e-9a7f-0123456789ab").is_ok());
    for bad in ["", "../api", "a/b", "a?b", "a b"] {
        assert_eq!(
            check_kernel_id(bad).unwrap_err().kind,
            ErrorKind::Config,
            "{bad:?}"
        );
    }
}

#[test]
fn session_ids_look_like_uuid_v4() {
    let a = random_session_id();
    let b = random_session_id();
    assert_ne!(a, b);
    let groups: Vec<_> = a.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
    assert_eq!(&a[14..15], "4", "{a}");
    assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
}

#[test]
fn outgoing_message_names_channel_session_and_empty_parent() {
    let message = JupyterMessage::new(ExecuteRequest::new("1+1".to_owned()), None)
        .with_session("s-1")
        .with_channel(Channel::Shell);
    let value = serde_json::to_value(&message).unwrap();
    assert_eq!(value["channel"], "shell");
    assert_eq!(value["header"]["session"], "s-1");
    assert_eq!(value["header"]["msg_type"], "execute_request");
    assert_eq!(value["parent_header"], serde_json::json!({}));
    assert_eq!(value["content"]["code"], "1+1");
    assert_eq!(value["content"]["user_expressions"], serde_json::json!({}));
}

/// A frame as jupyter_server sends it on the "" subprotocol.
fn frame(parent: &str, channel: &str, msg_type: &str, content: serde_json::Value) -> String {
    serde_json::json!({
            "header": {"msg_id": "m", "username": "u", "session": "s", "date": "2025-01-01T00:00:00.000001Z",
                       "msg_type": msg_type, "version": "5.3"},
            "msg_id": "m",
            "msg_type": msg_type,
            "parent_header": {"msg_id": parent, "username": "u", "session": "s",
                              "date": "2025-01-01T00:00:00Z", "msg_type": "execute_request", "version": "5.3"},
            "metadata": {},
            "content": content,
            "buffers": [],
            "channel": channel,
        })
        .to_string()
}

/// A kernel's channels as Jupyter Server can leave a socket opened after it skipped its
/// nudge. The first two sockets get each `kernel_info_reply` on shell and nothing on
/// iopub: `wait_kernel_ready` on the first fails with a retryable error that names
/// iopub, and `connect_ready` gives the second up once iopub has been silent
/// [`IOPUB_SILENCE`]. The third loses the status of its first request only, as a
/// socket whose iopub subscribed late does: the request sent again is the cure, and
/// `connect_ready` answers with that socket.
#[tokio::test]
async fn a_socket_whose_iopub_is_silent_is_given_up_and_opened_again() {
    use std::sync::Arc;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = opened.clone();
    let stub = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                let mut requests = 0;
                while let Some(Ok(Message::Text(text))) = ws.next().await {
                    requests += 1;
                    let iopub_connected = n == 2 && requests > 1;
                    let request: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let parent = request["header"]["msg_id"].as_str().unwrap().to_owned();
                    let reply = frame(
                        &parent,
                        "shell",
                        "kernel_info_reply",
                        serde_json::json!({"status": "ok", "protocol_version": "5.3",
                                               "language_info": {"name": "python", "version": "3.13"}}),
                    );
                    let _ = ws.send(Message::text(reply)).await;
                    if iopub_connected {
                        let idle = frame(
                            &parent,
                            "iopub",
                            "status",
                            serde_json::json!({"execution_state": "idle"}),
                        );
                        let _ = ws.send(Message::text(idle)).await;
                    }
                }
            });
        }
    });
    let server = JupyterServer::new(&url, "test-token");

    let mut silent = server.connect("k1").await.unwrap();
    let given_up = silent
        .wait_kernel_ready(Duration::from_secs(30))
        .await
        .expect_err("a socket with no iopub is not ready");
    assert!(given_up.retryable, "{given_up}");
    assert_eq!(given_up.kind, ErrorKind::Transport, "{given_up}");
    assert!(given_up.to_string().contains("iopub"), "{given_up}");
    silent.close().await;

    let started = Instant::now();
    let ready = server.connect_ready("k1", Duration::from_secs(30)).await;
    assert!(ready.is_ok(), "{:?}", ready.err());
    assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(
        started.elapsed() >= IOPUB_SILENCE,
        "the silent socket was given up after {:?}",
        started.elapsed()
    );
    stub.abort();

    // A socket the server closes at once is a failure to return, not to retry.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let closes = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await {
                let _ = ws.close(None).await;
            }
        }
    });
    let closed = JupyterServer::new(&url, "test-token")
        .connect_ready("k1", Duration::from_secs(30))
        .await
        .expect_err("a closed socket is not ready");
    assert_ne!(closed.kind, ErrorKind::Timeout, "{closed}");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "{closed}"
    );
    closes.abort();
}

/// A socket whose kernel dies mid-request (the server's `restarting` status, sent with
/// no parent) fails that request and says it is lost; so does one the server closes.
/// One that only ran requests is not.
#[tokio::test]
async fn a_socket_that_saw_its_kernel_die_or_close_is_lost() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stub = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(Message::Text(text))) = ws.next().await {
                    let request: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let parent = request["header"]["msg_id"].as_str().unwrap().to_owned();
                    let code = request["content"]["code"].as_str().unwrap_or_default();
                    if code == "die" {
                        let mut died: serde_json::Value = serde_json::from_str(&frame(
                            "",
                            "iopub",
                            "status",
                            serde_json::json!({"execution_state": "restarting"}),
                        ))
                        .unwrap();
                        died["parent_header"] = serde_json::json!({});
                        let _ = ws.send(Message::text(died.to_string())).await;
                        continue;
                    }
                    if code == "close" {
                        let _ = ws.close(None).await;
                        return;
                    }
                    for (channel, msg_type, content) in [
                        (
                            "shell",
                            "execute_reply",
                            serde_json::json!({"status": "ok", "execution_count": 1}),
                        ),
                        (
                            "iopub",
                            "status",
                            serde_json::json!({"execution_state": "idle"}),
                        ),
                    ] {
                        let _ = ws
                            .send(Message::text(frame(&parent, channel, msg_type, content)))
                            .await;
                    }
                }
            });
        }
    });
    let server = JupyterServer::new(&url, "test-token");
    let deadline = Duration::from_secs(30);

    let mut socket = server.connect("k1").await.unwrap();
    assert_eq!(socket.kernel_id(), "k1");
    socket.execute("1+1", deadline).await.unwrap();
    assert!(!socket.is_lost(), "a socket that only answered is not lost");
    let died = socket.execute("die", deadline).await.unwrap_err();
    assert!(died.to_string().contains("the kernel died"), "{died}");
    assert!(socket.is_lost(), "a socket that saw its kernel die is lost");

    let mut socket = server.connect("k1").await.unwrap();
    let closed = socket.execute("close", deadline).await.unwrap_err();
    assert_eq!(closed.kind, ErrorKind::Transport, "{closed}");
    assert!(socket.is_lost(), "a socket the server closed is lost");
    stub.abort();
}

fn feed(run: &mut Execution, frames: &[String]) -> Vec<bool> {
    frames
        .iter()
        .filter_map(|f| parse_frame(f))
        .map(|m| run.accept(&m))
        .collect()
}

#[test]
fn execution_collects_until_idle_and_reply() {
    let mut run = Execution::new("req".to_owned());
    assert!(run.missing().starts_with("neither"), "{}", run.missing());
    let frames = [
        frame(
            "req",
            "iopub",
            "status",
            serde_json::json!({"execution_state": "busy"}),
        ),
        frame(
            "req",
            "iopub",
            "execute_input",
            serde_json::json!({"code": "x", "execution_count": 1}),
        ),
        "not json".to_owned(),
        frame(
            "req",
            "iopub",
            "some_future_type",
            serde_json::json!({"a": 1}),
        ),
        frame(
            "other",
            "iopub",
            "stream",
            serde_json::json!({"name": "stdout", "text": "not ours\n"}),
        ),
        frame(
            "req",
            "iopub",
            "stream",
            serde_json::json!({"name": "stdout", "text": "hi\n"}),
        ),
        frame(
            "req",
            "iopub",
            "stream",
            serde_json::json!({"name": "stderr", "text": "warn\n"}),
        ),
        frame(
            "req",
            "iopub",
            "display_data",
            serde_json::json!({"data": {"text/plain": "1"}, "metadata": {}}),
        ),
        frame(
            "req",
            "iopub",
            "execute_result",
            serde_json::json!({"data": {"text/plain": "2", "text/html": "<b>2</b>"}, "metadata": {}, "execution_count": 1}),
        ),
        frame(
            "req",
            "iopub",
            "status",
            serde_json::json!({"execution_state": "idle"}),
        ),
    ];
    // Two frames do not parse (not JSON, unknown type) and are skipped.
    assert_eq!(feed(&mut run, &frames), [false; 8]);
    assert!(
        run.missing().ends_with("the execute_reply (shell) did not"),
        "{}",
        run.missing()
    );
    let reply = frame(
        "req",
        "shell",
        "execute_reply",
        serde_json::json!({"status": "ok", "execution_count": 1, "user_expressions": {}, "payload": []}),
    );
    assert_eq!(feed(&mut run, &[reply]), [true]);
    assert_eq!(
        run.output,
        CodeOutput {
            stdout: "hi\n".to_owned(),
            stderr: "warn\n".to_owned(),
            result: Some("2".to_owned()),
            error: None
        }
    );
}

#[test]
fn execution_reports_errors_and_waits_for_idle_after_reply() {
    let mut run = Execution::new("req".to_owned());
    let frames = [
        frame(
            "req",
            "iopub",
            "error",
            serde_json::json!({"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": []}),
        ),
        frame(
            "req",
            "shell",
            "execute_reply",
            serde_json::json!({"status": "error", "execution_count": 2, "ename": "ZeroDivisionError",
                                   "evalue": "division by zero", "traceback": [], "engine_info": {}}),
        ),
        frame(
            "req",
            "iopub",
            "status",
            serde_json::json!({"execution_state": "idle"}),
        ),
    ];
    assert_eq!(feed(&mut run, &frames[..2]), [false, false]);
    assert!(
        run.missing().ends_with("the idle status (iopub) did not"),
        "{}",
        run.missing()
    );
    assert_eq!(feed(&mut run, &frames[2..]), [true]);
    assert_eq!(
        run.output.error.as_deref(),
        Some("ZeroDivisionError: division by zero")
    );
    assert_eq!(run.output.result, None);
}

#[test]
fn execution_takes_the_error_from_the_reply_when_iopub_has_none() {
    let mut run = Execution::new("req".to_owned());
    let frames = [
        frame(
            "req",
            "iopub",
            "status",
            serde_json::json!({"execution_state": "idle"}),
        ),
        frame(
            "req",
            "shell",
            "execute_reply",
            serde_json::json!({"status": "error", "ename": "NameError", "evalue": "name 'x' is not defined",
                                   "traceback": []}),
        ),
    ];
    assert_eq!(feed(&mut run, &frames), [false, true]);
    assert_eq!(
        run.output.error.as_deref(),
        Some("NameError: name 'x' is not defined")
    );
}
