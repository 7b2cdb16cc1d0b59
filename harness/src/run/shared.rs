//! One build per variant × environment per run: the artifact the first scenario builds is
//! taken by the later scenarios of the run that build the same environment, and removed by
//! the cleanup of the last of them.
//!
//! Only planned uses share: the run plans, before its first scenario, how many scenarios
//! (repetitions included) of each live variant build each environment without `fresh:
//! true`; an environment built by a single scenario is not shared. Replayed and recorded
//! scenarios never share, since each cassette holds its own build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sandbox_providers::{Artifact, Resource};

use crate::run::scenario::{Scenario, StepKind};

/// An artifact a scenario built for the scenarios after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedArtifact {
    /// The artifact.
    pub artifact: Artifact,
    /// What the variant's delete removes for it.
    pub resource: Resource,
    /// The scenario whose build made it.
    pub built_in: String,
    /// What the variant did with the base's credential in that build.
    pub credential_use: Option<String>,
}

/// What a scenario's cleanup does with the shared artifact of its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtCleanup {
    /// The scenario shares nothing: clean up as usual.
    Nothing,
    /// Later scenarios still need the artifact: leave it in place.
    Keep {
        /// The artifact.
        shared: SharedArtifact,
        /// How many planned scenarios have yet to finish.
        remaining: usize,
    },
    /// This was the last scenario to need it (or the run was interrupted): remove it.
    Release(SharedArtifact),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    variant: String,
    environment: PathBuf,
}

#[derive(Debug)]
struct Entry {
    shared: Option<SharedArtifact>,
    remaining: usize,
}

/// The run's shared artifacts, keyed by variant and environment folder.
#[derive(Debug, Default)]
pub struct SharedBuilds {
    entries: Mutex<HashMap<Key, Entry>>,
}

impl SharedBuilds {
    /// Plans the uses of `variant`'s scenarios, in the order and number the run will
    /// start them: every scenario with a `build` step and without `fresh: true` counts once.
    pub fn plan<'a>(&self, variant: &str, scenarios: impl IntoIterator<Item = &'a Scenario>) {
        let mut counts: HashMap<Key, usize> = HashMap::new();
        for scenario in scenarios {
            if scenario.fresh || !scenario.steps.iter().any(|s| s.kind == StepKind::Build) {
                continue;
            }
            *counts
                .entry(key(variant, &scenario.environment))
                .or_default() += 1;
        }
        let mut entries = self.lock();
        for (key, remaining) in counts.into_iter().filter(|(_, n)| *n > 1) {
            entries.insert(
                key,
                Entry {
                    shared: None,
                    remaining,
                },
            );
        }
    }

    /// Whether `scenario` of `variant` takes part in sharing.
    pub fn planned(&self, variant: &str, scenario: &Scenario) -> bool {
        !scenario.fresh
            && self
                .lock()
                .contains_key(&key(variant, &scenario.environment))
    }

    /// The artifact an earlier scenario built for `scenario`, if any.
    pub fn take(&self, variant: &str, scenario: &Scenario) -> Option<SharedArtifact> {
        if scenario.fresh {
            return None;
        }
        self.lock()
            .get(&key(variant, &scenario.environment))
            .and_then(|e| e.shared.clone())
    }

    /// Offers what `scenario` built to the scenarios after it; ignored when it is not
    /// planned, or when another artifact is already shared.
    pub fn offer(&self, variant: &str, scenario: &Scenario, shared: SharedArtifact) {
        if scenario.fresh {
            return;
        }
        if let Some(entry) = self.lock().get_mut(&key(variant, &scenario.environment))
            && entry.shared.is_none()
        {
            entry.shared = Some(shared);
        }
    }

    /// Counts `scenario` as finished and says what its cleanup does with the shared
    /// artifact; with `interrupted`, the artifact is released whoever still planned to use
    /// it, since they will not run.
    pub fn finish(&self, variant: &str, scenario: &Scenario, interrupted: bool) -> AtCleanup {
        if scenario.fresh {
            return AtCleanup::Nothing;
        }
        let key = key(variant, &scenario.environment);
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(&key) else {
            return AtCleanup::Nothing;
        };
        entry.remaining = entry.remaining.saturating_sub(1);
        match (&entry.shared, entry.remaining) {
            (None, 0) => {
                entries.remove(&key);
                AtCleanup::Nothing
            }
            (None, _) => AtCleanup::Nothing,
            (Some(shared), remaining) if remaining > 0 && !interrupted => AtCleanup::Keep {
                shared: shared.clone(),
                remaining,
            },
            (Some(shared), _) => {
                let shared = shared.clone();
                entries.remove(&key);
                AtCleanup::Release(shared)
            }
        }
    }

    /// Takes every artifact of `variant` still shared: what the scenarios that did not
    /// run (the run stopped between scenarios) would have released.
    pub fn drain(&self, variant: &str) -> Vec<Resource> {
        let mut entries = self.lock();
        let keys: Vec<Key> = entries
            .keys()
            .filter(|k| k.variant == variant)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| entries.remove(&k)?.shared.map(|s| s.resource))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().expect("shared builds lock")
    }
}

