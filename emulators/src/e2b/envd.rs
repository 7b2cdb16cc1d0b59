//! Inside a sandbox: envd's process and filesystem calls, and the code interpreter at port
//! 49999, each admitted as envd and the interpreter admit them.

use super::*;

impl Emulator {
    /// What E2B's proxy does before a request reaches a sandbox's port: the sandbox must
    /// run, the traffic token must come when public traffic is off (envd's port has its
    /// own token), and something must listen on 49999. Its docker sandbox, contexts and
    /// code channel.
    fn admit(
        &self,
        port: &str,
        id: &str,
        headers: &HashMap<String, String>,
    ) -> Result<(SandboxId, Vec<String>, CodeChannel), Answer> {
        let world = self.world();
        let Some(s) = world.sandboxes.get(id) else {
            return Err(Answer::error(502, "sandbox not running"));
        };
        let envd = port == sandbox_providers::e2b::ENVD_PORT.to_string();
        if let Some(token) = s.traffic_token.as_ref().filter(|_| !envd)
            && headers.get("e2b-traffic-access-token") != Some(token)
        {
            return Err(Answer::json(
                403,
                json!({"code": 403, "sandboxId": id,
                       "message": "the sandbox's traffic access token is missing or wrong"}),
            ));
        }
        let channel = if port == "49999" {
            s.channel
        } else {
            CodeChannel::Interpreter
        };
        if port == "49999" && channel == CodeChannel::Closed {
            // E2B's proxy, for a port nothing listens on.
            return Err(Answer::json(
                502,
                json!({"code": 502, "sandboxId": id, "port": 49999,
                       "message": "The sandbox is running but port is not open"}),
            ));
        }
        Ok((s.inner.clone(), s.contexts.clone(), channel))
    }
    /// Forwards a request for a template's Jupyter Server to the docker sandbox's, which
    /// has a token of its own: added here when the template's server is `open` (none of
    /// its own), else the answer is what a server with an unknown token gives.
    async fn forward(&self, inner: &SandboxId, open: bool, r: &HttpRequest) -> Answer {
        // Without a token of its own, only the server's version (`GET /api`) answers.
        let version_only = r.method == "GET" && r.path == "/api";
        if !(open || version_only) {
            return Answer::json(403, json!({"message": "Forbidden", "reason": null}));
        }
        crate::jupyter::forward_to_jupyter(
            self.inner.site.backend(),
            &self.inner.http,
            inner,
            &r.path,
            r,
        )
        .await
    }

