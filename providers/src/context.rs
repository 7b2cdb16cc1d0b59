//! Reading an environment's build context without leaving it: the e2b variant uploads the
//! files a `COPY` names and the daytona variant inlines them, so a path that leaves the
//! environment folder, or a symlink that points outside it, must never be read. A symlink
//! that stays inside the folder is followed.

use std::path::{Component, Path, PathBuf};

/// The file or folder `source` names in the environment folder `dir`, resolved through
/// symlinks and checked to stay inside `dir`. Errors say why, for a caller that adds the
/// Dockerfile's file:line.
pub fn resolve(dir: &Path, source: &str) -> Result<PathBuf, String> {
    let relative = Path::new(source);
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("`{source}` leaves the build context"));
    }
    let path = dir.join(relative);
    check(dir, &path, source)?;
    Ok(path)
}

/// Refuses `path` (named `shown` in errors) when it resolves outside `dir`.
pub fn check(dir: &Path, path: &Path, shown: &str) -> Result<(), String> {
    let root = dir.canonicalize().map_err(|e| {
        format!(
            "cannot resolve the environment folder {}: {e}",
            dir.display()
        )
    })?;
    let resolved = path
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if resolved.starts_with(&root) {
        Ok(())
    } else {
        Err(format!(
            "`{shown}` is a symlink (or passes through one) to {}, outside the environment folder {}; it is not read",
            resolved.display(),
            dir.display()
        ))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A folder under the system temp dir, removed when dropped.
    struct Temp(PathBuf);
    impl Temp {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("sm-context-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }
    }
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_symlink_inside_is_followed_and_one_outside_is_refused() {
        let env = Temp::new("env");
        let outside = Temp::new("outside");
        // A fake secret outside the environment folder: not a real credential.
        std::fs::write(outside.0.join("secret"), "sm-fake-secret\n").unwrap();
        std::fs::write(env.0.join("real.txt"), "x\n").unwrap();
        std::os::unix::fs::symlink("real.txt", env.0.join("inside.txt")).unwrap();
        std::os::unix::fs::symlink(outside.0.join("secret"), env.0.join("out.txt")).unwrap();
        std::os::unix::fs::symlink(&outside.0, env.0.join("outdir")).unwrap();
        assert!(resolve(&env.0, "inside.txt").is_ok());
        let e = resolve(&env.0, "out.txt").unwrap_err();
        assert!(e.contains("outside the environment folder"), "{e}");
        assert!(resolve(&env.0, "outdir/secret").is_err());
        assert!(resolve(&env.0, "../x").is_err());
    }
}
