//! Sandboxes on the control plane: create from a template, list, detail, logs, kill (also at
//! their timeout).

use super::*;
use sandbox_providers::Housekeeping as _;

impl Emulator {
    /// Kills sandbox `id`: false when there is none. A killed E2B sandbox is gone: its
    /// container goes too (the docker variant's sandbox id is the container's).
    pub(super) async fn kill(&self, id: &str) -> Result<bool, sandbox_providers::ProviderError> {
        let Some(s) = self.world().sandboxes.remove(id) else {
            return Ok(false);
        };
        let docker = self.inner.site.backend();
        let _ = docker.shutdown(&s.inner, Duration::from_secs(10)).await;
        let container = sandbox_providers::Resource {
            kind: "container".into(),
            id: s.inner.0.clone(),
        };
        docker.delete_resource(&container).await?;
        Ok(true)
    }
    /// Kills sandbox `id` once `timeout` seconds have passed, as E2B kills a sandbox at its
    /// timeout (`NewSandbox.timeout`, spec/openapi.yml), or earlier under the
    /// [`Options::kill_after`] fault; not once the emulator has stopped, when its cleanup
    /// removes what is left.
    fn kill_at_timeout(&self, id: String, timeout: u64) {
        let emulator = self.clone();
        let at = Duration::from_secs(timeout).min(self.inner.kill_after.unwrap_or(Duration::MAX));
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if emulator.inner.site.stopped() {
                return;
            }
            if let Err(e) = emulator.kill(&id).await {
                eprintln!("emulate e2b: killing sandbox {id} at its timeout: {e}");
            }
        });
    }
    pub(super) async fn create(&self, body: &Value) -> Answer {
        if let Some(refused) = create_refusal(body) {
            return refused;
        }
        let selector = body["templateID"].as_str().unwrap_or_default();
        let found = {
            let world = self.world();
            resolve(&world.templates, selector).map(|t| {
                (
                    t.id.clone(),
                    t.outcome.lock().expect("outcome").clone(),
                    CodeChannel::of(t.start_cmd.as_deref()),
                    t.limits,
                )
            })
        };
        let (tid, artifact, channel, limits) = match found {
            Some((tid, Some(Ok(artifact)), channel, limits)) => (tid, artifact, channel, limits),
            Some(_) => return Answer::error(400, &format!("template {selector} is not ready")),
            None => return Answer::error(404, &format!("template {selector} not found")),
        };
        let metadata: BTreeMap<String, String> =
            serde_json::from_value(body["metadata"].clone()).unwrap_or_default();
        let id = self.next_id("sbx");
        // Fake: an emulator token (sm-fake-…), redacted by clients like a real one.
        let traffic_token = (body["network"]["allowPublicTraffic"] == json!(false))
            .then(|| format!("sm-fake-traffic-token-{id}"));
        let labels = RunLabels {
            // A sandbox created without the run's labels (as the SDK's, by default) still
            // gets a run label of its own, unique to this emulator, for cleanup.
            run_id: metadata
                .get("sandbox-matrix.run")
                .cloned()
                .or_else(|| self.inner.run_id.clone())
                .unwrap_or_else(|| format!("e2b-emulator-{}-{id}", self.port())),
            variant: "e2b-emulator".into(),
            scenario: metadata
                .get("sandbox-matrix.scenario")
                .cloned()
                .unwrap_or_default(),
        };
        self.inner.site.made_under(&labels);
        let launched = self
            .inner
            .site
            .backend()
            .launch_limited(&artifact, &labels, limits)
            .await;
        let inner = match launched {
            Ok((inner, _)) => inner,
            Err(e) => return Answer::error(500, &e.to_string()),
        };
        let env = serde_json::from_value(body["envVars"].clone()).unwrap_or_default();
        self.world().sandboxes.insert(
            id.clone(),
            Sandbox {
                inner,
                template: tid.clone(),
                limits,
                env,
                metadata,
                contexts: Vec::new(),
                channel,
                traffic_token: traffic_token.clone(),
            },
        );
        // E2B's default timeout is 15 s (NewSandbox.timeout, spec/openapi.yml).
        self.kill_at_timeout(id.clone(), body["timeout"].as_u64().unwrap_or(15));
        Answer::json(
            201,
            json!({"templateID": tid, "sandboxID": id, "clientID": "emulator",
                   "envdVersion": "0.1.3",
                   // Fake: an emulator token, redacted like a real one.
                   "envdAccessToken": format!("fake-envd-token-{id}"),
                   "trafficAccessToken": traffic_token,
                   "domain": null}),
        )
    }
    pub(super) fn list_sandboxes(&self, query: &str) -> Answer {
        let wanted: Vec<(String, String)> = query_param(query, "metadata")
            .map(|m| {
                m.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (decode(k), decode(v)))
                    .collect()
            })
            .unwrap_or_default();
        let world = self.world();
        let listed: Vec<Value> = world
            .sandboxes
            .iter()
            .filter(|(_, s)| wanted.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
            .map(|(id, s)| {
                let mut d = detail(id, s);
                d.as_object_mut().map(|o| o.remove("envdAccessToken"));
                d
            })
            .collect();
        Answer::json(200, Value::Array(listed))
    }
    /// `GET /sandboxes/{id}`: its container's state decides: a paused container is a
    /// `paused` sandbox, and one that ended is not found, since E2B's `SandboxState` has
    /// only `running` and `paused` and forgets a sandbox that ended.
    pub(super) async fn sandbox_detail(&self, id: &str) -> Answer {
        let (inner, mut answer) = match self.world().sandboxes.get(id) {
            Some(s) => (s.inner.clone(), detail(id, s)),
            None => return Answer::error(404, "sandbox not found"),
        };
        // E2B answers 404 for a sandbox killed or being killed, `paused` for one paused or
        // being paused (e2b-dev/infra@INFRA_COMMIT packages/api/internal/handlers/
        // sandbox_get.go, `SandboxNotFoundMsg`); its `SandboxState` is running or paused.
        match self.inner.site.backend().sandbox_state(&inner).await {
            Ok(Some(SandboxState::Stopped { .. })) => Answer::error(404, "sandbox not found"),
            Ok(Some(SandboxState::Paused)) => {
                answer["state"] = json!("paused");
                Answer::json(200, answer)
            }
            Ok(_) => Answer::json(200, answer),
            Err(e) => Answer::error(500, &format!("asking the engine about the sandbox: {e}")),
        }
    }
    /// `GET /v2/sandboxes/{id}/logs`: its container's last log lines as `SandboxLogEntry`s,
    /// newest first for `direction=backward`, at most `limit`. The `cursor`, `level` and
    /// `search` filters are refused by name: this emulator does not implement them.
    pub(super) async fn sandbox_logs(&self, id: &str, query: &str) -> Answer {
        for unsupported in ["cursor", "level", "search"] {
            if query_param(query, unsupported).is_some() {
                return Answer::error(
                    501,
                    &format!("emulate e2b does not implement the logs filter `{unsupported}`"),
                );
            }
        }
        let limit = match query_param(query, "limit").map(|l| l.parse::<usize>()) {
            None => 1000,
            Some(Ok(limit)) if limit <= 1000 => limit,
            Some(_) => return Answer::error(400, "limit must be an integer from 0 to 1000"),
        };
        let backward = match query_param(query, "direction").as_deref() {
            None | Some("forward") => false,
            Some("backward") => true,
            Some(other) => {
                return Answer::error(
                    400,
                    &format!("direction must be forward or backward, not `{other}`"),
                );
            }
        };
        // A sandbox that ended keeps its logs until it is deleted, as its container does.
        let Some(inner) = self.world().sandboxes.get(id).map(|s| s.inner.clone()) else {
            return Answer::error(404, "sandbox not found");
        };
        let mut lines = self.inner.site.backend().last_log_lines(&inner.0).await;
        if backward {
            lines.reverse();
        }
        lines.truncate(limit);
        let timestamp = now();
        let logs: Vec<Value> = lines
            .into_iter()
            .map(|message| json!({"timestamp": timestamp, "level": "info", "message": message, "fields": {}}))
            .collect();
        Answer::json(200, json!({ "logs": logs }))
    }
}

