//! The project's Modal client (the modal-client branch's `ControlPlane` and `Router`)
//! against `sandbox-matrix emulate modal`, the binary, over plain gRPC on loopback: an image
//! of the reference base built and followed to its result, a sandbox, an exec re-asserting
//! the contract's user (uid 1000) and one as root (uid 0), and, once the router JWT has
//! expired (`--router-jwt-ttl 3`), an exec that still runs because the client fetches a
//! fresh JWT on `Unauthenticated`; an exec cut at its own deadline (the router ends a
//! stdio read at its deadline) and one of 32 s read to its end. Terminated, nothing of the sandbox is left; stopped, the
//! emulator leaves nothing.
//!
//! Needs Docker (required under CI=true).
//! `cargo test -p sandbox-matrix --test engine modal_client_emulator::`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::emulate::Emulate;
use sandbox_providers::Secret;
use sandbox_providers::modal::client::{ControlPlane, Credentials, connect};
use sandbox_providers::modal::proto::client as api;
use sandbox_providers::modal::router::Router;

/// Each call's deadline.
const DEADLINE: Duration = Duration::from_secs(60);

pub async fn the_projects_modal_client_runs_execs_against_emulate_modal() {
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let emulate = Emulate::start("modal", &["--port", "0", "--router-jwt-ttl", "3"]);
    let transport = connect(emulate.get("MODAL_SERVER_URL"), None).expect("a transport");
    // Fakes: the emulator generated them.
    let credentials = Credentials {
        token_id: Secret::new("MODAL_TOKEN_ID", emulate.get("MODAL_TOKEN_ID")),
        token_secret: Secret::new("MODAL_TOKEN_SECRET", emulate.get("MODAL_TOKEN_SECRET")),
    };
    let plane = Arc::new(ControlPlane::new(transport, credentials));

    let image = api::ImageGetOrCreateRequest {
        image: Some(api::Image {
            dockerfile_commands: vec![format!(
                "FROM {}",
                sandbox_providers::docker::base::BASE_IMAGE
            )],
            ..Default::default()
        }),
        ..Default::default()
    };
    let image_id = plane
        .call("ImageGetOrCreate", image, DEADLINE, |mut c, r| async move {
            c.image_get_or_create(r).await
        })
        .await
        .expect("an image")
        .image_id;
    let join = api::ImageJoinStreamingRequest {
        image_id: image_id.clone(),
        timeout: 55.0,
        ..Default::default()
    };
    let mut result = None;
    while result.is_none() {
        let mut stream = plane
            .call(
                "ImageJoinStreaming",
                join.clone(),
                DEADLINE,
                |mut c, r| async move { c.image_join_streaming(r).await },
            )
            .await
            .expect("the build's stream");
        while let Some(message) = stream.message().await.expect("a build message") {
            result = message.result.or(result);
        }
    }
    assert_eq!(
        result.map(|r| r.status()),
        Some(api::generic_result::GenericStatus::Success)
    );

    let create = api::SandboxCreateRequest {
        definition: Some(api::Sandbox {
            image_id,
            ..Default::default()
        }),
        tags: vec![api::SandboxTag {
            tag_name: "sandbox-matrix.run".into(),
            tag_value: run_id.clone(),
        }],
        ..Default::default()
    };
    let sandbox_id = plane
        .call("SandboxCreate", create, DEADLINE, |mut c, r| async move {
            c.sandbox_create(r).await
        })
        .await
        .expect("a sandbox")
        .sandbox_id;
    let task = api::SandboxGetTaskIdRequest {
        sandbox_id: sandbox_id.clone(),
        timeout: Some(55.0),
        ..Default::default()
    };
    let task_id = plane
        .call("SandboxGetTaskId", task, DEADLINE, |mut c, r| async move {
            c.sandbox_get_task_id(r).await
        })
        .await
        .expect("the task id")
        .task_id
        .expect("a task within 55 s");

    let router = Router::new(plane.clone(), task_id, None, None, Arc::default());
    let uid = ["id".to_owned(), "-u".to_owned()];
    let as_user = router.exec(&uid, false, DEADLINE).await.expect("exec");
    assert_eq!(
        (as_user.exit_code, as_user.stdout.as_str()),
        (Some(0), "1000\n")
    );
    let as_root = router
        .exec(&uid, true, DEADLINE)
        .await
        .expect("exec as root");
    assert_eq!(
        (as_root.exit_code, as_root.stdout.as_str()),
        (Some(0), "0\n")
    );
    // The JWT expires after 3 s: the router refuses it, the client fetches another.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let code = ["python3", "-c", "print(1+1)"].map(str::to_owned);
    let after = router
        .exec(&code, false, DEADLINE)
        .await
        .expect("an exec after the JWT expired");
    assert_eq!((after.exit_code, after.stdout.as_str()), (Some(0), "2\n"));

    // The router ends a stdio read at its deadline, on the stream: an exec that outlives
    // its own deadline fails at that deadline, not when the command ends.
    let long = ["sh", "-c", "echo started; sleep 10; echo ended"].map(str::to_owned);
    let started = std::time::Instant::now();
    let cut = router.exec(&long, false, Duration::from_secs(3)).await;
    let took = started.elapsed();
    assert!(
        cut.is_err() && took < Duration::from_secs(8),
        "an exec with a 3 s deadline gave {cut:?} after {took:?}"
    );
    // An exec longer than one router call's 30 s is read to its end: each read's deadline
    // is the exec's (the client's reads once had 30 s, and failed here).
    let longer = ["sh", "-c", "echo started; sleep 32; echo ended"].map(str::to_owned);
    let out = router
        .exec(&longer, false, DEADLINE)
        .await
        .expect("an exec of 32 s within its 60 s");
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "started\nended\n")
    );

    let terminate = api::SandboxTerminateRequest { sandbox_id };
    plane
        .call(
            "SandboxTerminate",
            terminate,
            DEADLINE,
            |mut c, r| async move { c.sandbox_terminate(r).await },
        )
        .await
        .expect("terminate");
    let left = common::left_by_run(&run_id);
    assert!(left.is_empty(), "terminated, yet {left:?} is left");
    let builds = emulate.get("SANDBOX_MATRIX_EMULATOR_RUN").to_owned();
    emulate.stop();
    let left = common::left_by_run(&builds);
    assert!(left.is_empty(), "emulate modal left {left:?}");
}
