//! The reference base image, bootstrapped from Debian's packages where no registry can be reached.
//!
//! Two layers, each reused while its recipe is unchanged: a root filesystem made by
//! `mmdebstrap --variant=minbase` and imported into the engine, then the recipe's Dockerfile
//! on top (the contract's user, paths, locale and init). Each image carries the sha256 of
//! its recipe as a label, so a changed recipe rebuilds and an unchanged one is reused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use bollard::Docker;
use bollard::query_parameters::{CreateImageOptionsBuilder, ListImagesOptionsBuilder};
use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::io::ReaderStream;

use crate::{ErrorKind, LogFn, ProviderError, Result};

/// Repository and tag of the root filesystem image.
pub const ROOTFS_IMAGE: &str = "sandbox-matrix/contract-rootfs:trixie";
/// Repository and tag of the reference base image environments build `FROM`.
pub const BASE_IMAGE: &str = "sandbox-matrix/contract-base:v1";
/// Label holding the sha256 of the recipe an image was made from.
pub const RECIPE_LABEL: &str = "sandbox-matrix.recipe";

/// The recipe of the reference base: a folder with `packages.txt`, `suite` and a
/// `Dockerfile`, and the doctor executable the Dockerfile copies in.
#[derive(Debug, Clone)]
pub struct BaseRecipe {
    dir: PathBuf,
    doctor: DoctorBinary,
}

/// The doctor executable baked into the base as `/opt/datalayer/bin/datalayer-sandbox`.
#[derive(Debug, Clone)]
pub struct DoctorBinary {
    /// An executable that acts as the doctor when run under the name `datalayer-sandbox`.
    pub path: PathBuf,
    /// A hash of the doctor's sources: the base is rebuilt when it changes, not when
    /// unrelated code in the same executable does.
    pub source_hash: String,
}

/// The name the doctor has in the build context and in the image.
pub const DOCTOR_FILE: &str = "datalayer-sandbox";

/// What [`BaseRecipe::ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseImage {
    /// The base image's id.
    pub id: String,
    /// True when an image from the same recipe was already present.
    pub reused: bool,
}

impl BaseRecipe {
    /// The recipe in `dir` (normally `fixtures/images/contract-base`) with `doctor`.
    pub fn new(dir: impl Into<PathBuf>, doctor: DoctorBinary) -> Self {
        Self {
            dir: dir.into(),
            doctor,
        }
    }

