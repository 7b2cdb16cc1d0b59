//! `sandbox-matrix list`: what `run` would run, one `variant::scenario::step` a line.

use sandbox_matrix::run::scenario::StepKind;
use sandbox_matrix::run::variants;

use super::{EXIT_BAD_INPUT, EXIT_PASSED, Selection, select};

pub(super) fn list(selection: &Selection, live: bool) -> u8 {
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
