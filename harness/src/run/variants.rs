//! The variants sandbox-matrix knows, and how to connect to each. Adding a variant adds a
//! line here and a module in `providers/`; the runner and the suite stay as they are.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost_reflect::DescriptorPool;
use sandbox_providers::api::grpc::{
    GrpcCassette, GrpcOptions, GrpcReplayServer, Recorder as GrpcRecorder,
};
use sandbox_providers::api::replay::{Pace, ReplayOptions, ReplayServer};
use sandbox_providers::api::settings::Settings;
use sandbox_providers::api::{Cassette, Mode, Recorder, Volatiles};
use sandbox_providers::docker::{BaseRecipe, DockerProvider, DoctorBinary};
use sandbox_providers::registry::Repository;
use sandbox_providers::{Capabilities, Provider, ProviderError};
use sandbox_providers::{CredentialSource, RegistryCredential, Secret, datalayer, modal};

use crate::model::results::{Replay, Source};
use crate::run::local_registry::{self, LocalRegistry};
use crate::run::runner::{SessionCheck, random_hex};

/// Where, under the project root, the docker variant's base image recipe lives.
pub const BASE_RECIPE_DIR: &str = "fixtures/images/contract-base";

/// Where, under the project root, cassettes live: `<variant>/<scenario>.yaml`.
pub const CASSETTES_DIR: &str = "fixtures/cassettes";

/// Makes a cloud variant's provider for a mode, configured by settings (the environment in
/// a live run, an emulator's in an emulated one).
pub type CloudConnect =
    fn(Mode, Arc<Volatiles>, &Settings) -> Result<Arc<dyn Provider>, ProviderError>;

/// Makes a gRPC variant's provider recording into a recorder.
pub type GrpcRecord =
    fn(GrpcRecorder, Arc<Volatiles>, &Settings) -> Result<Arc<dyn Provider>, ProviderError>;

/// How a variant over gRPC records and replays: at the gRPC layer, with its own cassettes
/// (method paths and messages as JSON, streams frame by frame, trailers). Its
/// [`CloudVariant::connect`] serves live runs and replays (a replay server's URL in
/// [`Mode::Replay`]); recording goes through [`GrpcWire::record`].
pub struct GrpcWire {
    /// The descriptors of the variant's messages.
    pub descriptors: fn() -> &'static DescriptorPool,
    /// Request metadata replay compares and recordings keep.
    pub matched_metadata: &'static [&'static str],
    /// Makes the provider recording into the recorder, live.
    pub record: GrpcRecord,
    /// How the recorder is set up for a run with `volatiles` and settings (what it redacts).
    pub record_options: fn(Arc<Volatiles>, &Settings) -> GrpcOptions,
}

/// A variant reached over a provider's API: live, recorded or replayed.
pub struct CloudVariant {
    /// Its name in scenarios and reports.
    pub name: &'static str,
    /// Makes its provider.
    pub connect: CloudConnect,
    /// Request headers its replay matches (the variant's `REPLAY_MATCHED_HEADERS`).
    pub matched_headers: &'static [&'static str],
    /// The credentials its client sends in replay mode, redacted by the replay server.
    pub replay_credentials: fn() -> Vec<sandbox_providers::Secret>,
    /// What it can do, known before connecting (the provider's `CAPABILITIES`).
    pub capabilities: Capabilities,
    /// Set for a variant over gRPC, which records and replays at that layer; `None` for
    /// one over HTTP.
    pub grpc: Option<GrpcWire>,
    /// The environment variables that point its client at another address than the
    /// provider's (a URL, or E2B's domain), the one it reads first first.
    pub address_vars: &'static [&'static str],
}

impl CloudVariant {
    /// Whether the first of [`Self::address_vars`] set points the client at this machine
    /// (an emulator, as `emulate` prints it): `localhost`, a `*.localhost` name or a
    /// loopback IP.
    pub fn at_loopback(&self) -> bool {
        self.address_vars
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
            .is_some_and(|address| {
                let pin = std::env::var(sandbox_providers::api::network::RESOLVE_VAR).ok();
                names_loopback(&address, pin.as_deref())
            })
    }
}

