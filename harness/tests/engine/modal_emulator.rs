//! `sandbox-matrix emulate modal`, the binary, at the gRPC level with the messages of
//! providers/proto/modal: it refuses calls without its token (plain and through its TLS
//! front, whose test CA a client must trust), refuses bad requests by name, and runs a
//! sandbox's exec through the task command router only with a JWT it issued for that task
//! and that has not expired (`--router-jwt-ttl 2`: a client must fetch a fresh one, as on
//! `Unauthenticated` it does). A build takes its COPY's file from a context mount (the Mount
//! RPCs) and builds on a base image; an exec and a sandbox end at their `timeout_secs`; a field
//! the emulator has but does not implement is refused by its path. Terminate is
//! idempotent, and nothing of the run is left.
//!
//! Its faults: `--unavailable-once SandboxCreate` answers the first create Unavailable and
//! the next one normally; with `--no-task` a sandbox never gets a task (nor a result) until
//! terminated; an option naming an RPC it does not serve is bad input (exit 2).
//!
//! Needs Docker (required under CI=true). `cargo test -p sandbox-matrix --test engine modal_emulator::`.

use crate::common;

use std::time::Duration;

use common::emulate::Emulate;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};
use sandbox_providers::modal::proto::client as api;
use sandbox_providers::modal::proto::router;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request};

use api::modal_client_client::ModalClientClient;
use router::task_command_router_client::TaskCommandRouterClient;

/// `message` with the token id and secret every control-plane call carries.
fn signed<T>(message: T, (id, secret): (&str, &str)) -> Request<T> {
    let mut request = Request::new(message);
    let metadata = request.metadata_mut();
    metadata.insert("x-modal-token-id", id.parse().expect("an ASCII token id"));
    metadata.insert(
        "x-modal-token-secret",
        secret.parse().expect("an ASCII token secret"),
    );
    request
}

/// `message` with the router's `authorization: Bearer <jwt>`.
fn bearer<T>(message: T, jwt: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {jwt}").parse().expect("an ASCII JWT"),
    );
    request
}

/// A fresh router JWT for `task_id`, and the router's URL.
async fn access(
    control: &mut ModalClientClient<Channel>,
    token: (&str, &str),
    task_id: &str,
) -> (String, String) {
    let access = control
        .task_get_command_router_access(signed(
            api::TaskGetCommandRouterAccessRequest {
                task_id: task_id.to_owned(),
            },
            token,
        ))
        .await
        .expect("router access for a running task")
        .into_inner();
    (access.jwt, access.url)
}

fn start(task_id: &str, exec_id: &str, script: &str) -> router::TaskExecStartRequest {
    router::TaskExecStartRequest {
        task_id: task_id.to_owned(),
        exec_id: exec_id.to_owned(),
        command_args: vec!["sh".into(), "-c".into(), script.into()],
        stdout_config: router::TaskExecStdoutConfig::Pipe as i32,
        stderr_config: router::TaskExecStderrConfig::Pipe as i32,
        ..Default::default()
    }
}

