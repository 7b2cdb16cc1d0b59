//! The plan of `sandbox-matrix run`: the selected variants × scenarios × repetitions, each
//! variant prepared (a local session, the cloud mode's checks, an emulator per scenario),
//! run by one `Runner` in order with the ledger, the shared builds and the orphan audit,
//! each result written to the run folder as it comes. The command line turns its arguments
//! into a [`Plan`] and maps the [`Outcome`] to an exit code.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sandbox_providers::api::settings::Settings;
use sandbox_providers::docker::DockerProvider;
use tokio_util::sync::CancellationToken;

use crate::model::events::{EventSink, Fanout, RunEvent};
use crate::model::results::{
    OrphanAudit, Provenance, RESULTS_SCHEMA_VERSION, RunResults, ScenarioResult, Source,
};
use crate::report::terminal::Terminal;
use crate::report::{self, run_folder};
use crate::run::base::RunBase;
use crate::run::ledger::Ledger;
use crate::run::partition::Partition;
use crate::run::runner::{Runner, fake_canary, new_run_id, unreachable_variant};
use crate::run::scenario::Scenario;
use crate::run::variants;
use crate::run::variants::CloudMode;
use crate::run::{orphans, partition};
use sandbox_emulators as emulate;

/// What `sandbox-matrix run` runs, from already-parsed and already-checked arguments.
pub struct Plan {
    /// The selected variants, in order.
    pub variants: Vec<String>,
    /// Whether the variants were asked for by name (`--variant`).
    pub explicit_variants: bool,
    /// The selected scenarios, loaded and checked.
    pub scenarios: Vec<Scenario>,
    /// Whether the scenarios were asked for by name (`--scenario`).
    pub explicit_scenarios: bool,
    /// The share of the selection this run is, if any.
    pub partition: Option<Partition>,
    /// Repetitions of each variant × scenario.
    pub repeat: u32,
    /// The checkout's root.
    pub root: PathBuf,
    /// Folder the run's reports go to.
    pub out: PathBuf,
    /// Whether the terminal prints a failed step's own log.
    pub verbose: bool,
    /// The base reference asked for, if any (else the local base).
    pub base: Option<String>,
    /// The approved bases file a registry base's digest must be listed in.
    pub approved_bases: PathBuf,
    /// How the cloud variants run.
    pub cloud_mode: CloudMode,
    /// This executable, baked into images as the doctor.
    pub executable: PathBuf,
    /// The host's name, for the provenance.
    pub host: String,
}

/// How a run that was interrupted is told: the token cancelled on a signal and the name
/// of that signal.
pub struct Interruption {
    /// Cancelled when the run is interrupted.
    pub token: CancellationToken,
    /// The name of what interrupted the run, once it has.
    pub by: Arc<OnceLock<String>>,
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every step passed.
    Passed,
    /// A step failed.
    Failed,
    /// The run was interrupted; its reports were written.
    Interrupted,
    /// Bad input, found before anything ran: the message.
    BadInput(String),
    /// The emulators could not start on the local engine: the message.
    NoEngine(String),
    /// The reports could not be written: the message.
    Report(String),
}

/// Creates `out` if needed and writes (then removes) a file in it, so a folder the run
/// cannot write its reports to is refused before the run.
fn check_writable(out: &Path) -> Result<(), String> {
    let refuse = |e: std::io::Error| {
        format!(
            "cannot write reports to {}: {e} (choose another --out)",
            out.display()
        )
    };
    std::fs::create_dir_all(out).map_err(refuse)?;
    let probe = out.join(format!(
        ".sandbox-matrix-write-check-{}",
        std::process::id()
    ));
    std::fs::write(&probe, b"").map_err(refuse)?;
    std::fs::remove_file(&probe).map_err(refuse)
}

/// Collects finished scenarios so the run folder can be rewritten after each one.
struct Collector(Mutex<Vec<ScenarioResult>>);

