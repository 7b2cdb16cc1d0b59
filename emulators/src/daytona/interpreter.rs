//! The interpreter's WebSocket: execute frames read, run and answered as the daemon does.

use super::*;

impl Emulator {
    /// Serves one execute WebSocket as the toolbox does (daytonaio/daytona v0.190.0,
    /// 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/daemon/pkg/toolbox/process/interpreter/controller.go:97-164`): reads the
    /// `{code, contextId, timeout, envs}` frame ([`read_execute`]), runs the code in that
    /// context's kernel with `envs` set for it and within `timeout`, and answers stdout,
    /// stderr and error frames, `control: completed` and close 1000; `control:
    /// interrupted` and close 4008 for code that ended on `KeyboardInterrupt` (the
    /// interrupt a timeout sends); close 4008 alone for code killed past its timeout.
    pub(super) async fn execute(self, stream: Rewound) {
        let sandbox: Arc<Mutex<Option<String>>> = Arc::default();
        let seen = sandbox.clone();
        let touched = self.clone();
        let check = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request| {
            let parts: Vec<&str> = request
                .uri()
                .path()
                .trim_start_matches('/')
                .split('/')
                .collect();
            match parts.as_slice() {
                ["toolbox", id, "process", "interpreter", "execute"] => {
                    *lock(&seen) = Some((*id).to_owned());
                    let skip = request
                        .headers()
                        .get(SKIP_ACTIVITY_HEADER)
                        .is_some_and(|v| v.as_bytes() == b"true");
                    if !skip {
                        touched.touch(id);
                    }
                    Ok(())
                }
                _ => Err((
                    404,
                    format!("the emulator has no WebSocket at {}", request.uri()),
                )),
            }
        };
        let Some(mut socket) = accept(stream, check).await else {
            return;
        };
        let sandbox = lock(&sandbox).clone().unwrap_or_default();
        let payload = loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => break text.as_bytes().to_vec(),
                Some(Ok(Message::Binary(bytes))) => break bytes.to_vec(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return,
            }
        };
        let (frames, code, reason) = match read_execute(&payload) {
            Ok(request) => self.answer(&sandbox, request).await,
            Err(refused) => refused,
        };
        for frame in frames {
            if socket.send(Message::text(frame.to_string())).await.is_err() {
                return;
            }
        }
        close_with(&mut socket, code, &reason).await;
    }
    /// Runs an execute frame's code in sandbox `sandbox`: the frames to send, then the
    /// close code and reason.
    async fn answer(&self, sandbox: &str, request: Execute) -> (Vec<Value>, u16, String) {
        let Execute {
            code,
            context,
            timeout,
            envs,
        } = request;
        if let Some(volatiles) = &self.inner.volatiles {
            // The runner's restart marker changes every run: a placeholder in the cassette.
            for (at, _) in code.match_indices("sm-marker-") {
                if let Some(marker) = code.get(at..at + 18) {
                    volatiles.register("marker", marker);
                }
            }
        }
        let (container, known) = {
            let state = self.state();
            let known = match &context {
                None => true,
                Some(context) => state.contexts.get(context).map(String::as_str) == Some(sandbox),
            };
            let container = state
                .sandboxes
                .get(sandbox)
                .and_then(|s| s.container.clone());
            (container, known)
        };
        let container = match (container, &context) {
            (None, _) => {
                let missing = format!("no context {}", context.as_deref().unwrap_or("default"));
                return (
                    vec![
                        output("error", "", "ContextNotFound", &missing),
                        output("control", "completed", "", ""),
                    ],
                    1000,
                    String::new(),
                );
            }
            // controller.go:144-149.
            (Some(_), Some(id)) if !known => {
                return (Vec::new(), 1008, format!("context not found: {id}"));
            }
            (Some(container), _) => SandboxId(container),
        };
        // repl_client.go:35-62: a context runs one command at a time, in the order they
        // came, and a command's timeout starts when it runs.
        let turn = self
            .state()
            .turns
            .entry((sandbox.to_owned(), context.clone()))
            .or_default()
            .clone();
        let _turn = turn.lock().await;
        let context = context.as_deref();
        let saved = match envs.is_empty() {
            true => None,
            false => {
                let out = match self.run_code(&container, context, &set_envs(&envs)).await {
                    Ok(out) => out,
                    Err(e) => return worker_failed(e),
                };
                // repl_worker.py:111-122 sets them before the code's `try`: a failure ends
                // the command with its error frame and no control frame
                // (repl_worker.py:165-166), the names set before it left set.
                if let Some(error) = out.error {
                    return (vec![error_frame(&error)], 1000, String::new());
                }
                match serde_json::from_str::<BTreeMap<String, Option<String>>>(out.stdout.trim()) {
                    Ok(saved) => Some(saved),
                    Err(e) => {
                        return worker_failed(format!(
                            "the environment before `envs` did not read back: {e}"
                        ));
                    }
                }
            }
        };
        let answer = match self.run_timed(&container, context, &code, timeout).await {
            Ran::Answered(answer) => answer,
            // repl_client.go:146-166, then :56-57: no frame, close 4008.
            Ran::Killed => return (Vec::new(), CLOSE_TIMEOUT, String::new()),
        };
        // repl_worker.py:145-150: put back as they were once the code ended, before its
        // last frames are sent.
        if let Some(saved) = saved
            && let Err(e) = self
                .run_code(&container, context, &restore_envs(&saved))
                .await
        {
            return worker_failed(e.context("putting the environment back after `envs`"));
        }
        let mut out = match answer {
            Ok(out) => out,
            Err(e) => return worker_failed(e),
        };
        // repl_worker.py:129-130: code ended by KeyboardInterrupt is `interrupted`, with
        // no error frame; repl_client.go:341-344 and :56-57 close it 4008.
        let interrupted = out
            .error
            .as_deref()
            .is_some_and(|e| e.split(':').next() == Some("KeyboardInterrupt"));
        if interrupted {
            out.error = None;
        }
        let mut frames = Vec::new();
        if !out.stdout.is_empty() {
            frames.push(output("stdout", &out.stdout, "", ""));
        }
        if !out.stderr.is_empty() {
            frames.push(output("stderr", &out.stderr, "", ""));
        }
        frames.extend(out.error.as_deref().map(error_frame));
        match interrupted {
            true => {
                frames.push(output("control", "interrupted", "", ""));
                (frames, CLOSE_TIMEOUT, String::new())
            }
            false => {
                frames.push(output("control", "completed", "", ""));
                (frames, 1000, String::new())
            }
        }
    }
}