pub async fn emulate_modal_checks_tokens_requests_and_router_jwts() {
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let emulate = Emulate::start("modal", &["--port", "0", "--router-jwt-ttl", "2"]);
    let token = (
        emulate.get("MODAL_TOKEN_ID").to_owned(),
        emulate.get("MODAL_TOKEN_SECRET").to_owned(),
    );
    let token = (token.0.as_str(), token.1.as_str());
    let server_url = emulate.get("MODAL_SERVER_URL").to_owned();
    let channel = Endpoint::from_shared(server_url.clone())
        .expect("a valid URL")
        .connect()
        .await
        .expect("plain gRPC on loopback");
    let mut control = ModalClientClient::new(channel.clone());

    // The token: the emulator's, or nothing is answered.
    for (why, request) in [
        ("no token", Request::new(())),
        ("a wrong secret", signed((), (token.0, "sm-fake-as-wrong"))),
    ] {
        let refused = control.client_hello(request).await.expect_err(why);
        assert_eq!(refused.code(), Code::Unauthenticated, "{why}: {refused:?}");
    }
    control
        .client_hello(signed((), token))
        .await
        .expect("ClientHello with the emulator's token");

    // Through the TLS front, trusting its test CA, under the certified name.
    let domain = emulate
        .get(RESOLVE_VAR)
        .split_once('=')
        .expect("<domain>=127.0.0.1")
        .0
        .to_owned();
    let tls_url = emulate.get("SANDBOX_MATRIX_MODAL_TLS_URL");
    let tls_port = tls_url.rsplit(':').next().expect("a port");
    let ca = std::fs::read_to_string(emulate.get(CA_FILE_VAR)).expect("the CA file");
    let tls = Endpoint::from_shared(format!("https://127.0.0.1:{tls_port}"))
        .expect("a valid URL")
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(format!("api.{domain}")),
        )
        .expect("a TLS configuration")
        .connect()
        .await
        .expect("TLS to the front, trusting the test CA");
    ModalClientClient::new(tls)
        .client_hello(signed((), token))
        .await
        .expect("ClientHello over TLS");

    // Bad requests are refused by name.
    let no_app = control
        .app_get_or_create(signed(api::AppGetOrCreateRequest::default(), token))
        .await
        .expect_err("an app without a name");
    assert_eq!(no_app.code(), Code::InvalidArgument);
    let app = |name: &str| api::AppGetOrCreateRequest {
        app_name: name.to_owned(),
        ..Default::default()
    };
    let app_id = control
        .app_get_or_create(signed(app("sm-proof"), token))
        .await
        .expect("an app")
        .into_inner()
        .app_id;
    let again = control
        .app_get_or_create(signed(app("sm-proof"), token))
        .await
        .expect("the same app")
        .into_inner()
        .app_id;
    assert_eq!(app_id, again, "an app name names one app");
    let image = |commands: &[&str]| api::ImageGetOrCreateRequest {
        image: Some(api::Image {
            dockerfile_commands: commands.iter().map(|c| (*c).to_owned()).collect(),
            ..Default::default()
        }),
        app_id: app_id.clone(),
        ..Default::default()
    };
    let no_from = control
        .image_get_or_create(signed(image(&["RUN true"]), token))
        .await
        .expect_err("a Dockerfile without FROM");
    assert_eq!(no_from.code(), Code::InvalidArgument);
    assert!(no_from.message().contains("FROM"), "{no_from:?}");
    let sandbox = |image_id: &str| api::SandboxCreateRequest {
        app_id: app_id.clone(),
        definition: Some(api::Sandbox {
            image_id: image_id.to_owned(),
            ..Default::default()
        }),
        tags: vec![api::SandboxTag {
            tag_name: "sandbox-matrix.run".into(),
            tag_value: run_id.clone(),
        }],
    };
    let no_image = control
        .sandbox_create(signed(sandbox("im-none"), token))
        .await
        .expect_err("a sandbox of an unknown image");
    assert_eq!(no_image.code(), Code::NotFound);
    let no_task = control
        .task_get_command_router_access(signed(
            api::TaskGetCommandRouterAccessRequest {
                task_id: "ta-none".into(),
            },
            token,
        ))
        .await
        .expect_err("router access to an unknown task");
    assert_eq!(no_task.code(), Code::NotFound);

    // A sandbox of the base with a file COPYed from a context mount, uploaded as the
    // official client uploads one (modal 1.6.4 modal/mount.py, `_Mount._load_mount`), in
    // a layer on a base image (`base_images`, as its `Image.from_dockerfile` builds), each
    // built as the client follows it.
    let copied = br#"{"copied": "from a context mount"}"#.to_vec();
    let sha256_hex: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(&copied)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let missing = control
        .mount_batched_check_existence(signed(
            api::MountBatchedCheckExistenceRequest {
                sha256_hex_hashes: vec![sha256_hex.clone()],
            },
            token,
        ))
        .await
        .expect("which contents the emulator holds")
        .into_inner()
        .missing_sha256_hex_hashes;
    assert_eq!(missing, vec![sha256_hex.clone()]);
    let put = |data| api::MountPutFileRequest {
        sha256_hex: sha256_hex.clone(),
        data_oneof: Some(data),
    };
    use api::mount_put_file_request::DataOneof;
    // The blob store is not emulated: a file put through it is refused by its field.
    let blob = control
        .mount_put_file(signed(put(DataOneof::DataBlobId("bl-1".into())), token))
        .await
        .expect_err("a file put through the blob store");
    assert_eq!(blob.code(), Code::Unimplemented, "{blob:?}");
    assert!(
        blob.message().contains("`data_blob_id` (set to bl-1)"),
        "{blob:?}"
    );
    let put = control
        .mount_put_file(signed(put(DataOneof::Data(copied.clone())), token))
        .await
        .expect("a file put")
        .into_inner();
    assert!(put.exists);
    let file = api::MountFile {
        filename: "/environment.json".into(),
        sha256_hex: sha256_hex.clone(),
        mode: Some(0o640),
        size: None,
    };
    let mount = |files| api::MountGetOrCreateRequest {
        object_creation_type: api::ObjectCreationType::AnonymousOwnedByApp as i32,
        app_id: app_id.clone(),
        files,
        ..Default::default()
    };
    let size = u64::try_from(copied.len()).expect("small");
    let sized = control
        .mount_get_or_create(signed(
            mount(vec![api::MountFile {
                size: Some(size),
                ..file.clone()
            }]),
            token,
        ))
        .await
        .expect_err("a mount file with its size");
    assert_eq!(sized.code(), Code::Unimplemented, "{sized:?}");
    assert!(
        sized
            .message()
            .contains(&format!("`files.size` (set to {size})")),
        "{sized:?}"
    );
    let mount_id = control
        .mount_get_or_create(signed(mount(vec![file]), token))
        .await
        .expect("a context mount")
        .into_inner()
        .mount_id;
    let base = format!("FROM {}", sandbox_providers::docker::base::BASE_IMAGE);
    let layer = api::Image {
        dockerfile_commands: vec![base, "COPY environment.json /etc/copied.json".into()],
        context_mount_id: mount_id,
        ..Default::default()
    };
    let layer = built(&mut control, token, &app_id, layer).await;
    let on_base = api::Image {
        base_images: vec![api::BaseImage {
            image_id: layer,
            docker_tag: "base".into(),
        }],
        dockerfile_commands: vec!["FROM base".into()],
        ..Default::default()
    };
    let image_id = built(&mut control, token, &app_id, on_base).await;
    // A field the emulator has but does not implement is refused by its path.
    let mut sized = sandbox(&image_id);
    if let Some(definition) = sized.definition.as_mut() {
        definition.resources = Some(api::Resources {
            memory_mb: 512,
            ..Default::default()
        });
    }
    let sized = control
        .sandbox_create(signed(sized, token))
        .await
        .expect_err("a sandbox with a memory size");
    assert_eq!(sized.code(), Code::Unimplemented, "{sized:?}");
    assert!(
        sized
            .message()
            .contains("`definition.resources.memory_mb` (set to 512)"),
        "{sized:?}"
    );
    let sandbox_id = control
        .sandbox_create(signed(sandbox(&image_id), token))
        .await
        .expect("a sandbox")
        .into_inner()
        .sandbox_id;
    assert!(
        sandbox_id.starts_with("sb-") && sandbox_id.len() == 25,
        "not a V1 sandbox id: {sandbox_id}"
    );
    let task_id = control
        .sandbox_get_task_id(signed(
            api::SandboxGetTaskIdRequest {
                sandbox_id: sandbox_id.clone(),
                timeout: Some(55.0),
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("the task id")
        .into_inner()
        .task_id
        .expect("a task within 55 s");

    // The router: only with a JWT the emulator issued for the task, before it expires.
    let (jwt, url) = access(&mut control, token, &task_id).await;
    assert_eq!(
        url, server_url,
        "the router is served beside the control plane"
    );
    let mut tasks = TaskCommandRouterClient::new(channel);
    for (why, request) in [
        ("no JWT", Request::new(start(&task_id, "e1", "true"))),
        (
            "a JWT it did not issue",
            bearer(start(&task_id, "e1", "true"), "a.b.c"),
        ),
    ] {
        let refused = tasks.task_exec_start(request).await.expect_err(why);
        assert_eq!(refused.code(), Code::Unauthenticated, "{why}: {refused:?}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let expired = tasks
        .task_exec_start(bearer(start(&task_id, "e1", "true"), &jwt))
        .await
        .expect_err("a JWT past its 2 s");
    assert_eq!(expired.code(), Code::Unauthenticated, "{expired:?}");
    assert!(expired.message().contains("expired"), "{expired:?}");

    let script = "echo out; echo err >&2; exit 3";
    let (jwt, _) = access(&mut control, token, &task_id).await;
    for _ in 0..2 {
        // The exec id is the idempotency key: the second start starts nothing.
        tasks
            .task_exec_start(bearer(start(&task_id, "e2", script), &jwt))
            .await
            .expect("an exec with a fresh JWT");
    }
    let (jwt, _) = access(&mut control, token, &task_id).await;
    let exit = tasks
        .task_exec_wait(bearer(
            router::TaskExecWaitRequest {
                task_id: task_id.clone(),
                exec_id: "e2".into(),
            },
            &jwt,
        ))
        .await
        .expect("the exec's exit")
        .into_inner()
        .exit_status;
    assert_eq!(
        exit,
        Some(router::task_exec_wait_response::ExitStatus::Code(3))
    );
    for (fd, expected) in [
        (router::TaskExecStdioFileDescriptor::Stdout, "out\n"),
        (router::TaskExecStdioFileDescriptor::Stderr, "err\n"),
    ] {
        let (jwt, _) = access(&mut control, token, &task_id).await;
        let mut read = tasks
            .task_exec_stdio_read(bearer(
                router::TaskExecStdioReadRequest {
                    task_id: task_id.clone(),
                    exec_id: "e2".into(),
                    offset: 0,
                    file_descriptor: fd as i32,
                },
                &jwt,
            ))
            .await
            .expect("the exec's output")
            .into_inner();
        let mut data = Vec::new();
        while let Some(message) = read.message().await.expect("an output message") {
            data.extend(message.data);
        }
        assert_eq!(String::from_utf8_lossy(&data), expected, "{fd:?}");
    }
    // The COPY put the mount's file into the image, with the mode the mount gave it.
    let (jwt, _) = access(&mut control, token, &task_id).await;
    let script = "stat -c %a /etc/copied.json && cat /etc/copied.json";
    tasks
        .task_exec_start(bearer(start(&task_id, "e-copied", script), &jwt))
        .await
        .expect("an exec reading the copied file");
    let mut read = tasks
        .task_exec_stdio_read(bearer(
            router::TaskExecStdioReadRequest {
                task_id: task_id.clone(),
                exec_id: "e-copied".into(),
                offset: 0,
                file_descriptor: router::TaskExecStdioFileDescriptor::Stdout as i32,
            },
            &jwt,
        ))
        .await
        .expect("the exec's output")
        .into_inner();
    let mut data = Vec::new();
    while let Some(message) = read.message().await.expect("an output message") {
        data.extend(message.data);
    }
    assert_eq!(
        String::from_utf8_lossy(&data),
        format!("640\n{}", String::from_utf8_lossy(&copied))
    );

    // An exec ends at its timeout_secs, killed (128 + 9).
    let (jwt, _) = access(&mut control, token, &task_id).await;
    let slow = router::TaskExecStartRequest {
        timeout_secs: Some(1),
        ..start(&task_id, "e3", "sleep 30")
    };
    let started = std::time::Instant::now();
    tasks
        .task_exec_start(bearer(slow, &jwt))
        .await
        .expect("an exec with a timeout");
    let exit = tasks
        .task_exec_wait(bearer(
            router::TaskExecWaitRequest {
                task_id: task_id.clone(),
                exec_id: "e3".into(),
            },
            &jwt,
        ))
        .await
        .expect("the timed-out exec's exit")
        .into_inner()
        .exit_status;
    assert_eq!(
        exit,
        Some(router::task_exec_wait_response::ExitStatus::Code(137))
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the exec outlived its timeout: {:?}",
        started.elapsed()
    );
    let stdin = tasks
        .task_exec_stdin_write(bearer(router::TaskExecStdinWriteRequest::default(), &jwt))
        .await
        .expect_err("stdin is not emulated");
    assert_eq!(stdin.code(), Code::Unimplemented);

    // A sandbox ends at its timeout_secs, with a timeout's result.
    let mut brief = sandbox(&image_id);
    if let Some(definition) = brief.definition.as_mut() {
        definition.timeout_secs = 2;
    }
    let brief = control
        .sandbox_create(signed(brief, token))
        .await
        .expect("a sandbox with a 2 s timeout")
        .into_inner()
        .sandbox_id;
    let ended = control
        .sandbox_wait(signed(
            api::SandboxWaitRequest {
                sandbox_id: brief,
                timeout: 50.0,
            },
            token,
        ))
        .await
        .expect("the brief sandbox's end")
        .into_inner()
        .result
        .map(|r| r.status());
    assert_eq!(ended, Some(api::generic_result::GenericStatus::Timeout));

    // Terminate ends it once; again, it says how it had ended.
    let terminate = api::SandboxTerminateRequest {
        sandbox_id: sandbox_id.clone(),
    };
    let first = control
        .sandbox_terminate(signed(terminate.clone(), token))
        .await
        .expect("terminate")
        .into_inner();
    assert_eq!(first.existing_result, None);
    let second = control
        .sandbox_terminate(signed(terminate, token))
        .await
        .expect("terminate again")
        .into_inner();
    assert_eq!(
        second.existing_result.map(|r| r.status()),
        Some(api::generic_result::GenericStatus::Terminated)
    );
    let gone = control
        .task_get_command_router_access(signed(
            api::TaskGetCommandRouterAccessRequest {
                task_id: task_id.clone(),
            },
            token,
        ))
        .await
        .expect_err("router access to a terminated sandbox's task");
    assert_eq!(gone.code(), Code::NotFound);
    // A sandbox that ended while its container was still starting (the brief one, on a
    // loaded machine) has that container removed once the start returns: wait for it.
    let mut left = common::left_by_run(&run_id);
    let waited = std::time::Instant::now();
    while !left.is_empty() && waited.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        left = common::left_by_run(&run_id);
    }
    assert!(
        left.is_empty(),
        "terminated, yet {left:?} is left after 60 s"
    );

    let builds = emulate.get("SANDBOX_MATRIX_EMULATOR_RUN").to_owned();
    emulate.stop();
    let left = common::left_by_run(&builds);
    assert!(left.is_empty(), "emulate modal left {left:?}");
}

/// An image of the reference base, built: its id.
async fn base_image(control: &mut ModalClientClient<Channel>, token: (&str, &str)) -> String {
    let base = format!("FROM {}", sandbox_providers::docker::base::BASE_IMAGE);
    let image = api::Image {
        dockerfile_commands: vec![base],
        ..Default::default()
    };
    built(control, token, "", image).await
}

/// `image` of app `app_id`, built as the client follows a build: its id.
async fn built(
    control: &mut ModalClientClient<Channel>,
    token: (&str, &str),
    app_id: &str,
    image: api::Image,
) -> String {
    let image_id = control
        .image_get_or_create(signed(
            api::ImageGetOrCreateRequest {
                image: Some(image),
                app_id: app_id.to_owned(),
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("an image")
        .into_inner()
        .image_id;
    let mut joined = control
        .image_join_streaming(signed(
            api::ImageJoinStreamingRequest {
                image_id: image_id.clone(),
                timeout: 55.0,
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("the build's stream")
        .into_inner();
    while let Some(message) = joined.message().await.expect("a build message") {
        if let Some(result) = message.result {
            assert_eq!(
                result.status(),
                api::generic_result::GenericStatus::Success,
                "{result:?}"
            );
            return image_id;
        }
    }
    panic!("the build's stream ended without its result");
}

pub async fn emulate_modal_injects_unavailable_once_and_sandboxes_without_a_task() {
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args([
            "emulate",
            "modal",
            "--unavailable-once",
            "SandboxCreat",
            "--root",
        ])
        .arg(common::root())
        .output()
        .expect("the binary runs");
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("SandboxCreat: not an RPC"),
        "{bad:?}"
    );

    let run_id = sandbox_matrix::run::runner::new_run_id();
    let emulate = Emulate::start(
        "modal",
        &[
            "--port",
            "0",
            "--unavailable-once",
            "SandboxCreate",
            "--no-task",
        ],
    );
    let token = (
        emulate.get("MODAL_TOKEN_ID").to_owned(),
        emulate.get("MODAL_TOKEN_SECRET").to_owned(),
    );
    let token = (token.0.as_str(), token.1.as_str());
    let channel = Endpoint::from_shared(emulate.get("MODAL_SERVER_URL").to_owned())
        .expect("a valid URL")
        .connect()
        .await
        .expect("plain gRPC on loopback");
    let mut control = ModalClientClient::new(channel);
    let image_id = base_image(&mut control, token).await;
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
    let unavailable = control
        .sandbox_create(signed(create.clone(), token))
        .await
        .expect_err("the first create, injected");
    assert_eq!(unavailable.code(), Code::Unavailable, "{unavailable:?}");
    let sandbox_id = control
        .sandbox_create(signed(create, token))
        .await
        .expect("the second create")
        .into_inner()
        .sandbox_id;
    let waited = control
        .sandbox_get_task_id(signed(
            api::SandboxGetTaskIdRequest {
                sandbox_id: sandbox_id.clone(),
                timeout: Some(1.0),
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("an answer within its timeout")
        .into_inner();
    assert_eq!(
        waited,
        api::SandboxGetTaskIdResponse::default(),
        "no task, and no result"
    );
    assert!(
        common::left_by_run(&run_id).is_empty(),
        "a sandbox without a task has no container"
    );
    let terminated = control
        .sandbox_terminate(signed(
            api::SandboxTerminateRequest {
                sandbox_id: sandbox_id.clone(),
            },
            token,
        ))
        .await
        .expect("terminating a sandbox without a task")
        .into_inner();
    assert_eq!(terminated.existing_result, None);
    let ended = control
        .sandbox_get_task_id(signed(
            api::SandboxGetTaskIdRequest {
                sandbox_id,
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("the task id of a terminated sandbox")
        .into_inner();
    assert_eq!(ended.task_id, None);
    assert_eq!(
        ended.task_result.map(|r| r.status()),
        Some(api::generic_result::GenericStatus::Terminated)
    );
    let builds = emulate.get("SANDBOX_MATRIX_EMULATOR_RUN").to_owned();
    emulate.stop();
    let left = common::left_by_run(&builds);
    assert!(left.is_empty(), "emulate modal left {left:?}");
}
