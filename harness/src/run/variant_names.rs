//! Every variant's name, in report order, for the readers that must know the names but
//! not the variants (a scenario's `accept_partial:`); `variants::known()` is this list, and
//! a test there checks it against the variants themselves.

/// The local variants, then the cloud ones, as `variants::LOCAL` and `variants::CLOUD`
/// order them.
pub const VARIANT_NAMES: [&str; 6] = [
    "docker",
    "datalayer",
    "datalayer-runtimes",
    "e2b",
    "daytona",
    "modal",
];
