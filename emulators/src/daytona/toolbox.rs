//! The toolbox: process execution and code runs in a sandbox, as its daemon runs them.

use super::*;

impl Emulator {
    /// The toolbox: `parts` is the path under `/toolbox`, the sandbox id first.
    pub(super) async fn toolbox(&self, method: &str, parts: &[&str], body: &Value) -> Answer {
        match (method, parts) {
            ("POST", [id, "process", "execute"]) => self.execute_command(id, body).await,
            ("POST", [id, "process", "code-run"]) => self.code_run(id, body).await,
            ("POST", [id, "process", "interpreter", "context"]) => {
                let mut state = self.state();
                if !state.sandboxes.contains_key(*id) {
                    return not_found("sandbox");
                }
                let context = state.id();
                state.contexts.insert(context.clone(), (*id).to_owned());
                Answer::json(200, context_dto(&context, body))
            }
            ("GET", [id, "process", "interpreter", "context"]) => {
                let state = self.state();
                let contexts: Vec<Value> = state
                    .contexts
                    .iter()
                    .filter(|(_, sandbox)| sandbox.as_str() == *id)
                    .map(|(context, _)| context_dto(context, &Value::Null))
                    .collect();
                Answer::json(200, json!({ "contexts": contexts }))
            }
            ("DELETE", [_, "process", "interpreter", "context", context]) => {
                // The kernel behind it is never reached again: a new context is a new one.
                let mut state = self.state();
                match state.contexts.remove(*context) {
                    Some(sandbox) => {
                        state.turns.remove(&(sandbox, Some((*context).to_owned())));
                        Answer::json(200, json!({ "message": "context deleted" }))
                    }
                    None => not_found("context"),
                }
            }
            _ => error(
                501,
                &format!(
                    "the daytona emulator's toolbox does not implement {method} {}",
                    parts.join("/")
                ),
            ),
        }
    }
    /// Runs `argv` in `container` and answers as the toolbox's `process/*` calls do:
    /// `{exitCode, result}`, the result being stdout then stderr.
    /// Runs `argv` in `container` as `how` says: its output, or the 500 that says why not.
    async fn exec(
        &self,
        container: String,
        argv: &[String],
        how: &sandbox_providers::docker::Process,
    ) -> Result<sandbox_providers::CommandOutput, Answer> {
        self.inner
            .site
            .backend()
            .exec_process(&SandboxId(container), argv, how)
            .await
            .map_err(|e| error(500, &e.to_string()))
    }
    /// `process/execute` as the toolbox runs it (daytonaio/daytona v0.190.0,
    /// apps/daemon/pkg/toolbox/process/execute.go): the command by the shell, as the
    /// sandbox's user, in `cwd` with `envs` when given; past `timeout` seconds (none when
    /// absent or 0) it is killed and the answer is 408 `command execution timeout`.
    async fn execute_command(&self, id: &str, body: &Value) -> Answer {
        if let Some(field) = set_field_outside(body, &["command", "timeout", "cwd", "envs"]) {
            return unimplemented_field("process/execute", &field);
        }
        let (Some(container), user) = (self.container(id), self.sandbox_user(id)) else {
            return not_found("sandbox");
        };
        let command = body["command"].as_str().unwrap_or_default();
        if command.trim().is_empty() {
            return error(400, "command cannot be empty or whitespace-only");
        }
        let timeout = body["timeout"].as_u64().filter(|t| *t > 0);
        let mut argv: Vec<String> = Vec::new();
        if let Some(secs) = timeout {
            argv.extend([
                "timeout".into(),
                "-s".into(),
                "KILL".into(),
                secs.to_string(),
            ]);
        }
        argv.extend(["sh".into(), "-c".into(), command.to_owned()]);
        let how = sandbox_providers::docker::Process {
            user,
            env: body["envs"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect(),
            cwd: body["cwd"].as_str().map(str::to_owned),
        };
        let started = Instant::now();
        match self.exec(container, &argv, &how).await {
            Ok(out)
                if out.exit_code == Some(137)
                    && timeout.is_some_and(|t| started.elapsed() >= Duration::from_secs(t)) =>
            {
                error(408, "command execution timeout")
            }
            Ok(out) => ran(&out),
            Err(refused) => refused,
        }
    }
    /// The user sandbox `id`'s commands run as, if its create named one.
    fn sandbox_user(&self, id: &str) -> Option<String> {
        self.state().sandboxes.get(id).and_then(|s| s.user.clone())
    }
    /// `process/code-run`: runs `{code, language, argv, envs}` as a script of its language
    /// (`python3 -c`, the one language the reference environment carries) and answers
    /// `{exitCode, result}`, the result being what it printed.
    async fn code_run(&self, id: &str, body: &Value) -> Answer {
        let (Some(container), user) = (self.container(id), self.sandbox_user(id)) else {
            return not_found("sandbox");
        };
        let language = body["language"].as_str().unwrap_or("python");
        if language != "python" {
            return error(
                400,
                &format!("the emulator runs python code only, not {language}"),
            );
        }
        let mut argv = vec!["env".to_owned()];
        if let Some(envs) = body["envs"].as_object() {
            for (name, value) in envs {
                argv.push(format!("{name}={}", value.as_str().unwrap_or_default()));
            }
        }
        argv.extend(["python3".into(), "-c".into()]);
        argv.push(body["code"].as_str().unwrap_or_default().to_owned());
        if let Some(args) = body["argv"].as_array() {
            argv.extend(args.iter().filter_map(|a| a.as_str()).map(str::to_owned));
        }
        let how = sandbox_providers::docker::Process {
            user,
            ..Default::default()
        };
        match self.exec(container, &argv, &how).await {
            Ok(out) => ran(&out),
            Err(refused) => refused,
        }
    }
    /// Runs `code` in `context`'s kernel, or with none in the sandbox's default kernel (the
    /// docker variant's code channel), as the toolbox runs code with no `contextId`. The
    /// emulator's timer, not the docker variant's, ends a run ([`Emulator::run_timed`]).
    pub(super) async fn run_code(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
    ) -> sandbox_providers::Result<sandbox_providers::CodeOutput> {
        self.inner
            .site
            .backend()
            .run_code_within(sandbox, context, code, Duration::MAX)
            .await
    }
    /// Runs `code` as the toolbox's worker does within `timeout` (none: no limit)
    /// (daytonaio/daytona v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/daemon/pkg/toolbox/process/interpreter/repl_client.go:115-168`): past it the
    /// kernel is interrupted, as the daemon sends its worker SIGINT (Jupyter Server sends
    /// the ipykernel SIGINT), and the run's answer is waited for [`INTERRUPT_GRACE`] more;
    /// after that the kernel is shut down, as the daemon kills its worker, and the next
    /// code in the context starts a new one, as the daemon starts a new worker
    /// (`manager.go:83-89`, `:100-107`). The daemon ignores a failed signal or kill; so
    /// does this. What differs: the daemon streams the output printed before the kill,
    /// and the emulator, which gets a kernel's output with its answer, has none to send;
    /// and its kill is Jupyter Server's shutdown, which waits up to 5 s for the kernel to
    /// exit before it kills it.
    pub(super) async fn run_timed(
        &self,
        sandbox: &SandboxId,
        context: Option<&str>,
        code: &str,
        timeout: Option<Duration>,
    ) -> Ran {
        let mut run = Box::pin(self.run_code(sandbox, context, code));
        let Some(timeout) = timeout else {
            return Ran::Answered(run.await);
        };
        if let Ok(answer) = tokio::time::timeout(timeout, &mut run).await {
            return Ran::Answered(answer);
        }
        let _ = self
            .inner
            .site
            .backend()
            .interrupt_kernel(sandbox, context)
            .await;
        if let Ok(answer) = tokio::time::timeout(INTERRUPT_GRACE, &mut run).await {
            return Ran::Answered(answer);
        }
        // The run holds the kernel: it goes before the kernel is shut down.
        drop(run);
        let _ = self
            .inner
            .site
            .backend()
            .kill_kernel(sandbox, context)
            .await;
        Ran::Killed
    }
}