/// Whether `address` (a URL, or a host with an optional port) names this machine, itself
/// or through `pin` (`SANDBOX_MATRIX_RESOLVE`, as the settings `emulate` prints carry:
/// `e2b.test=127.0.0.1`).
fn names_loopback(address: &str, pin: Option<&str>) -> bool {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
        || pin
            .and_then(|pin| sandbox_providers::api::network::ResolvePin::parse(pin).ok())
            .is_some_and(|pin| pin.covers(host) && pin.addr.ip().is_loopback())
}

/// The cloud variants, in report order: Datalayer's platform launch first, beside the
/// `datalayer` artifact it launches.
pub const CLOUD: &[CloudVariant] = &[
    CloudVariant {
        name: datalayer::runtimes::VARIANT,
        connect: |mode, volatiles, settings| {
            datalayer::runtimes::RuntimesProvider::from_settings(mode, volatiles, settings)
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
        },
        matched_headers: datalayer::runtimes::REPLAY_MATCHED_HEADERS,
        replay_credentials: datalayer::runtimes::replay_credentials,
        capabilities: datalayer::runtimes::CAPABILITIES,
        grpc: None,
        address_vars: &[datalayer::runtimes::URL_VAR],
    },
    CloudVariant {
        name: "e2b",
        connect: |mode, volatiles, settings| {
            sandbox_providers::e2b::E2bProvider::from_settings(mode, volatiles, settings)
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
        },
        matched_headers: sandbox_providers::e2b::REPLAY_MATCHED_HEADERS,
        replay_credentials: sandbox_providers::e2b::replay_credentials,
        capabilities: sandbox_providers::e2b::CAPABILITIES,
        grpc: None,
        address_vars: &["E2B_DOMAIN"],
    },
    CloudVariant {
        name: "daytona",
        connect: |mode, volatiles, settings| {
            sandbox_providers::daytona::DaytonaProvider::from_settings(mode, volatiles, settings)
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
        },
        matched_headers: sandbox_providers::daytona::REPLAY_MATCHED_HEADERS,
        replay_credentials: sandbox_providers::daytona::replay_credentials,
        capabilities: sandbox_providers::daytona::CAPABILITIES,
        grpc: None,
        address_vars: &["DAYTONA_API_URL"],
    },
    CloudVariant {
        name: "modal",
        connect: |mode, volatiles, settings| {
            let connection = match mode {
                Mode::Live => modal::Connection::Live,
                Mode::Replay { server_url, .. } => modal::Connection::Replay { server_url },
                Mode::Record(_) => {
                    return Err(ProviderError::new(
                        sandbox_providers::ErrorKind::Config,
                        "the modal variant records gRPC calls, not HTTP exchanges",
                    ));
                }
            };
            modal::ModalProvider::from_settings(connection, volatiles, settings)
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
        },
        matched_headers: &[],
        replay_credentials: modal::replay_credentials,
        capabilities: modal::CAPABILITIES,
        grpc: Some(GrpcWire {
            descriptors: modal::proto::descriptors,
            matched_metadata: modal::MATCHED_METADATA,
            record: |recorder, volatiles, settings| {
                modal::ModalProvider::from_settings(
                    modal::Connection::Record(recorder),
                    volatiles,
                    settings,
                )
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
            },
            record_options: modal::record_options,
        }),
        address_vars: &[modal::client::URL_VAR, modal::client::SERVER_URL_VAR],
    },
];

/// The variants on the local engine, in report order: `docker` (a local image id) and
/// `datalayer` (the image pushed by digest to a registry and pulled back).
pub const LOCAL: &[&str] = &["docker", "datalayer"];

