//! A task's command router: access from `TaskGetCommandRouterAccess` (a JWT and the
//! router's URL), a channel of its own with `authorization: Bearer <jwt>`, fetched again
//! when the router answers `UNAUTHENTICATED`, and execs as `TaskExecStart`, stdout and
//! stderr read with `TaskExecStdioRead`, then `TaskExecWait`.
//!
//! Modal runs an exec as root unless told otherwise, so every exec that is not meant to be
//! root re-asserts the contract's user with `setpriv` (uid 1000, gid 100).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{ControlPlane, Transport, connect, retryable, status_error};
use super::proto::client::TaskGetCommandRouterAccessRequest;
use super::proto::router::task_command_router_client::TaskCommandRouterClient;
use super::proto::router::task_exec_wait_response::ExitStatus;
use super::proto::router::{
    TaskExecStartRequest, TaskExecStderrConfig, TaskExecStdioFileDescriptor,
    TaskExecStdioReadRequest, TaskExecStdoutConfig, TaskExecWaitRequest,
};
use crate::api::Volatiles;
use crate::api::grpc::Recorder;
use crate::{CommandOutput, ErrorKind, ProviderError, Result, Secret};

/// What every exec not run as root starts with: the contract's user, 1000:100.
pub const AS_USER: [&str; 5] = [
    "setpriv",
    "--reuid=1000",
    "--regid=100",
    "--init-groups",
    "--",
];
/// The name router JWTs are registered under (with their count), so cassettes hold
/// placeholders that still tell a refreshed JWT from the first.
pub const JWT_NAME: &str = "MODAL_ROUTER_JWT";
/// The name router URLs are registered under, as they vary from run to run.
pub const URL_VOLATILE: &str = "modal-router-url";
/// The name exec ids are registered under.
pub const EXEC_VOLATILE: &str = "modal-exec-id";
/// The deadline of `TaskGetCommandRouterAccess` and of each router call but the wait.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// Most attempts of one router call on a retryable status, the first included.
const MAX_ATTEMPTS: usize = 4;
/// How many times in a row a stdio stream ended by a retryable status is opened again
/// from its offset without a byte read between (the official client's
/// `stream_stdio_max_retries`).
const READ_RETRIES: u32 = 10;
/// The pause before a stdio stream is opened again, doubling with each retry in a row
/// (`stream_stdio_retry_delay_secs`, `_factor`).
const READ_RETRY_DELAY: Duration = Duration::from_millis(10);

struct Access {
    client: TaskCommandRouterClient<Transport>,
    jwt: Secret,
}

/// The command router of one task.
pub struct Router {
    plane: Arc<ControlPlane>,
    task_id: String,
    /// Where router calls go instead of the URL Modal answers (a replay server).
    url_override: Option<String>,
    recorder: Option<Recorder>,
    volatiles: Arc<Volatiles>,
    access: tokio::sync::Mutex<(Option<Access>, usize)>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("task_id", &self.task_id)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// The router of `task_id`, reached through `plane`; calls are recorded by `recorder`
    /// when there is one, and go to `url_override` instead of Modal's URL when set.
    pub fn new(
        plane: Arc<ControlPlane>,
        task_id: impl Into<String>,
        url_override: Option<String>,
        recorder: Option<Recorder>,
        volatiles: Arc<Volatiles>,
    ) -> Self {
        Self {
            plane,
            task_id: task_id.into(),
            url_override,
            recorder,
            volatiles,
            access: tokio::sync::Mutex::new((None, 0)),
        }
    }

