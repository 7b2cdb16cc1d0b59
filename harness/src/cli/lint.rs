//! `sandbox-matrix lint`: Dockerfiles checked against what sandbox-contract/v1 refuses.

use std::path::PathBuf;

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PASSED};

pub(super) fn lint(files: &[PathBuf]) -> u8 {
    let mut code = EXIT_PASSED;
    for file in files {
        match sandbox_matrix::checks::lint::lint_file(file) {
            Ok(findings) if findings.is_empty() => eprintln!("{}: nothing refused", file.display()),
            Ok(findings) => {
                for finding in findings {
                    println!("{finding}");
                }
                code = code.max(EXIT_FAILED);
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = EXIT_BAD_INPUT;
            }
        }
    }
    code
}