/// The answer to code the emulator's kernel failed to run: a `WorkerProcessError` frame,
/// `control: completed` and close 1000.
fn worker_failed(e: impl std::fmt::Display) -> (Vec<Value>, u16, String) {
    (
        vec![
            output("error", "", "WorkerProcessError", &e.to_string()),
            output("control", "completed", "", ""),
        ],
        1000,
        String::new(),
    )
}

/// The error frame of a kernel's `ename: evalue`.
fn error_frame(error: &str) -> Value {
    let (name, value) = error.split_once(": ").unwrap_or((error, ""));
    output("error", "", name, value)
}

/// How a run within a timeout ended.
pub(super) enum Ran {
    /// The kernel answered, within the timeout or its grace period.
    Answered(sandbox_providers::Result<sandbox_providers::CodeOutput>),
    /// Its kernel was shut down, past the timeout and the grace period.
    Killed,
}

/// How long interpreter code may run when its frame names no `timeout`: 10 min
/// (`controller.go:123`).
pub(super) const INTERPRETER_TIMEOUT: Duration = Duration::from_secs(600);

/// How long interrupted code has to stop before its kernel is shut down: the daemon's
/// `gracePeriod` (`types.go:20`).
pub(super) const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// The close code of code past its timeout: `WebSocketCloseTimeout` (`types.go:26`).
const CLOSE_TIMEOUT: u16 = 4008;

/// An execute frame as the toolbox reads it (`ExecuteRequest`, `types.go:71-76`).
#[derive(Debug, PartialEq)]
pub(super) struct Execute {
    pub(super) code: String,
    pub(super) context: Option<String>,
    /// None: no limit (`timeout: 0`).
    pub(super) timeout: Option<Duration>,
    pub(super) envs: BTreeMap<String, String>,
}

