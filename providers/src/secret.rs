//! A credential value that never prints itself.

use std::fmt;

/// A named secret. `Debug` and `Display` show the name only, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    name: String,
    value: String,
}

impl Secret {
    /// Wraps `value` under `name` (such as `REGISTRY_TOKEN`).
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The secret's value; pass it only to the service that needs it.
    pub fn expose(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret({}: [redacted, {} bytes])",
            self.name,
            self.value.len()
        )
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ([redacted])", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        // A fake value, made up for this test.
        let s = Secret::new("REGISTRY_TOKEN", "fake-value-0123");
        assert!(!format!("{s:?}").contains("fake-value-0123"));
        assert!(!format!("{s}").contains("fake-value-0123"));
        assert_eq!(s.expose(), "fake-value-0123");
    }
}
