//! Writes a run's folder: `results.json`, `junit.xml`, `summary.md`, and the `latest` link.

use std::path::{Path, PathBuf};

use sandbox_providers::Secret;

use crate::report;
use crate::results::RunResults;

/// Files a run writes into its folder.
pub const FILES: [&str; 3] = ["results.json", "junit.xml", "summary.md"];

/// Writes `results` to `<out>/<run-id>/` and points `<out>/latest` at it. Called after every
/// scenario, so a result already measured survives an interrupted run. Before returning it
/// checks that no file it wrote holds any of `secrets`' values.
pub fn write(out: &Path, results: &RunResults, secrets: &[Secret]) -> Result<PathBuf, String> {
    let dir = out.join(&results.provenance.run_id);
    write_into(&dir, results, secrets)?;
    let latest = out.join("latest");
    let _ = std::fs::remove_file(&latest);
    #[cfg(unix)]
    std::os::unix::fs::symlink(&results.provenance.run_id, &latest)
        .map_err(|e| format!("cannot link {}: {e}", latest.display()))?;
    Ok(dir)
}

/// Writes [`FILES`] for `results` into `dir`, creating it, and checks that none holds any of
/// `secrets`' values.
pub fn write_into(dir: &Path, results: &RunResults, secrets: &[Secret]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(results)
        .map_err(|e| format!("cannot serialize results: {e}"))?;
    let contents = [
        json + "\n",
        report::junit::render(results),
        report::table::render_summary(results),
    ];
    for (name, text) in FILES.iter().zip(&contents) {
        if let Some(secret) = secrets.iter().find(|s| text.contains(s.expose())) {
            return Err(format!(
                "refusing to write {name}: it would contain the value of {}",
                secret.name()
            ));
        }
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Appends the summary to `$GITHUB_STEP_SUMMARY` when CI sets it.
pub fn append_step_summary(results: &RunResults) -> Result<(), String> {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") else {
        return Ok(());
    };
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(report::table::render_summary(results).as_bytes()))
        .map_err(|e| {
            format!(
                "cannot append to GITHUB_STEP_SUMMARY ({}): {e}",
                Path::new(&path).display()
            )
        })
}
