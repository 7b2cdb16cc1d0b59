//! Builds on the engine: the classic builder or BuildKit, the build context with every
//! stage labelled, the build's record and its cancel; and the base pushed to a registry.

use super::*;

/// How long a delete waits for a classic build step the engine is committing (a cancelled
/// build's last step): about 10 s each on fuse-overlayfs.
const BUILD_STEP_COMMIT_WAIT: Duration = Duration::from_secs(120);

/// How long a delete of a BuildKit build waits for it to end once cancelled: a build whose
/// client is gone goes on exporting its image (6 s for the reference environment on a
/// 2-core machine with fuse-overlayfs), and an export cannot be cancelled.
const BUILD_END_WAIT: Duration = Duration::from_secs(300);

/// Registry address under which build secrets are handed to the builder, as a registry
/// login would be; `.invalid` never resolves.
const CANARY_REGISTRY: &str = "build-secrets.invalid";

impl DockerProvider {
    /// BuildKit where the engine offers it (a Linux engine speaking API 1.39 or later,
    /// which has BuildKit built in), else the classic builder.
    pub async fn offered_builder(&self) -> Builder {
        // The version negotiated at connect: the engine's, where it is older than bollard's.
        let api = self.docker.client_version();
        let linux = self
            .docker
            .version()
            .await
            .is_ok_and(|v| v.os.as_deref() == Some("linux"));
        if linux && (api.major_version, api.minor_version) >= (1, 39) {
            Builder::BuildKit
        } else {
            Builder::Classic
        }
    }
    /// This provider with its builder named by the environment variable `var` instead of
    /// [`BUILDER_VAR`] (a variant of its own on this engine).
    pub fn with_builder_var(mut self, var: &'static str) -> Self {
        self.builder_var = var;
        self
    }
    /// The builder of [`DockerProvider::build_environment`], chosen at its first call:
    /// the one the builder variable names (`buildkit` or `classic`); unset or empty,
    /// [`DockerProvider::offered_builder`].
    pub async fn builder(&self) -> Result<Builder> {
        self.builder
            .get_or_try_init(|| async {
                let var = self.builder_var;
                match std::env::var(var).as_deref().map(str::trim) {
                    Err(_) | Ok("") => Ok(self.offered_builder().await),
                    Ok("buildkit") => Ok(Builder::BuildKit),
                    Ok("classic") => Ok(Builder::Classic),
                    Ok(other) => Err(ProviderError::new(
                        ErrorKind::Config,
                        format!(
                            "{var}={}: expected `buildkit` or `classic`",
                            crate::quoted(other)
                        ),
                    )),
                }
            })
            .await
            .copied()
    }
    /// Builds an environment with [`DockerProvider::builder`], saying which in the log.
    /// BuildKit's cache outlives a run, where the classic builder's (the run's own
    /// intermediate images, which cleanup removes) goes with it: until this provider has
    /// built an environment once, its builds start from the base, as on a fresh engine;
    /// later ones (a rebuild) may use the cache.
    pub async fn build_environment(&self, request: &BuildRequest, log: &LogFn) -> Result<Artifact> {
        let builder = self.builder().await?;
        let first = !self
            .built
            .lock()
            .expect("built environments lock")
            .contains(&request.environment_dir);
        let use_cache = builder == Builder::Classic || !first;
        log(&format!(
            "builder: {}{}",
            builder.describe(),
            if use_cache {
                ""
            } else {
                ", its cache not used: this run's first build of the environment"
            }
        ));
        let built = self.build_with(request, log, builder, use_cache).await?;
        self.built
            .lock()
            .expect("built environments lock")
            .insert(request.environment_dir.clone());
        Ok(built)
    }
    /// Builds `request` as [`Provider::build`] does, with `builder`, from the engine's
    /// build cache or (`use_cache` false) from the base alone.
    pub async fn build_with(
        &self,
        request: &BuildRequest,
        log: &LogFn,
        builder: Builder,
        use_cache: bool,
    ) -> Result<Artifact> {
        // The run's labels go in as one LABEL right after each FROM, not through the
        // engine's label option, which the classic builder appends as one LABEL per key at
        // the end: every intermediate image then carries all of them, so cleanup and sweep
        // find a build stopped part-way.
        let dockerfile = crate::read_dockerfile(&request.environment_dir)?;
        let dockerfile = label_every_stage(&dockerfile, &request.labels.to_map());
        let mut build_args: HashMap<String, String> = request
            .build_secrets
            .iter()
            .map(|s| (s.name().to_owned(), s.expose().to_owned()))
            .collect();
        build_args.insert(BASE_ARG.to_owned(), request.base.reference.clone());
        let pull = match &request.base.registry {
            Some(registry) => {
                let reference = DigestReference::parse(&request.base.reference)?;
                // The handshake first, so a refused credential is reported naming the
                // registry, not as whatever the engine makes of it.
                check_base(&reference, request.registry_credential.as_ref())
                    .await
                    .map_err(|e| {
                        ProviderError::new(
                            ErrorKind::Build,
                            format!("the base {reference} cannot be pulled: {}", e.message),
                        )
                    })?;
                // The engine resolves the digest through the registry: the reference is
                // untagged (the layers, and images built on them, stay) and the build pulls.
                // Measured on the classic builder: the first use of a digest GETs its manifest
                // by digest with the credential, a digest whose manifest the engine has
                // cached is HEAD-ed or only pinged (/v2/); BuildKit resolves it through
                // containerd, with a HEAD by digest with the credential (both seen in
                // tests/engine/private_base.rs). The check above runs every build.
                match self
                    .docker
                    .remove_image(
                        &request.base.reference,
                        Some(RemoveImageOptionsBuilder::default().noprune(true).build()),
                        None,
                    )
                    .await
                {
                    Ok(_)
                    | Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => {}
                    Err(e) => log(&format!(
                        "the engine kept its copy of {reference} ({e}); the pull may not fetch its manifest"
                    )),
                }
                log(&format!(
                    "base {reference}: from registry {registry} by digest ({}), pulled by the engine",
                    request.credential_made()
                ));
                true
            }
            None => {
                log(&format!(
                    "base {}: local, bootstrapped on this engine, not from a registry",
                    request.base.reference
                ));
                false
            }
        };
        // The real registry's login where there is one; else the fake canary is handed over
        // as a registry login would be, so that the scan can show none of it stays.
        let credentials = match &request.registry_credential {
            Some(credential) => Some(HashMap::from([(
                credential.registry.clone(),
                docker_credentials(credential),
            )])),
            None => request.build_secrets.first().map(|s| {
                HashMap::from([(
                    CANARY_REGISTRY.to_owned(),
                    DockerCredentials {
                        username: Some("build".into()),
                        password: Some(s.expose().to_owned()),
                        serveraddress: Some(CANARY_REGISTRY.into()),
                        ..Default::default()
                    },
                )])
            }),
        };
        // A BuildKit build goes on without its client (its image lands seconds after a kill):
        // it goes through a holder that outlives the client, and the ledger names both
        // before it starts, so that cleanup and sweep can cancel it and wait for its end.
        let holder = match (builder, &self.holder, hold::EngineAddress::from_env()) {
            (Builder::BuildKit, Some(executable), Some(engine)) => {
                Some(hold::Holder::start(executable, &engine).await?)
            }
            _ => None,
        };
        let build = (builder == Builder::BuildKit).then(|| {
            let id = format!("sandbox-matrix-{}", random_hex(12));
            BuildRecord {
                holder: holder.as_ref().map(|h| h.owner.clone()),
                id,
            }
        });
        let build_resource = build.as_ref().map(BuildRecord::resource);
        if let Some(resource) = &build_resource {
            let seq = self.creates.intent(&request.labels, BUILD_RESOURCE)?;
            self.creates.created(seq, &request.labels, resource, log);
        }
        let engine = match &holder {
            Some(holder) => Docker::connect_with_unix(
                &holder.socket.to_string_lossy(),
                ENGINE_CALL_TIMEOUT.as_secs(),
                &self.docker.client_version(),
            )
            .map_err(|e| engine_error(e).context("connecting to the build holder"))?,
            None => self.docker.clone(),
        };
        let spec = BuildSpec {
            dir: &request.environment_dir,
            extra_files: &[],
            dockerfile: Some(&dockerfile),
            tag: None,
            labels: HashMap::new(),
            build_args,
            credentials,
            pull,
            builder,
            no_cache: !use_cache,
            build_id: build.as_ref().map(|b| b.id.as_str()),
        };
        let built = build_context(&engine, spec, log).await;
        if let Some(holder) = holder {
            holder.finish().await;
        }
        if let Some(resource) = &build_resource {
            self.creates.gone(&request.labels, resource, log);
        }
        let id = built?;
        Ok(Artifact {
            id,
            kind: "image-id".into(),
        })
    }
    /// This provider with every BuildKit build held by `executable hold-build` (see
    /// [`hold`]), so that cleanup and `sweep` can see a build end after its client is gone.
    pub fn with_build_holder(mut self, executable: PathBuf) -> Self {
        self.holder = Some(executable);
        self
    }
    /// Pushes the reference base ([`base::BASE_IMAGE`], which must exist: see
    /// [`Provider::prepare`]) to `target` under its tag, logging in with `credential`, and
    /// returns the reference by digest the registry gave it. `progress` gets the engine's
    /// push lines.
    pub async fn push_base(
        &self,
        target: &Repository,
        credential: Option<&RegistryCredential>,
        progress: &LogFn,
    ) -> Result<DigestReference> {
        let tag = base::BASE_IMAGE
            .rsplit_once(':')
            .map_or("latest", |(_, tag)| tag);
        let name = target.to_string();
        self.docker
            .tag_image(
                base::BASE_IMAGE,
                Some(
                    TagImageOptionsBuilder::default()
                        .repo(&name)
                        .tag(tag)
                        .build(),
                ),
            )
            .await
            .map_err(|e| {
                engine_error(e).context(format!("tagging {} as {name}:{tag}", base::BASE_IMAGE))
            })?;
        let mut stream = self.docker.push_image(
            &name,
            Some(PushImageOptionsBuilder::default().tag(tag).build()),
            credential.map(docker_credentials),
        );
        let mut pushed = None;
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| match e {
                bollard::errors::Error::DockerStreamError { error } => ProviderError::new(
                    ErrorKind::Api,
                    format!("pushing to registry {}: {error}", target.registry),
                ),
                other => engine_error(other).context(format!("pushing {name}:{tag}")),
            })?;
            if let Some(status) = info.status.as_deref() {
                if info.progress_detail.is_none() {
                    progress(status);
                }
                // The engine's last line: `<tag>: digest: sha256:<hex> size: <n>`.
                if let Some(digest) = status
                    .split_once("digest: ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .filter(|d| crate::registry::is_sha256_digest(d))
                {
                    pushed = Some(digest.to_owned());
                }
            }
        }
        let recorded = self
            .docker
            .inspect_image(&format!("{name}:{tag}"))
            .await
            .map_err(|e| engine_error(e).context("inspecting the pushed base"))?
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find_map(|d| d.strip_prefix(&format!("{name}@")).map(str::to_owned));
        match (pushed, recorded) {
            (Some(pushed), Some(recorded)) if pushed != recorded => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "the push reported digest {pushed} but the engine recorded {recorded} for {name}"
                ),
            )),
            (Some(digest), _) | (None, Some(digest)) => Ok(target.at(&digest)),
            (None, None) => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!("the push to {name} finished without a digest"),
            )),
        }
    }
}

