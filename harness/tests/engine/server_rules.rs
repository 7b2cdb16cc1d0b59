//! The providers' published server rules, as the emulators enforce them, against the
//! form a client sends: what the project's client used to send is refused as the service
//! refuses it, and what it sends now passes. Each rule names its source in the emulator.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine server_rules::`.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_emulators::Emulator as _;
use sandbox_emulators::daytona::{DEFAULT_DOMAIN, Emulator, Options};
use sandbox_providers::api::ws::WsMessage;
use sandbox_providers::api::{ApiClient, ApiRequest, ApiSettings, Endpoints, Mode, Target};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{BuildRequest, Housekeeping as _, Provider, Resource, RunLabels, Secret};
use serde_json::{Value, json};

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "fake-daytona-rules-key-0000";

fn settings(emulator: &Emulator) -> ApiSettings {
    ApiSettings {
        endpoints: Endpoints {
            api_base: emulator.api_url(),
            sandbox_domain: String::new(),
        },
        mode: Mode::Live,
        // Fake: the emulator checks only that a key is sent.
        credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
        volatiles: Arc::default(),
        call_timeout: Duration::from_secs(120),
    }
}

/// A daytona emulator whose snapshots wait `queued` for a runner, its resources labelled
/// with a new run's labels.
async fn daytona(queued: Duration) -> (RunLabels, Emulator) {
    let docker = common::prepared_docker(&common::root()).await;
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "daytona".into(),
        scenario: "server-rules".into(),
    };
    let emulator = Emulator::start(
        docker,
        Options {
            labels: Some(labels.clone()),
            queued,
            ..Options::new(0, DEFAULT_DOMAIN)
        },
    )
    .await
    .expect("the daytona emulator starts");
    (labels, emulator)
}

/// A snapshot queued longer than the service waits for a runner: asking its build-logs
/// URL at once, as the client did, is held 30 s and answered 404; the client, which now
/// asks once the snapshot has left `pending`, builds it.
pub async fn daytona_answers_404_for_the_build_logs_of_a_snapshot_no_runner_holds() {
    let root = common::root();
    let (labels, emulator) = daytona(Duration::from_secs(32)).await;
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let bearer = ("Authorization", format!("Bearer {FAKE_KEY}"));
    let created: serde_json::Value = raw
        .call(
            ApiRequest::post(Target::Api, "/snapshots")
                .header(bearer.0, bearer.1.clone())
                .json(serde_json::json!({
                    "name": format!("rules-{}", labels.run_id.to_ascii_lowercase()),
                    "buildInfo": {"dockerfileContent": "FROM sandbox-matrix/contract-base:v1\n", "contextHashes": []},
                })),
        )
        .await
        .expect("the snapshot is created")
        .json()
        .expect("JSON");
    let id = created["id"].as_str().expect("an id").to_owned();
    assert_eq!(created["state"], "pending");
    // The client's own build, queued the same way, meanwhile.
    let client =
        DaytonaProvider::with_network(settings(&emulator), None, None, &emulator.network())
            .expect("a daytona client");
    let env = root.join("fixtures/environments/reference");
    let build = {
        let labels = labels.clone();
        tokio::spawn(async move {
            let request = BuildRequest {
                environment_dir: env,
                base: sandbox_providers::BaseImage::local(
                    sandbox_providers::docker::base::BASE_IMAGE,
                ),
                registry_credential: None,
                build_secrets: Vec::new(),
                labels,
            };
            let built = client.build(&request, &|_: &str| {}).await;
            (client, built)
        })
    };
    let asked = Instant::now();
    let early = raw
        .call(
            ApiRequest::get(Target::Api, format!("/snapshots/{id}/build-logs-url"))
                .header(bearer.0, bearer.1.clone()),
        )
        .await;
    let held = asked.elapsed();
    let (client, built) = build.await.expect("the build task joins");
    // Whatever the assertions say, nothing of this test stays.
    if let Ok(artifact) = &built {
        let _ = client
            .delete_resource(&Resource {
                kind: sandbox_providers::daytona::KIND_SNAPSHOT.into(),
                id: artifact.id.clone(),
            })
            .await;
    }
    let _ = raw
        .call(
            ApiRequest::delete(Target::Api, format!("/snapshots/{id}"))
                .header(bearer.0, bearer.1.clone()),
        )
        .await;
    emulator.stop();
    emulator.cleanup().await;
    let error = early.expect_err("a pending snapshot's build-logs URL is refused");
    assert_eq!(
        error.kind,
        sandbox_providers::ErrorKind::NotFound,
        "{error}"
    );
    assert!(
        error
            .message
            .contains("Timeout waiting for build runner assignment"),
        "{error}"
    );
    assert!(
        held >= Duration::from_secs(29),
        "the service holds the request for a runner (30 s): {held:?}"
    );
    built.expect("the client asks once the snapshot has left pending, and builds");
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test's builds left images"
    );
}