    fn read(&self, name: &str) -> Result<String> {
        let path = self.dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot read base image recipe {}: {e}", path.display()),
            )
        })
    }

    /// Debian suite and packages of the root filesystem.
    fn rootfs_recipe(&self) -> Result<(String, Vec<String>)> {
        let suite = self.read("suite")?.trim().to_owned();
        let packages: Vec<String> = self
            .read("packages.txt")?
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        if suite.is_empty() || packages.is_empty() {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "base image recipe in {} needs a suite and at least one package",
                    self.dir.display()
                ),
            ));
        }
        Ok((suite, packages))
    }

    /// sha256 of the root filesystem's recipe.
    pub fn rootfs_hash(&self) -> Result<String> {
        let (suite, packages) = self.rootfs_recipe()?;
        Ok(hex_sha256(
            format!("{suite}\n{}", packages.join("\n")).as_bytes(),
        ))
    }

    /// sha256 of the whole recipe: the root filesystem's and every other file in the folder.
    pub fn hash(&self) -> Result<String> {
        let mut hasher = Sha256::new();
        hasher.update(self.rootfs_hash()?.as_bytes());
        hasher.update(self.doctor.source_hash.as_bytes());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map_err(|e| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("cannot list {}: {e}", self.dir.display()),
                )
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in files {
            let bytes = std::fs::read(&file).map_err(|e| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("cannot read {}: {e}", file.display()),
                )
            })?;
            hasher.update(file.file_name().unwrap_or_default().as_encoded_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
        }
        Ok(hex(&hasher.finalize()))
    }

    /// Makes sure the base image exists, building what is missing; `progress` gets one line per event.
    pub async fn ensure(&self, docker: &Docker, progress: &LogFn) -> Result<BaseImage> {
        let hash = self.hash()?;
        if let Some(id) = image_with_label(docker, BASE_IMAGE, &hash).await? {
            progress(&format!(
                "base image {BASE_IMAGE} is current (recipe {}), reusing it",
                &hash[..12]
            ));
            return Ok(BaseImage { id, reused: true });
        }
        let rootfs_hash = self.rootfs_hash()?;
        if image_with_label(docker, ROOTFS_IMAGE, &rootfs_hash)
            .await?
            .is_some()
        {
            progress(&format!(
                "root filesystem {ROOTFS_IMAGE} is current, reusing it"
            ));
        } else {
            self.bootstrap_rootfs(docker, &rootfs_hash, progress)
                .await?;
        }
        progress(&format!(
            "building {BASE_IMAGE} from {}",
            self.dir.join("Dockerfile").display()
        ));
        let labels = HashMap::from([(RECIPE_LABEL.to_owned(), hash.clone())]);
        if !self.doctor.path.is_file() {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the doctor executable {} is missing",
                    self.doctor.path.display()
                ),
            ));
        }
        let spec = super::BuildSpec {
            dir: &self.dir,
            extra_files: &[(DOCTOR_FILE, &self.doctor.path)],
            dockerfile: None,
            tag: Some(BASE_IMAGE),
            labels,
            build_args: HashMap::new(),
            credentials: None,
            pull: false,
        };
        let id = super::build_context(docker, spec, progress)
            .await
            .map_err(|e| e.context("building the reference base image"))?;
        Ok(BaseImage { id, reused: false })
    }

    async fn bootstrap_rootfs(&self, docker: &Docker, hash: &str, progress: &LogFn) -> Result<()> {
        let (suite, packages) = self.rootfs_recipe()?;
        let mirror = debian_mirror()?;
        progress(&format!(
            "bootstrapping a {suite} root filesystem with mmdebstrap ({} packages); this takes a few minutes",
            packages.len()
        ));
        let mut child = tokio::process::Command::new("mmdebstrap")
            .args(["--variant=minbase", "--format=tar"])
            .arg(format!("--include={}", packages.join(",")))
            .arg(&suite)
            .arg("-")
            .arg(format!("deb {mirror} {suite} main"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::NotFound {
                    "mmdebstrap is not installed; install it with `apt-get install mmdebstrap`"
                } else {
                    "could not start mmdebstrap"
                };
                ProviderError::new(ErrorKind::Config, format!("{hint}: {e}"))
            })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let options = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(ROOTFS_IMAGE.split(':').next().unwrap_or(ROOTFS_IMAGE))
            .tag(ROOTFS_IMAGE.rsplit(':').next().unwrap_or("latest"))
            .changes(vec![format!("LABEL {RECIPE_LABEL}={hash}")])
            .build();
        let body = bollard::body_try_stream(ReaderStream::new(stdout));
        let import = docker
            .create_image(Some(options), Some(body), None)
            .try_collect::<Vec<_>>();
        let relay = async {
            let mut lines = BufReader::new(stderr).lines();
            let mut last = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                progress(&format!("mmdebstrap: {line}"));
                last = line;
            }
            last
        };
        let (import, last) = tokio::join!(import, relay);
        let status = child.wait().await.map_err(|e| {
            ProviderError::new(ErrorKind::Build, format!("waiting for mmdebstrap: {e}"))
        })?;
        if !status.success() {
            return Err(ProviderError::new(
                ErrorKind::Build,
                format!("mmdebstrap exited with {status}: {last}"),
            ));
        }
        import.map_err(|e| {
            ProviderError::new(
                ErrorKind::Build,
                format!("importing the root filesystem: {e}"),
            )
        })?;
        progress(&format!("imported {ROOTFS_IMAGE}"));
        Ok(())
    }
}

