//! Test and emulator network settings of the HTTP client: extra trusted root certificates
//! and a pin of one domain (and every name under it) to an address. They let a client
//! reach a local emulator through a provider's live host forms (`https://api.<domain>`,
//! `https://<port>-<id>.<domain>`) with TLS really checked. A live run sets neither.
//!
//! From the environment ([`Network::from_env`]):
//! - `SANDBOX_MATRIX_CA_FILE`: a PEM file of extra root certificates (the emulator's test CA).
//! - `SANDBOX_MATRIX_RESOLVE`: `<domain>=<ip>` or `<domain>=<ip>:<port>`. Every name equal to
//!   `<domain>` or ending in `.<domain>` resolves to `<ip>`; the port is the URL's when it
//!   names one, else the pin's (else the scheme's).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use crate::{ErrorKind, ProviderError, Result};

/// Names the PEM file of extra root certificates.
pub const CA_FILE_VAR: &str = "SANDBOX_MATRIX_CA_FILE";
/// Pins a domain and its subdomains to an address: `<domain>=<ip>[:<port>]`.
pub const RESOLVE_VAR: &str = "SANDBOX_MATRIX_RESOLVE";

/// A domain and every name under it, pinned to an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvePin {
    /// The domain, lower case, without a port.
    pub domain: String,
    /// Where its names go; port 0 means the URL's (or the scheme's) port.
    pub addr: SocketAddr,
}

impl ResolvePin {
    /// Parses `<domain>=<ip>` or `<domain>=<ip>:<port>`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            ProviderError::new(
                ErrorKind::Config,
                format!(
                    "{RESOLVE_VAR}={}: {why}; expected <domain>=<ip> or <domain>=<ip>:<port>",
                    crate::quoted(text)
                ),
            )
        };
        let (domain, to) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
        if domain.is_empty() || domain.contains(':') || domain.contains('/') {
            return Err(bad("the domain must be a bare host name"));
        }
        let to = to.trim();
        let addr = match to.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => SocketAddr::new(
                to.parse::<IpAddr>().map_err(|_| bad("not an IP address"))?,
                0,
            ),
        };
        Ok(Self { domain, addr })
    }

    /// Whether `host` is the domain or a name under it.
    pub fn covers(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        host == self.domain
            || host
                .strip_suffix(&self.domain)
                .is_some_and(|rest| rest.ends_with('.'))
    }
}

/// Extra roots and a resolve pin; the default (a live run's) has neither.
#[derive(Debug, Clone, Default)]
pub struct Network {
    /// PEM text of root certificates trusted besides the built-in ones.
    pub extra_roots_pem: Vec<String>,
    /// A domain pinned to an address.
    pub pin: Option<ResolvePin>,
}

impl Network {
    /// From [`CA_FILE_VAR`] and [`RESOLVE_VAR`]; unset or empty, nothing changes.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// From [`CA_FILE_VAR`] and [`RESOLVE_VAR`] as `var` reads them.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut network = Self::default();
        if let Some(file) = var(CA_FILE_VAR) {
            network = network.trust_file(Path::new(&file))?;
        }
        if let Some(pin) = var(RESOLVE_VAR) {
            network.pin = Some(ResolvePin::parse(&pin)?);
        }
        Ok(network)
    }

    /// Also trusts the certificates of the PEM file at `path`.
    pub fn trust_file(mut self, path: &Path) -> Result<Self> {
        let pem = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("{CA_FILE_VAR}: cannot read {}: {e}", path.display()),
            )
        })?;
        self.extra_roots_pem.push(pem);
        Ok(self)
    }

    /// Also trusts the certificates of `pem`.
    pub fn trust_pem(mut self, pem: impl Into<String>) -> Self {
        self.extra_roots_pem.push(pem.into());
        self
    }

    /// Pins `pin`'s domain and every name under it.
    pub fn pin(mut self, pin: ResolvePin) -> Self {
        self.pin = Some(pin);
        self
    }

    /// Where `host` goes when it is pinned.
    pub fn pinned(&self, host: &str) -> Option<SocketAddr> {
        self.pin.as_ref().filter(|p| p.covers(host)).map(|p| p.addr)
    }

    /// `builder` trusting the extra roots and resolving through the pin.
    pub fn apply(&self, mut builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
        for pem in &self.extra_roots_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("{CA_FILE_VAR}: not PEM certificates: {e}"),
                )
            })?;
            if certs.is_empty() {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!("{CA_FILE_VAR}: the file holds no certificate"),
                ));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some(pin) = &self.pin {
            builder = builder.dns_resolver(Arc::new(PinnedResolver { pin: pin.clone() }));
        }
        Ok(builder)
    }
}

/// Resolves the pinned domain's names to the pin, anything else as the system does.
struct PinnedResolver {
    pin: ResolvePin,
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let pinned = self.pin.covers(&host).then_some(self.pin.addr);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = match pinned {
                Some(addr) => vec![addr],
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
            };
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_covers_its_domain_and_the_names_under_it_only() {
        let pin = ResolvePin::parse("Emulator.test=127.0.0.1").unwrap();
        assert_eq!(pin.addr, "127.0.0.1:0".parse().unwrap());
        for host in [
            "emulator.test",
            "api.emulator.test",
            "49999-sbx1.EMULATOR.test.",
        ] {
            assert!(pin.covers(host), "{host}");
        }
        for host in ["xemulator.test", "emulator.test.org", "test", "api.e2b.app"] {
            assert!(!pin.covers(host), "{host}");
        }
        let with_port = ResolvePin::parse("emulator.test=127.0.0.1:8443").unwrap();
        assert_eq!(with_port.addr.port(), 8443);
        for bad in [
            "emulator.test",
            "emulator.test=localhost",
            "a:1=127.0.0.1",
            "=127.0.0.1",
        ] {
            assert!(ResolvePin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let network = Network::default().trust_pem("not a certificate");
        let refused = network.apply(reqwest::Client::builder());
        assert!(refused.is_err_and(|e| e.kind == ErrorKind::Config));
    }
}
