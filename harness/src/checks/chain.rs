//! The base-image chain: which base a launched artifact was built on, as the provenance
//! pulled from the provider's store names it (never what the run remembers of its build),
//! and whether that base is approved: a registry base when `policies/approved-bases.yaml`
//! lists its digest, the local base by its tag. Reads in-toto v1 statements with an SLSA
//! provenance v1 predicate, as the specs define their fields.

use sandbox_providers::registry::DigestReference;
use sandbox_providers::{PROVENANCE_BASE, PROVENANCE_LOCAL, PulledAttestation};
use serde_json::Value;

use super::approved::ApprovedBases;
use crate::model::results::BaseChain;

/// An in-toto statement's `_type`, v1 (in-toto attestation framework, `spec/v1/statement.md`).
const IN_TOTO_STATEMENT_V1: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance v1's predicate type (slsa.dev, `spec/v1.0/provenance`).
const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// How a container image names itself in a package URL (purl-spec, `docker` type).
const DOCKER_PURL: &str = "pkg:docker/";

/// Reads the base of `launched` from `pulled`, its provenance, and judges it: a local base
/// is approved when it is `local_base` (the bootstrap's tag), a registry base when
/// `approved` lists its repository and digest. `Err` when the statement cannot be read as
/// a provenance of the launched image, naming what is wrong; an unapproved base is an `Ok`
/// chain with `approved` unset, so the row can show what was found.
pub fn audit(
    launched: &str,
    pulled: &PulledAttestation,
    approved: Option<&ApprovedBases>,
    local_base: &str,
) -> Result<BaseChain, String> {
    let at = &pulled.from;
    let statement: Value = serde_json::from_slice(&pulled.statement)
        .map_err(|e| format!("the provenance at {at} is not JSON: {e}"))?;
    let text = |value: &Value| value.as_str().map(str::to_owned);
    if statement["_type"] != IN_TOTO_STATEMENT_V1 {
        return Err(format!(
            "the provenance at {at} is not an in-toto v1 statement: _type is {}",
            statement["_type"]
        ));
    }
    if statement["predicateType"] != SLSA_PROVENANCE_V1 {
        return Err(format!(
            "the statement at {at} is not an SLSA provenance v1: predicateType is {}",
            statement["predicateType"]
        ));
    }
    let image = pulled.image_digest.trim_start_matches("sha256:");
    let about_image = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subject| subject["digest"]["sha256"] == image);
    if !about_image {
        return Err(format!(
            "the provenance at {at} is not about the launched image {}: its subject is {}",
            pulled.image_digest, statement["subject"]
        ));
    }
    let dependencies = &statement["predicate"]["buildDefinition"]["resolvedDependencies"];
    let base = dependencies
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["name"] == PROVENANCE_BASE)
        .ok_or_else(|| {
            format!("the provenance at {at} names no resolved dependency `{PROVENANCE_BASE}`")
        })?;
    let reference = text(&base["uri"])
        .and_then(|uri| uri.strip_prefix(DOCKER_PURL).map(str::to_owned))
        .ok_or_else(|| {
            format!(
                "the base's uri in the provenance at {at} is not a {DOCKER_PURL} package URL: {}",
                base["uri"]
            )
        })?;
    let hex = text(&base["digest"]["sha256"]).ok_or_else(|| {
        format!("the base {reference} in the provenance at {at} has no sha256 digest")
    })?;
    let base_digest = format!("sha256:{hex}");
    let local = base["annotations"][PROVENANCE_LOCAL].is_string();
    let verdict = if local {
        if reference == local_base {
            Ok("local, approved by tag".to_owned())
        } else {
            Err(format!(
                "not approved: a local base other than {local_base}"
            ))
        }
    } else {
        judge_registry_base(&reference, &base_digest, approved)
    };
    let (approved, approval) = match verdict {
        Ok(how) => (true, how),
        Err(why) => (false, why),
    };
    Ok(BaseChain {
        launched: launched.to_owned(),
        read_from: at.clone(),
        base: reference,
        base_digest,
        local,
        approved,
        approval,
    })
}