/// What the variant named `name` can do, known before connecting to it.
pub fn capabilities(name: &str) -> Option<Capabilities> {
    match name {
        "docker" => Some(sandbox_providers::docker::CAPABILITIES),
        "datalayer" => Some(datalayer::CAPABILITIES),
        _ => cloud(name).map(|c| c.capabilities.clone()),
    }
}

/// Every variant name, in report order.
pub fn known() -> Vec<&'static str> {
    super::variant_names::VARIANT_NAMES.to_vec()
}

/// The cloud variant named `name`.
pub fn cloud(name: &str) -> Option<&'static CloudVariant> {
    CLOUD.iter().find(|c| c.name == name)
}

/// How cloud variants are reached in a run.
#[derive(Debug, Clone)]
pub enum CloudMode {
    /// The real APIs, with credentials from the environment.
    Live,
    /// The real APIs, every exchange written to `<dir>/<variant>/<scenario>.yaml`.
    Record {
        /// The cassettes folder.
        dir: PathBuf,
    },
    /// Cassettes from `<dir>/<variant>/<scenario>.yaml`, served on loopback.
    Replay {
        /// The cassettes folder.
        dir: PathBuf,
        /// Response pacing.
        pace: Pace,
    },
    /// sandbox-matrix's emulator of each cloud variant, started by the run on loopback over
    /// the local engine ([`sandbox_emulators::launch`]); every exchange written to
    /// `<record>/<variant>/<scenario>.yaml` when `record` is set.
    Emulated {
        /// The cassettes folder, when recording.
        record: Option<PathBuf>,
    },
}

impl CloudMode {
    /// Where the numbers of `variant` × `scenario` come from in this mode, for a scenario
    /// that could not be opened: for a replay, the cassette's origin and date are read from
    /// its header, and stay unknown when it cannot be read.
    pub fn source(&self, variant: &str, scenario: &str) -> Source {
        match self {
            CloudMode::Live => Source::Live,
            CloudMode::Record { .. } => Source::Record,
            CloudMode::Emulated { .. } => emulated_source(variant),
            CloudMode::Replay { dir, pace } => {
                // A path that would leave the folder is shown, never read.
                let checked = checked_cassette_path(dir, variant, scenario);
                let path = cassette_path(dir, variant, scenario);
                let header = checked.ok().and_then(|p| match cloud(variant) {
                    Some(CloudVariant {
                        grpc: Some(grpc), ..
                    }) => GrpcCassette::load(&p, (grpc.descriptors)())
                        .ok()
                        .map(|c| (c.origin, c.written)),
                    _ => Cassette::load(&p).ok().map(|c| (c.origin, c.written)),
                });
                replay_source(dir, &path, *pace, header)
            }
        }
    }
}

/// The cassette of `variant` × `scenario` under `dir`, as named (for names a loaded
/// scenario already checked); the run reads and writes through [`checked_cassette_path`].
pub fn cassette_path(dir: &Path, variant: &str, scenario: &str) -> PathBuf {
    dir.join(variant).join(format!("{scenario}.yaml"))
}

/// [`cassette_path`], refused when it would not stay inside `dir` (a name with `/` or
/// `..`, or a symlink out of the folder).
pub fn checked_cassette_path(dir: &Path, variant: &str, scenario: &str) -> Result<PathBuf, String> {
    crate::paths::inside(dir, &[variant, &format!("{scenario}.yaml")])
        .map_err(|e| format!("no cassette path for {variant} × {scenario}: {e}"))
}

/// Reads the cassette at `path` for `variant` to replay in scenario `scenario`, refusing
/// one recorded for another variant or scenario (its `variant:` or `scenario:` names a
/// different one), located at that line.
pub fn load_cassette(path: &Path, variant: &str, scenario: &str) -> Result<Cassette, String> {
    let cassette = Cassette::load(path).map_err(|e| e.to_string())?;
    check_header(
        path,
        (&cassette.variant, &cassette.scenario),
        variant,
        scenario,
    )?;
    Ok(cassette)
}

