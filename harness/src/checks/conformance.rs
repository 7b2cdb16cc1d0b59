//! The sandbox-contract/v1 conformance suite: the doctor, core tier 1–9 and extended tier
//! 10–14, each check a probe — Python in through the variant's code channel, one JSON line
//! out behind a marker on stdout — so the same checks run on every variant.
//!
//! A check that crashes is a failed check with its reason; the scenario goes on.

use std::collections::BTreeMap;
use std::time::Duration;

use sandbox_contract::{CONTRACT_VERSION, GRACEFUL_SHUTDOWN_SECS, IDENTITY};
use serde::Deserialize;
use serde_json::{Value, json};

/// Marker in front of a probe's JSON answer on stdout.
pub const ANSWER_MARKER: &str = "SANDBOX_MATRIX_PROBE ";

/// A check of the conformance suite, numbered as the contract numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// 1: the doctor runs and every row passes.
    Doctor,
    /// 2: user, uid, gid, home and working directory are the contract's.
    Identity,
    /// 3: python3 (of the expected version) and pip are there.
    Python,
    /// 4: the kernel answers `1+1` with `2`.
    Kernel,
    /// 5: the locked packages are installed at their versions and import.
    Imports,
    /// 6: the workdir is writable, the reserved path is there and not writable.
    Filesystem,
    /// 7: state does not survive a kernel restart.
    Restart,
    /// 8: a process group exits on SIGTERM; PID 1 reaps orphans.
    Shutdown,
    /// 9: no build secret in files, processes or the artifact's metadata.
    Secrets,
    /// 10: allowed hosts are reachable and blocked ones are not.
    Egress,
    /// 11: the GPUs asked for are visible with the CUDA asked for.
    Gpu,
    /// 12: writing to the workdir is fast enough (MiB/s).
    Throughput,
    /// 13: create to first result is within its budget.
    ColdStart,
    /// 14: several kernel contexts answer at once.
    ConcurrentKernels,
}

/// Which tier a check belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Gates release on every required variant.
    Core,
    /// Recorded; gates nothing (but the GPU check for a GPU version).
    Extended,
}

impl Check {
    /// Every check, in the contract's order.
    pub const ALL: [Check; 14] = [
        Check::Doctor,
        Check::Identity,
        Check::Python,
        Check::Kernel,
        Check::Imports,
        Check::Filesystem,
        Check::Restart,
        Check::Shutdown,
        Check::Secrets,
        Check::Egress,
        Check::Gpu,
        Check::Throughput,
        Check::ColdStart,
        Check::ConcurrentKernels,
    ];

    /// The contract's number for the check.
    pub fn number(self) -> u8 {
        Check::ALL
            .iter()
            .position(|c| *c == self)
            .map_or(0, |i| i as u8 + 1)
    }

    /// The tier it belongs to.
    pub fn tier(self) -> Tier {
        if self.number() <= 9 {
            Tier::Core
        } else {
            Tier::Extended
        }
    }

    /// The name a scenario and reports use for it as a step: `core-2-identity`.
    pub fn step_name(self) -> &'static str {
        match self {
            Check::Doctor => "core-1-doctor",
            Check::Identity => "core-2-identity",
            Check::Python => "core-3-python",
            Check::Kernel => "core-4-kernel",
            Check::Imports => "core-5-imports",
            Check::Filesystem => "core-6-filesystem",
            Check::Restart => "core-7-restart",
            Check::Shutdown => "core-8-shutdown",
            Check::Secrets => "core-9-secrets",
            Check::Egress => "extended-10-egress",
            Check::Gpu => "extended-11-gpu",
            Check::Throughput => "extended-12-throughput",
            Check::ColdStart => "extended-13-cold-start",
            Check::ConcurrentKernels => "extended-14-concurrent-kernels",
        }
    }
}

