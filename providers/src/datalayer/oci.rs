//! The built image as an OCI index with its attestations, pushed by digest.
//!
//! The layers and config come from the engine (`docker save`); the layers are gzipped. The
//! index holds the image manifest (its platform from the config) and an attestation
//! manifest laid out as BuildKit lays out its own: platform `unknown/unknown`, annotated
//! `vnd.docker.reference.type: attestation-manifest` and `vnd.docker.reference.digest`
//! naming the image manifest, its layers in-toto statements
//! (`application/vnd.in-toto+json`, annotated `in-toto.io/predicate-type`). Every blob and
//! manifest is pushed by digest with oci-client; nothing is tagged.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};

use bollard::Docker;
use bytes::Bytes;
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::registry::{DigestReference, Repository};
use crate::{ErrorKind, ProviderError, RegistryCredential, Result};

/// An OCI image index.
pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// An OCI image manifest.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image config.
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// A gzipped layer.
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// An in-toto statement, as an attestation layer.
pub const IN_TOTO_TYPE: &str = "application/vnd.in-toto+json";
/// The annotation naming an attestation's predicate type.
pub const PREDICATE_ANNOTATION: &str = "in-toto.io/predicate-type";
/// The index annotation saying what an entry refers to.
pub const REFERENCE_TYPE_ANNOTATION: &str = "vnd.docker.reference.type";
/// The index annotation naming the manifest an attestation is about.
pub const REFERENCE_DIGEST_ANNOTATION: &str = "vnd.docker.reference.digest";
/// The value of [`REFERENCE_TYPE_ANNOTATION`] for an attestation manifest.
pub const ATTESTATION_MANIFEST: &str = "attestation-manifest";

/// Content with its media type and digest.
#[derive(Debug, Clone)]
pub struct Blob {
    /// Its media type.
    pub media_type: &'static str,
    /// `sha256:<hex>` of `data`.
    pub digest: String,
    /// The bytes.
    pub data: Bytes,
}

impl Blob {
    /// `data` of `media_type`, digested.
    pub fn new(media_type: &'static str, data: impl Into<Bytes>) -> Self {
        let data = data.into();
        Self {
            media_type,
            digest: sha256(&data),
            data,
        }
    }

    /// Its OCI descriptor.
    pub fn descriptor(&self) -> Value {
        json!({ "mediaType": self.media_type, "digest": self.digest, "size": self.data.len() })
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// An image as the engine exports it: its config and its layers, uncompressed, lowest first.
pub struct Exported {
    /// The config JSON; its digest is the engine's image id.
    pub config: Bytes,
    /// The layer tars.
    pub layers: Vec<Bytes>,
}

impl Exported {
    /// The digests of the layers' uncompressed tars, lowest first, as the config lists them
    /// (its `rootfs.diff_ids`), one for each exported layer.
    pub fn diff_ids(&self) -> Result<Vec<String>> {
        let config: Value = serde_json::from_slice(&self.config).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("the image config is not JSON: {e}"),
            )
        })?;
        let ids: Option<Vec<String>> = config["rootfs"]["diff_ids"].as_array().and_then(|ids| {
            ids.iter()
                .map(|id| id.as_str().map(str::to_owned))
                .collect()
        });
        match ids {
            Some(ids) if ids.len() == self.layers.len() => Ok(ids),
            _ => Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "the image config's rootfs.diff_ids do not name its {} layers",
                    self.layers.len()
                ),
            )),
        }
    }
}

/// A gzipped layer the repository holds: its digest and size, found by the digest of its
/// uncompressed tar (its diff id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedLayer {
    /// `sha256:<hex>` of the gzipped layer.
    pub digest: String,
    /// Bytes of the gzipped layer.
    pub size: u64,
}