/// Reads the cassette at `path` as `cloud` replays it (HTTP or gRPC) for `scenario`: the
/// error says where it does not parse or is another variant's or scenario's.
pub fn check_cassette(cloud: &CloudVariant, path: &Path, scenario: &str) -> Result<(), String> {
    match &cloud.grpc {
        Some(grpc) => {
            load_grpc_cassette(path, (grpc.descriptors)(), cloud.name, scenario).map(drop)
        }
        None => load_cassette(path, cloud.name, scenario).map(drop),
    }
}

/// [`load_cassette`] for a variant over gRPC, whose messages `pool` describes.
pub fn load_grpc_cassette(
    path: &Path,
    pool: &DescriptorPool,
    variant: &str,
    scenario: &str,
) -> Result<GrpcCassette, String> {
    let cassette = GrpcCassette::load(path, pool).map_err(|e| e.to_string())?;
    check_header(
        path,
        (&cassette.variant, &cassette.scenario),
        variant,
        scenario,
    )?;
    Ok(cassette)
}

/// Refuses a cassette at `path` whose header names (`variant:`, `scenario:`) are not
/// `variant` and `scenario`.
fn check_header(
    path: &Path,
    (recorded_variant, recorded_scenario): (&str, &str),
    variant: &str,
    scenario: &str,
) -> Result<(), String> {
    let line_of = |field: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.lines().position(|l| l.starts_with(field)))
            .map_or(1, |i| i + 1)
    };
    if recorded_variant != variant {
        return Err(format!(
            "{}:{}:1: the cassette is for the `{}` variant, and the {variant} variant cannot replay it",
            path.display(),
            line_of("variant:"),
            crate::paths::cut(recorded_variant)
        ));
    }
    if recorded_scenario != scenario {
        return Err(format!(
            "{}:{}:1: scenario: the cassette is for the `{}` scenario, and the `{scenario}` scenario cannot replay it",
            path.display(),
            line_of("scenario:"),
            crate::paths::cut(recorded_scenario)
        ));
    }
    Ok(())
}

/// A replay of the cassette at `path` under `dir`, at `pace`, with the cassette's header
/// (`origin:` and `written:`) when it was read. The path is shown from the project root
/// when `dir` is the project's cassettes folder (`<root>/fixtures/cassettes`), else as
/// given.
fn replay_source(
    dir: &Path,
    path: &Path,
    pace: Pace,
    header: Option<(String, Option<String>)>,
) -> Source {
    let root = if dir.ends_with(CASSETTES_DIR) {
        dir.ancestors()
            .nth(Path::new(CASSETTES_DIR).components().count())
    } else {
        None
    };
    let shown = root
        .and_then(|root| path.strip_prefix(root).ok())
        .unwrap_or(path);
    Source::Replay {
        replay: Replay {
            cassette: shown.display().to_string(),
            origin: header.as_ref().map(|(origin, _)| origin.clone()),
            written: header.and_then(|(_, written)| written),
            pace: pace.into(),
        },
    }
}

/// A cloud variant ready for one scenario, and the check of its transport afterwards.
pub struct CloudSession {
    /// The provider, pointed where the mode says.
    pub provider: Arc<dyn Provider>,
    /// Where the scenario's numbers come from: live, record, or the replayed cassette.
    pub source: Source,
    /// Run after the scenario: the replay went as recorded, or the cassette was written.
    pub check: Option<SessionCheck>,
}

/// What a result of `variant` run against its emulator says it came from.
pub fn emulated_source(variant: &str) -> Source {
    Source::Emulated {
        emulator: sandbox_emulators::describe(variant),
    }
}

