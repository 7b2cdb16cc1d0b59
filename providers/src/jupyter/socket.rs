//! A kernel's WebSocket: `kernel_info` until it answers, an execution's messages read to
//! its idle status, the kernel watched for death and restarts.

use super::*;

/// An open kernel WebSocket (JSON text frames, the default `""` subprotocol with a `channel` field in each message).
pub struct KernelSocket {
    pub(super) ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub(super) session: String,
    pub(super) kernel_id: String,
    pub(super) token: String,
    /// Set once the socket closed or the server said its kernel died.
    pub(super) lost: bool,
}

impl fmt::Debug for KernelSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelSocket")
            .field("kernel_id", &self.kernel_id)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl KernelSocket {
    /// Sends an `execute_request` on the shell channel and collects, for messages whose parent msg_id matches:
    /// `stream` (stdout/stderr), `execute_result` / `display_data` `text/plain` (the last one is `result`), `error` (`ename: evalue`),
    /// until the kernel reports status idle for that request AND the `execute_reply` has arrived. Frames that fail to parse
    /// (not JSON, unknown msg types) are skipped with a `tracing::debug!`, never fatal. A closed socket is a Transport error.
    ///
    /// Passing `deadline` is a Timeout error; the socket stays usable, as
    /// late messages of the abandoned request are ignored by later calls.
    pub async fn execute(&mut self, code: &str, deadline: Duration) -> Result<CodeOutput> {
        let mut sent: Option<Execution> = None;
        let work = async {
            let msg_id = self.send(ExecuteRequest::new(code.to_owned())).await?;
            let run = sent.insert(Execution::new(msg_id));
            loop {
                let message = self.next_message().await?;
                if let Some(lost) = kernel_lost(&message) {
                    self.lost = true;
                    return Err(lost);
                }
                if run.accept(&message) {
                    return Ok(std::mem::take(&mut run.output));
                }
            }
        };
        let answer = tokio::time::timeout(deadline, work).await;
        answer
            .unwrap_or_else(|_| {
                let missing = sent
                    .as_ref()
                    .map_or("the request was never sent", Execution::missing);
                Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!(
                        "no answer within {}: {missing}",
                        crate::for_people(deadline)
                    ),
                ))
            })
            .map_err(|e| e.context(format!("execute_request on kernel {}", self.kernel_id)))
    }

    /// Waits until the kernel answers a `kernel_info_request` on both of this socket's
    /// channels: its reply on shell and the kernel's status for it on iopub (useful right
    /// after connect/restart).
    ///
    /// The request is sent again every second until both are in, since one sent while the
    /// kernel is still starting can be lost. Jupyter Server checks the same two channels
    /// when a socket opens (its "nudge"), but skips that for a kernel it last saw busy, as
    /// after one died running code: on such a socket shell can answer while the kernel's
    /// first iopub messages are lost (its iopub subscribed too late for them), so that a
    /// request sent at once gets its reply and never its idle status. The requests sent
    /// again until a status comes are that nudge. When shell has answered and iopub is
    /// still silent [`IOPUB_SILENCE`] later, this fails with a retryable Transport error:
    /// connect again ([`JupyterServer::connect_ready`] does).
    pub async fn wait_kernel_ready(&mut self, deadline: Duration) -> Result<()> {
        match self.wait_both(deadline).await {
            Ok(()) => Ok(()),
            Err(Unready::IopubSilent(e) | Unready::Failed(e)) => Err(e),
        }
    }

    /// [`wait_kernel_ready`](Self::wait_kernel_ready), telling a silent iopub (worth
    /// another socket) from any other failure.
    pub(super) async fn wait_both(
        &mut self,
        deadline: Duration,
    ) -> std::result::Result<(), Unready> {
        let context = format!("kernel_info_request on kernel {}", self.kernel_id);
        let mut seen = KernelInfoSeen::default();
        let work = async {
            let mut sent = Vec::new();
            loop {
                sent.push(
                    self.send(KernelInfoRequest {})
                        .await
                        .map_err(Unready::Failed)?,
                );
                let resend = tokio::time::sleep(KERNEL_INFO_RESEND);
                tokio::pin!(resend);
                loop {
                    tokio::select! {
                        msg = self.next_message() => {
                            if seen.accept(&msg.map_err(Unready::Failed)?, &sent) {
                                return Ok(());
                            }
                        }
                        () = &mut resend => break,
                    }
                }
                if seen.iopub_silent() {
                    return Err(Unready::IopubSilent(ProviderError::retryable(
                        ErrorKind::Transport,
                        format!(
                            "the kernel answers on shell, but no status came on this socket's iopub within {} of the reply: the server did not connect its iopub (connect again)",
                            crate::for_people(IOPUB_SILENCE)
                        ),
                    )));
                }
            }
        };
        let answer = tokio::time::timeout(deadline, work).await;
        let missing = if seen.replied.is_some() {
            "the kernel_info_reply came on shell, no status for it on iopub"
        } else {
            "no kernel_info_reply"
        };
        answer
            .unwrap_or_else(|_| {
                Err(Unready::Failed(ProviderError::new(
                    ErrorKind::Timeout,
                    format!("{missing} within {}", crate::for_people(deadline)),
                )))
            })
            .map_err(|unready| match unready {
                Unready::IopubSilent(e) => Unready::IopubSilent(e.context(context)),
                Unready::Failed(e) => Unready::Failed(e.context(context)),
            })
    }

    /// The kernel this socket talks to.
    pub fn kernel_id(&self) -> &str {
        &self.kernel_id
    }

    /// Whether this socket closed, or saw the server say its kernel died: a restarted
    /// kernel's first iopub messages can miss it, so the next request belongs on a new
    /// socket ([`JupyterServer::connect_ready`]).
    pub fn is_lost(&self) -> bool {
        self.lost
    }

    /// Closes the socket politely.
    ///
    /// Sends a close frame and waits up to two seconds for the server's;
    /// errors on the way are only logged, as the socket is dropped anyway.
    pub async fn close(mut self) {
        let polite = async {
            self.ws.close(None).await?;
            while self.ws.next().await.transpose()?.is_some() {}
            Ok::<_, tungstenite::Error>(())
        };
        match tokio::time::timeout(CLOSE_TIMEOUT, polite).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(kernel = %self.kernel_id, "closing kernel WebSocket: {e}")
            }
            Err(_) => tracing::debug!(kernel = %self.kernel_id, "kernel WebSocket close timed out"),
        }
    }

    /// Sends `content` on the shell channel in this socket's session; returns its msg_id.
    async fn send(&mut self, content: impl Into<JupyterMessageContent>) -> Result<String> {
        let message = JupyterMessage::new(content, None)
            .with_session(&self.session)
            .with_channel(Channel::Shell);
        let msg_id = message.header.msg_id.clone();
        let text = serde_json::to_string(&message).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("serializing {}: {e}", message.message_type()),
            )
        })?;
        self.ws.send(Message::text(text)).await.map_err(|e| {
            self.lost = true;
            ws_error(e, &self.token)
        })?;
        Ok(msg_id)
    }

    /// The next message that parses as a known Jupyter message; other frames are skipped.
    async fn next_message(&mut self) -> Result<JupyterMessage> {
        loop {
            let frame = match self.ws.next().await {
                None => {
                    self.lost = true;
                    return Err(socket_closed());
                }
                Some(frame) => frame.map_err(|e| {
                    self.lost = true;
                    ws_error(e, &self.token)
                })?,
            };
            match frame {
                Message::Text(text) => {
                    if let Some(message) = parse_frame(&text) {
                        return Ok(message);
                    }
                }
                Message::Close(_) => {
                    self.lost = true;
                    return Err(socket_closed());
                }
                Message::Binary(bytes) => {
                    tracing::debug!(
                        len = bytes.len(),
                        "skipping binary kernel frame (buffers are not used)"
                    );
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }
}

/// Parses a text frame; `None` (logged at debug) for anything that is not a
/// known Jupyter message.
pub(super) fn parse_frame(text: &str) -> Option<JupyterMessage> {
    match serde_json::from_str(text) {
        Ok(value) => parse_json(value),
        Err(e) => {
            let start: String = text.chars().take(80).collect();
            tracing::debug!("skipping kernel frame that is not JSON ({e}): {start}");
            None
        }
    }
}

/// Why a socket is not ready.
pub(super) enum Unready {
    /// Shell answered and iopub stayed silent [`IOPUB_SILENCE`]: another socket may do.
    IopubSilent(ProviderError),
    /// Anything else: a closed socket, a deadline.
    Failed(ProviderError),
}

/// What [`KernelSocket::wait_kernel_ready`] has seen of the answers to its requests.
#[derive(Default)]
struct KernelInfoSeen {
    /// When the first `kernel_info_reply` came on shell.
    replied: Option<tokio::time::Instant>,
    /// Whether a status for one of the requests came on iopub.
    iopub: bool,
}

impl KernelInfoSeen {
    /// Takes one incoming message; true once both channels have answered.
    fn accept(&mut self, message: &JupyterMessage, sent: &[String]) -> bool {
        if answers_kernel_info(message, sent) {
            self.replied.get_or_insert_with(tokio::time::Instant::now);
        } else if matches!(message.content, JupyterMessageContent::Status(_))
            && message
                .parent_header
                .as_ref()
                .is_some_and(|parent| sent.contains(&parent.msg_id))
        {
            self.iopub = true;
        }
        self.replied.is_some() && self.iopub
    }

    /// Whether shell answered [`IOPUB_SILENCE`] ago or more and iopub never did.
    fn iopub_silent(&self) -> bool {
        !self.iopub && self.replied.is_some_and(|at| at.elapsed() >= IOPUB_SILENCE)
    }
}

/// What one `execute_request` has produced so far.
pub(crate) struct Execution {
    pub(super) msg_id: String,
    pub(super) output: CodeOutput,
    pub(super) idle: bool,
    pub(super) replied: bool,
}

impl Execution {
    /// Collects the answers to the request `msg_id`.
    pub(crate) fn new(msg_id: String) -> Self {
        Self {
            msg_id,
            output: CodeOutput::default(),
            idle: false,
            replied: false,
        }
    }

    /// Takes one incoming message; true once both the idle status and the
    /// `execute_reply` of this request have arrived.
    pub(crate) fn accept(&mut self, message: &JupyterMessage) -> bool {
        let ours = message
            .parent_header
            .as_ref()
            .is_some_and(|parent| parent.msg_id == self.msg_id);
        if ours {
            let output = &mut self.output;
            match &message.content {
                JupyterMessageContent::StreamContent(stream) => match stream.name {
                    Stdio::Stdout => output.stdout.push_str(&stream.text),
                    Stdio::Stderr => output.stderr.push_str(&stream.text),
                },
                JupyterMessageContent::ExecuteResult(result) => {
                    output.result = plain_text(&result.data).or(output.result.take());
                }
                JupyterMessageContent::DisplayData(display) => {
                    output.result = plain_text(&display.data).or(output.result.take());
                }
                JupyterMessageContent::ErrorOutput(error) => {
                    output.error = Some(format!("{}: {}", error.ename, error.evalue));
                }
                JupyterMessageContent::ExecuteReply(reply) => {
                    self.replied = true;
                    // The iopub error is the usual source; the reply covers kernels that skip it.
                    if output.error.is_none() {
                        output.error = match (&reply.status, &reply.error) {
                            (ReplyStatus::Ok, _) => None,
                            (ReplyStatus::Error, Some(error)) => {
                                Some(format!("{}: {}", error.ename, error.evalue))
                            }
                            (ReplyStatus::Error, None) => {
                                Some("error: the kernel gave no details".to_owned())
                            }
                            (ReplyStatus::Aborted, _) => {
                                Some("aborted: the kernel did not run the code".to_owned())
                            }
                        };
                    }
                }
                JupyterMessageContent::Status(status) => {
                    self.idle |= status.execution_state == ExecutionState::Idle;
                }
                _ => {}
            }
        }
        self.idle && self.replied
    }

    /// What of the answer has not come, for a timeout's message: an idle status that
    /// never comes while the reply does points at the iopub channel, not the kernel.
    pub(crate) fn missing(&self) -> &'static str {
        match (self.replied, self.idle) {
            (false, false) => "neither the execute_reply (shell) nor the idle status (iopub) came",
            (true, false) => "the execute_reply (shell) came, the idle status (iopub) did not",
            (false, true) => "the idle status (iopub) came, the execute_reply (shell) did not",
            (true, true) => "both the execute_reply and the idle status came",
        }
    }

    /// What the request produced.
    pub(crate) fn output(self) -> CodeOutput {
        self.output
    }
}