/// What a check is given beside the sandbox, from its scenario step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckParams {
    /// `python`: the expected `major.minor`; any version when absent.
    pub python: Option<String>,
    /// `imports`: distribution name → version the lock pins.
    pub packages: BTreeMap<String, String>,
    /// `egress`: `host:port` that must be reachable.
    pub allowed: Vec<String>,
    /// `egress`: `host:port` that must not be reachable.
    pub blocked: Vec<String>,
    /// `gpu`: how many GPUs were asked for (0: none, the check passes trivially).
    pub gpus: u32,
    /// `gpu`: the CUDA version asked for.
    pub cuda: Option<String>,
    /// `throughput`: the floor in MiB/s.
    pub minimum_mib_per_second: Option<f64>,
    /// `cold-start`: the budget of create to first result.
    pub within: Option<Duration>,
    /// `concurrent-kernels`: how many contexts (default 4).
    pub kernels: Option<u32>,
    /// `secrets`: the variants whose partial scan (non-root, or unreadable files) passes.
    pub accept_partial: Vec<String>,
}

/// What follows every probe: prints `_sm_out` as JSON behind [`ANSWER_MARKER`], then
/// drops every `_sm_` name the probe bound.
pub const ANSWER: &str = include_str!("probes/answer.py");

/// Wraps probe `body` (which binds `_sm_out`) so that it prints `_sm_out` as JSON behind
/// the marker and then drops every `_sm_` name it bound.
pub fn probe_code(body: &str) -> String {
    probe_with(body, &json!({}))
}

/// Probe `body` with `args` bound to `_sm_args` before it (a JSON object, read by
/// `json.loads`), followed by [`ANSWER`].
fn probe_with(body: &str, args: &Value) -> String {
    // A JSON string literal is a Python string literal too.
    let args = serde_json::to_string(&args.to_string()).expect("a string serializes");
    format!("import json as _sm_json\n_sm_args = _sm_json.loads({args})\n{body}{ANSWER}")
}

/// Reads the probe's answer: the last marked line of `stdout`.
pub fn parse_answer(stdout: &str) -> Result<Value, String> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| {
            l.find(ANSWER_MARKER)
                .map(|at| &l[at + ANSWER_MARKER.len()..])
        })
        .ok_or_else(|| {
            format!(
                "the probe answered without its report; stdout: {}",
                sandbox_providers::quoted(sandbox_providers::tail(stdout, 300))
            )
        })?;
    serde_json::from_str(line).map_err(|e| {
        format!(
            "the probe's report is not JSON ({e}): {}",
            sandbox_providers::quoted(sandbox_providers::tail(line, 300))
        )
    })
}

/// A check's verdict: passed, failed or skipped, why, and what the sandbox answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// True when the sandbox meets the check; false when it does not or was skipped.
    pub passed: bool,
    /// Why the check had nothing to test; a skipped check never passes.
    pub skipped: Option<String>,
    /// What is wrong, for a person; `None` when it passed with nothing to say.
    pub detail: Option<String>,
    /// The probe's answer and anything measured.
    pub data: Value,
}

impl Verdict {
    /// Passed when `problems` is empty; the problems joined are the detail.
    pub fn new(problems: Vec<String>, data: Value) -> Self {
        Self {
            passed: problems.is_empty(),
            skipped: None,
            detail: (!problems.is_empty()).then(|| problems.join("; ")),
            data,
        }
    }

    /// Passed, with something to say.
    pub fn pass(detail: &str, data: Value) -> Self {
        Self {
            passed: true,
            skipped: None,
            detail: Some(detail.to_owned()),
            data,
        }
    }

    /// Skipped: there was nothing to test, for `reason`.
    pub fn skip(reason: &str, data: Value) -> Self {
        Self {
            passed: false,
            skipped: Some(reason.to_owned()),
            detail: None,
            data,
        }
    }
}

