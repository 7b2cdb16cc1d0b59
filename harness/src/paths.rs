//! Paths built from input (scenario names, run ids) stay inside their folder: every part is
//! a safe file name, and the path, resolved through whatever of it exists, is still under
//! the folder it was joined to.

use std::path::{Component, Path, PathBuf};

/// The longest name a scenario (or any part joined by [`inside`]) may have, in bytes.
pub const MAX_NAME: usize = 100;

/// Why `name` is not a safe file name, or `None` when it is: ASCII letters, digits, `-`,
/// `_` and `.`, not starting with `.`, 1 to [`MAX_NAME`] bytes.
pub fn unsafe_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".into());
    }
    if name.len() > MAX_NAME {
        return Some(format!(
            "is {} bytes long; at most {MAX_NAME} are allowed",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Some("starts with `.`".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!(
            "holds {}; use only letters, digits, `-`, `_` and `.`",
            sandbox_providers::quoted(&c.to_string())
        ));
    }
    None
}

/// `dir` joined with `parts`, each a safe file name (see [`unsafe_name`]), checked to stay
/// inside `dir` once the existing part of the path is resolved (symlinks included).
pub fn inside(dir: &Path, parts: &[&str]) -> Result<PathBuf, String> {
    let mut path = dir.to_path_buf();
    for part in parts {
        if let Some(why) = unsafe_name(part) {
            return Err(format!(
                "`{}` {why}: it cannot name a file under {}",
                cut(part),
                dir.display()
            ));
        }
        path.push(part);
    }
    check_inside(dir, &path)?;
    Ok(path)
}

/// Refuses `path` when, resolved as far as it exists, it is not under `dir` (resolved too).
/// A `dir` that does not exist yet holds nothing that could lead out of it.
pub fn check_inside(dir: &Path, path: &Path) -> Result<(), String> {
    if path.strip_prefix(dir).map_or(true, |rest| {
        rest.components()
            .any(|c| !matches!(c, Component::Normal(_)))
    }) {
        return Err(format!(
            "{} is not inside {}",
            path.display(),
            dir.display()
        ));
    }
    let Ok(root) = dir.canonicalize() else {
        return Ok(());
    };
    let existing = path
        .ancestors()
        .find(|a| a.symlink_metadata().is_ok())
        .unwrap_or(dir);
    let resolved = existing
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", existing.display()))?;
    if resolved.starts_with(&root) {
        Ok(())
    } else {
        Err(format!(
            "{} leads to {}, outside {}",
            existing.display(),
            resolved.display(),
            dir.display()
        ))
    }
}

/// `value` cut to about 200 characters for an error message, with how much was left out.
pub fn cut(value: &str) -> String {
    const KEEP: usize = 200;
    match value.char_indices().nth(KEEP) {
        None => value.to_owned(),
        Some((at, _)) => format!("{}… ({} bytes in all)", &value[..at], value.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder under the system temp dir, removed when dropped.
    struct Temp(PathBuf);
    impl Temp {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("sm-paths-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn names_are_plain_file_names() {
        for good in ["lifecycle", "a.b-c_d", "X9"] {
            assert_eq!(unsafe_name(good), None, "{good}");
        }
        for bad in [
            "",
            "../escape",
            ".hidden",
            "a/b",
            "a\\b",
            "a b",
            "é",
            &"x".repeat(101),
        ] {
            assert!(unsafe_name(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn joined_paths_stay_inside() {
        let dir = Temp::new("joined");
        let path = inside(dir.path(), &["e2b", "lifecycle.yaml"]).unwrap();
        assert_eq!(path, dir.path().join("e2b").join("lifecycle.yaml"));
        assert!(inside(dir.path(), &["e2b", "../x.yaml"]).is_err());
        assert!(inside(dir.path(), &["..", "x.yaml"]).is_err());
        assert!(check_inside(dir.path(), &dir.path().join("../x")).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_of_the_folder_is_refused() {
        let dir = Temp::new("link");
        let outside = Temp::new("outside");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("e2b")).unwrap();
        let e = inside(dir.path(), &["e2b", "lifecycle.yaml"]).unwrap_err();
        assert!(e.contains("outside"), "{e}");
    }

    #[test]
    fn long_values_are_cut() {
        let long = "y".repeat(50_000);
        let shown = cut(&long);
        assert!(
            shown.len() < 300 && shown.contains("50000 bytes"),
            "{shown}"
        );
        assert_eq!(cut("short"), "short");
    }
}
