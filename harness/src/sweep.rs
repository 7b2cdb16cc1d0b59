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
mod tests;
