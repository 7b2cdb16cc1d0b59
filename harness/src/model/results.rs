//! The results of a run as data: what reporters render and `results.json` holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_providers::{Timing, duration_ms};
use serde::{Deserialize, Serialize};

/// The key of a build step's data that holds its artifact's compressed size in bytes.
pub const COMPRESSED_BYTES: &str = "compressed_bytes";
/// A launch's time from its create to its first correct `1+1`.
pub const CREATE_TO_FIRST_RESULT: &str = "create-to-first-result";
/// A launch's time from its create to the create's return.
pub const CREATED: &str = "created";
/// A launch's time from its create to its first command's success: the public boards'
/// TTI (time to interactive).
pub const TTI: &str = "tti";
/// The command whose first success ends TTI, as the public boards time it: a trivial
/// command through the provider's command channel that shows the runtime is there (the
/// boards run `node -v`; these sandboxes' runtime is Python).
pub const FIRST_COMMAND: [&str; 2] = ["python3", "--version"];
/// The first command's own duration, from its call to its answer.
pub const FIRST_COMMAND_SAMPLE: &str = "first-command";
/// The same command's own duration the second time, after the first `1+1`.
pub const SECOND_COMMAND_SAMPLE: &str = "second-command";

/// Version of the `results.json` schema; bump it on any incompatible change.
pub const RESULTS_SCHEMA_VERSION: &str = "sandbox-matrix/results/v2";

/// Why a `results.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not JSON, or not results of this schema; the message has line and column.
    #[error("{}", parse_message(path, source))]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The file has no `schema_version` string.
    #[error("{}: no `schema_version` string: not a sandbox-matrix results.json", path.display())]
    NoVersion {
        /// The file.
        path: PathBuf,
    },
    /// The file is of a schema version this harness does not read.
    #[error("{}: schema_version is `{}`, and this sandbox-matrix reads `{RESULTS_SCHEMA_VERSION}`", path.display(), sandbox_providers::yaml::cut(found, 200))]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it declares.
        found: String,
    },
}

/// `path:line:column: message`, the location said once and long values cut.
fn parse_message(path: &Path, source: &serde_json::Error) -> String {
    let (line, column) = (source.line(), source.column());
    let message = source.to_string();
    let message = message
        .strip_suffix(&format!(" at line {line} column {column}"))
        .unwrap_or(&message);
    // serde_json counts a position before a line's first character as column 0.
    format!(
        "{}:{}:{}: {}",
        path.display(),
        line.max(1),
        column.max(1),
        sandbox_providers::yaml::humane(message)
    )
}

/// The `schema_version` a results file declares, without reading the rest of it.
pub fn schema_version(path: &Path) -> Result<String, LoadError> {
    let value = read_json(path)?;
    value["schema_version"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| LoadError::NoVersion {
            path: path.to_owned(),
        })
}

/// Reads a `results.json`, refusing any schema version but [`RESULTS_SCHEMA_VERSION`].
pub fn load(path: &Path) -> Result<RunResults, LoadError> {
    let found = schema_version(path)?;
    if found != RESULTS_SCHEMA_VERSION {
        return Err(LoadError::Version {
            path: path.to_owned(),
            found,
        });
    }
    let text = read(path)?;
    serde_json::from_str(&text).map_err(|source| LoadError::Parse {
        path: path.to_owned(),
        source,
    })
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_json(path: &Path) -> Result<serde_json::Value, LoadError> {
    serde_json::from_str(&read(path)?).map_err(|source| LoadError::Parse {
        path: path.to_owned(),
        source,
    })
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    /// Always [`RESULTS_SCHEMA_VERSION`].
    pub schema_version: String,
    /// Where and with what the run happened.
    pub provenance: Provenance,
    /// One entry per variant × scenario, in run order.
    pub scenarios: Vec<ScenarioResult>,
    /// Per variant run live, what the provider's own inventory held of the run before its
    /// first repetition and after its last: the orphans. Absent for a run with none audited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<OrphanAudit>,
}

/// What the provider's own inventory held of one variant's part of a run, listed by the
/// run's labels (run, variant, scenario) before its first repetition and after its last
/// repetition's cleanup. A resource still listed then is an orphan: a create the run lost
/// track of, or one that appeared after a create failed or timed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanAudit {
    /// The variant.
    pub variant: String,
    /// Sandbox creates the run asked for (the ledger's intents), failed and timed-out
    /// ones included.
    pub creates: u64,
    /// Resources already listed before the first repetition.
    pub before: Vec<String>,
    /// Resources listed after the last repetition's cleanup, `kind id`: the orphans.
    pub orphans: Vec<String>,
    /// How many of the orphans this audit deleted.
    pub swept: usize,
}