/// Why `check` has nothing to test with `params` on a variant that can do what
/// `capabilities` say, decided before the check runs; `None` when it has something.
/// A check skipped here is reported as skipped with this reason, never as passed.
pub fn nothing_to_test(
    check: Check,
    params: &CheckParams,
    capabilities: &sandbox_providers::Capabilities,
) -> Option<String> {
    use sandbox_providers::RestartKind;
    match check {
        Check::Python if params.python.is_none() => Some(
            "no Python version (`expect:`) to check the sandbox's against; an installer on PATH \
             alone is not check 3"
                .into(),
        ),
        Check::Imports if params.packages.is_empty() => Some(
            "the scenario locks no package (`packages:`), so there is nothing to import".into(),
        ),
        Check::Egress if params.allowed.is_empty() && params.blocked.is_empty() => Some(
            "no egress targets (`allowed:`, `blocked:`), so there is nothing to reach or refuse"
                .into(),
        ),
        Check::Egress if !params.blocked.is_empty() && !capabilities.egress_policy => Some(
            "this variant applies no egress policy, so `blocked:` targets cannot be checked".into(),
        ),
        Check::Gpu if params.gpus == 0 && params.cuda.is_none() => {
            Some("no accelerator was asked for (`gpus:`, `cuda:`)".into())
        }
        Check::ColdStart if params.within.is_none() => {
            Some("no cold-start budget (`within:`) to judge the first result against".into())
        }
        Check::Restart if capabilities.restart == RestartKind::Unsupported => {
            Some("this variant cannot restart a kernel or sandbox".into())
        }
        Check::Restart if !capabilities.stateful_code => Some(STATELESS.into()),
        Check::ConcurrentKernels if capabilities.concurrent_contexts < 2 => Some(format!(
            "this variant runs {} code context at a time, so there is no concurrency to check",
            capabilities.concurrent_contexts
        )),
        _ => None,
    }
}

/// Why a restart cannot be shown on a code channel that keeps no state.
pub const STATELESS: &str = "the code channel keeps no state between calls, so a restart cannot \
be shown: a marker set before it would be gone without one";

/// Check 1's probe: runs the doctor and hands back its exit code and output.
pub fn doctor_probe() -> String {
    probe_with(
        include_str!("probes/doctor.py"),
        &json!({ "doctor": IDENTITY.doctor }),
    )
}

