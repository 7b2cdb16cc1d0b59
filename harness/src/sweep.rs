//! `sweep`: removes what runs that are gone left behind, and nothing of a run still going.
//!
//! A sweep finds its runs in two places: the ledgers under the reports folder it is given,
//! and the runs registered on this machine ([`crate::run::live_runs`]), wherever they write.
//! For each variant it then, in order:
//! 1. settles the BuildKit builds a run's ledger names as started and not ended: the engine
//!    goes on with a build its client left, and commits its image seconds later, so the
//!    sweep cancels each and waits for the engine's builds to end before it lists anything;
//! 2. lists what carries the run's label, adds what the ledger names, and removes it all,
//!    containers before images, listing again until a round finds nothing;
//! 3. without `--run`, also removes labelled resources older than `--older-than`, except
//!    those of a run whose process is alive, which it names as left alone.
//!
//! It counts only what it removed; what was gone already is said as such.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sandbox_providers::docker::BUILD_RESOURCE;
use sandbox_providers::{Deleted, ErrorKind, Provider, Resource};

use crate::run::ledger::{LEDGER_FILE, LedgerView, Owner, record_swept};
use crate::run::live_runs::{self, Registration};
use crate::run::variants;

/// What a sweep takes.
#[derive(Debug, Clone)]
pub enum Scope {
    /// One run, by id: everything carrying its run label and everything its ledger names.
    Run {
        /// The run id.
        id: String,
        /// Sweep it even though its process is alive.
        force: bool,
    },
    /// Every run whose process is gone before it finished, and labelled resources older
    /// than `older_than`, of runs that are not alive.
    Gone {
        /// The age past which a labelled resource of no live run is removed.
        older_than: Duration,
        /// `older_than` as the user gave it, for messages.
        shown: String,
    },
}

/// Where a sweep looks and what it does.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The reports folder holding run ledgers.
    pub out: PathBuf,
    /// The folder runs register in ([`live_runs::dir`]).
    pub runs_dir: PathBuf,
    /// List only.
    pub dry_run: bool,
    /// The variants named with `--variant`; empty, the sweep chooses (see [`sweep`]).
    pub variants: Vec<String>,
}

/// A variant's provider as a sweep reaches it.
pub struct Reached {
    /// The provider that lists and deletes.
    pub provider: Arc<dyn Provider>,
    /// Said once before sweeping the variant, such as how it was reached.
    pub note: Option<String>,
    /// For a resource the ledger names that this provider does not remove (the datalayer
    /// variant's pushed manifests, without its registry configured): `Ok` with why it went
    /// with the run, or `Err` with why it stays, which fails the sweep. `None` for the rest.
    pub elsewhere: Option<Elsewhere>,
}

/// See [`Reached::elsewhere`].
pub type Elsewhere = Box<dyn Fn(&Resource) -> Option<Result<String, String>> + Send + Sync>;

/// How a sweep reaches each variant's provider.
#[async_trait]
pub trait Connect: Send + Sync {
    /// The provider of `variant`, or why it cannot be reached.
    async fn connect(&self, variant: &str) -> Result<Reached, String>;
}

/// Where a line goes: what was done, or a note about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// Standard output: each resource removed, or that would be.
    Out,
    /// Standard error: notes, warnings and errors.
    Err,
}

/// How a sweep ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Everything found was removed (or, in a dry run, listed).
    Clean,
    /// Something could not be removed, settled, listed or read; the lines say what.
    Failed,
    /// Bad input: the sweep did nothing.
    BadInput(String),
    /// `--run` named a run whose process is alive, without `--force`: nothing done.
    Refused(String),
}

/// A run the sweep takes, with its ledger (and where it is) and registration where it has
/// them.
struct Target {
    id: String,
    ledger: Option<(PathBuf, LedgerView)>,
    registration: Option<Registration>,
}

impl Target {
    fn view(&self) -> Option<&LedgerView> {
        self.ledger.as_ref().map(|(_, view)| view)
    }
}

/// One resource found to remove.
struct Found {
    run_id: String,
    scenario: String,
    resource: Resource,
    /// Named by the ledger alone, not listed under the run label.
    ledger_only: bool,
}

/// What a sweep did to one run.
#[derive(Default)]
struct Tally {
    removed: usize,
    already_gone: usize,
    would_remove: usize,
}