    /// Admits a WebSocket upgrade to a kernel's channels on a Jupyter template's port
    /// 49999, as HTTP requests are admitted: the docker sandbox and the path of those
    /// channels there.
    pub(super) fn admit_socket(
        &self,
        request: &crate::jupyter::SocketRequest<'_>,
    ) -> Result<(SandboxId, String), (u16, String)> {
        let headers = &request.headers;
        let host = headers.get("host").cloned().unwrap_or_default();
        let host = host
            .rsplit_once(':')
            .map_or(host.as_str(), |(name, _)| name)
            .to_ascii_lowercase();
        let (port, id) = match self.inner.site.label(&host).and_then(|l| l.split_once('-')) {
            Some((port, id)) => (port.to_owned(), id.to_owned()),
            None => match (
                headers.get("e2b-sandbox-id"),
                headers.get("e2b-sandbox-port"),
            ) {
                (Some(id), Some(port)) => (port.clone(), id.clone()),
                _ => return Err((404, format!("no sandbox port at host {host}"))),
            },
        };
        let refused = |a: Answer| (a.status, String::from_utf8_lossy(&a.body).into_owned());
        let (inner, _, channel) = self.admit(&port, &id, headers).map_err(refused)?;
        let path = request.path;
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (channel, parts.as_slice()) {
            (CodeChannel::Jupyter { open: true }, ["api", "kernels", _, "channels"]) => {
                let query = match request.query {
                    "" => String::new(),
                    query => format!("?{query}"),
                };
                Ok((inner, format!("{path}{query}")))
            }
            (CodeChannel::Jupyter { open: false }, _) => Err((403, "Forbidden".to_owned())),
            _ => Err((404, format!("the emulator has no WebSocket at {path}"))),
        }
    }
    pub(super) async fn in_sandbox(
        &self,
        port: &str,
        id: &str,
        rest: &[&str],
        r: &HttpRequest,
        body: &Value,
    ) -> Answer {
        let (inner, contexts, channel) = match self.admit(port, id, &r.headers) {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        if let CodeChannel::Jupyter { open } = channel {
            return self.forward(&inner, open, r).await;
        }
        match (port, r.method.as_str(), rest) {
            // Health answers without the access token, as envd's and the interpreter's do.
            ("49999", "GET", ["health"]) => return Answer::json(200, json!("OK")),
            ("49983", "GET", ["health"]) => return Answer::empty(204),
            _ => {}
        }
        if r.headers.get("x-access-token").map(String::as_str)
            != Some(&format!("fake-envd-token-{id}"))
        {
            return Answer::error(401, "bad access token");
        }
        match (port, r.method.as_str(), rest) {
            ("49999", "POST", ["contexts"]) => {
                let context = self.next_id("ctx");
                if let Some(s) = self.world().sandboxes.get_mut(id) {
                    s.contexts.push(context.clone());
                }
                Answer::json(
                    200,
                    json!({"id": context, "language": "python",
                                         "cwd": body["cwd"].as_str().unwrap_or("/home/datalayer")}),
                )
            }
            ("49999", "POST", ["contexts", context, "restart"]) => {
                if contexts.first().map(String::as_str) != Some(*context) {
                    return Answer::error(404, "the emulator restarts the first context only");
                }
                match self.inner.site.backend().restart(&inner).await {
                    Ok(_) => Answer::empty(204),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49999", "POST", ["execute"]) => {
                let code = body["code"].as_str().unwrap_or_default();
                // No context (`null`, as the SDK sends by default) is the default kernel.
                let output = match body["context_id"].as_str() {
                    Some(context) if contexts.first().map(String::as_str) != Some(context) => {
                        self.inner
                            .site
                            .backend()
                            .run_code_in(&inner, context, code)
                            .await
                    }
                    _ => self
                        .inner
                        .site
                        .backend()
                        .run_code(&inner, code)
                        .await
                        .map(|(o, _)| o),
                };
                match output {
                    Ok(output) => execute_lines(&output),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            ("49983", "POST", ["process.Process", "Start"]) => {
                // No Authorization is envd's default user; a Basic user is looked up, and
                // an empty one refused (packages/envd/internal/permissions/authenticate.go).
                let user = r
                    .headers
                    .get("authorization")
                    .and_then(|a| a.strip_prefix("Basic "))
                    .and_then(|b| BASE64.decode(b).ok())
                    .map(|b| String::from_utf8_lossy(&b).trim_end_matches(':').to_owned());
                if user.as_deref() == Some("") {
                    return Answer::json(
                        401,
                        json!({"code": "unauthenticated", "message": "invalid username: ''"}),
                    );
                }
                let Ok(frames) = decode_connect(&r.body) else {
                    return Answer::error(400, "not a Connect envelope");
                };
                let Some(first) = frames.first() else {
                    return Answer::error(400, "no Connect message");
                };
                let start = &first.message;
                let process = &start["process"];
                if let Some(field) = unimplemented_field(start, &["process", "stdin", "tag"])
                    .or_else(|| unimplemented_field(process, &["cmd", "args", "envs", "cwd"]))
                {
                    return Answer::error(
                        501,
                        &format!(
                            "the e2b emulator does not implement the process start field `{field}`"
                        ),
                    );
                }
                if start["stdin"] == json!(true) {
                    return Answer::error(501, "the e2b emulator does not implement stdin");
                }
                let mut argv = vec![process["cmd"].as_str().unwrap_or_default().to_owned()];
                argv.extend(strings(&process["args"]));
                // envd's environment: the sandbox's envVars, then the process's envs.
                let mut env = self
                    .world()
                    .sandboxes
                    .get(id)
                    .map(|s| s.env.clone())
                    .unwrap_or_default();
                env.extend(
                    process["envs"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())),
                );
                let env = env.into_iter().collect();
                // No user is envd's default, the build's last user: the image's USER
                // (packages/orchestrator/pkg/sandbox/reboot.go, meta.Context.User).
                let how = sandbox_providers::docker::Process {
                    user: user.clone(),
                    env,
                    cwd: process["cwd"].as_str().map(str::to_owned),
                };
                // envd looks the named user up and refuses one it does not find.
                let unknown = || {
                    let name = user.as_deref().unwrap_or_default();
                    Answer::json(
                        401,
                        json!({"code": "unauthenticated",
                               "message": format!("invalid username: '{name}'")}),
                    )
                };
                match self
                    .inner
                    .site
                    .backend()
                    .exec_process(&inner, &argv, &how)
                    .await
                {
                    // The engine's own refusal, as the exec's output with exit code 126.
                    Ok(out)
                        if out.exit_code == Some(126)
                            && unknown_user(&format!("{}{}", out.stdout, out.stderr)) =>
                    {
                        unknown()
                    }
                    Err(e) if unknown_user(&e.to_string()) => unknown(),
                    Ok(out) => process_frames(&out),
                    Err(e) => Answer::error(500, &e.to_string()),
                }
            }
            _ => Answer::error(
                501,
                &format!(
                    "the e2b emulator does not implement {} {}",
                    r.method, r.path
                ),
            ),
        }
    }
}

fn execute_lines(output: &CodeOutput) -> Answer {
    let mut lines = Vec::new();
    if !output.stdout.is_empty() {
        lines.push(json!({"type": "stdout", "text": output.stdout, "timestamp": 0}));
    }
    if !output.stderr.is_empty() {
        lines.push(json!({"type": "stderr", "text": output.stderr, "timestamp": 0}));
    }
    if let Some(result) = &output.result {
        lines.push(json!({"type": "result", "text": result, "is_main_result": true}));
    }
    if let Some(error) = &output.error {
        let (name, value) = error.split_once(": ").unwrap_or((error.as_str(), ""));
        lines.push(json!({"type": "error", "name": name, "value": value, "traceback": ""}));
    }
    lines.push(json!({"type": "end_of_execution"}));
    let mut body = Vec::new();
    for line in lines {
        body.extend(serde_json::to_vec(&line).expect("json"));
        body.push(b'\n');
    }
    Answer {
        status: 200,
        content_type: "application/x-ndjson".into(),
        headers: Vec::new(),
        body,
    }
}

fn process_frames(out: &CommandOutput) -> Answer {
    let mut messages = vec![(0, json!({"event": {"start": {"pid": 4242}}}))];
    if !out.stdout.is_empty() {
        messages.push((
            0,
            json!({"event": {"data": {"stdout": BASE64.encode(&out.stdout)}}}),
        ));
    }
    if !out.stderr.is_empty() {
        messages.push((
            0,
            json!({"event": {"data": {"stderr": BASE64.encode(&out.stderr)}}}),
        ));
    }
    let code = out.exit_code.unwrap_or(-1);
    messages.push((
        0,
        json!({"event": {"end": {"exitCode": code, "exited": true, "status": format!("exit status {code}")}}}),
    ));
    messages.push((CONNECT_END_STREAM, json!({})));
    let mut body = Vec::new();
    for (flags, message) in messages {
        body.extend(encode_connect(flags, &message).expect("envelope"));
    }
    Answer {
        status: 200,
        content_type: "application/connect+json".into(),
        headers: Vec::new(),
        body,
    }
}
