//! The code channel: the sandbox's Jupyter Server and a kernel per context, code run in
//! it within a deadline, interrupted or killed.

use super::*;

/// The kernel every sandbox starts.
const KERNEL_NAME: &str = "python3";

/// How long one piece of code may run on the kernel.
pub(super) const EXECUTE_DEADLINE: Duration = Duration::from_secs(300);

/// A kernel socket several tasks may take turns on.
type SharedSocket = Arc<tokio::sync::Mutex<KernelSocket>>;

/// An extra kernel: its id, read without waiting for code that holds its socket, and
/// its socket.
pub(super) struct ContextKernel {
    id: String,
    socket: SharedSocket,
}

/// A sandbox's default kernel.
#[derive(Default)]
pub(super) struct Kernel {
    /// Its id and socket, once started.
    pub(super) started: Option<(String, KernelSocket)>,
    /// Why the kernel could not start, once it failed: later calls fail at once with it
    /// instead of waiting out another start.
    pub(super) failure: Option<ProviderError>,
}

impl DockerProvider {
    /// Where a running sandbox's Jupyter Server answers on this host, and its token: what
    /// the e2b emulator forwards a template's code channel to.
    pub async fn jupyter_endpoint(&self, id: &SandboxId) -> Result<(String, Secret)> {
        let sandbox = self.sandbox(id)?;
        Ok((
            sandbox.server.base_url().to_owned(),
            Secret::new("JUPYTER_TOKEN", sandbox.server.token()),
        ))
    }
    /// [`Provider::run_code`], waiting up to `deadline` for the answer.
    pub(super) async fn run_default(
        &self,
        sandbox: &SandboxId,
        code: &str,
        deadline: Duration,
    ) -> Result<(CodeOutput, Vec<Timing>)> {
        let sandbox = self.sandbox(sandbox)?;
        let mut kernel = sandbox.kernel.lock().await;
        let mut timings = Vec::new();
        if let Some(failure) = &kernel.failure {
            return Err(failure
                .clone()
                .context("the kernel failed to start earlier"));
        }
        if kernel.started.is_none() {
            let started = Instant::now();
            let server = sandbox.server.clone();
            // A kernel whose process dies at start (ipykernel missing, say) is only found
            // out by the server dropping it after its restarts; until then its socket is
            // answered by nothing, so connecting and the first answer race that watch.
            let failed = |kernel: &mut Kernel, e: ProviderError| {
                kernel.failure = Some(e.clone());
                e
            };
            let kernel_id = match server.start_kernel(KERNEL_NAME).await {
                Ok(id) => id,
                Err(e) => return Err(failed(&mut kernel, e)),
            };
            *sandbox.kernel_id.lock().expect("kernel id lock") = Some(kernel_id.clone());
            let gone = server.kernel_gone(&kernel_id);
            tokio::pin!(gone);
            let mut socket = tokio::select! {
                socket = server.connect(&kernel_id) => match socket {
                    Ok(socket) => socket,
                    Err(e) => return Err(failed(&mut kernel, e)),
                },
                e = &mut gone => return Err(failed(&mut kernel, e)),
            };
            // Jupyter Server opens a new kernel's channels once the kernel answers (a
            // first `1+1` after it takes as long as a later one), so this is the
            // kernel's start without the first code's own run.
            timings.push(Timing {
                name: "kernel-start-to-channels".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            let output = tokio::select! {
                output = socket.execute(code, deadline) => output,
                e = &mut gone => return Err(failed(&mut kernel, e)),
            };
            kernel.started = Some((kernel_id.clone(), socket));
            let output = output?;
            timings.push(Timing {
                name: "kernel-start-to-first-answer".into(),
                duration: started.elapsed(),
                resolution: None,
            });
            return Ok((output, timings));
        }
        let (kernel_id, socket) = kernel.started.as_mut().expect("kernel is present");
        renew_if_lost(&sandbox.server, kernel_id, socket).await?;
        Ok((socket.execute(code, deadline).await?, timings))
    }
    /// [`Provider::run_code_in`], waiting up to `deadline` for the answer.
    pub(super) async fn run_context(
        &self,
        sandbox: &SandboxId,
        context: &str,
        code: &str,
        deadline: Duration,
    ) -> Result<CodeOutput> {
        let key = (sandbox.0.clone(), context.to_owned());
        let existing = self
            .contexts
            .lock()
            .expect("context table lock")
            .get(&key)
            .map(|kernel| kernel.socket.clone());
        let socket = match existing {
            Some(socket) => socket,
            None => {
                let server = self.sandbox(sandbox)?.server.clone();
                let kernel_id = server.start_kernel(KERNEL_NAME).await?;
                let socket = Arc::new(tokio::sync::Mutex::new(server.connect(&kernel_id).await?));
                self.contexts.lock().expect("context table lock").insert(
                    key,
                    ContextKernel {
                        id: kernel_id,
                        socket: socket.clone(),
                    },
                );
                socket
            }
        };
        let mut socket = socket.lock().await;
        let server = self.sandbox(sandbox)?.server.clone();
        let kernel_id = socket.kernel_id().to_owned();
        renew_if_lost(&server, &kernel_id, &mut socket).await?;
        socket.execute(code, deadline).await
    }
    /// Runs `code` on context `context`'s kernel, or with none on the default kernel, as
    /// [`Provider::run_code_in`] and [`Provider::run_code`] do, waiting up to `deadline`
    /// for the answer instead of their 300 s.
    pub async fn run_code_within(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
        deadline: Duration,
    ) -> Result<CodeOutput> {
        match context {
            Some(context) => self.run_context(sandbox, context, code, deadline).await,
            None => Ok(self.run_default(sandbox, code, deadline).await?.0),
        }
    }
    /// The id of context `context`'s kernel, or with none the default kernel's, once it
    /// started.
    fn kernel_of(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<Option<String>> {
        Ok(match context {
            Some(context) => self
                .contexts
                .lock()
                .expect("context table lock")
                .get(&(sandbox.0.clone(), context.to_owned()))
                .map(|kernel| kernel.id.clone()),
            None => self
                .sandbox(sandbox)?
                .kernel_id
                .lock()
                .expect("kernel id lock")
                .clone(),
        })
    }
    /// Interrupts the code that runs on context `context`'s kernel, or with none on the
    /// default kernel ([`JupyterServer::interrupt_kernel`]), while a run waits for it:
    /// that run then answers the code's `KeyboardInterrupt`. Nothing to do before the
    /// kernel started.
    pub async fn interrupt_kernel(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<()> {
        let server = self.sandbox(sandbox)?.server.clone();
        match self.kernel_of(sandbox, context)? {
            Some(kernel_id) => server.interrupt_kernel(&kernel_id).await,
            None => Ok(()),
        }
    }
    /// Shuts down context `context`'s kernel, or with none the default kernel, whatever it
    /// runs: the next code there starts a new kernel, with none of the old one's state.
    /// Call it once no run waits on that kernel (drop the run first: it holds the kernel).
    pub async fn kill_kernel(&self, sandbox: &SandboxId, context: Option<&str>) -> Result<()> {
        let entry = self.sandbox(sandbox)?;
        let kernel_id = match context {
            Some(context) => {
                let removed = self
                    .contexts
                    .lock()
                    .expect("context table lock")
                    .remove(&(sandbox.0.clone(), context.to_owned()));
                match removed {
                    Some(ContextKernel { id, socket }) => {
                        if let Ok(socket) = Arc::try_unwrap(socket) {
                            socket.into_inner().close().await;
                        }
                        Some(id)
                    }
                    None => None,
                }
            }
            None => {
                let mut kernel = entry.kernel.lock().await;
                if let Some((_, socket)) = kernel.started.take() {
                    socket.close().await;
                }
                entry.kernel_id.lock().expect("kernel id lock").take()
            }
        };
        match kernel_id {
            Some(kernel_id) => entry.server.shutdown_kernel(&kernel_id).await,
            None => Ok(()),
        }
    }
}

/// Replaces a socket that saw its kernel die (the server restarts such a kernel) or closed
/// with one on which the kernel answers on both channels; until one does, the old socket
/// stays, so a later call tries again.
async fn renew_if_lost(
    server: &JupyterServer,
    kernel_id: &str,
    socket: &mut KernelSocket,
) -> Result<()> {
    if !socket.is_lost() {
        return Ok(());
    }
    let fresh = server
        .connect_ready(kernel_id, EXECUTE_DEADLINE)
        .await
        .map_err(|e| e.context("connecting again after the kernel died"))?;
    std::mem::replace(socket, fresh).close().await;
    Ok(())
}
