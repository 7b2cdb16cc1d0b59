//! Turns an environment directory (a Dockerfile and its context) into an E2B template
//! build: a base image, a list of steps, and the gzipped tar archives the `COPY` steps
//! upload.
//!
//! The steps run as a Docker build of the Dockerfile would run them. E2B's template
//! builder runs a step as its own build user (`user`, which it creates) unless told
//! otherwise, in that user's home, and ignores the image's `USER` and `WORKDIR` (it keeps
//! its `ENV`); a Docker build starts from the base image's, which the contract fixes. So
//! the steps start by asserting the contract's identity (user, working directory, locale
//! and time zone), as the base image has it, and end by asserting it again, for the
//! launch. A `RUN` is `[command, user]`, the
//! user a Docker build would run it as (the base's, or the Dockerfile's last `USER`): the
//! builder takes the second argument as the user to run it as (`run.go`), and envd refuses
//! an empty one. A `COPY` names `root` as its owner, as Docker's `COPY` without `--chown`
//! gives root's; the builder gives the current build user's when the owner is empty
//! (`copy.go`, `parseCopyArgs`). The builder unpacks an upload with `tar -xzvf`: archives
//! are gzipped. (e2b-dev/infra at 54693ff353d26c5fe1951db5467e751f3e2f984e,
//! `packages/orchestrator/pkg/template/build/commands/{run,copy}.go`;
//! `packages/envd/internal/permissions/authenticate.go`.)

use std::path::Path;

use sandbox_contract::IDENTITY;
use sandbox_contract::dockerfile::parse::{Args, Instruction, parse};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{ErrorKind, ProviderError, Result};

/// A template build worked out from a Dockerfile.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplatePlan {
    /// The `FROM` image.
    pub from_image: String,
    /// The steps, in the `TemplateStep` shape of the build start request.
    pub steps: Vec<Value>,
    /// Archives to upload before the build starts, one per `COPY`.
    pub uploads: Vec<Upload>,
    /// Instructions E2B has no step for (CMD, ENTRYPOINT, EXPOSE...), said in the build log.
    pub ignored: Vec<String>,
}

/// The files of one `COPY` step, as a gzipped tar archive named by its SHA-256.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    /// Lowercase hex SHA-256 of `archive`.
    pub hash: String,
    /// A deterministic gzipped tar archive (sorted entries, zero times, fixed owner).
    pub archive: Vec<u8>,
}

/// Reads `dir/Dockerfile` and plans the template build from it.
pub fn plan(dir: &Path) -> Result<TemplatePlan> {
    let path = dir.join("Dockerfile");
    let text = crate::read_dockerfile(dir)?;
    let mut from_image = None;
    let mut steps = assert_identity();
    // Who a Docker build would run the next RUN as.
    let mut user = IDENTITY.user.to_owned();
    let mut uploads = Vec::new();
    let mut ignored = Vec::new();
    for instruction in parse(&text) {
        let at = || format!("{}:{}", path.display(), instruction.line);
        let keyword = instruction.keyword.as_str();
        let rest = instruction.raw.as_str();
        let args = instruction.args.words();
        if matches!(keyword, "FROM" | "RUN" | "WORKDIR" | "USER" | "ENV")
            && let Some(flag) = instruction.flags.first()
        {
            return Err(refused(
                at(),
                &format!("E2B templates take no `--{}` on {keyword}", flag.name),
            ));
        }
        if keyword == "RUN" && !instruction.heredocs.is_empty() {
            return Err(refused(at(), "E2B templates take no heredoc in RUN"));
        }
        match keyword {
            "FROM" => {
                if from_image.is_some() {
                    return Err(refused(
                        at(),
                        "a multi-stage Dockerfile has no single E2B base",
                    ));
                }
                let Some(image) = args.first() else {
                    return Err(refused(at(), "FROM names no image"));
                };
                from_image = Some(image.clone());
            }
            "RUN" => steps.push(step("RUN", vec![rest.to_owned(), user.clone()])),
            "WORKDIR" => steps.push(step("WORKDIR", vec![rest.to_owned()])),
            "USER" => {
                // envd runs a step as a user it looks up by name: `name` or `name:group`.
                let name = rest.split(':').next().unwrap_or_default().trim();
                if name.is_empty() || name.chars().all(|c| c.is_ascii_digit()) {
                    return Err(refused(
                        at(),
                        "E2B runs a step as a user named, not a uid: `USER name`",
                    ));
                }
                user = name.to_owned();
                steps.push(step("USER", vec![rest.to_owned()]));
            }
            "ENV" => steps.push(step(
                "ENV",
                env_pairs(&instruction).map_err(|m| refused(at(), m))?,
            )),
            "COPY" => {
                let plain = instruction.flags.is_empty() && instruction.heredocs.is_empty();
                let ([source, dest], true) = (args, plain) else {
                    return Err(refused(
                        at(),
                        "COPY takes exactly `source destination` here",
                    ));
                };
                let upload = archive(dir, source).map_err(|m| refused(at(), &m))?;
                let mut copy = step(
                    "COPY",
                    vec![source.clone(), dest.clone(), "root".into(), String::new()],
                );
                copy["filesHash"] = json!(upload.hash);
                steps.push(copy);
                uploads.push(upload);
            }
            "ARG" | "LABEL" | "EXPOSE" | "CMD" | "ENTRYPOINT" | "STOPSIGNAL" | "HEALTHCHECK"
            | "SHELL" => ignored.push(keyword.to_owned()),
            other => {
                return Err(refused(
                    at(),
                    &format!("E2B templates have no step for `{other}`"),
                ));
            }
        }
    }
    let from_image =
        from_image.ok_or_else(|| refused(path.display().to_string(), "no FROM instruction"))?;
    steps.extend(assert_identity());
    Ok(TemplatePlan {
        from_image,
        steps,
        uploads,
        ignored,
    })
}