/// `process/execute` as Daytona's toolbox runs it (daytonaio/daytona v0.190.0,
/// apps/daemon/pkg/toolbox/process/execute.go): as the sandbox's user, in `cwd`, with
/// `envs`, killed past `timeout` with a 408; and a create field the emulator does not
/// implement is refused by name rather than dropped.
pub async fn daytona_runs_process_execute_as_its_toolbox_does() {
    let root = common::root();
    let (labels, emulator) = daytona(Duration::ZERO).await;
    let client =
        DaytonaProvider::with_network(settings(&emulator), None, None, &emulator.network())
            .expect("a daytona client");
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let bearer = ("Authorization", format!("Bearer {FAKE_KEY}"));
    let request = BuildRequest {
        environment_dir: root.join("fixtures/environments/reference"),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    };
    let artifact = client
        .build(&request, &|_: &str| {})
        .await
        .expect("the reference environment builds");
    let refused = raw
        .call(
            ApiRequest::post(Target::Api, "/sandbox")
                .header(bearer.0, bearer.1.clone())
                .json(serde_json::json!({"snapshot": artifact.id, "autoArchiveInterval": 60})),
        )
        .await
        .map(|_| ());
    let (sandbox, _) = client.launch(&artifact, &labels).await.expect("a sandbox");
    let proxy: serde_json::Value = raw
        .call(
            ApiRequest::get(
                Target::Api,
                format!("/sandbox/{}/toolbox-proxy-url", sandbox.0),
            )
            .header(bearer.0, bearer.1.clone()),
        )
        .await
        .expect("the toolbox URL")
        .json()
        .expect("JSON");
    let execute = format!(
        "{}/{}/process/execute",
        proxy["url"].as_str().expect("a URL").trim_end_matches('/'),
        sandbox.0
    );
    let run = |body: serde_json::Value| {
        raw.call(
            ApiRequest::post(Target::Absolute(execute.clone()), "")
                .header(bearer.0, bearer.1.clone())
                .json(body),
        )
    };
    let ran: serde_json::Value = run(serde_json::json!({
        "command": "id -un; pwd; echo \"$FROM_ENVS\"",
        "cwd": "/tmp",
        "envs": {"FROM_ENVS": "given"},
    }))
    .await
    .expect("a command")
    .json()
    .expect("JSON");
    let asked = Instant::now();
    let timed_out = run(serde_json::json!({"command": "sleep 30", "timeout": 1}))
        .await
        .map(|_| ());
    let waited = asked.elapsed();
    for resource in client.list_resources(&labels).await.unwrap_or_default() {
        let _ = client.delete_resource(&resource).await;
    }
    emulator.stop();
    emulator.cleanup().await;

    let refused = refused.expect_err("a create with autoArchiveInterval");
    assert!(
        refused.message.contains("`autoArchiveInterval`"),
        "{refused}"
    );
    assert_eq!(ran["exitCode"], 0, "{ran}");
    assert_eq!(ran["result"], "datalayer\n/tmp\ngiven\n", "{ran}");
    let timed_out = timed_out.expect_err("a command past its timeout");
    assert!(
        timed_out.message.contains("command execution timeout"),
        "{timed_out}"
    );
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test left resources"
    );
}

/// What one execute WebSocket answered: its frames, its close code and reason, and how
/// long it took from the upgrade to the close.
#[derive(Debug)]
struct Interpreted {
    frames: Vec<Value>,
    code: u16,
    reason: String,
    took: Duration,
}

impl Interpreted {
    /// The text of its frames of type `kind`, joined.
    fn text(&self, kind: &str) -> String {
        self.frames
            .iter()
            .filter(|f| f["type"] == kind)
            .filter_map(|f| f["text"].as_str())
            .collect()
    }

    /// Its frames' types, in order.
    fn kinds(&self) -> Vec<&str> {
        self.frames
            .iter()
            .filter_map(|f| f["type"].as_str())
            .collect()
    }
}

