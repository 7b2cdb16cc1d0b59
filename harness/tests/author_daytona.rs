//! Authors `fixtures/cassettes/daytona/{lifecycle,core-tier}.yaml`.
//!
//! Each scenario runs through the real runner with the daytona client in record mode,
//! against a small emulator of Daytona's control plane and toolbox on 127.0.0.1 written
//! from the published OpenAPI documents. The emulator hands the work to the local docker
//! variant: a snapshot build is a docker build of the Dockerfile it is sent, a sandbox is a
//! container, execute is `sh -c` in it, an interpreter context is a Jupyter kernel of its
//! own in it (the docker variant's `run_code_in`; deleting a context drops it, so a new
//! one starts empty), the execute WebSocket runs code in that kernel and streams its
//! output as the toolbox's frames, and stop/start stop and start the container. So every
//! probe answer in the cassettes is real; the control-plane answers are the emulator's.
//! Needs Docker:
//! `cargo test -p sandbox-matrix --test author_daytona -- --ignored`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::StopContainerOptionsBuilder;
use futures_util::{SinkExt as _, StreamExt as _};
use sandbox_matrix::report::results::ScenarioResult;
use sandbox_matrix::run::events::{EventSink, RunEvent};
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;
use sandbox_providers::api::ws::{Rewound, accept, close_with, split_upgrades};
use sandbox_providers::api::{ApiSettings, Endpoints, Mode, Recorder, Volatiles};
use sandbox_providers::daytona::DaytonaProvider;
use sandbox_providers::{Artifact, BuildRequest, Provider, Resource, RunLabels, SandboxId, Secret};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// What the cassettes say they were authored from.
const ORIGIN: &str = "authored from daytona/openapi.yaml@1.0 and daytona/toolbox-swagger.yaml@v0.0.0-dev \
(an emulator of those APIs on 127.0.0.1, builds and probes served by the local docker variant)";
/// The organization every emulated record belongs to; made up.
const ORGANIZATION: &str = "0b5e1c4e-0000-4000-8000-00000000000a";
/// Every emulated timestamp.
const STAMP: &str = "2026-01-01T00:00:00.000Z";

struct Quiet;

impl EventSink for Quiet {
    fn emit(&self, _: &RunEvent) {}
}

/// An emulated snapshot.
struct Snapshot {
    name: String,
    state: String,
    image: Option<String>,
    logs: Vec<String>,
    error: Option<String>,
}

/// An emulated sandbox and the container behind it.
struct Sandbox {
    snapshot: String,
    labels: BTreeMap<String, String>,
    state: String,
    container: Option<String>,
}

#[derive(Default)]
struct State {
    next: u64,
    snapshots: BTreeMap<String, Snapshot>,
    sandboxes: BTreeMap<String, Sandbox>,
    registries: BTreeMap<String, Value>,
    /// Interpreter contexts by id: the sandbox each belongs to.
    contexts: BTreeMap<String, String>,
}

impl State {
    fn id(&mut self) -> String {
        self.next += 1;
        format!("5d1a7000-0000-4000-8000-{:012x}", self.next)
    }
}

/// The emulator: Daytona's API on the outside, the docker variant inside.
struct Emulator {
    url: String,
    docker: Arc<dyn Provider>,
    engine: Docker,
    labels: RunLabels,
    volatiles: Arc<Volatiles>,
    state: Arc<Mutex<State>>,
}

