//! Starting one emulator with what a client needs to reach it: what `emulate` serves until
//! stopped, and what `run --emulated` starts for each cloud variant × scenario.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_providers::LogFn;
use sandbox_providers::api::network::CA_FILE_VAR;
use sandbox_providers::api::settings::Settings;
use sandbox_providers::docker::DockerProvider;

use crate::emulated::Emulated;
use crate::emulator::Emulator as _;
use crate::emulator::{ClientEnv, Reach};
use crate::error::EmulateError;
use crate::{datalayer, daytona, e2b, modal};

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
    /// e2b: the start command a seeded template gets instead of its environment's.
    pub start_cmd: Option<String>,
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
            start_cmd: None,
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

/// `$body` with `$e` bound to whichever emulator `$emulator` holds.
macro_rules! each {
    ($emulator:expr, $e:ident => $body:expr) => {
        match $emulator {
            Emulator::E2b($e) => $body,
            Emulator::Daytona($e) => $body,
            Emulator::Modal($e) => $body,
            Emulator::Datalayer($e) => $body,
        }
    };
}

/// A started emulator and what a client reaches it with.
pub struct Running {
    /// The emulator.
    pub emulator: Emulator,
    /// `NAME=value` settings a client needs, fake credentials included (they grant
    /// nothing anywhere), without the CA file ([`CA_FILE_VAR`]): what `emulate` prints
    /// ([`Reach::WithPort`]).
    pub settings: ClientEnv,
    /// The same for sandbox-matrix's own clients ([`Reach::Pinned`]; see
    /// [`Self::client_settings`]).
    pub pinned: ClientEnv,
    /// The test CA's certificate (PEM) a client trusts.
    pub ca_pem: String,
}

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
    let emulator = match which {
        Emulated::E2b => {
            let options = e2b::Options {
                port,
                domain: domain.unwrap_or_else(|| e2b::DEFAULT_DOMAIN.to_owned()),
                run_id,
                kill_after,
                start_cmd: launch.start_cmd.clone(),
            };
            Emulator::E2b(e2b::Emulator::start(docker, options).await?)
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
            Emulator::Daytona(daytona::Emulator::start(docker, options).await?)
        }
        Emulated::Datalayer => {
            let options = datalayer::Options {
                port,
                domain: domain.unwrap_or_else(|| datalayer::DEFAULT_DOMAIN.to_owned()),
                environment_name: launch.environment_name.clone(),
                faults: launch.datalayer_faults.clone(),
                run_id,
                kill_after,
            };
            Emulator::Datalayer(datalayer::Emulator::start(docker, options).await?)
        }
        Emulated::Modal => {
            let options = modal::Options {
                port,
                domain: domain.unwrap_or_else(|| modal::DEFAULT_DOMAIN.to_owned()),
                router_jwt_ttl: launch.router_jwt_ttl,
                unavailable_once: launch.unavailable_once.clone(),
                no_task: launch.no_task,
                run_id,
                kill_after,
            };
            Emulator::Modal(modal::Emulator::start(docker, options).await?)
        }
    };
    let mut running = Running::serving(emulator);
    if which == Emulated::Datalayer
        && let Err(e) = running.seed(&launch.environment, log).await
    {
        running.stop().await;
        return Err(e);
    }
    Ok(running)
}

impl Running {
    /// `emulator`, with what a client reaches it with.
    fn serving(emulator: Emulator) -> Self {
        let (settings, pinned, ca_pem) = each!(&emulator, e => (
            e.client_env(Reach::WithPort),
            e.client_env(Reach::Pinned),
            e.ca_pem().to_owned(),
        ));
        Self {
            emulator,
            settings,
            pinned,
            ca_pem,
        }
    }

    /// Builds the environment folder `environment` into what the emulator's clients
    /// launch ([`crate::emulator::Emulator::seed`]), `log` taking the build's lines; the settings that
    /// name it join [`Self::settings`] and [`Self::pinned`].
    pub async fn seed(&mut self, environment: &Path, log: &LogFn) -> Result<(), EmulateError> {
        let named = each!(&self.emulator, e => e.seed(environment, log).await)?;
        self.settings.extend(named.iter().cloned());
        self.pinned.extend(named);
        Ok(())
    }

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
        each!(self.emulator, e => {
            e.stop();
            e.cleanup().await;
        });
    }
}
