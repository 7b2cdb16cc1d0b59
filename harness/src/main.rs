//! The `sandbox-matrix` command line.

mod cli;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use sandbox_matrix::checks::approved::APPROVED_BASES_FILE;
use sandbox_matrix::report::{results, run_folder};
use sandbox_matrix::run::runner::new_run_id;
use sandbox_matrix::run::scenario::{Scenario, StepKind};
use sandbox_matrix::run::variants;

use cli::emulate::{EmulateCommand, emulate};
use cli::run::{Interrupt, RunArgs, run};
use cli::sweep::{SweepArgs, sweep};

/// Exit code when every step passed.
const EXIT_PASSED: u8 = 0;
/// Exit code when a step failed.
const EXIT_FAILED: u8 = 1;
/// Exit code for bad input: a scenario that does not parse, an unknown variant.
const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when the run could not write its reports.
const EXIT_REPORT: u8 = 3;
/// Exit code after Ctrl-C (SIGINT), once cleanup has run: 128 + the signal's number.
const EXIT_INTERRUPTED: u8 = 130;
/// Exit code after SIGTERM, once cleanup has run.
const EXIT_TERMINATED: u8 = 143;
/// Exit code after SIGHUP, once cleanup has run.
const EXIT_HANGUP: u8 = 129;