/// Opens the execute WebSocket at `url`, sends `frame` and reads to the close.
async fn interpret(
    raw: &ApiClient,
    url: &str,
    frame: Value,
) -> sandbox_providers::Result<Interpreted> {
    let asked = Instant::now();
    let mut socket = raw
        .websocket(
            ApiRequest::get(Target::Absolute(url.to_owned()), "")
                .header("Authorization", format!("Bearer {FAKE_KEY}")),
        )
        .await?;
    socket.send_json(&frame).await?;
    let mut frames = Vec::new();
    loop {
        match socket.next(Duration::from_secs(120)).await? {
            WsMessage::Json(frame) => frames.push(frame),
            WsMessage::Text(text) => frames.push(Value::String(text)),
            WsMessage::Closed { code, reason } => {
                return Ok(Interpreted {
                    frames,
                    code,
                    reason,
                    took: asked.elapsed(),
                });
            }
        }
    }
}

/// The toolbox reads an execute frame before it looks for the context
/// (daytonaio/daytona v0.190.0, apps/daemon/pkg/toolbox/process/interpreter/controller.go):
/// a negative `timeout` closes the socket 1008 with its message and no frame; a field the
/// emulator does not implement is refused by name, an error frame and close 1008, rather
/// than dropped.
pub async fn daytona_refuses_a_negative_interpreter_timeout_and_an_execute_field_it_does_not_implement()
 {
    let (labels, emulator) = daytona(Duration::ZERO).await;
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let execute = format!(
        "https://proxy.app.{DEFAULT_DOMAIN}/toolbox/5d1a7000-0000-4000-8000-000000000001/process/interpreter/execute"
    );
    let negative = interpret(&raw, &execute, json!({"code": "print(1)", "timeout": -1})).await;
    let unimplemented = interpret(
        &raw,
        &execute,
        json!({"code": "print(1)", "language": "python"}),
    )
    .await;
    emulator.stop();
    emulator.cleanup().await;

    let negative = negative.expect("an answer to a negative timeout");
    assert_eq!(
        (negative.code, negative.reason.as_str()),
        (1008, "timeout must be greater than or equal to 0"),
        "{negative:?}"
    );
    assert!(negative.frames.is_empty(), "{negative:?}");
    let unimplemented = unimplemented.expect("an answer to a field not implemented");
    assert_eq!(unimplemented.code, 1008, "{unimplemented:?}");
    assert!(
        unimplemented.reason.contains("`language`"),
        "{unimplemented:?}"
    );
    assert_eq!(unimplemented.kinds(), ["error"], "{unimplemented:?}");
    assert!(
        unimplemented.frames[0]["value"]
            .as_str()
            .is_some_and(|v| v.contains("`language`")),
        "{unimplemented:?}"
    );
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test left resources"
    );
}

