//! Scenario files: pure data naming an environment and the steps to run, each with a budget.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::checks::conformance::{Check, CheckParams};
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};

/// A step a scenario can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    /// Build the environment artifact; passes when an immutable id comes back.
    Build,
    /// Build the same environment again, with the inputs of the build that made the
    /// artifact, so the provider's cache can serve it; passes when an id comes back.
    Rebuild,
    /// Start a sandbox from the immutable id; passes when it runs.
    Launch,
    /// Run code (default `1+1`) on the code channel; passes when the answer is the expected one.
    FirstResult,
    /// Restart the kernel (or the sandbox); passes when state is gone and code answers again.
    Restart,
    /// Pull the launched artifact's provenance from where the provider keeps it and read
    /// its base; passes when that base is approved (`policies/approved-bases.yaml`, or the
    /// local base by its tag).
    BaseChain,
    /// Look for build-time credentials in the sandbox and artifact; passes when none is found.
    SecretsScan,
    /// Stop the sandbox; passes when it stopped on SIGTERM within the grace period.
    Shutdown,
    /// Delete everything the run created; passes when a listing by the run's label is empty.
    Cleanup,
    /// Run the contract's doctor in the sandbox; passes when every row passes.
    Doctor,
    /// Launch many sandboxes at once from the built artifact (see [`LaunchMode`]); passes
    /// when every launch answered.
    Burst,
    /// Launch sandboxes one after another, each stopped before the next is created; passes
    /// when every launch answered.
    Sequential,
    /// Launch sandboxes `interval` apart (200 ms unless given), each left running until
    /// all are timed; passes when every launch answered.
    Staggered,
    /// Launch one sandbox asking the provider to end it after `timeout`; passes when it is
    /// alive just before that and gone by `within` after it.
    Lifetime,
    /// A conformance check, written `check: <name>` in a scenario file.
    #[serde(skip_deserializing)]
    Check,
}

impl StepKind {
    /// Every step a scenario names with `step:`, lifecycle order first.
    pub const ALL: [StepKind; 14] = [
        StepKind::Build,
        StepKind::Rebuild,
        StepKind::Launch,
        StepKind::BaseChain,
        StepKind::FirstResult,
        StepKind::Restart,
        StepKind::SecretsScan,
        StepKind::Shutdown,
        StepKind::Cleanup,
        StepKind::Doctor,
        StepKind::Burst,
        StepKind::Sequential,
        StepKind::Staggered,
        StepKind::Lifetime,
    ];

    /// The step's name as scenario files and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Build => "build",
            StepKind::Rebuild => "rebuild",
            StepKind::Launch => "launch",
            StepKind::FirstResult => "first-result",
            StepKind::Restart => "restart",
            StepKind::BaseChain => "base-chain",
            StepKind::SecretsScan => "secrets-scan",
            StepKind::Shutdown => "shutdown",
            StepKind::Cleanup => "cleanup",
            StepKind::Doctor => "doctor",
            StepKind::Burst => "burst",
            StepKind::Sequential => "sequential",
            StepKind::Staggered => "staggered",
            StepKind::Lifetime => "lifetime",
            StepKind::Check => "check",
        }
    }
}

impl StepKind {
    /// The steps that launch many sandboxes and time each ([`LaunchMode`]).
    pub fn launches_many(self) -> bool {
        matches!(
            self,
            StepKind::Burst | StepKind::Sequential | StepKind::Staggered
        )
    }
}

/// How a `burst`, `sequential` or `staggered` step paces its launches, as the public
/// sandbox boards run their three modes: all at once, one after another (each stopped
/// before the next), or a fixed interval apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchMode {
    /// Every create at the same moment.
    Burst,
    /// One launch at a time, each stopped before the next create.
    Sequential,
    /// Creates this far apart, whatever the earlier ones are doing.
    Staggered(Duration),
}

