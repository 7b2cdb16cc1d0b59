//! `sandbox-matrix list`: what `run` would run, one `variant::scenario::step` a line
//! (`variant::scenario[k]::step` for repetition k when repeated).

use sandbox_matrix::run::partition;
use sandbox_matrix::run::scenario::StepKind;
use sandbox_matrix::run::variants;

use super::{EXIT_BAD_INPUT, EXIT_PASSED, Selection, select};

pub(super) fn list(selection: &Selection, live: bool) -> u8 {
    let named = !selection.variants.is_empty() && !selection.scenarios.is_empty();
    let cassettes = selection.root.root.join(variants::CASSETTES_DIR);
    let selected = match select(selection) {
        Ok(selected) => selected,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    for variant in &selected.variants {
        for scenario in &selected.scenarios {
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
            for repetition in partition::repetitions(
                selected.partition,
                variant,
                &scenario.name,
                selection.repeat,
            ) {
                let name = if selection.repeat > 1 {
                    format!("{}[{repetition}]", scenario.name)
                } else {
                    scenario.name.clone()
                };
                for step in &scenario.steps {
                    println!(
                        "{variant}::{name}::{}  (budget {})",
                        step.name(),
                        humantime::format_duration(step.budget)
                    );
                }
                if implicit_cleanup {
                    println!("{variant}::{name}::cleanup  (added: cleanup always runs)");
                }
            }
        }
    }
    EXIT_PASSED
}