/// Opens `variant` for `scenario` in `mode`, configured by `settings` when it reaches a
/// service (the environment live, the emulator's settings emulated). Errors say what is
/// missing: a credential (named), a cassette (its path), a cassette that does not parse
/// (file and line).
pub async fn open_cloud(
    variant: &CloudVariant,
    scenario: &str,
    mode: &CloudMode,
    volatiles: Arc<Volatiles>,
    settings: &Settings,
) -> Result<CloudSession, String> {
    let name = variant.name;
    if let Some(grpc) = &variant.grpc
        && !matches!(mode, CloudMode::Live | CloudMode::Emulated { record: None })
    {
        return open_grpc(variant, grpc, scenario, mode, volatiles, settings).await;
    }
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    match mode {
        CloudMode::Live => Ok(CloudSession {
            provider: (variant.connect)(Mode::Live, volatiles, settings)
                .map_err(|e| format!("the {name} variant cannot run live: {e}"))?,
            source: Source::Live,
            check: None,
        }),
        CloudMode::Emulated { record: None } => Ok(CloudSession {
            provider: (variant.connect)(Mode::Live, volatiles, settings)
                .map_err(|e| format!("the {name} variant cannot reach its emulator: {e}"))?,
            source: emulated_source(name),
            check: None,
        }),
        CloudMode::Record { dir }
        | CloudMode::Emulated {
            record: Some(dir), ..
        } => {
            let (origin, source) = match mode {
                CloudMode::Record { .. } => (format!("recorded live {date}"), Source::Record),
                _ => (authored_origin(name, &date), emulated_source(name)),
            };
            let recorder = Arc::new(Recorder::new(
                checked_cassette_path(dir, name, scenario)?,
                origin,
                name,
                scenario,
            ));
            let provider = (variant.connect)(Mode::Record(recorder.clone()), volatiles, settings)
                .map_err(|e| format!("the {name} variant cannot record: {e}"))?;
            let answered = provider.clone();
            Ok(CloudSession {
                provider,
                source,
                check: Some(SessionCheck {
                    name: "record",
                    check: Box::new(move || {
                        // Live settings that reached our emulator author, not record.
                        if let Some(emulator) = answered.emulator() {
                            recorder.set_origin(format!("authored {date} through {emulator}"));
                        }
                        let exchanges = recorder.len();
                        recorder
                            .finish()
                            .map(|path| {
                                format!("{exchanges} exchanges written to {}", path.display())
                            })
                            .map_err(|e| e.to_string())
                    }),
                }),
            })
        }
        CloudMode::Replay { dir, pace } => {
            let path = existing_cassette(dir, name, scenario)?;
            let cassette = load_cassette(&path, name, scenario)?;
            let header = (cassette.origin.clone(), cassette.written.clone());
            let source = replay_source(dir, &path, *pace, Some(header));
            let server = ReplayServer::start(
                cassette,
                ReplayOptions {
                    pace: *pace,
                    credentials: (variant.replay_credentials)(),
                    volatiles: volatiles.clone(),
                    request_check: None,
                    matched_headers: variant.matched_headers,
                    cassette_path: Some(path.clone()),
                },
            )
            .await
            .map_err(|e| e.to_string())?;
            let origin = path.display().to_string();
            replay_session(variant, server.url(), *pace, volatiles, source, move || {
                let served = server.observed().len();
                server
                    .finish()
                    .map(|()| format!("{served} requests served as recorded in {origin}"))
                    .map_err(|e| e.to_string())
            })
        }
    }
}

/// The `origin:` of a cassette written through `variant`'s emulator on `date`.
fn authored_origin(variant: &str, date: &impl std::fmt::Display) -> String {
    format!(
        "authored {date} through {}",
        sandbox_emulators::describe(variant)
    )
}

/// The cassette of `name` × `scenario` under `dir`, which must exist: the error says where
/// it was looked for and how to make one.
fn existing_cassette(dir: &Path, name: &str, scenario: &str) -> Result<PathBuf, String> {
    let path = checked_cassette_path(dir, name, scenario)?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no cassette for {name} × {scenario} at {} (record one with --record, or run it with --live)",
            path.display()
        ))
    }
}