impl EventSink for Collector {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::ScenarioFinished { result } = event {
            self.0
                .lock()
                .expect("collector lock")
                .push((**result).clone());
        }
    }
}

/// Runs `plan`: prepares each variant, runs its share of the items in order and writes the
/// run folder after each one. `listen` is called with the run's id once it is made, and
/// returns how the run is interrupted from then on.
pub async fn execute(plan: Plan, listen: impl FnOnce(&str) -> Interruption) -> Outcome {
    let Plan {
        variants: mut variant_names,
        explicit_variants: explicit,
        scenarios,
        explicit_scenarios,
        partition,
        repeat,
        root,
        out,
        verbose,
        base,
        approved_bases: approved,
        cloud_mode,
        executable,
        host,
    } = plan;
    // The items of this share, per variant: a variant with none is not set up at all.
    let share = |variant: &str| -> Vec<(&Scenario, u32)> {
        scenarios
            .iter()
            .flat_map(|s| {
                partition::repetitions(partition, variant, &s.name, repeat).map(move |r| (s, r))
            })
            .collect()
    };
    if let Some(partition) = partition {
        let all = variant_names.len() * scenarios.len() * repeat as usize;
        let held: usize = variant_names.iter().map(|v| share(v).len()).sum();
        eprintln!(
            "partition {partition}: {held} of the {all} variant × scenario × repetition items"
        );
        variant_names.retain(|v| {
            let empty = share(v).is_empty();
            if empty {
                eprintln!("{v}: nothing in partition {partition}");
            }
            !empty
        });
    }
    let root = root.as_path();
    let collector = Arc::new(Collector(Mutex::new(Vec::new())));
    let terminal = Arc::new(Terminal::new().with_failed_step_logs(verbose));
    terminal.scrub_with(report::self_scan::environment_credentials());
    let sink: Arc<dyn EventSink> = Arc::new(Fanout(vec![
        Box::new(terminal.clone()),
        Box::new(collector.clone()),
    ]));
    // The base and its registry credential, made once for the whole run.
    let base = match RunBase::resolve(base.as_deref(), &approved).await {
        Ok(base) => base,
        Err(e) => {
            return Outcome::BadInput(e);
        }
    };
    let base_line = base.describe();
    let run_id = new_run_id();
    let interrupt = listen(&run_id);
    let cancel = interrupt.token.clone();
    let runner = Runner::new(run_id.clone(), fake_canary(), sink.clone(), cancel.clone())
        .with_base(base)
        .with_interrupt_name(interrupt.by);
    // What the self-scan looks for in every file the run writes: the run's canary and
    // registry token, and the provider keys and AWS session from the environment.
    let mut written_secrets: Vec<_> = runner
        .secrets()
        .into_iter()
        .chain(report::self_scan::environment_credentials())
        .collect();
    terminal.scrub_with(written_secrets.clone());
    let mut provenance = Provenance {
        run_id: run_id.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        host,
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        base: Some(runner.base().base.reference.clone()),
        shards: Vec::new(),
        // Which share of the selection this run is.
        partition: partition.map(|p| p.to_string()),
    };
    // Without --variant, run every variant that can run here: the local ones when an
    // engine answers, a cloud variant live when asked, else where it has cassettes.
    let mut skip = std::collections::HashMap::new();
    let mut local = std::collections::HashMap::new();
    for name in variants::LOCAL {
        if !variant_names.iter().any(|v| v == name) {
            continue;
        }
        let scratch = variants::run_scratch(&run_id);
        match variants::connect_local(name, root, &executable, &scratch).await {
            Ok(session) => {
                if let Some(note) = &session.note {
                    eprintln!("{name}: {note}");
                }
                written_secrets.extend(session.secrets.iter().cloned());
                local.insert(*name, Ok(session));
            }
            Err(variants::LocalUnavailable::Config(e)) => {
                return Outcome::BadInput(format!("the {name} variant cannot run: {e}"));
            }
            Err(variants::LocalUnavailable::Skipped(reason)) => {
                for scenario in &scenarios {
                    skip.insert((name.to_string(), scenario.name.clone()), reason.clone());
                }
            }
            Err(variants::LocalUnavailable::NotReady(e)) if !explicit => {
                eprintln!(
                    "{name}: not run, {e} (ask for it with --variant {name} to make that a failure)"
                );
                variant_names.retain(|v| v != name);
            }
            Err(variants::LocalUnavailable::NotReady(e)) => {
                local.insert(*name, Err(e));
            }
        }
    }
    terminal.scrub_with(written_secrets.clone());
    let mut emulator_docker = None;
    for name in &variant_names {
        let Some(cloud) = variants::cloud(name) else {
            continue;
        };
        match &cloud_mode {
            CloudMode::Live | CloudMode::Record { .. } => {
                // A missing credential is an error before anything runs, never a skip.
                if let Err(e) = (cloud.connect)(
                    sandbox_providers::api::Mode::Live,
                    runner.scenario_volatiles(),
                    &Settings::environment(),
                ) {
                    return Outcome::BadInput(format!("the {name} variant cannot run live: {e}"));
                }
                // A provider's builder cannot pull this engine's local base: refuse now, not
                // minutes into the provider's build. An emulator on this machine can.
                if cloud.capabilities.build
                    && runner.base().reference.is_none()
                    && !cloud.at_loopback()
                {
                    return Outcome::BadInput(format!(
                        "the {name} variant cannot build live from the local base {}: its builder pulls the base from a registry; set {}=<registry>/<repository>@sha256:<digest> (`sandbox-matrix bootstrap --push <registry>/<repository>` prints it; `sandbox-matrix preflight --variant {name}` checks it)",
                        runner.base().base.reference,
                        crate::run::base::BASE_VAR
                    ));
                }
            }
            CloudMode::Emulated { .. } => {
                // Each scenario gets its emulator; they share one docker variant.
                if emulator_docker.is_none() {
                    match emulator_backend(root, &executable).await {
                        Ok(docker) => emulator_docker = Some(docker),
                        Err(e) => {
                            return Outcome::NoEngine(format!(
                                "the emulators need the local engine: {e}"
                            ));
                        }
                    }
                }
            }
            CloudMode::Replay { dir, .. } => {
                for scenario in &scenarios {
                    let path = match variants::checked_cassette_path(dir, name, &scenario.name) {
                        Ok(path) => path,
                        Err(e) => {
                            return Outcome::BadInput(e);
                        }
                    };
                    if path.is_file() {
                        // A cassette that does not parse is bad input: say where, run nothing.
                        if let Err(e) = variants::check_cassette(cloud, &path, &scenario.name) {
                            return Outcome::BadInput(e);
                        }
                        continue;
                    }
                    // Asked for by name, both of them: not replaying it is an error.
                    if explicit && explicit_scenarios {
                        return Outcome::BadInput(format!(
                            "no cassette for {name} × {} at {} (record one with --record, or pass --live)",
                            scenario.name,
                            path.display()
                        ));
                    }
                    skip.insert(
                        (name.clone(), scenario.name.clone()),
                        format!("no cassette at {}", path.display()),
                    );
                }
            }
        }
    }
    // The reports must be writable before anything runs, not found out after the run.
    if let Err(e) = check_writable(&out) {
        return Outcome::Report(e);
    }
    // The input is good: before anything is created, every create is recorded here first.
    let ledger = match Ledger::create(&out.join(&run_id), &run_id) {
        Ok(ledger) => Arc::new(ledger),
        Err(e) => {
            return Outcome::Report(e);
        }
    };
    runner.attach_ledger(ledger.clone());
    // Registered where every sweep on this machine looks, so that none takes what this run
    // is using, wherever its reports go.
    let registered = match crate::run::live_runs::Registered::register(
        &crate::run::live_runs::dir(),
        &run_id,
        ledger.path(),
    ) {
        Ok(registered) => Some(registered),
        Err(e) => {
            eprintln!(
                "warning: {e}; a sweep that does not read {} may take this run's resources",
                ledger.path().display()
            );
            None
        }
    };
    eprintln!(
        "run {run_id}: {} variant(s) × {} scenario(s); cloud variants {}",
        variant_names.len(),
        scenarios.len(),
        match &cloud_mode {
            CloudMode::Live => "live".to_owned(),
            CloudMode::Record { dir } => format!("live, recording to {}", dir.display()),
            CloudMode::Replay { dir, .. } => format!("replayed from {}", dir.display()),
            CloudMode::Emulated { record: None } =>
                "against sandbox-matrix's emulators on 127.0.0.1 (not the providers)".to_owned(),
            CloudMode::Emulated { record: Some(dir) } => format!(
                "against sandbox-matrix's emulators on 127.0.0.1 (not the providers), recording to {}",
                dir.display()
            ),
        }
    );
    eprintln!("{base_line}");
    let mut report_error = None;
    let mut noted_emulated = std::collections::HashSet::new();
    let mut audits: Vec<OrphanAudit> = Vec::new();
    for name in &variant_names {
        let plan = match local.get(name.as_str()) {
            None => None,
            Some(Ok(session)) => {
                let p = &session.provider;
                let not_ready = runner.prepare(p).await.err();
                if let Some(made_from) = p.base_made_from() {
                    provenance.base = Some(format!(
                        "{}, made from {made_from}",
                        runner.base().base.reference
                    ));
                }
                Some((Some(p.clone()), not_ready))
            }
            Some(Err(e)) => Some((None, Some(e.clone()))),
        };
        let items = share(name);
        // Live variants build each environment once per run; a cassette holds its own build.
        if plan.is_some()
            || (variants::cloud(name).is_some() && matches!(cloud_mode, CloudMode::Live))
        {
            runner.plan_shared_builds(
                name,
                items
                    .iter()
                    .filter(|(s, _)| !skip.contains_key(&(name.clone(), s.name.clone())))
                    .map(|(s, _)| *s),
            );
        }
        let mut last_provider: Option<Arc<dyn sandbox_providers::Provider>> = None;
        let mut noted_skips = std::collections::HashSet::new();
        // A live variant's inventory is audited for orphans; a replay, a recording or an
        // emulator's cannot be listed after the scenario it belongs to.
        let audited = plan.is_some() || matches!(cloud_mode, CloudMode::Live);
        let mut audited_scenarios: Vec<String> = Vec::new();
        for (scenario, _) in &items {
            if !skip.contains_key(&(name.clone(), scenario.name.clone()))
                && !audited_scenarios.contains(&scenario.name)
            {
                audited_scenarios.push(scenario.name.clone());
            }
        }
        let mut before = None;
        for (scenario, repetition) in items {
            if let Some(reason) = skip.get(&(name.clone(), scenario.name.clone())) {
                if noted_skips.insert(&scenario.name) {
                    eprintln!("{name}::{}: skipped, {reason}", scenario.name);
                }
                continue;
            }
            let mut emulator = None;
            let (provider, not_ready, check, source) = match (&plan, variants::cloud(name)) {
                (Some((provider, not_ready)), _) => {
                    (provider.clone(), not_ready.clone(), None, Source::Live)
                }
                (None, Some(cloud)) => {
                    let settings = match (&cloud_mode, &emulator_docker) {
                        (CloudMode::Emulated { .. }, Some(docker)) => {
                            // Before its emulator makes anything: a sweep then knows where.
                            if noted_emulated.insert(name.clone())
                                && let Err(e) = ledger.emulated(name)
                            {
                                eprintln!("warning: {e}");
                            }
                            let scratch = variants::run_scratch(&run_id);
                            match start_emulator(name, scenario, &run_id, docker, &scratch).await {
                                Ok((running, ca_file, settings)) => {
                                    emulator = Some((running, ca_file));
                                    Ok(settings)
                                }
                                Err(e) => Err(e),
                            }
                        }
                        _ => Ok(Settings::environment()),
                    };
                    let session = match settings {
                        Ok(settings) => {
                            variants::open_cloud(
                                cloud,
                                &scenario.name,
                                &cloud_mode,
                                runner.scenario_volatiles(),
                                &settings,
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    };
                    match session {
                        Ok(session) => {
                            let not_ready = runner.prepare(&session.provider).await.err();
                            (
                                Some(session.provider),
                                not_ready,
                                session.check,
                                session.source,
                            )
                        }
                        Err(e) => (None, Some(e), None, cloud_mode.source(name, &scenario.name)),
                    }
                }
                (None, None) => (
                    None,
                    Some(format!("unknown variant `{name}`")),
                    None,
                    Source::Live,
                ),
            };
            match provider {
                Some(p) => {
                    // The inventory before the variant's first repetition, when audited.
                    if audited && before.is_none() {
                        before = Some(
                            orphans::inventory(p.as_ref(), &run_id, name, &audited_scenarios).await,
                        );
                    }
                    last_provider = Some(p.clone());
                    runner
                        .run_scenario_checked(p, scenario, not_ready, check, source, repetition)
                        .await;
                }
                None => {
                    let reason = not_ready.as_deref().unwrap_or("unreachable");
                    eprintln!("{name}::{}: not run: {reason}", scenario.name);
                    let mut result = unreachable_variant(name, scenario, source, reason);
                    result.repetition = repetition;
                    sink.emit(&RunEvent::ScenarioFinished {
                        result: Box::new(result),
                    });
                }
            };
            if let Some((running, ca_file)) = emulator.take() {
                running.stop().await;
                let _ = std::fs::remove_file(ca_file);
                eprintln!(
                    "{name}::{}: stopped its emulator and removed what it made",
                    scenario.name
                );
            }
            let results = snapshot(&provenance, &collector, &audits);
            if let Err(e) = run_folder::write(&out, &results, &written_secrets) {
                report_error = Some(e);
            }
            if cancel.is_cancelled() {
                break;
            }
        }
        if let Some(p) = &last_provider {
            for line in runner.release_shared(p).await {
                eprintln!("{name}: {line}");
            }
            if audited && !cancel.is_cancelled() {
                match audit_orphans(
                    p.as_ref(),
                    &run_id,
                    name,
                    &audited_scenarios,
                    before.take(),
                    ledger.path(),
                )
                .await
                {
                    Ok(audit) => {
                        eprintln!(
                            "{name}: orphans: {} of {} sandbox creates",
                            audit.orphans.len(),
                            audit.creates
                        );
                        audits.push(audit);
                    }
                    Err(e) => eprintln!("warning: {name}: no orphan audit: {e}"),
                }
            }
        }
        // A registry started for the variant stops once its cleanup is done.
        if let Some(Ok(session)) = local.remove(name.as_str())
            && let Some(registry) = session.registry
        {
            let host = registry.host.clone();
            drop(registry);
            let _ = std::fs::remove_dir(variants::run_scratch(&run_id));
            eprintln!("{name}: stopped the run's registry on {host}");
        }
        if cancel.is_cancelled() {
            break;
        }
    }
    // The run's scratch folder (emulators' CA files, a registry's) goes once empty.
    let _ = std::fs::remove_dir(variants::run_scratch(&run_id));
    if let Err(e) = ledger.finished() {
        eprintln!("warning: {e}");
    }
    if let Some(Err(e)) = registered.map(|r| r.release()) {
        eprintln!("warning: {e}");
    }
    let results = snapshot(&provenance, &collector, &audits);
    println!(
        "{}",
        report::self_scan::scrub(&report::table::render(&results), &written_secrets).0
    );
    match run_folder::write(&out, &results, &written_secrets).and_then(|written| {
        run_folder::append_step_summary(&results)?;
        Ok(written)
    }) {
        Ok(written) => {
            for warning in &written.warnings {
                eprintln!("warning: {warning}");
            }
            eprintln!(
                "reports: {} (junit.xml, summary.md, results.json, report.html)",
                written.dir.display()
            )
        }
        Err(e) => report_error = Some(e),
    }
    if let CloudMode::Record { dir } | CloudMode::Emulated { record: Some(dir) } = &cloud_mode {
        let leaks = report::self_scan::scan(&[dir], &written_secrets);
        if !leaks.is_empty() {
            let leaks: Vec<String> = leaks.iter().map(ToString::to_string).collect();
            report_error = Some(format!(
                "the cassettes held a credential: {}",
                leaks.join("; ")
            ));
        }
    }
    if let Some(e) = report_error {
        return Outcome::Report(e);
    }
    if cancel.is_cancelled() {
        Outcome::Interrupted
    } else if results.scenarios.iter().all(ScenarioResult::passed) {
        Outcome::Passed
    } else {
        Outcome::Failed
    }
}

fn snapshot(provenance: &Provenance, collector: &Collector, orphans: &[OrphanAudit]) -> RunResults {
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
        provenance: provenance.clone(),
        scenarios: collector.0.lock().expect("collector lock").clone(),
        orphans: orphans.to_vec(),
    }
}

/// The orphan audit of `variant` after its last repetition ([`orphans::audit`]), the
/// inventory `before` its first one as listed then.
async fn audit_orphans(
    provider: &dyn sandbox_providers::Provider,
    run_id: &str,
    variant: &str,
    scenarios: &[String],
    before: Option<Result<Vec<sandbox_providers::Resource>, String>>,
    ledger: &Path,
) -> Result<OrphanAudit, String> {
    let before = before.unwrap_or_else(|| Ok(Vec::new()))?;
    let creates = orphans::creates(ledger, variant)?;
    orphans::audit(
        provider,
        run_id,
        variant,
        scenarios,
        creates,
        before,
        &|line| eprintln!("{variant}: {line}"),
    )
    .await
}

/// The docker variant the emulators of a run build and launch on, its base image ready.
pub async fn emulator_backend(
    root: &Path,
    executable: &Path,
) -> Result<Arc<DockerProvider>, String> {
    let docker = variants::docker_provider(root, executable).await?;
    sandbox_providers::Provider::prepare(&docker, &RunBase::local().base, &|line: &str| {
        eprintln!("prepare: {line}")
    })
    .await
    .map_err(|e| format!("the docker variant's base image: {e}"))?;
    Ok(Arc::new(docker))
}

/// Starts `variant`'s emulator for `scenario` of run `run_id`, labelling what it makes with
/// the run, serving the scenario's environment as Datalayer's platform environment; its
/// CA goes to a file under `scratch`. Returns it, that file and the settings its client
/// reaches it with.
async fn start_emulator(
    variant: &str,
    scenario: &Scenario,
    run_id: &str,
    docker: &Arc<DockerProvider>,
    scratch: &Path,
) -> Result<(emulate::launch::Running, PathBuf, Settings), String> {
    let which = emulate::Emulated::of_variant(variant)
        .ok_or_else(|| format!("sandbox-matrix has no emulator of the {variant} variant"))?;
    let mut launch = emulate::launch::Launch::new(scenario.environment.clone());
    launch.run_id = Some(run_id.to_owned());
    let prefix = format!("{variant}::{} emulator", scenario.name);
    let log = move |line: &str| eprintln!("{prefix}: {line}");
    let running = emulate::launch::start(which, docker.clone(), launch, &log)
        .await
        .map_err(|e| format!("cannot start the {} emulator: {e}", which.provider()))?;
    let ca_file = scratch.join(format!("{variant}-{}-ca.pem", scenario.name));
    let written =
        std::fs::create_dir_all(scratch).and_then(|()| std::fs::write(&ca_file, &running.ca_pem));
    if let Err(e) = written {
        running.stop().await;
        return Err(format!(
            "cannot write the emulator's CA certificate to {}: {e}",
            ca_file.display()
        ));
    }
    let settings = running.client_settings(&ca_file);
    Ok((running, ca_file, settings))
}