impl OrphanAudit {
    /// Orphans per 1,000 creates; `None` with no create.
    pub fn per_1000(&self) -> Option<f64> {
        (self.creates > 0).then(|| self.orphans.len() as f64 * 1000.0 / self.creates as f64)
    }
}

/// Where a run happened and with what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Unique id of the run; also the label value on every resource it created.
    pub run_id: String,
    /// sandbox-matrix's version.
    pub harness_version: String,
    /// Host name of the machine that ran it.
    pub host: String,
    /// RFC 3339 time the run started.
    pub started_at: String,
    /// The base the run's environments built from: a registry reference by digest, or the
    /// local base and how it was made (the Debian image by digest, or mmdebstrap); absent
    /// when no docker build ran or for results written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The provenance of each run merged into this one (`sandbox-matrix merge`), in order;
    /// empty for a run that was not merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Provenance>,
    /// The share of the selection this run ran (`run --partition K/N`), as `K/N`; absent
    /// for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

/// One scenario run on one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Variant name, such as `docker`.
    pub variant: String,
    /// Scenario name, such as `lifecycle`.
    pub scenario: String,
    /// Where its numbers come from: `mode` (`live`, `record`, `replay`, `emulated`) and, for
    /// a replay, the cassette, for an emulated result, the emulator.
    #[serde(flatten)]
    pub source: Source,
    /// sha256 of the scenario file's bytes.
    pub scenario_hash: String,
    /// The immutable id of the artifact built or launched, once known.
    pub artifact_id: Option<String>,
    /// The provider's API or engine version, where known.
    pub provider_version: Option<String>,
    /// Where the provider ran it (a region or location), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// What the variant could do, as it declared it.
    pub capabilities: Option<sandbox_providers::Capabilities>,
    /// Steps in order; steps after a failure are skipped, cleanup always runs.
    pub steps: Vec<StepResult>,
    /// Timings that span steps, such as `create-to-first-result`.
    pub timings: Vec<Timing>,
    /// Resources still listed under the run's label after cleanup.
    pub leaked_resources: Vec<sandbox_providers::Resource>,
    /// Build-time secrets found in the sandbox or artifact: `name at location`.
    pub secrets_found: Vec<String>,
    /// Which repetition of the scenario this is, from 1 (`run --repeat N`).
    #[serde(default = "first_repetition")]
    pub repetition: u32,
    /// Values measured many times within the scenario (a burst's launches), each a value or
    /// a failed attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// What the variant did with the credential for the base's registry, once it built:
    /// the table's "Credential for the private base" row (see
    /// `sandbox_providers::Provider::credential_use`). Absent when nothing was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_credential: Option<String>,
    /// How much the secrets scan covered, once it scanned. Absent when it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_scan: Option<ScanCoverage>,
    /// The launched artifact's base as its pulled provenance names it, and whether it is
    /// approved: the table's "Base-image chain" row. Absent when the `base-chain` step did
    /// not read one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_chain: Option<BaseChain>,
    /// What the `lifetime` step saw of a sandbox asked to end after a time: the table's
    /// "Lifetime" row. Absent when the step did not launch one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<LifetimeSeen>,
}

