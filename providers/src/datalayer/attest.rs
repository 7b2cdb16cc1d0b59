//! The attestations pushed beside the image, as in-toto statements: an SPDX SBOM of what is
//! installed, read from the image's own layers (the Debian packages in dpkg's status file
//! and the Python distributions' `*.dist-info/METADATA`), and an SLSA provenance v1 (the
//! Dockerfile's digest, the base as a resolved dependency, build arguments by name only,
//! the builder). Both are in-toto v1 statements, which the in-toto attestation library
//! validates; docs/providers/datalayer.md says why v1 and not BuildKit's v0.2.

use std::collections::BTreeMap;
use std::io::Read;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use crate::{ErrorKind, ProviderError, Result};

/// The in-toto statement type: v1, the one the in-toto attestation library validates.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type of an SPDX document, as BuildKit names its SBOM.
pub const SPDX_PREDICATE: &str = "https://spdx.dev/Document";
/// The predicate type of the provenance: SLSA provenance v1.
pub const SLSA_PREDICATE: &str = "https://slsa.dev/provenance/v1";
/// The provenance's `buildType`: the page that says what its parameters mean.
pub const BUILD_TYPE: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/providers/datalayer.md#build-type"
);
/// The provenance's `builder.id`: the datalayer provider building on the run's Docker engine.
pub const BUILDER_ID: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/providers/datalayer.md#builder"
);

/// dpkg's database of installed packages.
const DPKG_STATUS: &str = "var/lib/dpkg/status";
/// dpkg's folder of per-package file lists.
const DPKG_INFO: &str = "var/lib/dpkg/info";

/// What a purl's version keeps as is; everything else is percent-encoded.
const PURL_VERSION: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'.')
    .remove(b'-')
    .remove(b'_')
    .remove(b'~');

/// One installed package.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Package {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its architecture (Debian packages).
    pub arch: Option<String>,
    /// Who supplies it, as its metadata says: dpkg's `Maintainer`, or a distribution's
    /// `Maintainer`/`Author` (or their `-email` forms), `Name <email>`.
    pub supplier: Option<String>,
}

/// What the image has installed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Debian packages dpkg says are installed.
    pub debian: Vec<Package>,
    /// Python distributions with a `.dist-info` folder in a `site-packages` or
    /// `dist-packages` folder.
    pub python: Vec<Package>,
}

/// The image the statements are about: its name as a purl and its manifest's digest.
#[derive(Debug, Clone)]
pub struct Subject {
    /// `pkg:docker/<registry>/<repository>@<digest>?platform=<os>%2F<arch>`.
    pub name: String,
    /// The image manifest's `sha256:<hex>` digest.
    pub digest: String,
}

/// What the provenance states about a build.
#[derive(Debug, Clone)]
pub struct Provenance {
    /// `sha256:<hex>` of the Dockerfile as the environment holds it.
    pub dockerfile_digest: String,
    /// The base as the build named it (a reference by digest, or a local tag).
    pub base_reference: String,
    /// The base's `sha256:` digest: its manifest's in a registry, its image id when local.
    pub base_digest: String,
    /// Whether the base is only in the building engine (no registry holds it).
    pub base_local: bool,
    /// The build arguments' names; never their values.
    pub build_arg_names: Vec<String>,
    /// The builder in words: the engine's version and the build path it took.
    pub builder: String,
    /// The run that built it.
    pub invocation_id: String,
    /// When the build started and finished, RFC 3339.
    pub started: String,
    /// When the push was prepared, RFC 3339.
    pub finished: String,
}