/// The template's start and ready commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartCommands {
    /// Starts the code channel's server.
    pub start: String,
    /// Exits 0 once it answers.
    pub ready: Option<String>,
}

/// The start and ready commands: `E2B_START_CMD`/`E2B_READY_CMD` when set, else the
/// environment description's `start.command` and `start.ready` (`environment.json`).
/// None at all is refused: the template's code channel would never answer.
pub fn start_commands(dir: &Path, options: &super::BuildOptions) -> Result<StartCommands> {
    let path = dir.join(ENVIRONMENT_FILE);
    // A description that is a symlink out of the environment folder is not read.
    if path.symlink_metadata().is_ok() {
        crate::context::check(dir, &path, ENVIRONMENT_FILE).map_err(|why| {
            ProviderError::new(ErrorKind::Config, format!("{}: {why}", path.display()))
        })?;
    }
    let described: Value = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            ProviderError::new(
                ErrorKind::Config,
                format!("{} is not JSON: {e}", path.display()),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
        Err(e) => {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!("cannot read {}: {e}", path.display()),
            ));
        }
    };
    let field = |name: &str| {
        described["start"][name]
            .as_str()
            .filter(|v| !v.trim().is_empty())
            .map(str::to_owned)
    };
    let start = options
        .start_cmd
        .clone()
        .or_else(|| field("command"))
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the e2b variant needs a start command: {} names no `start.command` and \
                 E2B_START_CMD is not set; without one nothing serves the code channel (port {})",
                    path.display(),
                    super::CODE_PORT
                ),
            )
        })?;
    let ready = options.ready_cmd.clone().or_else(|| field("ready"));
    Ok(StartCommands { start, ready })
}

/// The environment description in an environment folder.
const ENVIRONMENT_FILE: &str = "environment.json";

/// The image a template builds from: the build request's resolved base where the
/// Dockerfile's `FROM` names the base argument (`${BASE_IMAGE}` or `$BASE_IMAGE`), else the
/// `FROM` as written.
pub fn resolve_base(from: &str, base: &crate::BaseImage) -> String {
    let line = format!("FROM {from}");
    let resolved =
        sandbox_contract::dockerfile::resolve_base_arg(&line, crate::BASE_ARG, &base.reference);
    resolved
        .strip_prefix("FROM ")
        .map_or_else(|| from.to_owned(), str::to_owned)
}

/// The steps that assert the contract's identity, as the base image has it: first in every
/// build, so that the Dockerfile's steps run as they would in a Docker build, and last,
/// for the launch.
fn assert_identity() -> Vec<Value> {
    vec![
        step("ENV", locale_pairs()),
        step("WORKDIR", vec![IDENTITY.workdir.to_owned()]),
        step("USER", vec![IDENTITY.user.to_owned()]),
    ]
}

/// `LANG`, `LC_ALL` and `TZ` as a flat key, value list.
fn locale_pairs() -> Vec<String> {
    super::locale_env()
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v.to_owned()])
        .collect()
}

fn step(kind: &str, args: Vec<String>) -> Value {
    json!({ "type": kind, "args": args, "force": false })
}

