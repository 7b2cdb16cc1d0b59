//! The one trait every emulator implements: where it is served ([`Site`]), what a client
//! reaches it with ([`Emulator::client_env`]), what it builds before clients come
//! ([`Emulator::seed`]) and what it removes after ([`Emulator::cleanup`]); the rest is
//! defaulted from its site.

use std::future::Future;
use std::path::Path;

use sandbox_providers::LogFn;
use sandbox_providers::api::Network;
use sandbox_providers::api::network::RESOLVE_VAR;

use crate::error::EmulateError;
use crate::record;
use crate::site::Site;

/// `NAME=value` settings a client reaches an emulator with: URLs, the pin of its domain,
/// fake credentials (they grant nothing anywhere), and what a seed names.
pub type ClientEnv = Vec<(&'static str, String)>;

/// How a client's URLs reach an emulator on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The URLs carry the emulator's port and the domain resolves to 127.0.0.1: what
    /// `emulate` prints for a provider's own SDK.
    WithPort,
    /// The live host forms without a port, the pin carrying it: what sandbox-matrix's own
    /// clients use, so that a cassette they record names no machine-specific port.
    Pinned,
}

/// An emulator of a cloud provider's API over the local Docker engine.
pub trait Emulator: Send + Sync {
    /// Where it is served.
    fn site(&self) -> &Site;

    /// What a client needs besides the test CA's file, its URLs reaching it as `reach`
    /// says.
    fn client_env(&self, reach: Reach) -> ClientEnv;

    /// Builds the environment folder `environment` into what its clients launch (a
    /// template, a snapshot, a platform environment), `log` taking the build's lines;
    /// answers the settings that name what it built. The default builds nothing: the
    /// emulator builds as its clients ask.
    fn seed(
        &self,
        environment: &Path,
        log: &LogFn,
    ) -> impl Future<Output = Result<ClientEnv, EmulateError>> + Send {
        let _ = (environment, log);
        async { Ok(ClientEnv::new()) }
    }

    /// Removes, by their labels, whatever its builds and sandboxes left on the engine.
    fn cleanup(&self) -> impl Future<Output = ()> + Send {
        self.site().remove_made()
    }

    /// Stops serving (what its cleanup removes is left to the cleanup).
    fn stop(&self) {
        self.site().stop();
    }

    /// Keeps every request it is sent from now on, for a caller to read.
    fn record(&self) -> record::Exchanges {
        self.site().record()
    }

    /// The port it serves on 127.0.0.1.
    fn port(&self) -> u16 {
        self.site().port()
    }

    /// Its domain, without a port.
    fn domain(&self) -> &str {
        self.site().domain()
    }

    /// The test CA's certificate, PEM.
    fn ca_pem(&self) -> &str {
        self.site().ca_pem()
    }

    /// What a client needs besides the URLs: the test CA trusted, and the domain pinned to
    /// 127.0.0.1 at the emulator's port, so URLs may carry no port at all (as live ones).
    fn network(&self) -> Network {
        self.site().network()
    }

    /// The resolve setting for `reach`: the domain and every name under it to 127.0.0.1,
    /// at its port when the URLs carry none.
    fn resolve(&self, reach: Reach) -> (&'static str, String) {
        let domain = self.domain();
        let to = match reach {
            Reach::WithPort => "127.0.0.1".to_owned(),
            Reach::Pinned => format!("127.0.0.1:{}", self.port()),
        };
        (RESOLVE_VAR, format!("{domain}={to}"))
    }
}