/// A registry base is approved when it is named by the digest the provenance gives and the
/// approved bases list that digest under its repository.
fn judge_registry_base(
    reference: &str,
    digest: &str,
    approved: Option<&ApprovedBases>,
) -> Result<String, String> {
    let parsed = DigestReference::parse(reference).map_err(|e| {
        format!(
            "not approved: the base is not named by digest: {}",
            e.message
        )
    })?;
    if parsed.digest != digest {
        return Err(format!(
            "not approved: the base is named {reference} but its digest is given as {digest}"
        ));
    }
    let approved = approved.ok_or_else(|| {
        "not approved: no approved bases file was read to check it against".to_owned()
    })?;
    approved
        .check(&parsed)
        .map(|()| format!("approved: listed in {}", approved.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    const LOCAL: &str = "sandbox-matrix/contract-base:v1";

    fn pulled(image: &str, base: Value) -> PulledAttestation {
        let statement = json!({
            "_type": IN_TOTO_STATEMENT_V1,
            "subject": [{"name": "x", "digest": {"sha256": image}}],
            "predicateType": SLSA_PROVENANCE_V1,
            "predicate": {"buildDefinition": {"buildType": "https://example.invalid/t",
                "externalParameters": {}, "resolvedDependencies": [base]}},
        });
        PulledAttestation {
            from: "registry r, index sha256:i".into(),
            image_digest: format!("sha256:{image}"),
            statement: statement.to_string().into_bytes(),
        }
    }

    fn approved(digest: &str) -> ApprovedBases {
        let text = format!(
            "bases:\n  - repository: sm/contract-base\n    digests: [\"sha256:{digest}\"]\n"
        );
        ApprovedBases::parse(Path::new("approved.yaml"), &text).unwrap()
    }

    #[test]
    fn the_local_base_passes_by_its_tag_and_no_other() {
        let base = |tag: &str| {
            json!({"name": "base", "uri": format!("pkg:docker/{tag}"),
                   "digest": {"sha256": "ab".repeat(32)}, "annotations": {"local": "yes"}})
        };
        let chain = audit("a@sha256:1", &pulled("cd", base(LOCAL)), None, LOCAL).unwrap();
        assert!(chain.approved && chain.local, "{chain:?}");
        assert_eq!(chain.approval, "local, approved by tag");
        assert_eq!(chain.base_digest, format!("sha256:{}", "ab".repeat(32)));
        let other = audit("a", &pulled("cd", base("evil/base:v1")), None, LOCAL).unwrap();
        assert!(!other.approved, "{other:?}");
        assert!(other.approval.contains(LOCAL), "{}", other.approval);
    }

    #[test]
    fn a_registry_base_passes_only_when_its_digest_is_listed() {
        let digest = "ab".repeat(32);
        let base = json!({"name": "base",
            "uri": format!("pkg:docker/127.0.0.1:5000/sm/contract-base@sha256:{digest}"),
            "digest": {"sha256": digest}});
        let listed = audit(
            "a",
            &pulled("cd", base.clone()),
            Some(&approved(&digest)),
            LOCAL,
        )
        .unwrap();
        assert!(listed.approved && !listed.local, "{listed:?}");
        assert!(
            listed.approval.contains("approved.yaml"),
            "{}",
            listed.approval
        );
        let other = audit(
            "a",
            &pulled("cd", base.clone()),
            Some(&approved(&"ef".repeat(32))),
            LOCAL,
        )
        .unwrap();
        assert!(
            !other.approved && other.approval.contains("not approved"),
            "{other:?}"
        );
        let unread = audit("a", &pulled("cd", base.clone()), None, LOCAL).unwrap();
        assert!(!unread.approved, "{unread:?}");
        // A registry base not named by the digest the provenance gives for it.
        let mut forged = base;
        forged["digest"]["sha256"] = json!("ef".repeat(32));
        let forged = audit("a", &pulled("cd", forged), Some(&approved(&digest)), LOCAL).unwrap();
        assert!(!forged.approved, "{forged:?}");
    }

    #[test]
    fn a_statement_about_another_image_or_of_another_kind_is_refused() {
        let base = json!({"name": "base", "uri": format!("pkg:docker/{LOCAL}"),
                          "digest": {"sha256": "ab"}, "annotations": {"local": "yes"}});
        let mut elsewhere = pulled("cd", base.clone());
        elsewhere.image_digest = "sha256:ef".into();
        let error = audit("a", &elsewhere, None, LOCAL).unwrap_err();
        assert!(error.contains("not about the launched image"), "{error}");
        let mut v02 = pulled("cd", base.clone());
        let mut statement: Value = serde_json::from_slice(&v02.statement).unwrap();
        statement["predicateType"] = json!("https://slsa.dev/provenance/v0.2");
        v02.statement = statement.to_string().into_bytes();
        let error = audit("a", &v02, None, LOCAL).unwrap_err();
        assert!(error.contains("predicateType"), "{error}");
        let mut garbage = pulled("cd", base);
        garbage.statement = b"not json".to_vec();
        assert!(
            audit("a", &garbage, None, LOCAL)
                .unwrap_err()
                .contains("not JSON")
        );
        let nameless = pulled("cd", json!({"name": "other"}));
        let error = audit("a", &nameless, None, LOCAL).unwrap_err();
        assert!(error.contains("no resolved dependency `base`"), "{error}");
    }
}