/// Sweeps as `scope` says, reaching providers through `connect` and saying each line to
/// `say`. Without `--variant`, a sweep of one run whose ledger names its variants sweeps
/// those alone; otherwise every known variant, passing over one it cannot reach.
pub async fn sweep(
    scope: &Scope,
    options: &SweepOptions,
    connect: &dyn Connect,
    say: &(dyn Fn(To, &str) + Sync),
) -> Ended {
    let mut failed = false;
    let (targets, live) = match find_targets(scope, options, say, &mut failed) {
        Ok(found) => found,
        Err(ended) => return ended,
    };
    let explicit = !options.variants.is_empty();
    let variant_names: Vec<String> = if explicit {
        options.variants.clone()
    } else {
        match (scope, targets.first().and_then(Target::view)) {
            (Scope::Run { id, .. }, Some(view)) => {
                // What an emulated variant made is on this engine, labelled with the run:
                // the docker variant's sweep finds it by that label, with no credential.
                let emulated = view.emulated();
                let mut named: Vec<String> = view
                    .variants()
                    .into_iter()
                    .filter(|v| !emulated.contains(v))
                    .collect();
                if !emulated.is_empty() {
                    say(
                        To::Err,
                        &format!(
                            "run {id}: {} ran against emulators on this engine; sweeping what they made there",
                            emulated.into_iter().collect::<Vec<_>>().join(", ")
                        ),
                    );
                    if !named.iter().any(|v| v == "docker") {
                        named.push("docker".to_owned());
                    }
                }
                if named.is_empty() {
                    say(
                        To::Err,
                        &format!("run {id}: its ledger names nothing it created"),
                    );
                }
                named
            }
            _ => variants::known().into_iter().map(str::to_owned).collect(),
        }
    };
    let mut tallies: BTreeMap<String, Tally> = targets
        .iter()
        .map(|t| (t.id.clone(), Tally::default()))
        .collect();
    let mut left_alone: BTreeMap<String, String> = BTreeMap::new();
    for name in &variant_names {
        let reached = match connect.connect(name).await {
            Ok(reached) => reached,
            Err(e) if explicit => {
                say(To::Err, &format!("error: cannot sweep {name}: {e}"));
                return Ended::BadInput(format!("cannot sweep {name}"));
            }
            Err(e) => {
                say(To::Err, &format!("{name}: not swept: {e}"));
                continue;
            }
        };
        if let Some(note) = &reached.note {
            say(To::Err, &format!("{name}: {note}"));
        }
        let mut variant = VariantSweep {
            name,
            reached: &reached,
            dry_run: options.dry_run,
            say,
            failed: false,
        };
        variant.settle_builds(&targets).await;
        variant
            .remove(scope, &targets, &live, &mut tallies, &mut left_alone)
            .await;
        failed |= variant.failed;
    }
    for target in &targets {
        let scratch = variants::run_scratch(&target.id);
        if scratch.exists() {
            if options.dry_run {
                say(
                    To::Out,
                    &format!("run {}: would remove {}", target.id, scratch.display()),
                );
            } else if let Err(e) = std::fs::remove_dir_all(&scratch) {
                say(
                    To::Err,
                    &format!(
                        "run {}: could not remove {}: {e}",
                        target.id,
                        scratch.display()
                    ),
                );
                failed = true;
            } else {
                say(
                    To::Out,
                    &format!("run {}: removed {}", target.id, scratch.display()),
                );
            }
        }
        let alive = target
            .registration
            .as_ref()
            .is_some_and(|r| r.owner.alive());
        if options.dry_run || failed || alive {
            continue;
        }
        if let Some((path, view)) = &target.ledger
            && !view.finished()
            && !view.swept()
            && let Err(e) = record_swept(path)
        {
            say(To::Err, &format!("warning: {e}"));
        }
        if target.registration.is_some()
            && let Err(e) = live_runs::forget(&options.runs_dir, &target.id)
        {
            say(To::Err, &format!("warning: {e}"));
        }
    }
    for (id, why) in &left_alone {
        say(To::Err, &format!("run {id}: left alone: {why}"));
    }
    if let Scope::Gone { shown, .. } = scope
        && tallies.is_empty()
        && left_alone.is_empty()
    {
        say(
            To::Err,
            &format!(
                "no run to sweep: no run whose process is gone left a ledger or a registration, and no labelled resource is older than {shown}"
            ),
        );
    }
    for (id, tally) in &tallies {
        say(
            To::Err,
            &format!("run {id}: {}", tally.describe(options.dry_run)),
        );
    }
    if failed { Ended::Failed } else { Ended::Clean }
}

impl Tally {
    fn describe(&self, dry_run: bool) -> String {
        if dry_run {
            return format!(
                "dry run: {} resource(s) would be removed",
                self.would_remove
            );
        }
        let mut text = format!("{} resource(s) removed", self.removed);
        if self.already_gone > 0 {
            text.push_str(&format!(
                ", {} named in its ledger already gone",
                self.already_gone
            ));
        }
        text
    }
}

