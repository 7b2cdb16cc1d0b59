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
//! A build's local files come as Daytona's SDK sends them: pushed to the emulator's object
//! storage with the credential `object-storage/push-access` hands out, and named by hash in
//! `buildInfo.contextHashes` (`object_storage.rs` has the rules and their sources).
//!
//! A base named in a registry (`<registry>/<repository>@sha256:<digest>`) is pulled as
//! Daytona's builder would, with the docker-registry entry for that registry: the
//! emulator serves the [`StandInBase`]s it is given from local images to whoever holds
//! their credential, and fails the build, naming the registry, otherwise.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::StopContainerOptionsBuilder;
use futures_util::{SinkExt as _, StreamExt as _};
use sandbox_providers::api::Volatiles;
use sandbox_providers::api::ws::{Rewound, accept, close_with};
use sandbox_providers::{
    Artifact, BuildRequest, LogFn, Provider, Resource, RunLabels, SandboxId, Secret,
};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::emulator::Emulator as _;
use crate::emulator::{ClientEnv, Reach};
use crate::error::EmulateError;
use crate::http::{Answer, HttpRequest, lock, set_field_outside};
use crate::site::Site;

mod interpreter;
mod object_storage;
mod sandboxes;
mod snapshots;
#[cfg(test)]
mod tests;
mod toolbox;

use interpreter::{INTERRUPT_GRACE, Ran};
use sandboxes::{context_dto, region_asked};

/// The domain the daytona emulator serves when none is given.
pub const DEFAULT_DOMAIN: &str = "daytona.test";
/// The control plane's host label: `app.<domain>`, its API under `/api`.
const API_HOST: &str = "app";
// Fake: the emulator accepts any non-empty key; this one grants nothing anywhere.
const FAKE_KEY: &str = "dtn_sm_fake_emulator_key_0000";
/// The toolbox proxy's host label: `proxy.app.<domain>`, the toolbox under `/toolbox`.
const PROXY_HOST: &str = "proxy.app";
/// The object storage's host label: `storage.app.<domain>`, its bucket path-style.
const STORAGE_HOST: &str = "storage.app";
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
/// stopped: the column's default (`@Column({ default: 15 }) autoStopInterval`,
/// apps/api/src/sandbox/entities/sandbox.entity.ts at daytonaio/daytona v0.190.0,
/// 01c502bb1f1ff8f2885d0cd490e043736083dca8).
const DEFAULT_AUTO_STOP_MINUTES: u64 = 15;
/// How often the auto-stop check runs: every 10 s, as Daytona's API runs it (`@Cron
/// EVERY_10_SECONDS`, `autostopCheck`, apps/api/src/sandbox/managers/sandbox.manager.ts
/// at v0.190.0; it ran each minute before `feat(api): tweak automatic lifecycle numbers`).
const AUTO_STOP_TICK: Duration = Duration::from_secs(10);
/// The header a proxied request carries, set to `true`, to not count as activity
/// (`SKIP_LAST_ACTIVITY_UPDATE_HEADER`, apps/proxy/pkg/proxy/proxy.go at v0.190.0; every
/// other request through the proxy is, get_sandbox_target.go).
const SKIP_ACTIVITY_HEADER: &str = "x-daytona-skip-last-activity-update";

/// How long the service holds a build-logs URL request for a `pending` snapshot, waiting
/// for a runner, before it answers 404 (`snapshot.controller.ts`, see [`build_logs_url`]).
const RUNNER_WAIT: Duration = Duration::from_secs(30);

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
/// selects them (`sandbox.manager.ts` at v0.190.0): started, with a non-zero
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