/// Scenarios name their environment relative to their own file: the folder itself keys it.
fn key(variant: &str, environment: &Path) -> Key {
    Key {
        variant: variant.to_owned(),
        environment: std::fs::canonicalize(environment).unwrap_or_else(|_| environment.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(name: &str, environment: &str, fresh: bool) -> Scenario {
        let text = format!(
            "name: {name}\nenvironment: {environment}\nfresh: {fresh}\nsteps:\n  - step: build\n    budget: 1m\n"
        );
        Scenario::parse(Path::new("/nowhere/s.yaml"), &text).expect("scenario")
    }

    fn shared(built_in: &str) -> SharedArtifact {
        SharedArtifact {
            artifact: Artifact {
                id: "sha256:1".into(),
                kind: "image".into(),
            },
            resource: Resource {
                kind: "image".into(),
                id: "sha256:1".into(),
            },
            built_in: built_in.into(),
            credential_use: None,
        }
    }

    #[test]
    fn the_last_planned_scenario_releases_what_the_first_built() {
        let (a, b, c) = (
            scenario("a", "env", false),
            scenario("b", "env", false),
            scenario("c", "env", false),
        );
        let builds = SharedBuilds::default();
        builds.plan("docker", [&a, &b, &c]);
        assert_eq!(builds.take("docker", &a), None);
        builds.offer("docker", &a, shared("a"));
        let keep = builds.finish("docker", &a, false);
        assert!(matches!(keep, AtCleanup::Keep { remaining: 2, .. }));
        assert_eq!(
            builds.take("docker", &b).map(|s| s.built_in),
            Some("a".into())
        );
        builds.offer("docker", &b, shared("b"));
        assert_eq!(
            builds.take("docker", &c).map(|s| s.built_in),
            Some("a".into())
        );
        assert!(matches!(
            builds.finish("docker", &b, false),
            AtCleanup::Keep { remaining: 1, .. }
        ));
        assert!(matches!(
            builds.finish("docker", &c, false),
            AtCleanup::Release(_)
        ));
        assert!(builds.drain("docker").is_empty());
    }

    #[test]
    fn fresh_single_and_other_variants_do_not_share() {
        let (a, b, f, lone) = (
            scenario("a", "env", false),
            scenario("b", "env", false),
            scenario("f", "env", true),
            scenario("lone", "other", false),
        );
        let builds = SharedBuilds::default();
        builds.plan("docker", [&a, &b, &f, &lone]);
        assert!(!builds.planned("docker", &f));
        assert!(!builds.planned("docker", &lone));
        assert!(!builds.planned("e2b", &a));
        builds.offer("docker", &a, shared("a"));
        assert_eq!(builds.take("docker", &f), None);
        assert_eq!(builds.take("e2b", &b), None);
        assert_eq!(builds.finish("docker", &f, false), AtCleanup::Nothing);
    }

    #[test]
    fn an_interruption_releases_at_once_and_drain_takes_what_is_left() {
        let (a, b, c) = (
            scenario("a", "env", false),
            scenario("b", "env", false),
            scenario("c", "env", false),
        );
        let builds = SharedBuilds::default();
        builds.plan("docker", [&a, &b, &c]);
        builds.offer("docker", &a, shared("a"));
        assert!(matches!(
            builds.finish("docker", &a, true),
            AtCleanup::Release(_)
        ));
        assert_eq!(builds.take("docker", &b), None);

        builds.plan("docker", [&a, &b]);
        builds.offer("docker", &a, shared("a"));
        assert!(matches!(
            builds.finish("docker", &a, false),
            AtCleanup::Keep { .. }
        ));
        assert_eq!(builds.drain("docker").len(), 1);
        assert_eq!(builds.take("docker", &b), None);
    }

    #[test]
    fn a_failed_first_build_leaves_the_next_scenario_to_build() {
        let (a, b) = (scenario("a", "env", false), scenario("b", "env", false));
        let builds = SharedBuilds::default();
        builds.plan("docker", [&a, &b]);
        assert_eq!(builds.finish("docker", &a, false), AtCleanup::Nothing);
        assert_eq!(builds.take("docker", &b), None);
        builds.offer("docker", &b, shared("b"));
        assert!(matches!(
            builds.finish("docker", &b, false),
            AtCleanup::Release(_)
        ));
    }
}
