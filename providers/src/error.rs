//! Typed provider errors: a kind, whether a retry may help, and context.

use std::fmt;

/// What went wrong, coarsely, so the runner can decide what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The variant cannot do this (see its capabilities).
    Unsupported,
    /// Configuration or environment is missing or wrong (engine absent, bad path).
    Config,
    /// The thing asked for does not exist.
    NotFound,
    /// The provider's API answered with an error.
    Api,
    /// Connecting or talking to the service failed.
    Transport,
    /// The service answered something the protocol does not allow.
    Protocol,
    /// Building the artifact failed.
    Build,
    /// A wait ran past its deadline.
    Timeout,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Config => "configuration",
            ErrorKind::NotFound => "not found",
            ErrorKind::Api => "api error",
            ErrorKind::Transport => "transport error",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::Build => "build failed",
            ErrorKind::Timeout => "timed out",
        })
    }
}

/// An error from a provider call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind}: {message}{}", context_suffix(.context))]
pub struct ProviderError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Whether retrying the same call may succeed (429, 5xx, connection reset).
    pub retryable: bool,
    /// What happened, for a person.
    pub message: String,
    /// Where it happened, innermost last (such as `docker build`, `POST /api/kernels`).
    pub context: Vec<String>,
}

fn context_suffix(context: &[String]) -> String {
    if context.is_empty() {
        String::new()
    } else {
        format!(" (during {})", context.join(" > "))
    }
}

impl ProviderError {
    /// A non-retryable error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            retryable: false,
            message: message.into(),
            context: Vec::new(),
        }
    }

    /// A retryable error of `kind`.
    pub fn retryable(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            ..Self::new(kind, message)
        }
    }

    /// The error for a call this variant does not support.
    pub fn unsupported(what: &str) -> Self {
        Self::new(
            ErrorKind::Unsupported,
            format!("this variant cannot {what}"),
        )
    }

    /// Adds where the error happened.
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context.insert(0, context.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_message_and_context() {
        let e = ProviderError::new(ErrorKind::Api, "409 conflict")
            .context("inner")
            .context("outer");
        assert_eq!(
            e.to_string(),
            "api error: 409 conflict (during outer > inner)"
        );
        assert!(!e.retryable);
        assert!(ProviderError::retryable(ErrorKind::Transport, "reset").retryable);
    }
}
