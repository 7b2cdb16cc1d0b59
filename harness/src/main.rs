//! The `sandbox-matrix` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{Args, Parser, Subcommand};
use sandbox_matrix::checks::approved::APPROVED_BASES_FILE;
use sandbox_matrix::emulate;
use sandbox_matrix::report::results::{
    Provenance, RESULTS_SCHEMA_VERSION, RunResults, ScenarioResult, Source,
};
use sandbox_matrix::report::{self, results, run_folder};
use sandbox_matrix::run::base::RunBase;
use sandbox_matrix::run::events::{EventSink, Fanout, RunEvent};
use sandbox_matrix::run::ledger::Ledger;
use sandbox_matrix::run::runner::{Runner, fake_canary, new_run_id, unreachable_variant};
use sandbox_matrix::run::scenario::{Scenario, StepKind};
use sandbox_matrix::run::terminal::Terminal;
use sandbox_matrix::run::variants;
use sandbox_matrix::run::variants::CloudMode;
use sandbox_providers::api::replay::Pace;
use sandbox_providers::api::settings::Settings;
use sandbox_providers::docker::DockerProvider;
use tokio_util::sync::CancellationToken;

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
    Emulate {
        /// The provider to emulate.
        #[arg(value_enum)]
        provider: EmulatedProvider,
        /// Port on 127.0.0.1; 0 takes a free one.
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The domain it serves (default: e2b.test for e2b, daytona.test for daytona,
        /// modal.test for modal's TLS front, datalayer.test for datalayer: its API at
        /// r1.<domain>).
        #[arg(long, value_name = "DOMAIN")]
        domain: Option<String>,
        /// Where to write the test CA's certificate (PEM). Default: a file in the temp
        /// folder, removed on exit.
        #[arg(long, value_name = "FILE")]
        ca_out: Option<PathBuf>,
        /// Build this environment (a folder of fixtures/environments, such as `reference`)
        /// into a template before serving, and print its name (E2B_TEMPLATE) and exact
        /// build (E2B_TEMPLATE_BUILD, `<templateID>:<buildID>`).
        #[arg(long, value_name = "ENVIRONMENT")]
        template: Option<String>,
        /// e2b: the seeded template's start command instead of its environment's (as
        /// E2B_START_CMD does for a build). What it starts decides what port 49999 serves:
        /// a Jupyter Server, or E2B's code interpreter (`/root/.jupyter/start-up.sh`, what
        /// the SDK's `run_code` speaks to).
        #[arg(long, value_name = "COMMAND", requires = "template")]
        start_cmd: Option<String>,
        /// modal: how many seconds a command router JWT it issues lives (default 900); a
        /// short one makes a client's JWT expire mid-run.
        #[arg(long, value_name = "SECONDS")]
        router_jwt_ttl: Option<u64>,
        /// modal: the first call of this control-plane RPC (such as SandboxCreate) answers
        /// Unavailable, as a live control plane may (repeatable).
        #[arg(long, value_name = "RPC")]
        unavailable_once: Vec<String>,
        /// modal: sandboxes never get a task (their container is never launched), as when
        /// Modal cannot schedule them.
        #[arg(long)]
        no_task: bool,
        /// datalayer: the name its one environment (the reference environment, built at
        /// start) is listed and launched under (default ai-agents-env, datalayer-core
        /// 1.1.40's default).
        #[arg(long, value_name = "NAME")]
        environment_name: Option<String>,
        /// datalayer: the first create answers 200 with `success: false` and this message,
        /// as the platform does when it refuses a runtime.
        #[arg(long, value_name = "MESSAGE")]
        refuse_create: Option<String>,
        /// datalayer: each runtime's ingress answers 503 to its first N requests, as an
        /// ingress does while it warms up.
        #[arg(long, value_name = "N", default_value_t = 0)]
        warm_up: u32,
        /// daytona: build this environment (a folder of fixtures/environments, such as
        /// `reference`) into a snapshot before serving, and print its name
        /// (DAYTONA_SNAPSHOT) and id (DAYTONA_SNAPSHOT_ID); a sandbox is created from either.
        #[arg(long, value_name = "ENVIRONMENT")]
        snapshot: Option<String>,
        #[command(flatten)]
        root: RootArg,
    },
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
struct SweepArgs {
    /// The run whose leftovers to remove, such as 20261129T161528Z-6402a8: every
    /// resource carrying its run label, and every one its ledger (reports/<run-id>/
    /// ledger.jsonl, or wherever the run registered it) names. Without it: the runs whose
    /// process is gone, and resources with a run label older than --older-than of runs not
    /// alive.
    #[arg(long = "run", value_name = "RUN_ID")]
    run_id: Option<String>,
    /// With --run: sweep the run even though its process is alive.
    #[arg(long, requires = "run_id")]
    force: bool,
    /// The reports folder holding the runs' ledgers. Default: <root>/reports.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Without --run: also remove resources with a run label created longer ago than this,
    /// except those of a run whose process is alive.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_age, conflicts_with = "run_id")]
    older_than: (std::time::Duration, String),
    /// List what would be removed, removing nothing.
    #[arg(long)]
    dry_run: bool,
    /// Variant to sweep; repeat for several (docker, datalayer, datalayer-runtimes, e2b,
    /// daytona, modal). Default: with --run, the variants its ledger names; else every
    /// variant, passing over one that cannot be reached.
    #[arg(long = "variant", value_name = "NAME")]
    variants: Vec<String>,
    #[command(flatten)]
    root: RootArg,
}

/// A duration as humantime reads it, with the text given.
fn parse_age(text: &str) -> Result<(std::time::Duration, String), String> {
    humantime::parse_duration(text)
        .map(|d| (d, text.to_owned()))
        .map_err(|e| e.to_string())
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

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    selection: Selection,
    /// Under a step that failed, print its own log (what the step saw, e.g. the transport
    /// error, before the run asked what happened to the sandbox); results.json keeps it
    /// either way.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Folder the run's reports go to (a sub-folder per run, and a `latest` link).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run the cloud variants against their real APIs, with credentials from the
    /// environment (E2B_API_KEY, DAYTONA_API_KEY, MODAL_TOKEN_ID and MODAL_TOKEN_SECRET,
    /// DATALAYER_API_KEY, ...); a missing one is an error.
    /// Without it, cloud variants replay their cassettes on loopback.
    #[arg(long)]
    live: bool,
    /// Like --live (or --emulated), and write every exchange (HTTP request, or gRPC call
    /// for modal) to <cassettes>/<variant>/<scenario>.yaml with each credential replaced by
    /// a placeholder.
    #[arg(long, conflicts_with = "live")]
    record: bool,
    /// Run the cloud variants against sandbox-matrix's own emulator of each provider,
    /// started for each scenario on 127.0.0.1 over the local Docker engine and stopped
    /// after it: any scenario and environment, no credentials. Results read `emulated`,
    /// never the provider's; `gate` holds them unless a policy says `allow_emulated: true`.
    #[arg(long, conflicts_with = "live")]
    emulated: bool,
    /// How fast replayed responses come back: at once (replayed timings then read
    /// `replayed`), or after their recorded latency (shown marked `(recorded <date>)`).
    #[arg(long, value_enum, default_value_t = PaceArg::Instant)]
    pace: PaceArg,
    /// Run each variant × scenario this many times, one after another; reports give
    /// percentiles and the success rate over the repetitions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    repeat: u32,
    /// Folder of cassettes. Default: <root>/fixtures/cassettes.
    #[arg(long, value_name = "DIR")]
    cassettes: Option<PathBuf>,
    /// The base every environment builds from, in a registry by digest:
    /// `<registry>/<repository>@sha256:<digest>` (a tag is refused). The credential is made
    /// once for the run as SANDBOX_MATRIX_REGISTRY_AUTH says. Without it, the locally
    /// bootstrapped sandbox-matrix/contract-base:v1.
    #[arg(long, env = "SANDBOX_MATRIX_BASE", value_name = "REFERENCE")]
    base: Option<String>,
    /// The approved bases file a registry base's digest must be listed in. Default:
    /// <root>/policies/approved-bases.yaml.
    #[arg(long, env = "SANDBOX_MATRIX_APPROVED_BASES", value_name = "FILE")]
    approved_bases: Option<PathBuf>,
}

/// The providers `emulate` serves.
#[derive(Clone, Copy, clap::ValueEnum)]
enum EmulatedProvider {
    /// E2B's control plane, envd and the code interpreter.
    E2b,
    /// Daytona's API and toolbox.
    Daytona,
    /// Modal's gRPC control plane and task command router.
    Modal,
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress.
    Datalayer,
}

/// Replay pacing, as the command line names it.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PaceArg {
    /// Every response at once.
    Instant,
    /// Each response after its recorded latency.
    Recorded,
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
            Command::Emulate {
                provider,
                port,
                domain,
                ca_out,
                template,
                start_cmd,
                snapshot,
                router_jwt_ttl,
                unavailable_once,
                no_task,
                environment_name,
                refuse_create,
                warm_up,
                root,
            } => {
                let options = EmulateArgs {
                    port,
                    domain,
                    ca_out,
                    template,
                    start_cmd,
                    snapshot,
                    router_jwt_ttl,
                    unavailable_once,
                    no_task,
                    datalayer: sandbox_matrix::emulate::datalayer::Faults {
                        refuse_create,
                        warm_up,
                    },
                    environment_name,
                };
                emulate(provider, options, &root.root).await
            }
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

/// What `emulate` was asked for, besides the provider.
struct EmulateArgs {
    port: u16,
    domain: Option<String>,
    ca_out: Option<PathBuf>,
    template: Option<String>,
    start_cmd: Option<String>,
    snapshot: Option<String>,
    router_jwt_ttl: Option<u64>,
    unavailable_once: Vec<String>,
    no_task: bool,
    datalayer: sandbox_matrix::emulate::datalayer::Faults,
    environment_name: Option<String>,
}

async fn emulate(provider: EmulatedProvider, args: EmulateArgs, root: &Path) -> u8 {
    let EmulateArgs {
        port,
        domain,
        ca_out,
        template,
        start_cmd,
        snapshot,
        router_jwt_ttl,
        unavailable_once,
        no_task,
        datalayer,
        environment_name,
    } = args;
    use sandbox_providers::api::network::CA_FILE_VAR;
    match provider {
        EmulatedProvider::E2b if snapshot.is_some() => {
            eprintln!("error: --snapshot is daytona's; e2b has templates (--template)");
            return EXIT_BAD_INPUT;
        }
        EmulatedProvider::Modal
            if template.is_some() || start_cmd.is_some() || snapshot.is_some() =>
        {
            eprintln!(
                "error: --template, --start-cmd and --snapshot are e2b's and daytona's; modal builds images from each client's Dockerfile commands"
            );
            return EXIT_BAD_INPUT;
        }
        EmulatedProvider::E2b | EmulatedProvider::Daytona
            if router_jwt_ttl.is_some() || !unavailable_once.is_empty() || no_task =>
        {
            eprintln!("error: --router-jwt-ttl, --unavailable-once and --no-task are modal's");
            return EXIT_BAD_INPUT;
        }
        EmulatedProvider::Datalayer
            if template.is_some()
                || start_cmd.is_some()
                || snapshot.is_some()
                || router_jwt_ttl.is_some()
                || !unavailable_once.is_empty()
                || no_task =>
        {
            eprintln!(
                "error: datalayer takes --environment-name, --refuse-create and --warm-up; its one environment is the reference environment, built at start"
            );
            return EXIT_BAD_INPUT;
        }
        EmulatedProvider::E2b | EmulatedProvider::Daytona | EmulatedProvider::Modal
            if environment_name.is_some()
                || datalayer.refuse_create.is_some()
                || datalayer.warm_up > 0 =>
        {
            eprintln!("error: --environment-name, --refuse-create and --warm-up are datalayer's");
            return EXIT_BAD_INPUT;
        }
        EmulatedProvider::Daytona if template.is_some() || start_cmd.is_some() => {
            eprintln!(
                "error: --template and --start-cmd are e2b's; daytona has snapshots (--snapshot)"
            );
            return EXIT_BAD_INPUT;
        }
        _ => {}
    }
    let docker = match variants::docker_provider(root, &harness_executable()).await {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    if let Err(e) = sandbox_providers::Provider::prepare(
        docker.as_ref(),
        &sandbox_matrix::run::base::RunBase::local().base,
        &|line: &str| eprintln!("prepare: {line}"),
    )
    .await
    {
        eprintln!("error: the docker variant's base image: {e}");
        return EXIT_FAILED;
    }
    let which = match provider {
        EmulatedProvider::E2b => emulate::Emulated::E2b,
        EmulatedProvider::Daytona => emulate::Emulated::Daytona,
        EmulatedProvider::Modal => emulate::Emulated::Modal,
        EmulatedProvider::Datalayer => emulate::Emulated::Datalayer,
    };
    let environment = root.join("fixtures/environments/reference");
    let mut launch = emulate::launch::Launch::new(environment.clone());
    launch.port = port;
    launch.domain = domain;
    if let Some(ttl) = router_jwt_ttl {
        launch.router_jwt_ttl = std::time::Duration::from_secs(ttl);
    }
    launch.unavailable_once = unavailable_once;
    launch.no_task = no_task;
    launch.datalayer_faults = datalayer;
    if let Some(name) = environment_name {
        launch.environment_name = name;
    }
    if which == emulate::Emulated::Datalayer {
        eprintln!(
            "building {} into environment {}",
            environment.display(),
            launch.environment_name
        );
    }
    let mut running = match emulate::launch::start(which, docker, launch, &|line: &str| {
        eprintln!("environment: {line}")
    })
    .await
    {
        Ok(running) => running,
        Err(emulate::EmulateError::Config(e)) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
        Err(e) => {
            eprintln!("error: cannot start the {} emulator: {e}", which.provider());
            return EXIT_FAILED;
        }
    };
    // A template or snapshot seeded from an environment folder, for an SDK user to start.
    let seeded = match (&running.emulator, template, snapshot) {
        (emulate::launch::Emulator::E2b(emulator), Some(folder), _) => {
            let dir = root.join("fixtures/environments").join(&folder);
            eprintln!("building {} into a template", dir.display());
            emulator
                .seed(&dir, start_cmd, &|line: &str| eprintln!("template: {line}"))
                .await
                .map(|seeded| {
                    vec![
                        ("E2B_TEMPLATE", seeded.name),
                        ("E2B_TEMPLATE_BUILD", seeded.build),
                    ]
                })
                .map_err(|e| format!("the {folder} template: {e}"))
        }
        (emulate::launch::Emulator::Daytona(emulator), _, Some(folder)) => {
            let dir = root.join("fixtures/environments").join(&folder);
            eprintln!("building {} into a snapshot", dir.display());
            emulator
                .seed(&dir, &|line: &str| eprintln!("snapshot: {line}"))
                .await
                .map(|seeded| {
                    vec![
                        ("DAYTONA_SNAPSHOT", seeded.name),
                        ("DAYTONA_SNAPSHOT_ID", seeded.id),
                    ]
                })
                .map_err(|e| format!("the {folder} snapshot: {e}"))
        }
        _ => Ok(Vec::new()),
    };
    match seeded {
        Ok(seeded) => running.settings.extend(seeded),
        Err(e) => {
            eprintln!("error: {e}");
            running.stop().await;
            return EXIT_FAILED;
        }
    }
    let ca_pem = running.ca_pem.clone();
    let settings = running.settings.clone();
    let (ca_file, temporary) = match ca_out {
        Some(path) => (path, false),
        None => (
            std::env::temp_dir().join(format!(
                "sandbox-matrix-emulate-{}-ca.pem",
                std::process::id()
            )),
            true,
        ),
    };
    if let Err(e) = std::fs::write(&ca_file, &ca_pem) {
        eprintln!(
            "error: cannot write the CA certificate to {}: {e}",
            ca_file.display()
        );
        running.stop().await;
        return EXIT_FAILED;
    }
    for (name, value) in &settings {
        println!("{name}={value}");
    }
    println!("{CA_FILE_VAR}={}", ca_file.display());
    eprintln!(
        "serving until Ctrl-C or SIGTERM; {}",
        match provider {
            EmulatedProvider::Modal =>
                "only the printed MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are accepted",
            _ =>
                "any non-empty API key is accepted (the emulator checks only that one is sent; the printed one is a fake)",
        }
    );
    wait_for_stop().await;
    eprintln!("stopping: removing the emulator's sandboxes and builds");
    running.stop().await;
    if temporary {
        let _ = std::fs::remove_file(&ca_file);
    }
    EXIT_PASSED
}

/// Returns on Ctrl-C or SIGTERM.
async fn wait_for_stop() {
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How `sweep` reaches each variant: cloud variants live, with credentials from the
/// environment; docker on the local engine; datalayer on its configured registry, or on the
/// engine alone when none is configured.
struct SweepConnect {
    root: PathBuf,
}

#[async_trait::async_trait]
impl sandbox_matrix::sweep::Connect for SweepConnect {
    async fn connect(&self, name: &str) -> Result<sandbox_matrix::sweep::Reached, String> {
        use sandbox_matrix::sweep::Reached;
        use sandbox_providers::datalayer;
        let reached = |provider| Reached {
            provider,
            note: None,
            elsewhere: None,
        };
        match variants::cloud(name) {
            Some(cloud) => (cloud.connect)(
                sandbox_providers::api::Mode::Live,
                std::sync::Arc::default(),
                &Settings::environment(),
            )
            .map(reached)
            .map_err(|e| e.to_string()),
            None if name == "datalayer" => {
                let executable = harness_executable();
                if let Some(provider) =
                    variants::connect_datalayer_configured(&self.root, &executable).await?
                {
                    return Ok(reached(provider));
                }
                let engine = variants::connect_docker(&self.root, &executable).await?;
                Ok(Reached {
                    provider: engine,
                    note: Some(format!(
                        "no registry configured ({} unset): its images and containers are swept on the engine",
                        datalayer::REGISTRY_VAR
                    )),
                    elsewhere: Some(Box::new(|resource| {
                        (resource.kind == datalayer::MANIFEST_RESOURCE).then(|| {
                            let host = resource.id.split('/').next().unwrap_or_default();
                            if host.starts_with("127.0.0.1:") || host.starts_with("localhost:") {
                                Ok(format!(
                                    "in the run's own registry on {host}, which went with the run (its storage folder is removed with the run's)"
                                ))
                            } else {
                                Err(format!(
                                    "in registry {host}, which this sweep has not configured: set {} and its credentials, and sweep again",
                                    datalayer::REGISTRY_VAR
                                ))
                            }
                        })
                    })),
                })
            }
            None => variants::connect_docker(&self.root, &harness_executable())
                .await
                .map(reached),
        }
    }
}

/// `sweep`, as [`sandbox_matrix::sweep::sweep`] does it.
async fn sweep(args: SweepArgs) -> u8 {
    use sandbox_matrix::sweep::{Ended, Scope, SweepOptions, To};
    let known = variants::known();
    if let Some(unknown) = args.variants.iter().find(|v| !known.contains(&v.as_str())) {
        eprintln!(
            "error: unknown variant `{unknown}`; known variants: {}",
            known.join(", ")
        );
        return EXIT_BAD_INPUT;
    }
    let root = &args.root.root;
    let options = SweepOptions {
        out: args.out.unwrap_or_else(|| root.join("reports")),
        runs_dir: sandbox_matrix::run::live_runs::dir(),
        dry_run: args.dry_run,
        variants: args.variants,
    };
    let scope = match args.run_id {
        Some(id) => Scope::Run {
            id,
            force: args.force,
        },
        None => Scope::Gone {
            older_than: args.older_than.0,
            shown: args.older_than.1,
        },
    };
    let connect = SweepConnect { root: root.clone() };
    let say = |to: To, line: &str| match to {
        To::Out => println!("{line}"),
        To::Err => eprintln!("{line}"),
    };
    match sandbox_matrix::sweep::sweep(&scope, &options, &connect, &say).await {
        Ended::Clean => EXIT_PASSED,
        Ended::Failed => EXIT_FAILED,
        Ended::BadInput(e) => {
            eprintln!("error: {e}");
            EXIT_BAD_INPUT
        }
        Ended::Refused(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
    }
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

/// The command that removes what run `run_id` left, as its user would type it.
fn sweep_command(run_id: &str, root: &Path, out: Option<&Path>) -> String {
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "sandbox-matrix".to_owned());
    let mut command = format!("{program} sweep --run {run_id}");
    if root != Path::new(".") {
        command.push_str(&format!(" --root {}", root.display()));
    }
    if let Some(out) = out {
        command.push_str(&format!(" --out {}", out.display()));
    }
    command
}

/// The run's signal handling: SIGINT, SIGTERM and SIGHUP all cancel the run (the current
/// step stops, cleanup runs within its budget, the reports are written); a second signal
/// quits at once, printing the `sweep` command for what is left.
struct Interrupt {
    token: CancellationToken,
    by: Arc<std::sync::OnceLock<String>>,
    code: Arc<std::sync::atomic::AtomicU8>,
}

impl Interrupt {
    fn listen(sweep: Option<String>) -> Self {
        let token = CancellationToken::new();
        let by: Arc<std::sync::OnceLock<String>> = Arc::default();
        let code = Arc::new(std::sync::atomic::AtomicU8::new(EXIT_INTERRUPTED));
        let (child, named, exit) = (token.clone(), by.clone(), code.clone());
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                eprintln!(
                    "warning: cannot listen for signals; a signal ends the run without cleanup"
                );
                return;
            };
            let next = async |int: &mut tokio::signal::unix::Signal,
                              term: &mut tokio::signal::unix::Signal,
                              hup: &mut tokio::signal::unix::Signal| {
                tokio::select! {
                    _ = int.recv() => ("Ctrl-C", EXIT_INTERRUPTED),
                    _ = term.recv() => ("SIGTERM", EXIT_TERMINATED),
                    _ = hup.recv() => ("SIGHUP", EXIT_HANGUP),
                }
            };
            let (name, first) = next(&mut int, &mut term, &mut hup).await;
            let _ = named.set(name.to_owned());
            exit.store(first, std::sync::atomic::Ordering::SeqCst);
            eprintln!(
                "\ninterrupted by {name}: stopping the current step and cleaning up within the cleanup budget (a second signal quits at once)"
            );
            child.cancel();
            let (second, code) = next(&mut int, &mut term, &mut hup).await;
            match &sweep {
                Some(sweep) => eprintln!(
                    "\n{second} again: quitting at once without cleanup. Remove what the run left with:\n  {sweep}"
                ),
                None => eprintln!("\n{second} again: quitting at once"),
            }
            std::process::exit(i32::from(code));
        });
        Self { token, by, code }
    }

    /// 128 + the number of the signal that interrupted the run.
    fn exit_code(&self) -> u8 {
        self.code.load(std::sync::atomic::Ordering::SeqCst)
    }
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

async fn run(args: RunArgs) -> u8 {
    let (variant_names, scenarios) = match select(&args.selection) {
        Ok(selected) => selected,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let root = &args.selection.root.root;
    let out = args.out.clone().unwrap_or_else(|| root.join("reports"));
    let collector = Arc::new(Collector(Mutex::new(Vec::new())));
    let terminal = Arc::new(Terminal::new().with_failed_step_logs(args.verbose));
    terminal.scrub_with(report::self_scan::environment_credentials());
    let sink: Arc<dyn EventSink> = Arc::new(Fanout(vec![
        Box::new(terminal.clone()),
        Box::new(collector.clone()),
    ]));
    let approved = args
        .approved_bases
        .clone()
        .unwrap_or_else(|| root.join(APPROVED_BASES_FILE));
    // The base and its registry credential, made once for the whole run.
    let base = match RunBase::resolve(args.base.as_deref(), &approved).await {
        Ok(base) => base,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let base_line = base.describe();
    let run_id = new_run_id();
    let interrupt = Interrupt::listen(Some(sweep_command(&run_id, root, args.out.as_deref())));
    let cancel = interrupt.token.clone();
    let runner = Runner::new(run_id.clone(), fake_canary(), sink.clone(), cancel.clone())
        .with_base(base)
        .with_interrupt_name(interrupt.by.clone());
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
        host: host_name(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        base: Some(runner.base().base.reference.clone()),
        shards: Vec::new(),
    };
    let cassettes = args
        .cassettes
        .clone()
        .unwrap_or_else(|| root.join(variants::CASSETTES_DIR));
    let cloud_mode = if args.emulated {
        CloudMode::Emulated {
            record: args.record.then_some(cassettes),
        }
    } else if args.record {
        CloudMode::Record { dir: cassettes }
    } else if args.live {
        CloudMode::Live
    } else {
        CloudMode::Replay {
            dir: cassettes,
            pace: match args.pace {
                PaceArg::Instant => Pace::Instant,
                PaceArg::Recorded => Pace::Recorded,
            },
        }
    };
    let explicit = !args.selection.variants.is_empty();
    let mut variant_names = variant_names;
    // Without --variant, run every variant that can run here: the local ones when an
    // engine answers, a cloud variant live when asked, else where it has cassettes.
    let mut skip = std::collections::HashMap::new();
    let mut local = std::collections::HashMap::new();
    for name in variants::LOCAL {
        if !variant_names.iter().any(|v| v == name) {
            continue;
        }
        let scratch = variants::run_scratch(&run_id);
        match variants::connect_local(name, root, &harness_executable(), &scratch).await {
            Ok(session) => {
                if let Some(note) = &session.note {
                    eprintln!("{name}: {note}");
                }
                written_secrets.extend(session.secrets.iter().cloned());
                local.insert(*name, Ok(session));
            }
            Err(variants::LocalUnavailable::Config(e)) => {
                eprintln!("error: the {name} variant cannot run: {e}");
                return EXIT_BAD_INPUT;
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
                    eprintln!("error: the {name} variant cannot run live: {e}");
                    return EXIT_BAD_INPUT;
                }
                // A provider's builder cannot pull this engine's local base: refuse now, not
                // minutes into the provider's build. An emulator on this machine can.
                if cloud.capabilities.build
                    && runner.base().reference.is_none()
                    && !cloud.at_loopback()
                {
                    eprintln!(
                        "error: the {name} variant cannot build live from the local base {}: its builder pulls the base from a registry; set {}=<registry>/<repository>@sha256:<digest> (`sandbox-matrix bootstrap --push <registry>/<repository>` prints it; `sandbox-matrix preflight --variant {name}` checks it)",
                        runner.base().base.reference,
                        sandbox_matrix::run::base::BASE_VAR
                    );
                    return EXIT_BAD_INPUT;
                }
            }
            CloudMode::Emulated { .. } => {
                // Each scenario gets its emulator; they share one docker variant.
                if emulator_docker.is_none() {
                    match emulator_backend(root).await {
                        Ok(docker) => emulator_docker = Some(docker),
                        Err(e) => {
                            eprintln!("error: the emulators need the local engine: {e}");
                            return EXIT_FAILED;
                        }
                    }
                }
            }
            CloudMode::Replay { dir, .. } => {
                for scenario in &scenarios {
                    let path = match variants::checked_cassette_path(dir, name, &scenario.name) {
                        Ok(path) => path,
                        Err(e) => {
                            eprintln!("error: {e}");
                            return EXIT_BAD_INPUT;
                        }
                    };
                    if path.is_file() {
                        // A cassette that does not parse is bad input: say where, run nothing.
                        if let Err(e) = variants::check_cassette(cloud, &path, &scenario.name) {
                            eprintln!("error: {e}");
                            return EXIT_BAD_INPUT;
                        }
                        continue;
                    }
                    // Asked for by name, both of them: not replaying it is an error.
                    if explicit && !args.selection.scenarios.is_empty() {
                        eprintln!(
                            "error: no cassette for {name} × {} at {} (record one with --record, or pass --live)",
                            scenario.name,
                            path.display()
                        );
                        return EXIT_BAD_INPUT;
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
        eprintln!("error: {e}");
        return EXIT_REPORT;
    }
    // The input is good: before anything is created, every create is recorded here first.
    let ledger = match Ledger::create(&out.join(&run_id), &run_id) {
        Ok(ledger) => Arc::new(ledger),
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_REPORT;
        }
    };
    runner.attach_ledger(ledger.clone());
    // Registered where every sweep on this machine looks, so that none takes what this run
    // is using, wherever its reports go.
    let registered = match sandbox_matrix::run::live_runs::Registered::register(
        &sandbox_matrix::run::live_runs::dir(),
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
        // Live variants build each environment once per run; a cassette holds its own build.
        if plan.is_some()
            || (variants::cloud(name).is_some() && matches!(cloud_mode, CloudMode::Live))
        {
            runner.plan_shared_builds(
                name,
                scenarios
                    .iter()
                    .filter(|s| !skip.contains_key(&(name.clone(), s.name.clone())))
                    .flat_map(|s| std::iter::repeat_n(s, args.repeat as usize)),
            );
        }
        let mut last_provider: Option<Arc<dyn sandbox_providers::Provider>> = None;
        for (scenario, repetition) in scenarios
            .iter()
            .flat_map(|s| (1..=args.repeat).map(move |r| (s, r)))
        {
            if let Some(reason) = skip.get(&(name.clone(), scenario.name.clone())) {
                if repetition == 1 {
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
            let results = snapshot(&provenance, &collector);
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
    let results = snapshot(&provenance, &collector);
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
        eprintln!("error: {e}");
        return EXIT_REPORT;
    }
    if cancel.is_cancelled() {
        interrupt.exit_code()
    } else if results.scenarios.iter().all(ScenarioResult::passed) {
        EXIT_PASSED
    } else {
        EXIT_FAILED
    }
}

fn snapshot(provenance: &Provenance, collector: &Collector) -> RunResults {
    RunResults {
        schema_version: RESULTS_SCHEMA_VERSION.to_owned(),
        provenance: provenance.clone(),
        scenarios: collector.0.lock().expect("collector lock").clone(),
    }
}

/// The docker variant the emulators of a run build and launch on, its base image ready.
async fn emulator_backend(root: &Path) -> Result<Arc<DockerProvider>, String> {
    let docker = variants::docker_provider(root, &harness_executable()).await?;
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
    scenario: &sandbox_matrix::run::scenario::Scenario,
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
