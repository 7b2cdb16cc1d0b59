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

/// How many folders deep a build context is read below the folder a `COPY` names.
pub const MAX_DEPTH: usize = 32;

/// Every file under `relative` (a file or folder inside `dir`, as [`resolve`] checked it),
/// as paths relative to `dir`. Symlinks that stay inside are followed, but never into a
/// folder that contains them (a loop), and never more than [`MAX_DEPTH`] folders deep;
/// either is an error naming the path.
pub fn files(dir: &Path, relative: &Path) -> Result<Vec<PathBuf>, String> {
    // The folders that hold `relative`, the environment folder first: a link back to any
    // of them is a loop too.
    let parts: Vec<Component> = relative
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect();
    let mut above = Vec::new();
    let mut holder = dir.to_path_buf();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        above.push(canonical(&holder)?);
        holder.push(part);
    }
    if !parts.is_empty() {
        above.push(canonical(&holder)?);
    }
    let mut found = Vec::new();
    walk(dir, relative, 0, &mut above, &mut found)?;
    Ok(found)
}

fn canonical(path: &Path) -> Result<PathBuf, String> {
    path.canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// [`files`] below `relative`, `depth` folders below the one `COPY` names, whose enclosing
/// folders, resolved, are `above`.
fn walk(
    dir: &Path,
    relative: &Path,
    depth: usize,
    above: &mut Vec<PathBuf>,
    found: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let full = dir.join(relative);
    let shown = relative.display().to_string();
    // Every file and folder on the way, not only the one COPY names, stays inside.
    check(dir, &full, &shown)?;
    let meta =
        std::fs::metadata(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))?;
    if !meta.is_dir() {
        found.push(relative.to_path_buf());
        return Ok(());
    }
    let resolved = canonical(&full)?;
    if above.contains(&resolved) {
        return Err(format!(
            "`{shown}` is a symlink loop: it leads back to {}, a folder that holds it; it is not followed",
            resolved.display()
        ));
    }
    if depth > MAX_DEPTH {
        return Err(format!(
            "`{shown}` is more than {MAX_DEPTH} folders deep; the build context is not read that deep"
        ));
    }
    let mut entries = std::fs::read_dir(&full)
        .and_then(|entries| {
            entries
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| format!("cannot list {}: {e}", full.display()))?;
    entries.sort();
    above.push(resolved);
    for name in entries {
        walk(dir, &relative.join(name), depth + 1, above, found)?;
    }
    above.pop();
    Ok(())
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

    #[test]
    fn a_symlink_loop_is_refused_naming_its_path() {
        let env = Temp::new("loop");
        std::fs::create_dir_all(env.0.join("app/sub")).unwrap();
        std::fs::write(env.0.join("app/sub/main.py"), "print(1)\n").unwrap();
        // Two links back up: followed, they would list 2^depth paths.
        std::os::unix::fs::symlink("..", env.0.join("app/sub/up")).unwrap();
        std::os::unix::fs::symlink("../..", env.0.join("app/sub/top")).unwrap();
        let e = files(&env.0, Path::new("app")).unwrap_err();
        assert!(e.contains("`app/sub/top` is a symlink loop"), "{e}");
        assert!(e.contains("it is not followed"), "{e}");
        // A link to a sibling folder is no loop, and is followed.
        let env = Temp::new("sibling");
        std::fs::create_dir_all(env.0.join("a")).unwrap();
        std::fs::create_dir_all(env.0.join("b")).unwrap();
        std::fs::write(env.0.join("b/f"), "x\n").unwrap();
        std::os::unix::fs::symlink("../b", env.0.join("a/b")).unwrap();
        assert_eq!(
            files(&env.0, Path::new("a")).unwrap(),
            vec![PathBuf::from("a/b/f")]
        );
        // The whole folder, named as `COPY . /app` names it.
        assert_eq!(
            files(&env.0, Path::new(".")).unwrap(),
            vec![PathBuf::from("./a/b/f"), PathBuf::from("./b/f")]
        );
    }

    #[test]
    fn a_file_at_any_depth_up_to_the_bound_is_read_and_deeper_is_refused() {
        let env = Temp::new("deep");
        for depth in [MAX_DEPTH, MAX_DEPTH + 1] {
            let chain: PathBuf = (0..depth).map(|i| format!("d{i}")).collect();
            let root = PathBuf::from(format!("top{depth}"));
            std::fs::create_dir_all(env.0.join(&root).join(&chain)).unwrap();
            std::fs::write(env.0.join(&root).join(&chain).join("f"), "x\n").unwrap();
            let read = files(&env.0, &root);
            if depth == MAX_DEPTH {
                assert_eq!(read.unwrap(), vec![root.join(&chain).join("f")]);
            } else {
                let e = read.unwrap_err();
                assert!(
                    e.contains(&format!("is more than {MAX_DEPTH} folders deep")),
                    "{e}"
                );
                assert!(e.contains(&format!("`top{depth}/d0/")), "{e}");
            }
        }
    }
}