    /// The router's client and JWT, fetched when there are none or `stale` is the JWT
    /// the router refused.
    async fn access(
        &self,
        stale: Option<&Secret>,
    ) -> Result<(TaskCommandRouterClient<Transport>, Secret)> {
        let mut access = self.access.lock().await;
        if let Some(current) = &access.0
            && stale.is_none_or(|s| s.expose() != current.jwt.expose())
        {
            return Ok((current.client.clone(), current.jwt.clone()));
        }
        let response = self
            .plane
            .call(
                "TaskGetCommandRouterAccess",
                TaskGetCommandRouterAccessRequest {
                    task_id: self.task_id.clone(),
                },
                CALL_DEADLINE,
                |mut client, request| async move {
                    client.task_get_command_router_access(request).await
                },
            )
            .await?;
        if response.jwt.is_empty() || response.url.is_empty() {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                "TaskGetCommandRouterAccess answered no JWT or no URL",
            ));
        }
        access.1 += 1;
        let jwt = Secret::new(format!("{JWT_NAME}_{}", access.1), response.jwt);
        self.volatiles.register_secret(&jwt);
        self.volatiles.register(URL_VOLATILE, &response.url);
        let url = self.url_override.clone().unwrap_or(response.url);
        let client = TaskCommandRouterClient::new(connect(&url, self.recorder.clone())?);
        access.0 = Some(Access {
            client: client.clone(),
            jwt: jwt.clone(),
        });
        Ok((client, jwt))
    }

    /// One router call with the bearer JWT, fetched again once on `UNAUTHENTICATED` and
    /// retried with backoff on retryable statuses.
    async fn call<Req, Resp, F, Fut>(
        &self,
        method: &str,
        message: Req,
        deadline: Duration,
        call: F,
    ) -> Result<Resp>
    where
        Req: Clone,
        F: Fn(TaskCommandRouterClient<Transport>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        use backon::BackoffBuilder as _;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter()
            .build();
        let mut refused: Option<Secret> = None;
        let mut refreshed = false;
        loop {
            let (client, jwt) = self.access(refused.take().as_ref()).await?;
            let mut request = tonic::Request::new(message.clone());
            request.set_timeout(deadline);
            let bearer = format!("Bearer {}", jwt.expose()).parse().map_err(|_| {
                ProviderError::new(ErrorKind::Protocol, "the router JWT is not printable ASCII")
            })?;
            request.metadata_mut().insert("authorization", bearer);
            match call(client, request).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == tonic::Code::Unauthenticated && !refreshed => {
                    refreshed = true;
                    refused = Some(jwt);
                }
                Err(status) if retryable(status.code()) => match backoff.next() {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(status_error(method, &status)),
                },
                Err(status) => return Err(status_error(method, &status)),
            }
        }
    }

    /// Everything one of the exec's streams wrote, read until `until` (the exec's
    /// deadline), as the official client reads it: the stream's deadline is the exec's,
    /// and a stream ended by a retryable status (its deadline among them, while the
    /// exec's has not passed) is opened again from the offset read so far
    /// (`modal/sandbox/_task_command_router_client.py`, `_stream_stdio_with_retries`).
    async fn read(
        &self,
        exec_id: &str,
        fd: TaskExecStdioFileDescriptor,
        until: Instant,
    ) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut retries = 0;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!("exec {exec_id} was still writing output at its deadline"),
                ));
            }
            let request = TaskExecStdioReadRequest {
                task_id: self.task_id.clone(),
                exec_id: exec_id.to_owned(),
                offset: out.len() as u64,
                file_descriptor: fd as i32,
            };
            let mut stream = self
                .call(
                    "TaskExecStdioRead",
                    request,
                    left,
                    |mut client, request| async move { client.task_exec_stdio_read(request).await },
                )
                .await?;
            let ended = loop {
                match stream.message().await {
                    Ok(Some(chunk)) => {
                        out.extend_from_slice(&chunk.data);
                        retries = 0;
                    }
                    Ok(None) => break None,
                    Err(status) => break Some(status),
                }
            };
            match ended {
                None => return Ok(out),
                Some(status) if retryable(status.code()) && retries < READ_RETRIES => {
                    tokio::time::sleep((READ_RETRY_DELAY * 2u32.pow(retries)).min(left)).await;
                    retries += 1;
                }
                Some(status) => return Err(status_error("TaskExecStdioRead", &status)),
            }
        }
    }

    /// Runs `argv` in the task, as the contract's user unless `as_root`, within
    /// `deadline`. An exec killed by a signal exits 128 + the signal, as in a shell.
    pub async fn exec(
        &self,
        argv: &[String],
        as_root: bool,
        deadline: Duration,
    ) -> Result<CommandOutput> {
        if argv.is_empty() {
            return Err(ProviderError::new(
                ErrorKind::Config,
                "exec of an empty command",
            ));
        }
        let until = Instant::now() + deadline;
        let exec_id = format!("sm-exec-{:016x}", rand::random::<u64>());
        self.volatiles.register(EXEC_VOLATILE, &exec_id);
        let command_args = if as_root {
            argv.to_vec()
        } else {
            AS_USER
                .iter()
                .map(|s| (*s).to_owned())
                .chain(argv.iter().cloned())
                .collect()
        };
        let start = TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.clone(),
            command_args,
            stdout_config: TaskExecStdoutConfig::Pipe as i32,
            stderr_config: TaskExecStderrConfig::Pipe as i32,
            timeout_secs: Some(u32::try_from(deadline.as_secs().max(1)).unwrap_or(u32::MAX)),
            ..Default::default()
        };
        self.call(
            "TaskExecStart",
            start,
            CALL_DEADLINE,
            |mut client, request| async move { client.task_exec_start(request).await },
        )
        .await?;
        let stdout = self
            .read(&exec_id, TaskExecStdioFileDescriptor::Stdout, until)
            .await?;
        let stderr = self
            .read(&exec_id, TaskExecStdioFileDescriptor::Stderr, until)
            .await?;
        let wait = TaskExecWaitRequest {
            task_id: self.task_id.clone(),
            exec_id,
        };
        let status = self
            .call(
                "TaskExecWait",
                wait,
                until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1)),
                |mut client, request| async move { client.task_exec_wait(request).await },
            )
            .await?;
        let exit_code = match status.exit_status {
            Some(ExitStatus::Code(code)) => Some(i64::from(code)),
            Some(ExitStatus::Signal(signal)) => Some(128 + i64::from(signal)),
            None => None,
        };
        Ok(CommandOutput {
            exit_code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::grpc::{GrpcCassette, GrpcOptions, GrpcReplayServer};
    use crate::modal::client::{Credentials, TOKEN_ID_VAR, TOKEN_SECRET_VAR};
    use crate::modal::proto::descriptors;

    fn access(n: u32) -> String {
        format!(
            r#"
- method: /modal.client.ModalClient/TaskGetCommandRouterAccess
  request: {{task_id: ta-1}}
  responses: [{{jwt: "<redacted:MODAL_ROUTER_JWT_{n}>", url: "<modal-router-url>"}}]
  grpc-status: 0"#
        )
    }

    fn start(n: u32, args: &str, status: i32) -> String {
        format!(
            r#"
- method: /modal.task_command_router.TaskCommandRouter/TaskExecStart
  metadata: {{authorization: "Bearer <redacted:MODAL_ROUTER_JWT_{n}>"}}
  request:
    task_id: ta-1
    exec_id: <modal-exec-id>
    command_args: [{args}]
    stdout_config: TASK_EXEC_STDOUT_CONFIG_PIPE
    stderr_config: TASK_EXEC_STDERR_CONFIG_PIPE
    timeout_secs: 30
  {}
  grpc-status: {status}"#,
            if status == 0 { "responses: [{}]" } else { "" }
        )
    }

    fn rest(n: u32) -> String {
        format!(
            r#"
- method: /modal.task_command_router.TaskCommandRouter/TaskExecStdioRead
  metadata: {{authorization: "Bearer <redacted:MODAL_ROUTER_JWT_{n}>"}}
  request: {{task_id: ta-1, exec_id: <modal-exec-id>}}
  responses: [{{data: "MQ=="}}, {{data: "MAo="}}]
  grpc-status: 0
- method: /modal.task_command_router.TaskCommandRouter/TaskExecStdioRead
  metadata: {{authorization: "Bearer <redacted:MODAL_ROUTER_JWT_{n}>"}}
  request: {{task_id: ta-1, exec_id: <modal-exec-id>, file_descriptor: TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR}}
  grpc-status: 0
- method: /modal.task_command_router.TaskCommandRouter/TaskExecWait
  metadata: {{authorization: "Bearer <redacted:MODAL_ROUTER_JWT_{n}>"}}
  request: {{task_id: ta-1, exec_id: <modal-exec-id>}}
  responses: [{{code: 0}}]
  grpc-status: 0"#
        )
    }

    const USER_ARGS: &str =
        "setpriv, --reuid=1000, --regid=100, --init-groups, --, python3, -c, 'print(10)'";

    async fn router(exchanges: &str) -> (GrpcReplayServer, Router) {
        let text = format!(
            "origin: authored by hand from the subset protos, for the router's tests\n\
             variant: modal\nscenario: router-unit\nexchanges:{exchanges}\n"
        );
        // Fake credentials, never real ones.
        let credentials = Credentials {
            token_id: Secret::new(TOKEN_ID_VAR, "sm-fake-token-id"),
            token_secret: Secret::new(TOKEN_SECRET_VAR, "sm-fake-token-secret"),
        };
        let volatiles = Arc::new(Volatiles::default());
        let pool = descriptors().clone();
        let cassette = GrpcCassette::parse(&text, &pool).expect("the test cassette parses");
        let options = GrpcOptions {
            credentials: credentials.secrets(),
            volatiles: volatiles.clone(),
            matched_metadata: vec!["authorization".to_owned()],
            ..GrpcOptions::default()
        };
        let server = GrpcReplayServer::start(cassette, pool, options)
            .await
            .expect("replay server starts");
        let plane = ControlPlane::new(
            connect(&server.url(), None).expect("a loopback URL"),
            credentials,
        );
        let router = Router::new(Arc::new(plane), "ta-1", Some(server.url()), None, volatiles);
        (server, router)
    }

    fn python() -> Vec<String> {
        ["python3", "-c", "print(10)"].map(str::to_owned).to_vec()
    }

    #[tokio::test]
    async fn an_exec_runs_as_the_contract_user_and_collects_its_output() {
        let exchanges = format!("{}{}{}", access(1), start(1, USER_ARGS, 0), rest(1));
        let (server, router) = router(&exchanges).await;
        let output = router
            .exec(&python(), false, Duration::from_secs(30))
            .await
            .expect("the recorded exec");
        assert_eq!(output.exit_code, Some(0));
        assert_eq!(output.stdout, "10\n");
        server.finish().expect("calls as recorded");
    }

    #[tokio::test]
    async fn an_exec_that_does_not_reassert_the_user_fails_the_replay() {
        let exchanges = format!("{}{}{}", access(1), start(1, USER_ARGS, 0), rest(1));
        let (server, router) = router(&exchanges).await;
        router
            .exec(&python(), true, Duration::from_secs(30))
            .await
            .expect_err("a root exec is not the recorded one");
        let error = server.finish().expect_err("the replay fails").to_string();
        assert!(
            error.contains("TaskExecStart): the request differs"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_refused_jwt_is_fetched_again_once() {
        let exchanges = format!(
            "{}{}{}{}{}",
            access(1),
            start(1, USER_ARGS, 16),
            access(2),
            start(2, USER_ARGS, 0),
            rest(2)
        );
        let (server, router) = router(&exchanges).await;
        let output = router
            .exec(&python(), false, Duration::from_secs(30))
            .await
            .expect("the exec after the refresh");
        assert_eq!(output.stdout, "10\n");
        server.finish().expect("calls as recorded");
    }
}
