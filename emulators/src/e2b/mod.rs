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
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_providers::api::cassette::{CONNECT_END_STREAM, decode_connect, encode_connect};
use sandbox_providers::{
    Artifact, BuildRequest, CodeOutput, CommandOutput, LogFn, Provider, RunLabels, SandboxId,
    SandboxState, Secret,
};
use serde_json::{Value, json};

use sandbox_providers::docker::DockerProvider;

use crate::emulator::Emulator as _;
use crate::emulator::{ClientEnv, Reach};
use crate::error::EmulateError;
use crate::http::{Answer, HttpRequest, lock, set_field_outside};
use crate::jupyter::serve_kernel_socket;
use crate::site::Site;

mod builds;
mod envd;
mod sandboxes;
pub mod template;
#[cfg(test)]
mod tests;

use builds::resolve;
use sandboxes::{unimplemented_field, unknown_user};

/// The domain the e2b emulator serves when none is given.
pub const DEFAULT_DOMAIN: &str = "e2b.test";

/// The e2b-dev/infra commit whose template builder and envd the emulator's build and
/// process rules follow.
pub const INFRA_COMMIT: &str = "54693ff353d26c5fe1951db5467e751f3e2f984e";

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
    /// The start command a seeded template gets instead of its environment's (as
    /// `E2B_START_CMD` does for a build): what port 49999 serves.
    pub start_cmd: Option<String>,
}

// Fake: the emulator accepts any non-empty key; this one grants nothing anywhere.
const FAKE_KEY: &str = "e2b_sm_fake_emulator_key_0000";

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
    world: Mutex<World>,
    /// Forwards to the docker sandboxes' Jupyter Servers.
    http: reqwest::Client,
    /// [`Options::run_id`].
    run_id: Option<String>,
    /// [`Options::kill_after`].
    kill_after: Option<Duration>,
    /// [`Options::start_cmd`].
    start_cmd: Option<String>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Emulator").field(&self.inner.site).finish()
    }
}

impl crate::emulator::Emulator for Emulator {
    fn site(&self) -> &Site {
        &self.inner.site
    }

    fn client_env(&self, reach: Reach) -> ClientEnv {
        let (url, domain) = match reach {
            Reach::WithPort => (self.api_url_with_port(), self.domain_with_port()),
            Reach::Pinned => (
                format!("https://api.{}", self.domain()),
                self.domain().to_owned(),
            ),
        };
        vec![
            ("E2B_API_KEY", FAKE_KEY.to_owned()),
            ("E2B_API_URL", url),
            ("E2B_DOMAIN", domain),
            self.resolve(reach),
        ]
    }

    /// Builds `environment` into a template, as the project's e2b client builds one
    /// against the emulator, its start command [`Options::start_cmd`] when given; answers
    /// its name (`E2B_TEMPLATE`) and exact build (`E2B_TEMPLATE_BUILD`,
    /// `<templateID>:<buildID>`). Its name is unique to this emulator.
    async fn seed(&self, environment: &Path, log: &LogFn) -> Result<ClientEnv, EmulateError> {
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
                start_cmd: self.inner.start_cmd.clone(),
                ..Default::default()
            },
            &self.network(),
        )
        .map_err(|e| EmulateError::Backend(format!("an e2b client for the emulator: {e}")))?;
        let labels = self.labels(environment);
        let artifact =
            crate::backend::seed_build(&client, environment, labels.clone(), log).await?;
        Ok(vec![
            (
                "E2B_TEMPLATE",
                sandbox_providers::e2b::template_name(&labels),
            ),
            ("E2B_TEMPLATE_BUILD", artifact.id),
        ])
    }
}

impl Emulator {
    /// Serves E2B's API over HTTPS on 127.0.0.1 with `docker` behind it.
    pub async fn start(
        docker: Arc<DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        let (port, domain) = (options.port, &options.domain);
        let listening = crate::site::Listening::on(port, domain, None, "e2b", docker).await?;
        let emulator = Self {
            inner: Arc::new(Inner {
                site: listening.site(),
                world: Mutex::default(),
                http: crate::site::http_client()?,
                run_id: options.run_id,
                kill_after: options.kill_after,
                start_cmd: options.start_cmd,
            }),
        };
        let sockets = |e, stream| serve_kernel_socket(e, stream, Self::admit_socket);
        listening.serve(emulator.clone(), sockets, Self::serve);
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

    /// The labels a seed of `environment` carries.
    fn labels(&self, environment: &std::path::Path) -> RunLabels {
        RunLabels {
            run_id: self
                .inner
                .run_id
                .clone()
                .unwrap_or_else(|| format!("emulate-{}", self.port())),
            variant: "e2b".into(),
            scenario: crate::backend::seed_scenario(environment),
        }
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.inner.world)
    }

    /// Routes by the host the client called: `api.<domain>` or `<port>-<id>.<domain>`.
    async fn serve(self, request: HttpRequest) -> Answer {
        let host = crate::http::host_name(&request.host);
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
