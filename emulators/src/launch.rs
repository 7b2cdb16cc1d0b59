//! Starting one emulator with what a client needs to reach it: what `emulate` serves until
//! stopped, and what `run --emulated` starts for each cloud variant × scenario.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::LogFn;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};
use sandbox_providers::api::settings::Settings;
use sandbox_providers::docker::DockerProvider;

use super::{EmulateError, Emulated, datalayer, daytona, e2b, modal};
use crate::Emulator as _;

/// How to start an emulator. [`Launch::new`] gives each provider's defaults.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Port on 127.0.0.1; 0 takes a free one.
    pub port: u16,
    /// The domain it serves; `None`: the provider's default (`e2b.test`, ...).
    pub domain: Option<String>,
    /// The run whose label everything it makes carries; `None`: labels of its own.
    pub run_id: Option<String>,
    /// modal: how long a command router JWT lives.
    pub router_jwt_ttl: Duration,
    /// modal: control-plane RPCs whose first call answers Unavailable.
    pub unavailable_once: Vec<String>,
    /// modal: sandboxes never get a task.
    pub no_task: bool,
    /// datalayer: the environment folder served as the platform environment.
    pub environment: PathBuf,
    /// datalayer: the name that environment is listed and launched under.
    pub environment_name: String,
    /// datalayer: faults.
    pub datalayer_faults: datalayer::Faults,
    /// Fault: every sandbox ends this long after its create, whatever its timeout asks.
    pub kill_after: Option<Duration>,
}

impl Launch {
    /// Defaults, serving `environment` as Datalayer's platform environment.
    pub fn new(environment: PathBuf) -> Self {
        Self {
            port: 0,
            domain: None,
            run_id: None,
            router_jwt_ttl: modal::ROUTER_JWT_TTL,
            unavailable_once: Vec::new(),
            no_task: false,
            environment,
            environment_name: datalayer::DEFAULT_ENVIRONMENT.to_owned(),
            datalayer_faults: datalayer::Faults::default(),
            kill_after: None,
        }
    }
}

/// A running emulator.
pub enum Emulator {
    /// E2B's.
    E2b(e2b::Emulator),
    /// Daytona's.
    Daytona(daytona::Emulator),
    /// Modal's.
    Modal(modal::Emulator),
    /// Datalayer's runtimes API.
    Datalayer(datalayer::Emulator),
}