/// Judges the doctor's answer: it must run, check this contract, exit 0, and every row pass.
pub fn judge_doctor(answer: &Value) -> Verdict {
    let Some(exit) = answer["exit"].as_i64() else {
        return Verdict::new(
            vec![format!(
                "the doctor cannot run at {}: {}",
                IDENTITY.doctor,
                answer["stderr"].as_str().unwrap_or("")
            )],
            answer.clone(),
        );
    };
    let report: Value = match serde_json::from_str(answer["stdout"].as_str().unwrap_or("")) {
        Ok(report) => report,
        Err(e) => {
            return Verdict::new(
                vec![format!(
                    "the doctor exited {exit} without a JSON report ({e})"
                )],
                answer.clone(),
            );
        }
    };
    let mut problems = Vec::new();
    if report["contract"] != CONTRACT_VERSION {
        problems.push(format!(
            "the doctor checks {}, not {CONTRACT_VERSION}",
            report["contract"]
        ));
    }
    let failed: Vec<String> = report["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| r["ok"] != true)
                .map(|r| {
                    let id = r["id"].as_str().unwrap_or("?");
                    match r["message"].as_str() {
                        Some(m) if !m.is_empty() => format!("{id} ({m})"),
                        _ => format!("{id} (expected {}, got {})", r["expected"], r["actual"]),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let rows = report["rows"].as_array().map_or(0, Vec::len);
    let rows_passed = report["rows"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["ok"] == true).count());
    if !failed.is_empty() {
        problems.push(format!("doctor rows failed: {}", failed.join(", ")));
    } else if exit != 0 {
        problems.push(format!("the doctor exited {exit} with every row passing"));
    } else if rows == 0 {
        problems.push("the doctor reported no rows".to_owned());
    }
    let data = json!({ "exit": exit, "rows": rows, "rowsPassed": rows_passed, "failed": report["failed"], "report": report });
    if problems.is_empty() {
        Verdict::pass(&format!("{rows}/{rows} doctor rows pass"), data)
    } else {
        Verdict::new(problems, data)
    }
}

/// Check 2's probe.
pub const IDENTITY_PROBE: &str = include_str!("probes/identity.py");

/// Judges check 2 against the contract's identity.
pub fn judge_identity(answer: &Value) -> Verdict {
    let expected = [
        ("user", json!(IDENTITY.user)),
        ("uid", json!(IDENTITY.uid)),
        ("gid", json!(IDENTITY.gid)),
        ("home", json!(IDENTITY.home)),
        ("cwd", json!(IDENTITY.workdir)),
    ];
    let problems = expected
        .iter()
        .filter(|(key, want)| &answer[key] != want)
        .map(|(key, want)| format!("{key} is {}, not {want}", answer[key]))
        .collect();
    Verdict::new(problems, answer.clone())
}

/// Check 3's probe.
pub const PYTHON_PROBE: &str = include_str!("probes/python.py");

/// Judges check 3: the expected version, and an installer on PATH.
pub fn judge_python(answer: &Value, want: &str) -> Verdict {
    let mut problems = Vec::new();
    if answer["version"] != want {
        problems.push(format!("Python is {}, not {want}", answer["full"]));
    }
    if answer["pip"].is_null() && answer["uv"].is_null() {
        problems.push("neither pip nor uv is on PATH".to_owned());
    }
    Verdict::new(problems, answer.clone())
}

/// Check 5's probe for `packages` (distribution → version).
pub fn imports_probe(packages: &BTreeMap<String, String>) -> String {
    let names: Vec<String> = packages.keys().map(|n| normalize(n)).collect();
    probe_with(
        include_str!("probes/imports.py"),
        &json!({ "names": names }),
    )
}

/// Judges check 5: each package at its locked version, importable.
pub fn judge_imports(answer: &Value, packages: &BTreeMap<String, String>) -> Verdict {
    let problems = packages
        .iter()
        .filter_map(|(name, version)| {
            let name = normalize(name);
            let found = &answer[&name];
            if let Some(error) = found["error"].as_str() {
                Some(format!("{name}: {error}"))
            } else if found["version"] != version.as_str() {
                Some(format!(
                    "{name} is {}, the lock says {version}",
                    found["version"]
                ))
            } else if found["imported"].is_null() {
                Some(format!("{name} installs no importable module"))
            } else {
                None
            }
        })
        .collect();
    Verdict::new(problems, answer.clone())
}

fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Check 6's probe.
pub fn filesystem_probe() -> String {
    probe_with(
        include_str!("probes/filesystem.py"),
        &json!({ "workdir": IDENTITY.workdir, "reserved": IDENTITY.reserved_path }),
    )
}

/// Judges check 6: the workdir takes a write, a read and a delete; the reserved path is
/// there (as the doctor's `reserved_path` row asks) and refuses a write.
pub fn judge_filesystem(answer: &Value) -> Verdict {
    let mut problems = Vec::new();
    if !(answer["write"] == true && answer["read"] == true && answer["delete"] == true) {
        problems.push(format!(
            "{} is not writable: {}",
            IDENTITY.workdir,
            answer["error"].as_str().unwrap_or("?")
        ));
    }
    if answer["reservedExists"] != true {
        problems.push(format!(
            "{} is missing: the contract reserves it, read-only",
            IDENTITY.reserved_path
        ));
    } else if answer["reservedWritable"] != false {
        problems.push(format!("{} is writable", IDENTITY.reserved_path));
    }
    Verdict::new(problems, answer.clone())
}

/// Check 8's probe: a process group that traps SIGTERM must exit within the grace
/// period, and an orphan must not stay a zombie under PID 1.
pub fn shutdown_probe() -> String {
    probe_with(
        include_str!("probes/shutdown.py"),
        &json!({ "grace": GRACEFUL_SHUTDOWN_SECS }),
    )
}

/// Judges check 8.
pub fn judge_shutdown(answer: &Value) -> Verdict {
    let mut problems = Vec::new();
    if answer["exited"] != true {
        problems.push(format!(
            "a process group ignored SIGTERM for {GRACEFUL_SHUTDOWN_SECS} s"
        ));
    }
    // PID 1 gets no default action for SIGTERM from the kernel. Only an explicitly ignored
    // SIGTERM is judged: tini, for one, takes signals without a handler or a mask that
    // /proc shows, so "default" is recorded, not failed.
    if answer["pid1Sigterm"] == "ignored" {
        problems.push(format!(
            "PID 1 ({}) ignores SIGTERM, so a stop waits out the grace period and kills it",
            answer["pid1"].as_str().unwrap_or("?")
        ));
    }
    match answer["orphanZombies"].as_u64() {
        None => problems.push("PID 1 cannot be observed".to_owned()),
        Some(0) => {}
        Some(n) => problems.push(format!(
            "PID 1 ({}) leaves {n} orphan(s) unreaped",
            answer["pid1"].as_str().unwrap_or("?")
        )),
    }
    Verdict::new(problems, answer.clone())
}

/// Check 10's probe for `allowed` and `blocked` `host:port` targets.
pub fn egress_probe(allowed: &[String], blocked: &[String]) -> String {
    let targets: Vec<&String> = allowed.iter().chain(blocked).collect();
    probe_with(
        include_str!("probes/egress.py"),
        &json!({ "targets": targets }),
    )
}

/// Judges check 10.
pub fn judge_egress(answer: &Value, allowed: &[String], blocked: &[String]) -> Verdict {
    let problems = allowed
        .iter()
        .filter(|t| answer[t.as_str()] != true)
        .map(|t| format!("{t} is unreachable"))
        .chain(
            blocked
                .iter()
                .filter(|t| answer[t.as_str()] == true)
                .map(|t| format!("{t} is reachable")),
        )
        .collect();
    Verdict::new(problems, answer.clone())
}

/// Check 11's probe.
pub const GPU_PROBE: &str = include_str!("probes/gpu.py");

/// Judges check 11: the GPUs asked for are visible; the image's CUDA is the one asked for;
/// the driver is new enough for it.
pub fn judge_gpu(answer: &Value, gpus: u32, cuda: Option<&str>) -> Verdict {
    let mut problems = Vec::new();
    let seen = answer["gpus"].as_array().map_or(0, Vec::len);
    if answer["exit"] != 0 || seen == 0 {
        problems.push("no GPU is visible".to_owned());
    } else if seen < gpus as usize {
        problems.push(format!("{seen} GPU(s) visible, not the {gpus} asked for"));
    }
    let toolkit = answer["cuda"].as_str().unwrap_or("");
    if let Some(want) = cuda {
        let want_parts = version_parts(want);
        if want_parts.is_empty()
            || version_parts(toolkit).get(..want_parts.len()) != Some(&want_parts[..])
        {
            problems.push(format!(
                "CUDA is {}, not {want}",
                if toolkit.is_empty() {
                    "absent"
                } else {
                    toolkit
                }
            ));
        }
    }
    let driver = answer["driver"].as_str().unwrap_or("");
    if !toolkit.is_empty() && !driver.is_empty() && version_parts(driver) < version_parts(toolkit) {
        problems.push(format!(
            "the driver runs CUDA up to {driver}, older than the image's {toolkit}"
        ));
    }
    Verdict::new(problems, answer.clone())
}

fn version_parts(version: &str) -> Vec<u64> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Check 12's probe: 64 MiB written and synced in the workdir.
pub fn throughput_probe() -> String {
    probe_with(
        include_str!("probes/throughput.py"),
        &json!({ "workdir": IDENTITY.workdir }),
    )
}

/// The floor check 12 holds a sandbox to unless the scenario says otherwise.
pub const DEFAULT_MIN_MIB_PER_SECOND: f64 = 20.0;

/// Judges check 12.
pub fn judge_throughput(answer: &Value, minimum: f64) -> Verdict {
    let speed = answer["mibPerSecond"].as_f64().unwrap_or(0.0);
    let mut problems = Vec::new();
    if let Some(error) = answer["error"].as_str() {
        problems.push(format!("writing failed: {error}"));
    } else if speed < minimum {
        problems.push(format!("{speed} MiB/s, below {minimum}"));
    }
    Verdict::new(problems, answer.clone())
}

/// Judges check 13 from the scenario's measured create-to-first-result; skipped when
/// nothing measured it.
pub fn judge_cold_start(measured: Option<Duration>, budget: Duration) -> Verdict {
    match measured {
        None => Verdict::skip(
            "cold start was not measured: no launch and first result before this check",
            json!({}),
        ),
        Some(took) if took > budget => Verdict::new(
            vec![format!(
                "{:.2} s, over the {:.2} s budget",
                took.as_secs_f64(),
                budget.as_secs_f64()
            )],
            json!({ "seconds": took.as_secs_f64() }),
        ),
        Some(took) => Verdict::new(Vec::new(), json!({ "seconds": took.as_secs_f64() })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every probe with its arguments, as the suite sends it.
    fn every_probe() -> Vec<(&'static str, String)> {
        let packages = BTreeMap::from([("jupyter-client".to_owned(), "8.6.3".to_owned())]);
        vec![
            ("doctor", doctor_probe()),
            ("identity", probe_code(IDENTITY_PROBE)),
            ("python", probe_code(PYTHON_PROBE)),
            ("imports", imports_probe(&packages)),
            ("filesystem", filesystem_probe()),
            ("shutdown", shutdown_probe()),
            ("egress", egress_probe(&["127.0.0.1:9".to_owned()], &[])),
            ("gpu", probe_code(GPU_PROBE)),
            ("throughput", throughput_probe()),
        ]
    }

    #[test]
    fn the_answer_prints_the_marker_the_parser_reads() {
        assert!(ANSWER.contains(&format!("{ANSWER_MARKER:?}")), "{ANSWER}");
    }

    /// Each probe, run by the host's python3 (where nothing of the contract is there), still
    /// answers one JSON object behind the marker and leaves no `_sm_` name behind: the `.py`
    /// files parse, take their `_sm_args`, and fail softly. Like every test here that runs a
    /// probe, it needs python3 on PATH: without it (as the build script found) it is
    /// reported ignored, and under `CI=true` it runs and fails.
    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn every_probe_runs_in_python3_and_answers_one_json_object() {
        let dir = std::env::temp_dir().join(format!("sm-probes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        for (name, code) in every_probe() {
            // The probe's code, then a line proving it dropped every name it bound.
            let script = format!(
                "{code}\nimport sys\nsys.stdout.write('LEFT ' + repr(sorted(n for n in globals() if n.startswith('_sm_'))) + '\\n')\n"
            );
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg(&script)
                .current_dir(&dir)
                .output()
                .expect("python3 runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let answer = parse_answer(&stdout).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(answer.is_object(), "{name}: {answer}");
            assert!(stdout.contains("LEFT []"), "{name} left names: {stdout}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs `code` with the host's python3 and returns what it printed; fails naming python3
    /// when there is none.
    fn python3(code: &str) -> std::process::Output {
        std::process::Command::new("python3")
            .arg("-c")
            .arg(code)
            .output()
            .unwrap_or_else(|e| panic!("this test runs the probes with python3 on PATH: {e}"))
    }

    /// Runs a probe with the host's python3 and returns its answer.
    fn run_python(code: &str) -> Value {
        let out = python3(code);
        assert!(
            out.status.success(),
            "probe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_answer(&String::from_utf8_lossy(&out.stdout)).expect("a marked answer")
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn constant_probes_are_valid_python() {
        for (name, probe) in [
            ("identity", IDENTITY_PROBE),
            ("python", PYTHON_PROBE),
            ("gpu", GPU_PROBE),
        ] {
            let answer = run_python(&probe_code(probe));
            assert!(answer.is_object(), "{name}: {answer}");
        }
    }

    #[test]
    fn numbers_tiers_and_names_follow_the_contract() {
        assert_eq!(Check::Doctor.number(), 1);
        assert_eq!(Check::Secrets.number(), 9);
        assert_eq!(Check::ConcurrentKernels.number(), 14);
        assert_eq!(Check::Secrets.tier(), Tier::Core);
        assert_eq!(Check::Egress.tier(), Tier::Extended);
        for check in Check::ALL {
            let name = check.step_name();
            assert!(
                name.starts_with(if check.tier() == Tier::Core {
                    "core-"
                } else {
                    "extended-"
                }),
                "{name}"
            );
            assert!(name.contains(&format!("-{}-", check.number())), "{name}");
        }
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn probes_answer_behind_the_marker_and_leave_no_names_behind() {
        let code = format!(
            "{}\nprint('left:', [n for n in list(globals()) if n.startswith('_sm_')])",
            probe_code(IDENTITY_PROBE)
        );
        let out = python3(&code);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer = parse_answer(&stdout).unwrap();
        assert!(answer["uid"].is_u64(), "{answer}");
        assert!(stdout.contains("left: []"), "{stdout}");
    }

    #[test]
    fn identity_names_every_wrong_field() {
        let answer =
            json!({"user": "root", "uid": 0, "gid": 0, "home": "/root", "cwd": "/home/datalayer"});
        let v = judge_identity(&answer);
        assert!(!v.passed);
        assert_eq!(
            v.detail.unwrap(),
            "user is \"root\", not \"datalayer\"; uid is 0, not 1000; gid is 0, not 100; home is \"/root\", not \"/home/datalayer\""
        );
        let good = json!({"user": "datalayer", "uid": 1000, "gid": 100, "home": "/home/datalayer", "cwd": "/home/datalayer"});
        assert!(judge_identity(&good).passed);
    }

    #[test]
    fn doctor_verdicts_name_failed_rows_and_a_missing_doctor() {
        let missing =
            json!({"exit": null, "stdout": "", "stderr": "FileNotFoundError: no such file"});
        assert!(
            judge_doctor(&missing)
                .detail
                .unwrap()
                .starts_with("the doctor cannot run at /opt/datalayer/bin/datalayer-sandbox")
        );
        let report = json!({"contract": CONTRACT_VERSION, "failed": "uid", "rows": [
            {"id": "user", "ok": true, "expected": "datalayer", "actual": "datalayer", "message": null},
            {"id": "uid", "ok": false, "expected": 1000, "actual": 0, "message": null},
            {"id": "locale", "ok": false, "expected": "C.UTF-8", "actual": null, "message": "LANG is unset"}]});
        let answer = json!({"exit": 1, "stdout": report.to_string(), "stderr": ""});
        let v = judge_doctor(&answer);
        assert_eq!(
            v.detail.unwrap(),
            "doctor rows failed: uid (expected 1000, got 0), locale (LANG is unset)"
        );
        let garbage = json!({"exit": 0, "stdout": "not json", "stderr": ""});
        assert!(
            judge_doctor(&garbage)
                .detail
                .unwrap()
                .contains("without a JSON report")
        );
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn filesystem_and_throughput_probes_run_for_real() {
        // The probes hard-code the contract's paths; on this host they fail honestly.
        let answer = run_python(&filesystem_probe());
        assert!(answer["reservedExists"].is_boolean(), "{answer}");
        let v = judge_filesystem(
            &json!({"write": true, "read": true, "delete": true, "reservedExists": true, "reservedWritable": true, "error": null}),
        );
        assert_eq!(v.detail.unwrap(), "/opt/datalayer is writable");
        let v = judge_filesystem(
            &json!({"write": true, "read": true, "delete": true, "reservedExists": false, "reservedWritable": null, "error": null}),
        );
        assert_eq!(
            v.detail.unwrap(),
            "/opt/datalayer is missing: the contract reserves it, read-only"
        );
        let v = judge_throughput(&json!({"mibPerSecond": 5.0, "error": null}), 20.0);
        assert_eq!(v.detail.unwrap(), "5 MiB/s, below 20");
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn shutdown_probe_sees_this_hosts_pid_1() {
        let answer = run_python(&shutdown_probe());
        assert_eq!(answer["exited"], true, "{answer}");
        assert!(answer["orphanZombies"].is_u64(), "{answer}");
        assert!(answer["pid1Sigterm"].is_string(), "{answer}");
        let v = judge_shutdown(
            &json!({"exited": false, "orphanZombies": 2, "pid1": "sh", "pid1Sigterm": "ignored"}),
        );
        assert_eq!(
            v.detail.unwrap(),
            "a process group ignored SIGTERM for 10 s; PID 1 (sh) ignores SIGTERM, so a stop waits out the grace period and kills it; PID 1 (sh) leaves 2 orphan(s) unreaped"
        );
        for how in ["caught", "default"] {
            let v = judge_shutdown(
                &json!({"exited": true, "orphanZombies": 0, "pid1": "tini", "pid1Sigterm": how}),
            );
            assert!(v.passed, "{how}");
        }
    }

    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn imports_compare_versions_with_normalized_names() {
        let answer = run_python(&imports_probe(&BTreeMap::from([(
            "PIP".to_owned(),
            "0".to_owned(),
        )])));
        assert!(answer["pip"]["version"].is_string(), "{answer}");
        let v = judge_imports(
            &answer,
            &BTreeMap::from([("PIP".to_owned(), "0".to_owned())]),
        );
        assert!(
            v.detail.unwrap().starts_with("pip is \""),
            "a wrong version is named"
        );
        let missing =
            json!({"no-such-dist": {"version": null, "imported": null, "error": "not installed"}});
        let v = judge_imports(
            &missing,
            &BTreeMap::from([("No_Such.Dist".to_owned(), "1".to_owned())]),
        );
        assert_eq!(v.detail.unwrap(), "no-such-dist: not installed");
    }

    #[test]
    fn egress_gpu_and_cold_start_judge_what_they_are_given() {
        let v = judge_egress(
            &json!({"127.0.0.1:1": false, "127.0.0.1:2": true}),
            &["127.0.0.1:1".into()],
            &["127.0.0.1:2".into()],
        );
        assert_eq!(
            v.detail.unwrap(),
            "127.0.0.1:1 is unreachable; 127.0.0.1:2 is reachable"
        );
        let v = judge_gpu(
            &json!({"exit": 0, "gpus": ["A10G"], "driver": "12.2", "cuda": "12.8.1"}),
            1,
            Some("12.8"),
        );
        assert_eq!(
            v.detail.unwrap(),
            "the driver runs CUDA up to 12.2, older than the image's 12.8.1"
        );
        assert!(!judge_gpu(&json!({"exit": null, "gpus": []}), 1, None).passed);
        let v = judge_cold_start(Some(Duration::from_secs(5)), Duration::from_secs(3));
        assert_eq!(v.detail.unwrap(), "5.00 s, over the 3.00 s budget");
        assert!(judge_cold_start(Some(Duration::from_secs(1)), Duration::from_secs(3)).passed);
        let unmeasured = judge_cold_start(None, Duration::from_secs(3));
        assert!(!unmeasured.passed && unmeasured.skipped.is_some());
    }
}
