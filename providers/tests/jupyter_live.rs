//! Runs the Jupyter client against a real Jupyter Server that each test
//! starts on 127.0.0.1 (a free port, a random token, a temporary root) and
//! stops by its pid when it ends.
//!
//! Needs `jupyter server` and the `python3` kernel
//! (`python3 -m pip install jupyter_server ipykernel`). Without them the tests
//! are reported ignored with the reason, except with CI=true, where they fail.

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_providers::ErrorKind;
use sandbox_providers::jupyter::JupyterServer;

const INSTALL_HINT: &str = "python3 -m pip install jupyter_server ipykernel";
const SERVER_READY: Duration = Duration::from_secs(60);
const KERNEL_ANSWER: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A Jupyter Server child process, stopped and cleaned up on drop.
struct LiveServer {
    child: Child,
    root: PathBuf,
    base_url: String,
    token: String,
}

impl LiveServer {
    /// Starts a server; `main` has checked that Jupyter is installed.
    fn start() -> Self {
        let root = std::env::temp_dir().join(format!(
            "jupyter-live-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        for dir in ["notebooks", "config", "runtime", "data", "ipython"] {
            fs::create_dir_all(root.join(dir)).expect("create the server's temporary directories");
        }
        let port = free_port();
        let token = format!("{:032x}", rand::random::<u128>());
        let log = File::create(root.join("server.log")).expect("create the server log");
        let child = Command::new("jupyter")
            .args([
                "server",
                "--ServerApp.ip=127.0.0.1",
                &format!("--ServerApp.port={port}"),
                "--ServerApp.port_retries=0",
                "--ServerApp.open_browser=False",
                // CI and this host run as root, which the server refuses by default.
                "--ServerApp.allow_root=True",
                "--ServerApp.log_level=DEBUG",
                &format!("--ServerApp.root_dir={}", root.join("notebooks").display()),
            ])
            .env("JUPYTER_TOKEN", &token)
            .env("JUPYTER_CONFIG_DIR", root.join("config"))
            .env("JUPYTER_RUNTIME_DIR", root.join("runtime"))
            .env("JUPYTER_DATA_DIR", root.join("data"))
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .env("IPYTHONDIR", root.join("ipython"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn jupyter server");
        Self {
            child,
            root,
            base_url: format!("http://127.0.0.1:{port}"),
            token,
        }
    }

    /// The server's log so far, for failure messages.
    fn log(&self) -> String {
        fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }

    /// Waits for the server, showing its log if it exits or does not come up.
    async fn client(&mut self) -> JupyterServer {
        let server = JupyterServer::new(&self.base_url, &self.token);
        let started = Instant::now();
        let exited = async {
            loop {
                if let Ok(Some(status)) = self.child.try_wait() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            ready = server.wait_ready(SERVER_READY) => match ready {
                Ok(resolution) => {
                    eprintln!("server ready after {:?} (resolution {resolution:?})", started.elapsed());
                }
                Err(e) => panic!("server not ready: {e}\n--- server log ---\n{}", self.log()),
            },
            status = exited => panic!("jupyter server exited ({status})\n--- server log ---\n{}", self.log()),
        }
        server
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        let stopping = Instant::now();
        let pid = self.child.id().to_string();
        // SIGTERM lets the server shut its kernels down; SIGKILL if it lingers.
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let until = Instant::now() + STOP_GRACE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            eprintln!("jupyter server {pid} ignored SIGTERM; killing it");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        eprintln!("jupyter server {pid} stopped in {:?}", stopping.elapsed());
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Whether `jupyter` has the `server` subcommand and knows the python3 kernel
/// (cheap checks: `jupyter server --version` alone takes seconds).
fn jupyter_available() -> Result<(), String> {
    let jupyter = |args: &[&str]| {
        Command::new("jupyter")
            .args(args)
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("`jupyter` is not on PATH ({e})"))
    };
    let help = jupyter(&["--help"])?;
    let subcommands = String::from_utf8_lossy(&help.stdout);
    let subcommands = subcommands
        .split("Available subcommands:")
        .nth(1)
        .unwrap_or("");
    if !subcommands.split_whitespace().any(|name| name == "server") {
        return Err("`jupyter server` is not installed".to_owned());
    }
    let kernels = jupyter(&["kernelspec", "list", "--json"])?;
    if !kernels.status.success() {
        return Err("`jupyter kernelspec list` failed".to_owned());
    }
    if !String::from_utf8_lossy(&kernels.stdout).contains("\"python3\"") {
        return Err("the python3 kernel (ipykernel) is not installed".to_owned());
    }
    Ok(())
}

/// A port that was free a moment ago (the server is told not to try others).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener
        .local_addr()
        .expect("read the bound address")
        .port()
}

async fn jupyter_live_kernel_runs_code_and_forgets_state_on_restart() {
    let mut live = LiveServer::start();
    let server = live.client().await;

    let started = Instant::now();
    let kernel = server
        .start_kernel("python3")
        .await
        .expect("start a kernel");
    let posted = started.elapsed();
    let mut socket = server
        .connect(&kernel)
        .await
        .expect("connect to the kernel");
    let connected = started.elapsed();
    let first = socket.execute("1+1", KERNEL_ANSWER).await.expect("run 1+1");
    eprintln!(
        "kernel start -> first answer: {:?} (POST answered at {posted:?}, socket open at {connected:?})",
        started.elapsed()
    );
    assert_eq!(first.result.as_deref(), Some("2"), "{first:?}");
    assert_eq!(first.error, None);
    assert_eq!(first.stdout, "");

    let hi = socket
        .execute("print('hi')", KERNEL_ANSWER)
        .await
        .expect("run print");
    assert_eq!(hi.stdout, "hi\n", "{hi:?}");
    assert_eq!(hi.result, None);

    let err = socket
        .execute("import sys; print('oops', file=sys.stderr)", KERNEL_ANSWER)
        .await
        .unwrap();
    assert_eq!(err.stderr, "oops\n", "{err:?}");

    let shown = socket
        .execute(
            "from IPython.display import display; display(40); display(41)",
            KERNEL_ANSWER,
        )
        .await
        .unwrap();
    assert_eq!(
        shown.result.as_deref(),
        Some("41"),
        "the last display_data wins: {shown:?}"
    );

    let zero = socket.execute("1/0", KERNEL_ANSWER).await.expect("run 1/0");
    let error = zero.error.expect("1/0 reports an error");
    assert!(error.starts_with("ZeroDivisionError"), "{error}");

    let set = socket.execute("x = 41", KERNEL_ANSWER).await.unwrap();
    assert_eq!(set, Default::default());
    assert_eq!(
        socket
            .execute("x + 1", KERNEL_ANSWER)
            .await
            .unwrap()
            .result
            .as_deref(),
        Some("42")
    );

    let restarted = Instant::now();
    server
        .restart_kernel(&kernel)
        .await
        .expect("restart the kernel");
    let restart_answered = restarted.elapsed();
    socket.close().await;
    let mut socket = server
        .connect_ready(&kernel, KERNEL_ANSWER)
        .await
        .expect("the kernel answers on a new socket after restart");
    let after = socket
        .execute("x", KERNEL_ANSWER)
        .await
        .expect("run x after restart");
    eprintln!(
        "kernel restart -> first answer: {:?} (POST answered at {restart_answered:?})",
        restarted.elapsed()
    );
    let error = after.error.expect("x is gone after a restart");
    assert!(error.starts_with("NameError"), "{error}");

    socket.close().await;
    server
        .shutdown_kernel(&kernel)
        .await
        .expect("shut the kernel down");
    let gone = server
        .shutdown_kernel(&kernel)
        .await
        .expect_err("the kernel is already gone");
    assert_eq!(gone.kind, ErrorKind::Api);
    assert!(!gone.retryable);
    assert!(gone.to_string().contains("404"), "{gone}");
}

async fn jupyter_live_errors_name_the_status_and_hide_the_token() {
    let mut live = LiveServer::start();
    let server = live.client().await;

    let wrong = JupyterServer::new(&live.base_url, "not-the-token");
    let denied = wrong
        .start_kernel("python3")
        .await
        .expect_err("a wrong token is refused");
    let text = denied.to_string();
    eprintln!("wrong token: {text}");
    assert_eq!(denied.kind, ErrorKind::Api, "{text}");
    assert!(!denied.retryable, "{text}");
    assert!(text.contains("403"), "{text}");
    assert!(text.contains("POST /api/kernels"), "{text}");
    assert!(
        !text.contains("not-the-token") && !text.contains(&live.token),
        "{text}"
    );

    let missing = server
        .connect("00000000-0000-4000-8000-000000000000")
        .await
        .expect_err("no such kernel");
    assert_eq!(missing.kind, ErrorKind::Api, "{missing}");
    assert!(missing.to_string().contains("404"), "{missing}");

    let kernel = server
        .start_kernel("python3")
        .await
        .expect("start a kernel");
    let refused = wrong
        .connect(&kernel)
        .await
        .expect_err("a wrong token cannot open the socket");
    assert_eq!(refused.kind, ErrorKind::Api, "{refused}");
    assert!(refused.to_string().contains("403"), "{refused}");
    server
        .shutdown_kernel(&kernel)
        .await
        .expect("shut the kernel down");

    // jupyter_server 2.21 answers 500 here, so only the kind is certain.
    let unknown = server
        .start_kernel("no-such-kernel")
        .await
        .expect_err("unknown kernel name");
    assert_eq!(unknown.kind, ErrorKind::Api, "{unknown}");
}

/// A kernel that dies while it runs a request fails that request as soon as the server
/// says so (it restarts the kernel), not when the caller's deadline runs out; the
/// restarted kernel then answers on a fresh socket.
async fn jupyter_live_a_kernel_that_dies_fails_the_request_at_once() {
    let mut live = LiveServer::start();
    let server = live.client().await;
    let kernel = server
        .start_kernel("python3")
        .await
        .expect("start a kernel");
    let mut socket = server.connect(&kernel).await.expect("connect");
    socket.execute("1+1", KERNEL_ANSWER).await.expect("run 1+1");

    let started = Instant::now();
    let died = socket
        .execute("import os; os._exit(3)", KERNEL_ANSWER)
        .await
        .expect_err("a kernel that exits never answers");
    let took = started.elapsed();
    eprintln!("kernel death noticed after {took:?}: {died}");
    assert_eq!(died.kind, ErrorKind::Transport, "{died}");
    assert!(died.to_string().contains("the kernel died"), "{died}");
    assert!(
        took < KERNEL_ANSWER / 2,
        "the death was noticed only after {took:?}, near the deadline"
    );
    assert!(
        socket.is_lost(),
        "a socket that saw its kernel die must say the next request belongs on a new one"
    );

    socket.close().await;
    // The server last saw this kernel busy, so it skips its own check of a new socket's
    // channels: `connect_ready` makes it and connects again if iopub stays silent.
    let mut socket = match server.connect_ready(&kernel, KERNEL_ANSWER).await {
        Ok(socket) => socket,
        Err(e) => panic!(
            "no socket to the restarted kernel: {e}\n--- server log ---\n{}",
            live.log()
        ),
    };
    let after = match socket.execute("1+1", KERNEL_ANSWER).await {
        Ok(after) => after,
        Err(e) => panic!(
            "1+1 on the restarted kernel: {e}\n--- server log ---\n{}",
            live.log()
        ),
    };
    assert_eq!(after.result.as_deref(), Some("2"), "{after:?}");
    let log = live.log();
    if log.contains("not nudging busy kernel") {
        eprintln!(
            "the server skipped its nudge of a new socket; the kernel answered on socket {} of this test",
            log.matches("Opening websocket").count()
        );
    }
    socket.close().await;
    server.shutdown_kernel(&kernel).await.expect("shut down");
}

fn main() {
    use libtest_mimic::{Arguments, Completion, Failed, Trial};
    use std::future::Future;
    use std::pin::Pin;
    type Test = fn() -> Pin<Box<dyn Future<Output = ()>>>;
    let tests: [(&str, Test); 3] = [
        (
            "jupyter_live_kernel_runs_code_and_forgets_state_on_restart",
            || Box::pin(jupyter_live_kernel_runs_code_and_forgets_state_on_restart()),
        ),
        (
            "jupyter_live_errors_name_the_status_and_hide_the_token",
            || Box::pin(jupyter_live_errors_name_the_status_and_hide_the_token()),
        ),
        (
            "jupyter_live_a_kernel_that_dies_fails_the_request_at_once",
            || Box::pin(jupyter_live_a_kernel_that_dies_fails_the_request_at_once()),
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            Trial::ignorable_test(name, move || {
                if let Err(why) = jupyter_available() {
                    if std::env::var("CI").is_ok_and(|v| v == "true") {
                        return Err(Failed::from(format!(
                            "{why}; CI needs it: install it with `{INSTALL_HINT}`"
                        )));
                    }
                    return Ok(Completion::ignored_with(format!(
                        "{why} (install it with `{INSTALL_HINT}`)"
                    )));
                }
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(test());
                Ok(Completion::Completed)
            })
        })
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}
