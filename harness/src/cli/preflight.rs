//! `sandbox-matrix preflight`: what a live run needs per variant, checked without
//! creating anything.

use std::path::Path;

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED, harness_executable};

pub(super) async fn preflight(
    root: &Path,
    selected: &[String],
    base: Option<&str>,
    approved: &Path,
) -> u8 {
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
