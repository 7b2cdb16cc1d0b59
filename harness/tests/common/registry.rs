//! A local registry for tests: Debian's `docker-registry` (the distribution registry) on
//! 127.0.0.1 and a free port, with filesystem storage in a temp folder and htpasswd
//! authentication made by `htpasswd -Bbn`, or none (a public registry, as a Debian image's
//! is). Stopped by pid when dropped.
//!
//! htpasswd gives every user full rights, so a registry with a read-only puller
//! ([`LocalRegistry::start_with_puller`]) is reached through a gate on loopback: a proxy that
//! forwards every request, but answers a request of the puller's that is not a GET or a HEAD
//! with 403 `DENIED`, as a registry answers a pull-only token that tries to push.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry; dropping it kills it by pid and removes its folder.
pub struct LocalRegistry {
    /// `127.0.0.1:<port>`, as image references name it (the gate's, when there is one).
    pub host: String,
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    gate: Option<Gate>,
}

/// The read-only gate's thread, the sender that stops it, and what it forwarded.
struct Gate {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: Seen,
}

/// `<user> <method> <path> <status>` of every request the gate answered, `-` for no user.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

impl LocalRegistry {
    /// Starts a registry that lets `user` with `password` in, and waits until it answers.
    pub fn start(user: &str, password: &str) -> Self {
        Self::start_with(&[(user, password)], false)
    }

    /// Starts a registry that lets `pusher` push and pull and `puller` only pull (through a
    /// gate: see the module's comment), and waits until both answer. `host` is the gate's.
    pub fn start_with_puller(pusher: (&str, &str), puller: (&str, &str)) -> Self {
        let mut registry = Self::start_with(&[pusher, puller], true);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let gate_host = listener.local_addr().expect("a local address").to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let backend = registry.host.clone();
        let puller = puller.0.to_owned();
        let seen = Seen::default();
        let gate_seen = seen.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the gate");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
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
        registry.wait_ready();
        registry
    }

    /// Starts a registry anyone may pull from and push to, and waits until it answers.
    pub fn start_anonymous() -> Self {
        Self::start_with(&[], false)
    }

    /// Starts the registry with `logins` in its htpasswd (none: anyone may push);
    /// `relative_urls` makes its `Location` headers paths, so they work through a gate.
    fn start_with(logins: &[(&str, &str)], relative_urls: bool) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir = super::out_dir(&format!("registry-{port}"));
        let auth = if logins.is_empty() {
            String::new()
        } else {
            let mut lines = Vec::new();
            for (user, password) in logins {
                let htpasswd = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd runs (apt-get install apache2-utils)");
                assert!(htpasswd.status.success(), "htpasswd failed");
                lines.push(String::from_utf8_lossy(&htpasswd.stdout).trim().to_owned());
            }
            std::fs::write(dir.join("htpasswd"), lines.join("\n") + "\n")
                .expect("htpasswd written");
            format!(
                "auth:\n  htpasswd:\n    realm: sandbox-matrix-test\n    path: {}\n",
                dir.join("htpasswd").display()
            )
        };
        std::fs::create_dir_all(dir.join("data")).expect("storage folder");
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n  relativeurls: {relative_urls}\n{auth}",
            data = dir.join("data").display(),
        );
        std::fs::write(dir.join("config.yml"), config).expect("config written");
        let log = dir.join("registry.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("docker-registry runs (apt-get install docker-registry)");
        let registry = Self {
            host,
            child,
            dir,
            log,
            gate: None,
        };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.host).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the registry on {} did not answer within 20 s: {}",
            self.host,
            self.access_log()
        );
    }

    /// Everything the registry logged so far.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many access-log lines after byte `from` are a `method` of `path`'s manifest by
    /// `digest` answered 200, made by the Docker engine (its user agent) when `by_engine`,
    /// else by anyone else.
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
            .filter(|line| line.contains(&wanted) && line.contains("\"docker/") == by_engine)
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
        // Our own child, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client");
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

async fn gate(
    request: hyper::Request<hyper::body::Incoming>,
    client: reqwest::Client,
    backend: String,
    puller: String,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt as _;
    let reply = |status: u16, body: &str| {
        let mut response = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )));
        *response.status_mut() = hyper::StatusCode::from_u16(status).expect("a status");
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    };
    let method = request.method().clone();
    if basic_user(request.headers()).as_deref() == Some(puller.as_str())
        && method != hyper::Method::GET
        && method != hyper::Method::HEAD
    {
        return reply(
            403,
            r#"{"errors":[{"code":"DENIED","message":"requested access to the resource is denied: pull only"}]}"#,
        );
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return reply(
            400,
            r#"{"errors":[{"code":"UNKNOWN","message":"unreadable body"}]}"#,
        );
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
            return reply(
                502,
                &format!(r#"{{"errors":[{{"code":"UNKNOWN","message":"{e}"}}]}}"#),
            );
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
