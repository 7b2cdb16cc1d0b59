//! A generated part of a committed document: the lines between two markers, compared
//! with what a test renders; `SANDBOX_MATRIX_BLESS=1` writes the rendering there instead.

use std::path::Path;

/// Fails unless the part of the document at `path` between the lines `begin` and `end`
/// is `wanted`, saying that it is not what `source` renders to; with
/// `SANDBOX_MATRIX_BLESS=1` it writes `wanted` there instead.
pub fn check(path: &Path, begin: &str, end: &str, wanted: &str, source: &str) {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (before, rest) = doc
        .split_once(&format!("{begin}\n"))
        .unwrap_or_else(|| panic!("{name} marks no start of its generated part"));
    let (shown, after) = rest
        .split_once(&format!("\n{end}"))
        .unwrap_or_else(|| panic!("{name} marks no end of its generated part"));
    if shown == wanted {
        return;
    }
    if std::env::var("SANDBOX_MATRIX_BLESS").as_deref() == Ok("1") {
        std::fs::write(path, format!("{before}{begin}\n{wanted}\n{end}{after}"))
            .unwrap_or_else(|e| panic!("{name} is not writable: {e}"));
    } else {
        panic!(
            "{name}'s generated part is not what {source} renders to; rerun with SANDBOX_MATRIX_BLESS=1\n--- {name}\n{shown}\n--- rendered\n{wanted}"
        );
    }
}
