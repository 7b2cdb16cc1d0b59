//! Emulators of the cloud providers' APIs, served on loopback over HTTPS and backed by the
//! docker variant: what authors the cassettes, what `sandbox-matrix emulate` serves, and
//! what the providers' own SDKs are run against.
//!
//! Every emulator implements [`Emulator`]. This crate's root holds their shared plumbing:
//! an HTTP/1.1 server handing each request to the emulator as an [`HttpRequest`], the
//! [`Answer`] it gives back, the [`Site`] it is served at, and [`tls`] (a test CA made at
//! start, and the TLS front). An emulator is reached through its provider's live
//! host forms (`api.<domain>`, `<port>-<id>.<domain>`), the client pinning `<domain>` and
//! every name under it to 127.0.0.1 and trusting the test CA.

mod backend;
pub mod datalayer;
pub mod daytona;
pub mod e2b;
mod emulated;
mod emulator;
mod error;
mod http;
mod jupyter;
pub mod launch;
pub mod modal;
pub mod record;
mod site;
pub mod tls;

pub use emulated::{DEFAULT_DOMAIN, Emulated, describe};
pub use emulator::{ClientEnv, Emulator, Reach};
pub use error::EmulateError;
pub use http::{Answer, HttpRequest, bind_loopback, serve_http};
pub use site::{Front, Site};

#[cfg(test)]
mod tests;
