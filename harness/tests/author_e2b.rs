//! Authors the e2b cassettes: an emulator of E2B's API, written from the published specs
//! (control plane, envd's Connect process API) and the code interpreter's `/execute`, runs
//! on 127.0.0.1 and forwards code and commands to a real sandbox of the local docker
//! variant, so every probe answer is real. The e2b client runs the lifecycle and core-tier
//! scenarios against it in record mode and writes `fixtures/cassettes/e2b/<scenario>.yaml`.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test author_e2b -- --ignored`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_matrix::report::results::ScenarioResult;
use sandbox_matrix::run::events::{EventSink, RunEvent};
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_providers::api::cassette::{CONNECT_END_STREAM, decode_connect, encode_connect};
use sandbox_providers::api::{Endpoints, Mode, Recorder};
use sandbox_providers::e2b::E2bProvider;
use sandbox_providers::{
    Artifact, BuildRequest, CodeOutput, CommandOutput, Provider, RunLabels, SandboxId, Secret,
};
use serde_json::{Value, json};

/// What the cassettes say they were written from.
const ORIGIN: &str = "authored from e2b/openapi.yml@0.1.0 and envd.yaml@0.1.3, answered by an emulator forwarding to the docker variant";

/// The fake key the emulator is sent; it grants nothing anywhere.
const FAKE_KEY: &str = "e2b_fake_authoring_key_0000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker; writes fixtures/cassettes/e2b/*.yaml"]
async fn author_e2b_cassettes() {
    let root = common::root();
    record(&root, &root.join("fixtures/cassettes/e2b")).await;
}

/// Recording with fake credentials writes none of their values: not in the cassettes, not
/// in the reports of the runs that recorded them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_with_fake_credentials_writes_none_of_them() {
    if !common::docker_or_skip("recording_with_fake_credentials_writes_none_of_them (e2b)") {
        return;
    }
    let out = common::out_dir("record-e2b");
    let (results, mut fakes) = record(&common::root(), &out.join("cassettes")).await;
    fakes.push(Secret::new("E2B_API_KEY", FAKE_KEY));
    common::write_reports(&out.join("reports"), results, &fakes);
    common::assert_no_value_in_tree(&out, &fakes);
}

/// Records lifecycle and core-tier into `dir`; returns their results and the secrets used.
async fn record(root: &Path, dir: &Path) -> (Vec<ScenarioResult>, Vec<Secret>) {
    let docker = sandbox_matrix::run::variants::connect_docker(
        root,
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .expect("a Docker engine");
    docker
        .prepare(&|line: &str| eprintln!("prepare: {line}"))
        .await
        .expect("the docker variant's base image");
    let mut results = Vec::new();
    let mut secrets = Vec::new();
    for scenario in ["lifecycle", "core-tier"] {
        let (result, used) = author(root, docker.clone(), scenario, dir).await;
        results.push(result);
        secrets.extend(used);
    }
    (results, secrets)
}

async fn author(
    root: &Path,
    docker: Arc<dyn Provider>,
    name: &str,
    dir: &Path,
) -> (ScenarioResult, Vec<Secret>) {
    let emulator =
        Emulator::start(docker.clone(), root.join("fixtures/environments/reference")).await;
    let path = dir.join(format!("{name}.yaml"));
    let recorder = Arc::new(Recorder::new(&path, ORIGIN, "e2b", name));
    let run_id = new_run_id();
    let runner = Runner::new(
        run_id,
        fake_canary(),
        Arc::new(Print),
        tokio_util::sync::CancellationToken::new(),
    );
    // The runner's own placeholders: run id, canary, its fingerprint, restart markers.
    let volatiles = runner.scenario_volatiles();
    let e2b = E2bProvider::new(
        Endpoints {
            api_base: emulator.url(),
            sandbox_domain: emulator.url(),
        },
        Mode::Record(recorder.clone()),
        // Fake: the emulator checks only that a key is sent.
        Secret::new("E2B_API_KEY", FAKE_KEY),
        volatiles.clone(),
        Default::default(),
    )
    .expect("an e2b client");
    let provider: Arc<dyn Provider> = Arc::new(e2b);
    let scenario = Scenario::load(&root.join(format!("scenarios/{name}.yaml"))).expect("scenario");
    let result = runner.run_scenario(provider, &scenario, None).await;
    // Whatever the emulator's docker sandboxes left is removed by their labels.
    emulator.cleanup().await;
    let written = recorder.finish().expect("the cassette");
    eprintln!("wrote {} ({} exchanges)", written.display(), recorder.len());
    assert!(
        result.passed(),
        "{name} did not pass against the emulator: {result:#?}"
    );
    (result, runner.secrets())
}

/// Prints step outcomes while authoring.
struct Print;

impl EventSink for Print {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepFinished { .. } = event {
            eprintln!("{event:?}");
        }
    }
}

