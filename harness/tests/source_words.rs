//! Messages are written for people: no `{:?}` in the sources' non-test code, where a
//! Rust `Option`, a struct or a Duration's Debug form would reach a user
//! (`python3 exited with Some(126)`). Quote a value with `sandbox_providers::quoted`, show
//! a duration with `sandbox_providers::for_people`. A use that must stay says why on the
//! line before, with a comment holding `Debug form:`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            // A module's unit tests, moved out of its file (`mod tests;`).
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// Each `file:line: text` of non-test code formatting with Debug without saying why.
fn debug_forms(text: &str, file: &str) -> Vec<String> {
    // The code before the file's test module.
    let code = [
        "\n#[cfg(test)]\nmod tests",
        "\n#[cfg(test)]\npub(crate) mod tests",
    ]
    .iter()
    .filter_map(|start| text.find(start))
    .min()
    .map_or(text, |at| &text[..at]);
    let lines: Vec<&str> = code.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| line.contains(":?}") || line.contains(":#?}"))
        .filter(|(i, _)| !(*i > 0 && lines[i - 1].contains("Debug form:")))
        .map(|(i, line)| format!("{file}:{}: {}", i + 1, line.trim()))
        .collect()
}

#[test]
fn no_message_is_formatted_with_debug() {
    let mut files = Vec::new();
    for crate_dir in [
        "contract/src",
        "doctor/src",
        "providers/src",
        "emulators/src",
        "harness/src",
    ] {
        rust_files(&root().join(crate_dir), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 50,
        "the sources are where they were: {files:?}"
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("a source file");
            let file = path
                .strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string();
            debug_forms(&text, &file)
        })
        .collect();
    assert!(
        found.is_empty(),
        "formatted with Debug, which a user may read (quote with sandbox_providers::quoted, show durations with sandbox_providers::for_people, or say why with `// Debug form: …` on the line before):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_debug_form_and_skips_tests_and_reasons() {
    let text = "fn a() {\n    format!(\"exited with {code:?}\");\n    // Debug form: a Python literal\n    format!(\"{x:?}\");\n}\n\n#[cfg(test)]\nmod tests {\n    fn b() { format!(\"{y:?}\"); }\n}\n";
    assert_eq!(
        debug_forms(text, "f.rs"),
        ["f.rs:2: format!(\"exited with {code:?}\");"]
    );
}
