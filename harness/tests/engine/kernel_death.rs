//! A kernel that dies in a docker sandbox fails the request it was running, and the next
//! request answers: the server restarts the kernel, and the variant moves to a socket on
//! which the restarted kernel answers on both channels, for the main kernel and for a
//! context of its own. Needs Docker (required under CI=true).

use crate::common;

use sandbox_providers::{BaseImage, BuildRequest, Housekeeping as _, Provider as _, RunLabels};

/// Code that kills the kernel process in the middle of its request.
const DIE: &str = "import os; os._exit(3)";

pub async fn the_request_after_a_kernel_died_is_answered() {
    let root = common::root();
    let docker = common::prepared_docker(&root).await;
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "docker".into(),
        scenario: "kernel-death".into(),
    };
    let request = BuildRequest {
        environment_dir: root.join("fixtures/environments/reference"),
        base: BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE),
        registry_credential: None,
        build_secrets: Vec::new(),
        labels: labels.clone(),
    };
    let outcome = async {
        let artifact = docker
            .build(&request, &|_: &str| {})
            .await
            .map_err(|e| format!("build: {e}"))?;
        let (sandbox, _) = docker
            .launch(&artifact, &labels)
            .await
            .map_err(|e| format!("launch: {e}"))?;
        let (docker, sandbox) = (&docker, &sandbox);
        let main = die_then_answer(|code| async move {
            docker.run_code(sandbox, code).await.map(|(out, _)| out)
        })
        .await
        .map_err(|e| format!("main kernel: {e}"));
        let context =
            die_then_answer(|code| async move { docker.run_code_in(sandbox, "ctx", code).await })
                .await
                .map_err(|e| format!("context `ctx`: {e}"));
        main.and(context)
    }
    .await;
    // Whatever the outcome, nothing of this test stays.
    for resource in docker.list_resources(&labels).await.unwrap_or_default() {
        let _ = docker.delete_resource(&resource).await;
    }
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "cleanup by the run's labels left resources behind"
    );
    outcome.unwrap();
}

/// Runs `1+1`, then code that kills the kernel (which must fail as the kernel's death),
/// then `1+1` again through `run`, which must answer `2` both times.
async fn die_then_answer<F, Fut>(run: F) -> Result<(), String>
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = sandbox_providers::Result<sandbox_providers::CodeOutput>>,
{
    let first = run("1+1").await.map_err(|e| format!("first 1+1: {e}"))?;
    if first.result.as_deref() != Some("2") {
        return Err(format!("first 1+1 answered {first:?}"));
    }
    match run(DIE).await {
        Ok(out) => return Err(format!("`{DIE}` answered {out:?}")),
        Err(e) if e.to_string().contains("the kernel died") => {}
        Err(e) => return Err(format!("`{DIE}` failed, but not as a dead kernel: {e}")),
    }
    let after = run("1+1")
        .await
        .map_err(|e| format!("1+1 after the kernel died: {e}"))?;
    if after.result.as_deref() != Some("2") {
        return Err(format!("1+1 after the kernel died answered {after:?}"));
    }
    Ok(())
}
