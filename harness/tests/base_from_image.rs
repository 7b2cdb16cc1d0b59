//! The base made from a Debian image pulled from a registry, on real Docker: a local
//! registry on 127.0.0.1 (Debian's `docker-registry`, anonymous, as a public image's
//! registry is) serves this machine's Debian trixie root filesystem as
//! `library/debian:trixie-slim`; `bootstrap --base-from` pulls it, resolves the tag to a
//! digest and records it in the base's labels; a later bootstrap pulls that digest, never
//! the tag; lifecycle and the core tier pass on the base. Then the fallbacks: an
//! unreachable registry falls back to mmdebstrap and says so; with neither way, exit 2 and
//! a message naming both.
//!
//! Ignored under `cargo test`: it holds the engine alone for 6 to 11 minutes, so it runs in
//! the nightly's `base-from-image` job, or here with `-- --ignored`.
//!
//! The test retags the engine's `sandbox-matrix/contract-base:v1` and `contract-rootfs`;
//! it puts the images they named back before it returns, and removes the ones it made.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::registry;

const BASE: &str = "sandbox-matrix/contract-base:v1";
const ROOTFS: &str = "sandbox-matrix/contract-rootfs:trixie";

fn docker(args: &[&str]) -> Output {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn image_id(reference: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", reference])
        .output()
        .expect("the docker CLI runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn label(reference: &str, name: &str) -> String {
    let format = format!("{{{{index .Config.Labels \"{name}\"}}}}");
    String::from_utf8_lossy(&docker(&["image", "inspect", "--format", &format, reference]).stdout)
        .trim()
        .to_owned()
}

fn bootstrap(
    restore: &Restore,
    root: &Path,
    base_from: &str,
    path: Option<&str>,
) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .args(["bootstrap", "--base-from", base_from, "--root"])
        .arg(root);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out = command.output().expect("sandbox-matrix runs");
    restore.note_made();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("bootstrap --base-from {base_from}:\n{stderr}");
    (out.status.code(), stderr)
}

/// Keeps the images the tags named before the test (under a tag of its own, so that
/// nothing prunes them while untagged), and when dropped, even on a failed assertion, puts
/// them back under their tags and removes every image and name the test made.
struct Restore {
    /// Each tag, the image it named, and the tag keeping that image meanwhile.
    before: Vec<(&'static str, String, String)>,
    /// Names and ids of images the test made, removed at the end.
    made: std::cell::RefCell<Vec<String>>,
}

impl Restore {
    fn keep(tags: &[&'static str]) -> Self {
        let before = tags
            .iter()
            .map(|tag| {
                let id = image_id(tag).unwrap_or_else(|| {
                    panic!("{tag} is made by `sandbox-matrix bootstrap` (.ci/run does it first)")
                });
                let kept = format!(
                    "{}:kept-by-base-from-image-{}",
                    tag.split(':').next().unwrap_or(tag),
                    std::process::id()
                );
                docker(&["tag", &id, &kept]);
                (*tag, id, kept)
            })
            .collect();
        Self {
            before,
            made: Default::default(),
        }
    }

    /// Notes what `tags` name now, to be removed at the end.
    fn note_made(&self) {
        for (tag, id, _) in &self.before {
            if let Some(now) = image_id(tag).filter(|now| now != id) {
                self.made.borrow_mut().push(now);
            }
        }
    }

    fn id(&self, tag: &str) -> String {
        self.before
            .iter()
            .find(|(t, _, _)| *t == tag)
            .map(|(_, id, _)| id.clone())
            .expect("a kept tag")
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        self.note_made();
        for (tag, id, kept) in &self.before {
            let _ = Command::new("docker").args(["tag", id, tag]).output();
            let _ = Command::new("docker").args(["rmi", kept]).output();
        }
        for name in self.made.borrow().iter().rev() {
            let _ = Command::new("docker").args(["rmi", name]).output();
        }
    }
}

/// A copy of the base recipe in a fresh root, its Dockerfile or package list changed so
/// that the engine's base (or root filesystem) is not current for it.
fn changed_recipe(name: &str, packages_too: bool) -> common::OutDir {
    let root = common::out_dir(name);
    let recipe = root.join("fixtures/images/contract-base");
    std::fs::create_dir_all(&recipe).unwrap();
    let original = common::root().join("fixtures/images/contract-base");
    for file in ["Dockerfile", "packages.txt", "suite"] {
        std::fs::copy(original.join(file), recipe.join(file)).unwrap();
    }
    let dockerfile = std::fs::read_to_string(recipe.join("Dockerfile")).unwrap();
    std::fs::write(
        recipe.join("Dockerfile"),
        format!("{dockerfile}\n# changed by {name}\n"),
    )
    .unwrap();
    if packages_too {
        let packages = std::fs::read_to_string(recipe.join("packages.txt")).unwrap();
        std::fs::write(recipe.join("packages.txt"), format!("{packages}less\n")).unwrap();
    }
    root
}

pub fn the_base_is_made_from_a_pulled_debian_image_by_digest_and_falls_back_to_mmdebstrap() {
    let restore = Restore::keep(&[BASE, ROOTFS]);
    let (base_before, rootfs_before) = (restore.id(BASE), restore.id(ROOTFS));
    let root = common::root();

    // The registry serves this machine's Debian trixie root filesystem as Debian's image.
    let registry = registry::start_anonymous();
    let debian = format!("{}/library/debian:trixie-slim", registry.host);
    restore.made.borrow_mut().push(debian.clone());
    docker(&["tag", &rootfs_before, &debian]);
    docker(&["push", "-q", &debian]);
    docker(&["rmi", &debian]);

    let mark = registry.log_len();
    let (code, stderr) = bootstrap(&restore, &root, &debian, None);
    assert_eq!(code, Some(0), "{stderr}");
    let pinned = label(BASE, "sandbox-matrix.debian-image");
    assert!(
        pinned.contains("@sha256:"),
        "the base records the Debian image by digest: {pinned:?}"
    );
    restore.made.borrow_mut().push(pinned.clone());
    assert!(
        pinned.starts_with(&format!("{}/library/debian@sha256:", registry.host)),
        "{pinned}"
    );
    assert_eq!(label(BASE, "sandbox-matrix.debian-from"), debian);
    assert!(
        stderr.contains(&format!("{debian} resolved to {pinned}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("made from the Debian image {pinned}")),
        "{stderr}"
    );
    assert_ne!(image_id(BASE).unwrap(), base_before, "a new base was built");
    assert!(
        registry.manifest_requests(mark, "GET", "library/debian", "trixie-slim", true)
            + registry.manifest_requests(mark, "HEAD", "library/debian", "trixie-slim", true)
            > 0,
        "the tag was resolved, by the engine: {}",
        registry.access_log()
    );

    // The base is current: reused, nothing pulled.
    let mark = registry.log_len();
    let (code, stderr) = bootstrap(&restore, &root, &debian, None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("is current (made from the Debian image"),
        "{stderr}"
    );
    assert_eq!(registry.log_len(), mark, "a current base pulls nothing");

    // Without the base, and with the engine holding the Debian image under no name, a
    // later bootstrap pulls the recorded digest, never the tag.
    // Its layers stay (`--no-prune`), so the build below is the build cache's: what is
    // tested here is the pull by digest, and a second full base build would only cost time.
    docker(&["rmi", "--no-prune", BASE]);
    for name in [&debian, &pinned] {
        let _ = Command::new("docker").args(["rmi", name]).output();
    }
    let mark = registry.log_len();
    let (code, stderr) = bootstrap(&restore, &root, &debian, None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "pulling {pinned} (what {debian} resolved to before)"
        )),
        "{stderr}"
    );
    // The engine already holds that content, so it asks the registry nothing more than
    // `/v2/` for a digest; for a tag it would ask the manifest (as the first pull did).
    assert!(
        registry.access_log()[mark..].contains("\"GET /v2/ HTTP/1.1\" 200"),
        "the engine went to the registry: {}",
        registry.access_log()
    );
    assert_eq!(
        registry.manifest_requests(mark, "GET", "library/debian", "trixie-slim", true)
            + registry.manifest_requests(mark, "HEAD", "library/debian", "trixie-slim", true),
        0,
        "never by the moving tag"
    );
    assert_eq!(label(BASE, "sandbox-matrix.debian-image"), pinned);

    // Lifecycle and the core tier pass on the base made from the image.
    let out = common::out_dir("base-from-image-run");
    let run = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args([
            "run",
            "--variant",
            "docker",
            "--scenario",
            "lifecycle",
            "--scenario",
            "core-tier",
        ])
        .arg("--root")
        .arg(&root)
        .arg("--out")
        .arg(&out)
        .env("SANDBOX_MATRIX_DEBIAN_IMAGE", &debian)
        .output()
        .expect("sandbox-matrix runs");
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    // The run's provenance names the Debian image by digest.
    let results = std::fs::read_to_string(out.join("latest/results.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&results).unwrap();
    assert_eq!(
        results["provenance"]["base"],
        format!("{BASE}, made from the Debian image {pinned}"),
        "{}",
        results["provenance"]
    );
    let _ = std::fs::remove_dir_all(&out);
    drop(registry);

    // No registry answers: the root filesystem comes from mmdebstrap (current here, so it
    // is reused), and the bootstrap says so.
    docker(&["tag", &rootfs_before, ROOTFS]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let unreachable = format!("127.0.0.1:{closed}/library/debian:trixie-slim");
    let changed = changed_recipe("base-from-fallback", false);
    let (code, stderr) = bootstrap(&restore, &changed, &unreachable, None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not make the root filesystem from {unreachable}"
        )) && stderr.contains("trying mmdebstrap")
            && stderr.contains("made from mmdebstrap"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&changed);

    // Neither way: exit 2, naming both.
    let changed = changed_recipe("base-from-neither", true);
    let (code, stderr) = bootstrap(&restore, &changed, &unreachable, Some("/nonexistent"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("reach a registry") && stderr.contains("apt-get install mmdebstrap"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&changed);
}

fn main() {
    use common::trials::Need;
    let args = libtest_mimic::Arguments::from_args();
    let trials = trials![
        Need::Docker => [
            sync the_base_is_made_from_a_pulled_debian_image_by_digest_and_falls_back_to_mmdebstrap @ignored,
        ];
    ];
    libtest_mimic::run(&args, trials).exit();
}
