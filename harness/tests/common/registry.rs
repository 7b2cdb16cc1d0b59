//! A local registry for tests: Debian's `docker-registry` (the distribution registry) on
//! 127.0.0.1 and a free port, with filesystem storage in a temp folder and htpasswd
//! authentication made by `htpasswd -Bbn`, or none (a public registry, as a Debian image's
//! is). Stopped by pid when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry; dropping it kills it by pid and removes its folder.
pub struct LocalRegistry {
    /// `127.0.0.1:<port>`, as image references name it.
    pub host: String,
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl LocalRegistry {
    /// Starts a registry that lets `user` with `password` in, and waits until it answers.
    pub fn start(user: &str, password: &str) -> Self {
        Self::start_with(Some((user, password)))
    }

    /// Starts a registry anyone may pull from and push to, and waits until it answers.
    pub fn start_anonymous() -> Self {
        Self::start_with(None)
    }

    fn start_with(login: Option<(&str, &str)>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir = super::out_dir(&format!("registry-{port}"));
        let auth = match login {
            None => String::new(),
            Some((user, password)) => {
                let htpasswd = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd runs (apt-get install apache2-utils)");
                assert!(htpasswd.status.success(), "htpasswd failed");
                std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).expect("htpasswd written");
                format!(
                    "auth:\n  htpasswd:\n    realm: sandbox-matrix-test\n    path: {}\n",
                    dir.join("htpasswd").display()
                )
            }
        };
        std::fs::create_dir_all(dir.join("data")).expect("storage folder");
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n{auth}",
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

    /// The length of the log so far, to count from.
    pub fn log_len(&self) -> usize {
        self.access_log().len()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        // Our own child, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
