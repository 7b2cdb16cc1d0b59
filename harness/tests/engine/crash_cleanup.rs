//! What a run stopped part-way leaves, and that cleanup and `sweep` find all of it: every
//! image a build commits carries the run's labels, and a run killed (kill -9) or stopped
//! by SIGTERM in build, launch or first-result leaves nothing `sweep --run ID` does not
//! remove. A BuildKit build goes on in the engine after its client is gone and commits its
//! image seconds later: killed or signalled at several moments of one, nothing carrying
//! the run's label is there 30 s after the sweep (or after the signalled run exits).
//! Needs Docker (required under CI=true).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use sandbox_providers::docker::{BUILDER_VAR, Builder};
use sandbox_providers::{BaseImage, BuildRequest, Housekeeping as _, RunLabels};

/// The labels of image `id`, asked of the docker CLI.
fn image_labels(id: &str) -> BTreeMap<String, String> {
    let out = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{json .Config.Labels}}",
            id,
        ])
        .output()
        .expect("docker CLI runs");
    assert!(
        out.status.success(),
        "docker image inspect {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Option<BTreeMap<String, String>>>(&out.stdout)
        .expect("labels are JSON")
        .unwrap_or_default()
}

/// An environment folder under `dir` whose Dockerfile is `body` after the base's FROM.
fn environment(dir: &Path, body: &str) -> std::path::PathBuf {
    let env = dir.join("environment");
    std::fs::create_dir_all(&env).expect("environment folder");
    std::fs::write(
        env.join("Dockerfile"),
        format!("ARG BASE_IMAGE=sandbox-matrix/contract-base:v1\nFROM ${{BASE_IMAGE}}\n{body}"),
    )
    .expect("Dockerfile written");
    env
}

/// Builds `RUN true` then `RUN false` with `builder`, and returns the run's labels and the
/// images the failed build left under the run label (their ids), having removed them.
async fn failed_build_leaves(builder: Builder, name: &str) -> (RunLabels, Vec<String>) {
    let root = common::root();
    let dir = common::out_dir(name);
    let env = environment(&dir, "RUN true\nRUN false\n");
    let provider = sandbox_matrix::run::variants::docker_provider(
        &root,
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .expect("the docker variant connects");
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "docker".into(),
        scenario: "failed-build".into(),
    };
    let request = BuildRequest {
        environment_dir: env,
        base: BaseImage::local("sandbox-matrix/contract-base:v1"),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    };
    let built = provider
        .build_with(&request, &|_: &str| {}, builder, false)
        .await;
    let left = common::left_by_run(&labels.run_id);
    let expected = labels.to_map();
    let unlabelled: Vec<String> = left
        .iter()
        .map(|id| (id, image_labels(id)))
        .filter(|(_, on_image)| expected.iter().any(|(k, v)| on_image.get(k) != Some(v)))
        .map(|(id, on_image)| format!("{id}: {on_image:?}"))
        .collect();
    // Whatever the assertions say, nothing of this test stays.
    let cleaned = provider.list_resources(&labels).await.unwrap_or_default();
    for resource in &cleaned {
        let _ = provider.delete_resource(resource).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let Err(failed) = built else {
        panic!("RUN false must fail the build: {built:?}")
    };
    assert!(
        failed.message.contains("false"),
        "the build failed, but not at `RUN false`: {failed}"
    );
    assert!(
        unlabelled.is_empty(),
        "images without every run label: {unlabelled:?}"
    );
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "cleanup by the run's labels left images behind"
    );
    (labels, left)
}

pub async fn a_failed_build_leaves_only_images_with_every_run_label() {
    // The classic builder committed `RUN true` before `RUN false` failed: that image must
    // carry the run's labels, all of them, or neither cleanup nor sweep can find it.
    let (_, left) = failed_build_leaves(Builder::Classic, "failed-build-labels-classic").await;
    assert!(
        !left.is_empty(),
        "the failed classic build left no image with the run label (its committed steps are unlabelled)"
    );
    // BuildKit commits no intermediate image: a failed build leaves no image at all (its
    // build cache, which carries no label, stays with the engine).
    let offered = sandbox_matrix::run::variants::docker_provider(
        &common::root(),
        Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .expect("the docker variant connects")
    .offered_builder()
    .await;
    if offered != Builder::BuildKit {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true requires the BuildKit half: this engine offers no BuildKit"
        );
        eprintln!("skipped the BuildKit half: this engine offers no BuildKit");
        return;
    }
    let (labels, left) =
        failed_build_leaves(Builder::BuildKit, "failed-build-labels-buildkit").await;
    assert!(
        left.is_empty(),
        "the failed BuildKit build of {} left images: {left:?}",
        labels.run_id
    );
}