/// A sandbox asked at create to end after [`LifetimeSeen::asked`], as the `lifetime` step
/// watched it; every time is counted from its create request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifetimeSeen {
    /// The lifetime asked for: the step's `timeout`, rounded up to the provider's unit.
    #[serde(with = "duration_ms")]
    pub asked: Duration,
    /// What the provider counts it from: `create` or `last activity`.
    pub counts_from: String,
    /// When create returned.
    #[serde(with = "duration_ms")]
    pub created: Duration,
    /// The last time it was seen alive (running, and answering `1+1` where the limit
    /// counts from create).
    #[serde(
        default,
        with = "sandbox_providers::opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub alive_at: Option<Duration>,
    /// The first time it was seen gone; absent when it was still there at the end.
    #[serde(
        default,
        with = "sandbox_providers::opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub gone_at: Option<Duration>,
    /// How the provider says it ended, once gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<String>,
    /// It was seen gone before its limit could have passed: an early death.
    pub early: bool,
    /// How often it was looked at: the resolution of `alive_at` and `gone_at`.
    #[serde(with = "duration_ms")]
    pub every: Duration,
}

impl LifetimeSeen {
    /// How long past its limit it was last seen, counted from when create returned (the
    /// latest the provider can have started its clock); zero when gone in time.
    pub fn overrun(&self) -> Option<Duration> {
        self.gone_at
            .map(|gone| gone.saturating_sub(self.created + self.asked))
    }
}

/// The launched artifact, the base its provenance names, and that base's approval, as
/// the `base-chain` step read them from the attestation it pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseChain {
    /// The artifact launched, by digest.
    pub launched: String,
    /// Where the provenance was pulled from.
    pub read_from: String,
    /// The base as the provenance names it: a registry reference by digest, or the local
    /// base's tag.
    pub base: String,
    /// The base's `sha256:` digest in the provenance (an image id, for a local base).
    pub base_digest: String,
    /// The provenance marks the base as only in the building engine.
    pub local: bool,
    /// The base is approved.
    pub approved: bool,
    /// How: `local, approved by tag`, `listed in <file>`, or why not.
    pub approval: String,
}

/// How much a secrets scan covered: a scan that ran as a user other than root, or could
/// not read some files, is partial, as a secret readable only by root would not be seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanCoverage {
    /// What scanned: `the image's doctor` or `the Python probe`.
    pub scanner: String,
    /// Files read.
    pub files_scanned: u64,
    /// Files and folders it could not read.
    pub unreadable: u64,
    /// The uid it ran as.
    pub uid: u32,
}

impl ScanCoverage {
    /// True when it ran as non-root or could not read everything.
    pub fn partial(&self) -> bool {
        self.uid != 0 || self.unreadable > 0
    }

    /// `partial (uid 1000, 8 unreadable)`, or `full (uid 0, 5120 files)`.
    pub fn describe(&self) -> String {
        if self.partial() {
            format!("partial (uid {}, {} unreadable)", self.uid, self.unreadable)
        } else {
            format!("full (uid 0, {} files)", self.files_scanned)
        }
    }
}

fn first_repetition() -> u32 {
    1
}

/// Where a scenario result's numbers come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Source {
    /// Measured against the provider (or the local engine).
    Live,
    /// Measured against the provider while writing a cassette.
    Record,
    /// Served from a cassette on loopback: its timings are not the provider's.
    Replay {
        /// The cassette and how it was paced.
        replay: Replay,
    },
    /// Measured against sandbox-matrix's own emulator of the provider over the local
    /// engine (`run --emulated`): its timings are real, but of the emulator, not the provider.
    Emulated {
        /// What answered, such as `sandbox-matrix 0.x's e2b emulator over the local Docker
        /// engine (20.10.24)`.
        emulator: String,
    },
}

impl Source {
    /// The mode alone.
    pub fn mode(&self) -> Mode {
        match self {
            Source::Live => Mode::Live,
            Source::Record => Mode::Record,
            Source::Replay { .. } => Mode::Replay,
            Source::Emulated { .. } => Mode::Emulated,
        }
    }

