//! `sandbox-matrix emulate e2b`, the binary, as a client meets it: the e2b client runs the
//! lifecycle over HTTPS through E2B's live host forms (`https://api.<domain>:<port>`,
//! `https://<port>-<id>.<domain>:<port>`), with exactly the settings the command prints
//! (the test CA to trust, the name pin); and without the CA the client refuses the
//! emulator, so TLS is really checked. The emulator also refuses what E2B refuses.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine emulate_e2b::`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::emulate::Emulate;
use sandbox_providers::Secret;
use sandbox_providers::api::network::RESOLVE_VAR;
use sandbox_providers::api::{Endpoints, Mode, Volatiles};
use sandbox_providers::e2b::E2bProvider;

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "e2b_fake_emulate_key_0000";

/// An e2b client configured as the printed settings say; `trust` adds the CA.
fn client(emulate: &Emulate, trust: bool, volatiles: Arc<Volatiles>) -> E2bProvider {
    E2bProvider::with_network(
        Endpoints {
            api_base: emulate.get("E2B_API_URL").to_owned(),
            sandbox_domain: emulate.get("E2B_DOMAIN").to_owned(),
        },
        Mode::Live,
        // Fake: the emulator checks only that a key is sent.
        Secret::new("E2B_API_KEY", FAKE_KEY),
        volatiles,
        Default::default(),
        &emulate.network(trust),
    )
    .expect("an e2b client")
}

pub async fn the_e2b_client_runs_the_lifecycle_against_emulate_over_https_through_live_host_forms()
{
    let emulate = Emulate::start("e2b", &[]);
    assert!(
        emulate.get("E2B_API_URL").starts_with("https://api.")
            && emulate.get(RESOLVE_VAR).ends_with("=127.0.0.1"),
        "{:?}",
        emulate.settings
    );
    common::emulate::client_runs_the_lifecycle(emulate, "e2b", client).await;
}

/// The emulator refuses what E2B refuses: a ready command with no start command, and the
/// code channel of a sandbox whose template has no start command does not answer.
/// A template without a start command leaves its code channel closed; its sandbox's envd
/// refuses, as envd does, an empty Basic user (e2b-dev/infra 54693ff,
/// `packages/envd/internal/permissions/authenticate.go`), and the emulator refuses by name
/// what it does not implement (a `pty`, `set_timeout`).
pub async fn without_a_start_command_the_code_channel_does_not_answer() {
    use sandbox_matrix::emulate::e2b::{DEFAULT_DOMAIN, Emulator, Options};
    use serde_json::{Value, json};
    let root = common::root();
    let docker = common::prepared_docker(&root).await;
    let emulator = Emulator::start(
        docker,
        Options {
            port: 0,
            domain: DEFAULT_DOMAIN.to_owned(),
            environment: root.join("fixtures/environments/reference"),
        },
    )
    .await
    .expect("the emulator starts");
    let http = emulator
        .network()
        .apply(reqwest::Client::builder())
        .expect("the test network")
        .build()
        .expect("an HTTP client");
    let api = format!("https://api.{DEFAULT_DOMAIN}");
    let call = |method: reqwest::Method, url: String, body: Option<Value>| {
        let mut request = http.request(method, url).header("X-API-Key", FAKE_KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.expect("the emulator answers");
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    };
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let (status, created) = call(
        reqwest::Method::POST,
        format!("{api}/v3/templates"),
        Some(json!({"name": format!("sm-{run_id}")})),
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let (tid, bid) = (
        created["templateID"].as_str().expect("a template id"),
        created["buildID"].as_str().expect("a build id"),
    );
    let build = format!("{api}/v2/templates/{tid}/builds/{bid}");
    let base = sandbox_providers::docker::base::BASE_IMAGE;
    let (status, refused) = call(
        reqwest::Method::POST,
        build.clone(),
        Some(json!({"fromImage": base, "steps": [], "readyCmd": "true"})),
    )
    .await;
    assert_eq!(status, 400, "a readyCmd without startCmd: {refused}");
    let (status, _) = call(
        reqwest::Method::POST,
        build,
        Some(json!({"fromImage": base, "steps": []})),
    )
    .await;
    assert_eq!(status, 202);
    let mut ready = false;
    for _ in 0..600 {
        let (_, info) = call(
            reqwest::Method::GET,
            format!("{api}/templates/{tid}/builds/{bid}/status?logsOffset=100000"),
            None,
        )
        .await;
        match info["status"].as_str() {
            Some("ready") => {
                ready = true;
                break;
            }
            Some("error") => panic!("the build failed: {info}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    assert!(ready, "the build did not end within 2 minutes");
    let (status, sandbox) = call(
        reqwest::Method::POST,
        format!("{api}/sandboxes"),
        Some(json!({"templateID": format!("{tid}:{bid}"),
                    "metadata": {"sandbox-matrix.run": run_id, "sandbox-matrix.scenario": "no-start"}})),
    )
    .await;
    assert_eq!(status, 201, "{sandbox}");
    let id = sandbox["sandboxID"].as_str().expect("a sandbox id");
    let token = sandbox["envdAccessToken"].as_str().expect("an envd token");
    let health = http
        .get(format!("https://49999-{id}.{DEFAULT_DOMAIN}/health"))
        .header("X-Access-Token", token)
        .send()
        .await
        .expect("the emulator answers for the sandbox");
    let status = health.status().as_u16();
    let start = |basic: &str, message: Value| {
        let body = sandbox_providers::api::cassette::encode_connect(0, &message)
            .expect("a Connect envelope");
        let request = http
            .post(format!(
                "https://{}-{id}.{DEFAULT_DOMAIN}/process.Process/Start",
                sandbox_providers::e2b::ENVD_PORT
            ))
            .header("X-Access-Token", token)
            .header("Authorization", format!("Basic {basic}"))
            .header("Content-Type", "application/connect+json")
            .body(body);
        async move {
            let response = request.send().await.expect("envd answers");
            (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            )
        }
    };
    let echo = json!({"process": {"cmd": "echo", "args": ["hi"]}, "stdin": false});
    // base64(":"): an empty user, as `RUN [command, ""]` made the builder send.
    let empty_user = start("Og==", echo.clone()).await;
    // base64("root:").
    let root = start("cm9vdDo=", echo.clone()).await;
    let pty = start(
        "cm9vdDo=",
        json!({"process": {"cmd": "echo"}, "pty": {"size": {"cols": 80, "rows": 24}}}),
    )
    .await;
    let (timeout_status, timeout) = call(
        reqwest::Method::POST,
        format!("{api}/sandboxes/{id}/timeout"),
        Some(json!({"timeout": 60})),
    )
    .await;
    let _ = call(
        reqwest::Method::DELETE,
        format!("{api}/sandboxes/{id}"),
        None,
    )
    .await;
    emulator.stop();
    emulator.cleanup().await;
    assert_eq!(
        status, 502,
        "the code channel of a template without a start command answered"
    );
    assert_eq!(empty_user.0, 401, "{empty_user:?}");
    assert!(
        empty_user.1.contains("invalid username: ''"),
        "{empty_user:?}"
    );
    assert_eq!(root.0, 200, "{root:?}");
    assert_eq!(pty.0, 501, "{pty:?}");
    assert!(pty.1.contains("`pty`"), "{pty:?}");
    assert_eq!(timeout_status, 501, "{timeout}");
    assert!(
        timeout.to_string().contains("POST /sandboxes/"),
        "{timeout}"
    );
}