/// Exports image `id` from the engine (`docker save`) and reads its config and layers.
pub async fn export(docker: &Docker, id: &str) -> Result<Exported> {
    let mut stream = docker.export_image(id);
    let mut tarball = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            super::super::docker::engine_error(e).context(format!("exporting image {id}"))
        })?;
        tarball.extend_from_slice(&chunk);
    }
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || read_saved(&tarball, &id))
        .await
        .map_err(|e| ProviderError::new(ErrorKind::Protocol, format!("reading the export: {e}")))?
}

/// The config and layers of the one image in a `docker save` tarball.
fn read_saved(tarball: &[u8], id: &str) -> Result<Exported> {
    let bad = |why: String| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!("the engine's export of {id} {why}"),
        )
    };
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    let mut archive = tar::Archive::new(tarball);
    for entry in archive
        .entries()
        .map_err(|e| bad(format!("is not a tar: {e}")))?
    {
        let mut entry = entry.map_err(|e| bad(format!("is not a tar: {e}")))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| bad(format!("has a bad path: {e}")))?
            .to_string_lossy()
            .into_owned();
        let mut data = Vec::new();
        entry
            .read_to_end(&mut data)
            .map_err(|e| bad(format!("cannot be read: {e}")))?;
        files.insert(path, data);
    }
    let manifest: Value = files
        .get("manifest.json")
        .and_then(|m| serde_json::from_slice(m).ok())
        .ok_or_else(|| bad("has no readable manifest.json".into()))?;
    let entry = manifest
        .as_array()
        .filter(|a| a.len() == 1)
        .map(|a| &a[0])
        .ok_or_else(|| bad("does not hold exactly one image".into()))?;
    let mut take = |path: &Value| {
        path.as_str()
            .and_then(|p| files.remove(p))
            .map(Bytes::from)
            .ok_or_else(|| {
                bad(format!(
                    "names {path} in manifest.json but does not hold it"
                ))
            })
    };
    let config = take(&entry["Config"])?;
    let layers = entry["Layers"]
        .as_array()
        .ok_or_else(|| bad("lists no layers".into()))?
        .iter()
        .map(&mut take)
        .collect::<Result<Vec<_>>>()?;
    Ok(Exported { config, layers })
}

/// An index, its manifests and every blob they name, ready to push.
pub struct OciArtifact {
    /// Layers and configs, of the image and of the attestation manifest, to push.
    pub blobs: Vec<Blob>,
    /// Bytes of the image's layers the repository holds already: named, not pushed again.
    pub held_bytes: u64,
    /// The image manifest.
    pub image_manifest: Blob,
    /// The attestation manifest.
    pub attestation_manifest: Blob,
    /// The index holding both.
    pub index: Blob,
}

impl OciArtifact {
    /// Bytes of the whole artifact: blobs (those held already included), manifests and
    /// index.
    pub fn size(&self) -> u64 {
        let blobs: usize = self.blobs.iter().map(|b| b.data.len()).sum();
        (blobs
            + self.image_manifest.data.len()
            + self.attestation_manifest.data.len()
            + self.index.data.len()) as u64
            + self.held_bytes
    }
}

/// The image packed for a push: its manifest, the blobs to push, and each layer's diff id
/// with its gzipped form.
pub struct PackedImage {
    /// The image manifest.
    pub manifest: Blob,
    /// The layers gzipped here and the config.
    pub blobs: Vec<Blob>,
    /// Every layer, lowest first: its diff id and its gzipped form.
    pub layers: Vec<(String, PushedLayer)>,
    /// How many layers the repository held, named instead of gzipped.
    pub reused: usize,
    /// Bytes of those layers.
    pub held_bytes: u64,
}