/// Reads what is installed from an image's layers (uncompressed tars, lowest first),
/// applying each layer's whiteouts to the layers below it.
pub fn installed(layers: &[impl AsRef<[u8]>]) -> Result<Installed> {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (index, layer) in layers.iter().enumerate() {
        let bad = |e: std::io::Error| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("layer {index} of the exported image is not a readable tar: {e}"),
            )
        };
        let mut added = Vec::new();
        let mut archive = tar::Archive::new(layer.as_ref());
        for entry in archive.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
            let path = path.trim_start_matches("./").trim_start_matches('/');
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
            if name == ".wh..wh..opq" {
                let prefix = format!("{dir}/");
                files.retain(|p, _| !p.starts_with(&prefix));
            } else if let Some(gone) = name.strip_prefix(".wh.") {
                let gone = if dir.is_empty() {
                    gone.to_owned()
                } else {
                    format!("{dir}/{gone}")
                };
                let prefix = format!("{gone}/");
                files.retain(|p, _| p != &gone && !p.starts_with(&prefix));
            } else if entry.header().entry_type().is_file() && wanted(path) {
                let mut data = Vec::new();
                entry.read_to_end(&mut data).map_err(bad)?;
                added.push((path.to_owned(), data));
            }
        }
        // Whiteouts hide what the layers below hold, never what this layer adds.
        files.extend(added);
    }
    let mut found = Installed::default();
    if let Some(status) = files.get(DPKG_STATUS) {
        found.debian = dpkg_installed(&String::from_utf8_lossy(status));
    }
    let owners = dpkg_owners(&files);
    for (path, data) in &files {
        if let Some(folder) = path.strip_suffix("/METADATA")
            && folder.ends_with(".dist-info")
            && let Some(mut package) = python_metadata(&String::from_utf8_lossy(data))
        {
            // A distribution whose metadata names nobody is supplied by the Debian package
            // that installed it, when one did.
            if package.supplier.is_none() {
                package.supplier = owners
                    .get(folder)
                    .and_then(|owner| found.debian.iter().find(|d| &d.name == owner))
                    .and_then(|owner| owner.supplier.clone());
            }
            found.python.push(package);
        }
    }
    found.python.sort();
    found.python.dedup();
    Ok(found)
}

/// Which Debian package installed each `.dist-info` folder, from dpkg's file lists
/// (`var/lib/dpkg/info/<package>[:<arch>].list`, one installed path per line).
fn dpkg_owners(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    let mut owners = BTreeMap::new();
    for (path, data) in files.range(format!("{DPKG_INFO}/")..) {
        let Some(list) = path
            .strip_prefix(DPKG_INFO)
            .and_then(|p| p.strip_prefix('/'))
            .and_then(|p| p.strip_suffix(".list"))
        else {
            break;
        };
        let package = list.split_once(':').map_or(list, |(name, _)| name);
        for line in String::from_utf8_lossy(data).lines() {
            let installed = line.trim_start_matches('/');
            if installed.ends_with(".dist-info") {
                owners.insert(installed.to_owned(), package.to_owned());
            }
        }
    }
    owners
}

/// The files [`installed`] reads.
fn wanted(path: &str) -> bool {
    path == DPKG_STATUS
        || (path.starts_with(DPKG_INFO) && path.ends_with(".list"))
        || (path.ends_with(".dist-info/METADATA")
            && (path.contains("/site-packages/") || path.contains("/dist-packages/")))
}