/// The interval of a `staggered` step that names none: the public boards' 200 ms.
pub const DEFAULT_STAGGER: Duration = Duration::from_millis(200);
/// How long past its timeout a `lifetime` step waits for the sandbox to be gone, unless
/// `within:` says: Daytona's auto-stop check runs once a minute, and a stop takes time.
pub const DEFAULT_LIFETIME_WITHIN: Duration = Duration::from_secs(90);

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One step of a scenario as written in the file: `step: <kind>` or `check: <name>`, and
/// the fields that kind takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    step: Option<Spanned<StepKind>>,
    check: Option<Spanned<Check>>,
    #[serde(deserialize_with = "bounded::duration")]
    budget: Duration,
    code: Option<Spanned<String>>,
    expect: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "bounded::within")]
    within: Option<Duration>,
    packages: Option<BTreeMap<String, String>>,
    allowed: Option<Vec<String>>,
    blocked: Option<Vec<String>>,
    #[serde(default, deserialize_with = "bounded::gpus")]
    gpus: Option<u32>,
    cuda: Option<String>,
    #[serde(default, deserialize_with = "bounded::minimum")]
    minimum: Option<f64>,
    #[serde(default, deserialize_with = "bounded::kernels")]
    kernels: Option<u32>,
    #[serde(default, deserialize_with = "bounded::launches")]
    launches: Option<u32>,
    #[serde(default, deserialize_with = "bounded::within")]
    interval: Option<Duration>,
    #[serde(default, deserialize_with = "bounded::within")]
    timeout: Option<Duration>,
    accept_partial: Option<Spanned<Vec<String>>>,
}

/// Range checks run while the file is read, so the parser's error carries the value's
/// line and column.
mod bounded {
    use std::time::Duration;

    use serde::de::Error;
    use serde::{Deserialize, Deserializer};

    use super::{MAX_DURATION, MAX_GPUS, MAX_KERNELS, MAX_LAUNCHES, MAX_MINIMUM};

    /// A duration as humantime writes it (`30s`, `5m`), at most [`MAX_DURATION`].
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        // Long values are cut where the message is made for people.
        let shown = &text;
        let value = humantime::parse_duration(&text).map_err(|e| {
            D::Error::custom(format!(
                "`{shown}` is not a duration ({e}); expected a duration such as `30s` or `5m`"
            ))
        })?;
        if value > MAX_DURATION {
            return Err(D::Error::custom(format!(
                "`{shown}` is out of range; a duration is at most 24h"
            )));
        }
        Ok(value)
    }

    /// An optional `within:`, as [`duration`].
    pub fn within<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        duration(d).map(Some)
    }

    fn count<'de, D: Deserializer<'de>>(
        d: D,
        field: &str,
        low: u32,
        high: u32,
    ) -> Result<Option<u32>, D::Error> {
        let n = i128::deserialize(d)?;
        if n < i128::from(low) || n > i128::from(high) {
            return Err(D::Error::custom(format!(
                "`{field}: {n}` is out of range; it is {low} to {high}"
            )));
        }
        Ok(Some(n as u32))
    }

    pub fn gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        count(d, "gpus", 0, MAX_GPUS)
    }

    pub fn kernels<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        count(d, "kernels", 1, MAX_KERNELS)
    }

    pub fn launches<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        count(d, "launches", 1, MAX_LAUNCHES)
    }

    /// MiB per second: a finite number above 0, at most [`MAX_MINIMUM`].
    pub fn minimum<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        let x = f64::deserialize(d)?;
        if !(x.is_finite() && x > 0.0 && x <= MAX_MINIMUM) {
            return Err(D::Error::custom(format!(
                "`minimum: {}` is out of range; it is MiB per second, above 0 and at most {MAX_MINIMUM}",
                if x.abs() >= 1e9 {
                    format!("{x:e}")
                } else {
                    x.to_string()
                }
            )));
        }
        Ok(Some(x))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    environment: String,
    #[serde(default)]
    fresh: bool,
    steps: Spanned<Vec<Spanned<StepFile>>>,
}

/// One step with its budget and expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Which step.
    pub kind: StepKind,
    /// The deadline for the whole step.
    pub budget: Duration,
    /// What the step expects, where it takes an expectation.
    pub expect: Expectation,
}

/// What a step must observe to pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Expectation {
    /// The step's own definition of success (see [`StepKind`]).
    Default,
    /// `first-result`: running `code` answers exactly `answer`.
    Answer {
        /// Code sent to the code channel.
        code: String,
        /// The expected `text/plain` result.
        answer: String,
    },
    /// `shutdown`: the sandbox stopped on SIGTERM within this time.
    StoppedWithin(Duration),
    /// `doctor` or `check: <name>`: the conformance check and what it is given.
    Check(Check, CheckParams),
    /// `burst`, `sequential` and `staggered`: how many sandboxes to launch, and how.
    Launches(u32, LaunchMode),
    /// `lifetime`: the sandbox is asked to end `timeout` after its create (or its last
    /// activity), and must be gone `within` after that.
    Ends {
        /// The lifetime asked for at create.
        timeout: Duration,
        /// How long past it the sandbox may still be seen.
        within: Duration,
    },
    /// `secrets-scan`: the variants whose partial scan (as non-root, or with unreadable
    /// files) is accepted, as they offer no root to scan with. Any other variant's partial
    /// scan fails.
    PartialScansFrom(Vec<String>),
}

