use super::*;
use crate::modal::proto::client::modal_client_client::ModalClientClient;
use crate::modal::proto::client::{
    AppGetOrCreateRequest, ImageJoinStreamingRequest, SandboxTerminateRequest,
};
use crate::modal::proto::descriptors;
use futures_util::StreamExt as _;

// A fake credential, never a real one.
const FAKE_SECRET: &str = "sm-fake-modal-token-secret";

const CASSETTE: &str = r#"
origin: authored by hand from the subset api.proto, for the replay server's tests
written: 2026-12-01
variant: modal
scenario: replay-unit
exchanges:
- method: /modal.client.ModalClient/AppGetOrCreate
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {app_name: sandbox-matrix, object_creation_type: OBJECT_CREATION_TYPE_CREATE_IF_MISSING}
  responses: [{app_id: ap-1}]
  grpc-status: 0
- method: /modal.client.ModalClient/ImageJoinStreaming
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {image_id: im-1, timeout: 55}
  responses:
  - {task_logs: [{data: "Step 1\n", file_descriptor: FILE_DESCRIPTOR_STDOUT}], entry_id: "1"}
  - {result: {status: GENERIC_STATUS_SUCCESS}, eof: true}
  grpc-status: 0
- method: /modal.client.ModalClient/SandboxTerminate
  metadata:
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
  request: {sandbox_id: sb-1}
  grpc-status: 14
  grpc-message: "try again: 50% busy"
"#;

async fn server() -> (
    GrpcReplayServer,
    ModalClientClient<tonic::transport::Channel>,
) {
    let pool = descriptors().clone();
    let cassette = GrpcCassette::parse(CASSETTE, &pool).expect("the test cassette parses");
    let options = GrpcOptions {
        credentials: vec![Secret::new("MODAL_TOKEN_SECRET", FAKE_SECRET)],
        matched_metadata: vec!["x-modal-token-secret".to_owned()],
        ..GrpcOptions::default()
    };
    let server = GrpcReplayServer::start(cassette, pool, options)
        .await
        .expect("replay server starts");
    let channel = tonic::transport::Channel::from_shared(server.url())
        .expect("a URL")
        .connect()
        .await
        .expect("connects to the replay server");
    (server, ModalClientClient::new(channel))
}

fn authed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "x-modal-token-secret",
        FAKE_SECRET.parse().expect("ASCII metadata"),
    );
    request
}

fn app_request(name: &str) -> AppGetOrCreateRequest {
    AppGetOrCreateRequest {
        app_name: name.to_owned(),
        object_creation_type: 1,
        ..Default::default()
    }
}

async fn join<T>(client: &mut ModalClientClient<T>) -> Vec<String>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: hyper::body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as hyper::body::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut stream = client
        .image_join_streaming(authed(ImageJoinStreamingRequest {
            image_id: "im-1".to_owned(),
            timeout: 55.0,
            ..Default::default()
        }))
        .await
        .expect("the stream starts")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(frame) = stream.next().await {
        let frame = frame.expect("a recorded frame");
        seen.extend(frame.task_logs.into_iter().map(|l| l.data));
        if frame.eof {
            seen.push(format!("eof {:?}", frame.result.map(|r| r.status)));
        }
    }
    seen
}

#[tokio::test]
async fn the_recorded_calls_replay_with_streams_and_trailers() {
    let (server, mut client) = server().await;
    let app = client
        .app_get_or_create(authed(app_request("sandbox-matrix")))
        .await
        .expect("recorded answer");
    assert_eq!(app.into_inner().app_id, "ap-1");
    assert_eq!(join(&mut client).await, ["Step 1\n", "eof Some(1)"]);
    let status = client
        .sandbox_terminate(authed(SandboxTerminateRequest {
            sandbox_id: "sb-1".to_owned(),
        }))
        .await
        .expect_err("the recording ends in Unavailable");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "try again: 50% busy");
    server.finish().expect("every exchange served as recorded");
}

#[tokio::test]
async fn recording_the_calls_writes_the_cassette_they_came_from() {
    let (server, _) = server().await;
    let recorder = Recorder::new(
        descriptors().clone(),
        GrpcOptions {
            credentials: vec![Secret::new("MODAL_TOKEN_SECRET", FAKE_SECRET)],
            matched_metadata: vec!["x-modal-token-secret".to_owned()],
            ..GrpcOptions::default()
        },
    );
    let channel = tonic::transport::Channel::from_shared(server.url())
        .expect("a URL")
        .connect()
        .await
        .expect("connects to the replay server");
    let mut client = ModalClientClient::new(GrpcTransport::new(channel, Some(recorder.clone())));
    client
        .app_get_or_create(authed(app_request("sandbox-matrix")))
        .await
        .expect("recorded answer");
    assert_eq!(join(&mut client).await.len(), 2);
    client
        .sandbox_terminate(authed(SandboxTerminateRequest {
            sandbox_id: "sb-1".to_owned(),
        }))
        .await
        .expect_err("Unavailable");
    server.finish().expect("the calls went as recorded");
    let source = GrpcCassette::parse(CASSETTE, descriptors()).expect("parses");
    let recorded = recorder
        .cassette(
            source.origin.clone(),
            source.written.clone(),
            "modal",
            "replay-unit",
        )
        .expect("every call ended");
    let text = serde_saphyr::to_string(&recorded).expect("YAML");
    assert!(!text.contains(FAKE_SECRET), "{text}");
    let mut reread = GrpcCassette::parse(&text, descriptors()).expect("the recording parses");
    // Each call's latency is kept; the hand-written source has none.
    for exchange in &mut reread.exchanges {
        assert!(exchange.latency_ms < 10_000.0, "{}", exchange.latency_ms);
        exchange.latency_ms = 0.0;
    }
    assert_eq!(reread, source);
}