    /// Whose numbers these are: the provider's, a cassette's or the emulator's.
    pub fn class(&self) -> Class {
        self.mode().class()
    }

    /// True when the numbers were measured against the provider: live or recording.
    pub fn is_measured(&self) -> bool {
        self.class() == Class::Measured
    }

    /// True when the numbers were measured against sandbox-matrix's emulator.
    pub fn is_emulated(&self) -> bool {
        self.class() == Class::Emulated
    }

    /// The pace of the replay, when the result was replayed: replays at different paces
    /// are different measurements.
    pub fn pace(&self) -> Option<ReplayPace> {
        self.replay().map(|replay| replay.pace)
    }

    /// The cassette, when the result was replayed.
    pub fn replay(&self) -> Option<&Replay> {
        match self {
            Source::Replay { replay } => Some(replay),
            Source::Live | Source::Record | Source::Emulated { .. } => None,
        }
    }

    /// What answered, when the result was emulated.
    pub fn emulator(&self) -> Option<&str> {
        match self {
            Source::Emulated { emulator } => Some(emulator),
            Source::Live | Source::Record | Source::Replay { .. } => None,
        }
    }
}

/// How a result was obtained, without the cassette: what reports name in headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Measured against the provider.
    Live,
    /// Measured against the provider while writing a cassette.
    Record,
    /// Served from a cassette.
    Replay,
    /// Measured against sandbox-matrix's emulator of the provider.
    Emulated,
}

impl Mode {
    /// Whose numbers a result of this mode holds.
    pub fn class(self) -> Class {
        match self {
            Mode::Live | Mode::Record => Class::Measured,
            Mode::Replay => Class::Replayed,
            Mode::Emulated => Class::Emulated,
        }
    }
}

impl std::fmt::Display for Mode {
    /// `live`, `record`, `replay` or `emulated`, as `results.json` names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Live => "live",
            Mode::Record => "record",
            Mode::Replay => "replay",
            Mode::Emulated => "emulated",
        })
    }
}

/// Whose numbers a result holds. Results of different classes are never pooled in one
/// column, suite, statistic or verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// The provider's: live or recording.
    Measured,
    /// A cassette's: replayed.
    Replayed,
    /// sandbox-matrix's emulator's, over the local engine.
    Emulated,
}

/// The modes of several results pooled together, shown as `live`, `replay` or
/// `live+replay`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes(std::collections::BTreeSet<Mode>);

impl Modes {
    /// The modes of `sources`.
    pub fn of<'a>(sources: impl IntoIterator<Item = &'a Source>) -> Modes {
        sources.into_iter().map(Source::mode).collect()
    }

    /// Each mode, in the order live, record, replay, emulated.
    pub fn iter(&self) -> impl Iterator<Item = Mode> + '_ {
        self.0.iter().copied()
    }

    /// True when some result was replayed.
    pub fn any_replayed(&self) -> bool {
        self.0.contains(&Mode::Replay)
    }

    /// True when some result was measured against the provider (live or recording).
    pub fn any_measured(&self) -> bool {
        self.0.iter().any(|mode| mode.class() == Class::Measured)
    }

    /// True when some result was measured against sandbox-matrix's emulator.
    pub fn any_emulated(&self) -> bool {
        self.0.contains(&Mode::Emulated)
    }
}

impl FromIterator<Mode> for Modes {
    fn from_iter<I: IntoIterator<Item = Mode>>(modes: I) -> Self {
        Modes(modes.into_iter().collect())
    }
}

impl std::fmt::Display for Modes {
    /// The modes in the order live, record, replay, emulated, joined by `+`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.iter().map(Mode::to_string).collect();
        f.write_str(&names.join("+"))
    }
}

/// The cassette a result was replayed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    /// The cassette's path: relative to the project root for the default cassettes folder,
    /// else as given.
    pub cassette: String,
    /// The cassette header's `origin:`; `None` when the cassette could not be read.
    pub origin: Option<String>,
    /// The cassette header's `written:` (`YYYY-MM-DD` or RFC 3339); `None` when unknown.
    pub written: Option<String>,
    /// How responses were paced.
    pub pace: ReplayPace,
}

