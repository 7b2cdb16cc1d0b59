//! An emulator of E2B's API, written from the published specs (control plane, envd's
//! Connect process API) and the code interpreter's `/execute`, served over HTTPS on
//! 127.0.0.1 and forwarding builds, code and commands to the local docker variant, so
//! every answer about a sandbox is real.
//!
//! A sandbox's port 49999 serves what its template's start command starts, as E2B runs
//! it: a Jupyter Server (`jupyter server … --ServerApp.port=49999`, the reference
//! environment's) is the docker sandbox's real Jupyter Server, its REST API and kernel
//! WebSockets forwarded byte for byte, refusing as Jupyter would unless the command turns
//! its token off (`--IdentityProvider.token=` and `--ServerApp.disable_check_xsrf=True`);
//! E2B's code-interpreter template's server (`…/start-up.sh`) is its `/execute` API, run
//! on the docker sandbox's kernel; anything else, or no start command, leaves the port
//! closed (E2B's proxy answers 502). A sandbox created with public traffic off wants its
//! traffic access token (`E2B-Traffic-Access-Token`) on every port but envd's.
//!
//! It answers through E2B's live host forms: the control plane at `api.<domain>`, a
//! sandbox's port at `<port>-<sandboxID>.<domain>`, and, as E2B's own single sandbox
//! host does, any other host with the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers
//! (what the SDK sends given `E2B_SANDBOX_URL`). A client reaches it with the emulator's
//! test CA trusted and `<domain>` pinned to 127.0.0.1 (see
//! [`sandbox_providers::api::network`]); the official SDK needs no pin for a domain
//! under `.localhost`, which its resolver sends to loopback.
//!
//! A sandbox is created from a template named as E2B resolves it: `name`, `name:tag`,
//! the template id, or `<templateID>:<buildID>` (the exact build; what the project's
//! client launches). A bare name or id means the `default` tag.
//!
//! A build is made from the steps and uploads the client sent, as E2B's template builder
//! (e2b-dev/infra at [`INFRA_COMMIT`]) runs them ([`template`]): its user phase, then each
//! step, on the docker variant's engine. Each `COPY`'s upload must be there and gzipped
//! (the builder unpacks it with `tar -xzvf`,
//! `packages/orchestrator/pkg/template/build/commands/copy.go`), and a `RUN` given a second
//! argument runs as that user (`commands/run.go`), whom envd must know: an empty one is
//! refused (`packages/envd/internal/permissions/authenticate.go`, `invalid username`), one
//! who does not exist fails the step. envd refuses a process start with an empty or
//! unknown Basic user the same way. A build field or step the emulator does not implement
//! is refused by name (501), never dropped.
//!
//! A sandbox's state (`GET /sandboxes/{id}`) is its container's: a paused container is
//! `paused`, and one that ended is not found, since E2B's `SandboxState` is only `running`
//! or `paused`; `GET /v2/sandboxes/{id}/logs` serves the container's last log lines.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_providers::api::cassette::{CONNECT_END_STREAM, decode_connect, encode_connect};
use sandbox_providers::{
    Artifact, BuildRequest, CodeOutput, CommandOutput, Provider, RunLabels, SandboxId,
    SandboxState, Secret,
};
use serde_json::{Value, json};

use sandbox_providers::api::ws::{Rewound, accept, split_upgrades};
use sandbox_providers::docker::DockerProvider;
use tokio_tungstenite::tungstenite;

use super::Emulator as _;
use super::{Answer, EmulateError, Front, HttpRequest, Site, lock, set_field_outside};

pub mod template;

/// The domain the e2b emulator serves when none is given.
pub const DEFAULT_DOMAIN: &str = "e2b.test";

/// The e2b-dev/infra commit whose template builder and envd the emulator's build and
/// process rules follow.
pub const INFRA_COMMIT: &str = "54693ff353d26c5fe1951db5467e751f3e2f984e";

/// The fields of a build start request (`TemplateBuildStartV2`) the emulator implements.
const BUILD_FIELDS: &[&str] = &[
    "force",
    "fromImage",
    "fromImageRegistry",
    "readyCmd",
    "startCmd",
    "steps",
];

/// The fields of a build step (`TemplateStep`) the emulator implements.
const STEP_FIELDS: &[&str] = &["type", "args", "force", "filesHash", "forceUpload"];

/// The step types the emulator implements.
const STEP_TYPES: &[&str] = &["COPY", "ENV", "RUN", "USER", "WORKDIR"];

/// Where and as what the emulator serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1; 0 takes a free one.
    pub port: u16,
    /// The sandbox domain: the control plane is `api.<domain>`.
    pub domain: String,
    /// The run whose label every build and container it makes carries (`run --emulated`);
    /// `None`: labels of its own, unique to this emulator.
    pub run_id: Option<String>,
    /// Fault: every sandbox ends this long after its create, whatever its timeout asks,
    /// as a live provider's sandbox may die early.
    pub kill_after: Option<Duration>,
}

/// A template [`Emulator::seed`] built.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// Its name: what a client passes to create a sandbox from its newest build.
    pub name: String,
    /// `<templateID>:<buildID>`: the exact build, as the project's client launches it.
    pub build: String,
}

struct Template {
    id: String,
    build: String,
    name: String,
    /// Its tags: the one its name carried (`name:tag`), else `default`, and any others.
    tags: Vec<String>,
    /// Log lines of the docker build, as it runs.
    logs: Arc<Mutex<Vec<String>>>,
    /// The docker build's outcome once it ended.
    outcome: Arc<Mutex<Option<std::result::Result<Artifact, String>>>>,
    /// The build's start command: what serves the code channel.
    start_cmd: Option<String>,
    /// Its sandboxes' CPUs and memory (`cpuCount`, `memoryMB`), as the container's limits.
    limits: sandbox_providers::docker::Limits,
}