/// Whether a container is a classic build step whose image the engine is committing: its
/// command is the builder's `/bin/sh -c` (no container the harness creates runs one), and
/// it is a no-op instruction not yet started or a `RUN` that exited 0.
pub(super) fn is_build_step_being_committed(
    container: &bollard::models::ContainerInspectResponse,
) -> bool {
    let cmd = container
        .config
        .as_ref()
        .and_then(|c| c.cmd.as_deref())
        .unwrap_or_default();
    let state = container.state.as_ref();
    let status = state.and_then(|s| s.status);
    let shell = cmd.len() >= 3 && cmd[0] == "/bin/sh" && cmd[1] == "-c";
    shell
        && match status {
            Some(ContainerStateStatusEnum::CREATED) => cmd[2].starts_with("#(nop)"),
            Some(ContainerStateStatusEnum::EXITED) => state.and_then(|s| s.exit_code) == Some(0),
            _ => false,
        }
}

/// Removes a container, except that a classic build step the engine is committing (its
/// client gone) is left to the engine, which removes it once its image is committed:
/// removing it would not stop the commit, and the image would land after the sweep.
pub(super) async fn remove_after_its_commit(docker: &Docker, id: &str) -> Result<Deleted> {
    let until = tokio::time::Instant::now() + BUILD_STEP_COMMIT_WAIT;
    let mut waited = false;
    loop {
        let container = match docker.inspect_container(id, None).await {
            Ok(c) => c,
            // The engine removes a committed step's container itself.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) if waited => {
                return Ok(Deleted::Settled(
                    "a build step the engine was committing; it removed it once committed"
                        .to_owned(),
                ));
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(Deleted::AlreadyGone),
            Err(e) => return Err(engine_error(e).context(format!("inspecting container {id}"))),
        };
        if !is_build_step_being_committed(&container) {
            return remove_container(docker, id).await;
        }
        waited = true;
        if tokio::time::Instant::now() >= until {
            remove_container(docker, id).await?;
            return Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "container {id} is a build step the engine was still committing after {}: removed, but its image may land later; sweep again",
                    crate::for_people(BUILD_STEP_COMMIT_WAIT)
                ),
            ));
        }
        tokio::time::sleep(EXIT_POLL).await;
    }
}

