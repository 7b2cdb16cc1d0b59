//! The build holder: a process of its own between a BuildKit build and the engine, so that
//! the build's end can be seen after its client is gone.
//!
//! The engine's BuildKit goes on with a build whose client has gone (killed, or stopped by
//! a signal) and commits its image seconds later; `/build/cancel` cannot stop an export
//! under way, and nothing the engine offers says when such a build has ended. The holder
//! forwards the build's connections to the engine; when the client side of the `/build`
//! request closes before its answer, it keeps the engine side open and reads the answer to
//! its end, which comes when the build has ended and its image, if any, is committed. It
//! then exits. Cleanup and `sweep` cancel the build and wait for the holder's exit.
//!
//! It runs in a process group of its own, so that Ctrl-C in a terminal, which signals the
//! run's group, does not end it with the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::process::Owner;
use crate::{ErrorKind, ProviderError, Result};

/// The hidden command of the harness executable that runs a holder.
pub const HOLD_COMMAND: &str = "hold-build";
/// What the holder prints once it listens.
const READY: &str = "ready";
/// How long a holder lives at most: longer than any build's budget.
const MAX_LIFE: Duration = Duration::from_secs(6 * 60 * 60);
/// How long a build's client waits for its holder to start listening.
const START_WAIT: Duration = Duration::from_secs(10);
/// How long a build's client waits for its holder to exit once the build's answer ended.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Where the engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineAddress {
    /// A Unix socket.
    Unix(PathBuf),
    /// Plain TCP, `host:port`.
    Tcp(String),
}

impl EngineAddress {
    /// The engine bollard's local defaults reach: `DOCKER_HOST` (unix:// or plain tcp://),
    /// else the default socket. `None` for an engine reached over TLS, which the holder
    /// does not speak.
    pub fn from_env() -> Option<Self> {
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        Self::parse(&host, std::env::var_os("DOCKER_TLS_VERIFY").is_some())
    }

    fn parse(host: &str, tls: bool) -> Option<Self> {
        if host.is_empty() {
            return Some(Self::Unix("/var/run/docker.sock".into()));
        }
        if let Some(path) = host.strip_prefix("unix://") {
            return Some(Self::Unix(path.into()));
        }
        let address = host.strip_prefix("tcp://")?;
        (!tls).then(|| Self::Tcp(address.trim_end_matches('/').to_owned()))
    }

    /// As the holder's `--engine` takes it.
    pub fn to_arg(&self) -> String {
        match self {
            Self::Unix(path) => format!("unix://{}", path.display()),
            Self::Tcp(address) => format!("tcp://{address}"),
        }
    }

    /// Reads `--engine`'s value.
    pub fn from_arg(text: &str) -> std::result::Result<Self, String> {
        Self::parse(text, false)
            .filter(|_| !text.is_empty())
            .ok_or_else(|| format!("`{text}` is not unix://PATH or tcp://HOST:PORT"))
    }

    async fn connect(&self) -> std::io::Result<Box<dyn Duplex>> {
        Ok(match self {
            Self::Unix(path) => Box::new(UnixStream::connect(path).await?),
            Self::Tcp(address) => Box::new(tokio::net::TcpStream::connect(address).await?),
        })
    }
}

trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// The holder's own work: listens on `listen`, forwards each connection to `engine`, and
/// returns once the engine has ended its answer to a `/build` request (or after
/// [`MAX_LIFE`]). Prints [`READY`] on standard output once it listens.
pub async fn serve(listen: &Path, engine: &EngineAddress) -> std::io::Result<()> {
    let listener = UnixListener::bind(listen)?;
    println!("{READY}");
    let (done, mut ended) = tokio::sync::mpsc::channel::<()>(1);
    let deadline = tokio::time::sleep(MAX_LIFE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (client, _) = accepted?;
                let engine = engine.clone();
                let done = done.clone();
                tokio::spawn(async move {
                    if forward(client, &engine).await {
                        let _ = done.send(()).await;
                    }
                });
            }
            _ = ended.recv() => break,
            _ = &mut deadline => break,
        }
    }
    let _ = std::fs::remove_file(listen);
    if let Some(dir) = listen.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    Ok(())
}

/// Forwards one connection; returns true when it carried a `/build` request whose answer
/// the engine ended. The client closing its side is passed on to the engine, except on
/// that request: there the engine side stays open and is read to its end.
async fn forward(client: UnixStream, engine: &EngineAddress) -> bool {
    let Ok(upstream) = engine.connect().await else {
        return false;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_engine, mut to_engine) = tokio::io::split(upstream);
    // The request line says whether this is the build.
    let mut head = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 16 * 1024 {
        match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let build = is_build_request(&head);
    if to_engine.write_all(&head).await.is_err() {
        return false;
    }
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_engine.write_all(&buf[..n]).await.is_err() {
                        return None;
                    }
                }
            }
        }
        // The client is gone or done sending: the engine hears of it, unless it is the
        // build, which it would then stop following (and go on with, unseen): that side
        // is held open until the engine has ended its answer.
        if build {
            Some(to_engine)
        } else {
            let _ = to_engine.shutdown().await;
            None
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut client_open = true;
        loop {
            match from_engine.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if client_open && to_client.write_all(&buf[..n]).await.is_err() {
                        client_open = false;
                    }
                }
            }
        }
        if client_open {
            let _ = to_client.shutdown().await;
        }
    };
    let (held, ()) = tokio::join!(up, down);
    drop(held);
    build
}

