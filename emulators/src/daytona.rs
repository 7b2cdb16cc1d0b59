//! An emulator of Daytona's control plane and its per-sandbox toolbox, written from the
//! published OpenAPI documents (`daytona/openapi.yaml@1.0`, `toolbox-swagger.yaml`),
//! served over HTTPS on 127.0.0.1 and backed by the local docker variant, so every answer
//! about a sandbox is real: a snapshot build is a docker build of the Dockerfile it is
//! sent, a sandbox is a container, `process/execute` is `sh -c` in it, an interpreter
//! context is a Jupyter kernel of its own in it (the docker variant's `run_code_in`;
//! deleting a context drops it, so a new one starts empty), the execute WebSocket runs
//! code in that kernel and streams its output as the toolbox's frames, and stop/start
//! stop and start the container.
//!
//! It answers through Daytona's live URL forms only: the control plane at
//! `https://app.<domain>/api`, the toolbox at the `toolboxProxyUrl` it hands out,
//! `https://proxy.app.<domain>/toolbox` (the client calls `<toolboxProxyUrl>/<id>/...`).
//! A client that called with a port gets URLs with that port; one that pins `<domain>`
//! to 127.0.0.1 at the emulator's port (see [`sandbox_providers::api::network`]) gets
//! URLs with none, as live ones.
//!
//! A base named in a registry (`<registry>/<repository>@sha256:<digest>`) is pulled as
//! Daytona's builder would, with the docker-registry entry for that registry: the
//! emulator serves the [`StandInBase`]s it is given from local images to whoever holds
//! their credential, and fails the build, naming the registry, otherwise.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::StopContainerOptionsBuilder;
use futures_util::{SinkExt as _, StreamExt as _};
use sandbox_providers::api::Volatiles;
use sandbox_providers::api::ws::{Rewound, accept, close_with, split_upgrades};
use sandbox_providers::{Artifact, BuildRequest, Provider, Resource, RunLabels, SandboxId, Secret};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::Emulator as _;
use super::{Answer, EmulateError, Front, HttpRequest, Site, lock, set_field_outside};

/// The domain the daytona emulator serves when none is given.
pub const DEFAULT_DOMAIN: &str = "daytona.test";
/// The control plane's host label: `app.<domain>`, its API under `/api`.
const API_HOST: &str = "app";
/// The toolbox proxy's host label: `proxy.app.<domain>`, the toolbox under `/toolbox`.
const PROXY_HOST: &str = "proxy.app";
/// The organization every emulated record belongs to; made up.
const ORGANIZATION: &str = "0b5e1c4e-0000-4000-8000-00000000000a";
/// Every emulated timestamp.
const STAMP: &str = "2026-01-01T00:00:00.000Z";

/// A private base the emulator's builder pulls as if from its registry: `reference`
/// (`<registry>/<repository>@sha256:<digest>`) is served from the local image `local` to
/// whoever holds `username` and `password` in a docker-registry entry for the registry.
#[derive(Debug, Clone)]
pub struct StandInBase {
    /// The reference a Dockerfile names.
    pub reference: String,
    /// The local image standing in for it.
    pub local: String,
    /// The registry user the entry must hold.
    pub username: String,
    /// The password or token the entry must hold.
    pub password: Secret,
}

/// Where and as what the emulator serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1; 0 takes a free one.
    pub port: u16,
    /// The domain: the control plane is `app.<domain>`.
    pub domain: String,
    /// Labels every docker build and container behind it carries. By default builds carry
    /// a run id of the emulator's own (`emulator-<pid>-<random>`), and a container the run id and scenario of the
    /// sandbox's labels (when they hold them); [`Emulator::cleanup`] removes both.
    pub labels: Option<RunLabels>,
    /// When recording: where the run-varying values the emulator sees (restart markers in
    /// code) are registered, so the cassette holds placeholders.
    pub volatiles: Option<Arc<Volatiles>>,
    /// Private bases it serves.
    pub bases: Vec<StandInBase>,
    /// How long a new snapshot waits for a runner, `pending`, before its build starts:
    /// a queue on the service.
    pub queued: Duration,
    /// The least time a snapshot stays `building`: a build the engine serves from its cache
    /// ends in under a second, before a client that polls once a second (Daytona's SDK)
    /// has seen the state it streams the build log in.
    pub building_at_least: Duration,
    /// Fault: every sandbox is destroyed this long after its create, whatever its
    /// auto-stop asks, as a live provider's sandbox may die early.
    pub kill_after: Option<Duration>,
}

impl Options {
    /// On `port` under `domain`, with no labels, volatiles, private bases or queue.
    pub fn new(port: u16, domain: impl Into<String>) -> Self {
        Self {
            port,
            domain: domain.into(),
            labels: None,
            volatiles: None,
            bases: Vec::new(),
            queued: Duration::ZERO,
            building_at_least: Duration::ZERO,
            kill_after: None,
        }
    }
}

/// Minutes of no activity after which a sandbox created without `autoStopInterval` is
/// stopped (Daytona's default for `CreateSandbox.autoStopInterval`).
const DEFAULT_AUTO_STOP_MINUTES: u64 = 15;
/// How often the auto-stop check runs: each minute, as Daytona's API runs it (`@Cron
/// EVERY_MINUTE`, `autostopCheck`, apps/api/src/sandbox/managers/sandbox.manager.ts at
/// daytonaio/daytona 1b9386bcc5456f5c86031b7e3f33c979ffd45ba3).
const AUTO_STOP_TICK: Duration = Duration::from_secs(60);

/// How long the service holds a build-logs URL request for a `pending` snapshot, waiting
/// for a runner, before it answers 404 (`snapshot.controller.ts`, see [`build_logs_url`]).
const RUNNER_WAIT: Duration = Duration::from_secs(30);

/// A snapshot [`Emulator::seed`] built.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// Its name, what an SDK user passes to create a sandbox from it.
    pub name: String,
    /// Its id, what the project's client launches.
    pub id: String,
}

/// An emulated snapshot.
struct Snapshot {
    name: String,
    /// Its size as asked (`cpu`, `memory` in GiB, `disk` in GiB): the first two are its
    /// sandboxes' container limits; the disk is not enforced (see the module's docs).
    size: Size,
    /// The region asked for (`regionId`), or the organization's default.
    region: String,
    state: String,
    image: Option<String>,
    logs: Vec<String>,
    error: Option<String>,
}

/// An emulated sandbox and the container behind it.
struct Sandbox {
    snapshot: String,
    /// Its snapshot's size.
    size: Size,
    /// The user its commands run as (`user`), or the image's.
    user: Option<String>,
    /// The region asked for (`target`), or the organization's default.
    target: String,
    labels: BTreeMap<String, String>,
    state: String,
    /// Why it is in state `error`.
    error_reason: Option<String>,
    container: Option<String>,
    /// Minutes of no activity after which it is stopped (`autoStopInterval`); 0 never.
    auto_stop_minutes: u64,
    /// Its create, or its last toolbox call.
    last_activity: std::time::Instant,
}