/// Which of the engine's builders a build goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    /// The classic builder: one image committed per instruction.
    Classic,
    /// The engine's BuildKit, through a BuildKit session bollard serves: no intermediate
    /// images, its own build cache.
    BuildKit,
}

impl Builder {
    /// The builder, for a person and for provenance.
    pub fn describe(self) -> &'static str {
        match self {
            Builder::Classic => "classic builder (bollard, no BuildKit session)",
            Builder::BuildKit => "BuildKit (the engine's, through a bollard BuildKit session)",
        }
    }
}

/// What to build: a folder with a Dockerfile, files added beside it, and build options.
pub(crate) struct BuildSpec<'a> {
    /// The build context folder; its `Dockerfile` is built.
    pub dir: &'a Path,
    /// Files added to the context under a name of their own.
    pub extra_files: &'a [(&'a str, &'a Path)],
    /// The Dockerfile's text to build instead of the folder's own (which stays in the
    /// context): sent as [`LABELLED_DOCKERFILE`].
    pub dockerfile: Option<&'a str>,
    /// A tag for the image, if it should have one.
    pub tag: Option<&'a str>,
    /// Labels of the image.
    pub labels: HashMap<String, String>,
    /// Build arguments.
    pub build_args: HashMap<String, String>,
    /// Registry credentials handed to the builder.
    pub credentials: Option<HashMap<String, DockerCredentials>>,
    /// Pull the base from its registry even when the engine has it: a base by digest is
    /// then fetched through the registry, with `credentials`.
    pub pull: bool,
    /// The builder.
    pub builder: Builder,
    /// Build every step again, whatever the engine's build cache holds.
    pub no_cache: bool,
    /// The id BuildKit registers the build under, which [`cancel_build`] takes; the
    /// classic builder registers none.
    pub build_id: Option<&'a str>,
}

