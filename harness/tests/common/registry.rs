//! The local registry for tests: the harness's own ([`LocalRegistry`]), started in the
//! test's output folder; a registry that does not start fails the test, saying why.

pub use sandbox_matrix::run::local_registry::LocalRegistry;

/// The folder this test process's registries live in, each in a folder of its own.
fn parent() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("sandbox-matrix-registries-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder for registries");
    dir
}

/// A registry that lets `user` with `password` in.
pub fn start(user: &str, password: &str) -> LocalRegistry {
    LocalRegistry::start(&parent(), user, password).expect("a local registry")
}

/// A registry that lets `pusher` push and pull and `puller` only pull.
pub fn start_with_puller(pusher: (&str, &str), puller: (&str, &str)) -> LocalRegistry {
    LocalRegistry::start_with_puller(&parent(), pusher, puller).expect("a local registry")
}

/// A registry anyone may pull from and push to.
pub fn start_anonymous() -> LocalRegistry {
    LocalRegistry::start_anonymous(&parent()).expect("a local registry")
}
