//! Where a provider's client reads its configuration: the process environment, or a set of
//! values a run gives it (the settings of an emulator it started), never both mixed.

use std::collections::BTreeMap;

use super::Mode;
use super::network::Network;
use crate::Result;

/// The named values a client is configured by (`E2B_API_KEY`, `DAYTONA_API_URL`, ...).
/// An empty value reads as unset.
#[derive(Clone, Default)]
pub struct Settings {
    /// `None`: the process environment. `Some`: these values and nothing else.
    given: Option<BTreeMap<String, String>>,
}

impl Settings {
    /// The process environment, as a live run reads it.
    pub fn environment() -> Self {
        Self::default()
    }

    /// Exactly `values`: nothing is read from the environment, so a credential there never
    /// reaches the address these values name.
    pub fn only<K: Into<String>, V: Into<String>>(
        values: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            given: Some(
                values
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            ),
        }
    }

    /// The value of `name`, `None` when unset or empty.
    pub fn var(&self, name: &str) -> Option<String> {
        match &self.given {
            Some(values) => values.get(name).cloned(),
            None => std::env::var(name).ok(),
        }
        .filter(|v| !v.trim().is_empty())
    }

    /// The test network settings they carry (a CA file to trust, a resolve pin): what a
    /// client reaches an emulator through its live host forms with.
    pub fn network(&self) -> Result<Network> {
        Network::from_lookup(|name| self.var(name))
    }

    /// [`Self::network`] for a client in `mode`: none for a replay, which is served on
    /// loopback as recorded.
    pub fn network_for(&self, mode: &Mode) -> Result<Network> {
        match mode {
            Mode::Replay { .. } => Ok(Network::default()),
            Mode::Live | Mode::Record(_) => self.network(),
        }
    }
}

impl std::fmt::Debug for Settings {
    /// Names only: values may be credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.given {
            None => f.write_str("Settings(environment)"),
            Some(values) => f.debug_set().entries(values.keys()).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_values_are_all_that_is_read_and_debug_shows_no_value() {
        // Fake: a made-up key, shown never to be printed.
        let settings = Settings::only([("E2B_API_KEY", "fake-key-0000"), ("EMPTY", " ")]);
        assert_eq!(
            settings.var("E2B_API_KEY").as_deref(),
            Some("fake-key-0000")
        );
        assert_eq!(settings.var("EMPTY"), None);
        // PATH is set in every test process; given settings do not read it.
        assert_eq!(settings.var("PATH"), None);
        assert!(Settings::environment().var("PATH").is_some());
        let shown = format!("{settings:?}");
        assert!(
            shown.contains("E2B_API_KEY") && !shown.contains("fake-key-0000"),
            "{shown}"
        );
    }
}