/// One HTTP request as the emulator reads it.
type Request = common::HttpRequest;

/// One answer.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Answer {
    fn json(status: u16, value: Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(&value).expect("json"),
        }
    }
    fn empty(status: u16) -> Self {
        Self {
            status,
            content_type: "text/plain",
            body: Vec::new(),
        }
    }
    fn error(status: u16, message: &str) -> Self {
        Self::json(status, json!({ "code": status, "message": message }))
    }
}

struct Template {
    id: String,
    build: String,
    name: String,
    /// Log lines of the docker build, as it runs.
    logs: Arc<Mutex<Vec<String>>>,
    /// The docker build's outcome once it ended.
    outcome: Arc<Mutex<Option<std::result::Result<Artifact, String>>>>,
}

struct Sandbox {
    inner: SandboxId,
    template: String,
    metadata: BTreeMap<String, String>,
    /// Context ids; the first is the docker sandbox's own kernel.
    contexts: Vec<String>,
}

#[derive(Default)]
struct World {
    templates: Vec<Template>,
    sandboxes: HashMap<String, Sandbox>,
    labels: Vec<RunLabels>,
    counter: u32,
}

/// The emulator: an HTTP/1.1 server on 127.0.0.1, one request per connection.
#[derive(Clone)]
struct Emulator {
    url: String,
    docker: Arc<dyn Provider>,
    environment: PathBuf,
    world: Arc<Mutex<World>>,
}

impl Emulator {
    async fn start(docker: Arc<dyn Provider>, environment: PathBuf) -> Self {
        let (listener, url) = common::bind_loopback().await;
        let emulator = Self {
            url,
            docker,
            environment,
            world: Arc::default(),
        };
        let serving = emulator.clone();
        common::serve_http(listener, move |request| {
            let emulator = serving.clone();
            async move { emulator.serve(request).await }
        });
        emulator
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().expect("emulator state")
    }

    async fn cleanup(&self) {
        let labels = self.world().labels.clone();
        for labels in labels {
            for resource in self
                .docker
                .list_resources(&labels)
                .await
                .unwrap_or_default()
            {
                let _ = self.docker.delete_resource(&resource).await;
            }
        }
    }

    async fn serve(&self, request: Request) -> (u16, String, Vec<u8>) {
        let answer = if request.headers.contains_key("x-api-key")
            || request.path.starts_with("/sandbox/")
            || request.path.starts_with("/upload/")
        {
            self.answer(&request).await
        } else {
            Answer::error(401, "missing X-API-Key")
        };
        (answer.status, answer.content_type.to_owned(), answer.body)
    }

    fn next_id(&self, prefix: &str) -> String {
        let mut world = self.world();
        world.counter += 1;
        format!("{prefix}{:04}", world.counter)
    }

