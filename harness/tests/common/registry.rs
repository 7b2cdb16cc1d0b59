//! The local registry for tests: the harness's own ([`LocalRegistry`]), started in a
//! folder of its own that goes with it; a registry that does not start fails the test,
//! saying why.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use sandbox_matrix::run::local_registry::LocalRegistry;

/// A test's registry: dropping it stops the registry, then removes the folder it was
/// started in.
pub struct TestRegistry {
    registry: Option<LocalRegistry>,
    parent: PathBuf,
}

impl std::ops::Deref for TestRegistry {
    type Target = LocalRegistry;

    fn deref(&self) -> &LocalRegistry {
        self.registry.as_ref().expect("a registry until dropped")
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        drop(self.registry.take());
        let _ = std::fs::remove_dir_all(&self.parent);
    }
}

/// Starts a registry with `start` in a new folder of this test process's.
fn in_own_folder(
    start: impl FnOnce(&std::path::Path) -> Result<LocalRegistry, String>,
) -> TestRegistry {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let parent = std::env::temp_dir().join(format!(
        "sandbox-matrix-registries-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&parent).expect("a folder for a registry");
    match start(&parent) {
        Ok(registry) => TestRegistry {
            registry: Some(registry),
            parent,
        },
        Err(e) => {
            let _ = std::fs::remove_dir_all(&parent);
            panic!("a local registry: {e}");
        }
    }
}

/// A registry that lets `user` with `password` in.
pub fn start(user: &str, password: &str) -> TestRegistry {
    in_own_folder(|parent| LocalRegistry::start(parent, user, password))
}

/// A registry that lets `pusher` push and pull and `puller` only pull.
pub fn start_with_puller(pusher: (&str, &str), puller: (&str, &str)) -> TestRegistry {
    in_own_folder(|parent| LocalRegistry::start_with_puller(parent, pusher, puller))
}

/// A registry anyone may pull from and push to.
pub fn start_anonymous() -> TestRegistry {
    in_own_folder(LocalRegistry::start_anonymous)
}
