//! Writes a run's folder: `results.json`, `junit.xml`, `summary.md`, `report.html`, and the
//! `latest` link.

use std::path::{Path, PathBuf};

use sandbox_providers::Secret;

use crate::model::results::RunResults;
use crate::report;
use crate::report::html::{HISTORY_RUNS, History};
use crate::report::self_scan;

/// Files a run writes into its folder.
pub const FILES: [&str; 4] = ["results.json", "junit.xml", "summary.md", "report.html"];

/// What [`write`] did.
#[derive(Debug)]
pub struct Written {
    /// The run's folder.
    pub dir: PathBuf,
    /// Earlier runs' results that `report.html`'s history skipped, each with why.
    pub warnings: Vec<String>,
}

/// Writes `results` to `<out>/<run-id>/` and points `<out>/latest` at it. Called after every
/// scenario, so a result already measured survives an interrupted run. Every form of
/// `secrets`' values is scrubbed from what it writes, and the whole run folder (ledger,
/// logs) is self-scanned ([`self_scan::scan`]); a hit is an error naming the file, after
/// the scrubbed reports are written.
///
/// `report.html`'s history is the newest [`HISTORY_RUNS`] other run folders in `out` (by
/// name, which starts with the run's UTC time) whose `results.json` can be read; one that
/// cannot is skipped with a warning, never an error.
pub fn write(out: &Path, results: &RunResults, secrets: &[Secret]) -> Result<Written, String> {
    let run_id = &results.provenance.run_id;
    // The run id can come from a results.json (merge, report): it names a folder in `out`.
    let dir = crate::paths::inside(out, &[run_id]).map_err(|e| format!("run id: {e}"))?;
    let history = History::load(earlier_runs(out, run_id), run_id, HISTORY_RUNS);
    let written = write_files(&dir, results, &history, secrets);
    // A self-scan hit still leaves the scrubbed reports written: they are the latest.
    if dir.join(FILES[0]).exists() {
        let latest = out.join("latest");
        let _ = std::fs::remove_file(&latest);
        #[cfg(unix)]
        std::os::unix::fs::symlink(run_id, &latest)
            .map_err(|e| format!("cannot link {}: {e}", latest.display()))?;
    }
    written?;
    Ok(Written {
        dir,
        warnings: history.warnings,
    })
}

/// The `results.json` of every run folder in `out` but `run_id`'s, newest name first.
fn earlier_runs(out: &Path, run_id: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Vec::new();
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name() != *run_id && entry.file_name() != "latest")
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path().join("results.json"))
        .filter(|path| path.exists())
        .collect();
    folders.sort_by(|a, b| b.cmp(a));
    folders
}

/// Writes [`FILES`] for `results` into `dir`, creating it, scrubbed of `secrets`, and
/// self-scans `dir`. `report.html` has no history.
pub fn write_into(dir: &Path, results: &RunResults, secrets: &[Secret]) -> Result<(), String> {
    write_files(dir, results, &History::default(), secrets)
}

fn write_files(
    dir: &Path,
    results: &RunResults,
    history: &History,
    secrets: &[Secret],
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(results)
        .map_err(|e| format!("cannot serialize results: {e}"))?;
    let contents = [
        json + "\n",
        report::junit::render(results),
        report::table::render_summary(results),
        report::html::render(results, history),
    ];
    let mut leaks = Vec::new();
    for (name, text) in FILES.iter().zip(&contents) {
        // Scrubbed before it is written, so that no credential reaches the disk even for
        // a moment; the hit still fails the run below.
        let (text, forms) = self_scan::scrub(text, secrets);
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        if !forms.is_empty() {
            leaks.push(self_scan::Hit { path, forms }.to_string());
        }
    }
    leaks.extend(
        self_scan::scan(&[dir], secrets)
            .iter()
            .map(ToString::to_string),
    );
    if leaks.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the run's own files held a credential: {}",
            leaks.join("; ")
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture::two_variants;

    #[test]
    fn report_html_shows_earlier_runs_and_skips_an_unreadable_one() {
        let out =
            std::env::temp_dir().join(format!("sm-run-folder-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let mut earlier = two_variants();
        earlier.provenance.run_id = "20251128T000000Z-aaaaaa".to_owned();
        earlier.provenance.started_at = "2025-11-28T00:00:00Z".to_owned();
        write(&out, &earlier, &[]).expect("the earlier run writes");
        let broken = out.join("20251128T120000Z-bbbbbb");
        std::fs::create_dir_all(&broken).expect("a folder");
        std::fs::write(broken.join("results.json"), "not json").expect("writes");
        std::fs::create_dir_all(out.join("not-a-run")).expect("a folder without results");

        let written = write(&out, &two_variants(), &[]);
        let page = written
            .as_ref()
            .ok()
            .and_then(|w| std::fs::read_to_string(w.dir.join("report.html")).ok());
        let latest = std::fs::read_link(out.join("latest"));
        let _ = std::fs::remove_dir_all(&out);
        let written = written.expect("a bad earlier file never fails the run");
        assert_eq!(written.warnings.len(), 1, "{:?}", written.warnings);
        assert!(
            written.warnings[0].contains("20251128T120000Z-bbbbbb/results.json"),
            "{}",
            written.warnings[0]
        );
        let page = page.expect("report.html is written");
        assert!(page.contains("<h2>History</h2>"));
        assert!(page.contains("run 20251128T000000Z-aaaaaa (2025-11-28T00:00:00Z)"));
        assert!(page.contains("20251128T120000Z-bbbbbb/results.json"));
        assert_eq!(
            latest.expect("latest links").to_str(),
            Some("20251129T121314Z-7f3a9c")
        );
    }
}