/// Reads the first frame of the execute WebSocket as the daemon does (daytonaio/daytona
/// v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
/// `apps/daemon/pkg/toolbox/process/interpreter/controller.go:105-134`), or refuses it with
/// the frames to send, the close code and its reason: a frame that is not JSON of
/// `ExecuteRequest`'s types closes 1002 `invalid JSON payload`, no `code` closes 1008
/// `code is required`, a negative `timeout` closes 1008 `timeout must be greater than or
/// equal to 0`. A field the emulator does not implement (the daemon reads no other) is
/// refused by name: an error frame and close 1008.
pub(super) fn read_execute(payload: &[u8]) -> Result<Execute, (Vec<Value>, u16, String)> {
    let invalid = || (Vec::new(), 1002, "invalid JSON payload".to_owned());
    let frame = match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Null) => json!({}),
        Ok(frame @ Value::Object(_)) => frame,
        _ => return Err(invalid()),
    };
    if let Some(field) = set_field_outside(&frame, &["code", "contextId", "timeout", "envs"]) {
        let message = format!(
            "the daytona emulator does not implement the execute field `{field}`; it refuses it rather than drop it"
        );
        return Err((
            vec![output("error", "", "NotImplementedError", &message)],
            1008,
            message,
        ));
    }
    let text = |field: &str| match &frame[field] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(invalid()),
    };
    let code = text("code")?.unwrap_or_default();
    let context = text("contextId")?;
    let timeout = match &frame["timeout"] {
        Value::Null => None,
        value => Some(value.as_i64().ok_or_else(invalid)?),
    };
    // A null value is the empty string, as Go decodes it into `map[string]string`.
    let mut envs = BTreeMap::new();
    match &frame["envs"] {
        Value::Null => {}
        Value::Object(given) => {
            for (name, value) in given {
                let value = match value {
                    Value::Null => String::new(),
                    Value::String(s) => s.clone(),
                    _ => return Err(invalid()),
                };
                envs.insert(name.clone(), value);
            }
        }
        _ => return Err(invalid()),
    }
    if code.is_empty() {
        return Err((Vec::new(), 1008, "code is required".to_owned()));
    }
    let timeout = match timeout {
        None => Some(INTERPRETER_TIMEOUT),
        Some(secs) if secs < 0 => {
            return Err((
                Vec::new(),
                1008,
                "timeout must be greater than or equal to 0".to_owned(),
            ));
        }
        Some(0) => None,
        Some(secs) => Some(Duration::from_secs(secs.unsigned_abs())),
    };
    Ok(Execute {
        code,
        context,
        timeout,
        envs,
    })
}

/// Python that sets `envs` in the kernel's `os.environ`, in the order of their names (the
/// daemon's worker gets them from a Go map, marshalled sorted), after printing as one
/// JSON line the value each had (null: unset). It binds no name in the kernel's globals;
/// being a cell of its own, it advances the kernel's execution count and IPython's input
/// history, which no frame shows.
fn set_envs(envs: &BTreeMap<String, String>) -> String {
    let given = serde_json::to_string(envs).expect("a map of strings serializes");
    in_own_namespace(&format!(
        "import json, os\nnew = json.loads({})\nprint(json.dumps({{k: os.environ.get(k) for k in new}}))\nfor k, v in new.items():\n    os.environ[k] = v\n",
        python_string(&given)
    ))
}

/// Python that puts back the values [`set_envs`] printed: each as it was, or unset.
fn restore_envs(saved: &BTreeMap<String, Option<String>>) -> String {
    let saved = serde_json::to_string(saved).expect("a map of strings serializes");
    in_own_namespace(&format!(
        "import json, os\nfor k, v in json.loads({}).items():\n    if v is None:\n        os.environ.pop(k, None)\n    else:\n        os.environ[k] = v\n",
        python_string(&saved)
    ))
}

/// `source` run by `exec` in a namespace of its own, so the kernel's globals stay as they
/// were and the cell shows no value.
fn in_own_namespace(source: &str) -> String {
    format!("exec({}, {{}})", python_string(source))
}

/// `text` as a Python string literal: JSON's escapes are Python's.
fn python_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// An `OutputMessage` frame, every field present as the toolbox sends them.
fn output(kind: &str, text: &str, name: &str, value: &str) -> Value {
    json!({"type": kind, "text": text, "name": name, "value": value, "traceback": ""})
}