#[derive(Parser)]
#[command(
    name = "sandbox-matrix",
    version,
    about = "Runs scenario files against code-sandbox provider variants and reports how each step went and how long it took.",
    long_about = "Runs scenario files against code-sandbox provider variants, checks each sandbox against \
sandbox-contract/v1, measures every step, and writes JUnit, a markdown comparison table, results.json \
and an HTML report with charts into reports/<run-id>/ (reports/latest points at the newest run).\n\n\
Exit codes: 0 every step passed; 1 a step failed; 2 bad input (scenario file, variant name); \
3 reports could not be written; 130, 143, 129 interrupted by SIGINT (Ctrl-C), SIGTERM, SIGHUP \
(after cleanup; a second signal quits at once and prints the `sweep` command). `gate` exits 1 when a \
variant holds; `merge`, `compare` and `gate` exit 2 on a file they cannot use."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios on variants; print the comparison table and write reports/<run-id>/.
    ///
    /// Every resource the run creates is labelled with the run id and removed at the end,
    /// whatever happened: a failed step, a panic, or Ctrl-C.
    Run(RunArgs),
    /// List what `run` would run, one line per variant::scenario::step, without running it.
    ///
    /// A cloud variant replays its cassettes: a scenario it has none for is not run (and,
    /// asked for by name with its variant, refused, exit 2), as `run` does; with --live it
    /// is listed.
    List(ListArgs),
    /// Build the docker variant's reference base image if it is missing or out of date.
    ///
    /// The root filesystem is the Debian image --base-from names, pulled by digest, with the
    /// recipe's packages installed by apt; where it cannot be pulled, it is made from
    /// Debian's packages through mmdebstrap (a few minutes). The recipe in
    /// fixtures/images/contract-base/ is then built on it. It says which way it used, and
    /// exits 2 when neither works. `run` does this on its own when it needs to.
    ///
    /// With --push, the base is then pushed to a registry, logging in as
    /// SANDBOX_MATRIX_REGISTRY_AUTH says (`ecr`: a login token from GetAuthorizationToken;
    /// `static`: SANDBOX_MATRIX_REGISTRY_USER and SANDBOX_MATRIX_REGISTRY_PASSWORD; `none`),
    /// and its digest and full reference are printed: set SANDBOX_MATRIX_BASE to that
    /// reference and add the digest to policies/approved-bases.yaml.
    Bootstrap(BootstrapArgs),
    /// Check Dockerfiles against what sandbox-contract/v1 refuses (VOLUME, an unapproved
    /// base, --privileged, ...), printing `file:line: refusal: reason` for each finding.
    ///
    /// `run` lints every environment before building it. Exits 0 when nothing is refused,
    /// 1 when something is, 2 when a file cannot be read.
    Lint {
        /// Dockerfiles to check.
        #[arg(required = true, value_name = "DOCKERFILE")]
        files: Vec<PathBuf>,
    },
    /// Remove what a killed run left: every resource carrying its run label and every one its
    /// ledger names (--run), or what runs whose process is gone left and old labelled
    /// resources (no --run). Run ids are the folder names under reports/.
    ///
    /// Runs register on this machine (under SANDBOX_MATRIX_RUNS_DIR, default
    /// $TMPDIR/sandbox-matrix-runs) wherever they write their reports: a sweep finds their
    /// ledgers there, and never takes anything of a run whose process is alive; it names
    /// each run it left alone. A BuildKit build a killed run left is cancelled and waited for
    /// before anything is listed: the engine goes on with it and commits its image later.
    /// Only what was removed is counted; what was gone already is said as such.
    ///
    /// Cloud variants are asked live, with credentials from the environment; without
    /// --variant, one whose credentials are missing is passed over with a note. Exits 0
    /// when everything found was removed, 1 when something could not be (or --run names a
    /// run still going), 2 on bad input.
    Sweep(SweepArgs),
    /// Combine sharded results (one results.json per CI job) into one run folder:
    /// results.json, junit.xml, summary.md and report.html in --out.
    ///
    /// Each shard's provenance is kept; repetitions are renumbered per variant × scenario.
    /// Files of different schema versions are refused.
    Merge {
        /// The shards' results.json files.
        #[arg(required = true, value_name = "RESULTS_JSON")]
        files: Vec<PathBuf>,
        /// Folder to write the merged run into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Compare a run with a baseline, metric by metric: n, p50s, ratio, and whether the
    /// change is beyond noise. Prints a markdown table; exits 0 whatever changed.
    ///
    /// Beyond noise: with 4+ attempts a side, a Mann-Whitney U test at p < 0.05 and a ratio
    /// of medians of at least 1.10 (or at most 1/1.10); with fewer, a ratio of at least 2 (or
    /// at most 1/2) and no overlap. A failed attempt counts as +∞. A metric measured live in
    /// one run and replayed from a cassette in the other is refused (exit 2).
    Compare {
        /// The results.json to compare against.
        #[arg(long, value_name = "RESULTS_JSON")]
        baseline: PathBuf,
        /// The results.json of the run to judge.
        #[arg(value_name = "RESULTS_JSON")]
        current: PathBuf,
    },
    /// Ship or hold each variant of a run against a policy file, printing a verdict line per
    /// variant with its reasons. Exits 0 when every variant ships, 1 when any holds.
    ///
    /// The policy (YAML) may list `variants` that must have results, `required` steps
    /// (`scenario/step`, or `scenario/*` for no failed step), a `success_rate` floor per
    /// metric, `p90_budgets` per `scenario/metric`, and a `regression` `tolerance` checked
    /// against --baseline with compare's rule. Leaked resources and secrets always hold; a
    /// partial secrets scan (non-root, or unreadable files) holds unless
    /// `ship_partial_scans: true`.
    /// Every rule judges live results only: a variant with none holds with `no live result
    /// for <variant>`, and a variant's replayed repetitions beside live ones are left out.
    /// `allow_replay: true` in the policy judges replays too; a variant shipped on them alone
    /// reads `ship (replay only)`. Emulated results (`run --emulated`, or a run whose
    /// answers came from sandbox-matrix's emulator) are judged only under
    /// `allow_emulated: true`, which `allow_replay` does not cover; a variant shipped on them
    /// alone reads `ship (emulated only)`. A budget of `<scenario>/step:build` judges the build that
    /// made the artifact the scenario used, whichever scenario built it; a variant that built
    /// nothing is not held for it (a note says so).
    Gate {
        /// The policy file.
        #[arg(long, value_name = "POLICY_YAML")]
        policy: PathBuf,
        /// The results.json to gate.
        #[arg(value_name = "RESULTS_JSON")]
        results: PathBuf,
        /// A results.json to check regressions against.
        #[arg(long, value_name = "RESULTS_JSON")]
        baseline: Option<PathBuf>,
    },
    /// Serve a provider's API on 127.0.0.1 over HTTPS, backed by the docker variant (what
    /// authors the cassettes), until Ctrl-C or SIGTERM.
    ///
    /// It answers through the provider's live host forms under --domain, with a test CA
    /// made at start (its key never leaves the process). It prints, one `NAME=value` a
    /// line on stdout, what a client needs: the provider's URL settings, the CA file to
    /// trust (SANDBOX_MATRIX_CA_FILE) and the name pin (SANDBOX_MATRIX_RESOLVE). These two
    /// are test settings; a live run sets neither. modal also serves plain HTTP/2 gRPC
    /// (MODAL_SERVER_URL, what Modal's own client reaches loopback with) and checks the
    /// token id and secret it prints (fakes it generated).
    Emulate(EmulateCommand),
    /// Check, without creating anything, what a live run needs per variant: its credentials
    /// (names only, never values), a read-only API call answering, and the base reachable by
    /// digest with the run's registry credential. Prints a table of what is ready and what
    /// is missing, with the variable or command that fixes it.
    ///
    /// Exits 0 when every selected variant is ready, 1 when one is not, 2 on bad input.
    Preflight {
        /// A variant to check (repeatable); default: every variant.
        #[arg(long = "variant", value_name = "VARIANT")]
        variants: Vec<String>,
        /// The base by digest, as `run --base` takes it.
        #[arg(long, env = "SANDBOX_MATRIX_BASE", value_name = "REFERENCE")]
        base: Option<String>,
        /// The approved bases file. Default: <root>/policies/approved-bases.yaml.
        #[arg(long, env = "SANDBOX_MATRIX_APPROVED_BASES", value_name = "FILE")]
        approved_bases: Option<PathBuf>,
        #[command(flatten)]
        root: RootArg,
    },
    /// Hold a BuildKit build's connection to the engine past its client's end (started by
    /// the docker variant for each build; not for people).
    #[command(name = "hold-build", hide = true)]
    HoldBuild {
        /// The engine: unix://PATH or tcp://HOST:PORT.
        #[arg(long, value_parser = sandbox_providers::docker::hold::EngineAddress::from_arg)]
        engine: sandbox_providers::docker::hold::EngineAddress,
        /// The Unix socket to listen on.
        #[arg(long)]
        listen: PathBuf,
    },
    /// Write the HTML report of a run (the report.html of a run folder): provenance, the
    /// comparison table, failures, each metric's distribution per variant, and with
    /// --history the p50 and p90 of each metric across earlier runs.
    ///
    /// The history is the newest 30 runs found; a file that cannot be read is skipped with a
    /// warning. Exits 2 when the run's own results.json cannot be read, 3 when the page
    /// cannot be written.
    Report {
        /// The HTML file to write.
        #[arg(long, value_name = "FILE_HTML")]
        out: PathBuf,
        /// The results.json of the run.
        #[arg(value_name = "RESULTS_JSON")]
        results: PathBuf,
        /// Earlier runs: results.json files, or folders holding `*.json` files or run folders
        /// with a results.json each; repeat for several.
        #[arg(long, value_name = "DIR|FILE", num_args = 1..)]
        history: Vec<PathBuf>,
    },
}