/// The runs to sweep, and the live runs an age sweep leaves alone (by id, with why).
fn find_targets(
    scope: &Scope,
    options: &SweepOptions,
    say: &(dyn Fn(To, &str) + Sync),
    failed: &mut bool,
) -> Result<(Vec<Target>, BTreeMap<String, String>), Ended> {
    match scope {
        Scope::Run { id, force } => {
            live_runs::check_run_id(id).map_err(Ended::BadInput)?;
            let registration = match live_runs::find(&options.runs_dir, id) {
                Ok(found) => found,
                Err(e) => {
                    say(To::Err, &format!("warning: {e}"));
                    None
                }
            };
            let under_out = options.out.join(id).join(LEDGER_FILE);
            let path = if under_out.is_file() {
                Some(under_out.clone())
            } else {
                registration
                    .as_ref()
                    .map(|r| r.ledger.clone())
                    .filter(|p| p.is_file())
            };
            let ledger = match &path {
                Some(path) => Some((
                    path.clone(),
                    LedgerView::read(path).map_err(Ended::BadInput)?,
                )),
                None => {
                    say(
                        To::Err,
                        &format!(
                            "run {id}: no ledger at {}{}; sweeping by its run label alone",
                            under_out.display(),
                            registration
                                .as_ref()
                                .map(|r| format!(" or {}", r.ledger.display()))
                                .unwrap_or_default()
                        ),
                    );
                    None
                }
            };
            let running = ledger
                .as_ref()
                .map(|(_, view)| view)
                .filter(|v| !v.finished())
                .and_then(LedgerView::owner)
                .filter(Owner::alive)
                .or_else(|| {
                    registration
                        .as_ref()
                        .map(|r| r.owner.clone())
                        .filter(Owner::alive)
                });
            if let Some(owner) = running {
                let why = format!(
                    "run {id} is still running (process {}{})",
                    owner.pid,
                    path.as_ref()
                        .map(|p| format!(", ledger {}", p.display()))
                        .unwrap_or_default()
                );
                if !*force {
                    return Err(Ended::Refused(format!(
                        "{why}: not swept (--force sweeps it anyway)"
                    )));
                }
                say(To::Err, &format!("{why}: swept anyway, as --force asks"));
            }
            Ok((
                vec![Target {
                    id: id.clone(),
                    ledger,
                    registration,
                }],
                BTreeMap::new(),
            ))
        }
        Scope::Gone { .. } => {
            let mut targets: BTreeMap<String, Target> = BTreeMap::new();
            let mut live: BTreeMap<String, String> = BTreeMap::new();
            let mut ledgers: Vec<PathBuf> = std::fs::read_dir(&options.out)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path().join(LEDGER_FILE))
                .filter(|p| p.is_file())
                .collect();
            ledgers.sort();
            let (registrations, warnings) = live_runs::read_all(&options.runs_dir);
            for warning in warnings {
                say(To::Err, &format!("warning: {warning}; passed over"));
            }
            let mut registered: BTreeMap<String, Registration> = BTreeMap::new();
            for registration in registrations {
                if !ledgers.contains(&registration.ledger) && registration.ledger.is_file() {
                    ledgers.push(registration.ledger.clone());
                }
                registered.insert(registration.run_id.clone(), registration);
            }
            for path in ledgers {
                let view = match LedgerView::read(&path) {
                    Ok(view) => view,
                    Err(e) => {
                        say(
                            To::Err,
                            &format!("error: {e}: that run is not swept; fix or remove the file"),
                        );
                        *failed = true;
                        continue;
                    }
                };
                let Some(id) = view.run_id().map(str::to_owned).or_else(|| {
                    path.parent()
                        .and_then(Path::file_name)
                        .map(|n| n.to_string_lossy().into_owned())
                }) else {
                    continue;
                };
                if view.finished() || view.swept() {
                    // A run that ended (or was swept) but whose registration stayed.
                    if !options.dry_run
                        && registered.remove(&id).is_some()
                        && let Err(e) = live_runs::forget(&options.runs_dir, &id)
                    {
                        say(To::Err, &format!("warning: {e}"));
                    }
                    continue;
                }
                if let Some(owner) = view.owner().filter(Owner::alive) {
                    live.insert(
                        id,
                        format!(
                            "its process {} is alive (ledger {})",
                            owner.pid,
                            path.display()
                        ),
                    );
                    continue;
                }
                let registration = registered.remove(&id);
                targets.insert(
                    id.clone(),
                    Target {
                        id,
                        ledger: Some((path, view)),
                        registration,
                    },
                );
            }
            // Registered runs whose ledger is gone: alive, left alone; dead, swept by label.
            for (id, registration) in registered {
                if targets.contains_key(&id) || live.contains_key(&id) {
                    continue;
                }
                if registration.owner.alive() {
                    live.insert(
                        id,
                        format!(
                            "its process {} is alive (registered, ledger {})",
                            registration.owner.pid,
                            registration.ledger.display()
                        ),
                    );
                } else if !registration.ledger.exists() {
                    targets.insert(
                        id.clone(),
                        Target {
                            id,
                            ledger: None,
                            registration: Some(registration),
                        },
                    );
                }
            }
            Ok((targets.into_values().collect(), live))
        }
    }
}

/// One variant's part of a sweep.
struct VariantSweep<'a> {
    name: &'a str,
    reached: &'a Reached,
    dry_run: bool,
    say: &'a (dyn Fn(To, &str) + Sync),
    failed: bool,
}