/// Builds a [`BuildSpec`] with the engine, with no network inside the build, streaming
/// log lines to `log`, and returns the image id.
pub(crate) async fn build_context(
    docker: &Docker,
    spec: BuildSpec<'_>,
    log: &LogFn,
) -> Result<String> {
    let BuildSpec {
        dir,
        extra_files,
        dockerfile,
        tag,
        labels,
        build_args,
        credentials,
        pull,
        builder,
        no_cache,
        build_id,
    } = spec;
    if !dir.join("Dockerfile").is_file() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!("no Dockerfile in {}", dir.display()),
        ));
    }
    if dockerfile.is_some() && dir.join(LABELLED_DOCKERFILE).exists() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "{} exists: sandbox-matrix sends the labelled Dockerfile under that name",
                dir.join(LABELLED_DOCKERFILE).display()
            ),
        ));
    }
    let context = tar_context(dir, extra_files, dockerfile)?;
    let mut options = BuildImageOptionsBuilder::default()
        .dockerfile(if dockerfile.is_some() {
            LABELLED_DOCKERFILE
        } else {
            "Dockerfile"
        })
        .rm(true)
        .forcerm(true)
        .networkmode("none")
        .labels(&labels)
        .buildargs(&build_args);
    if let Some(tag) = tag {
        options = options.t(tag);
    }
    if pull {
        options = options.pull("1");
    }
    if no_cache {
        options = options.nocache(true);
    }
    if builder == Builder::BuildKit {
        options = options
            .version(bollard::query_parameters::BuilderVersion::BuilderBuildKit)
            .session(&format!("sandbox-matrix-{}", random_hex(12)));
    }
    let engine = match build_id {
        Some(id) if builder == Builder::BuildKit => with_build_id(docker, id),
        _ => docker.clone(),
    };
    let mut stream = engine.build_image(
        options.build(),
        credentials,
        Some(bollard::body_full(context.into())),
    );
    let mut image_id = None;
    let mut recent = RecentLines::new(log);
    // BuildKit reports each step (a vertex) many times as it goes: named once, when first
    // seen.
    let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| match e {
            bollard::errors::Error::DockerStreamError { error } => ProviderError::new(
                ErrorKind::Build,
                format!("{error}; last lines: {}", recent.tail()),
            ),
            other => engine_error(other).context("docker build"),
        })?;
        if let Some(line) = info.stream.as_deref() {
            recent.push(line);
        }
        if let Some(detail) = info.error_detail {
            return Err(ProviderError::new(
                ErrorKind::Build,
                format!(
                    "{}; last lines: {}",
                    detail.message.unwrap_or_default(),
                    recent.tail()
                ),
            ));
        }
        match info.aux {
            Some(bollard::models::BuildInfoAux::Default(image)) => {
                if let Some(id) = image.id {
                    image_id = Some(id);
                }
            }
            Some(bollard::models::BuildInfoAux::BuildKit(status)) => {
                for vertex in &status.vertexes {
                    if vertex.started.is_some() && named.insert(vertex.digest.clone()) {
                        let cached = if vertex.cached { " (cached)" } else { "" };
                        recent.push(&format!("{}{cached}", vertex.name));
                    }
                    if !vertex.error.is_empty() {
                        recent.push(&format!("{}: {}", vertex.name, vertex.error));
                    }
                }
                for entry in &status.logs {
                    recent.push(&String::from_utf8_lossy(&entry.msg));
                }
            }
            None => {}
        }
    }
    image_id.ok_or_else(|| {
        ProviderError::new(
            ErrorKind::Build,
            "the engine finished the build without an image id",
        )
    })
}

