//! `sandbox-matrix run`: the selected variants × scenarios, live, recorded, replayed or
//! emulated, each result written to the run folder as it comes. The run itself is
//! [`sandbox_matrix::run::plan`]; this is its arguments, the plan made of them, the signals
//! that interrupt it and the exit code it ends with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use sandbox_matrix::checks::approved::APPROVED_BASES_FILE;
use sandbox_matrix::run::plan::{self, Interruption, Outcome, Plan};
use sandbox_matrix::run::variants;
use sandbox_matrix::run::variants::CloudMode;
use sandbox_providers::api::replay::Pace;
use tokio_util::sync::CancellationToken;

use super::{
    EXIT_BAD_INPUT, EXIT_FAILED, EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_REPORT,
    EXIT_TERMINATED, Selected, Selection, harness_executable, host_name, select,
};

#[derive(Args)]
pub(crate) struct RunArgs {
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

/// Replay pacing, as the command line names it.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PaceArg {
    /// Every response at once.
    Instant,
    /// Each response after its recorded latency.
    Recorded,
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
pub(crate) struct Interrupt {
    pub(crate) token: CancellationToken,
    by: Arc<std::sync::OnceLock<String>>,
    code: Arc<std::sync::atomic::AtomicU8>,
}

impl Interrupt {
    /// Listens from now on; `sweep` is the command printed after a second signal.
    pub(crate) fn listen(sweep: Option<String>) -> Self {
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

pub(crate) async fn run(args: RunArgs) -> u8 {
    let Selected {
        variants,
        scenarios,
        partition,
    } = match select(&args.selection) {
        Ok(selected) => selected,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let root = args.selection.root.root.clone();
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
    let plan = Plan {
        variants,
        explicit_variants: !args.selection.variants.is_empty(),
        scenarios,
        explicit_scenarios: !args.selection.scenarios.is_empty(),
        partition,
        repeat: args.selection.repeat,
        out: args.out.clone().unwrap_or_else(|| root.join("reports")),
        verbose: args.verbose,
        base: args.base.clone(),
        approved_bases: args
            .approved_bases
            .clone()
            .unwrap_or_else(|| root.join(APPROVED_BASES_FILE)),
        cloud_mode,
        executable: harness_executable(),
        host: host_name(),
        root: root.clone(),
    };
    // Signals are listened for once the run has its id, so that a second one can name the
    // `sweep` command for what the run left.
    let mut interrupt = None;
    let outcome = plan::execute(plan, |run_id| {
        let listening = Interrupt::listen(Some(sweep_command(run_id, &root, args.out.as_deref())));
        let interruption = Interruption {
            token: listening.token.clone(),
            by: listening.by.clone(),
        };
        interrupt = Some(listening);
        interruption
    })
    .await;
    match outcome {
        Outcome::Passed => EXIT_PASSED,
        Outcome::Failed => EXIT_FAILED,
        Outcome::Interrupted => interrupt.map_or(EXIT_INTERRUPTED, |i| i.exit_code()),
        Outcome::BadInput(e) => {
            eprintln!("error: {e}");
            EXIT_BAD_INPUT
        }
        Outcome::NoEngine(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
        Outcome::Report(e) => {
            eprintln!("error: {e}");
            EXIT_REPORT
        }
    }
}
