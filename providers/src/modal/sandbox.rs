//! The modal variant's lifecycle on the control plane: the app, an image built from an
//! environment's Dockerfile (streamed logs; the image id is the artifact), a sandbox from
//! that image and its task, and its end.
//!
//! The base's registry credential travels as an ephemeral Secret named by the image's
//! `ImageRegistryConfig`, and that Secret is deleted by id as soon as the build ends,
//! whatever happened. A login token (ECR's included) is sent as static credentials
//! (`REGISTRY_USERNAME`/`REGISTRY_PASSWORD`): Modal's AWS auth type wants long-lived AWS
//! keys, which a run does not hand out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::client::ControlPlane;
use super::proto::client::generic_result::GenericStatus;
use super::proto::client::network_access::NetworkAccessType;
use super::proto::client::{
    AppGetOrCreateRequest, DeploymentNamespace, GenericResult, Image, ImageContextFile,
    ImageGetOrCreateRequest, ImageJoinStreamingRequest, ImageRegistryConfig, NetworkAccess,
    ObjectCreationType, RegistryAuthType, Sandbox, SandboxCreateRequest, SandboxGetTaskIdRequest,
    SandboxTag, SandboxTerminateRequest, SandboxWaitRequest, SchedulerPlacement,
    SecretDeleteRequest, SecretGetOrCreateRequest,
};
use crate::{ErrorKind, LogFn, ProviderError, RegistryCredential, Result, RunLabels};

/// The deadline of each short control-plane call.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// The longest server-side wait one `ImageJoinStreaming` or `SandboxGetTaskId` asks for,
/// as the official client. A wait is this or the whole budget, whichever is shorter, never
/// what is left of it: requests stay the same from run to run, so replay can match them.
const LONG_POLL: Duration = Duration::from_secs(55);
/// How much of a failed build's log its error quotes.
const LOG_TAIL: usize = 2000;

/// The app every sandbox-matrix sandbox belongs to, made when missing; its id.
pub async fn app(plane: &ControlPlane, name: &str) -> Result<String> {
    let request = AppGetOrCreateRequest {
        app_name: name.to_owned(),
        object_creation_type: ObjectCreationType::CreateIfMissing as i32,
        ..Default::default()
    };
    let response = plane
        .call(
            "AppGetOrCreate",
            request,
            CALL_DEADLINE,
            |mut c, r| async move { c.app_get_or_create(r).await },
        )
        .await?;
    Ok(response.app_id)
}

/// A Dockerfile (its base argument already resolved) as Modal's `dockerfile_commands`:
/// its lines from the first `FROM` on.
pub fn dockerfile_commands(dockerfile: &str) -> Result<Vec<String>> {
    let lines: Vec<&str> = dockerfile.lines().collect();
    let first = lines
        .iter()
        .position(|l| {
            l.trim_start()
                .get(..5)
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM "))
        })
        .ok_or_else(|| ProviderError::new(ErrorKind::Config, "the Dockerfile has no FROM"))?;
    Ok(lines[first..].iter().map(|l| (*l).to_owned()).collect())
}

/// What an image is built from: the Dockerfile's commands, the context files they copy,
/// the credential of the base's registry and the build's secrets.
#[derive(Default)]
pub struct ImageSpec<'a> {
    /// The Dockerfile from its first `FROM` on, the base argument resolved.
    pub commands: Vec<String>,
    /// The files the commands copy from the build context.
    pub context_files: Vec<ImageContextFile>,
    /// Pulls the base, through an ephemeral registry Secret.
    pub credential: Option<&'a RegistryCredential>,
    /// Handed to the build as the environment of an ephemeral Secret (as `REGISTRY_TOKEN`
    /// for the first, `REGISTRY_TOKEN_<n>` after), as a build token would be.
    pub build_secrets: &'a [crate::Secret],
    /// Told the image's id as soon as Modal answers it, before the build ends (the run
    /// ledger records it then).
    pub on_image: Option<&'a (dyn Fn(&str) + Send + Sync)>,
    /// The image builder version the build asks for (`ImageGetOrCreate.builder_version`),
    /// which the official client always sends.
    pub builder_version: &'a str,
}