#[derive(Args)]
struct BootstrapArgs {
    #[command(flatten)]
    root: RootArg,
    /// Push the base to `<registry>/<repository>` (no tag: the base's own, v1, is used)
    /// and print its digest.
    #[arg(long, value_name = "REGISTRY/REPOSITORY")]
    push: Option<String>,
    /// The Debian trixie image the base is made from, pulled from its registry (the tag is
    /// resolved to a digest once; later bootstraps pull that digest). Where it cannot be
    /// pulled, the base is made by mmdebstrap from Debian's packages. Empty: mmdebstrap only.
    /// Default: SANDBOX_MATRIX_DEBIAN_IMAGE, else debian:trixie-slim, and a current base is
    /// reused whichever way it was made.
    #[arg(long, value_name = "IMAGE")]
    base_from: Option<String>,
}

#[derive(Args)]
struct RootArg {
    /// The sandbox-matrix checkout holding scenarios/ and fixtures/.
    #[arg(long, default_value = ".", value_name = "DIR")]
    root: PathBuf,
}

#[derive(Args)]
struct Selection {
    /// Variant to run; repeat for several (docker, datalayer, datalayer-runtimes, e2b, daytona, modal).
    /// Default: every known variant that can run here (for `run`: docker and datalayer when
    /// an engine answers, and each cloud variant where it has a cassette, or live with
    /// --live).
    #[arg(long = "variant", value_name = "NAME")]
    variants: Vec<String>,
    /// Scenario to run: a name in scenarios/ (`lifecycle`) or a path to a YAML file;
    /// repeat for several. Default: every file in scenarios/.
    #[arg(long = "scenario", value_name = "NAME|PATH")]
    scenarios: Vec<String>,
    #[command(flatten)]
    root: RootArg,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    selection: Selection,
    /// List what `run --live` would run: every selected cloud variant, cassette or not.
    #[arg(long)]
    live: bool,
}

