//! One build per variant × environment per run: scenarios of a run that build the same
//! environment share the first one's artifact, a `fresh: true` scenario builds its own,
//! and the last scenario to use the shared artifact removes it. Needs Docker (required
//! under CI=true).

use crate::common;

use std::path::Path;
use std::process::Command;

use sandbox_matrix::model::results::{RunResults, StepStatus};

/// Writes scenario `name` (build, a rebuild when asked, then cleanup, on the reference
/// environment) into `dir`.
fn scenario(dir: &Path, name: &str, fresh: bool, rebuild: bool) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let rebuild = if rebuild {
        "  - step: rebuild\n    budget: 5m\n"
    } else {
        ""
    };
    let text = format!(
        "name: {name}\nenvironment: {}\nfresh: {fresh}\nsteps:\n  - step: build\n    budget: 5m\n{rebuild}  - step: cleanup\n    budget: 2m\n",
        common::root()
            .join("fixtures/environments/reference")
            .display()
    );
    std::fs::write(&path, text).expect("scenario written");
    path.display().to_string()
}

pub fn scenarios_of_one_environment_build_once_and_the_last_removes_it() {
    let dir = common::out_dir("shared-build");
    let first = scenario(&dir, "share-first", false, false);
    let second = scenario(&dir, "share-second", false, true);
    let own = scenario(&dir, "share-fresh", true, false);
    let out = dir.join("reports");
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--variant", "docker"])
        .args([
            "--scenario",
            &first,
            "--scenario",
            &own,
            "--scenario",
            &second,
        ])
        .arg("--out")
        .arg(&out)
        .current_dir(common::root())
        .output()
        .expect("sandbox-matrix runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    let results: RunResults = serde_json::from_slice(
        &std::fs::read(out.join("latest/results.json")).expect("results.json"),
    )
    .expect("results parse");
    let build = |name: &str| {
        let scenario = results
            .scenarios
            .iter()
            .find(|s| s.scenario == name)
            .unwrap_or_else(|| panic!("{name} ran: {stderr}"));
        (
            scenario.step("build").expect("build step").clone(),
            scenario.artifact_id.clone().expect("an artifact"),
        )
    };
    let (built, artifact) = build("share-first");
    assert_eq!(built.status, StepStatus::Passed);
    assert_eq!(built.reused, None);

    let (reused, reused_artifact) = build("share-second");
    let taken = reused.reused.expect("the second scenario reused the build");
    assert_eq!(taken.artifact, artifact);
    assert_eq!(taken.built_in, "share-first");
    assert_eq!(reused_artifact, artifact);
    assert!(
        matches!(&reused.status, StepStatus::Skipped { reason } if reason.contains("built in share-first")),
        "{:?}",
        reused.status
    );

    let (fresh, fresh_artifact) = build("share-fresh");
    assert_eq!(fresh.status, StepStatus::Passed);
    assert_eq!(fresh.reused, None);
    assert_ne!(
        fresh_artifact, artifact,
        "the fresh scenario built its own image"
    );

    // The second scenario's rebuild had the first build's inputs: the cache served the
    // same image.
    let rebuilt = results
        .scenarios
        .iter()
        .find(|s| s.scenario == "share-second")
        .and_then(|s| s.step("rebuild"))
        .expect("a rebuild step");
    assert_eq!(rebuilt.status, StepStatus::Passed);
    assert!(
        rebuilt
            .log
            .iter()
            .any(|l| l == &format!("rebuilt the same artifact: image-id {artifact}")),
        "{:?}",
        rebuilt.log
    );

    // The first scenario's cleanup kept the image for the second, whose cleanup removed it.
    let cleanup_log = |name: &str| {
        results
            .scenarios
            .iter()
            .find(|s| s.scenario == name)
            .and_then(|s| s.step("cleanup"))
            .map(|s| s.log.join("\n"))
            .unwrap_or_default()
    };
    assert!(
        cleanup_log("share-first").contains("kept image"),
        "{}",
        cleanup_log("share-first")
    );
    assert!(
        cleanup_log("share-second").contains("removed image"),
        "{}",
        cleanup_log("share-second")
    );
    let run_id = &results.provenance.run_id;
    assert!(
        common::left_by_run(run_id).is_empty(),
        "the run left {:?}",
        common::left_by_run(run_id)
    );
    // Two builds and a rebuild, not three builds: the ledger recorded three artifacts.
    let ledger = std::fs::read_to_string(out.join(run_id).join("ledger.jsonl")).expect("ledger");
    let artifacts = ledger
        .lines()
        .filter(|l| l.contains(r#""event":"intent""#) && l.contains(r#""kind":"artifact""#))
        .count();
    assert_eq!(artifacts, 3, "{ledger}");
}