/// Why the emulator refuses a sandbox create (`NewSandbox`), if it sets a field the
/// emulator does not implement, or one it implements for other values only: `secure`
/// true (envd always wants its access token here), `autoPause` false, internet access on,
/// and of `network` only `allowPublicTraffic`.
pub(super) fn create_refusal(body: &Value) -> Option<Answer> {
    let implemented = [
        "templateID",
        "metadata",
        "timeout",
        "envVars",
        "secure",
        "autoPause",
        "allow_internet_access",
        "network",
    ];
    if let Some(field) = set_field_outside(body, &implemented) {
        return Some(unimplemented_field_answer("sandbox create", &field));
    }
    if let Some(field) = set_field_outside(&body["network"], &["allowPublicTraffic"]) {
        return Some(unimplemented_field_answer(
            "sandbox create",
            &format!("network.{field}"),
        ));
    }
    let only = [
        ("secure", json!(true)),
        ("autoPause", json!(false)),
        ("allow_internet_access", json!(true)),
    ];
    only.into_iter()
        .find(|(field, value)| !body[*field].is_null() && body[*field] != *value)
        .map(|(field, value)| {
            unimplemented_field_answer("sandbox create", &format!("{field}` other than `{value}"))
        })
}

/// Whether the engine refused an exec because its user is not in the container's passwd.
pub(super) fn unknown_user(said: &str) -> bool {
    said.contains("unable to find user")
}

/// The first field of `object` not among `known`, if any.
pub(super) fn unimplemented_field(object: &Value, known: &[&str]) -> Option<String> {
    object
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| !known.contains(&k.as_str()))
        .cloned()
}

fn detail(id: &str, s: &Sandbox) -> Value {
    json!({"templateID": s.template, "sandboxID": id, "clientID": "emulator",
           "startedAt": now(), "endAt": now(),
           "cpuCount": s.limits.cpus.unwrap_or(2), "memoryMB": s.limits.memory_mb.unwrap_or(1024),
           "diskSizeMB": 5120, "state": "running", "envdVersion": "0.1.3",
           "metadata": s.metadata})
}
