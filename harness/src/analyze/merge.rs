//! Merges sharded runs (one `results.json` per CI job) into one run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::model::results::{
    self, LoadError, Provenance, RESULTS_SCHEMA_VERSION, ReplayPace, RunResults,
};

/// Why shards could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no results files to merge")]
    Empty,
    /// The shards declare different schema versions.
    #[error(
        "{}: schema_version is `{found}`, but {} is `{first}`: merge refuses mixed schema versions",
        path.display(),
        first_path.display()
    )]
    MixedVersions {
        /// The first file whose version differs.
        path: PathBuf,
        /// Its version.
        found: String,
        /// The first file.
        first_path: PathBuf,
        /// The first file's version.
        first: String,
    },
    /// Two files hold the same run (or one holds a run the other already merged): merging
    /// them would count its data twice.
    #[error(
        "{} and {} both hold run `{run_id}`: merge each shard once",
        first_path.display(),
        path.display()
    )]
    SameShard {
        /// The run id found twice.
        run_id: String,
        /// The file that holds it first.
        first_path: PathBuf,
        /// The file that holds it again.
        path: PathBuf,
    },
    /// Two files replayed one variant × scenario at different paces: an instant-pace
    /// replay times the harness, a recorded-pace one the recording, so their attempts are
    /// two measurements, never one.
    #[error(
        "{} replays {variant} × {scenario} at {pace} pace, but {} at {first} pace: merge refuses mixed paces (merge replays of one pace)",
        path.display(),
        first_path.display()
    )]
    MixedPaces {
        /// The variant.
        variant: String,
        /// The scenario.
        scenario: String,
        /// The file that replayed it first.
        first_path: PathBuf,
        /// Its pace there.
        first: ReplayPace,
        /// The file that replayed it at another pace.
        path: PathBuf,
        /// That pace.
        pace: ReplayPace,
    },
    /// A shard could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Reads `paths` and merges them into one run with id `run_id`, made on `host`.