/// Builds the image of `spec` in `app_id`; its id. Build logs go to `log` as they arrive.
/// Each Secret made for the build is deleted by id as soon as the build ends, whatever
/// happened.
pub async fn build(
    plane: &ControlPlane,
    app_id: &str,
    spec: ImageSpec<'_>,
    log: &LogFn,
    deadline: Duration,
) -> Result<String> {
    let mut secrets = Vec::new();
    let built = build_with_secrets(plane, app_id, spec, log, deadline, &mut secrets).await;
    let mut deleted = Ok(());
    for secret_id in secrets {
        let outcome = plane
            .call(
                "SecretDelete",
                SecretDeleteRequest {
                    secret_id: secret_id.clone(),
                },
                CALL_DEADLINE,
                |mut c, r| async move { c.secret_delete(r).await },
            )
            .await
            .map_err(|e| e.context(format!("deleting the build's Secret {secret_id}")));
        if deleted.is_ok() {
            deleted = outcome;
        }
    }
    match (built, deleted) {
        (Ok(image), Ok(())) => Ok(image),
        (Err(e), Ok(())) => Err(e),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), Err(delete)) => Err(e.context(format!("and then: {delete}"))),
    }
}

/// An ephemeral Secret of `env` in `app_id`; its id.
async fn secret(
    plane: &ControlPlane,
    app_id: &str,
    env: HashMap<String, String>,
) -> Result<String> {
    let request = SecretGetOrCreateRequest {
        object_creation_type: ObjectCreationType::Ephemeral as i32,
        env_dict: env,
        app_id: app_id.to_owned(),
        ..Default::default()
    };
    Ok(plane
        .call(
            "SecretGetOrCreate",
            request,
            CALL_DEADLINE,
            |mut c, r| async move { c.secret_get_or_create(r).await },
        )
        .await?
        .secret_id)
}

/// [`build`] before its Secrets are deleted; every Secret it made is pushed to `made`.
async fn build_with_secrets(
    plane: &ControlPlane,
    app_id: &str,
    mut spec: ImageSpec<'_>,
    log: &LogFn,
    deadline: Duration,
    made: &mut Vec<String>,
) -> Result<String> {
    let registry = match spec.credential {
        Some(credential) => {
            let env = HashMap::from([
                ("REGISTRY_USERNAME".to_owned(), credential.username.clone()),
                (
                    "REGISTRY_PASSWORD".to_owned(),
                    credential.password.expose().to_owned(),
                ),
            ]);
            let id = secret(plane, app_id, env).await?;
            made.push(id.clone());
            Some(ImageRegistryConfig {
                registry_auth_type: RegistryAuthType::StaticCreds as i32,
                secret_id: id,
            })
        }
        None => None,
    };
    let mut secret_ids = Vec::new();
    if !spec.build_secrets.is_empty() {
        let env = spec
            .build_secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name = match i {
                    0 => "REGISTRY_TOKEN".to_owned(),
                    n => format!("REGISTRY_TOKEN_{n}"),
                };
                (name, s.expose().to_owned())
            })
            .collect();
        let id = secret(plane, app_id, env).await?;
        made.push(id.clone());
        secret_ids.push(id);
    }
    let image = Image {
        dockerfile_commands: std::mem::take(&mut spec.commands),
        context_files: std::mem::take(&mut spec.context_files),
        secret_ids,
        image_registry_config: registry,
        ..Default::default()
    };
    build_image(plane, app_id, image, &spec, log, deadline).await
}

async fn build_image(
    plane: &ControlPlane,
    app_id: &str,
    image: Image,
    spec: &ImageSpec<'_>,
    log: &LogFn,
    deadline: Duration,
) -> Result<String> {
    let started = Instant::now();
    let request = ImageGetOrCreateRequest {
        image: Some(image),
        app_id: app_id.to_owned(),
        builder_version: spec.builder_version.to_owned(),
        // The workspace's namespace, as the official client names it.
        namespace: DeploymentNamespace::Workspace as i32,
        ..Default::default()
    };
    let created = plane
        .call(
            "ImageGetOrCreate",
            request,
            CALL_DEADLINE,
            |mut c, r| async move { c.image_get_or_create(r).await },
        )
        .await?;
    let image_id = created.image_id;
    if let Some(told) = spec.on_image {
        told(&image_id);
    }
    let mut logs = String::new();
    let mut result = created.result.filter(ended);
    let mut last_entry_id = String::new();
    while result.is_none() {
        if started.elapsed() >= deadline {
            return Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "image {image_id} was still building after {}",
                    crate::for_people(deadline)
                ),
            ));
        }
        let wait = deadline.min(LONG_POLL);
        let request = ImageJoinStreamingRequest {
            image_id: image_id.clone(),
            timeout: wait.as_secs_f32(),
            last_entry_id: last_entry_id.clone(),
            include_logs_for_finished: true,
        };
        let mut stream = plane
            .call(
                "ImageJoinStreaming",
                request,
                wait + CALL_DEADLINE,
                |mut c, r| async move { c.image_join_streaming(r).await },
            )
            .await?;
        while let Some(frame) = stream
            .message()
            .await
            .map_err(|s| super::client::status_error("ImageJoinStreaming", &s))?
        {
            for entry in frame.task_logs {
                for line in entry.data.lines() {
                    log(line);
                }
                logs.push_str(&entry.data);
            }
            if !frame.entry_id.is_empty() {
                last_entry_id = frame.entry_id;
            }
            if let Some(r) = frame.result.filter(ended) {
                result = Some(r);
                break;
            }
        }
    }
    let result = result.unwrap_or_default();
    if result.status == GenericStatus::Success as i32 {
        return Ok(image_id);
    }
    Err(ProviderError::new(
        ErrorKind::Build,
        format!(
            "image {image_id} build {}: {}; log tail:\n{}",
            status_name(&result),
            result.exception,
            crate::tail(&logs, LOG_TAIL)
        ),
    ))
}