/// The image's manifest from `exported`, gzipping its layers (fast level), except those
/// whose diff id `in_registry` names (the repository holds their gzipped form already, as
/// a registry client keeps its layers' digests so as to compress only what is new).
pub fn image_manifest(
    exported: &Exported,
    in_registry: &HashMap<String, PushedLayer>,
) -> Result<PackedImage> {
    let diff_ids = exported.diff_ids()?;
    let mut blobs = Vec::new();
    let mut layers = Vec::new();
    let (mut reused, mut held_bytes) = (0, 0);
    for (i, (layer, diff_id)) in exported.layers.iter().zip(diff_ids).enumerate() {
        let pushed = match in_registry.get(&diff_id) {
            Some(pushed) => {
                reused += 1;
                held_bytes += pushed.size;
                pushed.clone()
            }
            None => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                let blob = gz
                    .write_all(layer)
                    .and_then(|()| gz.finish())
                    .map(|data| Blob::new(LAYER_TYPE, data))
                    .map_err(|e| {
                        ProviderError::new(ErrorKind::Protocol, format!("gzipping layer {i}: {e}"))
                    })?;
                let pushed = PushedLayer {
                    digest: blob.digest.clone(),
                    size: blob.data.len() as u64,
                };
                blobs.push(blob);
                pushed
            }
        };
        layers.push((diff_id, pushed));
    }
    let config = Blob::new(CONFIG_TYPE, exported.config.clone());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(),
        "layers": layers.iter().map(|(_, layer)| json!({
            "mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size,
        })).collect::<Vec<_>>(),
    });
    blobs.push(config);
    Ok(PackedImage {
        manifest: Blob::new(MANIFEST_TYPE, manifest.to_string()),
        blobs,
        layers,
        reused,
        held_bytes,
    })
}

/// The image's platform from its config: `os`, `architecture` and `variant` when given.
pub fn platform(config: &[u8]) -> Result<Value> {
    let config: Value = serde_json::from_slice(config).map_err(|e| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!("the image config is not JSON: {e}"),
        )
    })?;
    let field = |k: &str| config[k].as_str().filter(|v| !v.is_empty());
    let (Some(os), Some(architecture)) = (field("os"), field("architecture")) else {
        return Err(ProviderError::new(
            ErrorKind::Protocol,
            "the image config names no os and architecture",
        ));
    };
    let mut platform = json!({ "architecture": architecture, "os": os });
    if let Some(variant) = field("variant") {
        platform["variant"] = json!(variant);
    }
    Ok(platform)
}

/// The whole artifact: the image manifest and its blobs, an attestation manifest of
/// `statements` (in-toto statements, each with its predicate type) about it, and the index.
pub fn assemble(image: PackedImage, platform: Value, statements: &[(&str, Value)]) -> OciArtifact {
    let PackedImage {
        manifest: image_manifest,
        mut blobs,
        held_bytes,
        ..
    } = image;
    let layers: Vec<Blob> = statements
        .iter()
        .map(|(_, s)| Blob::new(IN_TOTO_TYPE, s.to_string()))
        .collect();
    let config = Blob::new(
        CONFIG_TYPE,
        json!({
            "architecture": "unknown",
            "os": "unknown",
            "config": {},
            "rootfs": {
                "type": "layers",
                "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
            },
        })
        .to_string(),
    );
    let attestation = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(),
        "layers": layers.iter().zip(statements).map(|(layer, (predicate, _))| {
            let mut d = layer.descriptor();
            d["annotations"] = json!({ PREDICATE_ANNOTATION: predicate });
            d
        }).collect::<Vec<_>>(),
    });
    let attestation_manifest = Blob::new(MANIFEST_TYPE, attestation.to_string());
    let mut image_entry = image_manifest.descriptor();
    image_entry["platform"] = platform;
    let mut attestation_entry = attestation_manifest.descriptor();
    attestation_entry["platform"] = json!({ "architecture": "unknown", "os": "unknown" });
    attestation_entry["annotations"] = json!({
        REFERENCE_DIGEST_ANNOTATION: image_manifest.digest,
        REFERENCE_TYPE_ANNOTATION: ATTESTATION_MANIFEST,
    });
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [image_entry, attestation_entry],
    });
    blobs.extend(layers);
    blobs.push(config);
    OciArtifact {
        blobs,
        held_bytes,
        image_manifest,
        attestation_manifest,
        index: Blob::new(INDEX_TYPE, index.to_string()),
    }
}

