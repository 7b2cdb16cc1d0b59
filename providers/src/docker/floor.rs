//! The floor: what the engine alone takes from create to a first result, with no harness
//! in between (a bare `python3`, then a bare kernel), each time read inside the container.

use super::*;

/// Starts a kernel with jupyter_client alone and prints how long it took to answer `1+1`.
pub(super) const FLOOR_KERNEL_SCRIPT: &str = r#"
import json, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
answers = []
def hook(msg):
    if msg["msg_type"] == "execute_result":
        answers.append(msg["content"]["data"]["text/plain"])
kc.execute_interactive("1+1", output_hook=hook, timeout=60)
at = time.time()
kc.stop_channels()
km.shutdown_kernel(now=True)
print(json.dumps({"answer": answers[-1] if answers else None, "at": at}))
"#;

/// The python3 floor: bare `print(1+1)`, then the wall clock when it printed.
pub(super) const FLOOR_PYTHON_SCRIPT: &str = "import time; print(1+1); print(repr(time.time()))";

/// The span from `created` (the host's clock just before the container was created) to
/// `at`, the container's wall clock in seconds since the epoch (the same kernel's clock).
pub(super) fn since_create(
    created: std::time::SystemTime,
    at: f64,
    what: &str,
) -> Result<Duration> {
    let created = created
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Duration::try_from_secs_f64(at - created)
        .ok()
        .filter(|d| *d < Duration::from_secs(3600))
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "{what} answered at {at}, {:.3} s from the container's create: not a span",
                    at - created
                ),
            )
        })
}

impl DockerProvider {
    /// Runs `cmd` in a fresh container of `image` to its end and removes it; returns its
    /// stdout and the host's wall clock just before the container was created.
    pub(super) async fn run_once(
        &self,
        image: &str,
        cmd: Vec<String>,
        labels: &RunLabels,
    ) -> Result<(String, std::time::SystemTime)> {
        let config = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(cmd),
            labels: Some(labels.to_map().into_iter().collect()),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let create_at = std::time::SystemTime::now();
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, config)
            .await
            .map_err(|e| engine_error(e).context("creating a container"))?;
        let outcome = async {
            self.docker
                .start_container(&created.id, None)
                .await
                .map_err(|e| engine_error(e).context("starting a container"))?;
            let mut wait = self.docker.wait_container(&created.id, None);
            while let Some(status) = wait.next().await {
                if let Err(e) = status {
                    // A non-zero exit arrives as an error; the logs below say why.
                    tracing::debug!("container wait: {e}");
                }
            }
            let mut logs = self.docker.logs(
                &created.id,
                Some(
                    LogsOptionsBuilder::default()
                        .stdout(true)
                        .stderr(true)
                        .build(),
                ),
            );
            let (mut stdout, mut stderr) = (String::new(), String::new());
            while let Some(chunk) = logs.next().await {
                match chunk.map_err(|e| engine_error(e).context("reading container logs"))? {
                    LogOutput::StdOut { message } => {
                        stdout.push_str(&String::from_utf8_lossy(&message))
                    }
                    LogOutput::StdErr { message } => {
                        stderr.push_str(&String::from_utf8_lossy(&message))
                    }
                    _ => {}
                }
            }
            if stdout.trim().is_empty() {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!(
                        "the container printed nothing on stdout; stderr: {}",
                        tail(&stderr, 400)
                    ),
                ));
            }
            Ok(stdout)
        }
        .await;
        remove_container(&self.docker, &created.id).await?;
        outcome.map(|stdout| (stdout, create_at))
    }
}