/// How sandbox `sandbox_id` ended, asked without waiting (`SandboxWait`, timeout 0): `None`
/// while it runs.
pub async fn ending(plane: &ControlPlane, sandbox_id: &str) -> Result<Option<GenericResult>> {
    let response = plane
        .call(
            "SandboxWait",
            SandboxWaitRequest {
                sandbox_id: sandbox_id.to_owned(),
                timeout: 0.0,
            },
            CALL_DEADLINE,
            |mut c, r| async move { c.sandbox_wait(r).await },
        )
        .await?;
    Ok(response.result.filter(ended))
}

/// An ended sandbox's result for a person: `Modal says it failed (exit 137): …`.
pub fn describe_ending(result: &GenericResult) -> String {
    let mut said = format!(
        "Modal says it {} (exit {})",
        status_name(result),
        result.exitcode
    );
    if !result.exception.is_empty() {
        said.push_str(&format!(": {}", result.exception));
    }
    said
}

/// Whether a result says its task has ended.
fn ended(result: &GenericResult) -> bool {
    result.status != GenericStatus::Unspecified as i32
}

/// How a task ended, in words: `failed`, `timed out`, `was terminated`.
fn status_name(result: &GenericResult) -> &'static str {
    GenericStatus::try_from(result.status).map_or("ended with an unknown status", |s| match s {
        GenericStatus::Success => "succeeded",
        GenericStatus::Failure => "failed",
        GenericStatus::Terminated => "was terminated",
        GenericStatus::Timeout => "timed out",
        GenericStatus::InitFailure => "failed to start",
        GenericStatus::InternalFailure => "ended by an internal failure of Modal's",
        GenericStatus::IdleTimeout => "timed out idle",
        GenericStatus::MemoryManagerEviction => "was evicted for memory",
        GenericStatus::Unspecified => "ended",
    })
}

/// Creates a sandbox from `image_id` running `entrypoint` (the image's own when empty),
/// placed in `region`, tagged with the run's labels; its id.
pub async fn create(
    plane: &ControlPlane,
    app_id: &str,
    image_id: &str,
    entrypoint: Vec<String>,
    region: &str,
    labels: &RunLabels,
    lifetime: Duration,
) -> Result<String> {
    let request = SandboxCreateRequest {
        app_id: app_id.to_owned(),
        definition: Some(Sandbox {
            entrypoint_args: entrypoint,
            image_id: image_id.to_owned(),
            timeout_secs: u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX),
            // Named, as the official client names it: open, no allow-list.
            network_access: Some(NetworkAccess {
                network_access_type: NetworkAccessType::Open as i32,
                allowed_cidrs: Vec::new(),
            }),
            // As the official client places a sandbox given `region=` (modal 1.6.4,
            // `modal/sandbox/_common.py`, `scheduler_placement`).
            scheduler_placement: Some(SchedulerPlacement {
                regions: vec![region.to_owned()],
            }),
            ..Default::default()
        }),
        tags: labels
            .to_map()
            .into_iter()
            .map(|(tag_name, tag_value)| SandboxTag {
                tag_name,
                tag_value,
            })
            .collect(),
    };
    let response = plane
        .call(
            "SandboxCreate",
            request,
            CALL_DEADLINE,
            |mut c, r| async move { c.sandbox_create(r).await },
        )
        .await?;
    Ok(response.sandbox_id)
}