/// An oci-client for `registry`: HTTPS, or plain HTTP on loopback.
fn client(registry: &str) -> Result<Client> {
    // oci-client's rustls is built without a provider: the project's (ring) is the default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if crate::registry::check::scheme(registry) == "http" {
        ClientProtocol::HttpsExcept(vec![registry.to_owned()])
    } else {
        ClientProtocol::Https
    };
    Client::try_from(ClientConfig {
        protocol,
        use_monolithic_push: true,
        ..ClientConfig::default()
    })
    .map_err(|e| {
        ProviderError::new(
            ErrorKind::Config,
            format!("cannot make a registry client for {registry}: {e}"),
        )
    })
}

fn auth(credential: &RegistryCredential) -> RegistryAuth {
    RegistryAuth::Basic(
        credential.username.clone(),
        credential.password.expose().to_owned(),
    )
}

/// Pushes `artifact` to `repository` by digest with `credential`: blobs, the two manifests,
/// then the index. Returns the index by digest.
pub async fn push(
    repository: &Repository,
    credential: &RegistryCredential,
    artifact: &OciArtifact,
) -> Result<DigestReference> {
    let client = client(&repository.registry)?;
    let at = |digest: &str| {
        Reference::with_digest(
            repository.registry.clone(),
            repository.path.clone(),
            digest.to_owned(),
        )
    };
    let failed = |what: String| {
        move |e: oci_client::errors::OciDistributionError| {
            ProviderError::new(
                ErrorKind::Api,
                format!(
                    "pushing {what} to registry {} as {}: {e}",
                    repository.registry, credential.username
                ),
            )
        }
    };
    let index = at(&artifact.index.digest);
    client
        .auth(&index, &auth(credential), RegistryOperation::Push)
        .await
        .map_err(failed("nothing yet (the login)".into()))?;
    for blob in &artifact.blobs {
        if client
            .blob_exists(&index, &blob.digest)
            .await
            .map_err(failed(format!("blob {}", blob.digest)))?
        {
            continue;
        }
        client
            .push_blob(&index, blob.data.clone(), &blob.digest)
            .await
            .map_err(failed(format!("blob {}", blob.digest)))?;
    }
    for manifest in [
        &artifact.image_manifest,
        &artifact.attestation_manifest,
        &artifact.index,
    ] {
        client
            .push_manifest_raw(
                &at(&manifest.digest),
                manifest.data.clone(),
                manifest
                    .media_type
                    .parse()
                    .expect("media types are header values"),
            )
            .await
            .map_err(failed(format!("manifest {}", manifest.digest)))?;
    }
    Ok(repository.at(&artifact.index.digest))
}

/// Which of `digests` the repository holds, asked with `credential` (a HEAD of each blob).
pub async fn blobs_held(
    repository: &Repository,
    credential: &RegistryCredential,
    digests: &[String],
) -> Result<HashSet<String>> {
    let Some(first) = digests.first() else {
        return Ok(HashSet::new());
    };
    let client = client(&repository.registry)?;
    let failed = |e: oci_client::errors::OciDistributionError| {
        ProviderError::new(
            ErrorKind::Api,
            format!(
                "asking registry {} as {} for the layers it holds: {e}",
                repository.registry, credential.username
            ),
        )
    };
    let reference = Reference::with_digest(
        repository.registry.clone(),
        repository.path.clone(),
        first.clone(),
    );
    client
        .auth(&reference, &auth(credential), RegistryOperation::Push)
        .await
        .map_err(failed)?;
    let mut held = HashSet::new();
    for digest in digests {
        if client
            .blob_exists(&reference, digest)
            .await
            .map_err(failed)?
        {
            held.insert(digest.clone());
        }
    }
    Ok(held)
}

