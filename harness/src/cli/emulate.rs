//! `sandbox-matrix emulate <provider>`: one emulator served until Ctrl-C or SIGTERM, with
//! what a client needs to reach it printed as `NAME=value` lines.

use std::path::PathBuf;

use sandbox_emulators as emulate;
use sandbox_matrix::run::plan::emulator_backend;

use clap::{Args, Subcommand};

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED, RootArg, harness_executable};

/// `emulate`'s arguments: the provider, as a subcommand with its own options.
#[derive(Args)]
pub(crate) struct EmulateCommand {
    #[command(subcommand)]
    provider: EmulatedProvider,
}

/// What every emulator takes.
#[derive(Args)]
struct Serving {
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
    /// Fault: end every sandbox this many seconds after its create, whatever its
    /// timeout or auto-stop asks, as a live provider's sandbox may die early (the
    /// `lifetime` step fails on it).
    #[arg(long, value_name = "SECONDS")]
    kill_after: Option<f64>,
    #[command(flatten)]
    root: RootArg,
}

/// The providers `emulate` serves, each with its own options.
#[derive(Subcommand)]
enum EmulatedProvider {
    /// E2B's control plane, envd and the code interpreter.
    E2b {
        #[command(flatten)]
        serving: Serving,
        /// Build this environment (a folder of fixtures/environments, such as `reference`)
        /// into a template before serving, and print its name (E2B_TEMPLATE) and exact
        /// build (E2B_TEMPLATE_BUILD, `<templateID>:<buildID>`).
        #[arg(long, value_name = "ENVIRONMENT")]
        template: Option<String>,
        /// The seeded template's start command instead of its environment's (as
        /// E2B_START_CMD does for a build). What it starts decides what port 49999 serves:
        /// a Jupyter Server, or E2B's code interpreter (`/root/.jupyter/start-up.sh`, what
        /// the SDK's `run_code` speaks to).
        #[arg(long, value_name = "COMMAND", requires = "template")]
        start_cmd: Option<String>,
    },
    /// Daytona's API and toolbox.
    Daytona {
        #[command(flatten)]
        serving: Serving,
        /// Build this environment (a folder of fixtures/environments, such as
        /// `reference`) into a snapshot before serving, and print its name
        /// (DAYTONA_SNAPSHOT) and id (DAYTONA_SNAPSHOT_ID); a sandbox is created from either.
        #[arg(long, value_name = "ENVIRONMENT")]
        snapshot: Option<String>,
    },
    /// Modal's gRPC control plane and task command router.
    Modal {
        #[command(flatten)]
        serving: Serving,
        /// How many seconds a command router JWT it issues lives (default 900); a short
        /// one makes a client's JWT expire mid-run.
        #[arg(long, value_name = "SECONDS")]
        router_jwt_ttl: Option<u64>,
        /// The first call of this control-plane RPC (such as SandboxCreate) answers
        /// Unavailable, as a live control plane may (repeatable).
        #[arg(long, value_name = "RPC")]
        unavailable_once: Vec<String>,
        /// Sandboxes never get a task (their container is never launched), as when Modal
        /// cannot schedule them.
        #[arg(long)]
        no_task: bool,
    },
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress; its one
    /// environment is the reference environment, built at start.
    Datalayer {
        #[command(flatten)]
        serving: Serving,
        /// The name its environment is listed and launched under (default ai-agents-env,
        /// datalayer-core 1.1.40's default).
        #[arg(long, value_name = "NAME")]
        environment_name: Option<String>,
        /// The first create answers 200 with `success: false` and this message, as the
        /// platform does when it refuses a runtime.
        #[arg(long, value_name = "MESSAGE")]
        refuse_create: Option<String>,
        /// Each runtime's ingress answers 503 to its first N requests, as an ingress does
        /// while it warms up.
        #[arg(long, value_name = "N", default_value_t = 0)]
        warm_up: u32,
    },
}

/// Serves the emulator `command` names until Ctrl-C or SIGTERM.
pub(crate) async fn emulate(command: EmulateCommand) -> u8 {
    use sandbox_providers::api::network::CA_FILE_VAR;
    let mut launch = emulate::launch::Launch::new(PathBuf::new());
    // What to seed before serving: an environment folder, and what it becomes.
    let (which, serving, seed) = match command.provider {
        EmulatedProvider::E2b {
            serving,
            template,
            start_cmd,
        } => {
            launch.start_cmd = start_cmd;
            let seed = template.map(|folder| (folder, "template"));
            (emulate::Emulated::E2b, serving, seed)
        }
        EmulatedProvider::Daytona { serving, snapshot } => {
            let seed = snapshot.map(|folder| (folder, "snapshot"));
            (emulate::Emulated::Daytona, serving, seed)
        }
        EmulatedProvider::Modal {
            serving,
            router_jwt_ttl,
            unavailable_once,
            no_task,
        } => {
            if let Some(ttl) = router_jwt_ttl {
                launch.router_jwt_ttl = std::time::Duration::from_secs(ttl);
            }
            launch.unavailable_once = unavailable_once;
            launch.no_task = no_task;
            (emulate::Emulated::Modal, serving, None)
        }
        EmulatedProvider::Datalayer {
            serving,
            environment_name,
            refuse_create,
            warm_up,
        } => {
            launch.datalayer_faults = emulate::datalayer::Faults {
                refuse_create,
                warm_up,
            };
            if let Some(name) = environment_name {
                launch.environment_name = name;
            }
            (emulate::Emulated::Datalayer, serving, None)
        }
    };
    let root = serving.root.root.as_path();
    let ca_out = serving.ca_out;
    let environment = root.join("fixtures/environments/reference");
    launch.environment = environment.clone();
    launch.port = serving.port;
    launch.domain = serving.domain;
    if let Some(seconds) = serving.kill_after {
        match std::time::Duration::try_from_secs_f64(seconds) {
            Ok(after) if !after.is_zero() => launch.kill_after = Some(after),
            _ => {
                eprintln!("error: --kill-after takes a positive number of seconds, not {seconds}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    let docker = match emulator_backend(root, &harness_executable()).await {
        Ok(docker) => docker,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
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
    if let Some((folder, what)) = seed {
        let dir = root.join("fixtures/environments").join(&folder);
        eprintln!("building {} into a {what}", dir.display());
        let log = move |line: &str| eprintln!("{what}: {line}");
        if let Err(e) = running.seed(&dir, &log).await {
            eprintln!("error: the {folder} {what}: {e}");
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
        match which {
            emulate::Emulated::Modal =>
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