/// A parsed scenario file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario's name, used in reports and test names.
    pub name: String,
    /// What the scenario checks, for a person.
    pub description: String,
    /// The environment directory (Dockerfile and context), resolved against the file's folder.
    pub environment: PathBuf,
    /// `fresh: true`: the scenario builds its own artifact instead of reusing one an
    /// earlier scenario of the run built from the same environment.
    pub fresh: bool,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// The file it was read from.
    pub path: PathBuf,
    /// sha256 of the file's bytes, hex.
    pub hash: String,
}

/// Why a scenario file could not be used. Nothing runs when one fails to load.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid scenario; the message names line and column.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line, 0 when unknown.
        line: u64,
        /// 1-based column, 0 when unknown.
        column: u64,
        /// What was expected there.
        message: String,
    },
}

/// The scenario default for `first-result`.
pub const DEFAULT_CODE: &str = "1+1";
/// The answer `first-result` expects by default.
pub const DEFAULT_ANSWER: &str = "2";
/// The most sandboxes one burst launches.
pub const MAX_LAUNCHES: u32 = 1000;
/// The longest budget or `within` a scenario may give: 24 hours. Anything longer could not
/// be written to results.json and read back.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);
/// The most kernels `concurrent-kernels` starts.
pub const MAX_KERNELS: u32 = 64;
/// The most GPUs a `gpu` check expects.
pub const MAX_GPUS: u32 = 64;
/// The highest `minimum` throughput, in MiB per second.
pub const MAX_MINIMUM: f64 = 1_000_000.0;
/// The contract's graceful shutdown.
pub const DEFAULT_STOP_WITHIN: Duration =
    Duration::from_secs(sandbox_contract::GRACEFUL_SHUTDOWN_SECS);

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let bytes = std::fs::read(path).map_err(|source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&good[line_start..]).chars().count() as u64 + 1;
            ScenarioError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message: "not UTF-8 text: a scenario file is UTF-8, and this byte is not".into(),
            }
        })?;
        Self::parse(path, &text)
    }

    /// Parses scenario text; `path` names the file in errors and anchors the environment.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ScenarioError> {
        let invalid = |line: u64, column: u64, message: String| ScenarioError::Invalid {
            path: path.to_owned(),
            line,
            column,
            message,
        };
        let file: ScenarioFile = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column, message) = sandbox_providers::yaml::describe(&e);
            invalid(line, column, in_scenario_words(message))
        })?;
        if let Some(why) = crate::paths::unsafe_name(&file.name.value) {
            let at = &file.name.referenced;
            return Err(invalid(
                at.line(),
                at.column(),
                format!(
                    "scenario name `{}` {why}; a name is a file name: letters, digits, `-`, `_` and `.`, not starting with `.`",
                    crate::paths::cut(&file.name.value)
                ),
            ));
        }
        if file.steps.value.is_empty() {
            let at = &file.steps.referenced;
            return Err(invalid(
                at.line(),
                at.column(),
                "`steps` is empty; a scenario needs at least one step".into(),
            ));
        }
        let mut steps = Vec::with_capacity(file.steps.value.len());
        for s in file.steps.value {
            let at = s.referenced;
            steps.push(step_from_file(s.value, &at, &invalid)?);
        }
        let base = path.parent().unwrap_or(Path::new("."));
        Ok(Scenario {
            name: file.name.value,
            description: file.description,
            environment: base.join(file.environment),
            fresh: file.fresh,
            steps,
            path: path.to_owned(),
            hash: hex(&Sha256::digest(text.as_bytes())),
        })
    }

    /// What `run` needs before anything starts, checked by `list` too: the environment is a
    /// folder holding a Dockerfile, `launch` and `burst` come after a `build`, and steps
    /// that use a sandbox come after a `launch`. Errors point at the file's
    /// `environment:` or at the step.
    pub fn check_runnable(&self) -> Result<(), ScenarioError> {
        /// Where things stand in the file; every other field is ignored here.
        #[derive(Deserialize)]
        struct Located {
            environment: Spanned<serde::de::IgnoredAny>,
            steps: Vec<Spanned<serde::de::IgnoredAny>>,
        }
        let located = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|text| serde_saphyr::from_str::<Located>(&text).ok());
        let invalid =
            |at: Option<&serde_saphyr::Location>, message: String| ScenarioError::Invalid {
                path: self.path.clone(),
                line: at.map_or(1, |l| l.line()),
                column: at.map_or(1, |l| l.column()),
                message,
            };
        let environment_at = located.as_ref().map(|l| &l.environment.referenced);
        if !self.environment.is_dir() {
            return Err(invalid(
                environment_at,
                format!(
                    "environment folder {} does not exist",
                    self.environment.display()
                ),
            ));
        }
        if !self.environment.join("Dockerfile").is_file() {
            return Err(invalid(
                environment_at,
                format!(
                    "environment folder {} has no Dockerfile",
                    self.environment.display()
                ),
            ));
        }
        let (mut built, mut launched) = (false, false);
        for (i, step) in self.steps.iter().enumerate() {
            let at = located
                .as_ref()
                .and_then(|l| l.steps.get(i))
                .map(|s| &s.referenced);
            let needs = match step.kind {
                StepKind::Build => {
                    built = true;
                    None
                }
                StepKind::Launch
                | StepKind::Burst
                | StepKind::Sequential
                | StepKind::Staggered
                | StepKind::Lifetime
                | StepKind::Rebuild
                    if !built =>
                {
                    Some("`build`")
                }
                StepKind::Rebuild => None,
                StepKind::Launch => {
                    launched = true;
                    None
                }
                StepKind::Burst
                | StepKind::Sequential
                | StepKind::Staggered
                | StepKind::Lifetime
                | StepKind::Cleanup => None,
                _ if !launched => Some("`launch`"),
                _ => None,
            };
            if let Some(earlier) = needs {
                return Err(invalid(
                    at,
                    format!("step `{}` needs a {earlier} step before it", step.name()),
                ));
            }
        }
        Ok(())
    }

    /// The first step of `kind`, if the scenario has it.
    pub fn step(&self, kind: StepKind) -> Option<&Step> {
        self.steps.iter().find(|s| s.kind == kind)
    }
}

