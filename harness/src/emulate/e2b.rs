//! An emulator of E2B's API, written from the published specs (control plane, envd's
//! Connect process API) and the code interpreter's `/execute`, served over HTTPS on
//! 127.0.0.1 and forwarding builds, code and commands to the local docker variant, so
//! every answer about a sandbox is real.
//!
//! It answers through E2B's live host forms only: the control plane at `api.<domain>`,
//! a sandbox's port at `<port>-<sandboxID>.<domain>`. A client reaches it with the
//! emulator's test CA trusted and `<domain>` pinned to 127.0.0.1 (see
//! [`sandbox_providers::api::network`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_providers::api::cassette::{CONNECT_END_STREAM, decode_connect, encode_connect};
use sandbox_providers::api::{Network, ResolvePin};
use sandbox_providers::{
    Artifact, BuildRequest, CodeOutput, CommandOutput, Provider, RunLabels, SandboxId, Secret,
};
use serde_json::{Value, json};

use super::{Answer, EmulateError, Front, HttpRequest};

/// The domain the e2b emulator serves when none is given.
pub const DEFAULT_DOMAIN: &str = "e2b.test";

/// Where and as what the emulator serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1; 0 takes a free one.
    pub port: u16,
    /// The sandbox domain: the control plane is `api.<domain>`.
    pub domain: String,
    /// The environment folder builds are made from (the docker variant builds it).
    pub environment: PathBuf,
}

struct Template {
    id: String,
    build: String,
    name: String,
    /// Log lines of the docker build, as it runs.
    logs: Arc<Mutex<Vec<String>>>,
    /// The docker build's outcome once it ended.
    outcome: Arc<Mutex<Option<std::result::Result<Artifact, String>>>>,
    /// The build's start command: what serves the code channel.
    start_cmd: Option<String>,
}

struct Sandbox {
    inner: SandboxId,
    template: String,
    metadata: BTreeMap<String, String>,
    /// Context ids; the first is the docker sandbox's own kernel.
    contexts: Vec<String>,
    /// Whether its template has a start command: without one, nothing listens on the
    /// code interpreter's port.
    code_channel: bool,
}

#[derive(Default)]
struct World {
    templates: Vec<Template>,
    sandboxes: HashMap<String, Sandbox>,
    labels: Vec<RunLabels>,
    counter: u32,
}

/// The e2b emulator. Dropping it stops serving; [`Emulator::cleanup`] removes what its
/// docker sandboxes and builds left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    domain: String,
    docker: Arc<dyn Provider>,
    environment: PathBuf,
    world: Mutex<World>,
    front: Mutex<Option<Front>>,
    port: u16,
    ca_pem: String,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("domain", &self.inner.domain)
            .field("port", &self.inner.port)
            .finish_non_exhaustive()
    }
}

impl Emulator {
    /// Serves E2B's API over HTTPS on 127.0.0.1 with `docker` behind it.
    pub async fn start(docker: Arc<dyn Provider>, options: Options) -> Result<Self, EmulateError> {
        let domain = options.domain.trim_end_matches('.').to_ascii_lowercase();
        let (plain_listener, plain) = super::bind_loopback(0).await?;
        let (public, _) = super::bind_loopback(options.port).await?;
        let mut front = Front::with_upstream(public, plain, &domain)?;
        let emulator = Self {
            inner: Arc::new(Inner {
                port: front.port(),
                ca_pem: front.ca().ca_pem().to_owned(),
                domain,
                docker,
                environment: options.environment,
                world: Mutex::default(),
                front: Mutex::new(None),
            }),
        };
        let serving = emulator.clone();
        front.serve(super::serve_http(plain_listener, move |request| {
            let emulator = serving.clone();
            async move {
                let answer = emulator.serve(request).await;
                (answer.status, answer.content_type.to_owned(), answer.body)
            }
        }));
        *emulator.lock_front() = Some(front);
        Ok(emulator)
    }

    fn lock_front(&self) -> std::sync::MutexGuard<'_, Option<Front>> {
        self.inner.front.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops serving (what [`Self::cleanup`] removes is left to it).
    pub fn stop(&self) {
        self.lock_front().take();
    }

    /// The port it serves on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The sandbox domain, without a port.
    pub fn domain(&self) -> &str {
        &self.inner.domain
    }

