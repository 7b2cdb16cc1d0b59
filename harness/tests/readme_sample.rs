//! The README's sample run is generated, not pasted: from the committed run folder
//! `docs/sample-run/` (a real run's `results.json`, the host name redacted, and the command
//! that made it), by the same renderers a run prints with: the terminal's step lines and
//! the comparison table. `SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test
//! readme_sample` writes it into README.md after the folder is replaced by a new run's.

#[path = "common/generated_section.rs"]
mod generated_section;

use std::path::PathBuf;

use sandbox_matrix::model::results;
use sandbox_matrix::report::table;
use sandbox_matrix::report::terminal;

/// The line before the sample in README.md.
const BEGIN: &str = "<!-- sample-run: generated from docs/sample-run/ by `SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test readme_sample`; not edited by hand -->";
/// The line after it.
const END: &str = "<!-- /sample-run -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// The sample as the renderers make it from the committed folder.
fn generated() -> String {
    let dir = root().join("docs/sample-run");
    let results = results::load(&dir.join("results.json")).expect("the sample run's results");
    let command = std::fs::read_to_string(dir.join("command")).expect("the sample's command");
    format!(
        "```text\n$ {}\n{}\n{}\n```",
        command.trim(),
        terminal::transcript(&results).join("\n"),
        table::render(&results)
    )
}

#[test]
fn the_readme_sample_is_what_the_renderers_make_of_the_committed_run() {
    generated_section::check(
        &root().join("README.md"),
        BEGIN,
        END,
        &generated(),
        "docs/sample-run/",
    );
}

#[test]
fn the_sample_run_folder_names_no_machine() {
    let dir = root().join("docs/sample-run");
    let text = std::fs::read_to_string(dir.join("results.json")).expect("the sample's results");
    let results = results::load(&dir.join("results.json")).expect("it loads");
    assert_eq!(results.provenance.host, "[host]");
    // Neither this checkout's place, the temporary folder nor the home of whoever made it.
    let machine = [
        Some(root().display().to_string()),
        Some(std::env::temp_dir().display().to_string()),
        std::env::var("HOME").ok(),
    ];
    for place in machine.into_iter().flatten().filter(|p| p.len() > 1) {
        assert!(
            !text.contains(&place),
            "docs/sample-run/results.json names {place}"
        );
    }
    assert!(
        !text.contains("127.0.0.1:"),
        "docs/sample-run/results.json names a loopback port"
    );
}