/// Interpreter code as Daytona's toolbox runs it (daytonaio/daytona v0.190.0,
/// apps/daemon/pkg/toolbox/process/interpreter/): `envs` are in the environment of that
/// one execution and put back after it; past `timeout` the code is interrupted (SIGINT),
/// answered `control: interrupted` and closed 4008, the context keeping its state; code
/// that ignores the interrupt is killed after a 2 s grace, closed 4008 with no frame, and
/// the context's next code runs in a new interpreter. A context runs one execution at a
/// time, and an execution's timeout starts when it runs.
pub async fn daytona_runs_interpreter_code_with_envs_and_within_its_timeout_as_its_toolbox_does() {
    let root = common::root();
    let (labels, emulator) = daytona(Duration::ZERO).await;
    let client =
        DaytonaProvider::with_network(settings(&emulator), None, None, &emulator.network())
            .expect("a daytona client");
    let raw =
        ApiClient::with_network(settings(&emulator), &emulator.network()).expect("an API client");
    let bearer = ("Authorization", format!("Bearer {FAKE_KEY}"));
    let request = BuildRequest {
        environment_dir: root.join("fixtures/environments/reference"),
        base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    };
    let artifact = client
        .build(&request, &|_: &str| {})
        .await
        .expect("the reference environment builds");
    let (sandbox, _) = client.launch(&artifact, &labels).await.expect("a sandbox");
    let proxy: Value = raw
        .call(
            ApiRequest::get(
                Target::Api,
                format!("/sandbox/{}/toolbox-proxy-url", sandbox.0),
            )
            .header(bearer.0, bearer.1.clone()),
        )
        .await
        .expect("the toolbox URL")
        .json()
        .expect("JSON");
    let toolbox = format!(
        "{}/{}/process/interpreter",
        proxy["url"].as_str().expect("a URL").trim_end_matches('/'),
        sandbox.0
    );
    let context: Value = raw
        .call(
            ApiRequest::post(Target::Absolute(format!("{toolbox}/context")), "")
                .header(bearer.0, bearer.1.clone())
                .json(json!({"language": "python"})),
        )
        .await
        .expect("a context")
        .json()
        .expect("JSON");
    let context = context["id"].as_str().expect("a context id").to_owned();
    let execute = format!("{toolbox}/execute");
    let run = |frame: Value| interpret(&raw, &execute, frame);
    let home = run(json!({
        "code": "x = 41\nimport os\nprint(os.environ['HOME'])",
        "contextId": context,
    }))
    .await;
    let with_envs = run(json!({
        "code": "import os\nprint(os.environ['FOO'], os.environ['HOME'])",
        "contextId": context,
        "envs": {"FOO": "bar", "HOME": "/elsewhere"},
    }))
    .await;
    let after_envs = run(json!({
        "code": "import os\nprint(os.environ.get('FOO'), os.environ['HOME'])",
        "contextId": context,
    }))
    .await;
    let interrupted = run(json!({
        "code": "import time\ntime.sleep(30)",
        "contextId": context,
        "timeout": 1,
    }))
    .await;
    let kept = run(json!({"code": "print(x + 1)", "contextId": context})).await;
    // Two at once in one context: the second waits its turn, its timeout not yet running.
    let (first, second) = tokio::join!(
        run(json!({
            "code": "import time\ntime.sleep(3)\nprint('first')",
            "contextId": context,
            "timeout": 0,
        })),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            run(json!({"code": "print('second')", "contextId": context, "timeout": 2})).await
        }
    );
    // In the default context (no contextId).
    let before_kill = run(json!({"code": "y = 1\nprint(y)"})).await;
    let killed = run(json!({
        "code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)",
        "timeout": 1,
    }))
    .await;
    let fresh = run(json!({"code": "print(y)"})).await;
    for resource in client.list_resources(&labels).await.unwrap_or_default() {
        let _ = client.delete_resource(&resource).await;
    }
    emulator.stop();
    emulator.cleanup().await;

    let home = home.expect("an answer");
    assert_eq!(
        (home.code, home.kinds()),
        (1000, vec!["stdout", "control"]),
        "{home:?}"
    );
    let home = home.text("stdout");
    let with_envs = with_envs.expect("an answer");
    assert_eq!(
        with_envs.text("stdout"),
        "bar /elsewhere\n",
        "{with_envs:?}"
    );
    assert_eq!(with_envs.code, 1000, "{with_envs:?}");
    let after_envs = after_envs.expect("an answer");
    assert_eq!(
        after_envs.text("stdout"),
        format!("None {home}"),
        "{after_envs:?}"
    );
    let interrupted = interrupted.expect("an answer");
    assert_eq!(interrupted.code, 4008, "{interrupted:?}");
    assert_eq!(interrupted.kinds(), ["control"], "{interrupted:?}");
    assert_eq!(
        interrupted.text("control"),
        "interrupted",
        "{interrupted:?}"
    );
    assert!(
        interrupted.took >= Duration::from_secs(1) && interrupted.took < Duration::from_secs(10),
        "{interrupted:?}"
    );
    let kept = kept.expect("an answer");
    assert_eq!(
        kept.text("stdout"),
        "42\n",
        "the context keeps its state: {kept:?}"
    );
    for (answer, printed) in [(first, "first\n"), (second, "second\n")] {
        let answer = answer.expect("an answer");
        assert_eq!(
            (answer.code, answer.text("stdout"), answer.text("control")),
            (1000, printed.to_owned(), "completed".to_owned()),
            "{answer:?}"
        );
    }
    let before_kill = before_kill.expect("an answer");
    assert_eq!(before_kill.text("stdout"), "1\n", "{before_kill:?}");
    let killed = killed.expect("an answer");
    assert_eq!(killed.code, 4008, "{killed:?}");
    assert!(killed.frames.is_empty(), "{killed:?}");
    assert!(
        killed.took >= Duration::from_secs(3) && killed.took < Duration::from_secs(20),
        "a 1 s timeout, a 2 s grace, then the kill: {killed:?}"
    );
    let fresh = fresh.expect("an answer");
    assert_eq!(fresh.kinds(), ["error", "control"], "{fresh:?}");
    assert_eq!(
        fresh.frames[0]["name"], "NameError",
        "a new interpreter: {fresh:?}"
    );
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test left resources"
    );
}