impl VariantSweep<'_> {
    /// Cancels each BuildKit build a target's ledger names as started and not ended, and
    /// waits for the engine to end it, before anything is listed.
    async fn settle_builds(&mut self, targets: &[Target]) {
        for target in targets {
            let Some(view) = target.view() else { continue };
            for build in view
                .outstanding(self.name)
                .into_iter()
                .filter(|o| o.resource.kind == BUILD_RESOURCE)
            {
                let prefix = format!("run {}: {}::{}", target.id, self.name, build.scenario);
                let what = format!("BuildKit build {}", build.resource.id);
                if self.dry_run {
                    (self.say)(
                        To::Out,
                        &format!("{prefix}: would cancel {what} and wait for its end"),
                    );
                    continue;
                }
                match self.reached.provider.delete_resource(&build.resource).await {
                    Ok(done) => (self.say)(To::Out, &format!("{prefix}: {what}: {done}")),
                    Err(e) => {
                        (self.say)(To::Err, &format!("{prefix}: {what}: {e}"));
                        self.failed = true;
                    }
                }
            }
        }
    }

    /// Lists and removes, round after round until one finds nothing labelled.
    async fn remove(
        &mut self,
        scope: &Scope,
        targets: &[Target],
        live: &BTreeMap<String, String>,
        tallies: &mut BTreeMap<String, Tally>,
        left_alone: &mut BTreeMap<String, String>,
    ) {
        for round in 0..3 {
            let mut found: Vec<Found> = Vec::new();
            let mut labelled = 0;
            for target in targets {
                match self.list(&target.id, target.view()).await {
                    Ok(list) => {
                        labelled += list.len();
                        found.extend(list);
                    }
                    Err(e) => {
                        (self.say)(
                            To::Err,
                            &format!(
                                "{}: cannot list run {}'s resources: {e}",
                                self.name, target.id
                            ),
                        );
                        self.failed = true;
                    }
                }
                if round > 0 {
                    continue;
                }
                let Some(view) = target.view() else { continue };
                for o in view.outstanding(self.name) {
                    if o.resource.kind == BUILD_RESOURCE
                        || found.iter().any(|f| f.resource == o.resource)
                    {
                        continue;
                    }
                    if let Some(elsewhere) =
                        self.reached.elsewhere.as_ref().and_then(|f| f(&o.resource))
                    {
                        let prefix = format!(
                            "run {}: {}::{}: {} {}",
                            target.id, self.name, o.scenario, o.resource.kind, o.resource.id
                        );
                        match elsewhere {
                            Ok(why) => (self.say)(To::Err, &format!("{prefix}: {why}")),
                            Err(why) => {
                                (self.say)(To::Err, &format!("{prefix}: not removed: {why}"));
                                self.failed = true;
                            }
                        }
                        continue;
                    }
                    found.push(Found {
                        run_id: target.id.clone(),
                        scenario: o.scenario,
                        resource: o.resource,
                        ledger_only: true,
                    });
                }
            }
            if let (Scope::Gone { older_than, shown }, 0) = (scope, round) {
                labelled += self
                    .aged(*older_than, shown, live, &mut found, tallies, left_alone)
                    .await;
            }
            if found.is_empty() {
                break;
            }
            // Containers before the images they run.
            found.sort_by_key(|f| f.resource.kind != "container");
            for f in found {
                self.remove_one(f, tallies).await;
            }
            if self.dry_run || labelled == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn remove_one(&mut self, f: Found, tallies: &mut BTreeMap<String, Tally>) {
        let prefix = format!("run {}: {}::{}", f.run_id, self.name, f.scenario);
        let what = format!("{} {}", f.resource.kind, f.resource.id);
        let tally = tallies.entry(f.run_id.clone()).or_default();
        if self.dry_run {
            if f.ledger_only {
                (self.say)(
                    To::Out,
                    &format!(
                        "{prefix}: {what}: named in the run's ledger, not listed under its label; would be deleted if it is there"
                    ),
                );
            } else {
                tally.would_remove += 1;
                (self.say)(To::Out, &format!("{prefix}: would remove {what}"));
            }
            return;
        }
        match self.reached.provider.delete_resource(&f.resource).await {
            Ok(Deleted::Removed) => {
                tally.removed += 1;
                (self.say)(To::Out, &format!("{prefix}: removed {what}"));
            }
            Ok(Deleted::AlreadyGone) => {
                tally.already_gone += 1;
                (self.say)(To::Out, &format!("{prefix}: {what}: already gone"));
            }
            Ok(Deleted::Settled(how)) => {
                (self.say)(To::Out, &format!("{prefix}: {what}: {how}"));
            }
            Err(e) => {
                (self.say)(To::Err, &format!("{prefix}: could not remove {what}: {e}"));
                self.failed = true;
            }
        }
    }

    /// What carries run `run_id`'s label: by the run label alone where the variant lists
    /// so, else by every scenario its ledger names for this variant.
    async fn list(&self, run_id: &str, view: Option<&LedgerView>) -> Result<Vec<Found>, String> {
        let provider = &self.reached.provider;
        match provider.list_labelled(Some(run_id)).await {
            Ok(list) => {
                return Ok(list
                    .into_iter()
                    .map(|l| Found {
                        run_id: run_id.to_owned(),
                        scenario: l.scenario.unwrap_or_else(|| "?".to_owned()),
                        resource: l.resource,
                        ledger_only: false,
                    })
                    .collect());
            }
            Err(e) if e.kind == ErrorKind::Unsupported => {}
            Err(e) => return Err(e.to_string()),
        }
        let scenarios: BTreeSet<String> = view
            .map(|v| {
                v.scenarios()
                    .into_iter()
                    .filter(|(v, _)| v == self.name)
                    .map(|(_, s)| s)
                    .collect()
            })
            .unwrap_or_default();
        let mut found = Vec::new();
        for scenario in scenarios {
            let labels = sandbox_providers::RunLabels {
                run_id: run_id.to_owned(),
                variant: provider.variant().to_owned(),
                scenario: scenario.clone(),
            };
            for resource in provider
                .list_resources(&labels)
                .await
                .map_err(|e| format!("{scenario}: {e}"))?
            {
                found.push(Found {
                    run_id: run_id.to_owned(),
                    scenario: scenario.clone(),
                    resource,
                    ledger_only: false,
                });
            }
        }
        Ok(found)
    }

    /// Adds to `found` the labelled resources older than `older_than` of runs not alive;
    /// returns how many were listed. Those of a live run are left alone and named; those
    /// the provider gives no creation time are named and fail the sweep.
    async fn aged(
        &mut self,
        older_than: Duration,
        shown: &str,
        live: &BTreeMap<String, String>,
        found: &mut Vec<Found>,
        tallies: &mut BTreeMap<String, Tally>,
        left_alone: &mut BTreeMap<String, String>,
    ) -> usize {
        let all = match self.reached.provider.list_labelled(None).await {
            Ok(all) => all,
            Err(e) => {
                (self.say)(
                    To::Err,
                    &format!(
                        "{}: labelled resources older than {shown} not listed: {e}",
                        self.name
                    ),
                );
                if e.kind != ErrorKind::Unsupported {
                    self.failed = true;
                }
                return 0;
            }
        };
        let now = SystemTime::now();
        let mut listed = 0;
        for l in all {
            if found.iter().any(|f| f.resource == l.resource) {
                continue;
            }
            if let Some(why) = live.get(&l.run_id) {
                left_alone.insert(l.run_id.clone(), why.clone());
                continue;
            }
            let Some(created) = l.created else {
                (self.say)(
                    To::Err,
                    &format!(
                        "run {}: {}: {} {} has no creation time the provider gives: not aged (sweep it with --run {})",
                        l.run_id, self.name, l.resource.kind, l.resource.id, l.run_id
                    ),
                );
                self.failed = true;
                continue;
            };
            if now.duration_since(created).unwrap_or_default() < older_than {
                continue;
            }
            listed += 1;
            tallies.entry(l.run_id.clone()).or_default();
            found.push(Found {
                run_id: l.run_id,
                scenario: l.scenario.unwrap_or_else(|| "?".to_owned()),
                resource: l.resource,
                ledger_only: false,
            });
        }
        listed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sandbox_providers::{
        Artifact, BuildRequest, Capabilities, CodeOutput, CommandOutput, Labelled, LogFn,
        ProviderError, Result, RunLabels, SandboxId, ShutdownReport, Timing,
    };

    use super::*;
    use crate::run::ledger::{Ledger, Record};

    /// An engine as a sweep sees it: labelled resources, and BuildKit builds that commit
    /// an image when they end.
    #[derive(Default)]
    struct Engine {
        labelled: Mutex<Vec<Labelled>>,
        /// What each build commits once it ends (the sweep's cancel and wait).
        commits: Mutex<Vec<(String, Labelled)>>,
        calls: Mutex<Vec<String>>,
    }

    fn labelled(run_id: &str, kind: &str, id: &str, age: Option<Duration>) -> Labelled {
        Labelled {
            resource: Resource {
                kind: kind.into(),
                id: id.into(),
            },
            run_id: run_id.into(),
            scenario: Some("lifecycle".into()),
            created: age.map(|a| SystemTime::now() - a),
        }
    }

    impl Engine {
        fn holds(&self) -> Vec<String> {
            self.labelled
                .lock()
                .unwrap()
                .iter()
                .map(|l| l.resource.id.clone())
                .collect()
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }

        /// Adds what the engine holds.
        fn add(&self, held: impl IntoIterator<Item = Labelled>) {
            self.labelled.lock().unwrap().extend(held);
        }
    }

    #[async_trait]
    impl Provider for Engine {
        fn variant(&self) -> &str {
            "docker"
        }

        fn capabilities(&self) -> Capabilities {
            variants::capabilities("docker").expect("docker is known")
        }

        async fn build(&self, _: &BuildRequest, _: &LogFn) -> Result<Artifact> {
            unreachable!("a sweep builds nothing")
        }

        async fn launch(&self, _: &Artifact, _: &RunLabels) -> Result<(SandboxId, Vec<Timing>)> {
            unreachable!("a sweep launches nothing")
        }

        async fn run_code(&self, _: &SandboxId, _: &str) -> Result<(CodeOutput, Vec<Timing>)> {
            unreachable!("a sweep runs no code")
        }

        async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
            unreachable!("a sweep runs no command")
        }

        async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
            unreachable!("a sweep restarts nothing")
        }

        async fn shutdown(&self, _: &SandboxId, _: Duration) -> Result<ShutdownReport> {
            unreachable!("a sweep shuts nothing down")
        }

        async fn artifact_metadata(&self, _: &Artifact) -> Result<String> {
            unreachable!("a sweep reads no metadata")
        }

        async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
            Err(ProviderError::unsupported("list by three labels"))
        }

        async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("list {}", run_id.unwrap_or("*")));
            Ok(self
                .labelled
                .lock()
                .unwrap()
                .iter()
                .filter(|l| run_id.is_none_or(|id| l.run_id == id))
                .cloned()
                .collect())
        }

        async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("delete {} {}", resource.kind, resource.id));
            if resource.kind == BUILD_RESOURCE {
                let mut commits = self.commits.lock().unwrap();
                let (ended, going): (Vec<_>, Vec<_>) =
                    commits.drain(..).partition(|(b, _)| *b == resource.id);
                *commits = going;
                self.labelled
                    .lock()
                    .unwrap()
                    .extend(ended.into_iter().map(|(_, l)| l));
                return Ok(Deleted::Settled("ended".into()));
            }
            let mut held = self.labelled.lock().unwrap();
            let before = held.len();
            held.retain(|l| l.resource != *resource);
            Ok(if held.len() < before {
                Deleted::Removed
            } else {
                Deleted::AlreadyGone
            })
        }
    }

    /// Reaches one engine for every variant, noting which were asked for.
    struct OneEngine {
        engine: Arc<Engine>,
        asked: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Connect for OneEngine {
        async fn connect(&self, variant: &str) -> std::result::Result<Reached, String> {
            self.asked.lock().unwrap().push(variant.to_owned());
            Ok(Reached {
                provider: self.engine.clone(),
                note: None,
                elsewhere: None,
            })
        }
    }

    /// A sandbox for one test: its reports and registrations folders, an engine, and what
    /// the sweep said.
    struct Bench {
        dir: PathBuf,
        connect: OneEngine,
        said: Mutex<Vec<String>>,
    }

    impl Bench {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("sm-sweep-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("reports")).expect("reports folder");
            Self {
                dir,
                connect: OneEngine {
                    engine: Arc::default(),
                    asked: Mutex::default(),
                },
                said: Mutex::default(),
            }
        }

        fn engine(&self) -> &Engine {
            &self.connect.engine
        }

        fn options(&self, variants: &[&str], dry_run: bool) -> SweepOptions {
            SweepOptions {
                out: self.dir.join("reports"),
                runs_dir: self.dir.join("runs"),
                dry_run,
                variants: variants.iter().map(|v| (*v).to_owned()).collect(),
            }
        }

        /// A ledger under reports/ of run `run_id`, whose process is gone, with `records`
        /// after its first line.
        fn dead_ledger(&self, run_id: &str, records: &[Record]) -> PathBuf {
            let dir = self.dir.join("reports").join(run_id);
            std::fs::create_dir_all(&dir).expect("run folder");
            let mut text = serde_json::to_string(&Record::Run {
                run_id: run_id.into(),
                // Above pid_max: no process's.
                pid: u32::MAX,
                start_ticks: None,
                boot_id: None,
                started_at: "2026-12-06T00:00:00Z".into(),
            })
            .expect("JSON")
                + "\n";
            for record in records {
                text += &(serde_json::to_string(record).expect("JSON") + "\n");
            }
            let path = dir.join(LEDGER_FILE);
            std::fs::write(&path, text).expect("ledger written");
            path
        }

        async fn sweep(&self, scope: &Scope, options: &SweepOptions) -> (Ended, String) {
            self.said.lock().unwrap().clear();
            let say = |_: To, line: &str| self.said.lock().unwrap().push(line.to_owned());
            let ended = sweep(scope, options, &self.connect, &say).await;
            (ended, self.said.lock().unwrap().join("\n"))
        }
    }

    impl Drop for Bench {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn created(variant: &str, kind: &str, id: &str) -> Record {
        Record::Created {
            seq: 1,
            variant: variant.into(),
            scenario: "lifecycle".into(),
            kind: kind.into(),
            id: id.into(),
            removable: true,
        }
    }

    fn run(id: &str) -> Scope {
        Scope::Run {
            id: id.into(),
            force: false,
        }
    }

    fn aged(seconds: u64) -> Scope {
        Scope::Gone {
            older_than: Duration::from_secs(seconds),
            shown: format!("{seconds}s"),
        }
    }

    #[tokio::test]
    async fn a_killed_runs_build_is_settled_before_anything_is_listed_and_its_image_removed() {
        let bench = Bench::new("build");
        bench.dead_ledger("r1", &[created("docker", BUILD_RESOURCE, "b1")]);
        // The build's client is gone; the engine commits its image when the build ends.
        bench
            .engine()
            .commits
            .lock()
            .unwrap()
            .push(("b1".into(), labelled("r1", "image", "img-1", None)));
        let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert_eq!(
            bench.engine().calls()[..3],
            ["delete buildkit-build b1", "list r1", "delete image img-1"],
            "{said}"
        );
        assert!(bench.engine().holds().is_empty(), "{said}");
        assert!(
            said.contains("run r1: docker::lifecycle: BuildKit build b1: ended"),
            "{said}"
        );
        assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
    }

    #[tokio::test]
    async fn an_emulated_variants_leftovers_are_swept_from_the_engine_not_through_the_provider() {
        let bench = Bench::new("emulated");
        bench.dead_ledger(
            "r1",
            &[
                Record::Emulated {
                    variant: "e2b".into(),
                },
                // The e2b client's template, in an emulator that died with the run.
                created("e2b", "template", "tpl0001"),
            ],
        );
        // What the emulator made on the engine, labelled with the run.
        bench.engine().labelled.lock().unwrap().push(labelled(
            "r1",
            "container",
            "c-emulated",
            None,
        ));
        let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert_eq!(*bench.connect.asked.lock().unwrap(), ["docker"], "{said}");
        assert!(
            said.contains("e2b ran against emulators on this engine"),
            "{said}"
        );
        assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
        assert!(bench.engine().labelled.lock().unwrap().is_empty(), "{said}");
    }

    #[tokio::test]
    async fn only_what_was_there_is_counted_and_what_the_run_saw_go_is_not_asked_again() {
        let bench = Bench::new("count");
        bench.dead_ledger(
            "r1",
            &[
                created("docker", "container", "c-gone"),
                created("docker", "container", "c-deleted"),
                Record::Gone {
                    variant: "docker".into(),
                    scenario: "lifecycle".into(),
                    kind: "container".into(),
                    id: "c-deleted".into(),
                },
            ],
        );
        bench.engine().add([labelled("r1", "image", "img-1", None)]);
        let (dry, said_dry) = bench.sweep(&run("r1"), &bench.options(&[], true)).await;
        assert_eq!(dry, Ended::Clean);
        assert!(said_dry.contains("would remove image img-1"), "{said_dry}");
        assert!(
            said_dry.contains("container c-gone: named in the run's ledger, not listed"),
            "{said_dry}"
        );
        assert!(
            said_dry.contains("run r1: dry run: 1 resource(s) would be removed"),
            "{said_dry}"
        );
        assert_eq!(
            bench.engine().holds(),
            ["img-1"],
            "a dry run removes nothing"
        );
        let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert!(
            said.contains("run r1: 1 resource(s) removed, 1 named in its ledger already gone"),
            "{said}"
        );
        assert!(
            !bench
                .engine()
                .calls()
                .contains(&"delete container c-deleted".to_owned()),
            "what the run recorded gone is not deleted again"
        );
    }

    #[tokio::test]
    async fn an_age_sweep_leaves_a_live_run_alone_wherever_it_writes() {
        let bench = Bench::new("age");
        // The live run writes its ledger outside the sweep's reports folder; it registered.
        let elsewhere = bench.dir.join("elsewhere/live");
        let ledger = Ledger::create(&elsewhere, "live").expect("ledger");
        let registered =
            live_runs::Registered::register(&bench.dir.join("runs"), "live", ledger.path())
                .expect("registered");
        let old = Some(Duration::from_secs(3600));
        bench.engine().add([
            labelled("live", "container", "c-live", old),
            labelled("other", "container", "c-other", old),
            labelled(
                "young",
                "container",
                "c-young",
                Some(Duration::from_secs(1)),
            ),
        ]);
        let (ended, said) = bench
            .sweep(&aged(60), &bench.options(&["docker"], false))
            .await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert_eq!(bench.engine().holds(), ["c-live", "c-young"], "{said}");
        assert!(
            said.contains(&format!(
                "run live: left alone: its process {} is alive",
                std::process::id()
            )),
            "{said}"
        );
        assert!(said.contains("run other: 1 resource(s) removed"), "{said}");
        // By id, it is refused unless forced.
        let refused = bench
            .sweep(&run("live"), &bench.options(&["docker"], false))
            .await;
        assert!(
            matches!(&refused.0, Ended::Refused(why) if why.contains("--force")),
            "{refused:?}"
        );
        assert_eq!(bench.engine().holds(), ["c-live", "c-young"]);
        let forced = Scope::Run {
            id: "live".into(),
            force: true,
        };
        let (ended, said) = bench
            .sweep(&forced, &bench.options(&["docker"], false))
            .await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert_eq!(bench.engine().holds(), ["c-young"], "{said}");
        registered.release().expect("released");
    }

    #[tokio::test]
    async fn a_killed_runs_registration_leads_to_its_ledger_and_is_forgotten_once_swept() {
        let bench = Bench::new("registered");
        // The killed run wrote its ledger elsewhere and registered it; its process is gone.
        let ledger = bench.dir.join("elsewhere/r1/ledger.jsonl");
        std::fs::create_dir_all(ledger.parent().unwrap()).expect("folder");
        std::fs::copy(
            bench.dead_ledger("r1", &[created("docker", "container", "c1")]),
            &ledger,
        )
        .expect("copy");
        std::fs::remove_dir_all(bench.dir.join("reports/r1")).expect("moved");
        std::fs::create_dir_all(bench.dir.join("runs")).expect("runs folder");
        let registration = live_runs::Registration {
            run_id: "r1".into(),
            owner: Owner {
                pid: u32::MAX,
                start_ticks: None,
                boot_id: None,
            },
            ledger,
            started_at: "2026-12-06T00:00:00Z".into(),
        };
        std::fs::write(
            bench.dir.join("runs/r1.json"),
            serde_json::to_string(&registration).expect("JSON"),
        )
        .expect("registered");
        bench
            .engine()
            .add([labelled("r1", "container", "c1", None)]);
        let (ended, said) = bench.sweep(&aged(86400), &bench.options(&[], false)).await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert!(bench.engine().holds().is_empty(), "{said}");
        assert_eq!(
            live_runs::find(&bench.dir.join("runs"), "r1").expect("reads"),
            None,
            "a swept run's registration is forgotten"
        );
    }

    #[tokio::test]
    async fn a_swept_run_is_recorded_so_and_passed_over_by_the_next_age_sweep() {
        let bench = Bench::new("swept");
        let path = bench.dead_ledger("r1", &[created("docker", "container", "c1")]);
        bench
            .engine()
            .add([labelled("r1", "container", "c1", None)]);
        let (ended, said) = bench
            .sweep(&aged(86400), &bench.options(&["docker"], false))
            .await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
        assert!(LedgerView::read(&path).expect("reads").swept());
        let (ended, said) = bench
            .sweep(&aged(86400), &bench.options(&["docker"], false))
            .await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert!(said.contains("no run to sweep"), "{said}");
        // Named, it is swept again.
        let (_, said) = bench
            .sweep(&run("r1"), &bench.options(&["docker"], false))
            .await;
        assert!(
            said.contains("run r1: 0 resource(s) removed, 1 named in its ledger already gone"),
            "{said}"
        );
    }

    #[tokio::test]
    async fn with_its_ledger_a_run_is_swept_on_the_variants_it_names_alone() {
        let bench = Bench::new("variants");
        bench.dead_ledger("r1", &[created("datalayer", "image", "i1")]);
        let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
        assert_eq!(ended, Ended::Clean, "{said}");
        assert_eq!(*bench.connect.asked.lock().unwrap(), ["datalayer"]);
        // Without a ledger, every variant.
        bench.connect.asked.lock().unwrap().clear();
        bench.sweep(&run("r2"), &bench.options(&[], false)).await;
        assert_eq!(
            *bench.connect.asked.lock().unwrap(),
            variants::known(),
            "no ledger names them"
        );
    }

    #[tokio::test]
    async fn an_unreadable_ledger_and_an_undated_resource_fail_the_sweep_and_are_named() {
        let bench = Bench::new("unreadable");
        let path = bench.dir.join("reports/r1/ledger.jsonl");
        std::fs::create_dir_all(path.parent().unwrap()).expect("folder");
        std::fs::write(&path, "garbage\n{\"event\":\"finished\",\"at\":\"x\"}\n").expect("write");
        bench.engine().labelled.lock().unwrap().push(labelled(
            "r9",
            "container",
            "c-undated",
            None,
        ));
        let (ended, said) = bench
            .sweep(&aged(60), &bench.options(&["docker"], false))
            .await;
        assert_eq!(ended, Ended::Failed, "{said}");
        assert!(
            said.contains(&format!("{}:1:", path.display())),
            "the ledger is named with its line: {said}"
        );
        assert!(
            said.contains("container c-undated has no creation time"),
            "{said}"
        );
        assert_eq!(bench.engine().holds(), ["c-undated"]);
    }
}
