//! `sandbox-matrix emulate <provider>`: one emulator served until Ctrl-C or SIGTERM, with
//! what a client needs to reach it printed as `NAME=value` lines.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_matrix::emulate;
use sandbox_matrix::run::variants;

use crate::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED, harness_executable};

/// The providers `emulate` serves.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum EmulatedProvider {
    /// E2B's control plane, envd and the code interpreter.
    E2b,
    /// Daytona's API and toolbox.
    Daytona,
    /// Modal's gRPC control plane and task command router.
    Modal,
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress.
    Datalayer,
}

/// What `emulate` was asked for, besides the provider.
pub(crate) struct EmulateArgs {
    pub(crate) port: u16,
    pub(crate) domain: Option<String>,
    pub(crate) ca_out: Option<PathBuf>,
    pub(crate) template: Option<String>,
    pub(crate) start_cmd: Option<String>,
    pub(crate) snapshot: Option<String>,
    pub(crate) router_jwt_ttl: Option<u64>,
    pub(crate) unavailable_once: Vec<String>,
    pub(crate) no_task: bool,
    pub(crate) datalayer: sandbox_matrix::emulate::datalayer::Faults,
    pub(crate) environment_name: Option<String>,
}

pub(crate) async fn emulate(provider: EmulatedProvider, args: EmulateArgs, root: &Path) -> u8 {
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