#[test]
fn a_latency_out_of_range_is_refused_at_load() {
    let text = CASSETTE.replace(
        "  responses: [{app_id: ap-1}]\n",
        "  responses: [{app_id: ap-1}]\n  latency_ms: 1e300\n",
    );
    let error = GrpcCassette::parse(&text, descriptors()).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("latency_ms: 1e300 is out of range"),
        "{error}"
    );
}

#[test]
fn text_inside_bytes_becomes_a_placeholder_and_back() {
    let pool = descriptors();
    let output = pool
        .get_message_by_name("modal.task_command_router.TaskExecStdioReadResponse")
        .expect("the stdio message");
    let mut message = from_json(
        output,
        &serde_json::json!({ "data": "eyJtIjogInNtLW1hcmtlci0xIn0=" }),
    )
    .expect("a message");
    let volatiles = Volatiles::default();
    volatiles.register("marker", "sm-marker-1");
    let normalizer = Normalizer::new(&[], &volatiles);
    rewrite_text(&mut message, &|t| normalizer.text(t));
    let json = to_json(&message);
    let data = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        json["data"].as_str().expect("bytes as base64"),
    )
    .expect("base64");
    assert_eq!(String::from_utf8_lossy(&data), r#"{"m": "<marker>"}"#);
    // A later run's value goes back in where the recording holds the placeholder.
    let later = Volatiles::default();
    later.register("marker", "sm-marker-2");
    let back = Normalizer::new(&[], &later).back();
    rewrite_text(&mut message, &|t| back.text(t));
    let data = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        to_json(&message)["data"].as_str().expect("bytes"),
    )
    .expect("base64");
    assert_eq!(String::from_utf8_lossy(&data), r#"{"m": "sm-marker-2"}"#);
}

#[tokio::test]
async fn a_different_request_field_fails_the_call_and_the_replay() {
    let (server, mut client) = server().await;
    let status = client
        .app_get_or_create(authed(app_request("another-app")))
        .await
        .expect_err("not the recorded request");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let error = server.finish().expect_err("the replay fails").to_string();
    assert!(
        error
            .contains("exchange 0 (/modal.client.ModalClient/AppGetOrCreate): the request differs"),
        "{error}"
    );
    assert!(error.contains("another-app"), "{error}");
}

#[tokio::test]
async fn a_call_out_of_order_fails() {
    let (server, mut client) = server().await;
    let status = client
        .sandbox_terminate(authed(SandboxTerminateRequest {
            sandbox_id: "sb-1".to_owned(),
        }))
        .await
        .expect_err("exchange 0 is AppGetOrCreate");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let error = server.finish().expect_err("the replay fails").to_string();
    assert!(error.contains("expected exchange 0"), "{error}");
}

#[tokio::test]
async fn a_different_credential_fails_by_its_metadata() {
    let (server, mut client) = server().await;
    let mut request = tonic::Request::new(app_request("sandbox-matrix"));
    request.metadata_mut().insert(
        "x-modal-token-secret",
        // A fake credential, never a real one.
        "sm-fake-another-secret".parse().expect("ASCII metadata"),
    );
    client
        .app_get_or_create(request)
        .await
        .expect_err("not the recorded credential");
    let error = server.finish().expect_err("the replay fails").to_string();
    assert!(error.contains("metadata `x-modal-token-secret`"), "{error}");
    assert!(!error.contains(FAKE_SECRET), "{error}");
}

#[tokio::test]
async fn exchanges_never_requested_fail_the_replay() {
    let (server, mut client) = server().await;
    client
        .app_get_or_create(authed(app_request("sandbox-matrix")))
        .await
        .expect("recorded answer");
    let error = server
        .finish()
        .expect_err("two exchanges unused")
        .to_string();
    assert!(
            error.contains("2 exchanges were never requested, from exchange 1 (/modal.client.ModalClient/ImageJoinStreaming)"),
            "{error}"
        );
}

#[test]
fn cassettes_with_unknown_methods_fields_or_statuses_are_refused() {
    let pool = descriptors();
    let bad = [
        (
            CASSETTE.replace("AppGetOrCreate\n", "AppGetOrMake\n"),
            "has no method `AppGetOrMake`",
        ),
        (
            CASSETTE.replace("{app_id: ap-1}", "{app_ident: ap-1}"),
            "response 0: not a modal.client.AppGetOrCreateResponse",
        ),
        (
            CASSETTE.replace("grpc-status: 14", "grpc-status: 17"),
            "grpc-status 17 is not a gRPC status code",
        ),
        (
            CASSETTE.replace(
                "responses: [{app_id: ap-1}]",
                "responses: [{app_id: a}, {app_id: b}]",
            ),
            "a unary method answers once",
        ),
    ];
    for (text, expected) in bad {
        let error = GrpcCassette::parse(&text, pool)
            .expect_err("a broken cassette")
            .to_string();
        assert!(error.contains(expected), "{expected}: {error}");
    }
}

#[test]
fn frames_round_trip_and_truncation_is_an_error() {
    let mut body = encode_frame(b"abc").to_vec();
    body.extend_from_slice(&encode_frame(b""));
    assert_eq!(
        decode_frames(&body),
        Ok(vec![Bytes::from_static(b"abc"), Bytes::new()])
    );
    assert!(decode_frames(&body[..6]).is_err());
    assert!(decode_frames(&[1, 0, 0, 0, 0]).is_err());
}