/// Whether a request through the proxy says it is no activity ([`SKIP_ACTIVITY_HEADER`]).
fn skips_activity(headers: &std::collections::HashMap<String, String>) -> bool {
    headers
        .get(SKIP_ACTIVITY_HEADER)
        .is_some_and(|v| v == "true")
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
    /// The object storage a build's local files are pushed to.
    storage: object_storage::Storage,
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
    engine: Docker,
    labels: RunLabels,
    /// Whether `labels` go on everything (given by the options).
    fixed_labels: bool,
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

impl crate::emulator::Emulator for Emulator {
    fn site(&self) -> &Site {
        &self.inner.site
    }

    fn client_env(&self, reach: Reach) -> ClientEnv {
        let url = match reach {
            Reach::WithPort => self.api_url_with_port(),
            Reach::Pinned => self.api_url(),
        };
        vec![
            ("DAYTONA_API_KEY", FAKE_KEY.to_owned()),
            ("DAYTONA_API_URL", url),
            self.resolve(reach),
        ]
    }

    /// Builds the environment folder `environment` into a snapshot, as the project's
    /// daytona client builds one against the emulator, so that a client can create
    /// sandboxes from it (by name or id) without building first. `log` gets the build's
    /// lines; the snapshot's image carries the emulator's labels, so its cleanup removes
    /// it. Answers its name (`DAYTONA_SNAPSHOT`) and id (`DAYTONA_SNAPSHOT_ID`).
    async fn seed(&self, environment: &Path, log: &LogFn) -> Result<ClientEnv, EmulateError> {
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
            scenario: crate::backend::seed_scenario(environment),
            ..self.inner.labels.clone()
        };
        let artifact = crate::backend::seed_build(&client, environment, labels, log).await?;
        let name = self
            .state()
            .snapshots
            .get(&artifact.id)
            .map(|s| s.name.clone())
            .ok_or_else(|| {
                EmulateError::Backend(format!("snapshot {} vanished after its build", artifact.id))
            })?;
        Ok(vec![
            ("DAYTONA_SNAPSHOT", name),
            ("DAYTONA_SNAPSHOT_ID", artifact.id),
        ])
    }
}

impl Emulator {
    /// Serves Daytona's API over HTTPS on 127.0.0.1 with `docker` behind it.
    pub async fn start(
        docker: Arc<sandbox_providers::docker::DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        let engine = Docker::connect_with_local_defaults()
            .map_err(|e| EmulateError::Backend(format!("cannot reach the Docker engine: {e}")))?;
        // The certificate's names are `app.<domain>` and every name under it, which holds
        // the toolbox proxy `proxy.app.<domain>`.
        let (port, domain) = (options.port, &options.domain);
        let listening =
            crate::site::Listening::on(port, domain, Some(API_HOST), "daytona", docker).await?;
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
                site: listening.site(),
                engine,
                labels,
                fixed_labels,
                volatiles: options.volatiles,
                bases: options.bases,
                queued: options.queued,
                building_at_least: options.building_at_least,
                kill_after: options.kill_after,
                state: Mutex::default(),
            }),
        };
        emulator.inner.site.made_under(&emulator.inner.labels);
        emulator.check_auto_stop_every_tick();
        listening.serve(emulator.clone(), Self::execute, Self::serve);
        Ok(emulator)
    }

    /// Runs the auto-stop check every [`AUTO_STOP_TICK`] while the emulator is held.
    fn check_auto_stop_every_tick(&self) {
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

    /// Whether no docker-registry entry is left.
    pub fn registry_entries_left(&self) -> usize {
        lock(&self.inner.state).registries.len()
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
        self.inner.site.made_under(&labels);
        labels
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Routes by the host the client called: the control plane at `app.<domain>` under
    /// `/api`, the toolbox at `proxy.app.<domain>` under `/toolbox`, the object storage at
    /// `storage.app.<domain>` under `/<bucket>`. A client whose resolver cannot be pinned
    /// (the SDKs, on the system resolver) calls `localhost` (or 127.0.0.1) instead, which
    /// serves all three under those paths and hands out a `toolboxProxyUrl` and a
    /// `storageUrl` on the same host.
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
        let (api, toolbox, storage) = match (loopback, label) {
            (true, _) => (true, true, true),
            (false, Some(API_HOST)) => (true, false, false),
            (false, Some(PROXY_HOST)) => (false, true, false),
            (false, Some(STORAGE_HOST)) => (false, false, true),
            _ => (false, false, false),
        };
        match path.split_once('/').map(|(_, rest)| rest) {
            Some("api/object-storage/push-access") if api && request.method == "GET" => {
                if !bearer {
                    return error(401, "Unauthorized: a bearer token is required");
                }
                self.push_access(&origin(STORAGE_HOST))
            }
            Some(rest)
                if storage
                    && (rest == object_storage::BUCKET
                        || rest.starts_with(&format!("{}/", object_storage::BUCKET))) =>
            {
                self.storage(&request)
            }
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
                if let Some(id) = parts.first()
                    && !skips_activity(&request.headers)
                {
                    self.touch(id);
                }
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
}