/// A started emulator and what a client reaches it with.
pub struct Running {
    /// The emulator.
    pub emulator: Emulator,
    /// `NAME=value` settings a client needs, fake credentials included (they grant
    /// nothing anywhere), without the CA file ([`CA_FILE_VAR`]): what `emulate` prints.
    pub settings: Vec<(&'static str, String)>,
    /// The same for sandbox-matrix's own clients: the live host forms without a port, the
    /// pin carrying it, so that a cassette they record names no machine-specific port
    /// (see [`Self::client_settings`]).
    pub pinned: Vec<(&'static str, String)>,
    /// The test CA's certificate (PEM) a client trusts.
    pub ca_pem: String,
}

// Fakes: keys the emulators accept (any non-empty one); they grant nothing anywhere.
const FAKE_E2B_KEY: &str = "e2b_sm_fake_emulator_key_0000";
const FAKE_DAYTONA_KEY: &str = "dtn_sm_fake_emulator_key_0000";
const FAKE_DATALAYER_KEY: &str = "dl_sm_fake_emulator_key_0000";

/// Starts the emulator of `which` over `docker`; Datalayer's builds its environment first,
/// `log` taking the build's lines.
pub async fn start(
    which: Emulated,
    docker: Arc<DockerProvider>,
    launch: Launch,
    log: &LogFn,
) -> Result<Running, EmulateError> {
    let Launch {
        port,
        domain,
        run_id,
        kill_after,
        ..
    } = launch.clone();
    match which {
        Emulated::E2b => {
            let options = e2b::Options {
                port,
                domain: domain.unwrap_or_else(|| e2b::DEFAULT_DOMAIN.to_owned()),
                run_id,
                kill_after,
            };
            let emulator = e2b::Emulator::start(docker, options).await?;
            let settings = vec![
                ("E2B_API_KEY", FAKE_E2B_KEY.to_owned()),
                ("E2B_API_URL", emulator.api_url_with_port()),
                ("E2B_DOMAIN", emulator.domain_with_port()),
                (RESOLVE_VAR, format!("{}=127.0.0.1", emulator.domain())),
            ];
            let domain = emulator.domain();
            let pinned = vec![
                ("E2B_API_KEY", FAKE_E2B_KEY.to_owned()),
                ("E2B_API_URL", format!("https://api.{domain}")),
                ("E2B_DOMAIN", domain.to_owned()),
                (RESOLVE_VAR, pin(domain, emulator.port())),
            ];
            Ok(Running {
                ca_pem: emulator.ca_pem().to_owned(),
                settings,
                pinned,
                emulator: Emulator::E2b(emulator),
            })
        }
        Emulated::Daytona => {
            let mut options = daytona::Options::new(
                port,
                domain.unwrap_or_else(|| daytona::DEFAULT_DOMAIN.to_owned()),
            );
            options.kill_after = kill_after;
            options.labels = run_id.map(|run_id| sandbox_providers::RunLabels {
                run_id,
                variant: "daytona-emulator".into(),
                scenario: "emulate".into(),
            });
            let emulator = daytona::Emulator::start(docker, options).await?;
            let settings = vec![
                ("DAYTONA_API_KEY", FAKE_DAYTONA_KEY.to_owned()),
                ("DAYTONA_API_URL", emulator.api_url_with_port()),
                (RESOLVE_VAR, format!("{}=127.0.0.1", emulator.domain())),
            ];
            let pinned = vec![
                ("DAYTONA_API_KEY", FAKE_DAYTONA_KEY.to_owned()),
                ("DAYTONA_API_URL", emulator.api_url()),
                (RESOLVE_VAR, pin(emulator.domain(), emulator.port())),
            ];
            Ok(Running {
                ca_pem: emulator.ca_pem().to_owned(),
                settings,
                pinned,
                emulator: Emulator::Daytona(emulator),
            })
        }
        Emulated::Datalayer => {
            let options = datalayer::Options {
                port,
                domain: domain.unwrap_or_else(|| datalayer::DEFAULT_DOMAIN.to_owned()),
                environment: launch.environment,
                environment_name: launch.environment_name.clone(),
                faults: launch.datalayer_faults,
                run_id,
                kill_after,
            };
            let emulator = datalayer::Emulator::start(docker, options).await?;
            let key = (
                sandbox_providers::datalayer::runtimes::API_KEY_VAR,
                FAKE_DATALAYER_KEY.to_owned(),
            );
            let environment = (
                sandbox_providers::datalayer::runtimes::ENVIRONMENT_VAR,
                launch.environment_name.clone(),
            );
            let running = Running {
                ca_pem: emulator.ca_pem().to_owned(),
                pinned: vec![
                    key.clone(),
                    (
                        sandbox_providers::datalayer::runtimes::URL_VAR,
                        emulator.api_url_without_port(),
                    ),
                    environment.clone(),
                    (RESOLVE_VAR, pin(emulator.domain(), emulator.port())),
                ],
                settings: vec![
                    key,
                    (
                        sandbox_providers::datalayer::runtimes::URL_VAR,
                        emulator.api_url(),
                    ),
                    ("SANDBOX_MATRIX_DATALAYER_PLAIN_URL", emulator.plain_url()),
                    environment,
                    (RESOLVE_VAR, format!("{}=127.0.0.1", emulator.domain())),
                ],
                emulator: Emulator::Datalayer(emulator.clone()),
            };
            if let Err(e) = emulator.seed(log).await {
                running.stop().await;
                return Err(e);
            }
            Ok(running)
        }
        Emulated::Modal => {
            let options = modal::Options {
                port,
                domain: domain.unwrap_or_else(|| modal::DEFAULT_DOMAIN.to_owned()),
                router_jwt_ttl: launch.router_jwt_ttl,
                unavailable_once: launch.unavailable_once,
                no_task: launch.no_task,
                run_id,
                kill_after,
            };
            let emulator = modal::Emulator::start(docker, options).await?;
            // Fakes: the emulator generated them, and accepts no others.
            let settings = vec![
                ("MODAL_SERVER_URL", emulator.server_url()),
                ("MODAL_TOKEN_ID", emulator.token_id().to_owned()),
                ("MODAL_TOKEN_SECRET", emulator.token_secret().to_owned()),
                ("SANDBOX_MATRIX_MODAL_TLS_URL", emulator.tls_url()),
                // The run label of its builds, and of sandboxes created without one.
                ("SANDBOX_MATRIX_EMULATOR_RUN", emulator.run_id().to_owned()),
                (RESOLVE_VAR, format!("{}=127.0.0.1", emulator.domain())),
            ];
            Ok(Running {
                ca_pem: emulator.ca_pem().to_owned(),
                // Modal's client reaches the plain gRPC port by URL; the control plane's
                // answers name no address of its own.
                pinned: settings.clone(),
                settings,
                emulator: Emulator::Modal(emulator),
            })
        }
    }
}

/// `<domain>=127.0.0.1:<port>`: every name under `domain` goes to the emulator's port.
fn pin(domain: &str, port: u16) -> String {
    format!("{domain}=127.0.0.1:{port}")
}

impl Running {
    /// Exactly the settings sandbox-matrix's own client reaches it with ([`Self::pinned`]),
    /// its CA read from `ca_file` (where the caller wrote [`Self::ca_pem`]).
    pub fn client_settings(&self, ca_file: &Path) -> Settings {
        Settings::only(
            self.pinned
                .iter()
                .map(|(name, value)| (*name, value.clone()))
                .chain([(CA_FILE_VAR, ca_file.display().to_string())]),
        )
    }

    /// Stops serving and removes what its sandboxes and builds left.
    pub async fn stop(self) {
        match self.emulator {
            Emulator::E2b(emulator) => {
                emulator.stop();
                emulator.cleanup().await;
            }
            Emulator::Daytona(emulator) => {
                emulator.stop();
                emulator.cleanup().await;
            }
            Emulator::Modal(emulator) => {
                emulator.stop();
                emulator.cleanup().await;
            }
            Emulator::Datalayer(emulator) => {
                emulator.stop();
                emulator.cleanup().await;
            }
        }
    }
}