/// A scenario outside scenarios/, in `dir`, whose steps are slow enough for a signal to
/// land in the one meant: the build sleeps, the sandbox sleeps before its server starts,
/// and the first result sleeps.
fn slow_scenario(dir: &Path) -> std::path::PathBuf {
    environment(
        dir,
        "RUN sleep 20\nENTRYPOINT [\"/bin/sh\", \"-c\", \"sleep 25; exec \\\"$@\\\"\", \"slow-start\"]\n",
    );
    let scenario = dir.join("slow.yaml");
    std::fs::write(
        &scenario,
        "name: crash-cleanup\nenvironment: environment\nsteps:\n  - step: build\n    budget: 10m\n  - step: launch\n    budget: 3m\n  - step: first-result\n    budget: 5m\n    code: \"import time; time.sleep(240); 1+1\"\n    expect: \"2\"\n  - step: cleanup\n    budget: 2m\n",
    )
    .expect("scenario written");
    scenario
}

/// Runs the slow scenario, sends `signal` once step `step` has run for `after`, and
/// returns the run id, the exit status and the output folder.
fn interrupted_run(dir: &Path, step: &str, after: std::time::Duration, signal: &str) -> Ended {
    signalled_run(dir, step, after, &[signal], None)
}

/// When a signal is sent, counted from the step's start.
enum Wait {
    /// After this long.
    For(std::time::Duration),
    /// Once the classic builder is committing a no-op step (`LABEL`, `ENTRYPOINT`) of the
    /// run: a commit the engine finishes after its client is gone.
    BuildStepCommitting,
}

impl From<std::time::Duration> for Wait {
    fn from(time: std::time::Duration) -> Self {
        Wait::For(time)
    }
}

/// Whether the engine holds a container of run `run_id` that is a classic builder's
/// no-op step, not started: the engine is committing it.
fn committing_a_step(run_id: &str) -> bool {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &format!("label=sandbox-matrix.run={run_id}"),
            "--filter",
            "status=created",
            "--format",
            "{{.Command}}",
        ])
        .output()
        .expect("docker CLI runs");
    String::from_utf8_lossy(&out.stdout).contains("#(nop)")
}

/// A signalled run: its id, how it exited, its reports folder and what it printed.
type Ended = (
    String,
    std::process::ExitStatus,
    std::path::PathBuf,
    Vec<String>,
);

