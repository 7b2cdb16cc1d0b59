//! Every cloud variant has each of the places a provider lives in
//! (docs/contributing/adding-a-provider.md):
//! its cassettes, the sources of its spec, its wire schemas (or protos), an emulator, a
//! parity recording and test, the official SDK's flow, and a docs page. A variant
//! added without one of them fails here, naming what is missing.

use std::path::Path;

use sandbox_matrix::run::variants;

/// The places `variant` (over gRPC when `grpc`) lacks under `root`, each named with the
/// path or item that is missing.
fn missing_places(root: &Path, variant: &str, grpc: bool) -> Vec<String> {
    // `datalayer-runtimes` is Datalayer's: its SDK files are the provider's.
    let provider = variant.split('-').next().unwrap_or(variant);
    let module = variant.replace('-', "_");
    let mut files = vec![
        format!("fixtures/cassettes/{variant}/lifecycle.yaml"),
        format!("fixtures/cassettes/{variant}/core-tier.yaml"),
        format!("fixtures/specs/{variant}/SOURCES.md"),
        format!("fixtures/parity/{variant}.yaml"),
        format!("harness/tests/engine/parity/{module}.rs"),
        format!("harness/tests/engine/sdk_{provider}.rs"),
        format!("harness/tests/sdk/{provider}_flow.py"),
        format!("harness/tests/sdk/{provider}_parity.py"),
    ];
    files.push(if grpc {
        format!("providers/proto/{variant}")
    } else {
        format!("fixtures/schemas/{variant}/index.json")
    });
    let mut missing: Vec<String> = files
        .into_iter()
        .filter(|path| !root.join(path).exists())
        .collect();
    if sandbox_emulators::Emulated::of_variant(variant).is_none() {
        missing.push(format!(
            "an emulator (sandbox_emulators::Emulated::of_variant(\"{variant}\"))"
        ));
    }
    // Its provider's page, with a heading naming the variant: `# e2b: …`, or
    // `## datalayer-runtimes: …` on Datalayer's page, which holds both its variants.
    let page = format!("docs/providers/{provider}.md");
    let documented = std::fs::read_to_string(root.join(&page)).is_ok_and(|text| {
        text.lines().any(|line| {
            line.starts_with('#')
                && line
                    .trim_start_matches('#')
                    .trim_start()
                    .starts_with(&format!("{variant}:"))
        })
    });
    if !documented {
        missing.push(format!("a docs page {page} with a heading `{variant}: …`"));
    }
    missing
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn every_cloud_variant_has_each_place_a_provider_lives_in() {
    for cloud in variants::CLOUD {
        let missing = missing_places(root(), cloud.name, cloud.grpc.is_some());
        assert!(
            missing.is_empty(),
            "the {} variant lacks (see docs/contributing/adding-a-provider.md): {}",
            cloud.name,
            missing.join("; ")
        );
    }
}

#[test]
fn a_variant_added_without_its_places_is_told_each_one() {
    let missing = missing_places(root(), "acme", false);
    for place in [
        "fixtures/cassettes/acme/lifecycle.yaml",
        "fixtures/specs/acme/SOURCES.md",
        "fixtures/schemas/acme/index.json",
        "harness/tests/engine/parity/acme.rs",
        "harness/tests/sdk/acme_flow.py",
        "an emulator",
        "a docs page docs/providers/acme.md with a heading `acme: …`",
    ] {
        assert!(
            missing.iter().any(|m| m.starts_with(place)),
            "{place} is not named among {missing:?}"
        );
    }
    assert!(
        missing_places(root(), "acme", true)
            .iter()
            .any(|m| m == "providers/proto/acme"),
        "a gRPC variant's protos are its wire schemas"
    );
}
