//! The e2b emulator's template builder: a build's steps and uploads, as the client sent
//! them, made into a Docker build context that does what E2B's builder does with them
//! (e2b-dev/infra at [`INFRA_COMMIT`], `packages/orchestrator/pkg/template/build/`):
//!
//! - before any step, the builder's user phase runs `USER user true`: E2B's own build
//!   user is created when the base lacks it, given the sudo group, its password removed
//!   (`builder.go` with `config.TemplateDefaultUser`; `commands/user.go`, `addToSudoers`),
//!   and the steps start as that user, with no working directory;
//! - `USER name` creates the user when it does not exist (`commands/user.go`) and makes it
//!   the steps' user;
//! - `RUN [command, user]` runs `/bin/bash -l -c command` as `user`, else as the steps'
//!   user, in the working directory, else the user's home in passwd (`commands/run.go`,
//!   `sandboxtools/command.go`; envd's `services/process/handler/handler.go`), with the
//!   base image's environment, `HOME` included (`phases/base/builder.go` keeps the image's
//!   `Env`); a user who does not exist fails the step, as envd's lookup does
//!   (`packages/envd/internal/permissions/authenticate.go`);
//! - `COPY [source, destination, owner, permissions]` unpacks its upload and moves the
//!   source into the destination as Docker's COPY would, owned by `owner` (`name` means
//!   `name:name`), else by the steps' user (`commands/copy.go`, `copy_script.sh`);
//! - `ENV` and `WORKDIR` set what later steps and the sandbox get.
//!
//! Before those, the base phase: `base_phase.sh` (the builder's `phases/base/provision.sh`
//! for the debian family, as root), which says in the build log which of the packages the
//! builder installs the base lacks, and installs none (the emulator builds offline); nor
//! does it set up the VM's init or put envd in the image (the sandbox is the docker
//! variant's container).
//!
//! What the builder does that the emulator does not is refused by name (501): a glob in
//! a COPY source, a relative COPY destination before any WORKDIR (the builder resolves it
//! against the user's home, looked up in the sandbox), COPY permissions.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::INFRA_COMMIT;

/// The base phase's script, run as root before the user phase (see the module's docs).
const BASE_PHASE: &str = include_str!("base_phase.sh");
/// Where the builder puts it, and it removes itself from.
const BASE_PHASE_PATH: &str = "/usr/local/bin/provision.sh";

/// E2B's own build user, created before the steps (`config.TemplateDefaultUser`).
pub const BUILD_USER: &str = "user";

/// Why a build's steps make no build context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Something the builder does that the emulator does not (answered 501).
    Unimplemented(String),
    /// A step the builder fails (the build fails with it).
    Fails(String),
}

/// A build context in a folder of its own, removed when dropped.
#[derive(Debug)]
pub struct BuildContext {
    dir: PathBuf,
}

impl BuildContext {
    /// The folder: a `Dockerfile` and each COPY's unpacked files (`copy-<step>/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for BuildContext {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes the build context of template `tid`'s build `bid` from its `steps` and the
/// `uploads` it was sent (by template and files hash) in a new folder under `parent`.
/// The Dockerfile's base is the build argument `BASE_IMAGE`, which the docker variant's
/// build sets to the request's `fromImage`.
pub fn build_context(
    parent: &Path,
    tid: &str,
    bid: &str,
    steps: &Value,
    uploads: &HashMap<(String, String), Vec<u8>>,
) -> Result<BuildContext, Refusal> {
    let dockerfile = dockerfile(steps)?;
    let context = BuildContext {
        dir: parent.join(format!("sandbox-matrix-e2b-build-{tid}-{bid}")),
    };
    let io = |what: &str, e: std::io::Error| {
        Refusal::Fails(format!("the emulator's build context ({what}): {e}"))
    };
    let _ = std::fs::remove_dir_all(&context.dir);
    std::fs::create_dir_all(&context.dir).map_err(|e| io("its folder", e))?;
    for (i, step) in steps.as_array().into_iter().flatten().enumerate() {
        if step["type"] != "COPY" {
            continue;
        }
        let hash = step["filesHash"].as_str().unwrap_or_default();
        let Some(upload) = uploads.get(&(tid.to_owned(), hash.to_owned())) else {
            return Err(Refusal::Fails(format!(
                "COPY (step {i}): no files uploaded for hash `{hash}`"
            )));
        };
        let into = context.dir.join(format!("copy-{i}"));
        std::fs::create_dir_all(&into).map_err(|e| io("a COPY's folder", e))?;
        tar::Archive::new(flate2::read::GzDecoder::new(upload.as_slice()))
            .unpack(&into)
            .map_err(|e| {
                Refusal::Fails(format!(
                    "COPY (step {i}): failed to extract files: tar -xzvf: {e}"
                ))
            })?;
    }
    std::fs::write(context.dir.join("Dockerfile"), dockerfile)
        .map_err(|e| io("its Dockerfile", e))?;
    std::fs::write(context.dir.join("base-phase.sh"), BASE_PHASE)
        .map_err(|e| io("its base phase", e))?;
    Ok(context)
}

/// What the steps' translation keeps track of, as the builder's `metadata.Context`.
struct Steps {
    text: String,
    /// The steps' user.
    user: String,
    /// The working directory, once a WORKDIR set one.
    workdir: Option<String>,
    /// Users a USER step named, to create (when missing) before the next RUN or COPY.
    pending: Vec<String>,
    /// Users already created or found.
    ensured: Vec<String>,
    /// The user the Dockerfile's last `USER` names.
    docker_user: String,
}

impl Steps {
    fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// Makes the Dockerfile's next instructions run as `user`.
    fn as_user(&mut self, user: &str) {
        if self.docker_user != user {
            self.line(&format!("USER {user}"));
            self.docker_user = user.to_owned();
        }
    }