struct Sandbox {
    inner: SandboxId,
    template: String,
    /// Its size, its template's.
    limits: sandbox_providers::docker::Limits,
    /// `envVars` from its create: envd's environment for every process it starts.
    env: BTreeMap<String, String>,
    metadata: BTreeMap<String, String>,
    /// Context ids; the first is the docker sandbox's own kernel.
    contexts: Vec<String>,
    /// What listens on port 49999.
    channel: CodeChannel,
    /// The traffic access token, when public traffic is off.
    traffic_token: Option<String>,
}

/// What a template's start command serves on port 49999.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CodeChannel {
    /// Nothing: no start command, or one the emulator does not know.
    Closed,
    /// A Jupyter Server; `open` when its own token and XSRF check are off.
    Jupyter { open: bool },
    /// E2B's code interpreter (`/execute`).
    Interpreter,
}

impl CodeChannel {
    /// What `start_cmd` serves on port 49999.
    fn of(start_cmd: Option<&str>) -> Self {
        let Some(cmd) = start_cmd else {
            return Self::Closed;
        };
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let jupyter = words.windows(2).any(|w| w == ["jupyter", "server"])
            || words.contains(&"jupyter-server");
        let on_port = words
            .iter()
            .any(|w| matches!(*w, "--ServerApp.port=49999" | "--port=49999"));
        if jupyter && on_port {
            let open = words.iter().any(|w| {
                matches!(
                    *w,
                    "--IdentityProvider.token="
                        | "--IdentityProvider.token=''"
                        | "--IdentityProvider.token=\"\""
                )
            }) && words.contains(&"--ServerApp.disable_check_xsrf=True");
            Self::Jupyter { open }
        } else if words.first().is_some_and(|w| w.ends_with("/start-up.sh")) {
            Self::Interpreter
        } else {
            Self::Closed
        }
    }
}

#[derive(Default)]
struct World {
    templates: Vec<Template>,
    sandboxes: HashMap<String, Sandbox>,
    labels: Vec<RunLabels>,
    counter: u32,
    /// Uploaded build files, by template id and files hash.
    uploads: HashMap<(String, String), Vec<u8>>,
}

/// The e2b emulator. Dropping it stops serving; [`Emulator::cleanup`] removes what its
/// docker sandboxes and builds left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    site: Arc<Site>,
    docker: Arc<DockerProvider>,
    world: Mutex<World>,
    /// Forwards to the docker sandboxes' Jupyter Servers.
    http: reqwest::Client,
    /// [`Options::run_id`].
    run_id: Option<String>,
    /// [`Options::kill_after`].
    kill_after: Option<Duration>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Emulator").field(&self.inner.site).finish()
    }
}

impl super::Emulator for Emulator {
    fn site(&self) -> &Site {
        &self.inner.site
    }
}