/// The id of `reference` when it exists and carries `hash` under [`RECIPE_LABEL`].
async fn image_with_label(docker: &Docker, reference: &str, hash: &str) -> Result<Option<String>> {
    let filters = HashMap::from([
        ("reference".to_owned(), vec![reference.to_owned()]),
        ("label".to_owned(), vec![format!("{RECIPE_LABEL}={hash}")]),
    ]);
    let images = docker
        .list_images(Some(
            ListImagesOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .map_err(|e| super::engine_error(e).context("listing images"))?;
    Ok(images.into_iter().next().map(|i| i.id))
}

/// The first Debian mirror in the machine's apt sources.
fn debian_mirror() -> Result<String> {
    let mut files: Vec<PathBuf> = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        more.sort();
        files.extend(more);
    }
    files
        .iter()
        .filter_map(|f| mirror_in(f))
        .next()
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Config,
                "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources; \
                 mmdebstrap needs one to bootstrap the base image",
            )
        })
}

fn mirror_in(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let name = path.to_string_lossy();
    if name.ends_with(".sources") {
        mirror_in_deb822(&text)
    } else if name.ends_with(".list") {
        mirror_in_one_line(&text)
    } else {
        None
    }
}

fn mirror_in_deb822(text: &str) -> Option<String> {
    text.split("\n\n").find_map(|stanza| {
        let field = |key: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
        };
        let enabled = field("Enabled:").is_none_or(|v| v != "no");
        let is_debian = field("Types:").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"))
            && field("Signed-By:").is_none_or(|k| k.contains("debian"));
        let uri = field("URIs:")?.split_whitespace().next()?.to_owned();
        (enabled && is_debian && !uri.contains("security")).then_some(uri)
    })
}

fn mirror_in_one_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace().filter(|w| !w.starts_with('['));
        (words.next()? == "deb").then(|| words.next().map(str::to_owned))?
    })
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_debian_uri_in_deb822_and_one_line_sources() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            mirror_in_deb822(deb822).as_deref(),
            Some("http://mirror.example/debian")
        );
        let disabled = "Types: deb\nURIs: http://a.example/debian\nEnabled: no\n";
        assert_eq!(mirror_in_deb822(disabled), None);
        let one_line = "# comment\ndeb [arch=amd64] http://b.example/debian bookworm main\n";
        assert_eq!(
            mirror_in_one_line(one_line).as_deref(),
            Some("http://b.example/debian")
        );
    }

    #[test]
    fn recipe_hash_changes_with_any_file() {
        let dir = std::env::temp_dir().join(format!("sm-recipe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("suite"), "trixie\n").unwrap();
        std::fs::write(
            dir.join("packages.txt"),
            "python3 # the interpreter\ntini\n",
        )
        .unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM x\n").unwrap();
        let doctor = DoctorBinary {
            path: dir.join("Dockerfile"),
            source_hash: "one".into(),
        };
        let recipe = BaseRecipe::new(&dir, doctor.clone());
        let (suite, packages) = recipe.rootfs_recipe().unwrap();
        assert_eq!(
            (suite.as_str(), packages),
            ("trixie", vec!["python3".to_owned(), "tini".to_owned()])
        );
        let (before, rootfs_before) = (recipe.hash().unwrap(), recipe.rootfs_hash().unwrap());
        std::fs::write(dir.join("Dockerfile"), "FROM y\n").unwrap();
        assert_ne!(recipe.hash().unwrap(), before);
        assert_eq!(recipe.rootfs_hash().unwrap(), rootfs_before);
        let other_doctor = BaseRecipe::new(
            &dir,
            DoctorBinary {
                source_hash: "two".into(),
                ..doctor
            },
        );
        assert_ne!(other_doctor.hash().unwrap(), recipe.hash().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