/// A build's log lines, each handed to the log as it comes, the last five kept for an
/// error.
struct RecentLines<'a> {
    log: &'a LogFn,
    recent: Vec<String>,
}

impl<'a> RecentLines<'a> {
    fn new(log: &'a LogFn) -> Self {
        Self {
            log,
            recent: Vec::new(),
        }
    }

    /// Logs each non-empty line of `text`.
    fn push(&mut self, text: &str) {
        for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
            (self.log)(line);
            self.recent.push(line.to_owned());
            if self.recent.len() > 5 {
                self.recent.remove(0);
            }
        }
    }

    /// The last lines, joined for an error.
    fn tail(&self) -> String {
        self.recent.join(" | ")
    }
}

/// Name under which a rewritten Dockerfile is added to the build context.
const LABELLED_DOCKERFILE: &str = ".sandbox-matrix.Dockerfile";

/// `dockerfile` with one `LABEL` instruction carrying every one of `labels` right after
/// each `FROM` instruction (continuation lines followed; the classic builder has no
/// heredocs), so that every image
/// the build commits, intermediate ones included, carries all of them.
pub(super) fn label_every_stage(
    dockerfile: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> String {
    let quote = |s: &str| {
        let mut q = String::from("\"");
        for c in s.chars() {
            match c {
                '"' | '\\' | '$' => {
                    q.push('\\');
                    q.push(c);
                }
                '\n' => q.push(' '),
                c => q.push(c),
            }
        }
        q.push('"');
        q
    };
    let label_line = format!(
        "LABEL {}",
        labels
            .iter()
            .map(|(k, v)| format!("{}={}", quote(k), quote(v)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // A `# escape=` parser directive changes the continuation character.
    let mut escape = '\\';
    for line in dockerfile.lines() {
        let t = line.trim();
        let Some(directive) = t.strip_prefix('#') else {
            break;
        };
        let directive = directive.trim();
        if let Some((key, value)) = directive.split_once('=') {
            if key.trim().eq_ignore_ascii_case("escape")
                && let Some(c) = value.trim().chars().next()
            {
                escape = c;
            }
        } else {
            break;
        }
    }
    let mut out = String::with_capacity(dockerfile.len() + 200);
    let mut in_from = false;
    let mut continued = false;
    for line in dockerfile.lines() {
        out.push_str(line);
        out.push('\n');
        let trimmed = line.trim();
        if !continued {
            if trimmed.starts_with('#') || trimmed.is_empty() {
                continue;
            }
            in_from = trimmed
                .split_whitespace()
                .next()
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM"));
        } else if trimmed.starts_with('#') || trimmed.is_empty() {
            // Comments and blank lines inside a continued instruction do not end it.
            continue;
        }
        continued = trimmed.ends_with(escape);
        if in_from && !continued {
            out.push_str(&label_line);
            out.push('\n');
            in_from = false;
        }
    }
    out
}

fn tar_context(
    dir: &Path,
    extra_files: &[(&str, &Path)],
    dockerfile: Option<&str>,
) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    // The engine's tar reader refuses GNU sparse entries, which large binaries become.
    builder.sparse(false);
    builder
        .append_dir_all(".", dir)
        .and_then(|()| {
            extra_files
                .iter()
                .try_for_each(|(name, path)| builder.append_path_with_name(path, name))
        })
        .and_then(|()| match dockerfile {
            Some(text) => {
                let mut header = tar::Header::new_gnu();
                header.set_size(text.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(0);
                header.set_cksum();
                builder.append_data(&mut header, LABELLED_DOCKERFILE, text.as_bytes())
            }
            None => Ok(()),
        })
        .and_then(|()| builder.into_inner())
        .map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot pack build context {}: {e}", dir.display()),
            )
        })
}

/// `docker` with every `/build` request naming `id` as its `buildid`, under which the
/// engine's BuildKit registers the build so that `/build/cancel` can stop it (bollard 0.21's
/// build options have no such field), and asking the engine to close the connection after
/// its answer, so that a holder sees the answer's end.
fn with_build_id(docker: &Docker, id: &str) -> Docker {
    let id = id.to_owned();
    docker.clone().with_request_modifier(move |mut request| {
        if let Some(uri) = naming_build_id(request.uri(), &id) {
            *request.uri_mut() = uri;
            request.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        request
    })
}

/// A BuildKit build as the ledger names it: its build id and the holder it went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BuildRecord {
    pub(super) id: String,
    pub(super) holder: Option<crate::process::Owner>,
}

impl BuildRecord {
    /// As a [`BUILD_RESOURCE`].
    pub(super) fn resource(&self) -> Resource {
        Resource {
            kind: BUILD_RESOURCE.into(),
            id: match &self.holder {
                Some(h) => format!("{}:{}:{}", self.id, h.pid, h.start_ticks.unwrap_or(0)),
                None => self.id.clone(),
            },
        }
    }

    /// Reads a [`BUILD_RESOURCE`]'s id; it comes from a ledger file: only the shape
    /// [`BuildRecord::resource`] gives is taken.
    pub(super) fn parse(text: &str) -> Result<Self> {
        let refused = || {
            ProviderError::new(
                ErrorKind::Config,
                format!("`{text}` is not a BuildKit build as this provider records one"),
            )
        };
        let mut parts = text.split(':');
        let id = parts.next().unwrap_or_default();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(refused());
        }
        let holder = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => None,
            (Some(pid), Some(ticks), None) => Some(crate::process::Owner {
                pid: pid.parse().map_err(|_| refused())?,
                start_ticks: Some(ticks.parse().map_err(|_| refused())?).filter(|t| *t != 0),
                boot_id: None,
            }),
            _ => return Err(refused()),
        };
        Ok(Self {
            id: id.to_owned(),
            holder,
        })
    }

    /// Cancels the build and waits for its holder to exit, which it does once the engine
    /// has ended the build.
    pub(super) async fn settle(&self, docker: &Docker) -> Result<Deleted> {
        let Some(holder) = &self.holder else {
            cancel_build(docker, &self.id).await?;
            return Ok(Deleted::Settled(
                "cancelled; it had no holder (the engine is reached over TLS, or the build predates holders), so its end cannot be seen: an image it was exporting may still land, for a later sweep".to_owned(),
            ));
        };
        if !holder.alive() {
            return Ok(Deleted::Settled(format!(
                "it had ended (its holder, process {}, had exited)",
                holder.pid
            )));
        }
        cancel_build(docker, &self.id).await?;
        let started = Instant::now();
        while holder.alive() {
            if started.elapsed() >= BUILD_END_WAIT {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    format!(
                        "cancelled, and still under way after {} s (its holder, process {}, waits for its end): sweep again once that process has exited",
                        BUILD_END_WAIT.as_secs(),
                        holder.pid
                    ),
                ));
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
        Ok(Deleted::Settled(format!(
            "cancelled; it ended {:.1} s later (its holder, process {}, exited)",
            started.elapsed().as_secs_f64(),
            holder.pid
        )))
    }
}

