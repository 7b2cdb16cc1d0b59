//! `sandbox-matrix sweep`: removes what runs that are gone left, reaching each variant
//! the way a run does.

use std::path::PathBuf;

use clap::Args;
use sandbox_matrix::run::variants;
use sandbox_providers::api::settings::Settings;

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED, RootArg, harness_executable};

#[derive(Args)]
pub(crate) struct SweepArgs {
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
pub(crate) async fn sweep(args: SweepArgs) -> u8 {
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