/// Longest a login check may take.
const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Checks, creating nothing, that `registry` takes `credential`'s Basic login at `/v2/`:
/// what it answered, or why not. A registry that asks for a Bearer token instead is said so:
/// its token service is asked at the first push or pull.
pub async fn check_login(registry: &str, credential: &RegistryCredential) -> Result<String> {
    let scheme = crate::registry::check::scheme(registry);
    let answer = reqwest::Client::builder()
        .timeout(LOGIN_TIMEOUT)
        .build()
        .map(|client| {
            client
                .get(format!("{scheme}://{registry}/v2/"))
                .basic_auth(&credential.username, Some(credential.password.expose()))
        })
        .map_err(|e| ProviderError::new(ErrorKind::Config, format!("an HTTP client: {e}")))?
        .send()
        .await
        .map_err(|e| {
            ProviderError::new(
                ErrorKind::Transport,
                format!("registry {registry} does not answer GET /v2/: {e}"),
            )
        })?;
    let status = answer.status();
    if status.is_success() {
        return Ok(format!("{} logs in", credential.username));
    }
    if status == reqwest::StatusCode::UNAUTHORIZED
        && matches!(
            crate::registry::check::challenge(answer.headers()),
            Some(crate::registry::check::Challenge::Bearer { .. })
        )
    {
        return Ok(format!(
            "{} is asked of the registry's token service at the first push or pull",
            credential.username
        ));
    }
    Err(ProviderError::new(
        ErrorKind::Api,
        format!(
            "registry {registry} refused the login of {}: GET /v2/ answered {status}",
            credential.username
        ),
    ))
}

/// An attestation as the registry serves it.
#[derive(Debug, Clone)]
pub struct PulledStatement {
    /// The image manifest's digest the index names as the attestation's subject.
    pub image_manifest: String,
    /// The in-toto statement's bytes, checked against their digest.
    pub statement: Bytes,
}

/// Pulls, with `credential`, the index `reference` names, then the attestation manifest it
/// lists for its image (BuildKit's layout, as [`assemble`] writes it), then that
/// manifest's layer whose predicate type is `predicate`. Each step's refusal names what
/// is missing.
pub async fn pull_statement(
    reference: &DigestReference,
    credential: &RegistryCredential,
    predicate: &str,
) -> Result<PulledStatement> {
    let repository = &reference.repository;
    let registry = &repository.registry;
    let client = client(registry)?;
    let at = |digest: &str| {
        Reference::with_digest(registry.clone(), repository.path.clone(), digest.to_owned())
    };
    let failed = |what: String| {
        move |e: oci_client::errors::OciDistributionError| {
            ProviderError::new(
                ErrorKind::Api,
                format!(
                    "pulling {what} of {reference} from registry {registry} as {}: {e}",
                    credential.username
                ),
            )
        }
    };
    let missing = |what: String| {
        ProviderError::new(
            ErrorKind::NotFound,
            format!("{reference} in registry {registry}: {what}"),
        )
    };
    let json = |what: &str, body: &[u8]| {
        serde_json::from_slice::<Value>(body).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("{what} of {reference} is not JSON: {e}"),
            )
        })
    };
    let login = auth(credential);
    let (body, _) = client
        .pull_manifest_raw(&at(&reference.digest), &login, &[INDEX_TYPE])
        .await
        .map_err(failed("the index".into()))?;
    let index = json("the index", &body)?;
    let entries = index["manifests"].as_array().cloned().unwrap_or_default();
    let kind = |entry: &Value| {
        entry["annotations"][REFERENCE_TYPE_ANNOTATION]
            .as_str()
            .map(str::to_owned)
    };
    let image_manifest = entries
        .iter()
        .find(|entry| kind(entry).is_none())
        .and_then(|entry| entry["digest"].as_str())
        .ok_or_else(|| missing("the index lists no image manifest".into()))?
        .to_owned();
    let attestation = entries
        .iter()
        .find(|entry| {
            kind(entry).as_deref() == Some(ATTESTATION_MANIFEST)
                && entry["annotations"][REFERENCE_DIGEST_ANNOTATION] == image_manifest.as_str()
        })
        .and_then(|entry| entry["digest"].as_str())
        .ok_or_else(|| {
            missing(format!(
                "the index lists no attestation manifest for its image {image_manifest}"
            ))
        })?;
    let (body, _) = client
        .pull_manifest_raw(&at(attestation), &login, &[MANIFEST_TYPE])
        .await
        .map_err(failed(format!("attestation manifest {attestation}")))?;
    let manifest = json("the attestation manifest", &body)?;
    let layer = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|layer| layer["annotations"][PREDICATE_ANNOTATION] == predicate)
        .and_then(|layer| layer["digest"].as_str())
        .ok_or_else(|| {
            missing(format!(
                "the attestation manifest {attestation} holds no statement of predicate type {predicate}"
            ))
        })?;
    let mut statement = Vec::new();
    client
        .pull_blob(&at(layer), layer, &mut statement)
        .await
        .map_err(failed(format!("statement {layer}")))?;
    Ok(PulledStatement {
        image_manifest,
        statement: statement.into(),
    })
}