/// `variant` replaying from the server at `server_url`, its numbers from `source`, and
/// `finish` run after the scenario as its `replay` step.
fn replay_session(
    variant: &CloudVariant,
    server_url: String,
    pace: Pace,
    volatiles: Arc<Volatiles>,
    source: Source,
    finish: impl FnOnce() -> Result<String, String> + Send + 'static,
) -> Result<CloudSession, String> {
    let provider = (variant.connect)(
        Mode::Replay { server_url, pace },
        volatiles,
        &Settings::environment(),
    )
    .map_err(|e| format!("the {} variant cannot replay: {e}", variant.name))?;
    Ok(CloudSession {
        provider,
        source,
        check: Some(SessionCheck {
            name: "replay",
            check: Box::new(finish),
        }),
    })
}

/// [`open_cloud`] for a variant over gRPC, recording or replaying.
async fn open_grpc(
    variant: &CloudVariant,
    grpc: &GrpcWire,
    scenario: &str,
    mode: &CloudMode,
    volatiles: Arc<Volatiles>,
    settings: &Settings,
) -> Result<CloudSession, String> {
    let name = variant.name;
    let pool = (grpc.descriptors)();
    match mode {
        CloudMode::Live | CloudMode::Emulated { record: None } => Err(format!(
            "the {name} variant opens live and emulated through its connect"
        )),
        CloudMode::Record { dir }
        | CloudMode::Emulated {
            record: Some(dir), ..
        } => {
            let emulated = matches!(mode, CloudMode::Emulated { .. });
            let path = checked_cassette_path(dir, name, scenario)?;
            let options = GrpcOptions {
                name: Some(path.display().to_string()),
                ..(grpc.record_options)(volatiles.clone(), settings)
            };
            let recorder = GrpcRecorder::new(pool.clone(), options);
            let provider = (grpc.record)(recorder.clone(), volatiles, settings)
                .map_err(|e| format!("the {name} variant cannot record: {e}"))?;
            let answered = provider.clone();
            let (variant, scenario) = (name.to_owned(), scenario.to_owned());
            Ok(CloudSession {
                provider,
                source: if emulated {
                    emulated_source(name)
                } else {
                    Source::Record
                },
                check: Some(SessionCheck {
                    name: "record",
                    check: Box::new(move || {
                        let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
                        let cassette = recorder
                            .cassette(
                                match answered.emulator() {
                                    // Live settings that reached our emulator author.
                                    Some(emulator) => format!("authored {date} through {emulator}"),
                                    None if emulated => authored_origin(&variant, &date),
                                    None => format!("recorded live {date}"),
                                },
                                Some(date.to_string()),
                                variant,
                                scenario,
                            )
                            .map_err(|e| e.to_string())?;
                        let calls = cassette.exchanges.len();
                        cassette.save(&path).map_err(|e| e.to_string())?;
                        Ok(format!("{calls} calls written to {}", path.display()))
                    }),
                }),
            })
        }
        CloudMode::Replay { dir, pace } => {
            let path = existing_cassette(dir, name, scenario)?;
            let cassette = load_grpc_cassette(&path, pool, name, scenario)?;
            let header = (cassette.origin.clone(), cassette.written.clone());
            let source = replay_source(dir, &path, *pace, Some(header));
            let options = GrpcOptions {
                credentials: (variant.replay_credentials)(),
                volatiles: volatiles.clone(),
                matched_metadata: grpc
                    .matched_metadata
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
                name: Some(path.display().to_string()),
                pace: *pace,
            };
            let server = GrpcReplayServer::start(cassette, pool.clone(), options)
                .await
                .map_err(|e| e.to_string())?;
            let origin = path.display().to_string();
            replay_session(variant, server.url(), *pace, volatiles, source, move || {
                server
                    .finish()
                    .map(|()| format!("every call served as recorded in {origin}"))
                    .map_err(|e| e.to_string())
            })
        }
    }
}

