//! Runs registered where every sweep on this machine looks, whatever folder they write
//! their reports to: one file per run, `<dir>/<run-id>.json`, naming the run's process and
//! its ledger. A run registers before it creates anything and removes its file once its
//! cleanup is done; a killed run's file stays, and names the ledger `sweep` then reads.
//! An age sweep leaves alone every run whose registered process is alive.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::run::ledger::Owner;

/// The environment variable naming the folder; unset, [`default_dir`].
pub const RUNS_DIR_VAR: &str = "SANDBOX_MATRIX_RUNS_DIR";

/// The folder runs register in: [`RUNS_DIR_VAR`], else `sandbox-matrix-runs` in the
/// system's temporary folder, which every user of the machine can write to.
pub fn dir() -> PathBuf {
    std::env::var_os(RUNS_DIR_VAR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(default_dir)
}

/// `/tmp/sandbox-matrix-runs`, or its like under `TMPDIR`.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("sandbox-matrix-runs")
}

/// One run's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The run id.
    pub run_id: String,
    /// The run's process.
    pub owner: Owner,
    /// Its ledger, where the run writes it.
    pub ledger: PathBuf,
    /// When it started, RFC 3339.
    pub started_at: String,
}

/// A run's registration on disk; [`Registered::release`] removes it.
#[derive(Debug)]
pub struct Registered {
    path: PathBuf,
}

impl Registered {
    /// Registers run `run_id`, this process, whose ledger is `ledger`, in `dir`.
    pub fn register(dir: &Path, run_id: &str, ledger: &Path) -> Result<Self, String> {
        check_run_id(run_id)?;
        create_shared_dir(dir)?;
        let registration = Registration {
            run_id: run_id.to_owned(),
            owner: Owner::this_process(),
            ledger: std::path::absolute(ledger).unwrap_or_else(|_| ledger.to_owned()),
            started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        };
        let path = dir.join(format!("{run_id}.json"));
        let text = serde_json::to_string(&registration).expect("a registration is plain JSON");
        std::fs::write(&path, text)
            .map_err(|e| format!("cannot register the run at {}: {e}", path.display()))?;
        Ok(Self { path })
    }

    /// Removes the registration: the run ended and its cleanup ran.
    pub fn release(self) -> Result<(), String> {
        std::fs::remove_file(&self.path)
            .map_err(|e| format!("cannot remove {}: {e}", self.path.display()))
    }
}

/// Creates `dir` if missing, writable by every user (with the sticky bit, as `/tmp` is), so
/// that runs of several users on one engine register in one place.
fn create_shared_dir(dir: &Path) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| format!("cannot open {} to every user: {e}", dir.display()))?;
    }
    Ok(())
}

/// Refuses what is not a run id's shape as a file name: empty, a path, hidden.
pub fn check_run_id(run_id: &str) -> Result<(), String> {
    if run_id.is_empty() || run_id.contains(['/', '\\']) || run_id.starts_with('.') {
        return Err(format!(
            "`{run_id}` is not a run id (the folder names under reports/)"
        ));
    }
    Ok(())
}

/// Every registration in `dir`, and a warning for each file that is not one (it names the
/// file and what is wrong). A missing folder holds none.
pub fn read_all(dir: &Path) -> (Vec<Registration>, Vec<String>) {
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (found, warnings);
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for path in paths {
        match read(&path) {
            Ok(registration) => found.push(registration),
            Err(e) => warnings.push(e),
        }
    }
    (found, warnings)
}

/// The registration of run `run_id` in `dir`, if there is one.
pub fn find(dir: &Path, run_id: &str) -> Result<Option<Registration>, String> {
    check_run_id(run_id)?;
    let path = dir.join(format!("{run_id}.json"));
    if !path.is_file() {
        return Ok(None);
    }
    read(&path).map(Some)
}

/// Removes run `run_id`'s registration from `dir` (a swept run's, whose process is gone).
pub fn forget(dir: &Path, run_id: &str) -> Result<(), String> {
    check_run_id(run_id)?;
    let path = dir.join(format!("{run_id}.json"));
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

fn read(path: &Path) -> Result<Registration, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the run registration {}: {e}", path.display()))?;
    let registration: Registration = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not a run registration: {}",
            path.display(),
            sandbox_providers::tail(&e.to_string(), 200)
        )
    })?;
    let named = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if named != registration.run_id {
        return Err(format!(
            "{}: registers run {}, not the run its name says",
            path.display(),
            registration.run_id
        ));
    }
    Ok(registration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sm-live-runs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_registration_names_this_process_until_released() {
        let dir = temp("roundtrip");
        let ledger = dir.join("reports/r1/ledger.jsonl");
        let registered = Registered::register(&dir, "r1", &ledger).expect("registers");
        let found = find(&dir, "r1").expect("reads").expect("registered");
        assert_eq!(found.ledger, ledger);
        assert!(found.owner.alive(), "this test's process runs");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
            assert_eq!(mode & 0o7777, 0o1777, "every user can register");
        }
        registered.release().expect("released");
        assert_eq!(find(&dir, "r1").expect("reads"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_that_are_not_registrations_are_named_and_passed_over() {
        let dir = temp("bad");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("junk.json"), "{").expect("write");
        let registered =
            Registered::register(&dir, "r2", Path::new("/x/ledger.jsonl")).expect("registers");
        // A file whose name and content disagree is not trusted for either.
        std::fs::copy(dir.join("r2.json"), dir.join("r3.json")).expect("copy");
        let (found, warnings) = read_all(&dir);
        assert_eq!(
            found.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
            vec!["r2"]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings.iter().any(|w| w.contains("junk.json")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("r3.json") && w.contains("registers run r2")),
            "{warnings:?}"
        );
        assert!(find(&dir, "../r2").is_err(), "a path is not a run id");
        registered.release().expect("released");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
