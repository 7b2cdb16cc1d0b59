//! The reference base image, made the first way that works: from a Debian image pulled
//! from a registry, or bootstrapped from Debian's packages where no registry answers.
//!
//! Two layers, each reused while its recipe is unchanged: a root filesystem with the
//! recipe's packages, then the recipe's Dockerfile on top (the contract's user, paths,
//! locale and init). The root filesystem is either the Debian image ([`DEBIAN_IMAGE`] by
//! default) with the packages installed by apt in a build — the tag is resolved to a
//! digest once, recorded in [`DEBIAN_IMAGE_LABEL`], and later pulls use that digest — or,
//! when the pull fails, `mmdebstrap --variant=minbase` imported into the engine. Each
//! image carries the sha256 of its recipe, which covers the way it was made, as a label,
//! so a changed recipe or a switch of way rebuilds and an unchanged one is reused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
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
/// Label holding the Debian image, by digest, a root filesystem and base were made from.
pub const DEBIAN_IMAGE_LABEL: &str = "sandbox-matrix.debian-image";
/// Label holding the reference the Debian image was asked for by (its tag).
pub const DEBIAN_FROM_LABEL: &str = "sandbox-matrix.debian-from";
/// The Debian image tried first when none is configured.
pub const DEBIAN_IMAGE: &str = "debian:trixie-slim";
/// The variable naming the Debian image to try first; empty skips the pull.
pub const DEBIAN_IMAGE_VAR: &str = "SANDBOX_MATRIX_DEBIAN_IMAGE";

/// The recipe of the reference base: a folder with `packages.txt`, `suite` and a
/// `Dockerfile`, and the doctor executable the Dockerfile copies in.
#[derive(Debug, Clone)]
pub struct BaseRecipe {
    dir: PathBuf,
    doctor: DoctorBinary,
    debian_image: Option<String>,
    /// Whether the way was asked for (a flag or the variable), not the default: a current
    /// base made another way is then not reused.
    explicit: bool,
}

/// How a root filesystem was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MadeFrom {
    /// From a Debian image pulled from a registry, `name@sha256:…`, with the packages
    /// installed by apt.
    DebianImage(String),
    /// By mmdebstrap from Debian's packages.
    Mmdebstrap,
}

impl std::fmt::Display for MadeFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MadeFrom::DebianImage(image) => write!(f, "the Debian image {image}"),
            MadeFrom::Mmdebstrap => f.write_str("mmdebstrap, from Debian's packages"),
        }
    }
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
    /// How its root filesystem was made.
    pub made_from: MadeFrom,
}

impl BaseRecipe {
    /// The recipe in `dir` (normally `fixtures/images/contract-base`) with `doctor`; the
    /// Debian image tried first is [`DEBIAN_IMAGE_VAR`]'s, else [`DEBIAN_IMAGE`].
    pub fn new(dir: impl Into<PathBuf>, doctor: DoctorBinary) -> Self {
        let recipe = Self {
            dir: dir.into(),
            doctor,
            debian_image: Some(DEBIAN_IMAGE.to_owned()),
            explicit: false,
        };
        match std::env::var(DEBIAN_IMAGE_VAR) {
            Ok(value) => recipe.with_debian_image(Some(value)),
            Err(_) => recipe,
        }
    }