/// Whether the registry said the manifest is not there.
fn manifest_unknown(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    match e {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| e.code == OciErrorCode::ManifestUnknown),
        _ => false,
    }
}

/// Longest the delete's own request may take.
const DELETE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Deletes the index `reference` names and every manifest it lists, by digest, with
/// `credential` (the registry must allow deletes); an index already gone is not an error.
pub async fn delete(
    reference: &DigestReference,
    credential: &RegistryCredential,
) -> Result<crate::Deleted> {
    let repository = &reference.repository;
    let registry = &repository.registry;
    let client = client(registry)?;
    let at = |digest: &str| {
        Reference::with_digest(registry.clone(), repository.path.clone(), digest.to_owned())
    };
    let failed = |what: &str, e: oci_client::errors::OciDistributionError| {
        ProviderError::new(
            ErrorKind::Api,
            format!("{what} {reference} at registry {registry}: {e}"),
        )
    };
    let login = auth(credential);
    let index = match client
        .pull_manifest_raw(&at(&reference.digest), &login, &[INDEX_TYPE])
        .await
    {
        Ok((body, _)) => body,
        Err(e) if manifest_unknown(&e) => return Ok(crate::Deleted::AlreadyGone),
        Err(e) => return Err(failed("reading the index", e)),
    };
    let index: Value = serde_json::from_slice(&index).map_err(|e| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!("the index {reference} is not JSON: {e}"),
        )
    })?;
    let token = client
        .auth(&at(&reference.digest), &login, RegistryOperation::Push)
        .await
        .map_err(|e| failed("logging in to delete", e))?;
    let http = reqwest::Client::builder()
        .timeout(DELETE_TIMEOUT)
        .build()
        .map_err(|e| ProviderError::new(ErrorKind::Config, format!("an HTTP client: {e}")))?;
    let listed = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["digest"].as_str());
    // The listed manifests first: the index is what a sweep finds them by.
    for digest in listed.chain(std::iter::once(reference.digest.as_str())) {
        let url = format!(
            "{}://{registry}/v2/{}/manifests/{digest}",
            crate::registry::check::scheme(registry),
            repository.path
        );
        let request = match &token {
            Some(token) => http.delete(&url).bearer_auth(token),
            None => http
                .delete(&url)
                .basic_auth(&credential.username, Some(credential.password.expose())),
        };
        let answer = request.send().await.map_err(|e| {
            ProviderError::retryable(
                ErrorKind::Transport,
                format!("cannot reach registry {registry} to delete {digest}: {e}"),
            )
        })?;
        let status = answer.status();
        if !(status.is_success() || status == reqwest::StatusCode::NOT_FOUND) {
            return Err(ProviderError::new(
                ErrorKind::Api,
                format!(
                    "registry {registry} answered {status} to DELETE of manifest {digest} in {}",
                    repository.path
                ),
            ));
        }
    }
    Ok(crate::Deleted::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_holds_the_image_and_its_attestation_as_buildkit_lays_them_out() {
        let exported = Exported {
            config: Bytes::from_static(
                br#"{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:1"]}}"#,
            ),
            layers: vec![Bytes::from_static(b"layer")],
        };
        let image = image_manifest(&exported, &HashMap::new()).unwrap();
        let platform = platform(&exported.config).unwrap();
        let artifact = assemble(
            image,
            platform,
            &[("https://spdx.dev/Document", json!({"_type": "x"}))],
        );
        let index: Value = serde_json::from_slice(&artifact.index.data).unwrap();
        assert_eq!(index["manifests"][0]["platform"]["os"], "linux");
        let entry = &index["manifests"][1];
        assert_eq!(entry["platform"]["os"], "unknown");
        assert_eq!(
            entry["annotations"][REFERENCE_TYPE_ANNOTATION],
            ATTESTATION_MANIFEST
        );
        assert_eq!(
            entry["annotations"][REFERENCE_DIGEST_ANNOTATION],
            artifact.image_manifest.digest
        );
        let attestation: Value =
            serde_json::from_slice(&artifact.attestation_manifest.data).unwrap();
        assert_eq!(attestation["layers"][0]["mediaType"], IN_TOTO_TYPE);
        assert_eq!(artifact.blobs.len(), 4, "layer, config, statement, config");
        assert!(super::platform(b"{}").is_err());
    }

    #[test]
    fn a_layer_the_repository_holds_is_named_not_gzipped_again() {
        let exported = Exported {
            config: Bytes::from_static(
                br#"{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:a","sha256:b"]}}"#,
            ),
            layers: vec![
                Bytes::from(vec![7u8; 4096]),
                Bytes::from_static(b"the layer on top"),
            ],
        };
        let first = image_manifest(&exported, &HashMap::new()).unwrap();
        assert_eq!((first.reused, first.held_bytes), (0, 0));
        assert_eq!(first.blobs.len(), 3, "two layers and the config");
        // The repository holds the lower layer: the same manifest, without its blob.
        let in_registry: HashMap<String, PushedLayer> = first.layers[..1].iter().cloned().collect();
        let again = image_manifest(&exported, &in_registry).unwrap();
        assert_eq!(again.manifest.digest, first.manifest.digest);
        assert_eq!(again.layers, first.layers);
        assert_eq!(
            (again.reused, again.held_bytes),
            (1, first.layers[0].1.size)
        );
        let pushed: Vec<&str> = again.blobs.iter().map(|b| b.digest.as_str()).collect();
        assert_eq!(pushed, [&first.blobs[1].digest, &first.blobs[2].digest]);
        let size = |image| assemble(image, json!({}), &[]).size();
        let first_size = size(first);
        assert_eq!(
            size(again),
            first_size,
            "the artifact's size counts held layers"
        );
    }

    #[test]
    fn a_config_whose_diff_ids_do_not_match_its_layers_is_refused() {
        for config in [
            &br#"{"rootfs":{"diff_ids":["sha256:a","sha256:b"]}}"#[..],
            br#"{"rootfs":{}}"#,
            br#"{"rootfs":{"diff_ids":[1]}}"#,
            b"not json",
        ] {
            let exported = Exported {
                config: Bytes::copy_from_slice(config),
                layers: vec![Bytes::from_static(b"one")],
            };
            assert!(exported.diff_ids().is_err(), "{config:?}");
        }
    }
}