/// One parsed HTTP request.
struct Request {
    method: String,
    path: String,
    query: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// An answer: status, content type and body.
type Answer = (u16, &'static str, Vec<u8>);

fn json_answer(status: u16, value: Value) -> Answer {
    (status, "application/json", value.to_string().into_bytes())
}

fn not_found(what: &str) -> Answer {
    json_answer(
        404,
        json!({"statusCode": 404, "message": format!("{what} not found")}),
    )
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().expect("emulator state lock")
}

impl From<common::HttpRequest> for Request {
    fn from(request: common::HttpRequest) -> Self {
        let query = reqwest::Url::parse(&format!("http://emulator/?{}", request.query))
            .map(|url| url.query_pairs().into_owned().collect())
            .unwrap_or_default();
        Self {
            method: request.method,
            path: request.path,
            query,
            body: request.body,
        }
    }
}

impl Emulator {
    async fn start(
        docker: Arc<dyn Provider>,
        labels: RunLabels,
        volatiles: Arc<Volatiles>,
    ) -> Arc<Self> {
        let (upstream, _) = common::bind_loopback().await;
        let upstream_addr = upstream.local_addr().expect("a local address");
        let (front, url) = common::bind_loopback().await;
        let engine = Docker::connect_with_local_defaults().expect("connect to the Docker engine");
        let emulator = Arc::new(Self {
            url,
            docker,
            engine,
            labels,
            volatiles,
            state: Arc::default(),
        });
        let sockets = emulator.clone();
        split_upgrades(front, upstream_addr, move |stream| {
            sockets.clone().execute(stream)
        });
        let serving = emulator.clone();
        common::serve_http(upstream, move |request| {
            let emulator = serving.clone();
            async move {
                let (status, content_type, body) = emulator.handle(request.into()).await;
                (status, content_type.to_owned(), body)
            }
        });
        emulator
    }

    fn snapshot_dto(&self, id: &str, s: &Snapshot) -> Value {
        json!({
            "id": id, "organizationId": ORGANIZATION, "general": false, "name": s.name,
            "state": s.state, "size": null, "entrypoint": null, "cpu": 1, "gpu": 0, "mem": 1,
            "disk": 3, "errorReason": s.error, "createdAt": STAMP, "updatedAt": STAMP,
            "lastUsedAt": null,
        })
    }

    fn sandbox_dto(&self, id: &str, s: &Sandbox) -> Value {
        json!({
            "id": id, "organizationId": ORGANIZATION, "name": id, "snapshot": s.snapshot,
            "user": "datalayer", "env": {}, "labels": s.labels, "public": false,
            "networkBlockAll": false, "target": "us", "cpu": 1, "gpu": 0, "memory": 1,
            "disk": 3, "state": s.state, "createdAt": STAMP, "updatedAt": STAMP,
            "toolboxProxyUrl": format!("{}/toolbox", self.url),
        })
    }

    async fn handle(self: &Arc<Self>, req: Request) -> Answer {
        let parts: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match (req.method.as_str(), parts.as_slice()) {
            ("POST", ["docker-registry"]) => {
                let mut state = lock(&self.state);
                let id = state.id();
                let entry = json!({
                    "id": id, "name": body["name"], "url": body["url"],
                    "username": body["username"], "project": "",
                    "registryType": "organization", "createdAt": STAMP, "updatedAt": STAMP,
                });
                state.registries.insert(id, entry.clone());
                json_answer(201, entry)
            }
            ("GET", ["docker-registry"]) => {
                let entries: Vec<Value> = lock(&self.state).registries.values().cloned().collect();
                json_answer(200, json!(entries))
            }
            ("DELETE", ["docker-registry", id]) => match lock(&self.state).registries.remove(*id) {
                Some(_) => (204, "application/json", Vec::new()),
                None => not_found("docker registry"),
            },
            ("POST", ["snapshots"]) => self.create_snapshot(&body),
            ("GET", ["snapshots"]) => {
                let name = req.query.get("name").cloned().unwrap_or_default();
                let state = lock(&self.state);
                let items: Vec<Value> = state
                    .snapshots
                    .iter()
                    .filter(|(_, s)| s.name.contains(&name))
                    .map(|(id, s)| self.snapshot_dto(id, s))
                    .collect();
                json_answer(
                    200,
                    json!({"items": items, "total": items.len(), "page": 1, "totalPages": 1}),
                )
            }
            ("GET", ["snapshots", id]) => match lock(&self.state).snapshots.get(*id) {
                Some(s) => json_answer(200, self.snapshot_dto(id, s)),
                None => not_found("snapshot"),
            },
            ("GET", ["snapshots", id, "build-logs-url"]) => {
                json_answer(200, json!({"url": format!("{}/build-logs/{id}", self.url)}))
            }
            ("GET", ["build-logs", id]) => match lock(&self.state).snapshots.get(*id) {
                Some(s) => (
                    200,
                    "text/plain",
                    s.logs
                        .iter()
                        .map(|l| format!("{l}\n"))
                        .collect::<String>()
                        .into_bytes(),
                ),
                None => not_found("snapshot"),
            },
            ("DELETE", ["snapshots", id]) => {
                let removed = lock(&self.state).snapshots.remove(*id);
                match removed {
                    Some(s) => {
                        if let Some(image) = s.image {
                            let _ = self
                                .docker
                                .delete_resource(&Resource {
                                    kind: "image".into(),
                                    id: image,
                                })
                                .await;
                        }
                        (200, "application/json", Vec::new())
                    }
                    None => not_found("snapshot"),
                }
            }
            ("POST", ["sandbox"]) => self.create_sandbox(&body),
            ("GET", ["sandbox"]) => {
                let wanted: BTreeMap<String, String> = req
                    .query
                    .get("labels")
                    .and_then(|l| serde_json::from_str(l).ok())
                    .unwrap_or_default();
                let state = lock(&self.state);
                let items: Vec<Value> = state
                    .sandboxes
                    .iter()
                    .filter(|(_, s)| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
                    .map(|(id, s)| self.sandbox_dto(id, s))
                    .collect();
                json_answer(200, json!({"items": items, "nextCursor": null}))
            }
            ("GET", ["sandbox", id]) => match lock(&self.state).sandboxes.get(*id) {
                Some(s) => json_answer(200, self.sandbox_dto(id, s)),
                None => not_found("sandbox"),
            },
            ("POST", ["sandbox", id, action @ ("stop" | "start")]) => {
                self.stop_or_start(id, action)
            }
            ("DELETE", ["sandbox", id]) => {
                let removed = lock(&self.state).sandboxes.remove(*id);
                match removed {
                    Some(mut s) => {
                        if let Some(container) = s.container.take() {
                            let _ = self
                                .docker
                                .delete_resource(&Resource {
                                    kind: "container".into(),
                                    id: container,
                                })
                                .await;
                        }
                        s.state = "destroying".into();
                        json_answer(200, self.sandbox_dto(id, &s))
                    }
                    None => not_found("sandbox"),
                }
            }
            ("POST", ["toolbox", id, "process", "execute"]) => self.toolbox(id, &body).await,
            ("POST", ["toolbox", id, "process", "interpreter", "context"]) => {
                let mut state = lock(&self.state);
                if !state.sandboxes.contains_key(*id) {
                    return not_found("sandbox");
                }
                let context = state.id();
                state.contexts.insert(context.clone(), (*id).to_owned());
                json_answer(200, context_dto(&context, &body))
            }
            ("GET", ["toolbox", id, "process", "interpreter", "context"]) => {
                let state = lock(&self.state);
                let contexts: Vec<Value> = state
                    .contexts
                    .iter()
                    .filter(|(_, sandbox)| sandbox.as_str() == *id)
                    .map(|(context, _)| context_dto(context, &Value::Null))
                    .collect();
                json_answer(200, json!({ "contexts": contexts }))
            }
            ("DELETE", ["toolbox", _, "process", "interpreter", "context", context]) => {
                // The kernel behind it is never reached again: a new context is a new one.
                match lock(&self.state).contexts.remove(*context) {
                    Some(_) => json_answer(200, json!({ "message": "context deleted" })),
                    None => not_found("context"),
                }
            }
            _ => json_answer(
                404,
                json!({"statusCode": 404, "message": format!("the emulator has no {} {}", req.method, req.path)}),
            ),
        }
    }

    fn create_snapshot(self: &Arc<Self>, body: &Value) -> Answer {
        let dockerfile = body["buildInfo"]["dockerfileContent"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = lock(&self.state);
        let id = state.id();
        let snapshot = Snapshot {
            name: body["name"].as_str().unwrap_or_default().to_owned(),
            state: "pending".into(),
            image: None,
            logs: Vec::new(),
            error: None,
        };
        let dto = self.snapshot_dto(&id, &snapshot);
        state.snapshots.insert(id.clone(), snapshot);
        drop(state);
        let this = self.clone();
        tokio::spawn(async move { this.build(id, dockerfile).await });
        json_answer(200, dto)
    }

    /// Builds like Daytona's builder would: writes the Dockerfile's heredocs out as
    /// context files (the docker variant's builder takes no heredocs) and builds.
    async fn build(self: Arc<Self>, id: String, dockerfile: String) {
        let dir = std::env::temp_dir().join(format!("sm-daytona-emulator-{id}"));
        std::fs::create_dir_all(&dir).expect("build context directory");
        let mut out = String::new();
        let mut lines = dockerfile.lines();
        let mut files = 0;
        while let Some(line) = lines.next() {
            let Some((head, rest)) = line.split_once(" <<'") else {
                out.push_str(line);
                out.push('\n');
                continue;
            };
            let (delimiter, dest) = rest
                .split_once("' ")
                .expect("a heredoc COPY names its destination");
            let mut content = String::new();
            for l in lines.by_ref() {
                if l == delimiter {
                    break;
                }
                content.push_str(l);
                content.push('\n');
            }
            files += 1;
            let name = format!("heredoc-{files}");
            std::fs::write(dir.join(&name), content).expect("write a context file");
            out.push_str(&format!("{head} {name} {dest}\n"));
        }
        std::fs::write(dir.join("Dockerfile"), out).expect("write the Dockerfile");
        let set = |f: &dyn Fn(&mut Snapshot)| {
            if let Some(s) = lock(&self.state).snapshots.get_mut(&id) {
                f(s);
            }
        };
        set(&|s| s.state = "building".into());
        let state = self.state.clone();
        let log_id = id.clone();
        let log = move |line: &str| {
            if let Some(s) = lock(&state).snapshots.get_mut(&log_id) {
                s.logs.push(line.to_owned());
            }
        };
        let built = self
            .docker
            .build(
                &BuildRequest {
                    environment_dir: dir.clone(),
                    base: sandbox_providers::BaseImage::local(
                        sandbox_providers::docker::base::BASE_IMAGE,
                    ),
                    registry_credential: None,
                    build_secrets: Vec::new(),
                    labels: self.labels.clone(),
                },
                &log,
            )
            .await;
        let _ = std::fs::remove_dir_all(&dir);
        match built {
            Ok(artifact) => set(&|s| {
                s.image = Some(artifact.id.clone());
                s.state = "active".into();
            }),
            Err(e) => set(&|s| {
                s.error = Some(e.to_string());
                s.state = "build_failed".into();
            }),
        }
    }

    fn create_sandbox(self: &Arc<Self>, body: &Value) -> Answer {
        let snapshot = body["snapshot"].as_str().unwrap_or_default().to_owned();
        let mut state = lock(&self.state);
        let Some(image) = state.snapshots.get(&snapshot).and_then(|s| s.image.clone()) else {
            return json_answer(
                400,
                json!({"statusCode": 400, "message": format!("snapshot {snapshot} is not active")}),
            );
        };
        let id = state.id();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(body["labels"].clone()).unwrap_or_default();
        let sandbox = Sandbox {
            snapshot,
            labels,
            state: "creating".into(),
            container: None,
        };
        let dto = self.sandbox_dto(&id, &sandbox);
        state.sandboxes.insert(id.clone(), sandbox);
        drop(state);
        let this = self.clone();
        tokio::spawn(async move {
            let launched = this
                .docker
                .launch(
                    &Artifact {
                        id: image,
                        kind: "image-id".into(),
                    },
                    &this.labels,
                )
                .await;
            if let Some(s) = lock(&this.state).sandboxes.get_mut(&id) {
                match launched {
                    Ok((container, _)) => {
                        s.container = Some(container.0);
                        s.state = "started".into();
                    }
                    Err(_) => s.state = "error".into(),
                }
            }
        });
        json_answer(200, dto)
    }

    fn stop_or_start(self: &Arc<Self>, id: &str, action: &str) -> Answer {
        let mut state = lock(&self.state);
        let Some(sandbox) = state.sandboxes.get_mut(id) else {
            return not_found("sandbox");
        };
        let Some(container) = sandbox.container.clone() else {
            return json_answer(
                409,
                json!({"statusCode": 409, "message": "the sandbox is not created yet"}),
            );
        };
        sandbox.state = if action == "stop" {
            "stopping"
        } else {
            "starting"
        }
        .into();
        let dto = self.sandbox_dto(id, sandbox);
        drop(state);
        let (this, id, stop) = (self.clone(), id.to_owned(), action == "stop");
        tokio::spawn(async move {
            let done = if stop {
                this.engine
                    .stop_container(
                        &container,
                        Some(StopContainerOptionsBuilder::default().t(10).build()),
                    )
                    .await
            } else {
                this.engine.start_container(&container, None).await
            };
            if let Some(s) = lock(&this.state).sandboxes.get_mut(&id) {
                s.state = match (done, stop) {
                    (Err(_), _) => "error",
                    (Ok(()), true) => "stopped",
                    (Ok(()), false) => "started",
                }
                .into();
            }
        });
        json_answer(200, dto)
    }

    async fn toolbox(&self, id: &str, body: &Value) -> Answer {
        let container = lock(&self.state)
            .sandboxes
            .get(id)
            .and_then(|s| s.container.clone());
        let Some(container) = container else {
            return not_found("sandbox");
        };
        let command = body["command"].as_str().unwrap_or_default();
        let argv = vec!["sh".into(), "-c".into(), command.to_owned()];
        match self.docker.exec(&SandboxId(container), &argv, false).await {
            Ok(out) => json_answer(
                200,
                json!({
                    "exitCode": out.exit_code,
                    "result": format!("{}{}", out.stdout, out.stderr),
                }),
            ),
            Err(e) => json_answer(500, json!({"statusCode": 500, "message": e.to_string()})),
        }
    }

    /// Serves one execute WebSocket: reads `{code, contextId}`, runs the code in that
    /// context's kernel and answers as the toolbox does: stdout, stderr and error frames,
    /// `control: completed`, close 1000.
    async fn execute(self: Arc<Self>, stream: Rewound) {
        let sandbox: Arc<Mutex<Option<String>>> = Arc::default();
        let seen = sandbox.clone();
        let check = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request| {
            let parts: Vec<&str> = request
                .uri()
                .path()
                .trim_start_matches('/')
                .split('/')
                .collect();
            match parts.as_slice() {
                ["toolbox", id, "process", "interpreter", "execute"] => {
                    *seen.lock().expect("sandbox lock") = Some((*id).to_owned());
                    Ok(())
                }
                _ => Err((
                    404,
                    format!("the emulator has no WebSocket at {}", request.uri()),
                )),
            }
        };
        let Some(mut socket) = accept(stream, check).await else {
            return;
        };
        let sandbox = sandbox
            .lock()
            .expect("sandbox lock")
            .clone()
            .unwrap_or_default();
        let request: Value = match socket.next().await {
            Some(Ok(Message::Text(text))) => {
                serde_json::from_str(text.as_str()).unwrap_or_default()
            }
            _ => return,
        };
        let code = request["code"].as_str().unwrap_or_default();
        let context = request["contextId"].as_str().unwrap_or_default().to_owned();
        // The runner's restart marker changes every run: a placeholder in the cassette.
        for (at, _) in code.match_indices("sm-marker-") {
            if let Some(marker) = code.get(at..at + 18) {
                self.volatiles.register("marker", marker);
            }
        }
        let container = {
            let state = lock(&self.state);
            match state.contexts.get(&context) {
                Some(owner) if *owner == sandbox => state
                    .sandboxes
                    .get(&sandbox)
                    .and_then(|s| s.container.clone()),
                _ => None,
            }
        };
        let mut frames = Vec::new();
        match container {
            None => frames.push(output(
                "error",
                "",
                "ContextNotFound",
                &format!("no context {context}"),
            )),
            Some(container) => match self
                .docker
                .run_code_in(&SandboxId(container), &context, code)
                .await
            {
                Ok(out) => {
                    if !out.stdout.is_empty() {
                        frames.push(output("stdout", &out.stdout, "", ""));
                    }
                    if !out.stderr.is_empty() {
                        frames.push(output("stderr", &out.stderr, "", ""));
                    }
                    if let Some(error) = out.error {
                        let (name, value) = error.split_once(": ").unwrap_or((&error, ""));
                        frames.push(output("error", "", name, value));
                    }
                }
                Err(e) => frames.push(output("error", "", "WorkerProcessError", &e.to_string())),
            },
        }
        frames.push(output("control", "completed", "", ""));
        for frame in frames {
            if socket.send(Message::text(frame.to_string())).await.is_err() {
                return;
            }
        }
        close_with(&mut socket, 1000, "").await;
    }
}

/// An `OutputMessage` frame, every field present as the toolbox sends them.
fn output(kind: &str, text: &str, name: &str, value: &str) -> Value {
    json!({"type": kind, "text": text, "name": name, "value": value, "traceback": ""})
}

/// An `InterpreterContext` record.
fn context_dto(id: &str, request: &Value) -> Value {
    json!({
        "id": id,
        "cwd": request["cwd"].as_str().unwrap_or("/home/datalayer"),
        "language": request["language"].as_str().unwrap_or("python"),
        "active": true,
        "createdAt": STAMP,
    })
}

/// The fake key the client sends; it grants nothing anywhere.
const FAKE_KEY: &str = "fake-daytona-key-00000000";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Docker; rewrites fixtures/cassettes/daytona/{lifecycle,core-tier}.yaml"]
async fn author_daytona_cassettes() {
    if !common::docker_or_skip("author_daytona_cassettes") {
        return;
    }
    let root = common::root();
    record(&root.join("fixtures/cassettes/daytona")).await;
}

/// Recording with fake credentials writes none of their values: not in the cassettes, not
/// in the reports of the runs that recorded them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recording_with_fake_credentials_writes_none_of_them() {
    if !common::docker_or_skip("recording_with_fake_credentials_writes_none_of_them (daytona)") {
        return;
    }
    let out = common::out_dir("record-daytona");
    let (results, mut fakes) = record(&out.join("cassettes")).await;
    fakes.push(Secret::new("DAYTONA_API_KEY", FAKE_KEY));
    common::write_reports(&out.join("reports"), results, &fakes);
    common::assert_no_value_in_tree(&out, &fakes);
}

/// Records lifecycle and core-tier into `dir`; returns their results and the secrets used.
async fn record(dir: &Path) -> (Vec<ScenarioResult>, Vec<Secret>) {
    let root = common::root();
    let mut results = Vec::new();
    let mut secrets = Vec::new();
    let docker = variants::connect_docker(&root, Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")))
        .await
        .expect("the docker variant connects");
    for name in ["lifecycle", "core-tier"] {
        let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml")))
            .expect("the scenario loads");
        let run_id = new_run_id();
        let runner = Runner::new(
            run_id.clone(),
            fake_canary(),
            Arc::new(Quiet),
            CancellationToken::new(),
        );
        // The runner's own placeholders: run id, canary, its fingerprint, restart markers.
        let volatiles = runner.scenario_volatiles();
        let labels = RunLabels {
            run_id: run_id.clone(),
            variant: "daytona".into(),
            scenario: name.into(),
        };
        let emulator = Emulator::start(docker.clone(), labels, volatiles.clone()).await;
        let path = dir.join(format!("{name}.yaml"));
        let recorder = Arc::new(Recorder::new(&path, ORIGIN, "daytona", name));
        let provider = DaytonaProvider::new(
            ApiSettings {
                endpoints: Endpoints {
                    api_base: emulator.url.clone(),
                    sandbox_domain: String::new(),
                },
                mode: Mode::Record(recorder.clone()),
                // Fake: the emulator checks no credential.
                credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
                volatiles,
                call_timeout: Duration::from_secs(120),
            },
            None,
            None,
        )
        .expect("the daytona client starts");
        runner
            .prepare(&docker)
            .await
            .expect("the docker variant's base image is ready");
        let result = runner
            .run_scenario(Arc::new(provider), &scenario, None)
            .await;
        let failed = common::failures(&result);
        assert!(
            failed.is_empty(),
            "{name} failed through the emulator: {failed:#?}"
        );
        recorder.finish().expect("the cassette is written");
        assert_eq!(
            common::left_by_run(&run_id),
            Vec::<String>::new(),
            "{name} left resources"
        );
        secrets.extend(runner.secrets());
        results.push(result);
    }
    (results, secrets)
}