/// Whether `head` starts a `POST` to the engine's `/build`, with or without an API
/// version prefix (`/v1.41/build`).
fn is_build_request(head: &[u8]) -> bool {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let Some(("POST", rest)) = line.split_once(' ') else {
        return false;
    };
    let target = rest.split(' ').next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let unversioned = match path.strip_prefix("/v").and_then(|p| p.split_once('/')) {
        Some((version, rest)) if version.chars().all(|c| c.is_ascii_digit() || c == '.') => rest,
        _ => path.strip_prefix('/').unwrap_or(path),
    };
    unversioned == "build"
}

/// A holder started for one build.
pub(crate) struct Holder {
    child: tokio::process::Child,
    /// The socket the build's client connects to.
    pub socket: PathBuf,
    /// The holder process, as the ledger names it.
    pub owner: Owner,
}

impl Holder {
    /// Starts `executable hold-build` for `engine` and waits until it listens.
    pub async fn start(executable: &Path, engine: &EngineAddress) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("sandbox-matrix-hold-{}", super::random_hex(8)));
        std::fs::create_dir(&dir).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot create {} for the build holder: {e}", dir.display()),
            )
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        }
        let socket = dir.join("engine.sock");
        let mut command = tokio::process::Command::new(executable);
        command
            .arg(HOLD_COMMAND)
            .arg("--engine")
            .arg(engine.to_arg())
            .arg("--listen")
            .arg(&socket)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        let failed = |why: String| {
            let _ = std::fs::remove_dir_all(&dir);
            ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the build holder ({} {HOLD_COMMAND}) {why}",
                    executable.display()
                ),
            )
        };
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot start: {e}")))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        let read = tokio::time::timeout(
            START_WAIT,
            tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line),
        )
        .await;
        if !matches!(read, Ok(Ok(_))) || line.trim() != READY {
            let _ = child.kill().await;
            return Err(failed(format!(
                "did not start listening within {} s",
                START_WAIT.as_secs()
            )));
        }
        let owner = Owner::of(child.id().unwrap_or_default());
        Ok(Self {
            child,
            socket,
            owner,
        })
    }

    /// After the build's answer ended: waits for the holder to exit, which it does once
    /// the engine ends the answer; stops it when it has not (the build never reached it).
    pub async fn finish(mut self) {
        if tokio::time::timeout(EXIT_WAIT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        if let Some(dir) = self.socket.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_address_follows_docker_host() {
        assert_eq!(
            EngineAddress::parse("", false),
            Some(EngineAddress::Unix("/var/run/docker.sock".into()))
        );
        assert_eq!(
            EngineAddress::parse("unix:///run/user/1000/docker.sock", false),
            Some(EngineAddress::Unix("/run/user/1000/docker.sock".into()))
        );
        assert_eq!(
            EngineAddress::parse("tcp://127.0.0.1:2375", false),
            Some(EngineAddress::Tcp("127.0.0.1:2375".into()))
        );
        assert_eq!(EngineAddress::parse("tcp://127.0.0.1:2376", true), None);
        assert_eq!(EngineAddress::parse("ssh://host", false), None);
        let unix = EngineAddress::Unix("/x.sock".into());
        assert_eq!(EngineAddress::from_arg(&unix.to_arg()), Ok(unix));
        assert!(EngineAddress::from_arg("").is_err());
    }

    #[test]
    fn only_a_post_to_build_is_the_build() {
        assert!(is_build_request(
            b"POST /v1.41/build?dockerfile=D&buildid=x HTTP/1.1\r\n"
        ));
        assert!(is_build_request(b"POST /build HTTP/1.1\r\n"));
        for other in [
            &b"POST /session HTTP/1.1\r\n"[..],
            b"POST /v1.41/build/cancel?id=x HTTP/1.1\r\n",
            b"POST /v1.41/build/prune HTTP/1.1\r\n",
            b"GET /v1.41/build HTTP/1.1\r\n",
            b"POST /v1.41/containers/build HTTP/1.1\r\n",
        ] {
            assert!(
                !is_build_request(other),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    /// An engine that answers one request after `delay`, then closes; it records whether
    /// it saw its client close first.
    async fn slow_engine(
        dir: &Path,
        delay: Duration,
    ) -> (EngineAddress, tokio::task::JoinHandle<bool>) {
        let path = dir.join("engine.sock");
        let listener = UnixListener::bind(&path).expect("binds");
        let served = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("a connection");
            let mut buf = vec![0u8; 4096];
            let n = stream.read(&mut buf).await.expect("the request");
            assert!(n > 0);
            // Did the client side close while the "build" ran?
            let closed = matches!(
                tokio::time::timeout(delay, stream.read(&mut buf)).await,
                Ok(Ok(0))
            );
            let _ = stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"aux\":{\"ID\":\"sha256:1\"}}",
                )
                .await;
            closed
        });
        (EngineAddress::Unix(path), served)
    }

    #[tokio::test]
    async fn a_build_whose_client_leaves_is_held_open_until_the_engine_answers() {
        let dir = std::env::temp_dir().join(format!("sm-hold-{}", super::super::random_hex(6)));
        std::fs::create_dir_all(&dir).expect("dir");
        let (engine, served) = slow_engine(&dir, Duration::from_millis(800)).await;
        let listen = dir.join("hold.sock");
        let holder = tokio::spawn({
            let listen = listen.clone();
            async move { serve(&listen, &engine).await }
        });
        while !listen.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = std::time::Instant::now();
        let mut client = UnixStream::connect(&listen).await.expect("connects");
        client
            .write_all(b"POST /v1.41/build?buildid=b HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("sent");
        // The client is killed: its connection closes before the answer.
        drop(client);
        holder.await.expect("joins").expect("served");
        assert!(
            started.elapsed() >= Duration::from_millis(800),
            "the holder ended before the engine's answer"
        );
        assert!(
            !served.await.expect("joins"),
            "the engine saw the build's client leave"
        );
        assert!(!listen.exists(), "the holder's socket is removed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