fn refused(at: String, why: &str) -> ProviderError {
    ProviderError::new(ErrorKind::Build, format!("{at}: {why}"))
}

/// `ENV K=V K2="V 2"` or `ENV K V` as a flat key, value list.
fn env_pairs(instruction: &Instruction) -> std::result::Result<Vec<String>, &'static str> {
    let rest = instruction.raw.as_str();
    if !rest.contains('=') {
        let (k, v) = rest
            .split_once(char::is_whitespace)
            .ok_or("ENV needs a name and a value")?;
        return Ok(vec![k.to_owned(), v.trim().to_owned()]);
    }
    if let Args::Shell {
        open_quote: true, ..
    } = instruction.args
    {
        return Err("an unclosed quote in ENV");
    }
    let mut out = Vec::new();
    for word in instruction.args.words() {
        let (k, v) = word
            .split_once('=')
            .ok_or("ENV mixes `K=V` and `K V` forms")?;
        out.push(k.to_owned());
        out.push(v.to_owned());
    }
    Ok(out)
}

/// A deterministic tar of `source` (a file or directory inside `dir`), named as it is in
/// the context so the COPY step finds it.
fn archive(dir: &Path, source: &str) -> std::result::Result<Upload, String> {
    crate::context::resolve(dir, source).map_err(|e| format!("COPY source {e}"))?;
    let relative = Path::new(source);
    let mut files = crate::context::files(dir, relative)?;
    files.sort();
    let mut builder = tar::Builder::new(Vec::new());
    for file in &files {
        let full = dir.join(file);
        let bytes =
            std::fs::read(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))?;
        let mode = mode_of(&full);
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, file, bytes.as_slice())
            .map_err(|e| format!("cannot archive {}: {e}", full.display()))?;
    }
    let tar = builder
        .into_inner()
        .map_err(|e| format!("cannot finish the archive of {source}: {e}"))?;
    // No name and a zero time in the gzip header: the same files give the same bytes.
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tar)
        .and_then(|()| gz.finish())
        .map(|archive| {
            let hash = Sha256::digest(&archive)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            Upload { hash, archive }
        })
        .map_err(|e| format!("cannot gzip the archive of {source}: {e}"))
}

#[cfg(unix)]
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o111 != 0 => 0o755,
        _ => 0o644,
    }
}