    async fn answer(&self, r: &Request) -> Answer {
        let parts: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
        let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        match (r.method.as_str(), parts.as_slice()) {
            ("POST", ["v3", "templates"]) => {
                let name = body["name"].as_str().unwrap_or_default().to_owned();
                let (id, build) = (
                    self.next_id("tpl"),
                    "0b5e7c1e-0000-4000-8000-000000000001".to_owned(),
                );
                self.world().templates.push(Template {
                    id: id.clone(),
                    build: build.clone(),
                    name: name.clone(),
                    logs: Arc::default(),
                    outcome: Arc::default(),
                });
                Answer::json(
                    202,
                    json!({"templateID": id, "buildID": build, "public": false,
                           "names": [name], "tags": ["default"], "aliases": [name]}),
                )
            }
            ("GET", ["templates", tid, "files", hash]) => Answer::json(
                201,
                json!({"present": false, "url": format!("{}/upload/{tid}/{hash}", self.url)}),
            ),
            ("PUT", ["upload", ..]) => Answer::empty(200),
            ("POST", ["v2", "templates", tid, "builds", _]) => self.start_build(tid, &body),
            ("GET", ["templates", tid, "builds", bid, "status"]) => {
                self.build_status(tid, bid, &r.query)
            }
            ("POST", ["sandboxes"]) => self.create(&body).await,
            ("GET", ["sandboxes", id]) => match self.world().sandboxes.get(*id) {
                Some(s) => Answer::json(200, detail(id, s)),
                None => Answer::error(404, "sandbox not found"),
            },
            ("DELETE", ["sandboxes", id]) => {
                let removed = self.world().sandboxes.remove(*id);
                match removed {
                    Some(s) => {
                        let _ = self
                            .docker
                            .shutdown(&s.inner, Duration::from_secs(10))
                            .await;
                        Answer::empty(204)
                    }
                    None => Answer::error(404, "sandbox not found"),
                }
            }
            ("GET", ["v2", "sandboxes"]) => self.list_sandboxes(&r.query),
            ("GET", ["v2", "templates"]) => {
                let world = self.world();
                Answer::json(
                    200,
                    Value::Array(world.templates.iter().map(|t| json!({
                        "templateID": t.id, "buildID": t.build, "cpuCount": 2, "memoryMB": 1024,
                        "diskSizeMB": 5120, "public": false, "aliases": [t.name], "names": [t.name],
                        "createdAt": now(), "updatedAt": now(), "createdBy": null,
                        "lastSpawnedAt": null, "spawnCount": 0, "buildCount": 1,
                        "envdVersion": "0.1.3", "buildStatus": "ready",
                    })).collect()),
                )
            }
            ("DELETE", ["templates", tid]) => {
                let mut world = self.world();
                let before = world.templates.len();
                world.templates.retain(|t| t.id != *tid);
                if world.templates.len() < before {
                    Answer::empty(204)
                } else {
                    Answer::error(404, "template not found")
                }
            }
            (_, ["sandbox", port, id, rest @ ..]) => {
                self.in_sandbox(port, id, rest, r, &body).await
            }
            _ => Answer::error(404, &format!("the emulator has no {} {}", r.method, r.path)),
        }
    }

    fn start_build(&self, tid: &str, body: &Value) -> Answer {
        let world = self.world();
        let Some(template) = world.templates.iter().find(|t| t.id == tid) else {
            return Answer::error(404, "template not found");
        };
        let (logs, outcome) = (template.logs.clone(), template.outcome.clone());
        let name = template.name.clone();
        drop(world);
        let secrets = body["fromImageRegistry"]["password"]
            .as_str()
            .map(|p| vec![Secret::new("REGISTRY_TOKEN", p)])
            .unwrap_or_default();
        let request = BuildRequest {
            environment_dir: self.environment.clone(),
            base: sandbox_providers::BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
            registry_credential: None,
            build_secrets: secrets,
            labels: RunLabels {
                run_id: name,
                variant: "e2b-emulator".into(),
                scenario: "build".into(),
            },
        };
        self.world().labels.push(request.labels.clone());
        let docker = self.docker.clone();
        tokio::spawn(async move {
            let sink = logs.clone();
            let log = move |line: &str| sink.lock().expect("logs").push(line.to_owned());
            let result = docker
                .build(&request, &log)
                .await
                .map_err(|e| e.to_string());
            *outcome.lock().expect("outcome") = Some(result);
        });
        Answer::empty(202)
    }