/// The parser's "unknown variant" for a `step:` or `check:` value, in this file's words: a
/// variant, here, is a provider.
fn in_scenario_words(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown variant `") else {
        return message;
    };
    let Some((value, expected)) = rest.split_once("`, expected one of ") else {
        return message;
    };
    let what = if expected.contains("first-result") {
        "step"
    } else if expected.contains("concurrent-kernels") {
        "check"
    } else {
        return message;
    };
    format!(
        "an unknown {what} `{value}`; a {what} is one of {}",
        expected.replace('`', "")
    )
}

/// Turns one step as written into a [`Step`], refusing fields the step does not take.
fn step_from_file(
    s: StepFile,
    at: &serde_saphyr::Location,
    invalid: &dyn Fn(u64, u64, String) -> ScenarioError,
) -> Result<Step, ScenarioError> {
    // `accept_partial:` names known variants only.
    let accept_partial = |list: Option<Spanned<Vec<String>>>| match list {
        None => Ok(None),
        Some(variants) => {
            let known = crate::run::variant_names::VARIANT_NAMES;
            match variants.value.iter().find(|v| !known.contains(&v.as_str())) {
                Some(unknown) => Err(invalid(
                    variants.referenced.line(),
                    variants.referenced.column(),
                    format!(
                        "`accept_partial` names `{unknown}`, which is no variant; known: {}",
                        known.join(", ")
                    ),
                )),
                None => Ok(Some(variants.value)),
            }
        }
    };
    let (kind, check, loc) = match (&s.step, &s.check) {
        (Some(step), None) => (
            step.value,
            (step.value == StepKind::Doctor).then_some(Check::Doctor),
            &step.referenced,
        ),
        (None, Some(check)) => (StepKind::Check, Some(check.value), &check.referenced),
        (Some(step), Some(_)) => {
            let l = &step.referenced;
            return Err(invalid(
                l.line(),
                l.column(),
                "a step has `step:` or `check:`, not both".into(),
            ));
        }
        (None, None) => {
            return Err(invalid(
                at.line(),
                at.column(),
                "every step needs `step: <kind>` or `check: <name>`".into(),
            ));
        }
    };
    let (line, column) = (loc.line(), loc.column());
    let name = check.map_or(kind.name(), Check::step_name);
    if s.budget.is_zero() {
        return Err(invalid(
            line,
            column,
            format!("step `{name}` has a zero budget; give it one such as `30s`"),
        ));
    }
    let is = |c: Check| check == Some(c);
    let fields: [(&str, bool, bool); 14] = [
        ("code", s.code.is_some(), kind == StepKind::FirstResult),
        (
            "expect",
            s.expect.is_some(),
            kind == StepKind::FirstResult || is(Check::Python),
        ),
        (
            "within",
            s.within.is_some(),
            kind == StepKind::Shutdown || kind == StepKind::Lifetime || is(Check::ColdStart),
        ),
        ("timeout", s.timeout.is_some(), kind == StepKind::Lifetime),
        ("packages", s.packages.is_some(), is(Check::Imports)),
        ("allowed", s.allowed.is_some(), is(Check::Egress)),
        ("blocked", s.blocked.is_some(), is(Check::Egress)),
        ("gpus", s.gpus.is_some(), is(Check::Gpu)),
        ("cuda", s.cuda.is_some(), is(Check::Gpu)),
        ("minimum", s.minimum.is_some(), is(Check::Throughput)),
        ("kernels", s.kernels.is_some(), is(Check::ConcurrentKernels)),
        ("launches", s.launches.is_some(), kind.launches_many()),
        (
            "interval",
            s.interval.is_some(),
            kind == StepKind::Staggered,
        ),
        (
            "accept_partial",
            s.accept_partial.is_some(),
            kind == StepKind::SecretsScan || is(Check::Secrets),
        ),
    ];
    if let Some((field, _, _)) = fields
        .iter()
        .find(|(_, present, allowed)| *present && !allowed)
    {
        let at = match *field {
            "code" => s.code.as_ref().map(|c| &c.referenced),
            "expect" => s.expect.as_ref().map(|c| &c.referenced),
            _ => None,
        }
        .unwrap_or(loc);
        return Err(invalid(
            at.line(),
            at.column(),
            format!("`{field}` does not apply to `{name}`"),
        ));
    }
    let expect = match (kind, check) {
        (StepKind::FirstResult, _) => Expectation::Answer {
            code: s
                .code
                .map(|c| c.value)
                .unwrap_or_else(|| DEFAULT_CODE.to_owned()),
            answer: s
                .expect
                .map(|e| e.value)
                .unwrap_or_else(|| DEFAULT_ANSWER.to_owned()),
        },
        (StepKind::Shutdown, _) => {
            Expectation::StoppedWithin(s.within.unwrap_or(DEFAULT_STOP_WITHIN))
        }
        (StepKind::SecretsScan, _) => match accept_partial(s.accept_partial)? {
            Some(variants) => Expectation::PartialScansFrom(variants),
            None => Expectation::Default,
        },
        (StepKind::Burst | StepKind::Sequential | StepKind::Staggered, _) => {
            let Some(n) = s.launches else {
                return Err(invalid(
                    line,
                    column,
                    format!("`{name}` needs `launches: <n>`, how many sandboxes to start"),
                ));
            };
            let mode = match kind {
                StepKind::Burst => LaunchMode::Burst,
                StepKind::Sequential => LaunchMode::Sequential,
                _ => LaunchMode::Staggered(s.interval.unwrap_or(DEFAULT_STAGGER)),
            };
            Expectation::Launches(n, mode)
        }
        (StepKind::Lifetime, _) => {
            let Some(timeout) = s.timeout else {
                return Err(invalid(
                    line,
                    column,
                    "`lifetime` needs `timeout: <duration>`, the lifetime asked for at create"
                        .into(),
                ));
            };
            let within = s.within.unwrap_or(DEFAULT_LIFETIME_WITHIN);
            if s.budget <= timeout + within {
                return Err(invalid(
                    line,
                    column,
                    format!(
                        "`lifetime`'s budget ({}) must be longer than its timeout ({}) and `within` ({}) together, with room for the launch",
                        humantime::format_duration(s.budget),
                        humantime::format_duration(timeout),
                        humantime::format_duration(within)
                    ),
                ));
            }
            Expectation::Ends { timeout, within }
        }
        (_, Some(check)) => Expectation::Check(
            check,
            CheckParams {
                python: s.expect.map(|e| e.value),
                packages: s.packages.unwrap_or_default(),
                allowed: s.allowed.unwrap_or_default(),
                blocked: s.blocked.unwrap_or_default(),
                gpus: s.gpus.unwrap_or(0),
                cuda: s.cuda,
                minimum_mib_per_second: s.minimum,
                within: s.within,
                kernels: s.kernels,
                accept_partial: accept_partial(s.accept_partial)?.unwrap_or_default(),
            },
        ),
        _ => Expectation::Default,
    };
    Ok(Step {
        kind,
        budget: s.budget,
        expect,
    })
}

impl Step {
    /// The step's name in reports and test names: the kind's, or the check's (`core-2-identity`).
    pub fn name(&self) -> &'static str {
        match &self.expect {
            Expectation::Check(check, _) if self.kind == StepKind::Check => check.step_name(),
            _ => self.kind.name(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
