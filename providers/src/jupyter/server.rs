//! A Jupyter Server reached through the same recorded HTTP and WebSocket transports as
//! every other call of a cloud variant: e2b's template server on a sandbox port
//! (`https://49999-<id>.<domain>`, behind E2B's proxy and its traffic access token), or a
//! Datalayer runtime's ingress URL (with the runtime's token). Kernels are managed over
//! REST (`POST /api/kernels`, `.../restart`); code runs over the kernel's channels
//! WebSocket, one socket per call, so each call is one exchange of a cassette.
//!
//! A message's session is `<kernel id>-<n>` (the n-th socket to that kernel) and its id
//! `<session>-<k>`: both follow from what the server answered, so a replay sends the same
//! frames. Only the timestamp varies; it is registered as a volatile of its own kind.

use std::time::Duration;

use jupyter_protocol::{ExecuteRequest, JupyterMessageContent, KernelInfoRequest};
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::{
    Execution, answers_kernel_info, check_kernel_id, kernel_lost, parse_json, shell_message,
};
use crate::api::ws::{WsMessage, WsSession};
use crate::api::{ApiClient, ApiRequest, PollIntervals, Target};
use crate::{CodeOutput, ErrorKind, ProviderError, Result, SandboxId, Secret};

/// The kernel every context runs.
const KERNEL_NAME: &str = "python3";
/// How often an unanswered `kernel_info_request` is sent again.
const KERNEL_INFO_RESEND: Duration = Duration::from_secs(1);
/// Placeholder name of a message timestamp in cassettes.
const DATE_VOLATILE: &str = "jupyter-date";

/// Where a Jupyter Server is served.
#[derive(Clone, Copy)]
pub enum Server<'a> {
    /// On a port of a sandbox, at the provider's sandbox host form.
    SandboxPort {
        /// The sandbox.
        sandbox: &'a SandboxId,
        /// The port.
        port: u16,
    },
    /// At a base URL the provider handed out (an ingress), paths appended to it.
    Url(&'a str),
}

/// Where a Jupyter Server is, and the header that admits a request to it.
#[derive(Clone, Copy)]
pub struct Channel<'a> {
    /// The client every call goes through.
    pub client: &'a ApiClient,
    /// Where the server is.
    pub server: Server<'a>,
    /// A header every request carries (its name, and the secret sent as its value with
    /// the prefix), such as E2B's traffic access token or `Authorization: token <t>`.
    pub admit: Option<(&'static str, &'static str, &'a Secret)>,
}

#[derive(Deserialize)]
struct KernelModel {
    id: String,
}

impl Channel<'_> {
    /// A request to the Jupyter Server.
    pub fn request(&self, method: Method, path: &str) -> ApiRequest {
        let request = match self.server {
            Server::SandboxPort { sandbox, port } => ApiRequest::new(
                method,
                Target::Sandbox {
                    port,
                    sandbox_id: sandbox.0.clone(),
                },
                path,
            ),
            Server::Url(base) => ApiRequest::new(
                method,
                Target::Absolute(format!("{}{path}", base.trim_end_matches('/'))),
                path,
            ),
        };
        match self.admit {
            Some((name, prefix, token)) => {
                request.header(name, format!("{prefix}{}", token.expose()))
            }
            None => request,
        }
    }

    /// `POST /api/kernels`: a new kernel in the server's root (the contract's working
    /// directory); its id.
    pub async fn start_kernel(&self, deadline: Duration) -> Result<String> {
        let model: KernelModel = self
            .client
            .call(
                self.request(Method::POST, "/api/kernels")
                    .json(json!({ "name": KERNEL_NAME }))
                    .idempotent(false)
                    .timeout(deadline)
                    .what("start a kernel"),
            )
            .await?
            .json()?;
        check_kernel_id(&model.id).map_err(|e| e.context("POST /api/kernels"))?;
        Ok(model.id)
    }

    /// `POST /api/kernels/<id>/restart`, answered once the new kernel process is up.
    pub async fn restart_kernel(&self, kernel: &str, deadline: Duration) -> Result<()> {
        check_kernel_id(kernel)?;
        self.client
            .call(
                self.request(Method::POST, &format!("/api/kernels/{kernel}/restart"))
                    .idempotent(false)
                    .timeout(deadline)
                    .what("restart the kernel"),
            )
            .await?;
        Ok(())
    }

    /// Opens the kernel's channels as session `<kernel>-<n>`.
    pub async fn open(&self, kernel: &str, n: usize, deadline: Duration) -> Result<KernelChannel> {
        check_kernel_id(kernel)?;
        let session = format!("{kernel}-{n}");
        let socket = self
            .client
            .websocket(
                self.request(
                    Method::GET,
                    &format!("/api/kernels/{kernel}/channels?session_id={session}"),
                )
                .timeout(deadline)
                .what("open the kernel's channels"),
            )
            .await?;
        Ok(KernelChannel {
            socket,
            session,
            sent: 0,
            client: self.client.clone(),
        })
    }
}