/// The task of `sandbox_id` once it has one, asking with a timeout each time; fails when
/// the sandbox ends first or `deadline` has passed when an answer comes.
pub async fn task_id(plane: &ControlPlane, sandbox_id: &str, deadline: Duration) -> Result<String> {
    let started = Instant::now();
    loop {
        if started.elapsed() >= deadline {
            return Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "sandbox {sandbox_id} had no task after {}",
                    crate::for_people(deadline)
                ),
            ));
        }
        let wait = deadline.min(LONG_POLL);
        let request = SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: Some(wait.as_secs_f32()),
            wait_until_ready: false,
        };
        let response = plane
            .call(
                "SandboxGetTaskId",
                request,
                wait + CALL_DEADLINE,
                |mut c, r| async move { c.sandbox_get_task_id(r).await },
            )
            .await?;
        if let Some(result) = response.task_result.filter(ended) {
            return Err(ProviderError::new(
                ErrorKind::Api,
                format!(
                    "sandbox {sandbox_id} {} before it had a task: {}",
                    status_name(&result),
                    result.exception
                ),
            ));
        }
        if let Some(task) = response.task_id.filter(|t| !t.is_empty()) {
            return Ok(task);
        }
    }
}

/// Terminates `sandbox_id` (a sandbox already ended is no error) and waits up to `grace`
/// for its result; the result, or `None` when it had not ended by then.
pub async fn terminate(
    plane: &ControlPlane,
    sandbox_id: &str,
    grace: Duration,
) -> Result<Option<GenericResult>> {
    plane
        .call(
            "SandboxTerminate",
            SandboxTerminateRequest {
                sandbox_id: sandbox_id.to_owned(),
            },
            CALL_DEADLINE,
            |mut c, r| async move { c.sandbox_terminate(r).await },
        )
        .await?;
    let response = plane
        .call(
            "SandboxWait",
            SandboxWaitRequest {
                sandbox_id: sandbox_id.to_owned(),
                timeout: grace.as_secs_f32(),
            },
            grace + CALL_DEADLINE,
            |mut c, r| async move { c.sandbox_wait(r).await },
        )
        .await?;
    Ok(response.result.filter(ended))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::api::Volatiles;
    use crate::api::grpc::{GrpcCassette, GrpcOptions, GrpcReplayServer};
    use crate::modal::client::{Credentials, TOKEN_ID_VAR, TOKEN_SECRET_VAR, connect};
    use crate::modal::proto::descriptors;
    use crate::{CredentialSource, Secret};

    // A fake registry password, never a real one.
    const FAKE_PASSWORD: &str = "sm-fake-registry-password";

    fn exchange(method: &str, request: &str, response: &str, status: i32) -> String {
        format!(
            "\n- method: /modal.client.ModalClient/{method}\n  request: {request}\n  \
             responses: [{response}]\n  grpc-status: {status}"
        )
    }

    async fn plane(exchanges: &str) -> (GrpcReplayServer, ControlPlane) {
        let text = format!(
            "origin: authored by hand from the subset api.proto, for the lifecycle's tests\n\
             variant: modal\nscenario: lifecycle-unit\nexchanges:{exchanges}\n"
        );
        // Fake credentials, never real ones.
        let credentials = Credentials {
            token_id: Secret::new(TOKEN_ID_VAR, "sm-fake-token-id"),
            token_secret: Secret::new(TOKEN_SECRET_VAR, "sm-fake-token-secret"),
        };
        let volatiles = Arc::new(Volatiles::default());
        let pool = descriptors().clone();
        let cassette = GrpcCassette::parse(&text, &pool).expect("the test cassette parses");
        let mut secrets = credentials.secrets();
        secrets.push(Secret::new(
            "SANDBOX_MATRIX_REGISTRY_PASSWORD",
            FAKE_PASSWORD,
        ));
        let options = GrpcOptions {
            credentials: secrets,
            volatiles: volatiles.clone(),
            ..GrpcOptions::default()
        };
        let server = GrpcReplayServer::start(cassette, pool, options)
            .await
            .expect("replay server starts");
        let transport = connect(&server.url(), None).expect("a loopback URL");
        (server, ControlPlane::new(transport, credentials))
    }

    fn credential() -> RegistryCredential {
        RegistryCredential {
            registry: "registry.test:5000".to_owned(),
            username: "sm-fake-user".to_owned(),
            password: Secret::new("SANDBOX_MATRIX_REGISTRY_PASSWORD", FAKE_PASSWORD),
            source: CredentialSource::Static,
        }
    }

    fn build_exchanges(result: &str) -> String {
        [
            exchange(
                "SecretGetOrCreate",
                "{object_creation_type: OBJECT_CREATION_TYPE_EPHEMERAL, app_id: ap-1, \
                 env_dict: {REGISTRY_USERNAME: sm-fake-user, \
                 REGISTRY_PASSWORD: \"<redacted:SANDBOX_MATRIX_REGISTRY_PASSWORD>\"}}",
                "{secret_id: st-1}",
                0,
            ),
            exchange(
                "ImageGetOrCreate",
                "{app_id: ap-1, image: {dockerfile_commands: [\"FROM base@sha256:00\", \
                 \"RUN true\"], image_registry_config: {registry_auth_type: \
                 REGISTRY_AUTH_TYPE_STATIC_CREDS, secret_id: st-1}}, \
                 namespace: DEPLOYMENT_NAMESPACE_WORKSPACE, builder_version: \"2025.06\"}",
                "{image_id: im-1}",
                0,
            ),
            format!(
                "\n- method: /modal.client.ModalClient/ImageJoinStreaming\n  \
                 request: {{image_id: im-1, timeout: 55, include_logs_for_finished: true}}\n  \
                 responses:\n  - {{task_logs: [{{data: \"Step 1/2\\nStep 2/2\\n\"}}], entry_id: \"1\"}}\n  \
                 - {{result: {result}, eof: true}}\n  grpc-status: 0"
            ),
            exchange("SecretDelete", "{secret_id: st-1}", "{}", 0),
        ]
        .concat()
    }

    async fn run_build(exchanges: &str) -> (GrpcReplayServer, Result<String>, Vec<String>) {
        let (server, plane) = plane(exchanges).await;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let log = move |line: &str| sink.lock().expect("log lock").push(line.to_owned());
        let commands =
            dockerfile_commands("# the base\nARG BASE_IMAGE=x\nFROM base@sha256:00\nRUN true")
                .expect("has a FROM");
        let credential = credential();
        let spec = ImageSpec {
            commands,
            credential: Some(&credential),
            builder_version: crate::modal::DEFAULT_IMAGE_BUILDER_VERSION,
            ..ImageSpec::default()
        };
        let built = build(&plane, "ap-1", spec, &log, Duration::from_secs(55)).await;
        let lines = lines.lock().expect("log lock").clone();
        (server, built, lines)
    }

    #[tokio::test]
    async fn a_build_streams_its_logs_and_deletes_its_secret() {
        let (server, built, lines) =
            run_build(&build_exchanges("{status: GENERIC_STATUS_SUCCESS}")).await;
        assert_eq!(built.expect("the build succeeds"), "im-1");
        assert_eq!(lines, ["Step 1/2", "Step 2/2"]);
        server
            .finish()
            .expect("calls as recorded, SecretDelete included");
    }

    #[tokio::test]
    async fn a_failed_build_is_reported_with_its_log_and_still_deletes_its_secret() {
        let (server, built, _) = run_build(&build_exchanges(
            "{status: GENERIC_STATUS_FAILURE, exception: \"RUN true exited 1\"}",
        ))
        .await;
        let error = built.expect_err("the build fails");
        assert_eq!(error.kind, ErrorKind::Build);
        let text = error.to_string();
        assert!(text.contains("build failed: RUN true exited 1"), "{text}");
        assert!(text.contains("Step 2/2"), "{text}");
        server
            .finish()
            .expect("calls as recorded, SecretDelete included");
    }

    #[tokio::test]
    async fn terminating_an_ended_sandbox_reports_its_result() {
        let exchanges = [
            exchange(
                "SandboxTerminate",
                "{sandbox_id: sb-1}",
                "{existing_result: {status: GENERIC_STATUS_SUCCESS}}",
                0,
            ),
            exchange(
                "SandboxWait",
                "{sandbox_id: sb-1, timeout: 5}",
                "{result: {status: GENERIC_STATUS_TERMINATED}}",
                0,
            ),
        ]
        .concat();
        let (server, plane) = plane(&exchanges).await;
        let result = terminate(&plane, "sb-1", Duration::from_secs(5))
            .await
            .expect("terminate is idempotent");
        assert_eq!(
            result.map(|r| r.status),
            Some(GenericStatus::Terminated as i32)
        );
        server.finish().expect("calls as recorded");
    }
}