/// The doctor baked into reference images: the standalone `datalayer-sandbox` built beside
/// `executable` when there is one (it is small), else `executable` itself, a sandbox-matrix
/// binary, which acts as the doctor when run under that name.
pub fn doctor_binary(executable: &Path) -> DoctorBinary {
    let sibling = executable.with_file_name(sandbox_contract::doctor::DOCTOR);
    DoctorBinary {
        path: if sibling.is_file() {
            sibling
        } else {
            executable.to_path_buf()
        },
        source_hash: env!("SANDBOX_MATRIX_DOCTOR_SOURCE_HASH").to_owned(),
    }
}

/// Connects to the docker variant; `root` is the project checkout (fixtures live there) and
/// `harness` the sandbox-matrix executable (it carries the doctor).
pub async fn connect_docker(root: &Path, harness: &Path) -> Result<Arc<dyn Provider>, String> {
    docker_provider(root, harness)
        .await
        .map(|p| Arc::new(p) as Arc<dyn Provider>)
}

/// The reference base's recipe in the checkout at `root`, with `harness` as its doctor.
pub fn base_recipe(root: &Path, harness: &Path) -> BaseRecipe {
    BaseRecipe::new(root.join(BASE_RECIPE_DIR), doctor_binary(harness))
}

/// A local variant connected for a run.
pub struct LocalSession {
    /// The variant's provider.
    pub provider: Arc<dyn Provider>,
    /// The registry started for the run when none is configured (datalayer); dropping it
    /// stops it, so it is dropped after the variant's cleanup.
    pub registry: Option<LocalRegistry>,
    /// Credentials made for the run (the local registry's logins), for the self-scan.
    pub secrets: Vec<Secret>,
    /// What the run set up for the variant, to say before it runs.
    pub note: Option<String>,
}

impl std::fmt::Debug for LocalSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSession")
            .field("variant", &self.provider.variant())
            .field("registry", &self.registry)
            .field("note", &self.note)
            .finish_non_exhaustive()
    }
}

/// Why a local variant cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalUnavailable {
    /// No engine answers, or what the variant starts for the run (its registry) does not
    /// start: the variant is not run (a failure when asked for by name).
    NotReady(String),
    /// Something it needs is not installed: its scenarios are skipped, with the command
    /// that installs it.
    Skipped(String),
    /// Its settings are wrong: bad input, before anything runs.
    Config(String),
}

impl std::fmt::Display for LocalUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotReady(e) | Self::Skipped(e) | Self::Config(e) => f.write_str(e),
        }
    }
}

/// The repository a run's own registry holds the datalayer variant's artifacts in.
pub const LOCAL_REPOSITORY: &str = "sandbox-matrix/environment";