#[cfg(not(unix))]
fn mode_of(_path: &Path) -> u32 {
    0o644
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_commands_come_from_the_environment_and_are_required() {
        let dir = std::env::temp_dir().join(format!("sm-e2b-start-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let none = super::super::BuildOptions::default();
        std::fs::write(dir.join(ENVIRONMENT_FILE), r#"{"name": "x"}"#).unwrap();
        let refused = start_commands(&dir, &none).unwrap_err();
        assert!(
            refused.kind == ErrorKind::Config && refused.to_string().contains("E2B_START_CMD"),
            "{refused}"
        );
        std::fs::write(
            dir.join(ENVIRONMENT_FILE),
            r#"{"start": {"command": "serve", "ready": "probe"}}"#,
        )
        .unwrap();
        assert_eq!(
            start_commands(&dir, &none).unwrap(),
            StartCommands {
                start: "serve".into(),
                ready: Some("probe".into())
            }
        );
        let overridden = super::super::BuildOptions {
            start_cmd: Some("other".into()),
            ..Default::default()
        };
        assert_eq!(start_commands(&dir, &overridden).unwrap().start, "other");
        // The reference environment names its own.
        let reference =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/environments/reference");
        let commands = start_commands(&reference, &none).unwrap();
        assert!(commands.start.contains("49999") && commands.ready.is_some());
    }

    #[test]
    fn the_base_argument_resolves_to_the_requests_base_and_a_literal_stays() {
        let base = crate::BaseImage {
            reference: "registry.test/contract-base@sha256:00ff".into(),
            registry: Some("registry.test".into()),
        };
        for from in ["${BASE_IMAGE}", "$BASE_IMAGE"] {
            assert_eq!(resolve_base(from, &base), base.reference);
        }
        assert_eq!(resolve_base("debian:bookworm", &base), "debian:bookworm");
        assert_eq!(resolve_base("${OTHER}", &base), "${OTHER}");
    }

    fn dir_with(dockerfile: &str) -> std::path::PathBuf {
        let digest: String = Sha256::digest(dockerfile.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = std::env::temp_dir().join(format!("sm-e2b-plan-{}-{digest}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
        std::fs::write(dir.join("a.json"), "{}\n").unwrap();
        dir
    }

    #[test]
    fn plans_steps_between_the_identity_asserted_first_and_last() {
        let dir = dir_with(
            "# c\nFROM base:v1\nENV A=1 \\\n    B=\"two words\"\nRUN echo hi\nCOPY a.json /etc/a.json\nCMD [\"x\"]\n",
        );
        let plan = plan(&dir).unwrap();
        assert_eq!(plan.from_image, "base:v1");
        let identity = assert_identity();
        assert_eq!(plan.steps[..3], identity[..], "the base's identity first");
        assert_eq!(plan.steps[2]["args"], json!(["datalayer"]));
        assert_eq!(plan.steps[3]["args"], json!(["A", "1", "B", "two words"]));
        // As E2B's SDK sends a RUN with a user: `[command, user]`, the base's.
        assert_eq!(
            plan.steps[4],
            json!({"type": "RUN", "args": ["echo hi", "datalayer"], "force": false})
        );
        assert_eq!(
            plan.steps[5]["args"],
            json!(["a.json", "/etc/a.json", "root", ""])
        );
        assert_eq!(plan.steps[5]["filesHash"], json!(plan.uploads[0].hash));
        assert_eq!(plan.steps[6..], identity[..], "and last, for the launch");
        // Gzipped, as the builder's `tar -xzvf` takes it.
        assert_eq!(plan.uploads[0].archive[..2], [0x1f, 0x8b]);
        let mut tar = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(plan.uploads[0].archive.as_slice()),
            &mut tar,
        )
        .unwrap();
        let mut entries = tar::Archive::new(tar.as_slice());
        let names: Vec<String> = entries
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.json"]);
        assert_eq!(plan.ignored, vec!["CMD"]);
        // Deterministic: the same context gives the same archive.
        assert_eq!(super::plan(&dir).unwrap().uploads, plan.uploads);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_in_a_copied_folder_is_refused_with_the_copy_line() {
        let dir = dir_with("FROM a\nCOPY looped /looped\n");
        let looped = dir.join("looped");
        let _ = std::fs::remove_dir_all(&looped);
        std::fs::create_dir_all(looped.join("sub")).unwrap();
        std::os::unix::fs::symlink("..", looped.join("sub/back")).unwrap();
        let e = plan(&dir).unwrap_err();
        assert!(
            e.message.contains("Dockerfile:2:")
                && e.message.contains("`looped/sub/back` is a symlink loop"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_of_the_environment_is_refused_with_the_copy_line() {
        let outside = std::env::temp_dir().join(format!("sm-e2b-outside-{}", std::process::id()));
        std::fs::create_dir_all(&outside).unwrap();
        // A fake secret outside the environment folder: not a real credential.
        std::fs::write(outside.join("secret"), "sm-fake-e2b-secret\n").unwrap();
        let dir = dir_with("FROM a\nCOPY a.json /a\nCOPY ctx /ctx\n");
        let ctx = dir.join("ctx");
        let _ = std::fs::remove_dir_all(&ctx);
        std::fs::create_dir_all(&ctx).unwrap();
        std::os::unix::fs::symlink("../a.json", ctx.join("inside.json")).unwrap();
        // A symlink inside the folder pointing inside is followed.
        assert_eq!(plan(&dir).unwrap().uploads.len(), 2);
        std::os::unix::fs::symlink(outside.join("secret"), ctx.join("leak")).unwrap();
        let e = plan(&dir).unwrap_err();
        assert!(
            e.message.contains("Dockerfile:3:") && e.message.contains("outside the environment"),
            "{e}"
        );
        // The Dockerfile and the environment description themselves, too.
        let linked = dir_with("FROM a\n# the Dockerfile is linked out\n");
        std::fs::remove_file(linked.join("Dockerfile")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), linked.join("Dockerfile")).unwrap();
        let e = plan(&linked).unwrap_err();
        assert!(e.message.contains("outside the environment"), "{e}");
        let _ = std::fs::remove_file(linked.join("Dockerfile"));
        std::fs::write(linked.join("Dockerfile"), "FROM a\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), linked.join(ENVIRONMENT_FILE)).unwrap();
        let e = start_commands(&linked, &super::super::BuildOptions::default()).unwrap_err();
        assert!(e.message.contains("outside the environment"), "{e}");
        assert!(!e.to_string().contains("sm-fake-e2b-secret"), "{e}");
        let _ = std::fs::remove_dir_all(&linked);
        // The file COPY names directly, too.
        let direct = dir_with("FROM a\nCOPY leak /leak\n");
        let _ = std::fs::remove_file(direct.join("leak"));
        std::os::unix::fs::symlink(outside.join("secret"), direct.join("leak")).unwrap();
        let e = plan(&direct).unwrap_err();
        assert!(
            e.message.contains("Dockerfile:2:") && e.message.contains("outside the environment"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&direct);
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn refuses_what_it_cannot_translate() {
        let dir = dir_with("FROM a\nFROM b\n");
        let e = plan(&dir).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Build);
        assert!(e.message.contains(":2: a multi-stage"), "{e}");
        let dir = dir_with("FROM a\nCOPY ../x /x\n");
        assert!(
            plan(&dir)
                .unwrap_err()
                .message
                .contains("leaves the build context")
        );
    }

    #[test]
    fn reads_the_dockerfile_as_buildkit_does() {
        let dir = dir_with(
            "# escape=`\nFROM base:v1\nRUN echo a `\n  # a comment inside\n  b\nCOPY \"a.json\" C:\\a.json\n",
        );
        let plan = plan(&dir).unwrap();
        assert_eq!(plan.steps[3]["args"], json!(["echo a   b", "datalayer"]));
        assert_eq!(
            plan.steps[4]["args"],
            json!(["a.json", "C:\\a.json", "root", ""])
        );
    }

    #[test]
    fn a_run_goes_as_the_user_a_docker_build_would_use() {
        let plan = plan(&dir_with(
            "FROM a\nRUN whoami\nUSER root\nRUN whoami\nUSER builder:staff\nRUN whoami\n",
        ))
        .unwrap();
        let runs: Vec<&Value> = plan
            .steps
            .iter()
            .filter(|s| s["type"] == "RUN")
            .map(|s| &s["args"][1])
            .collect();
        assert_eq!(
            runs,
            [&json!("datalayer"), &json!("root"), &json!("builder")]
        );
        let e = super::plan(&dir_with("FROM a\nUSER 1000\n")).unwrap_err();
        assert!(
            e.message.contains(":2: E2B runs a step as a user named"),
            "{e}"
        );
    }

    #[test]
    fn refuses_flags_and_heredocs_naming_the_line() {
        for (dockerfile, why) in [
            (
                "FROM a\nRUN --mount=type=cache,target=/c make\n",
                ":2: E2B templates take no `--mount` on RUN",
            ),
            (
                "FROM a\nRUN <<EOF\necho hi\nEOF\n",
                ":2: E2B templates take no heredoc in RUN",
            ),
            (
                "FROM a\nCOPY --chown=1 a.json /x\n",
                ":2: COPY takes exactly `source destination` here",
            ),
            (
                "FROM a\nCOPY <<EOF /x\nhi\nEOF\n",
                ":2: COPY takes exactly `source destination` here",
            ),
            ("RUN true\n", "Dockerfile: no FROM instruction"),
        ] {
            let e = plan(&dir_with(dockerfile)).unwrap_err();
            assert!(e.message.ends_with(why), "{dockerfile:?}: {e}");
        }
    }

    /// The build request and upload recorded in the e2b lifecycle cassette, which replay
    /// checks body for body: the reference environment's plan must stay exactly that.
    #[test]
    fn the_reference_plan_is_the_recorded_one() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let plan = plan(&fixtures.join("environments/reference")).unwrap();
        let text = std::fs::read_to_string(fixtures.join("cassettes/e2b/lifecycle.yaml")).unwrap();
        let cassette: Value = serde_saphyr::from_str(&text).unwrap();
        let requests: Vec<&Value> = cassette["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|exchange| &exchange["request"])
            .collect();
        let build = requests
            .iter()
            .find(|r| r["method"] == "POST" && r["path"].as_str().unwrap().starts_with("/v2/"))
            .unwrap();
        // As the build sends it: the base argument resolved to the local base.
        let base = crate::BaseImage::local(crate::docker::base::BASE_IMAGE);
        assert_eq!(
            build["body"]["json"]["fromImage"],
            json!(resolve_base(&plan.from_image, &base))
        );
        assert_eq!(build["body"]["json"]["steps"], json!(plan.steps));
        let upload = requests.iter().find(|r| r["method"] == "PUT").unwrap();
        assert_eq!(plan.uploads.len(), 1);
        use base64::Engine as _;
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(upload["body"]["base64"].as_str().unwrap())
                .unwrap(),
            plan.uploads[0].archive
        );
        assert_eq!(upload["headers"].get("content-type"), None, "{upload:?}");
    }
}