/// The sandboxes the auto-stop check stops at `now`, as Daytona's `autostopCheck`
/// selects them (`sandbox.manager.ts` at 1b9386bc): started, with a non-zero
/// `autoStopInterval`, and no activity for longer than that many minutes.
fn due_for_auto_stop(
    sandboxes: &BTreeMap<String, Sandbox>,
    now: std::time::Instant,
) -> Vec<String> {
    sandboxes
        .iter()
        .filter(|(_, s)| {
            s.state == "started"
                && s.auto_stop_minutes != 0
                && now.saturating_duration_since(s.last_activity)
                    > Duration::from_secs(s.auto_stop_minutes * 60)
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// A snapshot's size as its create asked it (Daytona's defaults where it did not).
#[derive(Debug, Clone, Copy)]
struct Size {
    cpu: u32,
    memory_gib: u32,
    disk_gib: u32,
}

impl Size {
    /// The container limits of the CPUs and memory.
    fn limits(self) -> sandbox_providers::docker::Limits {
        sandbox_providers::docker::Limits {
            cpus: Some(self.cpu),
            memory_mb: Some(self.memory_gib * 1024),
        }
    }
}

#[derive(Default)]
struct State {
    next: u64,
    snapshots: BTreeMap<String, Snapshot>,
    sandboxes: BTreeMap<String, Sandbox>,
    registries: BTreeMap<String, Value>,
    /// The password of each registry entry, by id; never in an answer.
    passwords: BTreeMap<String, String>,
    /// Interpreter contexts by id: the sandbox each belongs to.
    contexts: BTreeMap<String, String>,
    /// The turn of each interpreter context that ran code, by sandbox and context (none:
    /// the default one): held while its code runs.
    turns: BTreeMap<(String, Option<String>), Arc<tokio::sync::Mutex<()>>>,
}

impl State {
    fn id(&mut self) -> String {
        self.next += 1;
        format!("5d1a7000-0000-4000-8000-{:012x}", self.next)
    }
}

/// The daytona emulator. Dropping the last clone stops serving; [`Emulator::cleanup`]
/// removes what its docker builds and containers left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    site: Arc<Site>,
    docker: Arc<sandbox_providers::docker::DockerProvider>,
    engine: Docker,
    labels: RunLabels,
    /// Whether `labels` go on everything (given by the options).
    fixed_labels: bool,
    /// The labels of every container started, for cleanup.
    launched: Mutex<Vec<RunLabels>>,
    volatiles: Option<Arc<Volatiles>>,
    bases: Vec<StandInBase>,
    queued: Duration,
    building_at_least: Duration,
    kill_after: Option<Duration>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Emulator").field(&self.inner.site).finish()
    }
}

/// Daytona's error shape.
/// `{exitCode, result}` of a finished command, as the toolbox answers it.
fn ran(out: &sandbox_providers::CommandOutput) -> Answer {
    Answer::json(
        200,
        json!({
            "exitCode": out.exit_code,
            "result": format!("{}{}", out.stdout, out.stderr),
        }),
    )
}

/// The 501 that names a request field the emulator does not implement.
fn unimplemented_field(request: &str, field: &str) -> Answer {
    error(
        501,
        &format!(
            "the daytona emulator does not implement the {request} field `{field}`; it refuses it rather than drop it"
        ),
    )
}

fn error(status: u16, message: &str) -> Answer {
    Answer::json(
        status,
        json!({"statusCode": status, "message": message, "error": message}),
    )
}

fn not_found(what: &str) -> Answer {
    error(404, &format!("{what} not found"))
}

/// The host the client called, lower case, and the port it named (`:8443`, or empty).
fn split_host(host: &str) -> (String, String) {
    match host
        .rsplit_once(':')
        .filter(|(_, port)| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
    {
        Some((name, port)) => (name.to_ascii_lowercase(), format!(":{port}")),
        None => (host.to_ascii_lowercase(), String::new()),
    }
}

/// The query's pairs, decoded.
fn query_pairs(query: &str) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("https://emulator.invalid/?{query}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

impl super::Emulator for Emulator {
    fn site(&self) -> &Site {
        &self.inner.site
    }
}

impl Emulator {
    /// Serves Daytona's API over HTTPS on 127.0.0.1 with `docker` behind it.
    pub async fn start(
        docker: Arc<sandbox_providers::docker::DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        let domain = Site::normalise(&options.domain);
        let engine = Docker::connect_with_local_defaults()
            .map_err(|e| EmulateError::Backend(format!("cannot reach the Docker engine: {e}")))?;
        let (plain_listener, plain) = super::bind_loopback(0).await?;
        let (split_listener, split) = super::bind_loopback(0).await?;
        // The certificate's names are `app.<domain>` and every name under it, which holds
        // the toolbox proxy `proxy.app.<domain>`.
        let certified = format!("{API_HOST}.{domain}");
        let mut front = Front::with_upstream(options.port, split, &certified).await?;
        let fixed_labels = options.labels.is_some();
        let labels = options.labels.unwrap_or_else(|| RunLabels {
            run_id: format!(
                "emulator-{}-{:06x}",
                std::process::id(),
                rand::random::<u32>() >> 8
            ),
            variant: "daytona-emulator".into(),
            scenario: "emulate".into(),
        });
        let emulator = Self {
            inner: Arc::new(Inner {
                site: Arc::new(Site::new(domain, &front, "daytona")),
                docker,
                engine,
                labels,
                fixed_labels,
                launched: Mutex::default(),
                volatiles: options.volatiles,
                bases: options.bases,
                queued: options.queued,
                building_at_least: options.building_at_least,
                kill_after: options.kill_after,
                state: Mutex::default(),
            }),
        };
        emulator.check_auto_stop_each_minute();
        let sockets = emulator.clone();
        front.serve(split_upgrades(split_listener, plain, move |stream| {
            sockets.clone().execute(stream)
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

    /// Runs the auto-stop check every [`AUTO_STOP_TICK`] while the emulator is held.
    fn check_auto_stop_each_minute(&self) {
        let held = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(AUTO_STOP_TICK).await;
                let Some(inner) = held.upgrade() else { return };
                let this = Self { inner };
                let due = due_for_auto_stop(&this.state().sandboxes, std::time::Instant::now());
                for id in due {
                    this.stop_or_start(&id, "stop", "");
                }
            }
        });
    }

    /// Destroys sandbox `id` and its container after `after`, as the `kill_after` fault.
    fn kill_after(&self, id: String, after: Duration) {
        let held = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let Some(inner) = held.upgrade() else { return };
            let this = Self { inner };
            let removed = this.state().sandboxes.remove(&id);
            if let Some(container) = removed.and_then(|s| s.container)
                && let Err(e) = this.remove("container", container).await
            {
                eprintln!("emulate daytona: killing sandbox {id} early: {e}");
            }
        });
    }

    /// Records a toolbox call to sandbox `id` as its last activity.
    fn touch(&self, id: &str) {
        if let Some(sandbox) = self.state().sandboxes.get_mut(id) {
            sandbox.last_activity = std::time::Instant::now();
        }
    }

    /// `DAYTONA_API_URL` for a client that pins the domain: `https://app.<domain>/api`,
    /// the live form with no port.
    pub fn api_url(&self) -> String {
        format!("https://{API_HOST}.{}/api", self.domain())
    }

    /// `DAYTONA_API_URL` for a client that resolves `<domain>` but keeps the port in its
    /// URLs: `https://app.<domain>:<port>/api`.
    pub fn api_url_with_port(&self) -> String {
        format!("https://{API_HOST}.{}:{}/api", self.domain(), self.port())
    }

    /// Builds the environment folder `environment` into a snapshot, as the project's
    /// daytona client builds one against the emulator, so that a client can create
    /// sandboxes from it (by name or id) without building first. `log` gets the build's
    /// lines; the snapshot's image carries the emulator's labels, so [`Self::cleanup`]
    /// removes it.
    pub async fn seed(
        &self,
        environment: &std::path::Path,
        log: &sandbox_providers::LogFn,
    ) -> Result<Seeded, EmulateError> {
        let client = sandbox_providers::daytona::DaytonaProvider::with_network(
            sandbox_providers::api::ApiSettings {
                endpoints: sandbox_providers::api::Endpoints {
                    api_base: self.api_url_with_port(),
                    sandbox_domain: String::new(),
                },
                mode: sandbox_providers::api::Mode::Live,
                // Fake: the emulator checks only that a key is sent.
                credentials: vec![Secret::new("DAYTONA_API_KEY", "fake-daytona-seed-key-0000")],
                volatiles: Arc::default(),
                call_timeout: std::time::Duration::from_secs(600),
            },
            None,
            None,
            &self.network(),
        )
        .map_err(|e| EmulateError::Backend(format!("a daytona client for the emulator: {e}")))?;
        let labels = RunLabels {
            scenario: super::seed_scenario(environment),
            ..self.inner.labels.clone()
        };
        let artifact = super::seed_build(&client, environment, labels, log).await?;
        let name = self
            .state()
            .snapshots
            .get(&artifact.id)
            .map(|s| s.name.clone())
            .ok_or_else(|| {
                EmulateError::Backend(format!("snapshot {} vanished after its build", artifact.id))
            })?;
        Ok(Seeded {
            name,
            id: artifact.id,
        })
    }

    /// Whether no docker-registry entry is left.
    pub fn registry_entries_left(&self) -> usize {
        lock(&self.inner.state).registries.len()
    }

    /// Removes, by their labels, whatever the emulator's docker builds and containers left.
    pub async fn cleanup(&self) {
        let mut labels = lock(&self.inner.launched).clone();
        labels.push(self.inner.labels.clone());
        super::remove_labelled(self.inner.docker.as_ref(), labels).await;
    }

    /// The labels of the container behind a sandbox labelled `requested`.
    fn container_labels(&self, requested: &BTreeMap<String, String>) -> RunLabels {
        let run = requested.get(sandbox_providers::RUN_LABEL);
        let labels = match run {
            Some(run) if !self.inner.fixed_labels => RunLabels {
                run_id: run.clone(),
                variant: "daytona-emulator".into(),
                scenario: requested
                    .get(sandbox_providers::SCENARIO_LABEL)
                    .cloned()
                    .unwrap_or_default(),
            },
            _ => self.inner.labels.clone(),
        };
        lock(&self.inner.launched).push(labels.clone());
        labels
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Routes by the host the client called: the control plane at `app.<domain>` under
    /// `/api`, the toolbox at `proxy.app.<domain>` under `/toolbox`. A client whose
    /// resolver cannot be pinned (the SDKs, on the system resolver) calls `localhost` (or
    /// 127.0.0.1) instead, which serves both under those paths and hands out a
    /// `toolboxProxyUrl` on the same host.
    async fn serve(self, request: HttpRequest) -> Answer {
        let (host, port) = split_host(&request.host);
        let loopback = matches!(host.as_str(), "localhost" | "127.0.0.1");
        let label = if loopback {
            None
        } else {
            self.inner.site.label(&host)
        };
        let bearer = request
            .headers
            .get("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| !token.trim().is_empty());
        let origin = |label: &str| match loopback {
            true => format!("https://{host}{port}"),
            false => format!("https://{label}.{}{port}", self.domain()),
        };
        let path = request.path.clone();
        let (api, toolbox) = match (loopback, label) {
            (true, _) => (true, true),
            (false, Some(API_HOST)) => (true, false),
            (false, Some(PROXY_HOST)) => (false, true),
            _ => (false, false),
        };
        match path.split_once('/').map(|(_, rest)| rest) {
            Some(rest) if api && (rest == "api" || rest.starts_with("api/")) => {
                if !bearer {
                    return error(401, "Unauthorized: a bearer token is required");
                }
                let parts: Vec<&str> = rest.split('/').skip(1).collect();
                self.control(&request, &parts, &origin(API_HOST), &origin(PROXY_HOST))
                    .await
            }
            Some(rest) if toolbox && rest.starts_with("toolbox/") => {
                if !bearer {
                    return error(401, "Unauthorized: a bearer token is required");
                }
                let parts: Vec<&str> = rest.split('/').skip(1).collect();
                let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                self.toolbox(&request.method, &parts, &body).await
            }
            _ => error(
                404,
                &format!(
                    "the emulator has no {} {}{} (the API is https://{API_HOST}.{}/api)",
                    request.method,
                    request.host,
                    request.path,
                    self.domain()
                ),
            ),
        }
    }

    fn snapshot_dto(id: &str, s: &Snapshot) -> Value {
        json!({
            "id": id, "organizationId": ORGANIZATION, "general": false, "name": s.name,
            "state": s.state, "size": null, "entrypoint": null, "cpu": s.size.cpu, "gpu": 0,
            "mem": s.size.memory_gib, "disk": s.size.disk_gib, "errorReason": s.error, "createdAt": STAMP, "updatedAt": STAMP,
            "lastUsedAt": null, "regionIds": [s.region],
        })
    }

    fn sandbox_dto(id: &str, s: &Sandbox, proxy: &str) -> Value {
        let mut dto = json!({
            "id": id, "organizationId": ORGANIZATION, "name": id, "snapshot": s.snapshot,
            "user": s.user.as_deref().unwrap_or("datalayer"), "env": {}, "labels": s.labels,
            "public": false, "networkBlockAll": false, "kvm": false, "target": s.target,
            "cpu": s.size.cpu, "gpu": 0, "memory": s.size.memory_gib, "disk": s.size.disk_gib,
            "state": s.state, "createdAt": STAMP, "updatedAt": STAMP,
            "toolboxProxyUrl": format!("{proxy}/toolbox"),
        });
        if let Some(reason) = &s.error_reason {
            dto["errorReason"] = json!(reason);
        }
        dto
    }

    /// The control plane: `parts` is the path under `/api`.
    async fn control(&self, req: &HttpRequest, parts: &[&str], api: &str, proxy: &str) -> Answer {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let query = query_pairs(&req.query);
        match (req.method.as_str(), parts) {
            ("POST", ["docker-registry"]) => {
                let mut state = self.state();
                let id = state.id();
                let entry = json!({
                    "id": id, "name": body["name"], "url": body["url"],
                    "username": body["username"], "project": "",
                    "registryType": "organization", "createdAt": STAMP, "updatedAt": STAMP,
                });
                state.registries.insert(id.clone(), entry.clone());
                let password = body["password"].as_str().unwrap_or_default().to_owned();
                state.passwords.insert(id, password);
                Answer::json(201, entry)
            }
            ("GET", ["docker-registry"]) => {
                let entries: Vec<Value> = self.state().registries.values().cloned().collect();
                Answer::json(200, json!(entries))
            }
            ("DELETE", ["docker-registry", id]) => {
                let mut state = self.state();
                state.passwords.remove(*id);
                match state.registries.remove(*id) {
                    Some(_) => Answer::empty(204),
                    None => not_found("docker registry"),
                }
            }
            ("POST", ["snapshots"]) => self.create_snapshot(&body),
            ("GET", ["snapshots"]) => {
                let name = query.get("name").cloned().unwrap_or_default();
                let state = self.state();
                let items: Vec<Value> = state
                    .snapshots
                    .iter()
                    .filter(|(_, s)| s.name.contains(&name))
                    .map(|(id, s)| Self::snapshot_dto(id, s))
                    .collect();
                Answer::json(
                    200,
                    json!({"items": items, "total": items.len(), "page": 1, "totalPages": 1}),
                )
            }
            ("GET", ["snapshots", id]) => match self.find_snapshot(id) {
                Some(dto) => Answer::json(200, dto),
                None => not_found("snapshot"),
            },
            ("GET", ["snapshots", id, "build-logs-url"]) => self.build_logs_url(id, api).await,
            ("GET", ["snapshots", id, "build-logs"]) => match self.state().snapshots.get(*id) {
                Some(s) => Answer {
                    status: 200,
                    content_type: "text/plain",
                    body: s
                        .logs
                        .iter()
                        .map(|l| format!("{l}\n"))
                        .collect::<String>()
                        .into_bytes(),
                },
                None => not_found("snapshot"),
            },
            ("DELETE", ["snapshots", id]) => {
                let removed = self.state().snapshots.remove(*id);
                match removed {
                    Some(s) => {
                        if let Some(image) = s.image.clone()
                            && let Err(e) = self.remove("image", image).await
                        {
                            // Not gone: it stays listed, and the answer says why.
                            self.state().snapshots.insert((*id).to_owned(), s);
                            return error(
                                500,
                                &format!("the snapshot's image could not be removed: {e}"),
                            );
                        }
                        Answer::empty(200)
                    }
                    None => not_found("snapshot"),
                }
            }
            ("POST", ["sandbox"]) => self.create_sandbox(&body, proxy),
            ("GET", ["sandbox"]) => {
                let wanted: BTreeMap<String, String> = query
                    .get("labels")
                    .and_then(|l| serde_json::from_str(l).ok())
                    .unwrap_or_default();
                let state = self.state();
                let items: Vec<Value> = state
                    .sandboxes
                    .iter()
                    .filter(|(_, s)| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
                    .map(|(id, s)| Self::sandbox_dto(id, s, proxy))
                    .collect();
                Answer::json(200, json!({"items": items, "nextCursor": null}))
            }
            ("GET", ["sandbox", id]) => self.sandbox(id, proxy).await,
            ("GET", ["sandbox", id, "toolbox-proxy-url"]) => {
                match self.state().sandboxes.contains_key(*id) {
                    true => Answer::json(200, json!({"url": format!("{proxy}/toolbox")})),
                    false => not_found("sandbox"),
                }
            }
            ("POST", ["sandbox", id, action @ ("stop" | "start")]) => {
                self.stop_or_start(id, action, proxy)
            }
            ("DELETE", ["sandbox", id]) => {
                let removed = self.state().sandboxes.remove(*id);
                match removed {
                    Some(mut s) => {
                        if let Some(container) = s.container.clone()
                            && let Err(e) = self.remove("container", container).await
                        {
                            // Not gone: it stays listed, and the answer says why.
                            self.state().sandboxes.insert((*id).to_owned(), s);
                            return error(
                                500,
                                &format!("the sandbox's container could not be removed: {e}"),
                            );
                        }
                        s.container = None;
                        s.state = "destroying".into();
                        Answer::json(200, Self::sandbox_dto(id, &s, proxy))
                    }
                    None => not_found("sandbox"),
                }
            }
            _ => error(
                501,
                &format!(
                    "the daytona emulator does not implement {} {}",
                    req.method, req.path
                ),
            ),
        }
    }

    /// Snapshot `wanted`'s record, by id or by name as Daytona takes either.
    fn find_snapshot(&self, wanted: &str) -> Option<Value> {
        let state = self.state();
        let (id, s) = state
            .snapshots
            .iter()
            .find(|(id, s)| id.as_str() == wanted || s.name == wanted)?;
        Some(Self::snapshot_dto(id, s))
    }

    /// The toolbox: `parts` is the path under `/toolbox`, the sandbox id first.
    async fn toolbox(&self, method: &str, parts: &[&str], body: &Value) -> Answer {
        if let Some(id) = parts.first() {
            self.touch(id);
        }
        match (method, parts) {
            ("POST", [id, "process", "execute"]) => self.execute_command(id, body).await,
            ("POST", [id, "process", "code-run"]) => self.code_run(id, body).await,
            ("POST", [id, "process", "interpreter", "context"]) => {
                let mut state = self.state();
                if !state.sandboxes.contains_key(*id) {
                    return not_found("sandbox");
                }
                let context = state.id();
                state.contexts.insert(context.clone(), (*id).to_owned());
                Answer::json(200, context_dto(&context, body))
            }
            ("GET", [id, "process", "interpreter", "context"]) => {
                let state = self.state();
                let contexts: Vec<Value> = state
                    .contexts
                    .iter()
                    .filter(|(_, sandbox)| sandbox.as_str() == *id)
                    .map(|(context, _)| context_dto(context, &Value::Null))
                    .collect();
                Answer::json(200, json!({ "contexts": contexts }))
            }
            ("DELETE", [_, "process", "interpreter", "context", context]) => {
                // The kernel behind it is never reached again: a new context is a new one.
                let mut state = self.state();
                match state.contexts.remove(*context) {
                    Some(sandbox) => {
                        state.turns.remove(&(sandbox, Some((*context).to_owned())));
                        Answer::json(200, json!({ "message": "context deleted" }))
                    }
                    None => not_found("context"),
                }
            }
            _ => error(
                501,
                &format!(
                    "the daytona emulator's toolbox does not implement {method} {}",
                    parts.join("/")
                ),
            ),
        }
    }

    /// The build-logs URL of snapshot `id`, as Daytona's API gives it: while the snapshot
    /// is `pending` (no runner holds its build) the request is held, the snapshot read
    /// again every second, and answered 404 after [`RUNNER_WAIT`] without a runner
    /// (daytonaio/daytona v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/api/src/sandbox/controllers/snapshot.controller.ts`).
    async fn build_logs_url(&self, id: &str, api: &str) -> Answer {
        let started = std::time::Instant::now();
        loop {
            let state = self.state().snapshots.get(id).map(|s| s.state.clone());
            match state {
                None => return not_found("snapshot"),
                Some(state) if state != "pending" => {
                    return Answer::json(
                        200,
                        json!({"url": format!("{api}/api/snapshots/{id}/build-logs")}),
                    );
                }
                Some(_) if started.elapsed() >= RUNNER_WAIT => {
                    return error(
                        404,
                        &format!("Timeout waiting for build runner assignment for snapshot {id}"),
                    );
                }
                Some(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }

    fn create_snapshot(&self, body: &Value) -> Answer {
        let implemented = ["name", "buildInfo", "cpu", "memory", "disk", "regionId"];
        if let Some(field) = set_field_outside(body, &implemented)
            .or_else(|| {
                set_field_outside(&body["buildInfo"], &["dockerfileContent", "contextHashes"])
                    .map(|f| format!("buildInfo.{f}"))
            })
            .or_else(|| {
                (body["buildInfo"]["contextHashes"]
                    .as_array()
                    .is_some_and(|h| !h.is_empty()))
                .then(|| "buildInfo.contextHashes` other than `[]".to_owned())
            })
        {
            return unimplemented_field("snapshot create", &field);
        }
        // Daytona's defaults for a snapshot that names no size (CreateSnapshot, openapi.yaml).
        let size_of = |key: &str, default: u32| {
            body[key]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(default)
        };
        let size = Size {
            cpu: size_of("cpu", 1),
            memory_gib: size_of("memory", 1),
            disk_gib: size_of("disk", 3),
        };
        let dockerfile = body["buildInfo"]["dockerfileContent"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = self.state();
        let id = state.id();
        let snapshot = Snapshot {
            name: body["name"].as_str().unwrap_or_default().to_owned(),
            size,
            region: region_asked(&body["regionId"]),
            state: "pending".into(),
            image: None,
            // Said where a user reads it: the size the emulator does not enforce.
            logs: vec![format!(
                "emulate daytona: {} GiB of disk asked; the local engine limits no container's disk, so it is not enforced",
                size.disk_gib
            )],
            error: None,
        };
        let dto = Self::snapshot_dto(&id, &snapshot);
        state.snapshots.insert(id.clone(), snapshot);
        drop(state);
        let this = self.clone();
        let queued = self.inner.queued;
        tokio::spawn(async move {
            // No runner yet: the snapshot stays `pending`.
            tokio::time::sleep(queued).await;
            this.build(id, dockerfile).await
        });
        Answer::json(200, dto)
    }

    /// Sets snapshot `id` with `f`, if it still exists.
    fn set_snapshot(&self, id: &str, f: impl FnOnce(&mut Snapshot)) {
        if let Some(s) = self.state().snapshots.get_mut(id) {
            f(s);
        }
    }

    /// Builds like Daytona's builder would: pulls a registry base with its entry, writes
    /// the Dockerfile's heredocs out as context files (the docker variant's builder takes
    /// no heredocs) and builds.
    async fn build(self, id: String, dockerfile: String) {
        self.set_snapshot(&id, |s| s.state = "building".into());
        let building = tokio::time::Instant::now();
        let dockerfile = match self.pull_base(&dockerfile) {
            Ok(dockerfile) => dockerfile,
            Err(why) => {
                return self.set_snapshot(&id, |s| {
                    s.logs.push(format!("ERROR: {why}"));
                    s.error = Some(why);
                    s.state = "build_failed".into();
                });
            }
        };
        let dir =
            std::env::temp_dir().join(format!("sm-daytona-emulator-{}-{id}", std::process::id()));
        let built = match write_context(&dir, &dockerfile) {
            Ok(()) => {
                let state = self.inner.clone();
                let log_id = id.clone();
                let log = move |line: &str| {
                    if let Some(s) = lock(&state.state).snapshots.get_mut(&log_id) {
                        s.logs.push(line.to_owned());
                    }
                };
                self.inner
                    .docker
                    .build(
                        &BuildRequest {
                            environment_dir: dir.clone(),
                            base: sandbox_providers::BaseImage::local(
                                sandbox_providers::docker::base::BASE_IMAGE,
                            ),
                            registry_credential: None,
                            build_secrets: Vec::new(),
                            labels: self.inner.labels.clone(),
                        },
                        &log,
                    )
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(format!("cannot write the build context: {e}")),
        };
        let _ = std::fs::remove_dir_all(&dir);
        tokio::time::sleep_until(building + self.inner.building_at_least).await;
        match built {
            Ok(artifact) => self.set_snapshot(&id, |s| {
                s.image = Some(artifact.id);
                s.state = "active".into();
            }),
            Err(e) => self.set_snapshot(&id, |s| {
                s.error = Some(e);
                s.state = "build_failed".into();
            }),
        }
    }

    /// `dockerfile` with each base pulled from a registry replaced by the local image that
    /// stands in for it, after checking, as a registry would, the credential of the
    /// docker-registry entry for that registry; a base no entry opens fails the build with
    /// the registry named, as Daytona's builder does.
    fn pull_base(&self, dockerfile: &str) -> Result<String, String> {
        let mut out = String::with_capacity(dockerfile.len());
        for line in dockerfile.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let image = match words.as_slice() {
                [from, image, ..] if from.eq_ignore_ascii_case("FROM") => *image,
                _ => {
                    out.push_str(line);
                    out.push('\n');
                    continue;
                }
            };
            let Some((host, _)) = image
                .split_once('/')
                .filter(|(host, _)| host.contains(['.', ':']) || *host == "localhost")
            else {
                out.push_str(line);
                out.push('\n');
                continue;
            };
            let Some(base) = self.inner.bases.iter().find(|b| b.reference == image) else {
                return Err(format!(
                    "pull {image}: {host} has no such image (the emulator serves no such base)"
                ));
            };
            let state = self.state();
            let entry = state
                .registries
                .iter()
                .find(|(_, entry)| entry["url"] == host)
                .map(|(id, entry)| (id.clone(), entry["username"].clone()));
            let Some((id, username)) = entry else {
                return Err(format!(
                    "pull {image}: {host}: unauthorized: no docker-registry entry holds a credential for it"
                ));
            };
            let password = state.passwords.get(&id).cloned().unwrap_or_default();
            if username != base.username.as_str() || password != base.password.expose() {
                return Err(format!(
                    "pull {image}: {host}: unauthorized: the registry refused the credential of docker-registry entry {id}"
                ));
            }
            out.push_str(&line.replacen(image, &base.local, 1));
            out.push('\n');
        }
        Ok(out)
    }

    fn create_sandbox(&self, body: &Value, proxy: &str) -> Answer {
        let implemented = [
            "snapshot",
            "labels",
            "target",
            "user",
            "env",
            "volumes",
            "autoStopInterval",
        ];
        let empty = |key: &str| {
            body[key].is_null()
                || body[key].as_object().is_some_and(serde_json::Map::is_empty)
                || body[key].as_array().is_some_and(Vec::is_empty)
        };
        if let Some(field) = set_field_outside(body, &implemented).or_else(|| {
            ["env", "volumes"]
                .into_iter()
                .find(|k| !empty(k))
                .map(|k| format!("{k}` other than empty"))
        }) {
            return unimplemented_field("sandbox create", &field);
        }
        let auto_stop_minutes = match &body["autoStopInterval"] {
            Value::Null => DEFAULT_AUTO_STOP_MINUTES,
            given => match given.as_u64() {
                Some(minutes) => minutes,
                None => {
                    return error(
                        400,
                        &format!(
                            "autoStopInterval must be a whole number of minutes, 0 or more, not {given}"
                        ),
                    );
                }
            },
        };
        let wanted = body["snapshot"].as_str().unwrap_or_default().to_owned();
        let mut state = self.state();
        // Daytona takes a snapshot's id or its name.
        let found = state
            .snapshots
            .iter()
            .find(|(id, s)| **id == wanted || s.name == wanted)
            .and_then(|(_, s)| s.image.clone().map(|image| (image, s.size)));
        let Some((image, size)) = found else {
            return error(400, &format!("snapshot {wanted} is not active"));
        };
        let id = state.id();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(body["labels"].clone()).unwrap_or_default();
        let sandbox = Sandbox {
            snapshot: wanted,
            size,
            user: body["user"].as_str().map(str::to_owned),
            target: region_asked(&body["target"]),
            labels,
            state: "creating".into(),
            error_reason: None,
            container: None,
            auto_stop_minutes,
            last_activity: std::time::Instant::now(),
        };
        let dto = Self::sandbox_dto(&id, &sandbox, proxy);
        let container_labels = self.container_labels(&sandbox.labels);
        state.sandboxes.insert(id.clone(), sandbox);
        drop(state);
        if let Some(after) = self.inner.kill_after {
            self.kill_after(id.clone(), after);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let launched = this
                .inner
                .docker
                .launch_limited(
                    &Artifact {
                        id: image,
                        kind: "image-id".into(),
                    },
                    &container_labels,
                    size.limits(),
                )
                .await;
            let orphan = {
                let mut state = this.state();
                match (state.sandboxes.get_mut(&id), launched) {
                    (Some(s), Ok((container, _))) => {
                        s.container = Some(container.0);
                        s.state = "started".into();
                        None
                    }
                    (Some(s), Err(_)) => {
                        s.state = "error".into();
                        None
                    }
                    // Deleted while it started: its container goes too.
                    (None, Ok((container, _))) => Some(container.0),
                    (None, Err(_)) => None,
                }
            };
            if let Some(container) = orphan
                && let Err(e) = this.remove("container", container).await
            {
                eprintln!("emulate daytona: a sandbox deleted while it started: {e}");
            }
        });
        Answer::json(200, dto)
    }

    /// `GET /sandbox/{id}`: a started sandbox's state is deduced from its container, as
    /// Daytona's runner deduces it (daytonaio/daytona 8432d16,
    /// `apps/runner/pkg/docker/state.go`, `DeduceSandboxState`): paused, or exited with 0,
    /// 137 or 143, is `stopped`; exited otherwise is `error`, with the exit code as its
    /// reason; gone or dead is `destroyed`.
    async fn sandbox(&self, id: &str, proxy: &str) -> Answer {
        let container = match self.state().sandboxes.get(id) {
            Some(s) if s.state == "started" => s.container.clone(),
            Some(_) => None,
            None => return not_found("sandbox"),
        };
        if let Some(container) = container {
            let deduced = match self.inner.engine.inspect_container(&container, None).await {
                Ok(inspect) => {
                    let state = inspect.state.unwrap_or_default();
                    let code = state.exit_code.unwrap_or_default();
                    match state.status.map(|s| s.to_string()).as_deref() {
                        Some("paused") => Some(("stopped", None)),
                        Some("exited") if matches!(code, 0 | 137 | 143) => Some(("stopped", None)),
                        Some("exited") => Some((
                            "error",
                            Some(format!(
                                "container exited with code {code}, reason: {}",
                                state.error.unwrap_or_default()
                            )),
                        )),
                        Some("dead") => Some(("destroyed", None)),
                        _ => None,
                    }
                }
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Some(("destroyed", None)),
                Err(e) => return error(500, &format!("inspecting the sandbox's container: {e}")),
            };
            if let Some((state, reason)) = deduced
                && let Some(s) = self.state().sandboxes.get_mut(id)
            {
                s.state = state.into();
                s.error_reason = reason;
            }
        }
        match self.state().sandboxes.get(id) {
            Some(s) => Answer::json(200, Self::sandbox_dto(id, s, proxy)),
            None => not_found("sandbox"),
        }
    }

    fn stop_or_start(&self, id: &str, action: &str, proxy: &str) -> Answer {
        let mut state = self.state();
        let Some(sandbox) = state.sandboxes.get_mut(id) else {
            return not_found("sandbox");
        };
        let Some(container) = sandbox.container.clone() else {
            return error(409, "the sandbox is not created yet");
        };
        let stop = action == "stop";
        sandbox.state = if stop { "stopping" } else { "starting" }.into();
        let dto = Self::sandbox_dto(id, sandbox, proxy);
        drop(state);
        let (this, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            let engine = &this.inner.engine;
            let done = if stop {
                engine
                    .stop_container(
                        &container,
                        Some(StopContainerOptionsBuilder::default().t(10).build()),
                    )
                    .await
            } else {
                engine.start_container(&container, None).await
            };
            if let Some(s) = this.state().sandboxes.get_mut(&id) {
                s.state = match (done, stop) {
                    (Err(_), _) => "error",
                    (Ok(()), true) => "stopped",
                    (Ok(()), false) => "started",
                }
                .into();
            }
        });
        Answer::json(200, dto)
    }

    /// Removes the docker `kind` (`image`, `container`) `id`, as far as it can.
    async fn remove(&self, kind: &str, id: String) -> Result<(), String> {
        let resource = Resource {
            kind: kind.into(),
            id,
        };
        self.inner
            .docker
            .delete_resource(&resource)
            .await
            .map(|_| ())
            .map_err(|e| format!("{} {}: {e}", resource.kind, resource.id))
    }

    /// The container behind sandbox `id`, once it has one.
    fn container(&self, id: &str) -> Option<String> {
        self.state()
            .sandboxes
            .get(id)
            .and_then(|s| s.container.clone())
    }

    /// Runs `argv` in `container` and answers as the toolbox's `process/*` calls do:
    /// `{exitCode, result}`, the result being stdout then stderr.
    /// Runs `argv` in `container` as `how` says: its output, or the 500 that says why not.
    async fn exec(
        &self,
        container: String,
        argv: &[String],
        how: &sandbox_providers::docker::Process,
    ) -> Result<sandbox_providers::CommandOutput, Answer> {
        self.inner
            .docker
            .exec_process(&SandboxId(container), argv, how)
            .await
            .map_err(|e| error(500, &e.to_string()))
    }

    /// `process/execute` as the toolbox runs it (daytonaio/daytona v0.190.0,
    /// apps/daemon/pkg/toolbox/process/execute.go): the command by the shell, as the
    /// sandbox's user, in `cwd` with `envs` when given; past `timeout` seconds (none when
    /// absent or 0) it is killed and the answer is 408 `command execution timeout`.
    async fn execute_command(&self, id: &str, body: &Value) -> Answer {
        if let Some(field) = set_field_outside(body, &["command", "timeout", "cwd", "envs"]) {
            return unimplemented_field("process/execute", &field);
        }
        let (Some(container), user) = (self.container(id), self.sandbox_user(id)) else {
            return not_found("sandbox");
        };
        let command = body["command"].as_str().unwrap_or_default();
        if command.trim().is_empty() {
            return error(400, "command cannot be empty or whitespace-only");
        }
        let timeout = body["timeout"].as_u64().filter(|t| *t > 0);
        let mut argv: Vec<String> = Vec::new();
        if let Some(secs) = timeout {
            argv.extend([
                "timeout".into(),
                "-s".into(),
                "KILL".into(),
                secs.to_string(),
            ]);
        }
        argv.extend(["sh".into(), "-c".into(), command.to_owned()]);
        let how = sandbox_providers::docker::Process {
            user,
            env: body["envs"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect(),
            cwd: body["cwd"].as_str().map(str::to_owned),
        };
        let started = Instant::now();
        match self.exec(container, &argv, &how).await {
            Ok(out)
                if out.exit_code == Some(137)
                    && timeout.is_some_and(|t| started.elapsed() >= Duration::from_secs(t)) =>
            {
                error(408, "command execution timeout")
            }
            Ok(out) => ran(&out),
            Err(refused) => refused,
        }
    }

    /// The user sandbox `id`'s commands run as, if its create named one.
    fn sandbox_user(&self, id: &str) -> Option<String> {
        self.state().sandboxes.get(id).and_then(|s| s.user.clone())
    }

    /// `process/code-run`: runs `{code, language, argv, envs}` as a script of its language
    /// (`python3 -c`, the one language the reference environment carries) and answers
    /// `{exitCode, result}`, the result being what it printed.
    async fn code_run(&self, id: &str, body: &Value) -> Answer {
        let (Some(container), user) = (self.container(id), self.sandbox_user(id)) else {
            return not_found("sandbox");
        };
        let language = body["language"].as_str().unwrap_or("python");
        if language != "python" {
            return error(
                400,
                &format!("the emulator runs python code only, not {language}"),
            );
        }
        let mut argv = vec!["env".to_owned()];
        if let Some(envs) = body["envs"].as_object() {
            for (name, value) in envs {
                argv.push(format!("{name}={}", value.as_str().unwrap_or_default()));
            }
        }
        argv.extend(["python3".into(), "-c".into()]);
        argv.push(body["code"].as_str().unwrap_or_default().to_owned());
        if let Some(args) = body["argv"].as_array() {
            argv.extend(args.iter().filter_map(|a| a.as_str()).map(str::to_owned));
        }
        let how = sandbox_providers::docker::Process {
            user,
            ..Default::default()
        };
        match self.exec(container, &argv, &how).await {
            Ok(out) => ran(&out),
            Err(refused) => refused,
        }
    }

    /// Runs `code` in `context`'s kernel, or with none in the sandbox's default kernel (the
    /// docker variant's code channel), as the toolbox runs code with no `contextId`. The
    /// emulator's timer, not the docker variant's, ends a run ([`Emulator::run_timed`]).
    async fn run_code(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
    ) -> sandbox_providers::Result<sandbox_providers::CodeOutput> {
        self.inner
            .docker
            .run_code_within(sandbox, context, code, Duration::MAX)
            .await
    }

    /// Runs `code` as the toolbox's worker does within `timeout` (none: no limit)
    /// (daytonaio/daytona v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/daemon/pkg/toolbox/process/interpreter/repl_client.go:115-168`): past it the
    /// kernel is interrupted, as the daemon sends its worker SIGINT (Jupyter Server sends
    /// the ipykernel SIGINT), and the run's answer is waited for [`INTERRUPT_GRACE`] more;
    /// after that the kernel is shut down, as the daemon kills its worker, and the next
    /// code in the context starts a new one, as the daemon starts a new worker
    /// (`manager.go:83-89`, `:100-107`). The daemon ignores a failed signal or kill; so
    /// does this. What differs: the daemon streams the output printed before the kill,
    /// and the emulator, which gets a kernel's output with its answer, has none to send;
    /// and its kill is Jupyter Server's shutdown, which waits up to 5 s for the kernel to
    /// exit before it kills it.
    async fn run_timed(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
        timeout: Option<Duration>,
    ) -> Ran {
        let mut run = Box::pin(self.run_code(sandbox, context, code));
        let Some(timeout) = timeout else {
            return Ran::Answered(run.await);
        };
        if let Ok(answer) = tokio::time::timeout(timeout, &mut run).await {
            return Ran::Answered(answer);
        }
        let _ = self.inner.docker.interrupt_kernel(sandbox, context).await;
        if let Ok(answer) = tokio::time::timeout(INTERRUPT_GRACE, &mut run).await {
            return Ran::Answered(answer);
        }
        // The run holds the kernel: it goes before the kernel is shut down.
        drop(run);
        let _ = self.inner.docker.kill_kernel(sandbox, context).await;
        Ran::Killed
    }

    /// Serves one execute WebSocket as the toolbox does (daytonaio/daytona v0.190.0,
    /// 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/daemon/pkg/toolbox/process/interpreter/controller.go:97-164`): reads the
    /// `{code, contextId, timeout, envs}` frame ([`read_execute`]), runs the code in that
    /// context's kernel with `envs` set for it and within `timeout`, and answers stdout,
    /// stderr and error frames, `control: completed` and close 1000; `control:
    /// interrupted` and close 4008 for code that ended on `KeyboardInterrupt` (the
    /// interrupt a timeout sends); close 4008 alone for code killed past its timeout.
    async fn execute(self, stream: Rewound) {
        let sandbox: Arc<Mutex<Option<String>>> = Arc::default();
        let seen = sandbox.clone();
        let touched = self.clone();
        let check = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request| {
            let parts: Vec<&str> = request
                .uri()
                .path()
                .trim_start_matches('/')
                .split('/')
                .collect();
            match parts.as_slice() {
                ["toolbox", id, "process", "interpreter", "execute"] => {
                    *lock(&seen) = Some((*id).to_owned());
                    touched.touch(id);
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
        let sandbox = lock(&sandbox).clone().unwrap_or_default();
        let payload = loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => break text.as_bytes().to_vec(),
                Some(Ok(Message::Binary(bytes))) => break bytes.to_vec(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return,
            }
        };
        let (frames, code, reason) = match read_execute(&payload) {
            Ok(request) => self.answer(&sandbox, request).await,
            Err(refused) => refused,
        };
        for frame in frames {
            if socket.send(Message::text(frame.to_string())).await.is_err() {
                return;
            }
        }
        close_with(&mut socket, code, &reason).await;
    }

    /// Runs an execute frame's code in sandbox `sandbox`: the frames to send, then the
    /// close code and reason.
    async fn answer(&self, sandbox: &str, request: Execute) -> (Vec<Value>, u16, String) {
        let Execute {
            code,
            context,
            timeout,
            envs,
        } = request;
        if let Some(volatiles) = &self.inner.volatiles {
            // The runner's restart marker changes every run: a placeholder in the cassette.
            for (at, _) in code.match_indices("sm-marker-") {
                if let Some(marker) = code.get(at..at + 18) {
                    volatiles.register("marker", marker);
                }
            }
        }
        let (container, known) = {
            let state = self.state();
            let known = match &context {
                None => true,
                Some(context) => state.contexts.get(context).map(String::as_str) == Some(sandbox),
            };
            let container = state
                .sandboxes
                .get(sandbox)
                .and_then(|s| s.container.clone());
            (container, known)
        };
        let container = match (container, &context) {
            (None, _) => {
                let missing = format!("no context {}", context.as_deref().unwrap_or("default"));
                return (
                    vec![
                        output("error", "", "ContextNotFound", &missing),
                        output("control", "completed", "", ""),
                    ],
                    1000,
                    String::new(),
                );
            }
            // controller.go:144-149.
            (Some(_), Some(id)) if !known => {
                return (Vec::new(), 1008, format!("context not found: {id}"));
            }
            (Some(container), _) => SandboxId(container),
        };
        // repl_client.go:35-62: a context runs one command at a time, in the order they
        // came, and a command's timeout starts when it runs.
        let turn = self
            .state()
            .turns
            .entry((sandbox.to_owned(), context.clone()))
            .or_default()
            .clone();
        let _turn = turn.lock().await;
        let context = context.as_deref();
        let saved = match envs.is_empty() {
            true => None,
            false => {
                let out = match self.run_code(&container, context, &set_envs(&envs)).await {
                    Ok(out) => out,
                    Err(e) => return worker_failed(e),
                };
                // repl_worker.py:111-122 sets them before the code's `try`: a failure ends
                // the command with its error frame and no control frame
                // (repl_worker.py:165-166), the names set before it left set.
                if let Some(error) = out.error {
                    return (vec![error_frame(&error)], 1000, String::new());
                }
                match serde_json::from_str::<BTreeMap<String, Option<String>>>(out.stdout.trim()) {
                    Ok(saved) => Some(saved),
                    Err(e) => {
                        return worker_failed(format!(
                            "the environment before `envs` did not read back: {e}"
                        ));
                    }
                }
            }
        };
        let answer = match self.run_timed(&container, context, &code, timeout).await {
            Ran::Answered(answer) => answer,
            // repl_client.go:146-166, then :56-57: no frame, close 4008.
            Ran::Killed => return (Vec::new(), CLOSE_TIMEOUT, String::new()),
        };
        // repl_worker.py:145-150: put back as they were once the code ended, before its
        // last frames are sent.
        if let Some(saved) = saved
            && let Err(e) = self
                .run_code(&container, context, &restore_envs(&saved))
                .await
        {
            return worker_failed(e.context("putting the environment back after `envs`"));
        }
        let mut out = match answer {
            Ok(out) => out,
            Err(e) => return worker_failed(e),
        };
        // repl_worker.py:129-130: code ended by KeyboardInterrupt is `interrupted`, with
        // no error frame; repl_client.go:341-344 and :56-57 close it 4008.
        let interrupted = out
            .error
            .as_deref()
            .is_some_and(|e| e.split(':').next() == Some("KeyboardInterrupt"));
        if interrupted {
            out.error = None;
        }
        let mut frames = Vec::new();
        if !out.stdout.is_empty() {
            frames.push(output("stdout", &out.stdout, "", ""));
        }
        if !out.stderr.is_empty() {
            frames.push(output("stderr", &out.stderr, "", ""));
        }
        frames.extend(out.error.as_deref().map(error_frame));
        match interrupted {
            true => {
                frames.push(output("control", "interrupted", "", ""));
                (frames, CLOSE_TIMEOUT, String::new())
            }
            false => {
                frames.push(output("control", "completed", "", ""));
                (frames, 1000, String::new())
            }
        }
    }
}

/// The answer to code the emulator's kernel failed to run: a `WorkerProcessError` frame,
/// `control: completed` and close 1000.
fn worker_failed(e: impl std::fmt::Display) -> (Vec<Value>, u16, String) {
    (
        vec![
            output("error", "", "WorkerProcessError", &e.to_string()),
            output("control", "completed", "", ""),
        ],
        1000,
        String::new(),
    )
}

/// The error frame of a kernel's `ename: evalue`.
fn error_frame(error: &str) -> Value {
    let (name, value) = error.split_once(": ").unwrap_or((error, ""));
    output("error", "", name, value)
}

/// How a run within a timeout ended.
enum Ran {
    /// The kernel answered, within the timeout or its grace period.
    Answered(sandbox_providers::Result<sandbox_providers::CodeOutput>),
    /// Its kernel was shut down, past the timeout and the grace period.
    Killed,
}

/// How long interpreter code may run when its frame names no `timeout`: 10 min
/// (`controller.go:123`).
const INTERPRETER_TIMEOUT: Duration = Duration::from_secs(600);
/// How long interrupted code has to stop before its kernel is shut down: the daemon's
/// `gracePeriod` (`types.go:20`).
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);
/// The close code of code past its timeout: `WebSocketCloseTimeout` (`types.go:26`).
const CLOSE_TIMEOUT: u16 = 4008;

/// An execute frame as the toolbox reads it (`ExecuteRequest`, `types.go:71-76`).
#[derive(Debug, PartialEq)]
struct Execute {
    code: String,
    context: Option<String>,
    /// None: no limit (`timeout: 0`).
    timeout: Option<Duration>,
    envs: BTreeMap<String, String>,
}

/// Reads the first frame of the execute WebSocket as the daemon does (daytonaio/daytona
/// v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
/// `apps/daemon/pkg/toolbox/process/interpreter/controller.go:105-134`), or refuses it with
/// the frames to send, the close code and its reason: a frame that is not JSON of
/// `ExecuteRequest`'s types closes 1002 `invalid JSON payload`, no `code` closes 1008
/// `code is required`, a negative `timeout` closes 1008 `timeout must be greater than or
/// equal to 0`. A field the emulator does not implement (the daemon reads no other) is
/// refused by name: an error frame and close 1008.
fn read_execute(payload: &[u8]) -> Result<Execute, (Vec<Value>, u16, String)> {
    let invalid = || (Vec::new(), 1002, "invalid JSON payload".to_owned());
    let frame = match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Null) => json!({}),
        Ok(frame @ Value::Object(_)) => frame,
        _ => return Err(invalid()),
    };
    if let Some(field) = set_field_outside(&frame, &["code", "contextId", "timeout", "envs"]) {
        let message = format!(
            "the daytona emulator does not implement the execute field `{field}`; it refuses it rather than drop it"
        );
        return Err((
            vec![output("error", "", "NotImplementedError", &message)],
            1008,
            message,
        ));
    }
    let text = |field: &str| match &frame[field] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(invalid()),
    };
    let code = text("code")?.unwrap_or_default();
    let context = text("contextId")?;
    let timeout = match &frame["timeout"] {
        Value::Null => None,
        value => Some(value.as_i64().ok_or_else(invalid)?),
    };
    // A null value is the empty string, as Go decodes it into `map[string]string`.
    let mut envs = BTreeMap::new();
    match &frame["envs"] {
        Value::Null => {}
        Value::Object(given) => {
            for (name, value) in given {
                let value = match value {
                    Value::Null => String::new(),
                    Value::String(s) => s.clone(),
                    _ => return Err(invalid()),
                };
                envs.insert(name.clone(), value);
            }
        }
        _ => return Err(invalid()),
    }
    if code.is_empty() {
        return Err((Vec::new(), 1008, "code is required".to_owned()));
    }
    let timeout = match timeout {
        None => Some(INTERPRETER_TIMEOUT),
        Some(secs) if secs < 0 => {
            return Err((
                Vec::new(),
                1008,
                "timeout must be greater than or equal to 0".to_owned(),
            ));
        }
        Some(0) => None,
        Some(secs) => Some(Duration::from_secs(secs.unsigned_abs())),
    };
    Ok(Execute {
        code,
        context,
        timeout,
        envs,
    })
}

/// Python that sets `envs` in the kernel's `os.environ`, in the order of their names (the
/// daemon's worker gets them from a Go map, marshalled sorted), after printing as one
/// JSON line the value each had (null: unset). It binds no name in the kernel's globals;
/// being a cell of its own, it advances the kernel's execution count and IPython's input
/// history, which no frame shows.
fn set_envs(envs: &BTreeMap<String, String>) -> String {
    let given = serde_json::to_string(envs).expect("a map of strings serializes");
    in_own_namespace(&format!(
        "import json, os\nnew = json.loads({})\nprint(json.dumps({{k: os.environ.get(k) for k in new}}))\nfor k, v in new.items():\n    os.environ[k] = v\n",
        python_string(&given)
    ))
}

/// Python that puts back the values [`set_envs`] printed: each as it was, or unset.
fn restore_envs(saved: &BTreeMap<String, Option<String>>) -> String {
    let saved = serde_json::to_string(saved).expect("a map of strings serializes");
    in_own_namespace(&format!(
        "import json, os\nfor k, v in json.loads({}).items():\n    if v is None:\n        os.environ.pop(k, None)\n    else:\n        os.environ[k] = v\n",
        python_string(&saved)
    ))
}

/// `source` run by `exec` in a namespace of its own, so the kernel's globals stay as they
/// were and the cell shows no value.
fn in_own_namespace(source: &str) -> String {
    format!("exec({}, {{}})", python_string(source))
}

/// `text` as a Python string literal: JSON's escapes are Python's.
fn python_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// Writes `dockerfile` into `dir` with its heredoc `COPY`s as context files.
fn write_context(dir: &std::path::Path, dockerfile: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut out = String::new();
    let mut lines = dockerfile.lines();
    let mut files = 0;
    while let Some(line) = lines.next() {
        let Some((head, rest)) = line.split_once(" <<'") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let Some((delimiter, dest)) = rest.split_once("' ") else {
            return Err(std::io::Error::other(format!(
                "a heredoc COPY names no destination: {line}"
            )));
        };
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
        std::fs::write(dir.join(&name), content)?;
        out.push_str(&format!("{head} {name} {dest}\n"));
    }
    std::fs::write(dir.join("Dockerfile"), out)
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

/// The region a create asked for, or the organization's default (`us`, the region the
/// emulated organization has) when it names none.
fn region_asked(asked: &Value) -> String {
    asked.as_str().unwrap_or("us").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_stop_takes_started_sandboxes_idle_past_their_interval() {
        let now = std::time::Instant::now();
        let sandbox = |state: &str, minutes: u64, idle_secs: u64| Sandbox {
            snapshot: "s".into(),
            size: Size {
                cpu: 1,
                memory_gib: 1,
                disk_gib: 3,
            },
            user: None,
            target: "us".into(),
            labels: BTreeMap::new(),
            state: state.into(),
            error_reason: None,
            container: None,
            auto_stop_minutes: minutes,
            last_activity: now - Duration::from_secs(idle_secs),
        };
        let sandboxes = BTreeMap::from([
            ("idle-past".to_owned(), sandbox("started", 1, 61)),
            ("idle-at".to_owned(), sandbox("started", 1, 60)),
            ("active".to_owned(), sandbox("started", 15, 600)),
            ("never".to_owned(), sandbox("started", 0, 86_400)),
            ("stopped".to_owned(), sandbox("stopped", 1, 3_600)),
        ]);
        assert_eq!(due_for_auto_stop(&sandboxes, now), ["idle-past"]);
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("sm-daytona-emulate-{}-{name}", std::process::id()))
    }

    #[test]
    fn heredoc_copies_become_context_files() {
        let dir = scratch("heredoc");
        write_context(
            &dir,
            "FROM x\nCOPY <<'SANDBOX_MATRIX_CONTEXT_0' /etc/a\nline\nSANDBOX_MATRIX_CONTEXT_0\nRUN true\n",
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("Dockerfile")).unwrap(),
            "FROM x\nCOPY heredoc-1 /etc/a\nRUN true\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("heredoc-1")).unwrap(),
            "line\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_execute_frame_is_read_as_the_daemon_reads_it() {
        let read = |frame: Value| read_execute(frame.to_string().as_bytes()).unwrap();
        assert_eq!(
            read(json!({"code": "1", "contextId": "c", "envs": {"A": "a", "B": null}})),
            Execute {
                code: "1".into(),
                context: Some("c".into()),
                timeout: Some(INTERPRETER_TIMEOUT),
                envs: [("A".into(), "a".into()), ("B".into(), String::new())].into(),
            }
        );
        assert_eq!(read(json!({"code": "1", "timeout": 0})).timeout, None);
        assert_eq!(
            read(json!({"code": "1", "timeout": 3})).timeout,
            Some(Duration::from_secs(3))
        );
    }

    #[test]
    fn an_execute_frame_is_refused_as_the_daemon_refuses_it() {
        let refused = |frame: &str| read_execute(frame.as_bytes()).unwrap_err();
        let closed = |code: u16, reason: &str| (Vec::new(), code, reason.to_owned());
        assert_eq!(
            refused(r#"{"code": "1", "timeout": -1}"#),
            closed(1008, "timeout must be greater than or equal to 0")
        );
        assert_eq!(refused(r#"{"code": ""}"#), closed(1008, "code is required"));
        for frame in [
            "not json",
            "[]",
            r#"{"code": 1}"#,
            r#"{"code": "1", "timeout": "10"}"#,
            r#"{"code": "1", "timeout": 1.5}"#,
            r#"{"code": "1", "envs": {"A": 1}}"#,
            r#"{"code": "1", "envs": []}"#,
        ] {
            assert_eq!(
                refused(frame),
                closed(1002, "invalid JSON payload"),
                "{frame}"
            );
        }
        let (frames, code, reason) = refused(r#"{"code": "1", "language": "python"}"#);
        assert_eq!(code, 1008);
        assert!(reason.contains("`language`"), "{reason}");
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0]["type"], "error");
        assert!(
            frames[0]["value"].as_str().unwrap().contains("`language`"),
            "{frames:?}"
        );
    }

    #[test]
    fn the_host_splits_from_its_port() {
        assert_eq!(
            split_host("App.Daytona.test:8443"),
            ("app.daytona.test".to_owned(), ":8443".to_owned())
        );
        assert_eq!(
            split_host("proxy.app.daytona.test"),
            ("proxy.app.daytona.test".to_owned(), String::new())
        );
    }
}