fn main() -> ExitCode {
    // Baked into sandbox images as /opt/datalayer/bin/datalayer-sandbox, this binary is the doctor.
    let invoked_as = std::env::args_os().next().map(PathBuf::from);
    if invoked_as
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n == sandbox_contract::doctor::DOCTOR)
    {
        return doctor::main_from_env();
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_REPORT);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::List(args) => list(&args.selection, args.live),
            Command::Run(args) => run(args).await,
            Command::Bootstrap(args) => {
                bootstrap(&args.root.root, args.push.as_deref(), args.base_from).await
            }
            Command::Preflight {
                variants,
                base,
                approved_bases,
                root,
            } => {
                let approved =
                    approved_bases.unwrap_or_else(|| root.root.join(APPROVED_BASES_FILE));
                preflight(&root.root, &variants, base.as_deref(), &approved).await
            }
            Command::Lint { files } => lint(&files),
            Command::Sweep(args) => sweep(args).await,
            Command::HoldBuild { engine, listen } => {
                match sandbox_providers::docker::hold::serve(&listen, &engine).await {
                    Ok(()) => EXIT_PASSED,
                    Err(e) => {
                        eprintln!("error: holding a build on {}: {e}", listen.display());
                        EXIT_FAILED
                    }
                }
            }
            Command::Merge { files, out } => merge(&files, &out),
            Command::Compare { baseline, current } => compare(&baseline, &current),
            Command::Gate {
                policy,
                results,
                baseline,
            } => gate(&policy, &results, baseline.as_deref()),
            Command::Report {
                out,
                results,
                history,
            } => html_report(&out, &results, &history),
            Command::Emulate(command) => emulate(command).await,
        }
    });
    ExitCode::from(code)
}

