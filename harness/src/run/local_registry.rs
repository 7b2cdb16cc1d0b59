//! A registry on loopback, for a run with none configured and for tests: Debian's
//! `docker-registry` (the distribution registry) on 127.0.0.1, on a port it binds itself
//! and logs (so that no other listener can take it between its choice and the bind), with
//! filesystem storage in a folder of its own and htpasswd logins made by `htpasswd -Bbn`,
//! or none (a public registry, as a Debian image's is). Stopped by pid when dropped; should
//! this process die without dropping it (kill -9), the registry is killed with it (its
//! parent-death signal, set on the thread that keeps it).
//!
//! htpasswd gives every user full rights, so a registry with a read-only puller
//! ([`LocalRegistry::start_with_puller`]) is reached through a gate on loopback: a proxy that
//! forwards every request, but answers a request of the puller's that is not a GET or a HEAD
//! with 403 `DENIED`, as a registry answers a pull-only token that tries to push.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;

/// The command that installs what a local registry needs, for messages.
pub const INSTALL: &str = "apt-get install docker-registry apache2-utils";

/// How long a starting registry may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A running registry; dropping it kills it by pid and removes its folder.
pub struct LocalRegistry {
    /// `127.0.0.1:<port>`, as image references name it (the gate's, when there is one).
    pub host: String,
    keeper: Option<Keeper>,
    dir: PathBuf,
    log: PathBuf,
    gate: Option<Gate>,
}

impl std::fmt::Debug for LocalRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegistry")
            .field("host", &self.host)
            .field("pid", &self.keeper.as_ref().map(|k| k.pid))
            .finish_non_exhaustive()
    }
}