/// Connects the local variant `name` (see [`LOCAL`]) for a run; `scratch` is where a
/// registry started for the run keeps its data. The datalayer variant pushes to the
/// registry its variables name ([`datalayer::REGISTRY_VAR`]) or, with none set, to one
/// started on loopback for the run with a pushing and a read-only user of its own.
pub async fn connect_local(
    name: &str,
    root: &Path,
    harness: &Path,
    scratch: &Path,
) -> Result<LocalSession, LocalUnavailable> {
    let docker = docker_provider(root, harness)
        .await
        .map_err(LocalUnavailable::NotReady)?;
    if name != "datalayer" {
        return Ok(LocalSession {
            provider: Arc::new(docker),
            registry: None,
            secrets: Vec::new(),
            note: None,
        });
    }
    if let Some(settings) = datalayer::Settings::from_env()
        .await
        .map_err(|e| LocalUnavailable::Config(e.to_string()))?
    {
        let note = format!(
            "pushing to {} as {}, pulling as {}",
            settings.repository,
            settings.push_login(),
            settings.pull.username
        );
        // A login token made for the run is in no variable the self-scan reads.
        let secrets = (settings.push.source == CredentialSource::EcrLoginToken)
            .then(|| settings.push.password.clone())
            .into_iter()
            .collect();
        return Ok(LocalSession {
            provider: Arc::new(datalayer::DatalayerProvider::new(docker, settings)),
            registry: None,
            secrets,
            note: Some(note),
        });
    }
    if let Some(reason) = local_skip(name) {
        return Err(LocalUnavailable::Skipped(reason));
    }
    // Made for this run, and good only against the registry that stops with it.
    let made =
        |name: &str, role: &str| Secret::new(name, format!("sm-run-{role}-{}", random_hex()));
    let (push, pull) = (
        made(datalayer::PUSH_PASSWORD_VAR, "push"),
        made(datalayer::PULL_PASSWORD_VAR, "pull"),
    );
    let (pusher, puller) = ("sandbox-matrix-push", "sandbox-matrix-pull");
    let started = {
        let scratch = scratch.to_owned();
        let (push, pull) = (push.expose().to_owned(), pull.expose().to_owned());
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&scratch)
                .map_err(|e| format!("cannot make {}: {e}", scratch.display()))?;
            LocalRegistry::start_with_puller(&scratch, (pusher, &push), (puller, &pull))
        })
        .await
        .map_err(|e| LocalUnavailable::NotReady(format!("starting a registry: {e}")))?
        .map_err(LocalUnavailable::NotReady)?
    };
    let repository = Repository::parse(&format!("{}/{LOCAL_REPOSITORY}", started.host))
        .map_err(|e| LocalUnavailable::Config(e.to_string()))?;
    let credential = |username: &str, password: &Secret| RegistryCredential {
        registry: started.host.clone(),
        username: username.to_owned(),
        password: password.clone(),
        source: CredentialSource::Static,
    };
    let settings = datalayer::Settings {
        repository,
        push: credential(pusher, &push),
        pull: credential(puller, &pull),
    };
    let note = format!(
        "no registry configured ({} unset): started one for this run on {} (docker-registry), pushing as {pusher}, pulling as the read-only {puller}",
        datalayer::REGISTRY_VAR,
        started.host
    );
    Ok(LocalSession {
        provider: Arc::new(datalayer::DatalayerProvider::new(docker, settings)),
        registry: Some(started),
        secrets: vec![push, pull],
        note: Some(note),
    })
}

/// Why the local variant `name` is skipped on this machine, known before connecting: the
/// datalayer variant with no registry configured where none can be started.
pub fn local_skip(name: &str) -> Option<String> {
    if name != "datalayer"
        || std::env::var_os(datalayer::REGISTRY_VAR).is_some_and(|v| !v.is_empty())
    {
        return None;
    }
    local_registry::missing_tools().map(|missing| {
        format!(
            "no registry configured ({} unset) and none can be started here: {missing}",
            datalayer::REGISTRY_VAR
        )
    })
}

/// The datalayer variant on the registry its variables configure, for a sweep; `None`
/// when none is configured (a run then used a registry of its own, gone with it).
pub async fn connect_datalayer_configured(
    root: &Path,
    harness: &Path,
) -> Result<Option<Arc<dyn Provider>>, String> {
    let Some(settings) = datalayer::Settings::from_env()
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let docker = docker_provider(root, harness).await?;
    Ok(Some(Arc::new(datalayer::DatalayerProvider::new(
        docker, settings,
    ))))
}

/// Where a run's own registry keeps its data while the run lasts; `sweep` removes what a
/// killed run left there.
pub fn run_scratch(run_id: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sandbox-matrix-{run_id}"))
}

/// [`connect_docker`]'s provider itself, for what only the docker variant does (pushing
/// the base). Its BuildKit builds are held by `harness hold-build`.
pub async fn docker_provider(root: &Path, harness: &Path) -> Result<DockerProvider, String> {
    DockerProvider::connect(base_recipe(root, harness))
        .await
        .map(|p| p.with_build_holder(harness.to_path_buf()))
        .map_err(|e| format!("the docker variant needs a Docker engine: {e}"))
}

#[cfg(test)]
mod tests;
