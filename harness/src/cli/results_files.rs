//! The commands over the results.json files runs wrote: `merge`, `compare`, `gate` and
//! `report`.

use std::path::{Path, PathBuf};

use sandbox_matrix::model::results;
use sandbox_matrix::report::run_folder;
use sandbox_matrix::run::runner::new_run_id;

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED, EXIT_REPORT, host_name};

pub(super) fn merge(files: &[PathBuf], out: &Path) -> u8 {
    let merged = match sandbox_matrix::analyze::merge::merge(files, new_run_id(), host_name()) {
        Ok(merged) => merged,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    match run_folder::write_into(out, &merged, &[]) {
        Ok(()) => {
            eprintln!(
                "merged {} shard(s), {} scenario result(s) into {} (junit.xml, summary.md, results.json, report.html)",
                merged.provenance.shards.len(),
                merged.scenarios.len(),
                out.display()
            );
            EXIT_PASSED
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_REPORT
        }
    }
}

pub(super) fn compare(baseline: &Path, current: &Path) -> u8 {
    let loaded = results::load(baseline).and_then(|b| Ok((b, results::load(current)?)));
    match loaded {
        Ok((baseline, current)) => {
            match sandbox_matrix::analyze::compare::compare(&baseline, &current) {
                Ok(comparison) => {
                    print!("{}", sandbox_matrix::analyze::compare::render(&comparison));
                    EXIT_PASSED
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    EXIT_BAD_INPUT
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_BAD_INPUT
        }
    }
}

pub(super) fn gate(policy: &Path, path: &Path, baseline: Option<&Path>) -> u8 {
    use sandbox_matrix::analyze::gate::{Policy, gate, render};
    let inputs = (|| -> Result<_, String> {
        let policy = Policy::load(policy).map_err(|e| e.to_string())?;
        let current = results::load(path).map_err(|e| e.to_string())?;
        if current.scenarios.is_empty() && policy.variants.is_empty() {
            return Err(format!("{}: no results to gate", path.display()));
        }
        let baseline = match baseline {
            Some(b) if policy.regression_tolerance.is_none() => {
                return Err(format!(
                    "--baseline {} given, but the policy has no `regression` section to check it with",
                    b.display()
                ));
            }
            Some(b) => Some(results::load(b).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok((policy, current, baseline))
    })();
    let (policy, current, baseline) = match inputs {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let verdicts = gate(&policy, &current, baseline.as_ref());
    print!("{}", render(&verdicts));
    if verdicts.iter().all(|v| v.ships()) {
        EXIT_PASSED
    } else {
        EXIT_FAILED
    }
}

pub(super) fn html_report(out: &Path, path: &Path, history_args: &[PathBuf]) -> u8 {
    use sandbox_matrix::report::html::{HISTORY_RUNS, History, history_files, render};
    let current = match results::load(path) {
        Ok(current) => current,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let mut listing = Vec::new();
    let files: Vec<PathBuf> = history_args
        .iter()
        .flat_map(|arg| history_files(arg, &mut listing))
        .collect();
    let mut history = History::load(files, &current.provenance.run_id, usize::MAX);
    history.keep_newest(HISTORY_RUNS);
    history.warnings.splice(0..0, listing);
    for warning in &history.warnings {
        eprintln!("warning: {warning}");
    }
    match std::fs::write(out, render(&current, &history)) {
        Ok(()) => {
            eprintln!(
                "wrote {} ({} earlier run(s) in its history)",
                out.display(),
                history.runs.len()
            );
            EXIT_PASSED
        }
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", out.display());
            EXIT_REPORT
        }
    }
}
