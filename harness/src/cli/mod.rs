//! The command line: its commands and options (clap), and one file per command whose work
//! is more than a call into the library.

mod bootstrap;
mod emulate;
mod lint;
mod list;
mod preflight;
mod results_files;
mod run;
mod sweep;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use sandbox_matrix::checks::approved::APPROVED_BASES_FILE;
use sandbox_matrix::run::partition::Partition;
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants;

use bootstrap::bootstrap;
use emulate::{EmulateCommand, emulate};
use lint::lint;
use list::list;
use preflight::preflight;
use results_files::{compare, gate, html_report, merge};
use run::{Interrupt, RunArgs, run};
use sweep::{SweepArgs, sweep};

/// Exit code when every step passed.
pub(crate) const EXIT_PASSED: u8 = 0;
/// Exit code when a step failed.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit code for bad input: a scenario that does not parse, an unknown variant.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when the run could not write its reports.
pub(crate) const EXIT_REPORT: u8 = 3;
/// Exit code after Ctrl-C (SIGINT), once cleanup has run: 128 + the signal's number.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;
/// Exit code after SIGTERM, once cleanup has run.
pub(crate) const EXIT_TERMINATED: u8 = 143;
/// Exit code after SIGHUP, once cleanup has run.
pub(crate) const EXIT_HANGUP: u8 = 129;

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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run scenarios on variants; print the comparison table and write reports/<run-id>/.
    ///
    /// Every resource the run creates is labelled with the run id and removed at the end,
    /// whatever happened: a failed step, a panic, or Ctrl-C.
    Run(RunArgs),
    /// List what `run` would run, one line per variant::scenario::step, without running it.
    ///
    /// A cloud variant replays its cassettes: a scenario it has none for is not run (and,
    /// asked for by name with its variant, refused, exit 2), as `run` does; with --live it
    /// is listed. With --repeat N each repetition k is listed as `variant::scenario[k]::step`;
    /// with --partition K/N, only the items of that share.
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
pub(crate) struct BootstrapArgs {
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
pub(crate) struct RootArg {
    /// The sandbox-matrix checkout holding scenarios/ and fixtures/.
    #[arg(long, default_value = ".", value_name = "DIR")]
    root: PathBuf,
}

#[derive(Args)]
pub(crate) struct Selection {
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
    /// Each variant × scenario this many times, one after another; reports give percentiles
    /// and the success rate over the repetitions (`list` names repetition k `<scenario>[k]`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    repeat: u32,
    /// Only share K of N (1 ≤ K ≤ N) of the variant × scenario × repetition items, each
    /// placed by a hash of `variant::scenario::repetition` that is the same on every
    /// machine and run: the N shares are disjoint and together are the whole selection, one
    /// per CI job; `merge` joins their results.
    #[arg(long, value_name = "K/N")]
    partition: Option<String>,
    #[command(flatten)]
    root: RootArg,
}

/// What a [`Selection`] resolved to.
struct Selected {
    /// The variant names, in order.
    variants: Vec<String>,
    /// The scenarios, loaded and checked.
    scenarios: Vec<Scenario>,
    /// The share of the items to run, when `--partition` was given.
    partition: Option<Partition>,
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    selection: Selection,
    /// List what `run --live` would run: every selected cloud variant, cassette or not.
    #[arg(long)]
    live: bool,
}

/// Runs `command`; returns the process's exit code.
pub(crate) async fn dispatch(command: Command) -> u8 {
    match command {
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
            let approved = approved_bases.unwrap_or_else(|| root.root.join(APPROVED_BASES_FILE));
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
}

/// Resolves the selected scenarios, variant names and partition, or says what is wrong.
fn select(selection: &Selection) -> Result<Selected, String> {
    let partition = selection
        .partition
        .as_deref()
        .map(|text| {
            text.parse::<Partition>()
                .map_err(|e| format!("--partition {text}: {e}"))
        })
        .transpose()?;
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
    Ok(Selected {
        variants,
        scenarios,
        partition,
    })
}

fn scenario_path(root: &Path, arg: &str) -> PathBuf {
    if arg.contains('/') || arg.ends_with(".yaml") || arg.ends_with(".yml") {
        PathBuf::from(arg)
    } else {
        root.join("scenarios").join(format!("{arg}.yaml"))
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
