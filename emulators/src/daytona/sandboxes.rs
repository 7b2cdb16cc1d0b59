//! The API's routes, and sandboxes: created from a snapshot, started, stopped, removed.

use super::*;
use sandbox_providers::Housekeeping as _;

impl Emulator {
    fn sandbox_dto(id: &str, s: &Sandbox, proxy: &str) -> Value {
        let mut dto = json!({
            "id": id, "organizationId": ORGANIZATION, "name": id, "snapshot": s.snapshot,
            "user": s.user.as_deref().unwrap_or("datalayer"), "env": {}, "labels": s.labels,
            "public": false, "networkBlockAll": false, "kvm": false, "target": s.target,
            "cpu": s.size.cpu, "gpu": 0, "memory": s.size.memory_gib, "disk": s.size.disk_gib,
            "state": s.state, "createdAt": STAMP, "updatedAt": STAMP,
            "toolboxProxyUrl": format!("{proxy}/toolbox"),
        });
        if let Some(reason) = &s.error_reason {
            dto["errorReason"] = json!(reason);
        }
        dto
    }
    /// The control plane: `parts` is the path under `/api`.
    pub(super) async fn control(
        &self,
        req: &HttpRequest,
        parts: &[&str],
        api: &str,
        proxy: &str,
    ) -> Answer {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let query = query_pairs(&req.query);
        match (req.method.as_str(), parts) {
            ("POST", ["docker-registry"]) => {
                let mut state = self.state();
                let id = state.id();
                let entry = json!({
                    "id": id, "name": body["name"], "url": body["url"],
                    "username": body["username"], "project": "",
                    "registryType": "organization", "createdAt": STAMP, "updatedAt": STAMP,
                });
                state.registries.insert(id.clone(), entry.clone());
                let password = body["password"].as_str().unwrap_or_default().to_owned();
                state.passwords.insert(id, password);
                Answer::json(201, entry)
            }
            ("GET", ["docker-registry"]) => {
                let entries: Vec<Value> = self.state().registries.values().cloned().collect();
                Answer::json(200, json!(entries))
            }
            ("DELETE", ["docker-registry", id]) => {
                let mut state = self.state();
                state.passwords.remove(*id);
                match state.registries.remove(*id) {
                    Some(_) => Answer::empty(204),
                    None => not_found("docker registry"),
                }
            }
            ("POST", ["snapshots"]) => self.create_snapshot(&body),
            ("GET", ["snapshots"]) => {
                let name = query.get("name").cloned().unwrap_or_default();
                let state = self.state();
                let items: Vec<Value> = state
                    .snapshots
                    .iter()
                    .filter(|(_, s)| s.name.contains(&name))
                    .map(|(id, s)| Self::snapshot_dto(id, s))
                    .collect();
                Answer::json(
                    200,
                    json!({"items": items, "total": items.len(), "page": 1, "totalPages": 1}),
                )
            }
            ("GET", ["snapshots", id]) => match self.find_snapshot(id) {
                Some(dto) => Answer::json(200, dto),
                None => not_found("snapshot"),
            },
            ("GET", ["snapshots", id, "build-logs-url"]) => self.build_logs_url(id, api).await,
            ("GET", ["snapshots", id, "build-logs"]) => match self.state().snapshots.get(*id) {
                Some(s) => Answer {
                    status: 200,
                    content_type: "text/plain".into(),
                    headers: Vec::new(),
                    body: s
                        .logs
                        .iter()
                        .map(|l| format!("{l}\n"))
                        .collect::<String>()
                        .into_bytes(),
                },
                None => not_found("snapshot"),
            },
            ("DELETE", ["snapshots", id]) => {
                let removed = self.state().snapshots.remove(*id);
                match removed {
                    Some(s) => {
                        if let Some(image) = s.image.clone()
                            && let Err(e) = self.remove("image", image).await
                        {
                            // Not gone: it stays listed, and the answer says why.
                            self.state().snapshots.insert((*id).to_owned(), s);
                            return error(
                                500,
                                &format!("the snapshot's image could not be removed: {e}"),
                            );
                        }
                        Answer::empty(200)
                    }
                    None => not_found("snapshot"),
                }
            }
            ("POST", ["sandbox"]) => self.create_sandbox(&body, proxy),
            ("GET", ["sandbox"]) => {
                let wanted: BTreeMap<String, String> = query
                    .get("labels")
                    .and_then(|l| serde_json::from_str(l).ok())
                    .unwrap_or_default();
                let state = self.state();
                let items: Vec<Value> = state
                    .sandboxes
                    .iter()
                    .filter(|(_, s)| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
                    .map(|(id, s)| Self::sandbox_dto(id, s, proxy))
                    .collect();
                Answer::json(200, json!({"items": items, "nextCursor": null}))
            }
            ("GET", ["sandbox", id]) => self.sandbox(id, proxy).await,
            ("GET", ["sandbox", id, "toolbox-proxy-url"]) => {
                match self.state().sandboxes.contains_key(*id) {
                    true => Answer::json(200, json!({"url": format!("{proxy}/toolbox")})),
                    false => not_found("sandbox"),
                }
            }
            ("POST", ["sandbox", id, action @ ("stop" | "start")]) => {
                self.stop_or_start(id, action, proxy)
            }
            ("DELETE", ["sandbox", id]) => {
                let removed = self.state().sandboxes.remove(*id);
                match removed {
                    Some(mut s) => {
                        if let Some(container) = s.container.clone()
                            && let Err(e) = self.remove("container", container).await
                        {
                            // Not gone: it stays listed, and the answer says why.
                            self.state().sandboxes.insert((*id).to_owned(), s);
                            return error(
                                500,
                                &format!("the sandbox's container could not be removed: {e}"),
                            );
                        }
                        s.container = None;
                        s.state = "destroying".into();
                        Answer::json(200, Self::sandbox_dto(id, &s, proxy))
                    }
                    None => not_found("sandbox"),
                }
            }
            _ => error(
                501,
                &format!(
                    "the daytona emulator does not implement {} {}",
                    req.method, req.path
                ),
            ),
        }
    }
    fn create_sandbox(&self, body: &Value, proxy: &str) -> Answer {
        let implemented = [
            "snapshot",
            "labels",
            "target",
            "user",
            "env",
            "volumes",
            "autoStopInterval",
        ];
        let empty = |key: &str| {
            body[key].is_null()
                || body[key].as_object().is_some_and(serde_json::Map::is_empty)
                || body[key].as_array().is_some_and(Vec::is_empty)
        };
        if let Some(field) = set_field_outside(body, &implemented).or_else(|| {
            ["env", "volumes"]
                .into_iter()
                .find(|k| !empty(k))
                .map(|k| format!("{k}` other than empty"))
        }) {
            return unimplemented_field("sandbox create", &field);
        }
        let auto_stop_minutes = match &body["autoStopInterval"] {
            Value::Null => DEFAULT_AUTO_STOP_MINUTES,
            given => match given.as_u64() {
                Some(minutes) => minutes,
                None => {
                    return error(
                        400,
                        &format!(
                            "autoStopInterval must be a whole number of minutes, 0 or more, not {given}"
                        ),
                    );
                }
            },
        };
        let wanted = body["snapshot"].as_str().unwrap_or_default().to_owned();
        let mut state = self.state();
        // Daytona takes a snapshot's id or its name.
        let found = state
            .snapshots
            .iter()
            .find(|(id, s)| **id == wanted || s.name == wanted)
            .and_then(|(_, s)| s.image.clone().map(|image| (image, s.size)));
        let Some((image, size)) = found else {
            return error(400, &format!("snapshot {wanted} is not active"));
        };
        let id = state.id();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(body["labels"].clone()).unwrap_or_default();
        let sandbox = Sandbox {
            snapshot: wanted,
            size,
            user: body["user"].as_str().map(str::to_owned),
            target: region_asked(&body["target"]),
            labels,
            state: "creating".into(),
            error_reason: None,
            container: None,
            auto_stop_minutes,
            last_activity: std::time::Instant::now(),
        };
        let dto = Self::sandbox_dto(&id, &sandbox, proxy);
        let container_labels = self.container_labels(&sandbox.labels);
        state.sandboxes.insert(id.clone(), sandbox);
        drop(state);
        if let Some(after) = self.inner.kill_after {
            self.kill_after(id.clone(), after);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let launched = this
                .inner
                .site
                .backend()
                .launch_limited(
                    &Artifact {
                        id: image,
                        kind: "image-id".into(),
                    },
                    &container_labels,
                    size.limits(),
                )
                .await;
            let orphan = {
                let mut state = this.state();
                match (state.sandboxes.get_mut(&id), launched) {
                    (Some(s), Ok((container, _))) => {
                        s.container = Some(container.0);
                        s.state = "started".into();
                        None
                    }
                    (Some(s), Err(_)) => {
                        s.state = "error".into();
                        None
                    }
                    // Deleted while it started: its container goes too.
                    (None, Ok((container, _))) => Some(container.0),
                    (None, Err(_)) => None,
                }
            };
            if let Some(container) = orphan
                && let Err(e) = this.remove("container", container).await
            {
                eprintln!("emulate daytona: a sandbox deleted while it started: {e}");
            }
        });
        Answer::json(200, dto)
    }
    /// `GET /sandbox/{id}`: a started sandbox's state is deduced from its container, as
    /// Daytona's runner deduces it (daytonaio/daytona 8432d16,
    /// `apps/runner/pkg/docker/state.go`, `DeduceSandboxState`): paused, or exited with 0,
    /// 137 or 143, is `stopped`; exited otherwise is `error`, with the exit code as its
    /// reason; gone or dead is `destroyed`.
    async fn sandbox(&self, id: &str, proxy: &str) -> Answer {
        let container = match self.state().sandboxes.get(id) {
            Some(s) if s.state == "started" => s.container.clone(),
            Some(_) => None,
            None => return not_found("sandbox"),
        };
        if let Some(container) = container {
            let deduced = match self.inner.engine.inspect_container(&container, None).await {
                Ok(inspect) => {
                    let state = inspect.state.unwrap_or_default();
                    let code = state.exit_code.unwrap_or_default();
                    match state.status.map(|s| s.to_string()).as_deref() {
                        Some("paused") => Some(("stopped", None)),
                        Some("exited") if matches!(code, 0 | 137 | 143) => Some(("stopped", None)),
                        Some("exited") => Some((
                            "error",
                            Some(format!(
                                "container exited with code {code}, reason: {}",
                                state.error.unwrap_or_default()
                            )),
                        )),
                        Some("dead") => Some(("destroyed", None)),
                        _ => None,
                    }
                }
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Some(("destroyed", None)),
                Err(e) => return error(500, &format!("inspecting the sandbox's container: {e}")),
            };
            if let Some((state, reason)) = deduced
                && let Some(s) = self.state().sandboxes.get_mut(id)
            {
                s.state = state.into();
                s.error_reason = reason;
            }
        }
        match self.state().sandboxes.get(id) {
            Some(s) => Answer::json(200, Self::sandbox_dto(id, s, proxy)),
            None => not_found("sandbox"),
        }
    }
    pub(super) fn stop_or_start(&self, id: &str, action: &str, proxy: &str) -> Answer {
        let mut state = self.state();
        let Some(sandbox) = state.sandboxes.get_mut(id) else {
            return not_found("sandbox");
        };
        let Some(container) = sandbox.container.clone() else {
            return error(409, "the sandbox is not created yet");
        };
        let stop = action == "stop";
        sandbox.state = if stop { "stopping" } else { "starting" }.into();
        let dto = Self::sandbox_dto(id, sandbox, proxy);
        drop(state);
        let (this, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            let engine = &this.inner.engine;
            let done = if stop {
                engine
                    .stop_container(
                        &container,
                        Some(StopContainerOptionsBuilder::default().t(10).build()),
                    )
                    .await
            } else {
                engine.start_container(&container, None).await
            };
            if let Some(s) = this.state().sandboxes.get_mut(&id) {
                s.state = match (done, stop) {
                    (Err(_), _) => "error",
                    (Ok(()), true) => "stopped",
                    (Ok(()), false) => "started",
                }
                .into();
            }
        });
        Answer::json(200, dto)
    }
    /// Removes the docker `kind` (`image`, `container`) `id`, as far as it can.
    pub(super) async fn remove(&self, kind: &str, id: String) -> Result<(), String> {
        let resource = Resource {
            kind: kind.into(),
            id,
        };
        self.inner
            .site
            .backend()
            .delete_resource(&resource)
            .await
            .map(|_| ())
            .map_err(|e| format!("{} {}: {e}", resource.kind, resource.id))
    }
    /// The container behind sandbox `id`, once it has one.
    pub(super) fn container(&self, id: &str) -> Option<String> {
        self.state()
            .sandboxes
            .get(id)
            .and_then(|s| s.container.clone())
    }
}

/// An `InterpreterContext` record.
pub(super) fn context_dto(id: &str, request: &Value) -> Value {
    json!({
        "id": id,
        "cwd": request["cwd"].as_str().unwrap_or("/home/datalayer"),
        "language": request["language"].as_str().unwrap_or("python"),
        "active": true,
        "createdAt": STAMP,
    })
}

/// The region a create asked for, or the organization's default (`us`, the region the
/// emulated organization has) when it names none.
pub(super) fn region_asked(asked: &Value) -> String {
    asked.as_str().unwrap_or("us").to_owned()
}