///
/// The merged run's scenarios are every shard's, in the order of `paths`; repetitions are
/// renumbered per variant × scenario from 1 in that order, so that shards which each ran
/// repetitions 1..N stay distinct. Its provenance names this sandbox-matrix and the earliest
/// shard's start, and lists each shard's provenance (a shard that was itself merged
/// contributes its own shards).
pub fn merge(paths: &[PathBuf], run_id: String, host: String) -> Result<RunResults, MergeError> {
    let first_path = paths.first().ok_or(MergeError::Empty)?;
    let first = results::schema_version(first_path)?;
    for path in &paths[1..] {
        let found = results::schema_version(path)?;
        if found != first {
            return Err(MergeError::MixedVersions {
                path: path.clone(),
                found,
                first_path: first_path.clone(),
                first,
            });
        }
    }
    let shards = paths
        .iter()
        .map(|p| results::load(Path::new(p)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen: HashMap<String, &PathBuf> = HashMap::new();
    for (shard, path) in shards.iter().zip(paths) {
        let runs: Vec<&str> = if shard.provenance.shards.is_empty() {
            vec![&shard.provenance.run_id]
        } else {
            shard
                .provenance
                .shards
                .iter()
                .map(|s| s.run_id.as_str())
                .collect()
        };
        for id in runs {
            if let Some(first_path) = seen.insert(id.to_owned(), path) {
                return Err(MergeError::SameShard {
                    run_id: id.to_owned(),
                    first_path: first_path.clone(),
                    path: path.clone(),
                });
            }
        }
    }
    let mut paces: HashMap<(&str, &str), (ReplayPace, &PathBuf)> = HashMap::new();
    for (shard, path) in shards.iter().zip(paths) {
        for scenario in &shard.scenarios {
            let Some(pace) = scenario.source.pace() else {
                continue;
            };
            let key = (scenario.variant.as_str(), scenario.scenario.as_str());
            let (first, first_path) = *paces.entry(key).or_insert((pace, path));
            if first != pace {
                return Err(MergeError::MixedPaces {
                    variant: scenario.variant.clone(),
                    scenario: scenario.scenario.clone(),
                    first_path: first_path.clone(),
                    first,
                    path: path.clone(),
                    pace,
                });
            }
        }
    }
    Ok(combine(shards, run_id, host))
}

/// Combines runs already read, as [`merge`] describes.
fn combine(shards: Vec<RunResults>, run_id: String, host: String) -> RunResults {
    let started_at = shards
        .iter()
        .map(|s| s.provenance.started_at.clone())
        .min()
        .unwrap_or_default();
    let mut provenance = Provenance {
        run_id,
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        host,
        started_at,
        base: None,
        shards: Vec::new(),
        partition: None,
    };
    let mut scenarios = Vec::new();
    let mut orphans = Vec::new();
    let mut counts: HashMap<(String, String), u32> = HashMap::new();
    for mut shard in shards {
        orphans.append(&mut shard.orphans);
        if shard.provenance.shards.is_empty() {
            provenance.shards.push(shard.provenance);
        } else {
            provenance.shards.extend(shard.provenance.shards);
        }
        for mut scenario in shard.scenarios {
            let count = counts
                .entry((scenario.variant.clone(), scenario.scenario.clone()))
                .or_default();
            *count += 1;
            scenario.repetition = *count;
            scenarios.push(scenario);
        }
    }
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
        provenance,
        scenarios,
        orphans,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture::{run, scenario};

    /// Writes `text` to a fresh file named `name` in a per-test folder.
    fn file(test: &str, name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sm-merge-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writable");
        path
    }

    fn shard(run_id: &str, started_at: &str, variant: &str, reps: u32) -> RunResults {
        let mut results = run((1..=reps)
            .map(|repetition| crate::model::results::ScenarioResult {
                repetition,
                ..scenario(variant, "lifecycle")
            })
            .collect());
        results.provenance.run_id = run_id.to_owned();
        results.provenance.started_at = started_at.to_owned();
        results
    }

    fn json(results: &RunResults) -> String {
        serde_json::to_string(results).expect("serializes")
    }

    #[test]
    fn the_same_shard_twice_is_refused() {
        let a = shard("run-a", "2025-11-29T12:10:00Z", "docker", 2);
        let mut merged = shard("run-m", "2025-11-29T12:30:00Z", "docker", 2);
        merged.provenance.shards = vec![a.provenance.clone()];
        let paths = [
            file("twice", "a.json", &json(&a)),
            file("twice", "again.json", &json(&a)),
            file("twice", "merged.json", &json(&merged)),
        ];
        let e = merge(&paths[..2], "m".to_owned(), "ci".to_owned())
            .expect_err("the same file twice")
            .to_string();
        assert!(
            e.contains("both hold run `run-a`: merge each shard once"),
            "{e}"
        );
        let e = merge(
            &[paths[0].clone(), paths[2].clone()],
            "m".to_owned(),
            "ci".to_owned(),
        )
        .expect_err("a shard and a merge holding it")
        .to_string();
        assert!(
            e.contains("a.json and") && e.contains("merged.json both hold run `run-a`"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(paths[0].parent().expect("a folder"));
    }

    #[test]
    fn shards_keep_their_provenance_and_get_distinct_repetitions() {
        let a = shard("run-a", "2025-11-29T12:10:00Z", "docker", 2);
        let b = shard("run-b", "2025-11-29T12:05:00Z", "docker", 2);
        let mut c = shard("run-c", "2025-11-29T12:20:00Z", "e2b", 1);
        c.provenance.shards = vec![shard("run-d", "2025-11-29T12:00:00Z", "e2b", 1).provenance];
        let replayed =
            crate::report::fixture::replay_source(crate::model::results::ReplayPace::Instant);
        c.scenarios[0].source = replayed.clone();
        let paths = [
            file("keep", "a.json", &json(&a)),
            file("keep", "b.json", &json(&b)),
            file("keep", "c.json", &json(&c)),
        ];
        let merged = merge(&paths, "merged".to_owned(), "ci".to_owned()).expect("merges");
        let _ = std::fs::remove_dir_all(paths[0].parent().expect("a folder"));
        assert_eq!(merged.provenance.run_id, "merged");
        assert_eq!(merged.provenance.host, "ci");
        assert_eq!(merged.provenance.started_at, "2025-11-29T12:05:00Z");
        let shard_ids: Vec<&str> = merged
            .provenance
            .shards
            .iter()
            .map(|p| p.run_id.as_str())
            .collect();
        assert_eq!(shard_ids, ["run-a", "run-b", "run-d"]);
        let reps: Vec<(&str, u32)> = merged
            .scenarios
            .iter()
            .map(|s| (s.variant.as_str(), s.repetition))
            .collect();
        assert_eq!(
            reps,
            [
                ("docker", 1),
                ("docker", 2),
                ("docker", 3),
                ("docker", 4),
                ("e2b", 1)
            ]
        );
        let sources: Vec<&crate::model::results::Source> =
            merged.scenarios.iter().map(|s| &s.source).collect();
        assert_eq!(
            sources,
            [&crate::model::results::Source::Live; 4]
                .into_iter()
                .chain([&replayed])
                .collect::<Vec<_>>(),
            "each result keeps its mode and cassette"
        );
    }

    #[test]
    fn replays_at_two_paces_are_refused_naming_both_files() {
        use crate::model::results::ReplayPace;
        let at = |run_id: &str, pace: ReplayPace| {
            let mut shard = shard(run_id, "2025-11-29T12:10:00Z", "e2b", 1);
            shard.scenarios[0].source = crate::report::fixture::replay_source(pace);
            shard
        };
        let paths = [
            file(
                "paces",
                "instant.json",
                &json(&at("a", ReplayPace::Instant)),
            ),
            file(
                "paces",
                "recorded.json",
                &json(&at("b", ReplayPace::Recorded)),
            ),
            file(
                "paces",
                "instant-again.json",
                &json(&at("c", ReplayPace::Instant)),
            ),
        ];
        let error = merge(&paths[..2], "m".to_owned(), "h".to_owned())
            .expect_err("two paces")
            .to_string();
        assert_eq!(
            error,
            format!(
                "{} replays e2b × lifecycle at recorded pace, but {} at instant pace: merge refuses mixed paces (merge replays of one pace)",
                paths[1].display(),
                paths[0].display()
            )
        );
        let one_pace = [paths[0].clone(), paths[2].clone()];
        let merged = merge(&one_pace, "m".to_owned(), "h".to_owned()).expect("one pace merges");
        let _ = std::fs::remove_dir_all(paths[0].parent().expect("a folder"));
        assert_eq!(merged.scenarios.len(), 2);
    }

    #[test]
    fn mixed_schema_versions_are_refused_naming_the_file() {
        let a = file("mixed", "a.json", &json(&shard("a", "x", "docker", 1)));
        let b = file(
            "mixed",
            "b.json",
            r#"{"schema_version": "sandbox-matrix/results/v3", "scenarios": []}"#,
        );
        let error = merge(&[a.clone(), b.clone()], "m".to_owned(), "h".to_owned())
            .expect_err("refused")
            .to_string();
        let _ = std::fs::remove_dir_all(a.parent().expect("a folder"));
        assert_eq!(
            error,
            format!(
                "{}: schema_version is `sandbox-matrix/results/v3`, but {} is `sandbox-matrix/results/v2`: merge refuses mixed schema versions",
                b.display(),
                a.display()
            )
        );
    }

    #[test]
    fn a_broken_shard_is_named() {
        let a = file("broken", "a.json", &json(&shard("a", "x", "docker", 1)));
        let missing = a.with_file_name("missing.json");
        let error = merge(
            &[a.clone(), missing.clone()],
            "m".to_owned(),
            "h".to_owned(),
        )
        .expect_err("refused")
        .to_string();
        let _ = std::fs::remove_dir_all(a.parent().expect("a folder"));
        assert!(
            error.starts_with(&format!("cannot read {}", missing.display())),
            "{error}"
        );
        assert_eq!(
            merge(&[], "m".to_owned(), "h".to_owned())
                .expect_err("nothing")
                .to_string(),
            "no results files to merge"
        );
    }
}