/// [`interrupted_run`] sending each of `signals` in turn, each after the first once the
/// run has said it was interrupted (so the second lands during its cleanup); `builder`
/// names the docker variant's builder, else it is the variant's default.
fn signalled_run(
    dir: &Path,
    step: &str,
    after: impl Into<Wait>,
    signals: &[&str],
    builder: Option<&str>,
) -> Ended {
    use std::io::{BufRead, BufReader};
    let scenario = slow_scenario(dir);
    let out = dir.join("reports");
    let mut command = common::docker_run(&scenario, &out);
    match builder {
        Some(builder) => command.env(BUILDER_VAR, builder),
        None => command.env_remove(BUILDER_VAR),
    };
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sandbox-matrix starts");
    let stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut lines = stderr.lines().map_while(Result::ok);
    let mut seen = Vec::new();
    let mut run_id = None;
    let started = std::time::Instant::now();
    for line in lines.by_ref() {
        if let Some(rest) = line.strip_prefix("run ") {
            run_id = rest.split(':').next().map(str::to_owned);
        }
        let reached = line.trim() == format!("▸ {step}");
        seen.push(line);
        if reached {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(600),
            "{step} never started: {seen:#?}"
        );
    }
    assert!(
        seen.last().is_some_and(|l| l.trim() == format!("▸ {step}")),
        "the run ended before {step}: {seen:#?}"
    );
    match after.into() {
        Wait::For(time) => std::thread::sleep(time),
        Wait::BuildStepCommitting => {
            let run_id = run_id
                .as_deref()
                .unwrap_or_else(|| panic!("no run id: {seen:#?}"));
            let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while !committing_a_step(run_id) {
                assert!(
                    std::time::Instant::now() < until,
                    "the classic builder never committed a step of run {run_id}"
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    }
    let pid = child.id().to_string();
    for (i, signal) in signals.iter().enumerate() {
        if i > 0 {
            for line in lines.by_ref() {
                let said = line.starts_with("interrupted by");
                seen.push(line);
                if said {
                    break;
                }
            }
        }
        assert!(
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .expect("kill runs")
                .success()
        );
    }
    seen.extend(lines);
    let status = child.wait().expect("sandbox-matrix exits");
    let run_id = run_id.unwrap_or_else(|| panic!("no run id printed: {seen:#?}"));
    (run_id, status, out, seen)
}

/// Ids the run's ledger says were created, that the engine still has.
fn ledger_ids_left(out: &Path, run_id: &str) -> Vec<String> {
    let path = out.join(run_id).join("ledger.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the ledger {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"] == "created")
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .filter(|id| {
            Command::new("docker")
                .args(["inspect", id])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect()
}

/// `sweep --run ID` (no --scenario) for a run whose scenario came from outside
/// scenarios/; returns what it printed.
fn sweep(run_id: &str, out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--run", run_id, "--variant", "docker", "--out"])
        .arg(out)
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "sweep: {text}");
    text
}

fn killed_then_swept(step: &str, after: impl Into<Wait>, builder: Option<&str>) {
    let test = format!("kill-9-during-{step}-{}", builder.unwrap_or("default"));
    let dir = common::out_dir(&test);
    let (run_id, status, out, seen) = signalled_run(&dir, step, after, &["KILL"], builder);
    assert_eq!(status.code(), None, "killed by signal 9: {seen:#?}");
    let swept = sweep(&run_id, &out);
    let left = common::left_by_run(&run_id);
    let in_ledger = ledger_ids_left(&out, &run_id);
    // A build the engine went on with after its client was killed would commit its image
    // once the scenario's `RUN sleep 20` ended: look again after that.
    let left_later = if step == "build" {
        std::thread::sleep(std::time::Duration::from_secs(20));
        common::left_by_run(&run_id)
    } else {
        Vec::new()
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        left.is_empty(),
        "after sweep, still carrying the run label: {left:?}\nsweep said: {swept}"
    );
    assert!(
        left_later.is_empty(),
        "after sweep, the killed run's build went on and left: {left_later:?}"
    );
    assert!(
        in_ledger.is_empty(),
        "after sweep, still there though in the ledger: {in_ledger:?}\nsweep said: {swept}"
    );
}

/// The classic builder commits labelled intermediate images as it goes, and finishes the
/// commit under way when its client is killed (about 10 s on fuse-overlayfs): sweep waits
/// for that commit, then removes its image with the rest.
pub fn kill_9_during_a_classic_build_then_sweep_leaves_nothing() {
    killed_then_swept("build", Wait::BuildStepCommitting, Some("classic"));
}

/// BuildKit commits nothing before the build ends, and the engine cancels the build of a
/// client that is gone: nothing is left, not even later.
pub fn kill_9_during_a_buildkit_build_then_sweep_leaves_nothing() {
    killed_then_swept("build", std::time::Duration::from_secs(8), Some("buildkit"));
}

pub fn kill_9_during_launch_then_sweep_leaves_nothing() {
    killed_then_swept("launch", std::time::Duration::from_secs(5), None);
}

pub fn kill_9_during_first_result_then_sweep_leaves_nothing() {
    killed_then_swept("first-result", std::time::Duration::from_secs(3), None);
}

pub fn sigterm_during_launch_cleans_up_writes_reports_and_exits_143() {
    let dir = common::out_dir("sigterm-during-launch");
    let (run_id, status, out, seen) =
        interrupted_run(&dir, "launch", std::time::Duration::from_secs(5), "TERM");
    let results = std::fs::read_to_string(out.join(&run_id).join("results.json"));
    let left_before_sweep = common::left_by_run(&run_id);
    sweep(&run_id, &out);
    let left = common::left_by_run(&run_id);
    let in_ledger = ledger_ids_left(&out, &run_id);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(143), "{seen:#?}");
    let results: sandbox_matrix::model::results::RunResults =
        serde_json::from_str(&results.expect("results.json written")).expect("it parses");
    let scenario = &results.scenarios[0];
    use sandbox_matrix::model::results::StepStatus;
    assert_eq!(
        scenario.step("launch").map(|s| &s.status),
        Some(&StepStatus::Failed {
            reason: "interrupted by SIGTERM".into()
        })
    );
    assert_eq!(
        scenario.step("cleanup").map(|s| &s.status),
        Some(&StepStatus::Passed)
    );
    assert!(
        left_before_sweep.is_empty(),
        "the run's own cleanup left: {left_before_sweep:?}"
    );
    assert!(
        left.is_empty() && in_ledger.is_empty(),
        "{left:?} {in_ledger:?}"
    );
}

pub fn sighup_twice_quits_at_once_and_the_printed_sweep_command_removes_the_rest() {
    let dir = common::out_dir("sighup-twice");
    let (run_id, status, out, seen) = signalled_run(
        &dir,
        "launch",
        std::time::Duration::from_secs(3),
        &["HUP", "HUP"],
        None,
    );
    // The line after "Remove what the run left with:" is the command, as printed.
    let command = seen
        .iter()
        .skip_while(|l| !l.contains("Remove what the run left with:"))
        .nth(1)
        .map(|l| l.trim().to_owned());
    let swept = command.as_deref().map(|command| {
        let mut words = command.split(' ');
        let program = words.next().expect("a program");
        Command::new(program)
            .args(words)
            .output()
            .expect("the printed command runs")
    });
    let left = common::left_by_run(&run_id);
    let in_ledger = ledger_ids_left(&out, &run_id);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(129), "{seen:#?}");
    let command = command.unwrap_or_else(|| panic!("no sweep command printed: {seen:#?}"));
    assert!(
        command.ends_with(&format!(
            "sweep --run {run_id} --root {} --out {}",
            common::root().display(),
            out.display()
        )),
        "{command}"
    );
    let swept = swept.expect("it ran");
    assert_eq!(
        swept.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    assert!(
        left.is_empty() && in_ledger.is_empty(),
        "{left:?} {in_ledger:?}"
    );
}

/// How long after a sweep (or a signalled run's exit) the engine is looked at again: a
/// BuildKit build its client left commits its image within seconds (6 s for the reference
/// environment on a 2-core machine).
const LATER: std::time::Duration = std::time::Duration::from_secs(30);

/// When a lifecycle run is stopped.
enum During {
    /// This long after its build step started.
    Build(std::time::Duration),
    /// A second after the engine holds the build's image: the datalayer variant is
    /// exporting and pushing it.
    Push,
}

/// Runs the lifecycle scenario (the reference environment, built with BuildKit) on
/// `variant`, sends `signal` at `when`, and returns the run id, how it exited, its reports
/// folder and what it printed.
fn stopped_lifecycle(variant: &str, when: During, signal: &str, dir: &Path) -> Ended {
    let out = dir.join("reports");
    let builder_var = match variant {
        "datalayer" => sandbox_providers::datalayer::BUILDER_VAR,
        _ => BUILDER_VAR,
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .env(builder_var, "buildkit")
        .args([
            "run",
            "--variant",
            variant,
            "--scenario",
            "lifecycle",
            "--root",
        ])
        .arg(common::root())
        .arg("--out")
        .arg(&out);
    let mut run = common::StartedRun::start(command);
    let run_id = run.until_step("build");
    match when {
        During::Build(after) => std::thread::sleep(after),
        During::Push => {
            // The build's image is committed: the push has begun.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(300);
            while common::left_by_run(&run_id).is_empty() {
                assert!(
                    std::time::Instant::now() < until,
                    "the build never committed its image: {:#?}",
                    run.seen
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    assert!(
        Command::new("kill")
            .args([&format!("-{signal}"), &run.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success()
    );
    let (status, seen) = run.finish();
    (run_id, status, out, seen)
}

/// Kills a lifecycle run of `variant` at `when`, sweeps it naming the variant, and checks
/// that nothing carries the run's label then, nor [`LATER`].
fn killed_in_a_buildkit_build_then_swept(variant: &str, when: During, test: &str) {
    let dir = common::out_dir(test);
    let (run_id, status, out, seen) = stopped_lifecycle(variant, when, "KILL", &dir);
    assert_eq!(status.code(), None, "killed by signal 9: {seen:#?}");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--run", &run_id, "--variant", variant, "--out"])
        .arg(&out)
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let swept = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let left = common::left_by_run(&run_id);
    std::thread::sleep(LATER);
    let left_later = common::left_by_run(&run_id);
    for id in &left_later {
        let _ = Command::new("docker").args(["rmi", "-f", id]).output();
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(0), "sweep: {swept}");
    assert!(
        left.is_empty(),
        "after sweep: {left:?}\nsweep said: {swept}"
    );
    assert!(
        left_later.is_empty(),
        "{} s after sweep, the killed run's build had left: {left_later:?}\nsweep said: {swept}",
        LATER.as_secs()
    );
    let removed: usize = swept
        .lines()
        .filter(|l| l.contains(": removed container ") || l.contains(": removed image "))
        .count();
    assert!(
        swept.contains(&format!("run {run_id}: {removed} resource(s) removed")),
        "the count is of what was removed: {swept}"
    );
}

pub fn kill_9_one_second_into_a_buildkit_build_then_sweep_leaves_nothing_later() {
    killed_in_a_buildkit_build_then_swept(
        "docker",
        During::Build(std::time::Duration::from_secs(1)),
        "kill-9-1s-into-buildkit",
    );
}

pub fn kill_9_two_seconds_into_a_buildkit_build_then_sweep_leaves_nothing_later() {
    killed_in_a_buildkit_build_then_swept(
        "docker",
        During::Build(std::time::Duration::from_secs(2)),
        "kill-9-2s-into-buildkit",
    );
}

pub fn kill_9_one_second_into_a_datalayer_build_then_sweep_leaves_nothing_later() {
    killed_in_a_buildkit_build_then_swept(
        "datalayer",
        During::Build(std::time::Duration::from_secs(1)),
        "kill-9-1s-into-datalayer-build",
    );
}

pub fn kill_9_during_a_datalayer_push_then_sweep_leaves_nothing_later() {
    killed_in_a_buildkit_build_then_swept("datalayer", During::Push, "kill-9-datalayer-push");
}

/// Signals a lifecycle run 1 s into its BuildKit build; its own cleanup leaves nothing,
/// then nor [`LATER`].
fn signalled_in_a_buildkit_build(signal: &str, code: i32, test: &str) {
    let dir = common::out_dir(test);
    let (run_id, status, _, seen) = stopped_lifecycle(
        "docker",
        During::Build(std::time::Duration::from_secs(1)),
        signal,
        &dir,
    );
    let left = common::left_by_run(&run_id);
    std::thread::sleep(LATER);
    let left_later = common::left_by_run(&run_id);
    for id in &left_later {
        let _ = Command::new("docker").args(["rmi", "-f", id]).output();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(code), "{seen:#?}");
    assert!(
        seen.iter().any(|l| l.contains("✓ cleanup")),
        "cleanup passed: {seen:#?}"
    );
    assert!(left.is_empty(), "after the run: {left:?}\n{seen:#?}");
    assert!(
        left_later.is_empty(),
        "{} s after the run, its build had left: {left_later:?}\n{seen:#?}",
        LATER.as_secs()
    );
}

pub fn sigterm_one_second_into_a_buildkit_build_leaves_nothing_later() {
    signalled_in_a_buildkit_build("TERM", 143, "sigterm-1s-into-buildkit");
}

pub fn sigint_one_second_into_a_buildkit_build_leaves_nothing_later() {
    signalled_in_a_buildkit_build("INT", 130, "sigint-1s-into-buildkit");
}