/// The packages dpkg's status file says are installed (`Status: install ok installed`).
fn dpkg_installed(status: &str) -> Vec<Package> {
    let mut packages = Vec::new();
    for paragraph in status.split("\n\n") {
        let field = |key: &str| {
            paragraph.lines().find_map(|line| {
                line.strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        };
        if field("Status").is_some_and(|s| s.ends_with(" installed"))
            && let (Some(name), Some(version)) = (field("Package"), field("Version"))
        {
            packages.push(Package {
                name,
                version,
                arch: field("Architecture"),
                supplier: field("Maintainer"),
            });
        }
    }
    packages.sort();
    packages
}

/// The `Name` and `Version` of a distribution's core metadata (its header, before the
/// first blank line).
fn python_metadata(metadata: &str) -> Option<Package> {
    let header = metadata.split("\n\n").next().unwrap_or_default();
    let field = |key: &str| {
        header.lines().find_map(|line| {
            line.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        })
    };
    let supplier = ["Maintainer", "Author", "Maintainer-email", "Author-email"]
        .into_iter()
        .filter_map(field)
        .find(|value| !value.is_empty() && !value.eq_ignore_ascii_case("unknown"));
    Some(Package {
        name: field("Name")?,
        version: field("Version")?,
        arch: None,
        supplier,
    })
}

/// A distribution name as a Python package index normalises it (PEP 503).
fn pep503(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

fn statement(subject: &Subject, predicate_type: &str, predicate: Value) -> Value {
    json!({
        "_type": STATEMENT_TYPE,
        "predicateType": predicate_type,
        "subject": [{
            "name": subject.name,
            "digest": { "sha256": subject.digest.trim_start_matches("sha256:") },
        }],
        "predicate": predicate,
    })
}

/// The words that mark a supplier as an organization rather than a person.
const ORGANIZATION_WORDS: [&str; 12] = [
    "team",
    "project",
    "maintainers",
    "developers",
    "foundation",
    "group",
    "community",
    "contributors",
    "authority",
    "inc",
    "ltd",
    "debian",
];

/// A package's supplier as SPDX 2.3 writes it (`Person: name (email)` or `Organization:
/// name (email)`) from metadata's `Name <email>`; the first of several. `NOASSERTION`
/// without one. A name holding a word such as `team` or `project` is an organization.
fn spdx_supplier(raw: Option<&str>) -> String {
    let Some(first) = raw.and_then(|r| r.split(',').map(str::trim).find(|r| !r.is_empty())) else {
        return "NOASSERTION".to_owned();
    };
    let (name, email) = match first.split_once('<') {
        Some((name, rest)) => (name.trim(), rest.trim_end_matches('>').trim()),
        None if first.contains('@') => ("", first),
        None => (first, ""),
    };
    let name = name.trim_matches('"');
    let name = if name.is_empty() { email } else { name };
    let words: Vec<String> = name
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .collect();
    let kind = if ORGANIZATION_WORDS
        .iter()
        .any(|w| words.iter().any(|word| word == w))
    {
        "Organization"
    } else {
        "Person"
    };
    if email.is_empty() || email == name {
        format!("{kind}: {name}")
    } else {
        format!("{kind}: {name} ({email})")
    }
}

/// The SPDX id of the image's own package in the SBOM, which the document describes.
const IMAGE_SPDX_ID: &str = "SPDXRef-Image";

/// The SBOM statement: an SPDX 2.3 document describing the image, which contains each
/// package of `installed`, made at `created` (RFC 3339).
pub fn sbom(subject: &Subject, installed: &Installed, created: &str, tool: &str) -> Value {
    let purl = |kind: &str, p: &Package| {
        let version = utf8_percent_encode(&p.version, PURL_VERSION);
        match (kind, &p.arch) {
            ("deb", Some(arch)) => format!("pkg:deb/debian/{}@{version}?arch={arch}", p.name),
            ("deb", None) => format!("pkg:deb/debian/{}@{version}", p.name),
            _ => format!("pkg:pypi/{}@{version}", pep503(&p.name)),
        }
    };
    let packages: Vec<Value> = installed
        .debian
        .iter()
        .map(|p| ("deb", p))
        .chain(installed.python.iter().map(|p| ("pypi", p)))
        .enumerate()
        .map(|(i, (kind, p))| {
            json!({
                "name": p.name,
                "SPDXID": format!("SPDXRef-Package-{kind}-{i}"),
                "versionInfo": p.version,
                "supplier": spdx_supplier(p.supplier.as_deref()),
                "downloadLocation": "NOASSERTION",
                "filesAnalyzed": false,
                "externalRefs": [{
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": purl(kind, p),
                }],
            })
        })
        .collect();
    // The document describes the image, a package of its own that contains every other
    // one: SPDX 2.3 requires a DESCRIBES relationship once a document lists more than one
    // package (the SPDX project's validator, spdx-tools 0.8.5, refuses it otherwise).
    let repository = subject
        .name
        .trim_start_matches("pkg:docker/")
        .split(['@', '?'])
        .next()
        .unwrap_or(&subject.name);
    // The image's supplier is whoever owns the repository it is pushed to: its namespace
    // (`<registry>/<namespace>/…`), or the repository itself where it has none.
    let path = repository
        .split_once('/')
        .map_or(repository, |(_, path)| path);
    let namespace = path
        .split_once('/')
        .map_or(path, |(namespace, _)| namespace);
    let image = json!({
        "name": repository,
        "SPDXID": IMAGE_SPDX_ID,
        "versionInfo": subject.digest,
        "supplier": format!("Organization: {namespace}"),
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "primaryPackagePurpose": "CONTAINER",
        "externalRefs": [{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": subject.name,
        }],
    });
    let relationships: Vec<Value> = std::iter::once(json!({
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": IMAGE_SPDX_ID,
    }))
    .chain(packages.iter().map(|p| {
        json!({
            "spdxElementId": IMAGE_SPDX_ID,
            "relationshipType": "CONTAINS",
            "relatedSpdxElement": p["SPDXID"],
        })
    }))
    .collect();
    let document = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": subject.name,
        "documentNamespace": format!("urn:sandbox-matrix:sbom:{}", subject.digest),
        "creationInfo": { "created": created, "creators": [format!("Tool: {tool}")] },
        "packages": std::iter::once(image).chain(packages).collect::<Vec<_>>(),
        "relationships": relationships,
    });
    statement(subject, SPDX_PREDICATE, document)
}

/// The provenance statement, SLSA provenance v1: the Dockerfile and the build arguments'
/// names as external parameters, the base as the one resolved dependency (by its registry
/// reference, or marked [`crate::PROVENANCE_LOCAL`] when only the engine holds it), the builder
/// by a URI with its words in `internalParameters`.
pub fn provenance(subject: &Subject, facts: &Provenance) -> Value {
    let hex = |d: &str| d.trim_start_matches("sha256:").to_owned();
    let mut base = json!({
        "name": crate::PROVENANCE_BASE,
        "uri": format!("pkg:docker/{}", facts.base_reference),
        "digest": { "sha256": hex(&facts.base_digest) },
    });
    if facts.base_local {
        base["annotations"] = json!({
            (crate::PROVENANCE_LOCAL): "only in the building engine, which no registry serves: the digest is its image id",
        });
    }
    let predicate = json!({
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "dockerfile": {
                    "path": "Dockerfile",
                    "digest": { "sha256": hex(&facts.dockerfile_digest) },
                },
                "buildArgNames": facts.build_arg_names,
            },
            "internalParameters": { "builder": facts.builder },
            "resolvedDependencies": [base],
        },
        "runDetails": {
            "builder": {
                "id": BUILDER_ID,
                "version": { "sandbox-matrix": env!("CARGO_PKG_VERSION") },
            },
            "metadata": {
                "invocationId": facts.invocation_id,
                "startedOn": facts.started,
                "finishedOn": facts.finished,
            },
        },
    });
    statement(subject, SLSA_PREDICATE, predicate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, text) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, text.as_bytes())
                .expect("tar entry");
        }
        builder.into_inner().expect("tar")
    }

    const STATUS: &str = "Package: python3\nStatus: install ok installed\nMaintainer: Matthias Klose <doko@debian.org>\nArchitecture: amd64\nVersion: 3.13.5-1\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n";

    #[test]
    fn reads_packages_through_whiteouts() {
        let lower = layer(&[
            ("var/lib/dpkg/status", STATUS),
            (
                "usr/lib/python3/dist-packages/jupyter_server-2.17.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: jupyter_server\nVersion: 2.17.0\nAuthor-email: Jupyter Development Team <jupyter@googlegroups.com>\n\nName: not-this\n",
            ),
            (
                "usr/lib/python3/dist-packages/removed-1.dist-info/METADATA",
                "Name: removed\nVersion: 1\n",
            ),
        ]);
        let upper = layer(&[("usr/lib/python3/dist-packages/.wh.removed-1.dist-info", "")]);
        let found = installed(&[lower, upper]).unwrap();
        assert_eq!(
            found.debian,
            [Package {
                name: "python3".into(),
                version: "3.13.5-1".into(),
                arch: Some("amd64".into()),
                supplier: Some("Matthias Klose <doko@debian.org>".into()),
            }]
        );
        assert_eq!(found.python.len(), 1, "{found:?}");
        assert_eq!(found.python[0].name, "jupyter_server");
        let subject = Subject {
            name: "pkg:docker/x".into(),
            digest: format!("sha256:{}", "0".repeat(64)),
        };
        let sbom = sbom(&subject, &found, "2026-12-01T00:00:00Z", "test");
        let text = sbom.to_string();
        assert!(text.contains("pkg:pypi/jupyter-server@2.17.0"), "{text}");
        assert!(
            text.contains("pkg:deb/debian/python3@3.13.5-1?arch=amd64"),
            "{text}"
        );
        assert_eq!(sbom["predicateType"], SPDX_PREDICATE);
        // The document describes the image, and the image contains every package.
        let document = &sbom["predicate"];
        let relationships = document["relationships"].as_array().expect("relationships");
        assert_eq!(
            relationships[0],
            json!({"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                   "relatedSpdxElement": "SPDXRef-Image"})
        );
        let packages = document["packages"].as_array().expect("packages");
        assert_eq!(packages[0]["SPDXID"], "SPDXRef-Image");
        // Every package names its supplier, as the NTIA minimum elements ask.
        let suppliers: Vec<&str> = packages
            .iter()
            .map(|p| p["supplier"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            suppliers,
            [
                "Organization: x",
                "Person: Matthias Klose (doko@debian.org)",
                "Organization: Jupyter Development Team (jupyter@googlegroups.com)"
            ]
        );
        assert_eq!(packages[0]["name"], "x");
        let contained: Vec<&Value> = relationships[1..]
            .iter()
            .filter(|r| {
                r["relationshipType"] == "CONTAINS" && r["spdxElementId"] == "SPDXRef-Image"
            })
            .map(|r| &r["relatedSpdxElement"])
            .collect();
        let listed: Vec<&Value> = packages[1..].iter().map(|p| &p["SPDXID"]).collect();
        assert_eq!(contained, listed);
    }

    #[test]
    fn a_distribution_naming_nobody_is_supplied_by_the_debian_package_that_installed_it() {
        let stubs = "usr/lib/python3/dist-packages/types_PyYAML-6.0.dist-info";
        let image = layer(&[
            (
                "var/lib/dpkg/status",
                "Package: python3-typeshed\nStatus: install ok installed\nMaintainer: Debian Python Team <team+python@tracker.debian.org>\nVersion: 0.0~git20241223\n",
            ),
            (
                "var/lib/dpkg/info/python3-typeshed:all.list",
                &format!("/.\n/usr\n/{stubs}\n/{stubs}/METADATA\n"),
            ),
            (
                &format!("{stubs}/METADATA"),
                "Metadata-Version: 2.1\nName: types-PyYAML\nVersion: 6.0\n",
            ),
            (
                "usr/local/lib/python3.13/site-packages/nobody-1.dist-info/METADATA",
                "Name: nobody\nVersion: 1\n",
            ),
        ]);
        let found = installed(&[image]).unwrap();
        let supplier = |name: &str| {
            found
                .python
                .iter()
                .find(|p| p.name == name)
                .and_then(|p| p.supplier.clone())
        };
        assert_eq!(
            supplier("types-PyYAML").as_deref(),
            Some("Debian Python Team <team+python@tracker.debian.org>")
        );
        assert_eq!(supplier("nobody"), None);
    }

    #[test]
    fn suppliers_are_written_as_spdx_asks() {
        assert_eq!(spdx_supplier(None), "NOASSERTION");
        assert_eq!(
            spdx_supplier(Some("Debian Python Team <team+python@tracker.debian.org>")),
            "Organization: Debian Python Team (team+python@tracker.debian.org)"
        );
        assert_eq!(
            spdx_supplier(Some("\"Ada L\" <ada@example.org>, Bob <b@example.org>")),
            "Person: Ada L (ada@example.org)"
        );
        assert_eq!(
            spdx_supplier(Some("a@example.org")),
            "Person: a@example.org"
        );
        assert_eq!(
            spdx_supplier(Some("The Python Project")),
            "Organization: The Python Project"
        );
    }

    #[test]
    fn the_builder_and_build_type_are_absolute_uris() {
        for uri in [BUILDER_ID, BUILD_TYPE] {
            assert!(uri.starts_with("https://"), "{uri}");
        }
    }

    #[test]
    fn an_opaque_whiteout_hides_the_folder_below() {
        let lower = layer(&[("var/lib/dpkg/status", STATUS)]);
        let upper = layer(&[("var/lib/dpkg/.wh..wh..opq", "")]);
        assert!(installed(&[lower, upper]).unwrap().debian.is_empty());
        assert!(installed(&[b"not a tar".to_vec()]).is_err());
    }
}