/// Resolves the selected scenarios and variant names, or says what is wrong.
fn select(selection: &Selection) -> Result<(Vec<String>, Vec<Scenario>), String> {
    let root = &selection.root.root;
    let known = variants::known();
    let variants = if selection.variants.is_empty() {
        known.iter().map(|v| (*v).to_owned()).collect()
    } else {
        for (i, v) in selection.variants.iter().enumerate() {
            if selection.variants[..i].contains(v) {
                return Err(format!(
                    "--variant {v} is given twice; name each variant once"
                ));
            }
            if !known.contains(&v.as_str()) {
                return Err(format!(
                    "unknown variant `{v}`; known variants: {}",
                    known.join(", ")
                ));
            }
        }
        selection.variants.clone()
    };
    let paths: Vec<PathBuf> = if selection.scenarios.is_empty() {
        let dir = root.join("scenarios");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| {
                format!(
                    "cannot list {}: {e} (run from the sandbox-matrix checkout, or pass --root)",
                    dir.display()
                )
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        paths.sort();
        paths
    } else {
        selection
            .scenarios
            .iter()
            .map(|s| scenario_path(root, s))
            .collect()
    };
    let scenarios = paths
        .iter()
        .map(|p| {
            let scenario = Scenario::load(p).map_err(|e| e.to_string())?;
            scenario.check_runnable().map_err(|e| e.to_string())?;
            Ok(scenario)
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Reports, cassettes and test names are keyed by name: two files with one name would
    // overwrite each other.
    for (i, scenario) in scenarios.iter().enumerate() {
        if let Some(first) = scenarios[..i].iter().find(|s| s.name == scenario.name) {
            return Err(format!(
                "{} and {} are both named `{}`; give each scenario its own name",
                first.path.display(),
                scenario.path.display(),
                scenario.name
            ));
        }
    }
    if scenarios.is_empty() {
        return Err(format!(
            "no scenario files in {}",
            root.join("scenarios").display()
        ));
    }
    Ok((variants, scenarios))
}

fn scenario_path(root: &Path, arg: &str) -> PathBuf {
    if arg.contains('/') || arg.ends_with(".yaml") || arg.ends_with(".yml") {
        PathBuf::from(arg)
    } else {
        root.join("scenarios").join(format!("{arg}.yaml"))
    }
}

fn list(selection: &Selection, live: bool) -> u8 {
    let named = !selection.variants.is_empty() && !selection.scenarios.is_empty();
    let cassettes = selection.root.root.join(variants::CASSETTES_DIR);
    match select(selection) {
        Ok((variants, scenarios)) => {
            for variant in &variants {
                for scenario in &scenarios {
                    let cassette = variants::cassette_path(&cassettes, variant, &scenario.name);
                    if !live && variants::cloud(variant).is_some() && !cassette.is_file() {
                        let why = format!(
                            "no cassette for {variant} × {} at {} (record one with --record, or pass --live)",
                            scenario.name,
                            cassette.display()
                        );
                        if named {
                            eprintln!("error: {why}");
                            return EXIT_BAD_INPUT;
                        }
                        eprintln!("{variant}::{}: not run: {why}", scenario.name);
                        continue;
                    }
                    let implicit_cleanup = scenario.step(StepKind::Cleanup).is_none();
                    for step in &scenario.steps {
                        println!(
                            "{variant}::{}::{}  (budget {})",
                            scenario.name,
                            step.name(),
                            humantime::format_duration(step.budget)
                        );
                    }
                    if implicit_cleanup {
                        println!(
                            "{variant}::{}::cleanup  (added: cleanup always runs)",
                            scenario.name
                        );
                    }
                }
            }
            EXIT_PASSED
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_BAD_INPUT
        }
    }
}

fn lint(files: &[PathBuf]) -> u8 {
    let mut code = EXIT_PASSED;
    for file in files {
        match sandbox_matrix::checks::lint::lint_file(file) {
            Ok(findings) if findings.is_empty() => eprintln!("{}: nothing refused", file.display()),
            Ok(findings) => {
                for finding in findings {
                    println!("{finding}");
                }
                code = code.max(EXIT_FAILED);
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = EXIT_BAD_INPUT;
            }
        }
    }
    code
}

fn merge(files: &[PathBuf], out: &Path) -> u8 {
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

fn compare(baseline: &Path, current: &Path) -> u8 {
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

fn gate(policy: &Path, path: &Path, baseline: Option<&Path>) -> u8 {
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

fn html_report(out: &Path, path: &Path, history_args: &[PathBuf]) -> u8 {
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

async fn preflight(root: &Path, selected: &[String], base: Option<&str>, approved: &Path) -> u8 {
    // A `--base` that is no reference by digest is bad input, not a variant not ready.
    if let Some(base) = base
        && let Err(e) = sandbox_providers::registry::DigestReference::parse(base)
    {
        eprintln!("error: --base: {}", e.message);
        return EXIT_BAD_INPUT;
    }
    let report = match sandbox_matrix::run::preflight::preflight(
        root,
        &harness_executable(),
        selected,
        base,
        approved,
    )
    .await
    {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    println!("{}", report.render());
    let not_ready = report.not_ready();
    if not_ready.is_empty() {
        println!("every variant checked is ready for a live run; nothing was created");
        EXIT_PASSED
    } else {
        println!("not ready: {}; nothing was created", not_ready.join(", "));
        EXIT_FAILED
    }
}

async fn bootstrap(root: &Path, push: Option<&str>, base_from: Option<String>) -> u8 {
    let target = match push
        .map(sandbox_providers::registry::Repository::parse)
        .transpose()
    {
        Ok(target) => target,
        Err(e) => {
            eprintln!("error: {}", e.message);
            return EXIT_BAD_INPUT;
        }
    };
    let mut recipe = variants::base_recipe(root, &harness_executable());
    if let Some(image) = base_from {
        recipe = recipe.with_debian_image(Some(image));
    }
    let provider = match sandbox_providers::docker::DockerProvider::connect(recipe).await {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("error: the docker variant needs a Docker engine: {e}");
            return EXIT_FAILED;
        }
    };
    let progress = |line: &str| eprintln!("  {line}");
    let interrupted = Interrupt::listen(None).token;
    let made = tokio::select! {
        made = provider.ensure_base(&progress) => made,
        _ = interrupted.cancelled() => {
            eprintln!("interrupted: the base was not made");
            return EXIT_INTERRUPTED;
        }
    };
    match made {
        Ok(base) => eprintln!(
            "base {}: {} ({}), its root filesystem made from {}",
            sandbox_providers::docker::base::BASE_IMAGE,
            base.id,
            if base.reused { "reused" } else { "built" },
            base.made_from
        ),
        Err(e) => {
            eprintln!("error: {e}");
            return if e.kind == sandbox_providers::ErrorKind::Config {
                EXIT_BAD_INPUT
            } else {
                EXIT_FAILED
            };
        }
    }
    let Some(target) = target else {
        return EXIT_PASSED;
    };
    use sandbox_providers::registry::{AuthMode, make_credential};
    let credential = match AuthMode::from_env() {
        Ok(mode) => make_credential(mode, &target.registry).await,
        Err(e) => Err(e),
    };
    let credential = match credential {
        Ok(credential) => credential,
        Err(e) => {
            eprintln!(
                "error: no credential for registry {}: {}",
                target.registry, e.message
            );
            return EXIT_FAILED;
        }
    };
    eprintln!("pushing the base to {target}");
    let progress = |line: &str| eprintln!("  {line}");
    match provider
        .push_base(&target, credential.as_ref(), &progress)
        .await
    {
        Ok(reference) => {
            println!("digest: {}", reference.digest);
            println!("base: {reference}");
            eprintln!(
                "use it with SANDBOX_MATRIX_BASE={reference}, and approve it by adding {} under {} in policies/approved-bases.yaml",
                reference.digest, reference.repository.path
            );
            EXIT_PASSED
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
    }
}

/// This executable, baked into images as the doctor.
fn harness_executable() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sandbox-matrix"))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".to_owned())
}
