//! What a run stopped part-way leaves, and that cleanup and `sweep` find all of it: every
//! image a build commits carries the run's labels, and a run killed (kill -9) or stopped
//! by SIGTERM in build, launch or first-result leaves nothing `sweep --run ID` does not
//! remove. Needs Docker (required under CI=true).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use sandbox_providers::{BaseImage, BuildRequest, RunLabels};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_leaves_only_images_with_every_run_label() {
    if !common::docker_or_skip("a_failed_build_leaves_only_images_with_every_run_label") {
        return;
    }
    let root = common::root();
    let dir = common::out_dir("failed-build-labels");
    let env = environment(&dir, "RUN true\nRUN false\n");
    let provider = sandbox_matrix::run::variants::connect_docker(
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
    let built = provider.build(&request, &|_: &str| {}).await;
    assert!(built.is_err(), "RUN false must fail the build: {built:?}");
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
    // `RUN true` was committed before `RUN false` failed: that image must carry the run's
    // labels, all of them, or neither cleanup nor sweep can find it.
    assert!(
        !left.is_empty(),
        "the failed build left no image with the run label (its committed steps are unlabelled)"
    );
    assert!(
        unlabelled.is_empty(),
        "images without every run label: {unlabelled:?}"
    );
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "cleanup by the run's labels left images behind"
    );
}