    /// Creates, as root, each pending user who does not exist yet (`commands/user.go`:
    /// `id -u`, else `useradd --create-home --shell /bin/bash`), in one layer.
    fn ensure_users(&mut self) {
        let pending: Vec<String> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|u| !self.ensured.contains(u))
            .collect();
        if pending.is_empty() {
            return;
        }
        let create: Vec<String> = pending
            .iter()
            .map(|u| {
                let u = shell_quoted(u);
                format!(
                    "(id -u {u} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {u})"
                )
            })
            .collect();
        self.as_user("root");
        self.line(&format!("RUN {}", create.join(" && ")));
        self.ensured.extend(pending);
    }
}

/// The Dockerfile the steps make.
pub fn dockerfile(steps: &Value) -> Result<String, Refusal> {
    let mut out = Steps {
        text: String::new(),
        user: BUILD_USER.to_owned(),
        workdir: None,
        pending: Vec::new(),
        ensured: vec![BUILD_USER.to_owned()],
        docker_user: BUILD_USER.to_owned(),
    };
    let _ = writeln!(
        out.text,
        "# Made by the e2b emulator from a template build's steps, as E2B's builder runs them\n\
         # (e2b-dev/infra@{INFRA_COMMIT} packages/orchestrator/pkg/template/build/).\n\
         ARG BASE_IMAGE\n\
         FROM ${{BASE_IMAGE}}\n\
         SHELL [\"/bin/bash\", \"-l\", \"-c\"]\n\
         USER root\n\
         # The base phase: phases/base/provision.sh, offline (base-phase.sh says how).\n\
         COPY base-phase.sh {BASE_PHASE_PATH}\n\
         RUN sh {BASE_PHASE_PATH}\n\
         # The user phase: USER {BUILD_USER} true.\n\
         RUN (id -u {BUILD_USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {BUILD_USER}) \
         && (! getent group sudo >/dev/null || usermod -aG sudo {BUILD_USER}) && passwd -d {BUILD_USER} >/dev/null\n\
         USER {BUILD_USER}"
    );
    for (i, step) in steps.as_array().into_iter().flatten().enumerate() {
        let args: Vec<&str> = step["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default())
            .collect();
        let kind = step["type"].as_str().unwrap_or_default();
        let fails = |why: &str| Err(Refusal::Fails(format!("{kind} (step {i}): {why}")));
        let unimplemented = |what: &str| {
            Err(Refusal::Unimplemented(format!(
                "the e2b emulator does not implement {what} (step {i}); it refuses it rather than build something else"
            )))
        };
        // Every name and path below goes into the Dockerfile: one that would end its line
        // or split its word is refused by name, never written.
        if let Some(arg) = args.iter().find(|a| a.contains(['\n', '\r']))
            && (kind != "RUN" || args.first() != Some(arg))
        {
            return unimplemented(&format!(
                "a line break in the argument `{}`",
                arg.escape_debug()
            ));
        }
        let name = |what: &str, value: &str| {
            if is_plain_name(value) {
                Ok(())
            } else {
                Err(Refusal::Fails(format!(
                    "{kind} (step {i}): {what} `{value}` is not a user or group name useradd takes"
                )))
            }
        };
        match kind {
            "ENV" => {
                if args.is_empty() || !args.len().is_multiple_of(2) {
                    return fails("ENV requires key value pairs");
                }
                if let Some(key) = args.iter().step_by(2).find(|k| !is_env_key(k)) {
                    return unimplemented(&format!(
                        "the ENV key `{key}` (only letters, digits and `_`, not starting with a digit)"
                    ));
                }
                let pairs: Vec<String> = args
                    .chunks(2)
                    .map(|kv| format!("{}={}", kv[0], double_quoted(kv[1])))
                    .collect();
                out.line(&format!("ENV {}", pairs.join(" ")));
            }
            "WORKDIR" => {
                let Some(dir) = args.first().filter(|d| !d.is_empty()) else {
                    return fails("WORKDIR requires a path argument");
                };
                out.line(&format!("WORKDIR {dir}"));
                out.workdir = Some((*dir).to_owned());
            }
            "USER" => {
                let Some(user) = args.first().filter(|n| !n.is_empty()) else {
                    return fails("USER requires a username argument");
                };
                if args.get(1) == Some(&"true") {
                    return unimplemented("USER's sudo argument");
                }
                name("the user", user)?;
                out.user = (*user).to_owned();
                out.pending.push((*user).to_owned());
            }
            "RUN" => {
                let Some(command) = args.first() else {
                    return fails("RUN requires command argument");
                };
                out.ensure_users();
                let user = args.get(1).map_or(out.user.clone(), |u| (*u).to_owned());
                name("the user", &user)?;
                out.as_user(&user);
                let cwd = if out.workdir.is_some() {
                    ""
                } else {
                    "cd \"$(getent passwd \"$(id -un)\" | cut -d: -f6)\" || exit 1; "
                };
                out.line(&format!("RUN {cwd}{}", one_line(command)));
            }
            "COPY" => {
                let [source, destination, rest @ ..] = args.as_slice() else {
                    return fails("COPY requires a local path and a container path argument");
                };
                if source.contains(['*', '?', '[', '{']) {
                    return unimplemented("a glob in a COPY source");
                }
                if rest.get(1).is_some_and(|p| !p.is_empty()) {
                    return unimplemented("COPY permissions");
                }
                let source = source.trim_end_matches('/');
                let inside = Path::new(source)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
                if source.is_empty() || !inside {
                    return fails("the source path is not inside the uploaded files");
                }
                let destination = if destination.starts_with('/') {
                    (*destination).to_owned()
                } else if let Some(workdir) = &out.workdir {
                    format!("{}/{destination}", workdir.trim_end_matches('/'))
                } else {
                    return unimplemented(
                        "a relative COPY destination before any WORKDIR (the builder resolves it against the user's home)",
                    );
                };
                let owner = match rest.first().filter(|o| !o.is_empty()) {
                    Some(o) if o.contains(':') => (*o).to_owned(),
                    Some(o) => format!("{o}:{o}"),
                    None => format!("{0}:{0}", out.user),
                };
                for part in owner.split(':') {
                    name("the owner", part)?;
                }
                out.ensure_users();
                out.line(&format!(
                    "COPY --chown={owner} [{}, {}]",
                    json_string(&format!("copy-{i}/{source}")),
                    json_string(&destination)
                ));
            }
            other => return unimplemented(&format!("the step type `{other}`")),
        }
    }
    out.ensure_users();
    let user = out.user.clone();
    out.as_user(&user);
    Ok(out.text)
}

/// Whether `value` is a name `useradd` takes (Debian's default NAME_REGEX, upper case
/// allowed as with `--badname`): it also cannot end or split a Dockerfile word.
fn is_plain_name(value: &str) -> bool {
    let mut chars = value.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Whether `key` is an environment variable name a shell can export.
fn is_env_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A command on one Dockerfile line: continuations already joined, newlines escaped.
fn one_line(command: &str) -> String {
    command.replace('\n', " \\\n")
}

fn double_quoted(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn json_string(value: &str) -> String {
    Value::String(value.to_owned()).to_string()
}

fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn steps(v: Value) -> String {
        dockerfile(&v).expect("a Dockerfile")
    }

    #[test]
    fn the_build_user_is_made_first_and_the_steps_start_as_it() {
        let text = steps(json!([{"type": "RUN", "args": ["id -un > /tmp/who"]}]));
        assert!(text.contains("useradd --create-home --shell /bin/bash user"));
        assert!(
            text.ends_with(
                "USER user\nRUN cd \"$(getent passwd \"$(id -un)\" | cut -d: -f6)\" || exit 1; id -un > /tmp/who\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_run_goes_as_its_named_user_and_the_steps_user_comes_back() {
        let text = steps(json!([
            {"type": "WORKDIR", "args": ["/srv"]},
            {"type": "USER", "args": ["datalayer"]},
            {"type": "RUN", "args": ["make", "root"]},
            {"type": "RUN", "args": ["make check"]},
        ]));
        assert!(
            text.ends_with(
                "WORKDIR /srv\nUSER root\nRUN (id -u 'datalayer' >/dev/null 2>&1 || useradd --create-home --shell /bin/bash 'datalayer')\n\
                 RUN make\nUSER datalayer\nRUN make check\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_copy_is_owned_by_its_owner_else_the_steps_user() {
        let text = steps(json!([
            {"type": "COPY", "args": ["a.json", "/etc/a.json", "root", ""], "filesHash": "h"},
            {"type": "WORKDIR", "args": ["/w"]},
            {"type": "COPY", "args": ["dir/", "sub", "", ""], "filesHash": "h"},
        ]));
        assert!(
            text.contains("COPY --chown=root:root [\"copy-0/a.json\", \"/etc/a.json\"]"),
            "{text}"
        );
        assert!(
            text.contains("COPY --chown=user:user [\"copy-2/dir\", \"/w/sub\"]"),
            "{text}"
        );
    }

    #[test]
    fn env_values_are_quoted_and_odd_pairs_fail() {
        let text = steps(json!([{"type": "ENV", "args": ["A", "x \"$y\"", "B", ""]}]));
        assert!(text.contains("ENV A=\"x \\\"\\$y\\\"\" B=\"\""), "{text}");
        assert_eq!(
            dockerfile(&json!([{"type": "ENV", "args": ["A"]}])),
            Err(Refusal::Fails(
                "ENV (step 0): ENV requires key value pairs".into()
            ))
        );
    }

    #[test]
    fn what_the_emulator_does_not_build_is_refused_by_name() {
        let refused = |v: Value| match dockerfile(&v) {
            Err(Refusal::Unimplemented(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(
            refused(json!([{"type": "COPY", "args": ["*.py", "/x"]}]))
                .contains("a glob in a COPY source")
        );
        assert!(
            refused(json!([{"type": "COPY", "args": ["a", "rel"]}]))
                .contains("a relative COPY destination before any WORKDIR")
        );
        assert!(
            refused(json!([{"type": "COPY", "args": ["a", "/x", "", "0755"]}]))
                .contains("COPY permissions")
        );
        assert!(refused(json!([{"type": "USER", "args": ["u", "true"]}])).contains("sudo"));
        assert_eq!(
            dockerfile(&json!([{"type": "COPY", "args": ["../etc", "/x"]}])),
            Err(Refusal::Fails(
                "COPY (step 0): the source path is not inside the uploaded files".into()
            ))
        );
    }

    #[test]
    fn a_name_or_path_that_would_break_the_dockerfile_is_never_written() {
        let refusal = |v: Value| dockerfile(&v).expect_err("refused");
        let fails = |v: Value| match refusal(v) {
            Refusal::Fails(m) => m,
            other => panic!("{other:?}"),
        };
        let unimplemented = |v: Value| match refusal(v) {
            Refusal::Unimplemented(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            fails(json!([{"type": "USER", "args": ["a b"]}]))
                .contains("the user `a b` is not a user or group name")
        );
        assert!(fails(json!([{"type": "RUN", "args": ["true", "x;y"]}])).contains("`x;y`"));
        assert!(
            fails(json!([{"type": "COPY", "args": ["a", "/x", "u:g g"]}]))
                .contains("the owner `g g`")
        );
        assert!(
            unimplemented(json!([{"type": "WORKDIR", "args": ["/a\nRUN rm -rf /"]}]))
                .contains("a line break in the argument")
        );
        assert!(
            unimplemented(json!([{"type": "ENV", "args": ["A", "1\nUSER root"]}]))
                .contains("a line break")
        );
        assert!(
            unimplemented(json!([{"type": "ENV", "args": ["A=B", "1"]}]))
                .contains("the ENV key `A=B`")
        );
        // A RUN's command may span lines: it is joined, not refused.
        assert!(
            steps(json!([{"type": "RUN", "args": ["true &&\nfalse"]}]))
                .contains("true && \\\nfalse")
        );
    }

    #[test]
    fn a_copy_unpacks_its_gzipped_upload_into_its_own_folder() {
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, "a.json", &b"{}"[..])
            .expect("an entry");
        let upload = tar.into_inner().expect("tar").finish().expect("gzip");
        let uploads = HashMap::from([(("t".to_owned(), "h".to_owned()), upload)]);
        let parent = std::env::temp_dir();
        let steps = json!([{"type": "COPY", "args": ["a.json", "/a.json"], "filesHash": "h"}]);
        let context = build_context(&parent, "t", "b1", &steps, &uploads).expect("a context");
        assert_eq!(
            std::fs::read(context.dir().join("copy-0/a.json")).expect("the file"),
            b"{}"
        );
        let dir = context.dir().to_owned();
        drop(context);
        assert!(!dir.exists(), "the context is removed with it");
        let missing = json!([{"type": "COPY", "args": ["a.json", "/a.json"], "filesHash": "x"}]);
        assert!(matches!(
            build_context(&parent, "t", "b2", &missing, &uploads),
            Err(Refusal::Fails(m)) if m.contains("no files uploaded for hash `x`")
        ));
    }
}