/// `uri` with `buildid=id` added to its query, when it is a `/build` request.
pub(super) fn naming_build_id(uri: &http::Uri, id: &str) -> Option<http::Uri> {
    if !uri.path().ends_with("/build") {
        return None;
    }
    let separator = if uri.query().is_some() { '&' } else { '?' };
    format!("{uri}{separator}buildid={id}").parse().ok()
}

/// Makes an engine call bollard 0.21 has no method for, or decodes into a newer API's shape
/// than the engine speaks, and returns the answer's body: bollard's ping request, re-aimed
/// at `method` and `path` (with its query) by a request modifier, so that it goes through
/// bollard's transport and negotiated API version like every other call.
async fn engine_call(docker: &Docker, method: http::Method, path: &str) -> Result<String> {
    let path = path.to_owned();
    let call = docker.clone().with_request_modifier(move |mut request| {
        let uri = request.uri().to_string();
        if let Some(prefix) = uri.strip_suffix("/_ping")
            && let Ok(uri) = format!("{prefix}{path}").parse()
        {
            *request.uri_mut() = uri;
            *request.method_mut() = method.clone();
        }
        request
    });
    call.ping().await.map_err(engine_error)
}

/// Asks the engine to cancel BuildKit build `id` (`POST /build/cancel?id=`). Its solve stops
/// where it can: a `RUN` is killed, an export under way goes on to its end. The engine
/// answers the same whether or not such a build runs.
async fn cancel_build(docker: &Docker, id: &str) -> Result<()> {
    engine_call(
        docker,
        http::Method::POST,
        &format!("/build/cancel?id={id}"),
    )
    .await
    .map(drop)
    .map_err(|e| e.context(format!("cancelling BuildKit build {id}")))
}