/// One open channels WebSocket of a kernel.
pub struct KernelChannel {
    socket: WsSession,
    session: String,
    sent: usize,
    client: ApiClient,
}

impl KernelChannel {
    /// Sends `content` on the shell channel; its msg_id.
    async fn send(&mut self, content: impl Into<JupyterMessageContent>) -> Result<String> {
        self.sent += 1;
        let msg_id = format!("{}-{}", self.session, self.sent);
        let message = shell_message(content, &self.session, msg_id.clone());
        let value = serde_json::to_value(&message).map_err(|e| {
            ProviderError::new(ErrorKind::Protocol, format!("serializing a message: {e}"))
        })?;
        if let Some(date) = value["header"]["date"].as_str() {
            self.client.volatiles().register_alike(DATE_VOLATILE, date);
        }
        self.socket.send_json(&value).await?;
        Ok(msg_id)
    }

    /// The next Jupyter message before `until`; a close is a transport error.
    async fn next(
        &mut self,
        until: tokio::time::Instant,
    ) -> Result<Option<jupyter_protocol::JupyterMessage>> {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match self.socket.next(left).await? {
            WsMessage::Json(value) => Ok(parse_json(value)),
            WsMessage::Text(_) => Ok(None),
            WsMessage::Closed { code, reason } => Err(ProviderError::new(
                ErrorKind::Transport,
                format!("the kernel's channels closed ({code} {reason})"),
            )),
        }
    }

    /// Runs `code`; its output once the reply and the idle status are both in.
    pub async fn execute(&mut self, code: &str, deadline: Duration) -> Result<CodeOutput> {
        let until = tokio::time::Instant::now() + deadline;
        let msg_id = self.send(ExecuteRequest::new(code.to_owned())).await?;
        let mut run = Execution::new(msg_id);
        loop {
            let Some(message) = self.next(until).await? else {
                continue;
            };
            if let Some(lost) = kernel_lost(&message) {
                return Err(lost);
            }
            if run.accept(&message) {
                return Ok(run.output());
            }
        }
    }

    /// Waits until the kernel answers a `kernel_info_request`, sent again each second
    /// while unanswered (one sent while the kernel starts can be lost).
    pub async fn wait_ready(&mut self, deadline: Duration) -> Result<()> {
        let until = tokio::time::Instant::now() + deadline;
        let mut sent = Vec::new();
        loop {
            sent.push(self.send(KernelInfoRequest {}).await?);
            // A replay at instant pace resends as soon as the recording's next request is
            // due: the order of frames is what it checks, not the wait.
            let pause = if self.client.poll_intervals() == PollIntervals::INSTANT {
                PollIntervals::INSTANT.first
            } else {
                KERNEL_INFO_RESEND
            };
            let resend = (tokio::time::Instant::now() + pause).min(until);
            loop {
                match self.next(resend).await {
                    Ok(Some(message)) if answers_kernel_info(&message, &sent) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.kind == ErrorKind::Timeout && resend < until => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Closes the socket.
    pub async fn close(self) {
        self.socket.close().await;
    }
}