impl Replay {
    /// The date the cassette was written (`YYYY-MM-DD`); `None` when it does not say.
    pub fn written_date(&self) -> Option<&str> {
        self.written
            .as_deref()
            .map(|written| written.get(..10).unwrap_or(written))
    }
}

/// How a replay paced its responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayPace {
    /// Every response at once: timings measure the harness, not the provider.
    Instant,
    /// Each response after its recorded latency: timings are the recording's.
    Recorded,
    /// Each response after one fixed delay, to measure the harness's overhead.
    Fixed,
}

impl std::fmt::Display for ReplayPace {
    /// `instant`, `recorded` or `fixed`, as `results.json` names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplayPace::Instant => "instant",
            ReplayPace::Recorded => "recorded",
            ReplayPace::Fixed => "fixed",
        })
    }
}

impl From<sandbox_providers::api::replay::Pace> for ReplayPace {
    fn from(pace: sandbox_providers::api::replay::Pace) -> Self {
        use sandbox_providers::api::replay::Pace;
        match pace {
            Pace::Instant => ReplayPace::Instant,
            Pace::Recorded => ReplayPace::Recorded,
            Pace::Fixed(_) => ReplayPace::Fixed,
        }
    }
}

/// One attempt at a timing inside a scenario: its value, or why it failed. A failed
/// attempt counts as +∞ in percentiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The timing's name, such as `create-to-first-result`.
    pub name: String,
    /// The measured span, or `None` when the attempt failed.
    #[serde(default, with = "sandbox_providers::opt_duration_ms")]
    pub value: Option<Duration>,
    /// Why the attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum StepStatus {
    /// It met its expectation within its budget.
    Passed,
    /// It did not; `reason` says what happened instead.
    Failed {
        /// What failed, for a person.
        reason: String,
    },
    /// It did not run; `reason` says why (an earlier failure, a missing capability).
    Skipped {
        /// Why it did not run.
        reason: String,
    },
}

/// One step's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The step's name, such as `first-result`.
    pub step: String,
    /// Passed, failed or skipped.
    #[serde(flatten)]
    pub status: StepStatus,
    /// Wall time of the step, on a monotonic clock.
    #[serde(with = "duration_ms")]
    pub duration: Duration,
    /// When the step started, from the scenario's start on the same clock; `None` for a
    /// step that did not run. Steps that ran at the same time overlap.
    #[serde(
        default,
        with = "sandbox_providers::opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub started: Option<Duration>,
    /// The step's budget.
    #[serde(with = "duration_ms")]
    pub budget: Duration,
    /// Timings measured inside the step.
    pub timings: Vec<Timing>,
    /// Log lines (build output, answers), credentials redacted.
    pub log: Vec<String>,
    /// What a conformance check's probe answered and measured, when the step is a check;
    /// for a build that pushed its artifact, its size (`compressed_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// For a `build` step that did not build: the artifact it took from an earlier scenario
    /// of the run that built the same environment. Its duration times no build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused: Option<ReusedArtifact>,
}

/// An artifact a scenario took from an earlier scenario of the same run instead of building.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReusedArtifact {
    /// The artifact's immutable id.
    pub artifact: String,
    /// The scenario whose build step made it.
    pub built_in: String,
}

impl ScenarioResult {
    /// The step named `step`, if it is part of this scenario.
    pub fn step(&self, step: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.step == step)
    }

    /// A cross-step timing by name.
    pub fn timing(&self, name: &str) -> Option<&Timing> {
        self.timings.iter().find(|t| t.name == name)
    }

    /// True when no step failed.
    pub fn passed(&self) -> bool {
        !self
            .steps
            .iter()
            .any(|s| matches!(s.status, StepStatus::Failed { .. }))
    }
}

#[cfg(test)]
mod tests;
