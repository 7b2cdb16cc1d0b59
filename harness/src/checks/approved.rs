//! The approved bases as data: which digests of which repositories an environment may build
//! `FROM` when its base comes from a registry. Read from `policies/approved-bases.yaml`
//! (or the file `run --approved-bases` / [`APPROVED_BASES_VAR`] names), and checked against
//! the base the run resolved before any build.

use std::path::{Path, PathBuf};

use sandbox_providers::registry::{DigestReference, is_sha256_digest};
use serde::Deserialize;

/// The approved bases file, under the project root.
pub const APPROVED_BASES_FILE: &str = "policies/approved-bases.yaml";
/// Names another approved bases file.
pub const APPROVED_BASES_VAR: &str = "SANDBOX_MATRIX_APPROVED_BASES";

/// The approved bases, and the file they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedBases {
    /// The file, named in every refusal.
    pub path: PathBuf,
    /// Each repository path (without a registry host) with its approved digests.
    pub bases: Vec<ApprovedBase>,
}

/// One repository and its approved digests.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovedBase {
    /// The repository's path in its registry, such as `sandbox-matrix/contract-base`.
    pub repository: String,
    /// Its approved digests, `sha256:<64 hex>`.
    pub digests: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    bases: Vec<ApprovedBase>,
}

impl ApprovedBases {
    /// Reads `path`; the error names the file and what is wrong in it.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the approved bases {}: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    /// Parses `text`, read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, String> {
        let file: File = serde_saphyr::from_str(text)
            .map_err(|e| format!("the approved bases {} do not parse: {e}", path.display()))?;
        for base in &file.bases {
            if let Some(bad) = base.digests.iter().find(|d| !is_sha256_digest(d)) {
                return Err(format!(
                    "the approved bases {}: `{bad}` under {} is not sha256:<64 lowercase hex>",
                    path.display(),
                    base.repository
                ));
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            bases: file.bases,
        })
    }

    /// `Ok` when `base`'s repository path is listed with its digest; the refusal names the
    /// file and how to approve it.
    pub fn check(&self, base: &DigestReference) -> Result<(), String> {
        let path = &base.repository.path;
        let listed = self.bases.iter().find(|b| &b.repository == path);
        match listed {
            Some(entry) if entry.digests.contains(&base.digest) => Ok(()),
            Some(_) => Err(format!(
                "the base {base} is not approved: digest {} is not listed under {path} in {} (add it there once the image is reviewed)",
                base.digest,
                self.path.display()
            )),
            None => Err(format!(
                "the base {base} is not approved: repository {path} is not listed in {}",
                self.path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(path: &str, byte: &str) -> DigestReference {
        DigestReference::parse(&format!("127.0.0.1:5000/{path}@sha256:{}", byte.repeat(32)))
            .unwrap()
    }

    #[test]
    fn the_projects_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(APPROVED_BASES_FILE);
        let approved = ApprovedBases::load(&path).unwrap();
        assert!(
            approved
                .bases
                .iter()
                .any(|b| b.repository == "sandbox-matrix/contract-base")
        );
    }

    #[test]
    fn only_listed_digests_of_listed_repositories_pass() {
        let text = format!(
            "bases:\n  - repository: sm/contract-base\n    digests: [\"sha256:{}\"]\n",
            "ab".repeat(32)
        );
        let approved = ApprovedBases::parse(Path::new("approved.yaml"), &text).unwrap();
        approved
            .check(&reference("sm/contract-base", "ab"))
            .unwrap();
        let other_digest = approved
            .check(&reference("sm/contract-base", "cd"))
            .unwrap_err();
        assert!(
            other_digest.contains("not approved") && other_digest.contains("approved.yaml"),
            "{other_digest}"
        );
        let other_repo = approved.check(&reference("sm/other", "ab")).unwrap_err();
        assert!(other_repo.contains("repository sm/other is not listed in approved.yaml"));
    }

    #[test]
    fn bad_files_are_named() {
        let bad = ApprovedBases::parse(
            Path::new("a.yaml"),
            "bases:\n  - repository: x\n    digests: [\"sha256:abc\"]\n",
        )
        .unwrap_err();
        assert!(
            bad.contains("a.yaml") && bad.contains("sha256:abc"),
            "{bad}"
        );
        assert!(ApprovedBases::parse(Path::new("a.yaml"), "bases: 3\n").is_err());
        assert!(ApprovedBases::load(Path::new("/nonexistent/approved.yaml")).is_err());
    }
}
