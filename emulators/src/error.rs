//! Why an emulator could not start.

/// Why an emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// Making the test CA or the TLS configuration failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// A socket or file operation failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The emulator's backend (the docker variant) is not available.
    #[error("{0}")]
    Backend(String),
    /// An option names something the emulator does not have.
    #[error("{0}")]
    Config(String),
}