    /// The same recipe made from `image` (`name:tag`) first, or by mmdebstrap only for
    /// `None` or an empty name; a current base made another way is not reused.
    pub fn with_debian_image(mut self, image: Option<String>) -> Self {
        self.debian_image = image.map(|i| i.trim().to_owned()).filter(|i| !i.is_empty());
        self.explicit = true;
        self
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

    /// sha256 of the root filesystem's recipe made `made_from`: mmdebstrap's keeps the
    /// hash it always had, so a base it made stays current.
    pub fn rootfs_hash(&self, made_from: &MadeFrom) -> Result<String> {
        let (suite, packages) = self.rootfs_recipe()?;
        let way = match made_from {
            MadeFrom::Mmdebstrap => String::new(),
            MadeFrom::DebianImage(image) => {
                format!(
                    "\nfrom {image}\n{}",
                    rootfs_dockerfile(image, &suite, &packages)
                )
            }
        };
        Ok(hex_sha256(
            format!("{suite}\n{}{way}", packages.join("\n")).as_bytes(),
        ))
    }

    /// sha256 of the whole recipe: the root filesystem's, made `made_from`, and every
    /// other file in the folder.
    pub fn hash(&self, made_from: &MadeFrom) -> Result<String> {
        let mut hasher = Sha256::new();
        hasher.update(self.rootfs_hash(made_from)?.as_bytes());
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

    /// Makes sure the base image exists, building what is missing, and says how its root
    /// filesystem was made; `progress` gets one line per event.
    ///
    /// A current base is reused whichever way it was made, unless a way was asked for
    /// ([`DEBIAN_IMAGE_VAR`], [`BaseRecipe::with_debian_image`]) and it was made another. Otherwise the Debian image is pulled, by
    /// the digest an earlier bootstrap recorded for it when there is one, bounded in time;
    /// when that fails, mmdebstrap makes the root filesystem; when mmdebstrap is missing
    /// too, the error names both ways out.
    pub async fn ensure(&self, docker: &Docker, progress: &LogFn) -> Result<BaseImage> {
        if let Some(current) = self.current_base(docker).await? {
            progress(&format!(
                "base image {BASE_IMAGE} is current (made from {}), reusing it",
                current.made_from
            ));
            return Ok(current);
        }
        let made_from = self.make_rootfs(docker, progress).await?;
        let hash = self.hash(&made_from)?;
        progress(&format!(
            "building {BASE_IMAGE} from {} on the root filesystem made from {made_from}",
            self.dir.join("Dockerfile").display()
        ));
        let mut labels = HashMap::from([(RECIPE_LABEL.to_owned(), hash.clone())]);
        if let MadeFrom::DebianImage(image) = &made_from {
            labels.insert(DEBIAN_IMAGE_LABEL.to_owned(), image.clone());
            if let Some(from) = &self.debian_image {
                labels.insert(DEBIAN_FROM_LABEL.to_owned(), from.clone());
            }
        }
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
            builder: super::Builder::Classic,
            no_cache: false,
            build_id: None,
        };
        let id = super::build_context(docker, spec, progress)
            .await
            .map_err(|e| e.context("building the reference base image"))?;
        Ok(BaseImage {
            id,
            reused: false,
            made_from,
        })
    }

    /// The base image when it is current: its recipe label is this recipe's hash for the
    /// way its labels say it was made.
    async fn current_base(&self, docker: &Docker) -> Result<Option<BaseImage>> {
        let Some((id, labels)) = image_labels(docker, BASE_IMAGE).await? else {
            return Ok(None);
        };
        let made_from = match labels.get(DEBIAN_IMAGE_LABEL) {
            Some(image) => MadeFrom::DebianImage(image.clone()),
            None => MadeFrom::Mmdebstrap,
        };
        if self.explicit && labels.get(DEBIAN_FROM_LABEL) != self.debian_image.as_ref() {
            // Made another way than the one asked for.
            return Ok(None);
        }
        let current = labels.get(RECIPE_LABEL) == Some(&self.hash(&made_from)?);
        Ok(current.then_some(BaseImage {
            id,
            reused: true,
            made_from,
        }))
    }

    /// Makes (or reuses) the root filesystem image, the first way that works.
    async fn make_rootfs(&self, docker: &Docker, progress: &LogFn) -> Result<MadeFrom> {
        let pull_failed = match &self.debian_image {
            None => None,
            Some(asked) => match self.rootfs_from_image(docker, asked, progress).await {
                Ok(made_from) => return Ok(made_from),
                Err(e) => {
                    progress(&format!(
                        "could not make the root filesystem from {asked}: {e}; trying mmdebstrap"
                    ));
                    Some((asked.clone(), e))
                }
            },
        };
        let made_from = MadeFrom::Mmdebstrap;
        let rootfs_hash = self.rootfs_hash(&made_from)?;
        if image_with_label(docker, ROOTFS_IMAGE, &rootfs_hash)
            .await?
            .is_some()
        {
            progress(&format!(
                "root filesystem {ROOTFS_IMAGE} is current (mmdebstrap), reusing it"
            ));
            return Ok(made_from);
        }
        match self.bootstrap_rootfs(docker, &rootfs_hash, progress).await {
            Ok(()) => Ok(made_from),
            Err(e) if e.kind == ErrorKind::Config => {
                let pulled = match pull_failed {
                    Some((asked, pull)) => format!("pulling {asked} failed ({pull})"),
                    None => format!("no Debian image is set to pull ({DEBIAN_IMAGE_VAR} is empty)"),
                };
                Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "cannot make the base image: {pulled}, and {e}. Either reach a registry \
                         that serves a Debian trixie image (set {DEBIAN_IMAGE_VAR} or \
                         `bootstrap --base-from` to one it serves; default {DEBIAN_IMAGE}), or \
                         install mmdebstrap (`apt-get install mmdebstrap`)"
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// The root filesystem from the Debian image `asked`: pulled by the digest an earlier
    /// bootstrap recorded for `asked` when there is one, else by its tag (resolved once,
    /// here), then the recipe's packages installed by apt in a build.
    async fn rootfs_from_image(
        &self,
        docker: &Docker,
        asked: &str,
        progress: &LogFn,
    ) -> Result<MadeFrom> {
        let recorded = image_labels(docker, ROOTFS_IMAGE)
            .await?
            .map(|(_, labels)| labels)
            .filter(|labels| labels.get(DEBIAN_FROM_LABEL).map(String::as_str) == Some(asked))
            .and_then(|labels| labels.get(DEBIAN_IMAGE_LABEL).cloned());
        let reference = recorded.clone().unwrap_or_else(|| asked.to_owned());
        match &recorded {
            Some(image) => progress(&format!(
                "pulling {image} (what {asked} resolved to before)"
            )),
            None => progress(&format!("pulling {asked}")),
        }
        let image = super::pull::pull(docker, &reference, progress).await?;
        if recorded.is_none() {
            progress(&format!("{asked} resolved to {image}"));
        }
        let made_from = MadeFrom::DebianImage(image.clone());
        let rootfs_hash = self.rootfs_hash(&made_from)?;
        if image_with_label(docker, ROOTFS_IMAGE, &rootfs_hash)
            .await?
            .is_some()
        {
            progress(&format!(
                "root filesystem {ROOTFS_IMAGE} is current (from {image}), reusing it"
            ));
            return Ok(made_from);
        }
        let (suite, packages) = self.rootfs_recipe()?;
        let context = std::env::temp_dir().join(format!(
            "sandbox-matrix-rootfs-{}-{}",
            std::process::id(),
            &rootfs_hash[..12]
        ));
        std::fs::create_dir_all(&context).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("cannot create {}: {e}", context.display()),
            )
        })?;
        let written = std::fs::write(
            context.join("Dockerfile"),
            rootfs_dockerfile(&image, &suite, &packages),
        );
        let built = match written {
            Err(e) => Err(ProviderError::new(
                ErrorKind::Config,
                format!("cannot write {}: {e}", context.display()),
            )),
            Ok(()) => {
                progress(&format!(
                    "installing {} packages on {image} with apt",
                    packages.len()
                ));
                let labels = HashMap::from([
                    (RECIPE_LABEL.to_owned(), rootfs_hash),
                    (DEBIAN_IMAGE_LABEL.to_owned(), image.clone()),
                    (DEBIAN_FROM_LABEL.to_owned(), asked.to_owned()),
                ]);
                let spec = super::BuildSpec {
                    dir: &context,
                    extra_files: &[],
                    dockerfile: None,
                    tag: Some(ROOTFS_IMAGE),
                    labels,
                    build_args: HashMap::new(),
                    credentials: None,
                    pull: false,
                    builder: super::Builder::Classic,
                    no_cache: false,
                    build_id: None,
                };
                super::build_context(docker, spec, progress).await
            }
        };
        let _ = std::fs::remove_dir_all(&context);
        built.map_err(|e| e.context(format!("installing the recipe's packages on {image}")))?;
        Ok(made_from)
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

/// The Dockerfile that makes the root filesystem from the Debian `image`: it checks the
/// image is `suite` and installs `packages` with apt, leaving no package lists behind; an
/// image that already holds every package is left as it is, with no apt call (no mirror
/// is asked for what is there).
fn rootfs_dockerfile(image: &str, suite: &str, packages: &[String]) -> String {
    let packages = packages.join(" ");
    format!(
        "FROM {image}\n\
         RUN . /etc/os-release \\\n \
         && if [ \"$VERSION_CODENAME\" != \"{suite}\" ]; then echo \"{image} is Debian $VERSION_CODENAME, not {suite}\" >&2; exit 1; fi \\\n \
         && if dpkg -s {packages} >/dev/null 2>&1; then echo \"every package is installed already\"; \\\n \
         else apt-get update \\\n \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages} \\\n \
         && rm -rf /var/lib/apt/lists/*; fi\n"
    )
}

/// The id and labels of `reference`, when the engine has it.
async fn image_labels(
    docker: &Docker,
    reference: &str,
) -> Result<Option<(String, HashMap<String, String>)>> {
    match docker.inspect_image(reference).await {
        Ok(image) => Ok(Some((
            image.id.unwrap_or_default(),
            image.config.and_then(|c| c.labels).unwrap_or_default(),
        ))),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(super::engine_error(e).context(format!("inspecting {reference}"))),
    }
}

/// The id of `reference` when it exists and carries `hash` under [`RECIPE_LABEL`].
async fn image_with_label(docker: &Docker, reference: &str, hash: &str) -> Result<Option<String>> {
    Ok(image_labels(docker, reference)
        .await?
        .filter(|(_, labels)| labels.get(RECIPE_LABEL).map(String::as_str) == Some(hash))
        .map(|(id, _)| id))
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
        let way = MadeFrom::Mmdebstrap;
        let (before, rootfs_before) = (
            recipe.hash(&way).unwrap(),
            recipe.rootfs_hash(&way).unwrap(),
        );
        // mmdebstrap's root filesystem hash is what it was before there were two ways, so
        // bases made before stay current.
        assert_eq!(rootfs_before, hex_sha256(b"trixie\npython3\ntini"));
        std::fs::write(dir.join("Dockerfile"), "FROM y\n").unwrap();
        assert_ne!(recipe.hash(&way).unwrap(), before);
        assert_eq!(recipe.rootfs_hash(&way).unwrap(), rootfs_before);
        let other_doctor = BaseRecipe::new(
            &dir,
            DoctorBinary {
                source_hash: "two".into(),
                ..doctor
            },
        );
        assert_ne!(other_doctor.hash(&way).unwrap(), recipe.hash(&way).unwrap());
        // The way is part of the recipe: switching it, or the image's digest, rebuilds.
        let image = |digest: &str| MadeFrom::DebianImage(format!("debian@sha256:{digest}"));
        let (a, b) = (image("aa"), image("bb"));
        assert_ne!(recipe.rootfs_hash(&a).unwrap(), rootfs_before);
        assert_ne!(
            recipe.rootfs_hash(&a).unwrap(),
            recipe.rootfs_hash(&b).unwrap()
        );
        assert_ne!(recipe.hash(&a).unwrap(), recipe.hash(&way).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_rootfs_from_an_image_checks_its_suite_and_installs_the_packages() {
        let packages = ["python3".to_owned(), "tini".to_owned()];
        let text = rootfs_dockerfile(
            "127.0.0.1:5000/library/debian@sha256:ab",
            "trixie",
            &packages,
        );
        assert!(
            text.starts_with("FROM 127.0.0.1:5000/library/debian@sha256:ab\nRUN "),
            "{text}"
        );
        assert!(text.contains("!= \"trixie\""), "{text}");
        assert!(
            text.contains("apt-get install -y --no-install-recommends python3 tini \\\n"),
            "{text}"
        );
        assert!(
            text.contains("if dpkg -s python3 tini >/dev/null 2>&1; then"),
            "{text}"
        );
        assert!(
            text.ends_with("rm -rf /var/lib/apt/lists/*; fi\n"),
            "{text}"
        );
    }
}
