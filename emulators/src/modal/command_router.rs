//! The task command router, `modal.task_command_router.TaskCommandRouter`: execs and
//! their output.

use super::*;

/// The task command router.
pub(super) struct Router {
    pub(super) emulator: Emulator,
}

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_poll(
        &self,
        request: Request<router::TaskExecPollRequest>,
    ) -> Result<Response<router::TaskExecPollResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let exit_status = lock(&exec.exit).map(router::task_exec_poll_response::ExitStatus::Code);
        Ok(Response::new(router::TaskExecPollResponse { exit_status }))
    }

    async fn task_exec_start(
        &self,
        request: Request<router::TaskExecStartRequest>,
    ) -> Result<Response<router::TaskExecStartResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        if request.command_args.is_empty() {
            return Err(Status::invalid_argument("TaskExecStart has no command"));
        }
        let (sandbox, inner) = self.emulator.task(&request.task_id)?;
        let key = (request.task_id.clone(), request.exec_id.clone());
        let exec = {
            let mut world = self.emulator.world();
            if world.execs.contains_key(&key) {
                // The exec id is the idempotency key: a retried start starts nothing.
                return Ok(Response::new(router::TaskExecStartResponse {}));
            }
            let exec = Arc::new(Exec::default());
            world.execs.insert(key.clone(), exec.clone());
            exec
        };
        if let Err(e) = self
            .emulator
            .start_exec(&inner.0, &sandbox.region, &request, exec)
            .await
        {
            self.emulator.world().execs.remove(&key);
            return Err(e);
        }
        Ok(Response::new(router::TaskExecStartResponse {}))
    }

    async fn task_exec_stdin_write(
        &self,
        _request: Request<router::TaskExecStdinWriteRequest>,
    ) -> Result<Response<router::TaskExecStdinWriteResponse>, Status> {
        Err(Status::unimplemented("the emulator's execs have no stdin"))
    }

    type TaskExecStdioReadStream = Streamed<router::TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        request: Request<router::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let stderr = request.file_descriptor() == router::TaskExecStdioFileDescriptor::Stderr;
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        // The read ends at its deadline, the stream and not only its headers: gRPC's
        // deadline is the whole call's (`grpc-timeout`, grpc/grpc doc/PROTOCOL-HTTP2.md),
        // and Modal's official client opens the read again from its offset when it ends
        // so (`modal/sandbox/_task_command_router_client.py`, `_stream_stdio_with_retries`,
        // modal 1.6.4). Modal publishes no server to cite.
        let until = grpc_timeout(&metadata).map(|t| tokio::time::Instant::now() + t);
        let stream = futures_util::stream::unfold((offset, false), move |(offset, ended)| {
            let exec = exec.clone();
            async move {
                if ended {
                    return None;
                }
                loop {
                    // The exit first: once set, all the output is in.
                    let exited = lock(&exec.exit).is_some();
                    let data: Vec<u8> = {
                        let buffer = if stderr { &exec.stderr } else { &exec.stdout };
                        let buffer = lock(buffer);
                        let end = buffer.len().min(offset.saturating_add(STDIO_CHUNK));
                        buffer.get(offset..end).unwrap_or_default().to_vec()
                    };
                    if !data.is_empty() {
                        let next = offset + data.len();
                        return Some((
                            Ok(router::TaskExecStdioReadResponse { data }),
                            (next, false),
                        ));
                    }
                    if exited {
                        return None;
                    }
                    if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                        let status = Status::deadline_exceeded(format!(
                            "the read's deadline passed at offset {offset}"
                        ));
                        return Some((Err(status), (offset, true)));
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn task_exec_wait(
        &self,
        request: Request<router::TaskExecWaitRequest>,
    ) -> Result<Response<router::TaskExecWaitResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        self.emulator.authorize(&metadata, &request.task_id)?;
        let exec = self.emulator.exec(&request.task_id, &request.exec_id)?;
        let deadline = Instant::now() + LONG_POLL;
        loop {
            if let Some(code) = *lock(&exec.exit) {
                return Ok(Response::new(router::TaskExecWaitResponse {
                    exit_status: Some(router::task_exec_wait_response::ExitStatus::Code(code)),
                }));
            }
            if Instant::now() >= deadline {
                return Err(Status::deadline_exceeded(format!(
                    "exec {} still runs",
                    request.exec_id
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
