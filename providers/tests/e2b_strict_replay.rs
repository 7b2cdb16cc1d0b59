//! Replay fails when the e2b client sends what the cassette does not hold, even where the
//! old path and body would match: a request without its API key, a command run as the
//! unprivileged user where the recording ran it as root.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::{
    ApiClient, ApiRequest, ApiSettings, Cassette, Endpoints, Mode, Target, Volatiles,
};
use sandbox_providers::e2b::{self, E2bProvider};
use sandbox_providers::{Artifact, Provider, RunLabels};
use serde_json::json;

/// Any run id works: the cassette holds `<run-id>` in its place.
const RUN_ID: &str = "20260101T000000Z-5e1c7e";

fn lifecycle_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .join("fixtures/cassettes/e2b/lifecycle.yaml")
}

fn lifecycle() -> Cassette {
    Cassette::load(&lifecycle_path()).expect("the e2b lifecycle cassette loads")
}

/// Serves `cassette` as the harness does for e2b: its matched headers, its replay key.
async fn serve(
    cassette: Cassette,
    path: Option<PathBuf>,
    volatiles: Arc<Volatiles>,
) -> ReplayServer {
    ReplayServer::start(
        cassette,
        ReplayOptions {
            pace: Pace::Instant,
            credentials: e2b::replay_credentials(),
            volatiles,
            request_check: None,
            matched_headers: e2b::REPLAY_MATCHED_HEADERS,
            cassette_path: path,
        },
    )
    .await
    .expect("the replay server starts")
}

#[tokio::test]
async fn a_request_without_its_api_key_is_refused_naming_the_header() {
    let volatiles = Arc::new(Volatiles::default());
    let server = serve(lifecycle(), Some(lifecycle_path()), volatiles.clone()).await;
    let client = ApiClient::new(ApiSettings {
        endpoints: Endpoints {
            api_base: "http://127.0.0.1:9".into(),
            sandbox_domain: "sandbox.invalid".into(),
        },
        mode: Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
        credentials: e2b::replay_credentials(),
        volatiles,
        call_timeout: Duration::from_secs(10),
    })
    .expect("a client");
    // The cassette's first request, as the e2b client sends it, but without X-API-Key.
    let create = || {
        ApiRequest::post(Target::Api, "/v3/templates")
            .json(json!({"cpuCount": 2, "memoryMB": 1024, "name": "<template_name>"}))
    };
    let err = client.call(create()).await.unwrap_err();
    assert!(err.message.contains("HTTP 418"), "{err}");
    assert!(
        err.message
            .contains("header x-api-key: expected `<redacted:E2B_API_KEY>`, came none"),
        "{err}"
    );
    // With the key the client sends in replay, the same request is the recorded one.
    let key = e2b::replay_credentials().remove(0);
    let created = client
        .call(create().header("X-API-Key", key.expose()))
        .await
        .expect("with its key the request matches");
    assert_eq!(created.status, 202);
    let problems = server.finish().unwrap_err().to_string();
    assert!(
        problems.contains(&format!(
            "replay of {} did not go as recorded: exchange #0, POST /v3/templates: header x-api-key",
            lifecycle_path().display()
        )),
        "{problems}"
    );
}

#[tokio::test]
async fn the_secrets_scan_run_as_the_unprivileged_user_is_refused() {
    let full = lifecycle();
    let find = |what: &dyn Fn(&str, &str) -> bool| {
        full.exchanges
            .iter()
            .position(|e| what(&e.request.method, &e.request.path))
            .expect("the lifecycle cassette has this exchange")
    };
    let create = find(&|m, p| m == "POST" && p == "/sandboxes");
    let start = find(&|_, p| p.ends_with("/process.Process/Start"));
    // Launch (create, the Jupyter Server's status, the kernel, its first socket), then the
    // secrets scan's command.
    let mut exchanges = full.exchanges[create..create + 4].to_vec();
    exchanges.push(full.exchanges[start].clone());
    let process = exchanges[4]
        .request
        .body
        .as_ref()
        .expect("a body")
        .json_documents()[0]["process"]
        .clone();
    let argv: Vec<String> = std::iter::once(&process["cmd"])
        .chain(process["args"].as_array().expect("args"))
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect();
    let template = full.exchanges[create]
        .request
        .body
        .as_ref()
        .expect("a body")
        .json_documents()[0]["templateID"]
        .as_str()
        .expect("templateID")
        .to_owned();
    let cut = Cassette { exchanges, ..full };
    let volatiles = Arc::new(Volatiles::default());
    volatiles.register("run-id", RUN_ID);
    let server = serve(cut, None, volatiles.clone()).await;
    let provider = E2bProvider::from_settings(
        Mode::Replay {
            server_url: server.url(),
            pace: Pace::Instant,
        },
        volatiles,
        &sandbox_providers::api::settings::Settings::environment(),
    )
    .expect("replay needs no credential");
    let labels = RunLabels {
        run_id: RUN_ID.into(),
        variant: "e2b".into(),
        scenario: "lifecycle".into(),
    };
    let artifact = Artifact {
        id: template,
        kind: e2b::ARTIFACT_KIND.into(),
    };
    let (sandbox, _) = provider
        .launch(&artifact, &labels)
        .await
        .expect("the launch replays");
    let err = provider.exec(&sandbox, &argv, false).await.unwrap_err();
    assert!(
        err.message.contains(
            "header authorization: expected `Basic cm9vdDo=` (user root), came `Basic ZGF0YWxheWVyOg==` (user datalayer)"
        ),
        "{err}"
    );
    // As root, as recorded, the same command is served.
    let output = provider
        .exec(&sandbox, &argv, true)
        .await
        .expect("as root the command matches");
    assert_eq!(output.exit_code, Some(0), "{output:?}");
    let problems = server.finish().unwrap_err().to_string();
    assert!(
        problems.contains("the e2b lifecycle cassette did not go as recorded: exchange #4, POST /sandbox/49983/sbx0002/process.Process/Start: header authorization")
            && problems.contains("header authorization"),
        "{problems}"
    );
}