    /// The test CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.inner.ca_pem
    }

    /// `E2B_DOMAIN` for a client that keeps the port in its URLs: `<domain>:<port>`.
    pub fn domain_with_port(&self) -> String {
        format!("{}:{}", self.inner.domain, self.inner.port)
    }

    /// `E2B_API_URL` for a client that keeps the port in its URLs.
    pub fn api_url_with_port(&self) -> String {
        format!("https://api.{}", self.domain_with_port())
    }

    /// What a client needs besides the URLs: the test CA trusted, and `<domain>` pinned to
    /// 127.0.0.1 at the emulator's port, so URLs may carry no port at all (as live ones).
    pub fn network(&self) -> Network {
        Network::default()
            .trust_pem(self.inner.ca_pem.clone())
            .pin(ResolvePin {
                domain: self.inner.domain.clone(),
                addr: std::net::SocketAddr::from(([127, 0, 0, 1], self.inner.port)),
            })
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.inner.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes, by their labels, whatever the emulator's docker builds and sandboxes left.
    pub async fn cleanup(&self) {
        let labels = self.world().labels.clone();
        for labels in labels {
            for resource in self
                .inner
                .docker
                .list_resources(&labels)
                .await
                .unwrap_or_default()
            {
                let _ = self.inner.docker.delete_resource(&resource).await;
            }
        }
    }

    /// Routes by the host the client called: `api.<domain>` or `<port>-<id>.<domain>`.
    async fn serve(&self, request: HttpRequest) -> Answer {
        let host = request
            .host
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(request.host.as_str(), |(name, _)| name)
            .to_ascii_lowercase();
        let Some(label) = host
            .strip_suffix(&self.inner.domain)
            .and_then(|rest| rest.strip_suffix('.'))
        else {
            return Answer::error(
                404,
                &format!(
                    "{host} is not under this emulator's domain {}",
                    self.inner.domain
                ),
            );
        };
        if label == "api" {
            if !request.headers.contains_key("x-api-key") && !request.path.starts_with("/upload/") {
                return Answer::error(401, "missing X-API-Key");
            }
            return self.answer(&request).await;
        }
        let Some((port, id)) = label.split_once('-') else {
            return Answer::error(404, &format!("no such host {host}"));
        };
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let rest: Vec<&str> = request.path.trim_start_matches('/').split('/').collect();
        self.in_sandbox(port, id, &rest, &request, &body).await
    }

    fn next_id(&self, prefix: &str) -> String {
        let mut world = self.world();
        world.counter += 1;
        format!("{prefix}{:04}", world.counter)
    }

    async fn answer(&self, r: &HttpRequest) -> Answer {
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
                    start_cmd: None,
                });
                Answer::json(
                    202,
                    json!({"templateID": id, "buildID": build, "public": false,
                           "names": [name], "tags": ["default"], "aliases": [name]}),
                )
            }
            // The upload link names the host the client called, its port included if any.
            ("GET", ["templates", tid, "files", hash]) => Answer::json(
                201,
                json!({"present": false, "url": format!("https://{}/upload/{tid}/{hash}", r.host)}),
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
                            .inner
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
            _ => Answer::error(404, &format!("the emulator has no {} {}", r.method, r.path)),
        }
    }

    fn start_build(&self, tid: &str, body: &Value) -> Answer {
        let text = |name: &str| {
            body[name]
                .as_str()
                .filter(|v| !v.trim().is_empty())
                .map(str::to_owned)
        };
        let start_cmd = text("startCmd");
        if start_cmd.is_none() && text("readyCmd").is_some() {
            return Answer::error(
                400,
                "readyCmd needs a startCmd: there is nothing to wait for",
            );
        }
        let Some(from_image) = text("fromImage") else {
            return Answer::error(400, "the build names no fromImage");
        };
        let mut world = self.world();
        let Some(template) = world.templates.iter_mut().find(|t| t.id == tid) else {
            return Answer::error(404, "template not found");
        };
        template.start_cmd = start_cmd;
        let (logs, outcome) = (template.logs.clone(), template.outcome.clone());
        let name = template.name.clone();
        drop(world);
        let login = &body["fromImageRegistry"];
        let password = login["password"].as_str();
        let (base, registry_credential, secrets) =
            if from_image == sandbox_providers::docker::base::BASE_IMAGE {
                // The local base: the password handed over is the run's canary.
                let canary = password.map(|p| vec![Secret::new("REGISTRY_TOKEN", p)]);
                (
                    sandbox_providers::BaseImage::local(from_image),
                    None,
                    canary.unwrap_or_default(),
                )
            } else {
                let registry = from_image.split('/').next().unwrap_or_default().to_owned();
                let credential = password.map(|p| sandbox_providers::RegistryCredential {
                    registry: registry.clone(),
                    username: login["username"].as_str().unwrap_or_default().to_owned(),
                    password: Secret::new("E2B_FROM_IMAGE_REGISTRY", p),
                    source: sandbox_providers::CredentialSource::Static,
                });
                let base = sandbox_providers::BaseImage {
                    reference: from_image,
                    registry: Some(registry),
                };
                (base, credential, Vec::new())
            };
        let request = BuildRequest {
            environment_dir: self.inner.environment.clone(),
            base,
            registry_credential,
            build_secrets: secrets,
            labels: RunLabels {
                run_id: name,
                variant: "e2b-emulator".into(),
                scenario: "build".into(),
            },
        };
        self.world().labels.push(request.labels.clone());
        let docker = self.inner.docker.clone();
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
        let found = {
            let world = self.world();
            world
                .templates
                .iter()
                .find(|t| t.id == tid && t.build == bid)
                .map(|t| {
                    (
                        t.outcome.lock().expect("outcome").clone(),
                        t.start_cmd.is_some(),
                    )
                })
        };
        let Some((Some(Ok(artifact)), code_channel)) = found else {
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
        let inner = match self.inner.docker.launch(&artifact, &labels).await {
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
                code_channel,
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
        r: &HttpRequest,
        body: &Value,
    ) -> Answer {
        let (inner, contexts, code_channel) = match self.world().sandboxes.get(id) {
            Some(s) => (s.inner.clone(), s.contexts.clone(), s.code_channel),
            None => return Answer::error(502, "sandbox not running"),
        };
        if port == "49999" && !code_channel {
            // E2B's proxy, for a port nothing listens on.
            return Answer::json(
                502,
                json!({"code": 502, "sandboxId": id, "port": 49999,
                       "message": "The sandbox is running but port is not open"}),
            );
        }
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
                match self.inner.docker.restart(&inner).await {
                    Ok(_) => Answer::empty(204),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49999", "POST", ["execute"]) => {
                let code = body["code"].as_str().unwrap_or_default();
                let context = body["context_id"].as_str().unwrap_or_default();
                let output = if contexts.first().map(String::as_str) == Some(context) {
                    self.inner
                        .docker
                        .run_code(&inner, code)
                        .await
                        .map(|(o, _)| o)
                } else {
                    self.inner.docker.run_code_in(&inner, context, code).await
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
                match self.inner.docker.exec(&inner, &argv, user == "root").await {
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
