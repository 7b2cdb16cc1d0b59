//! The `sandbox-matrix` command line: parses, dispatches to [`cli`], exits with its code.

mod cli;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

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
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(cli::EXIT_REPORT);
        }
    };
    let code = runtime.block_on(cli::dispatch(cli.command));
    ExitCode::from(code)
}