impl Emulator {
    /// Serves E2B's API over HTTPS on 127.0.0.1 with `docker` behind it.
    pub async fn start(
        docker: Arc<DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        let domain = Site::normalise(&options.domain);
        let (plain_listener, plain) = super::bind_loopback(0).await?;
        let (split_listener, split) = super::bind_loopback(0).await?;
        let mut front = Front::with_upstream(options.port, split, &domain).await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| EmulateError::Backend(format!("an HTTP client: {e}")))?;
        let emulator = Self {
            inner: Arc::new(Inner {
                site: Arc::new(Site::new(domain, &front, "e2b")),
                docker,
                world: Mutex::default(),
                http,
                run_id: options.run_id,
                kill_after: options.kill_after,
            }),
        };
        let sockets = emulator.clone();
        front.serve(split_upgrades(split_listener, plain, move |stream| {
            sockets.clone().kernel_socket(stream)
        }));
        let serving = emulator.clone();
        emulator
            .inner
            .site
            .serve(front, plain_listener, move |request| {
                serving.clone().serve(request)
            });
        Ok(emulator)
    }

    /// `E2B_DOMAIN` for a client that keeps the port in its URLs: `<domain>:<port>`.
    pub fn domain_with_port(&self) -> String {
        format!("{}:{}", self.domain(), self.port())
    }

    /// `E2B_API_URL` for a client that keeps the port in its URLs.
    pub fn api_url_with_port(&self) -> String {
        format!("https://api.{}", self.domain_with_port())
    }

    /// Builds the environment folder `environment` into a template, as the project's e2b
    /// client builds one against the emulator, so that a client can create sandboxes
    /// without building first. Its name is unique to this emulator; `log` gets the
    /// build's lines; `start_cmd` replaces the environment's start command.
    pub async fn seed(
        &self,
        environment: &std::path::Path,
        start_cmd: Option<String>,
        log: &sandbox_providers::LogFn,
    ) -> Result<Seeded, EmulateError> {
        let client = sandbox_providers::e2b::E2bProvider::with_network(
            sandbox_providers::api::Endpoints {
                api_base: self.api_url_with_port(),
                sandbox_domain: self.domain_with_port(),
            },
            sandbox_providers::api::Mode::Live,
            // Fake: the emulator checks only that a key is sent.
            Secret::new("E2B_API_KEY", "e2b_fake_seed_key_0000"),
            Arc::default(),
            sandbox_providers::e2b::BuildOptions {
                start_cmd,
                ..Default::default()
            },
            &self.network(),
        )
        .map_err(|e| EmulateError::Backend(format!("an e2b client for the emulator: {e}")))?;
        let labels = RunLabels {
            run_id: self
                .inner
                .run_id
                .clone()
                .unwrap_or_else(|| format!("emulate-{}", self.port())),
            variant: "e2b".into(),
            scenario: super::seed_scenario(environment),
        };
        let artifact = super::seed_build(&client, environment, labels.clone(), log).await?;
        Ok(Seeded {
            name: sandbox_providers::e2b::template_name(&labels),
            build: artifact.id,
        })
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.inner.world)
    }

    /// Removes, by their labels, whatever the emulator's docker builds and sandboxes left.
    pub async fn cleanup(&self) {
        let labels = self.world().labels.clone();
        super::remove_labelled(self.inner.docker.as_ref() as &dyn Provider, labels).await;
    }

    /// Routes by the host the client called: `api.<domain>` or `<port>-<id>.<domain>`.
    async fn serve(self, request: HttpRequest) -> Answer {
        let host = super::host_name(&request.host);
        let label = self.inner.site.label(&host);
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let rest: Vec<&str> = request.path.trim_start_matches('/').split('/').collect();
        // `<port>-<id>.<domain>`, the live form of a sandbox's port.
        if let Some((port, id)) = label
            .filter(|l| *l != "api")
            .and_then(|l| l.split_once('-'))
        {
            return self.in_sandbox(port, id, &rest, &request, &body).await;
        }
        // One host for every sandbox (E2B's `sandbox.<domain>`, `E2B_SANDBOX_URL`): the
        // sandbox and its port come as headers, envd's port when none is named.
        if let Some(id) = request.headers.get("e2b-sandbox-id") {
            let port = request
                .headers
                .get("e2b-sandbox-port")
                .cloned()
                .unwrap_or_else(|| sandbox_providers::e2b::ENVD_PORT.to_string());
            return self.in_sandbox(&port, id, &rest, &request, &body).await;
        }
        // The control plane: `api.<domain>`, or a loopback name given as `E2B_API_URL`.
        if label == Some("api") || host == "localhost" || host == "127.0.0.1" {
            if !request.headers.contains_key("x-api-key") && !request.path.starts_with("/upload/") {
                return Answer::error(401, "missing X-API-Key");
            }
            return self.answer(&request).await;
        }
        Answer::error(
            404,
            &format!(
                "no such host {host} under this emulator's domain {}",
                self.domain()
            ),
        )
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
                if let Some(field) =
                    set_field_outside(&body, &["name", "tags", "cpuCount", "memoryMB"])
                {
                    return unimplemented_field_answer("template create", &field);
                }
                let size = |key: &str| body[key].as_u64().and_then(|v| u32::try_from(v).ok());
                let limits = sandbox_providers::docker::Limits {
                    cpus: size("cpuCount"),
                    memory_mb: size("memoryMB"),
                };
                let named = body["name"].as_str().unwrap_or_default();
                let (name, tag) = named.split_once(':').unwrap_or((named, "default"));
                let mut tags = vec![tag.to_owned()];
                tags.extend(strings(&body["tags"]));
                let (id, build) = (
                    self.next_id("tpl"),
                    "0b5e7c1e-0000-4000-8000-000000000001".to_owned(),
                );
                self.world().templates.push(Template {
                    id: id.clone(),
                    build: build.clone(),
                    name: name.to_owned(),
                    tags: tags.clone(),
                    logs: Arc::default(),
                    outcome: Arc::default(),
                    start_cmd: None,
                    limits,
                });
                Answer::json(
                    202,
                    json!({"templateID": id, "buildID": build, "public": false,
                           "names": [name], "tags": tags, "aliases": [name]}),
                )
            }
            // The upload link names the host the client called, its port included if any.
            ("GET", ["templates", tid, "files", hash]) => Answer::json(
                201,
                json!({"present": false, "url": format!("https://{}/upload/{tid}/{hash}", r.host)}),
            ),
            ("PUT", ["upload", tid, hash]) => {
                self.world()
                    .uploads
                    .insert(((*tid).to_owned(), (*hash).to_owned()), r.body.clone());
                Answer::empty(200)
            }
            ("POST", ["v2", "templates", tid, "builds", _]) => self.start_build(tid, &body),
            ("GET", ["templates", tid, "builds", bid, "status"]) => {
                self.build_status(tid, bid, &r.query)
            }
            // The SDK creates through v2; the project's client through the first version.
            ("POST", ["sandboxes"] | ["v2", "sandboxes"]) => self.create(&body).await,
            ("GET", ["sandboxes", id]) => self.sandbox_detail(id).await,
            ("GET", ["v2", "sandboxes", id, "logs"]) => self.sandbox_logs(id, &r.query).await,
            ("DELETE", ["sandboxes", id]) => match self.kill(id).await {
                Ok(true) => Answer::empty(204),
                Ok(false) => Answer::error(404, "sandbox not found"),
                Err(e) => Answer::error(500, &format!("removing the sandbox: {e}")),
            },
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
            _ => Answer::error(
                501,
                &format!(
                    "the e2b emulator does not implement {} {}",
                    r.method, r.path
                ),
            ),
        }
    }

    fn start_build(&self, tid: &str, body: &Value) -> Answer {
        if let Err(refused) = implemented(body) {
            return refused;
        }
        if let Err(template::Refusal::Unimplemented(why)) = template::dockerfile(&body["steps"]) {
            return Answer::error(501, &why);
        }
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
        let (name, bid) = (template.name.clone(), template.build.clone());
        // What the builder would refuse fails the build at its step, as E2B reports it.
        let context = builder_rules(tid, &body["steps"], &world.uploads).and_then(|()| {
            template::build_context(
                &std::env::temp_dir(),
                tid,
                &bid,
                &body["steps"],
                &world.uploads,
            )
            .map_err(|refusal| match refusal {
                template::Refusal::Fails(why) | template::Refusal::Unimplemented(why) => why,
            })
        });
        drop(world);
        let context = match context {
            Ok(context) => context,
            Err(failed) => {
                logs.lock().expect("logs").push(failed.clone());
                *outcome.lock().expect("outcome") = Some(Err(failed));
                return Answer::empty(202);
            }
        };
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
            environment_dir: context.dir().to_owned(),
            base,
            registry_credential,
            build_secrets: secrets,
            labels: RunLabels {
                run_id: self.inner.run_id.clone().unwrap_or(name),
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
            drop(context);
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

    /// Kills sandbox `id`: false when there is none. A killed E2B sandbox is gone: its
    /// container goes too (the docker variant's sandbox id is the container's).
    async fn kill(&self, id: &str) -> Result<bool, sandbox_providers::ProviderError> {
        let Some(s) = self.world().sandboxes.remove(id) else {
            return Ok(false);
        };
        let docker = &self.inner.docker;
        let _ = docker.shutdown(&s.inner, Duration::from_secs(10)).await;
        let container = sandbox_providers::Resource {
            kind: "container".into(),
            id: s.inner.0.clone(),
        };
        docker.delete_resource(&container).await?;
        Ok(true)
    }

    /// Kills sandbox `id` once `timeout` seconds have passed, as E2B kills a sandbox at its
    /// timeout (`NewSandbox.timeout`, spec/openapi.yml), or earlier under the
    /// [`Options::kill_after`] fault; not once the emulator has stopped, when its cleanup
    /// removes what is left.
    fn kill_at_timeout(&self, id: String, timeout: u64) {
        let emulator = self.clone();
        let at = Duration::from_secs(timeout).min(self.inner.kill_after.unwrap_or(Duration::MAX));
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if emulator.inner.site.stopped() {
                return;
            }
            if let Err(e) = emulator.kill(&id).await {
                eprintln!("emulate e2b: killing sandbox {id} at its timeout: {e}");
            }
        });
    }

    async fn create(&self, body: &Value) -> Answer {
        if let Some(refused) = create_refusal(body) {
            return refused;
        }
        let selector = body["templateID"].as_str().unwrap_or_default();
        let found = {
            let world = self.world();
            resolve(&world.templates, selector).map(|t| {
                (
                    t.id.clone(),
                    t.outcome.lock().expect("outcome").clone(),
                    CodeChannel::of(t.start_cmd.as_deref()),
                    t.limits,
                )
            })
        };
        let (tid, artifact, channel, limits) = match found {
            Some((tid, Some(Ok(artifact)), channel, limits)) => (tid, artifact, channel, limits),
            Some(_) => return Answer::error(400, &format!("template {selector} is not ready")),
            None => return Answer::error(404, &format!("template {selector} not found")),
        };
        let metadata: BTreeMap<String, String> =
            serde_json::from_value(body["metadata"].clone()).unwrap_or_default();
        let id = self.next_id("sbx");
        // Fake: an emulator token (sm-fake-…), redacted by clients like a real one.
        let traffic_token = (body["network"]["allowPublicTraffic"] == json!(false))
            .then(|| format!("sm-fake-traffic-token-{id}"));
        let labels = RunLabels {
            // A sandbox created without the run's labels (as the SDK's, by default) still
            // gets a run label of its own, unique to this emulator, for cleanup.
            run_id: metadata
                .get("sandbox-matrix.run")
                .cloned()
                .or_else(|| self.inner.run_id.clone())
                .unwrap_or_else(|| format!("e2b-emulator-{}-{id}", self.port())),
            variant: "e2b-emulator".into(),
            scenario: metadata
                .get("sandbox-matrix.scenario")
                .cloned()
                .unwrap_or_default(),
        };
        self.world().labels.push(labels.clone());
        let launched = self
            .inner
            .docker
            .launch_limited(&artifact, &labels, limits)
            .await;
        let inner = match launched {
            Ok((inner, _)) => inner,
            Err(e) => return Answer::error(500, &e.to_string()),
        };
        let env = serde_json::from_value(body["envVars"].clone()).unwrap_or_default();
        self.world().sandboxes.insert(
            id.clone(),
            Sandbox {
                inner,
                template: tid.clone(),
                limits,
                env,
                metadata,
                contexts: Vec::new(),
                channel,
                traffic_token: traffic_token.clone(),
            },
        );
        // E2B's default timeout is 15 s (NewSandbox.timeout, spec/openapi.yml).
        self.kill_at_timeout(id.clone(), body["timeout"].as_u64().unwrap_or(15));
        Answer::json(
            201,
            json!({"templateID": tid, "sandboxID": id, "clientID": "emulator",
                   "envdVersion": "0.1.3",
                   // Fake: an emulator token, redacted like a real one.
                   "envdAccessToken": format!("fake-envd-token-{id}"),
                   "trafficAccessToken": traffic_token,
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

    /// `GET /sandboxes/{id}`: its container's state decides: a paused container is a
    /// `paused` sandbox, and one that ended is not found, since E2B's `SandboxState` has
    /// only `running` and `paused` and forgets a sandbox that ended.
    async fn sandbox_detail(&self, id: &str) -> Answer {
        let (inner, mut answer) = match self.world().sandboxes.get(id) {
            Some(s) => (s.inner.clone(), detail(id, s)),
            None => return Answer::error(404, "sandbox not found"),
        };
        // E2B answers 404 for a sandbox killed or being killed, `paused` for one paused or
        // being paused (e2b-dev/infra@INFRA_COMMIT packages/api/internal/handlers/
        // sandbox_get.go, `SandboxNotFoundMsg`); its `SandboxState` is running or paused.
        match self.inner.docker.sandbox_state(&inner).await {
            Ok(Some(SandboxState::Stopped { .. })) => Answer::error(404, "sandbox not found"),
            Ok(Some(SandboxState::Paused)) => {
                answer["state"] = json!("paused");
                Answer::json(200, answer)
            }
            Ok(_) => Answer::json(200, answer),
            Err(e) => Answer::error(500, &format!("asking the engine about the sandbox: {e}")),
        }
    }

    /// `GET /v2/sandboxes/{id}/logs`: its container's last log lines as `SandboxLogEntry`s,
    /// newest first for `direction=backward`, at most `limit`. The `cursor`, `level` and
    /// `search` filters are refused by name: this emulator does not implement them.
    async fn sandbox_logs(&self, id: &str, query: &str) -> Answer {
        for unsupported in ["cursor", "level", "search"] {
            if query_param(query, unsupported).is_some() {
                return Answer::error(
                    501,
                    &format!("emulate e2b does not implement the logs filter `{unsupported}`"),
                );
            }
        }
        let limit = match query_param(query, "limit").map(|l| l.parse::<usize>()) {
            None => 1000,
            Some(Ok(limit)) if limit <= 1000 => limit,
            Some(_) => return Answer::error(400, "limit must be an integer from 0 to 1000"),
        };
        let backward = match query_param(query, "direction").as_deref() {
            None | Some("forward") => false,
            Some("backward") => true,
            Some(other) => {
                return Answer::error(
                    400,
                    &format!("direction must be forward or backward, not `{other}`"),
                );
            }
        };
        // A sandbox that ended keeps its logs until it is deleted, as its container does.
        let Some(inner) = self.world().sandboxes.get(id).map(|s| s.inner.clone()) else {
            return Answer::error(404, "sandbox not found");
        };
        let mut lines = self.inner.docker.last_log_lines(&inner.0).await;
        if backward {
            lines.reverse();
        }
        lines.truncate(limit);
        let timestamp = now();
        let logs: Vec<Value> = lines
            .into_iter()
            .map(|message| json!({"timestamp": timestamp, "level": "info", "message": message, "fields": {}}))
            .collect();
        Answer::json(200, json!({ "logs": logs }))
    }

    /// What E2B's proxy does before a request reaches a sandbox's port: the sandbox must
    /// run, the traffic token must come when public traffic is off (envd's port has its
    /// own token), and something must listen on 49999. Its docker sandbox, contexts and
    /// code channel.
    fn admit(
        &self,
        port: &str,
        id: &str,
        headers: &HashMap<String, String>,
    ) -> Result<(SandboxId, Vec<String>, CodeChannel), Answer> {
        let world = self.world();
        let Some(s) = world.sandboxes.get(id) else {
            return Err(Answer::error(502, "sandbox not running"));
        };
        let envd = port == sandbox_providers::e2b::ENVD_PORT.to_string();
        if let Some(token) = s.traffic_token.as_ref().filter(|_| !envd)
            && headers.get("e2b-traffic-access-token") != Some(token)
        {
            return Err(Answer::json(
                403,
                json!({"code": 403, "sandboxId": id,
                       "message": "the sandbox's traffic access token is missing or wrong"}),
            ));
        }
        let channel = if port == "49999" {
            s.channel
        } else {
            CodeChannel::Interpreter
        };
        if port == "49999" && channel == CodeChannel::Closed {
            // E2B's proxy, for a port nothing listens on.
            return Err(Answer::json(
                502,
                json!({"code": 502, "sandboxId": id, "port": 49999,
                       "message": "The sandbox is running but port is not open"}),
            ));
        }
        Ok((s.inner.clone(), s.contexts.clone(), channel))
    }

    /// Forwards a request for a template's Jupyter Server to the docker sandbox's, which
    /// has a token of its own: added here when the template's server is `open` (none of
    /// its own), else the answer is what a server with an unknown token gives.
    async fn forward(&self, inner: &SandboxId, open: bool, r: &HttpRequest) -> Answer {
        // Without a token of its own, only the server's version (`GET /api`) answers.
        let version_only = r.method == "GET" && r.path == "/api";
        if !(open || version_only) {
            return Answer::json(403, json!({"message": "Forbidden", "reason": null}));
        }
        super::forward_to_jupyter(&self.inner.docker, &self.inner.http, inner, &r.path, r).await
    }

    /// Serves one WebSocket upgrade: a kernel's channels on a Jupyter template's port
    /// 49999, admitted as HTTP requests are and relayed frame for frame to the docker
    /// sandbox's kernel.
    async fn kernel_socket(self, stream: Rewound) {
        let admitted: Arc<Mutex<Option<(SandboxId, String)>>> = Arc::default();
        let seen = admitted.clone();
        let this = self.clone();
        let check = move |request: &tungstenite::handshake::server::Request| {
            let verdict = this.admit_socket(request, &seen);
            this.inner.site.keep_upgrade(
                &super::upgrade_request(request),
                verdict.as_ref().map_or_else(|(s, _)| *s, |()| 101),
            );
            verdict
        };
        let Some(socket) = accept(stream, check).await else {
            return;
        };
        let Some((inner, path)) = lock(&admitted).take() else {
            return;
        };
        super::relay_to_kernel(&self.inner.docker, &inner, &path, socket).await;
    }

    /// Whether the WebSocket upgrade `request` reaches an open Jupyter Server's kernel
    /// channels; if so, `seen` gets the docker sandbox and the path there.
    fn admit_socket(
        &self,
        request: &tungstenite::handshake::server::Request,
        seen: &Mutex<Option<(SandboxId, String)>>,
    ) -> Result<(), (u16, String)> {
        let headers: HashMap<String, String> = request
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let host = headers.get("host").cloned().unwrap_or_default();
        let host = host
            .rsplit_once(':')
            .map_or(host.as_str(), |(name, _)| name)
            .to_ascii_lowercase();
        let (port, id) = match self.inner.site.label(&host).and_then(|l| l.split_once('-')) {
            Some((port, id)) => (port.to_owned(), id.to_owned()),
            None => match (
                headers.get("e2b-sandbox-id"),
                headers.get("e2b-sandbox-port"),
            ) {
                (Some(id), Some(port)) => (port.clone(), id.clone()),
                _ => return Err((404, format!("no sandbox port at host {host}"))),
            },
        };
        let refused = |a: Answer| (a.status, String::from_utf8_lossy(&a.body).into_owned());
        let (inner, _, channel) = self.admit(&port, &id, &headers).map_err(refused)?;
        let path = request.uri().path();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (channel, parts.as_slice()) {
            (CodeChannel::Jupyter { open: true }, ["api", "kernels", _, "channels"]) => {
                let query = request
                    .uri()
                    .query()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default();
                *lock(seen) = Some((inner, format!("{path}{query}")));
                Ok(())
            }
            (CodeChannel::Jupyter { open: false }, _) => Err((403, "Forbidden".to_owned())),
            _ => Err((404, format!("the emulator has no WebSocket at {path}"))),
        }
    }

    async fn in_sandbox(
        &self,
        port: &str,
        id: &str,
        rest: &[&str],
        r: &HttpRequest,
        body: &Value,
    ) -> Answer {
        let (inner, contexts, channel) = match self.admit(port, id, &r.headers) {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        if let CodeChannel::Jupyter { open } = channel {
            return self.forward(&inner, open, r).await;
        }
        match (port, r.method.as_str(), rest) {
            // Health answers without the access token, as envd's and the interpreter's do.
            ("49999", "GET", ["health"]) => return Answer::json(200, json!("OK")),
            ("49983", "GET", ["health"]) => return Answer::empty(204),
            _ => {}
        }
        if r.headers.get("x-access-token").map(String::as_str)
            != Some(&format!("fake-envd-token-{id}"))
        {
            return Answer::error(401, "bad access token");
        }
        match (port, r.method.as_str(), rest) {
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
                // No context (`null`, as the SDK sends by default) is the default kernel.
                let output = match body["context_id"].as_str() {
                    Some(context) if contexts.first().map(String::as_str) != Some(context) => {
                        self.inner.docker.run_code_in(&inner, context, code).await
                    }
                    _ => self
                        .inner
                        .docker
                        .run_code(&inner, code)
                        .await
                        .map(|(o, _)| o),
                };
                match output {
                    Ok(output) => execute_lines(&output),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49983", "POST", ["process.Process", "Start"]) => {
                // No Authorization is envd's default user; a Basic user is looked up, and
                // an empty one refused (packages/envd/internal/permissions/authenticate.go).
                let user = r
                    .headers
                    .get("authorization")
                    .and_then(|a| a.strip_prefix("Basic "))
                    .and_then(|b| BASE64.decode(b).ok())
                    .map(|b| String::from_utf8_lossy(&b).trim_end_matches(':').to_owned());
                if user.as_deref() == Some("") {
                    return Answer::json(
                        401,
                        json!({"code": "unauthenticated", "message": "invalid username: ''"}),
                    );
                }
                let Ok(frames) = decode_connect(&r.body) else {
                    return Answer::error(400, "not a Connect envelope");
                };
                let Some(first) = frames.first() else {
                    return Answer::error(400, "no Connect message");
                };
                let start = &first.message;
                let process = &start["process"];
                if let Some(field) = unimplemented_field(start, &["process", "stdin", "tag"])
                    .or_else(|| unimplemented_field(process, &["cmd", "args", "envs", "cwd"]))
                {
                    return Answer::error(
                        501,
                        &format!(
                            "the e2b emulator does not implement the process start field `{field}`"
                        ),
                    );
                }
                if start["stdin"] == json!(true) {
                    return Answer::error(501, "the e2b emulator does not implement stdin");
                }
                let mut argv = vec![process["cmd"].as_str().unwrap_or_default().to_owned()];
                argv.extend(strings(&process["args"]));
                // envd's environment: the sandbox's envVars, then the process's envs.
                let mut env = self
                    .world()
                    .sandboxes
                    .get(id)
                    .map(|s| s.env.clone())
                    .unwrap_or_default();
                env.extend(
                    process["envs"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())),
                );
                let env = env.into_iter().collect();
                // No user is envd's default, the build's last user: the image's USER
                // (packages/orchestrator/pkg/sandbox/reboot.go, meta.Context.User).
                let how = sandbox_providers::docker::Process {
                    user: user.clone(),
                    env,
                    cwd: process["cwd"].as_str().map(str::to_owned),
                };
                // envd looks the named user up and refuses one it does not find.
                let unknown = || {
                    let name = user.as_deref().unwrap_or_default();
                    Answer::json(
                        401,
                        json!({"code": "unauthenticated",
                               "message": format!("invalid username: '{name}'")}),
                    )
                };
                match self.inner.docker.exec_process(&inner, &argv, &how).await {
                    // The engine's own refusal, as the exec's output with exit code 126.
                    Ok(out)
                        if out.exit_code == Some(126)
                            && unknown_user(&format!("{}{}", out.stdout, out.stderr)) =>
                    {
                        unknown()
                    }
                    Err(e) if unknown_user(&e.to_string()) => unknown(),
                    Ok(out) => process_frames(&out),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            _ => Answer::error(
                501,
                &format!(
                    "the e2b emulator does not implement {} {}",
                    r.method, r.path
                ),
            ),
        }
    }
}

/// The 501 that names a request field the emulator does not implement.
fn unimplemented_field_answer(request: &str, field: &str) -> Answer {
    Answer::error(
        501,
        &format!(
            "the e2b emulator does not implement the {request} field `{field}`; it refuses it rather than drop it"
        ),
    )
}

/// Why the emulator refuses a sandbox create (`NewSandbox`), if it sets a field the
/// emulator does not implement, or one it implements for other values only: `secure`
/// true (envd always wants its access token here), `autoPause` false, internet access on,
/// and of `network` only `allowPublicTraffic`.
fn create_refusal(body: &Value) -> Option<Answer> {
    let implemented = [
        "templateID",
        "metadata",
        "timeout",
        "envVars",
        "secure",
        "autoPause",
        "allow_internet_access",
        "network",
    ];
    if let Some(field) = set_field_outside(body, &implemented) {
        return Some(unimplemented_field_answer("sandbox create", &field));
    }
    if let Some(field) = set_field_outside(&body["network"], &["allowPublicTraffic"]) {
        return Some(unimplemented_field_answer(
            "sandbox create",
            &format!("network.{field}"),
        ));
    }
    let only = [
        ("secure", json!(true)),
        ("autoPause", json!(false)),
        ("allow_internet_access", json!(true)),
    ];
    only.into_iter()
        .find(|(field, value)| !body[*field].is_null() && body[*field] != *value)
        .map(|(field, value)| {
            unimplemented_field_answer("sandbox create", &format!("{field}` other than `{value}"))
        })
}

/// Whether the engine refused an exec because its user is not in the container's passwd.
fn unknown_user(said: &str) -> bool {
    said.contains("unable to find user")
}

/// The first field of `object` not among `known`, if any.
fn unimplemented_field(object: &Value, known: &[&str]) -> Option<String> {
    object
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| !known.contains(&k.as_str()))
        .cloned()
}

/// Refuses, by name, a build request field or step the emulator does not implement (501).
fn implemented(body: &Value) -> Result<(), Answer> {
    let unimplemented = |what: String| {
        Err(Answer::error(
            501,
            &format!(
                "the e2b emulator does not implement {what}; it refuses it rather than drop it"
            ),
        ))
    };
    for field in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if !BUILD_FIELDS.contains(&field.as_str()) {
            return unimplemented(format!("the build field `{field}`"));
        }
    }
    for (i, step) in body["steps"].as_array().into_iter().flatten().enumerate() {
        for field in step.as_object().into_iter().flat_map(|o| o.keys()) {
            if !STEP_FIELDS.contains(&field.as_str()) {
                return unimplemented(format!("the step field `{field}` (step {i})"));
            }
        }
        let kind = step["type"].as_str().unwrap_or_default();
        if !STEP_TYPES.contains(&kind) {
            return unimplemented(format!("the step type `{kind}` (step {i})"));
        }
    }
    Ok(())
}

/// What E2B's template builder (e2b-dev/infra at [`INFRA_COMMIT`]) fails a build with
/// before any step's work: a `COPY` whose upload is missing or not gzipped (`copy.go`
/// unpacks it with `tar -xzvf`), a `RUN` whose user, its second argument, is empty (`run.go`
/// takes it as the user; envd's `authenticate.go` refuses the name). The message is the
/// builder's, with the step.
fn builder_rules(
    tid: &str,
    steps: &Value,
    uploads: &HashMap<(String, String), Vec<u8>>,
) -> Result<(), String> {
    for step in steps.as_array().into_iter().flatten() {
        let args: Vec<String> = strings(&step["args"]).collect();
        let shown = format!(
            "{} {}",
            step["type"].as_str().unwrap_or_default(),
            args.join(" ")
        );
        match step["type"].as_str() {
            Some("COPY") => {
                let hash = step["filesHash"].as_str().unwrap_or_default();
                match uploads.get(&(tid.to_owned(), hash.to_owned())) {
                    None => {
                        return Err(format!("{shown}: no files uploaded for hash `{hash}`"));
                    }
                    Some(bytes) if !bytes.starts_with(&[0x1f, 0x8b]) => {
                        return Err(format!(
                            "{shown}: tar -xzvf: gzip: stdin: not in gzip format (the builder unpacks every upload as gzip: e2b-dev/infra@{INFRA_COMMIT} packages/orchestrator/pkg/template/build/commands/copy.go)"
                        ));
                    }
                    Some(_) => {}
                }
            }
            Some("RUN") if args.len() >= 2 && args[1].is_empty() => {
                return Err(format!(
                    "failed to run command '{}': invalid username: '' (the builder runs a RUN as its second argument, run.go; envd refuses an empty user, authenticate.go: e2b-dev/infra@{INFRA_COMMIT})",
                    args[0]
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The template build `selector` names, as E2B resolves a create's `templateID`: `name`
/// or `id` (its `default` tag), `name:tag` or `id:tag`, or `id:buildID`; the newest
/// build wins.
fn resolve<'a>(templates: &'a [Template], selector: &str) -> Option<&'a Template> {
    let (head, tag) = selector.split_once(':').unwrap_or((selector, "default"));
    templates.iter().rev().find(|t| {
        (t.id == head || t.name == head)
            && (t.tags.iter().any(|g| g == tag) || (t.id == head && t.build == tag))
    })
}

fn detail(id: &str, s: &Sandbox) -> Value {
    json!({"templateID": s.template, "sandboxID": id, "clientID": "emulator",
           "startedAt": now(), "endAt": now(),
           "cpuCount": s.limits.cpus.unwrap_or(2), "memoryMB": s.limits.memory_mb.unwrap_or(1024),
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

/// The strings of the JSON array `value`; none when it is no array.
fn strings(value: &Value) -> impl Iterator<Item = String> + '_ {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The form the project's client sent before following the builder: a plain tar upload
    /// and `RUN [command, ""]`; both fail the build as E2B's builder fails it.
    #[test]
    fn the_builder_refuses_a_plain_tar_and_an_empty_run_user() {
        let tar = {
            let mut b = tar::Builder::new(Vec::new());
            let mut header = tar::Header::new_gnu();
            header.set_size(2);
            header.set_mode(0o644);
            b.append_data(&mut header, "a.json", &b"{}"[..]).unwrap();
            b.into_inner().unwrap()
        };
        let gz = {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, &tar).unwrap();
            gz.finish().unwrap()
        };
        let uploads = HashMap::from([
            (("tpl1".to_owned(), "plain".to_owned()), tar),
            (("tpl1".to_owned(), "gz".to_owned()), gz),
        ]);
        let copy = |hash: &str| json!([{"type": "COPY", "args": ["a.json", "/a.json", "root", ""], "filesHash": hash, "force": false}]);
        let refused = builder_rules("tpl1", &copy("plain"), &uploads).unwrap_err();
        assert!(
            refused.contains("not in gzip format") && refused.contains("copy.go"),
            "{refused}"
        );
        assert_eq!(builder_rules("tpl1", &copy("gz"), &uploads), Ok(()));
        let missing = builder_rules("tpl1", &copy("other"), &uploads).unwrap_err();
        assert!(missing.contains("no files uploaded"), "{missing}");
        let run = |args: Value| json!([{"type": "RUN", "args": args, "force": false}]);
        let refused = builder_rules("tpl1", &run(json!(["echo hi", ""])), &uploads).unwrap_err();
        assert!(refused.contains("invalid username: ''"), "{refused}");
        assert_eq!(
            builder_rules("tpl1", &run(json!(["echo hi"])), &uploads),
            Ok(())
        );
        assert_eq!(
            builder_rules("tpl1", &run(json!(["id", "root"])), &uploads),
            Ok(())
        );
    }

    #[test]
    fn a_build_field_or_step_the_emulator_does_not_implement_is_refused_by_name() {
        let ok = json!({"fromImage": "a", "force": false, "steps": [
            {"type": "RUN", "args": ["x"], "force": false}]});
        assert!(implemented(&ok).is_ok());
        for (body, named) in [
            (
                json!({"fromImage": "a", "fromTemplate": "t"}),
                "`fromTemplate`",
            ),
            (
                json!({"fromImage": "a", "steps": [{"type": "RUN", "args": ["x"], "user": "u"}]}),
                "`user` (step 0)",
            ),
            (
                json!({"fromImage": "a", "steps": [{"type": "ARG", "args": ["x"]}]}),
                "`ARG` (step 0)",
            ),
        ] {
            let refused = implemented(&body).expect_err("refused");
            let text = String::from_utf8_lossy(&refused.body);
            assert_eq!(refused.status, 501, "{text}");
            assert!(text.contains(named), "{text}");
        }
    }

    #[test]
    fn the_start_command_decides_what_port_49999_serves() {
        let reference: Value = serde_json::from_str(include_str!(
            "../../fixtures/environments/reference/environment.json"
        ))
        .expect("the reference environment is JSON");
        let command = reference["start"]["command"].as_str();
        assert_eq!(
            CodeChannel::of(command),
            CodeChannel::Jupyter { open: true }
        );
        let with_token = "jupyter server --ServerApp.port=49999 --ServerApp.ip=0.0.0.0";
        assert_eq!(
            CodeChannel::of(Some(with_token)),
            CodeChannel::Jupyter { open: false }
        );
        let elsewhere = "jupyter server --ServerApp.port=8888 --IdentityProvider.token=";
        assert_eq!(CodeChannel::of(Some(elsewhere)), CodeChannel::Closed);
        assert_eq!(
            CodeChannel::of(Some("/root/.jupyter/start-up.sh")),
            CodeChannel::Interpreter
        );
        assert_eq!(CodeChannel::of(Some("sleep infinity")), CodeChannel::Closed);
        assert_eq!(CodeChannel::of(None), CodeChannel::Closed);
    }

    fn template(id: &str, build: &str, name: &str, tags: &[&str]) -> Template {
        Template {
            id: id.into(),
            build: build.into(),
            name: name.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            logs: Arc::default(),
            outcome: Arc::default(),
            start_cmd: None,
            limits: Default::default(),
        }
    }

    #[test]
    fn a_create_field_the_emulator_does_not_implement_is_refused_by_name() {
        let refused = |body: Value| {
            create_refusal(&body).map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))
        };
        let ok = json!({"templateID": "t", "timeout": 900, "secure": true, "metadata": {},
                        "envVars": {"LANG": "C.UTF-8"}, "network": {"allowPublicTraffic": false},
                        "autoPause": false, "mcp": null});
        assert_eq!(refused(ok), None);
        for (body, named) in [
            (
                json!({"templateID": "t", "volumeMounts": []}),
                "`volumeMounts`",
            ),
            (
                json!({"templateID": "t", "network": {"allowOut": ["1.1.1.1"]}}),
                "`network.allowOut`",
            ),
            (
                json!({"templateID": "t", "autoPause": true}),
                "`autoPause` other than `false`",
            ),
            (
                json!({"templateID": "t", "secure": false}),
                "`secure` other than `true`",
            ),
        ] {
            let (status, said) = refused(body).expect("refused");
            assert_eq!(status, 501);
            assert!(said.contains(named), "{said}");
        }
    }

    #[test]
    fn templates_resolve_by_name_tag_id_and_build_as_e2b_does() {
        let templates = [
            template("tpl1", "b-old", "ref", &["default"]),
            template("tpl2", "b-new", "ref", &["default", "v2"]),
            template("tpl3", "b-other", "other", &["stable"]),
        ];
        let found = |s: &str| resolve(&templates, s).map(|t| t.build.as_str());
        assert_eq!(
            found("ref"),
            Some("b-new"),
            "a name: its newest default build"
        );
        assert_eq!(found("ref:default"), Some("b-new"));
        assert_eq!(found("ref:v2"), Some("b-new"));
        assert_eq!(found("tpl1"), Some("b-old"), "a bare id");
        assert_eq!(
            found("tpl1:b-old"),
            Some("b-old"),
            "id:build, the exact build"
        );
        assert_eq!(found("other:stable"), Some("b-other"));
        assert_eq!(found("other"), None, "no default tag");
        assert_eq!(found("ref:v3"), None, "no such tag");
        assert_eq!(found("tpl1:b-new"), None, "a build of another template");
        assert_eq!(found("ref:b-new"), None, "a build id is no tag of a name");
        assert_eq!(found(""), None);
    }
}
