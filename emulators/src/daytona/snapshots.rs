//! Snapshots: created from a build's Dockerfile, built on the docker engine, their build logs.

use super::*;

impl Emulator {
    pub(super) fn snapshot_dto(id: &str, s: &Snapshot) -> Value {
        json!({
            "id": id, "organizationId": ORGANIZATION, "general": false, "name": s.name,
            "state": s.state, "size": null, "entrypoint": null, "cpu": s.size.cpu, "gpu": 0,
            "mem": s.size.memory_gib, "disk": s.size.disk_gib, "errorReason": s.error, "createdAt": STAMP, "updatedAt": STAMP,
            "lastUsedAt": null, "regionIds": [s.region],
        })
    }
    /// Snapshot `wanted`'s record, by id or by name as Daytona takes either.
    pub(super) fn find_snapshot(&self, wanted: &str) -> Option<Value> {
        let state = self.state();
        let (id, s) = state
            .snapshots
            .iter()
            .find(|(id, s)| id.as_str() == wanted || s.name == wanted)?;
        Some(Self::snapshot_dto(id, s))
    }
    /// The build-logs URL of snapshot `id`, as Daytona's API gives it: while the snapshot
    /// is `pending` (no runner holds its build) the request is held, the snapshot read
    /// again every second, and answered 404 after [`RUNNER_WAIT`] without a runner
    /// (daytonaio/daytona v0.190.0, 01c502bb1f1ff8f2885d0cd490e043736083dca8,
    /// `apps/api/src/sandbox/controllers/snapshot.controller.ts`).
    pub(super) async fn build_logs_url(&self, id: &str, api: &str) -> Answer {
        let started = std::time::Instant::now();
        loop {
            let state = self.state().snapshots.get(id).map(|s| s.state.clone());
            match state {
                None => return not_found("snapshot"),
                Some(state) if state != "pending" => {
                    return Answer::json(
                        200,
                        json!({"url": format!("{api}/api/snapshots/{id}/build-logs")}),
                    );
                }
                Some(_) if started.elapsed() >= RUNNER_WAIT => {
                    return error(
                        404,
                        &format!("Timeout waiting for build runner assignment for snapshot {id}"),
                    );
                }
                Some(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
    pub(super) fn create_snapshot(&self, body: &Value) -> Answer {
        let implemented = ["name", "buildInfo", "cpu", "memory", "disk", "regionId"];
        if let Some(field) = set_field_outside(body, &implemented).or_else(|| {
            set_field_outside(&body["buildInfo"], &["dockerfileContent", "contextHashes"])
                .map(|f| format!("buildInfo.{f}"))
        }) {
            return unimplemented_field("snapshot create", &field);
        }
        let hashes = &body["buildInfo"]["contextHashes"];
        let hashes: Vec<String> = match hashes.as_array() {
            None if hashes.is_null() => Vec::new(),
            Some(list) if list.iter().all(Value::is_string) => list
                .iter()
                .filter_map(|h| h.as_str().map(str::to_owned))
                .collect(),
            _ => return error(400, "buildInfo.contextHashes must be an array of strings"),
        };
        // Daytona's defaults for a snapshot that names no size (CreateSnapshot, openapi.yaml).
        let size_of = |key: &str, default: u32| {
            body[key]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(default)
        };
        let size = Size {
            cpu: size_of("cpu", 1),
            memory_gib: size_of("memory", 1),
            disk_gib: size_of("disk", 3),
        };
        let dockerfile = body["buildInfo"]["dockerfileContent"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = self.state();
        let id = state.id();
        let snapshot = Snapshot {
            name: body["name"].as_str().unwrap_or_default().to_owned(),
            size,
            region: region_asked(&body["regionId"]),
            state: "pending".into(),
            image: None,
            // Said where a user reads it: the size the emulator does not enforce.
            logs: vec![format!(
                "emulate daytona: {} GiB of disk asked; the local engine limits no container's disk, so it is not enforced",
                size.disk_gib
            )],
            error: None,
        };
        let dto = Self::snapshot_dto(&id, &snapshot);
        state.snapshots.insert(id.clone(), snapshot);
        drop(state);
        let this = self.clone();
        let queued = self.inner.queued;
        tokio::spawn(async move {
            // No runner yet: the snapshot stays `pending`.
            tokio::time::sleep(queued).await;
            this.build(id, dockerfile, hashes).await
        });
        Answer::json(200, dto)
    }
    /// Sets snapshot `id` with `f`, if it still exists.
    fn set_snapshot(&self, id: &str, f: impl FnOnce(&mut Snapshot)) {
        if let Some(s) = self.state().snapshots.get_mut(id) {
            f(s);
        }
    }
    /// Builds like Daytona's builder would: pulls a registry base with its entry, writes
    /// the Dockerfile's heredocs out as context files (the docker variant's builder takes
    /// no heredocs), adds the files of each of `hashes` from the object storage
    /// ([`Self::unpack_context`]) and builds.
    async fn build(self, id: String, dockerfile: String, hashes: Vec<String>) {
        self.set_snapshot(&id, |s| s.state = "building".into());
        let building = tokio::time::Instant::now();
        let dockerfile = match self.pull_base(&dockerfile) {
            Ok(dockerfile) => dockerfile,
            Err(why) => {
                return self.set_snapshot(&id, |s| {
                    s.logs.push(format!("ERROR: {why}"));
                    s.error = Some(why);
                    s.state = "build_failed".into();
                });
            }
        };
        let dir =
            std::env::temp_dir().join(format!("sm-daytona-emulator-{}-{id}", std::process::id()));
        let context = write_context(&dir, &dockerfile)
            .map_err(|e| format!("cannot write the build context: {e}"))
            .and_then(|()| self.unpack_context(&hashes, &dir));
        let built = match context {
            // The runner says which files it added in its own log, not the build's.
            Ok(_) => {
                let state = self.inner.clone();
                let log_id = id.clone();
                let log = move |line: &str| {
                    if let Some(s) = lock(&state.state).snapshots.get_mut(&log_id) {
                        s.logs.push(line.to_owned());
                    }
                };
                self.inner
                    .site
                    .backend()
                    .build(
                        &BuildRequest {
                            environment_dir: dir.clone(),
                            base: sandbox_providers::BaseImage::local(
                                sandbox_providers::docker::base::BASE_IMAGE,
                            ),
                            registry_credential: None,
                            build_secrets: Vec::new(),
                            labels: self.inner.labels.clone(),
                        },
                        &log,
                    )
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e),
        };
        let _ = std::fs::remove_dir_all(&dir);
        tokio::time::sleep_until(building + self.inner.building_at_least).await;
        match built {
            Ok(artifact) => self.set_snapshot(&id, |s| {
                s.image = Some(artifact.id);
                s.state = "active".into();
            }),
            Err(e) => self.set_snapshot(&id, |s| {
                s.error = Some(e);
                s.state = "build_failed".into();
            }),
        }
    }
    /// `dockerfile` with each base pulled from a registry replaced by the local image that
    /// stands in for it, after checking, as a registry would, the credential of the
    /// docker-registry entry for that registry; a base no entry opens fails the build with
    /// the registry named, as Daytona's builder does.
    fn pull_base(&self, dockerfile: &str) -> Result<String, String> {
        let mut out = String::with_capacity(dockerfile.len());
        for line in dockerfile.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let image = match words.as_slice() {
                [from, image, ..] if from.eq_ignore_ascii_case("FROM") => *image,
                _ => {
                    out.push_str(line);
                    out.push('\n');
                    continue;
                }
            };
            let Some((host, _)) = image
                .split_once('/')
                .filter(|(host, _)| host.contains(['.', ':']) || *host == "localhost")
            else {
                out.push_str(line);
                out.push('\n');
                continue;
            };
            let Some(base) = self.inner.bases.iter().find(|b| b.reference == image) else {
                return Err(format!(
                    "pull {image}: {host} has no such image (the emulator serves no such base)"
                ));
            };
            let state = self.state();
            let entry = state
                .registries
                .iter()
                .find(|(_, entry)| entry["url"] == host)
                .map(|(id, entry)| (id.clone(), entry["username"].clone()));
            let Some((id, username)) = entry else {
                return Err(format!(
                    "pull {image}: {host}: unauthorized: no docker-registry entry holds a credential for it"
                ));
            };
            let password = state.passwords.get(&id).cloned().unwrap_or_default();
            if username != base.username.as_str() || password != base.password.expose() {
                return Err(format!(
                    "pull {image}: {host}: unauthorized: the registry refused the credential of docker-registry entry {id}"
                ));
            }
            out.push_str(&line.replacen(image, &base.local, 1));
            out.push('\n');
        }
        Ok(out)
    }
}

/// Writes `dockerfile` into `dir` with its heredoc `COPY`s as context files.
pub(super) fn write_context(dir: &std::path::Path, dockerfile: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut out = String::new();
    let mut lines = dockerfile.lines();
    let mut files = 0;
    while let Some(line) = lines.next() {
        let Some((head, rest)) = line.split_once(" <<'") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let Some((delimiter, dest)) = rest.split_once("' ") else {
            return Err(std::io::Error::other(format!(
                "a heredoc COPY names no destination: {line}"
            )));
        };
        let mut content = String::new();
        for l in lines.by_ref() {
            if l == delimiter {
                break;
            }
            content.push_str(l);
            content.push('\n');
        }
        files += 1;
        let name = format!("heredoc-{files}");
        std::fs::write(dir.join(&name), content)?;
        out.push_str(&format!("{head} {name} {dest}\n"));
    }
    std::fs::write(dir.join("Dockerfile"), out)
}