    fn build_status(&self, tid: &str, bid: &str, query: &str) -> Answer {
        let world = self.world();
        let Some(template) = world
            .templates
            .iter()
            .find(|t| t.id == tid && t.build == bid)
        else {
            return Answer::error(404, "build not found");
        };
        let offset: usize = query_param(query, "logsOffset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let logs = template.logs.lock().expect("logs").clone();
        let outcome = template.outcome.lock().expect("outcome").clone();
        let new: Vec<&String> = logs.iter().skip(offset).take(100).collect();
        let status = match (&outcome, offset + new.len() >= logs.len()) {
            (Some(Ok(_)), true) => "ready",
            (Some(Err(_)), true) => "error",
            _ => "building",
        };
        let entries: Vec<Value> = new
            .iter()
            .map(|m| json!({"timestamp": now(), "message": m, "level": "info"}))
            .collect();
        let mut info = json!({"templateID": tid, "buildID": bid, "status": status,
                              "logs": new, "logEntries": entries});
        if let (Some(Err(e)), "error") = (&outcome, status) {
            info["reason"] = json!({"message": e});
        }
        Answer::json(200, info)
    }

    async fn create(&self, body: &Value) -> Answer {
        let template = body["templateID"].as_str().unwrap_or_default();
        let Some((tid, bid)) = template.split_once(':') else {
            return Answer::error(400, "templateID must name a build here");
        };
        let artifact = {
            let world = self.world();
            world
                .templates
                .iter()
                .find(|t| t.id == tid && t.build == bid)
                .and_then(|t| t.outcome.lock().expect("outcome").clone())
        };
        let Some(Ok(artifact)) = artifact else {
            return Answer::error(404, "no ready build by that id");
        };
        let metadata: BTreeMap<String, String> =
            serde_json::from_value(body["metadata"].clone()).unwrap_or_default();
        let labels = RunLabels {
            run_id: metadata
                .get("sandbox-matrix.run")
                .cloned()
                .unwrap_or_default(),
            variant: "e2b-emulator".into(),
            scenario: metadata
                .get("sandbox-matrix.scenario")
                .cloned()
                .unwrap_or_default(),
        };
        self.world().labels.push(labels.clone());
        let inner = match self.docker.launch(&artifact, &labels).await {
            Ok((inner, _)) => inner,
            Err(e) => return Answer::error(500, &e.to_string()),
        };
        let id = self.next_id("sbx");
        self.world().sandboxes.insert(
            id.clone(),
            Sandbox {
                inner,
                template: tid.to_owned(),
                metadata,
                contexts: Vec::new(),
            },
        );
        Answer::json(
            201,
            json!({"templateID": tid, "sandboxID": id, "clientID": "emulator",
                   "envdVersion": "0.1.3",
                   // Fake: an emulator token, redacted like a real one.
                   "envdAccessToken": format!("fake-envd-token-{id}"),
                   "domain": null}),
        )
    }

    fn list_sandboxes(&self, query: &str) -> Answer {
        let wanted: Vec<(String, String)> = query_param(query, "metadata")
            .map(|m| {
                m.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (decode(k), decode(v)))
                    .collect()
            })
            .unwrap_or_default();
        let world = self.world();
        let listed: Vec<Value> = world
            .sandboxes
            .iter()
            .filter(|(_, s)| wanted.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
            .map(|(id, s)| {
                let mut d = detail(id, s);
                d.as_object_mut().map(|o| o.remove("envdAccessToken"));
                d
            })
            .collect();
        Answer::json(200, Value::Array(listed))
    }

    async fn in_sandbox(
        &self,
        port: &str,
        id: &str,
        rest: &[&str],
        r: &Request,
        body: &Value,
    ) -> Answer {
        let (inner, contexts) = match self.world().sandboxes.get(id) {
            Some(s) => (s.inner.clone(), s.contexts.clone()),
            None => return Answer::error(502, "sandbox not running"),
        };
        if r.headers.get("x-access-token").map(String::as_str)
            != Some(&format!("fake-envd-token-{id}"))
        {
            return Answer::error(401, "bad access token");
        }
        match (port, r.method.as_str(), rest) {
            ("49999", "GET", ["health"]) => Answer::json(200, json!("OK")),
            ("49999", "POST", ["contexts"]) => {
                let context = self.next_id("ctx");
                if let Some(s) = self.world().sandboxes.get_mut(id) {
                    s.contexts.push(context.clone());
                }
                Answer::json(
                    200,
                    json!({"id": context, "language": "python",
                                         "cwd": body["cwd"].as_str().unwrap_or("/home/datalayer")}),
                )
            }
            ("49999", "POST", ["contexts", context, "restart"]) => {
                if contexts.first().map(String::as_str) != Some(*context) {
                    return Answer::error(404, "the emulator restarts the first context only");
                }
                match self.docker.restart(&inner).await {
                    Ok(_) => Answer::empty(204),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49999", "POST", ["execute"]) => {
                let code = body["code"].as_str().unwrap_or_default();
                let context = body["context_id"].as_str().unwrap_or_default();
                let output = if contexts.first().map(String::as_str) == Some(context) {
                    self.docker.run_code(&inner, code).await.map(|(o, _)| o)
                } else {
                    self.docker.run_code_in(&inner, context, code).await
                };
                match output {
                    Ok(output) => execute_lines(&output),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49983", "POST", ["process.Process", "Start"]) => {
                let user = r
                    .headers
                    .get("authorization")
                    .and_then(|a| a.strip_prefix("Basic "))
                    .and_then(|b| BASE64.decode(b).ok())
                    .map(|b| String::from_utf8_lossy(&b).trim_end_matches(':').to_owned())
                    .unwrap_or_default();
                let Ok(frames) = decode_connect(&r.body) else {
                    return Answer::error(400, "not a Connect envelope");
                };
                let process = &frames[0].message["process"];
                let mut argv = vec![process["cmd"].as_str().unwrap_or_default().to_owned()];
                argv.extend(
                    process["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
                match self.docker.exec(&inner, &argv, user == "root").await {
                    Ok(out) => process_frames(&out),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            _ => Answer::error(404, &format!("the emulator has no {} {}", r.method, r.path)),
        }
    }
}

fn detail(id: &str, s: &Sandbox) -> Value {
    json!({"templateID": s.template, "sandboxID": id, "clientID": "emulator",
           "startedAt": now(), "endAt": now(), "cpuCount": 2, "memoryMB": 1024,
           "diskSizeMB": 5120, "state": "running", "envdVersion": "0.1.3",
           "metadata": s.metadata})
}

fn execute_lines(output: &CodeOutput) -> Answer {
    let mut lines = Vec::new();
    if !output.stdout.is_empty() {
        lines.push(json!({"type": "stdout", "text": output.stdout, "timestamp": 0}));
    }
    if !output.stderr.is_empty() {
        lines.push(json!({"type": "stderr", "text": output.stderr, "timestamp": 0}));
    }
    if let Some(result) = &output.result {
        lines.push(json!({"type": "result", "text": result, "is_main_result": true}));
    }
    if let Some(error) = &output.error {
        let (name, value) = error.split_once(": ").unwrap_or((error.as_str(), ""));
        lines.push(json!({"type": "error", "name": name, "value": value, "traceback": ""}));
    }
    lines.push(json!({"type": "end_of_execution"}));
    let mut body = Vec::new();
    for line in lines {
        body.extend(serde_json::to_vec(&line).expect("json"));
        body.push(b'\n');
    }
    Answer {
        status: 200,
        content_type: "application/x-ndjson",
        body,
    }
}

fn process_frames(out: &CommandOutput) -> Answer {
    let mut messages = vec![(0, json!({"event": {"start": {"pid": 4242}}}))];
    if !out.stdout.is_empty() {
        messages.push((
            0,
            json!({"event": {"data": {"stdout": BASE64.encode(&out.stdout)}}}),
        ));
    }
    if !out.stderr.is_empty() {
        messages.push((
            0,
            json!({"event": {"data": {"stderr": BASE64.encode(&out.stderr)}}}),
        ));
    }
    let code = out.exit_code.unwrap_or(-1);
    messages.push((
        0,
        json!({"event": {"end": {"exitCode": code, "exited": true, "status": format!("exit status {code}")}}}),
    ));
    messages.push((CONNECT_END_STREAM, json!({})));
    let mut body = Vec::new();
    for (flags, message) in messages {
        body.extend(encode_connect(flags, &message).expect("envelope"));
    }
    Answer {
        status: 200,
        content_type: "application/connect+json",
        body,
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| decode(v))
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