/// The thread that started the registry's process and stops it: a parent-death signal
/// fires when the thread that forked exits, so that thread lives as long as the registry.
struct Keeper {
    pid: u32,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Keeper {
    /// Starts `command` on a thread of its own, killed should that thread (this process)
    /// die first.
    fn spawn(mut command: Command) -> Result<Self, String> {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                command.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let mut child: Child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return;
                }
            };
            let _ = started_tx.send(Ok(child.id()));
            // Until told to stop, or until the registry is dropped without a word.
            let _ = stopped.recv();
            let _ = child.kill();
            let _ = child.wait();
        });
        match started.recv() {
            Ok(Ok(pid)) => Ok(Self {
                pid,
                stop: Some(stop),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(format!("docker-registry does not run ({INSTALL}): {e}"))
            }
            Err(_) => Err("the thread starting docker-registry ended".to_owned()),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The read-only gate's thread, the sender that stops it, and what it forwarded.
struct Gate {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: Seen,
}

/// `<user> <method> <path> <status>` of every request the gate answered, `-` for no user.
type Seen = Arc<Mutex<Vec<String>>>;

/// What is missing on this machine for a local registry, with the command that installs
/// it; `None` when `docker-registry` and `htpasswd` are both on the `PATH`.
pub fn missing_tools() -> Option<String> {
    let missing: Vec<&str> = ["docker-registry", "htpasswd"]
        .into_iter()
        .filter(|tool| !on_path(tool))
        .collect();
    (!missing.is_empty()).then(|| format!("{} not found ({INSTALL})", missing.join(" and ")))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

impl LocalRegistry {
    /// Starts, in a new folder under `parent`, a registry that lets `user` with `password`
    /// in, and waits until it answers.
    pub fn start(parent: &Path, user: &str, password: &str) -> Result<Self, String> {
        Self::start_with(parent, &[(user, password)], false)
    }

    /// Starts a registry that lets `pusher` push and pull and `puller` only pull (through a
    /// gate: see the module's comment), and waits until both answer. `host` is the gate's.
    pub fn start_with_puller(
        parent: &Path,
        pusher: (&str, &str),
        puller: (&str, &str),
    ) -> Result<Self, String> {
        let mut registry = Self::start_with(parent, &[pusher, puller], true)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on loopback for the registry's gate: {e}"))?;
        let gate_host = listener
            .local_addr()
            .map_err(|e| format!("the gate's address: {e}"))?
            .to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let backend = registry.host.clone();
        let puller = puller.0.to_owned();
        let seen = Seen::default();
        let gate_seen = seen.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for the registry's gate: {e}"))?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                tokio::select! {
                    () = serve_gate(listener, backend, puller, gate_seen) => {}
                    _ = stopped => {}
                }
            });
        });
        registry.gate = Some(Gate {
            stop: Some(stop),
            thread: Some(thread),
            seen,
        });
        registry.host = gate_host;
        registry.wait_ready()?;
        Ok(registry)
    }

    /// Starts a registry anyone may pull from and push to, and waits until it answers.
    pub fn start_anonymous(parent: &Path) -> Result<Self, String> {
        Self::start_with(parent, &[], false)
    }

    /// Starts the registry with `logins` in its htpasswd (none: anyone may push);
    /// `relative_urls` makes its `Location` headers paths, so they work through a gate.
    fn start_with(
        parent: &Path,
        logins: &[(&str, &str)],
        relative_urls: bool,
    ) -> Result<Self, String> {
        if let Some(missing) = missing_tools() {
            return Err(format!("a local registry cannot start: {missing}"));
        }
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = parent.join(format!("registry-{}-{n}", std::process::id()));
        let written = |path: &Path, text: &str| {
            std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir.join("data"))
            .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let auth = if logins.is_empty() {
            String::new()
        } else {
            let mut lines = Vec::new();
            for (user, password) in logins {
                let htpasswd = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .map_err(|e| format!("htpasswd does not run ({INSTALL}): {e}"))?;
                if !htpasswd.status.success() {
                    return Err(format!(
                        "htpasswd failed for user {user}: {}",
                        String::from_utf8_lossy(&htpasswd.stderr).trim()
                    ));
                }
                lines.push(String::from_utf8_lossy(&htpasswd.stdout).trim().to_owned());
            }
            written(&dir.join("htpasswd"), &(lines.join("\n") + "\n"))?;
            format!(
                "auth:\n  htpasswd:\n    realm: sandbox-matrix\n    path: {}\n",
                dir.join("htpasswd").display()
            )
        };
        // Port 0: the registry binds a free port and logs it (`listening on …`). A port
        // chosen here and bound by the registry later could be taken in between by another
        // listener, which would then answer for it.
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  relativeurls: {relative_urls}\n{auth}",
            data = dir.join("data").display(),
        );
        written(&dir.join("config.yml"), &config)?;
        let log = dir.join("registry.log");
        let out = std::fs::File::create(&log)
            .and_then(|f| f.try_clone().map(|g| (f, g)))
            .map_err(|e| format!("cannot write {}: {e}", log.display()))?;
        let mut command = Command::new("docker-registry");
        command
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(out.0)
            .stderr(out.1);
        let keeper = Keeper::spawn(command)?;
        let mut registry = Self {
            host: String::new(),
            keeper: Some(keeper),
            dir,
            log,
            gate: None,
        };
        registry.host = registry.listening_on()?;
        registry.wait_ready()?;
        Ok(registry)
    }

    /// The address the registry logged it listens on, once it has; an error when it logs a
    /// fatal error first or nothing within [`READY_WITHIN`], with its log's last lines.
    fn listening_on(&self) -> Result<String, String> {
        const LISTENING: &str = "msg=\"listening on ";
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let log = self.access_log();
            if let Some(address) = log
                .lines()
                .find_map(|line| line.split_once(LISTENING))
                .and_then(|(_, rest)| rest.split('"').next())
            {
                return Ok(address.to_owned());
            }
            let failed = log
                .lines()
                .any(|line| line.contains("level=fatal") || line.contains("level=panic"));
            if failed || Instant::now() >= deadline {
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let what = if failed {
                    "failed before listening".to_owned()
                } else {
                    format!("did not listen within {} s", READY_WITHIN.as_secs())
                };
                return Err(format!(
                    "the registry in {} {what}; its log ends: {}",
                    self.dir.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.host).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = self.access_log();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(format!(
            "the registry on {} did not answer within {} s; its log ends: {}",
            self.host,
            READY_WITHIN.as_secs(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    }

    /// Everything the registry logged so far.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many access-log lines after byte `from` are a `method` of `path`'s manifest by
    /// `digest` answered 200, made by the Docker engine when `by_engine` (its user agent:
    /// `docker/…` from the classic builder and pulls, `containerd/…` from BuildKit's
    /// resolver), else by anyone else.
    pub fn manifest_requests(
        &self,
        from: usize,
        method: &str,
        path: &str,
        digest: &str,
        by_engine: bool,
    ) -> usize {
        let wanted = format!("\"{method} /v2/{path}/manifests/{digest} HTTP/1.1\" 200");
        self.access_log()
            .get(from..)
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                let engine = line.contains("\"docker/") || line.contains("\"containerd/");
                line.contains(&wanted) && engine == by_engine
            })
            .count()
    }

    /// `<user> <method> <path> <status>` of every request the read-only gate answered so
    /// far (`-` for a request with no Basic login); empty without a gate.
    pub fn gate_log(&self) -> Vec<String> {
        self.gate
            .as_ref()
            .map(|g| g.seen.lock().expect("gate log lock").clone())
            .unwrap_or_default()
    }

    /// The length of the log so far, to count from.
    pub fn log_len(&self) -> usize {
        self.access_log().len()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        if let Some(gate) = &mut self.gate {
            if let Some(stop) = gate.stop.take() {
                let _ = stop.send(());
            }
            if let Some(thread) = gate.thread.take() {
                let _ = thread.join();
            }
        }
        // Our own child, by its pid, through the thread that started it.
        drop(self.keeper.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Forwards every request on `listener` to the registry at `backend`, except a request of
/// `puller`'s that is not a GET or HEAD: that one is answered 403 `DENIED`.
async fn serve_gate(
    listener: tokio::net::TcpListener,
    backend: String,
    puller: String,
    seen: Seen,
) {
    let Ok(client) = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    else {
        return;
    };
    while let Ok((stream, _)) = listener.accept().await {
        let (client, backend, puller) = (client.clone(), backend.clone(), puller.clone());
        let seen = seen.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                let line = format!(
                    "{} {} {}",
                    basic_user(request.headers()).unwrap_or_else(|| "-".into()),
                    request.method(),
                    request.uri().path()
                );
                let (client, backend, puller, seen) = (
                    client.clone(),
                    backend.clone(),
                    puller.clone(),
                    seen.clone(),
                );
                async move {
                    let response = gate(request, client, backend, puller).await;
                    if let Ok(r) = &response {
                        seen.lock()
                            .expect("gate log lock")
                            .push(format!("{line} {}", r.status().as_u16()));
                    }
                    response
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The user of a request's Basic `Authorization` header.
fn basic_user(headers: &hyper::HeaderMap) -> Option<String> {
    use base64::Engine as _;
    let value = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':').map(|(user, _)| user.to_owned())
}

type GateResponse = hyper::Response<http_body_util::Full<bytes::Bytes>>;

fn reply(status: hyper::StatusCode, body: String) -> GateResponse {
    let mut response = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn registry_error(status: hyper::StatusCode, code: &str, message: &str) -> GateResponse {
    let body = serde_json::json!({"errors": [{"code": code, "message": message}]});
    reply(status, body.to_string())
}

async fn gate(
    request: hyper::Request<hyper::body::Incoming>,
    client: reqwest::Client,
    backend: String,
    puller: String,
) -> Result<GateResponse, std::convert::Infallible> {
    let method = request.method().clone();
    if basic_user(request.headers()).as_deref() == Some(puller.as_str())
        && method != hyper::Method::GET
        && method != hyper::Method::HEAD
    {
        return Ok(registry_error(
            hyper::StatusCode::FORBIDDEN,
            "DENIED",
            "requested access to the resource is denied: pull only",
        ));
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Ok(registry_error(
            hyper::StatusCode::BAD_REQUEST,
            "UNKNOWN",
            "unreadable body",
        ));
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forward = client.request(method, format!("http://{backend}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let answer = match forward.body(body).send().await {
        Ok(answer) => answer,
        Err(e) => {
            return Ok(registry_error(
                hyper::StatusCode::BAD_GATEWAY,
                "UNKNOWN",
                &e.to_string(),
            ));
        }
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let body = answer.bytes().await.unwrap_or_default();
    let mut response = hyper::Response::new(http_body_util::Full::new(body));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if name != hyper::header::TRANSFER_ENCODING && name != hyper::header::CONNECTION {
            response.headers_mut().append(name, value.clone());
        }
    }
    Ok(response)
}
