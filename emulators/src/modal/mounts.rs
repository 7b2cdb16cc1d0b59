//! `emulate modal`'s context mounts: the Mount RPCs through which Modal's official client
//! sends the files a build's `COPY` takes, and those files put into the build's context;
//! and the local name of a layer's base image (`Image.base_images`), on which the same
//! client's `Image.from_dockerfile` builds its second layer (`FROM base`).
//!
//! What the official client (`modal` 1.6.4) does, read from its sources (facts, no code):
//! - A Dockerfile's `COPY` sources become a context mount (`modal/_image.py`,
//!   `_create_context_mount`: the files of `context_dir` its COPY patterns match, less the
//!   `.dockerignore`d, mounted at `/`), which `Image.from_dockerfile`,
//!   `Image.dockerfile_commands` and `Image.add_local_file(..., copy=True)` (a mount of that
//!   file, then `COPY . /`) build with; the image then names it in `Image.context_mount_id`.
//! - The mount is uploaded by `modal/mount.py` (`_Mount._load_mount`):
//!   `MountBatchedCheckExistence` with each file's sha256 (hex), `MountPutFile` for each
//!   one missing (its `data` and `sha256_hex`, sent again until the answer says it
//!   `exists`; a file of 4 MiB or more goes to the blob store first and is put as a
//!   `data_blob_id`, `modal/_utils/blob_utils.py`), then `MountGetOrCreate` with every
//!   file (`filename`, its path in the mount; `sha256_hex`; `mode`, its permission bits),
//!   `OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP` and the `app_id`. The answer's
//!   `mount_id` is what the image names.
//!
//! Modal publishes no server: what the emulator does with them follows the calls'
//! definitions (modal-labs/modal-client@69519aef4cf6a3378314e3e7b91e87429490ed2a
//! `modal_proto/api.proto`) and the client's use above. A content is kept by its sha256,
//! once its data is seen to have that sha256; a mount is its files, each a content the
//! emulator holds; an image naming the mount is built with each file at its path in the
//! build context, with its mode. Fields it does not implement (the blob store's
//! `data_blob_id`, a named mount's `deployment_name`, `namespace` and `environment_name`,
//! a file's `size`) are refused by name (`HONOURED` in `modal.rs`).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use sandbox_providers::modal::proto::client as api;
use tonic::Status;

/// A file of a mount, as a build's context takes it.
#[derive(Debug, Clone)]
pub(crate) struct MountedFile {
    /// Its path in the build context (the mount's path, relative).
    pub path: PathBuf,
    pub sha256_hex: String,
    /// Its permission bits, when the mount gave them.
    pub mode: Option<u32>,
    pub data: Vec<u8>,
}

/// The contents put and the mounts made of them.
#[derive(Default)]
pub(crate) struct Mounts {
    /// Contents by their sha256 (hex), as `MountPutFile` put them.
    contents: HashMap<String, Vec<u8>>,
    /// Each mount's files, by mount id.
    mounts: HashMap<String, Vec<api::MountFile>>,
}

impl Mounts {
    /// `MountBatchedCheckExistence`: the hashes of contents it does not hold, in the order
    /// asked.
    pub(crate) fn check_existence(
        &self,
        request: &api::MountBatchedCheckExistenceRequest,
    ) -> api::MountBatchedCheckExistenceResponse {
        api::MountBatchedCheckExistenceResponse {
            missing_sha256_hex_hashes: request
                .sha256_hex_hashes
                .iter()
                .filter(|h| !self.contents.contains_key(*h))
                .cloned()
                .collect(),
        }
    }

    /// `MountPutFile`: keeps `data` under `sha256_hex` once it has that sha256, and says
    /// the content exists; without data, whether it does.
    #[allow(clippy::result_large_err)]
    pub(crate) fn put_file(
        &mut self,
        request: api::MountPutFileRequest,
    ) -> Result<api::MountPutFileResponse, Status> {
        use api::mount_put_file_request::DataOneof;
        let sha256_hex = request.sha256_hex;
        match request.data_oneof {
            Some(DataOneof::Data(data)) => {
                let actual = hex_sha256(&data);
                if actual != sha256_hex {
                    return Err(Status::invalid_argument(format!(
                        "MountPutFile: the data's sha256 is {actual}, not the sha256_hex sent \
                         ({})",
                        sandbox_providers::quoted(&sha256_hex)
                    )));
                }
                self.contents.insert(sha256_hex, data);
                Ok(api::MountPutFileResponse { exists: true })
            }
            // Refused before it gets here (`HONOURED`): the blob store is not emulated.
            Some(DataOneof::DataBlobId(_)) => Err(Status::unimplemented(
                "MountPutFile: the emulator does not implement `data_blob_id`",
            )),
            None => Ok(api::MountPutFileResponse {
                exists: self.contents.contains_key(&sha256_hex),
            }),
        }
    }

    /// `MountGetOrCreate` of an anonymous mount owned by an app: mount `mount_id` of the
    /// files sent, each naming a content put before, at a path inside the mount.
    #[allow(clippy::result_large_err)]
    pub(crate) fn get_or_create(
        &mut self,
        request: api::MountGetOrCreateRequest,
        mount_id: String,
    ) -> Result<api::MountGetOrCreateResponse, Status> {
        let mut paths = std::collections::HashSet::new();
        for file in &request.files {
            let path = context_path(&file.filename).map_err(Status::invalid_argument)?;
            if !paths.insert(path) {
                return Err(Status::invalid_argument(format!(
                    "MountGetOrCreate: file {} is sent twice",
                    sandbox_providers::quoted(&file.filename)
                )));
            }
            if !self.contents.contains_key(&file.sha256_hex) {
                return Err(Status::failed_precondition(format!(
                    "MountGetOrCreate: file {}'s content (sha256 {}) was never put \
                     (MountPutFile)",
                    sandbox_providers::quoted(&file.filename),
                    sandbox_providers::quoted(&file.sha256_hex)
                )));
            }
        }
        self.mounts.insert(mount_id.clone(), request.files);
        Ok(api::MountGetOrCreateResponse {
            mount_id,
            handle_metadata: None,
        })
    }

    /// The files of mount `mount_id`, with their contents.
    #[allow(clippy::result_large_err)]
    pub(crate) fn files(&self, mount_id: &str) -> Result<Vec<MountedFile>, Status> {
        let files = self
            .mounts
            .get(mount_id)
            .ok_or_else(|| Status::not_found(format!("no mount {mount_id}")))?;
        files
            .iter()
            .map(|f| {
                Ok(MountedFile {
                    path: context_path(&f.filename).map_err(Status::internal)?,
                    sha256_hex: f.sha256_hex.clone(),
                    mode: f.mode,
                    data: self
                        .contents
                        .get(&f.sha256_hex)
                        .cloned()
                        .unwrap_or_default(),
                })
            })
            .collect()
    }
}

/// A mount's `filename` as a path relative to the build context's root: the mount is the
/// context, and the client names its files from `/` (`/environment.json`).
fn context_path(filename: &str) -> Result<PathBuf, String> {
    let relative = Path::new(filename.trim_start_matches('/'));
    let inside = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if relative.as_os_str().is_empty() || !inside {
        return Err(format!(
            "mount file {} is not a path inside the mount",
            sandbox_providers::quoted(filename)
        ));
    }
    Ok(relative.to_owned())
}

/// Writes `files` into the build context `dir`, each with its mode.
pub(crate) fn write_context(dir: &Path, files: &[MountedFile]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    for file in files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, &file.data).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(mode) = file.mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The repository of the local tags by which a build names its base images
/// (`<repository>:<image id>`); each goes with its image.
pub(crate) const BASE_REPOSITORY: &str = "sandbox-matrix-emulate-modal/base";

/// `commands` with each `FROM` of `docker_tag` (a base image's name in the Dockerfile)
/// made a `FROM` of `local`, its flags and stage name kept.
pub(crate) fn from_base(commands: &[String], docker_tag: &str, local: &str) -> Vec<String> {
    commands
        .iter()
        .map(|command| {
            let mut words: Vec<&str> = command.split_whitespace().collect();
            let is_from = words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM"));
            match words.iter().skip(1).position(|w| !w.starts_with("--")) {
                Some(at) if is_from && words[at + 1] == docker_tag => {
                    words[at + 1] = local;
                    words.join(" ")
                }
                _ => command.clone(),
            }
        })
        .collect()
}

/// The lowercase hex SHA-256 of `data`, as Modal names a mounted file's content.
pub(crate) fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modal::tests::framed;

    #[test]
    fn a_base_image_is_named_where_the_dockerfile_names_its_tag() {
        let commands = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            from_base(
                &commands(&["FROM base", "RUN true", "from --platform=x base AS one"]),
                "base",
                "local:im-1"
            ),
            commands(&[
                "FROM local:im-1",
                "RUN true",
                "from --platform=x local:im-1 AS one"
            ])
        );
        assert_eq!(
            from_base(&commands(&["FROM other", "COPY base /"]), "base", "x"),
            commands(&["FROM other", "COPY base /"])
        );
    }

    #[test]
    fn a_mount_field_the_emulator_does_not_implement_is_refused_by_path() {
        let put = api::MountPutFileRequest {
            sha256_hex: "ab".into(),
            data_oneof: Some(api::mount_put_file_request::DataOneof::DataBlobId(
                "bl-1".into(),
            )),
        };
        assert_eq!(
            super::super::unknown_fields(
                "/modal.client.ModalClient/MountPutFile",
                &framed(&put, &[])
            ),
            Some(
                "MountPutFile: the emulator does not implement `data_blob_id` (set to bl-1)"
                    .to_owned()
            )
        );
        let file = api::MountFile {
            filename: "/environment.json".into(),
            sha256_hex: "ab".into(),
            mode: Some(0o644),
            size: None,
        };
        let anonymous = api::MountGetOrCreateRequest {
            object_creation_type: api::ObjectCreationType::AnonymousOwnedByApp as i32,
            app_id: "ap-1".into(),
            files: vec![file.clone()],
            ..Default::default()
        };
        let path = "/modal.client.ModalClient/MountGetOrCreate";
        assert_eq!(
            super::super::unknown_fields(path, &framed(&anonymous, &[])),
            None
        );
        let named = api::MountGetOrCreateRequest {
            deployment_name: "my-mount".into(),
            object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
            files: vec![api::MountFile {
                size: Some(545),
                ..file
            }],
            ..anonymous
        };
        assert_eq!(
            super::super::unknown_fields(path, &framed(&named, &[])),
            Some(
                "MountGetOrCreate: the emulator does not implement `deployment_name` (set to \
                 my-mount), `object_creation_type` (set to \
                 OBJECT_CREATION_TYPE_CREATE_IF_MISSING), `files.size` (set to 545)"
                    .to_owned()
            )
        );
        // 1.6.4's `earliest_checked_at` (7), which the commit the subset follows lacks: by
        // message and number. The emulator answers no `checked_at` for the client to echo.
        assert_eq!(
            super::super::unknown_fields(
                path,
                &framed(&api::MountGetOrCreateRequest::default(), &[0x3a, 0x00])
            ),
            Some(
                "MountGetOrCreate: the emulator does not implement \
                 modal.client.MountGetOrCreateRequest field 7"
                    .to_owned()
            )
        );
    }

    fn file(filename: &str, sha256_hex: &str) -> api::MountFile {
        api::MountFile {
            filename: filename.into(),
            sha256_hex: sha256_hex.into(),
            mode: Some(0o640),
            ..Default::default()
        }
    }

    #[test]
    fn a_mount_is_made_of_contents_put_by_their_sha256() {
        let mut mounts = Mounts::default();
        let data = b"{\"name\": \"parity\"}\n".to_vec();
        let sha = super::hex_sha256(&data);
        let asked = api::MountBatchedCheckExistenceRequest {
            sha256_hex_hashes: vec![sha.clone()],
        };
        assert_eq!(
            mounts.check_existence(&asked).missing_sha256_hex_hashes,
            vec![sha.clone()]
        );
        let put = |data: &[u8], sha: &str| api::MountPutFileRequest {
            sha256_hex: sha.into(),
            data_oneof: Some(api::mount_put_file_request::DataOneof::Data(data.to_vec())),
        };
        let wrong = mounts
            .put_file(put(b"other", &sha))
            .expect_err("data of another sha256");
        assert_eq!(wrong.code(), tonic::Code::InvalidArgument, "{wrong:?}");
        let create = |files| api::MountGetOrCreateRequest {
            files,
            app_id: "ap-1".into(),
            ..Default::default()
        };
        let unput = mounts
            .get_or_create(create(vec![file("/environment.json", &sha)]), "mo-1".into())
            .expect_err("a content never put");
        assert_eq!(unput.code(), tonic::Code::FailedPrecondition, "{unput:?}");

        assert!(mounts.put_file(put(&data, &sha)).expect("put").exists);
        assert!(
            mounts
                .check_existence(&asked)
                .missing_sha256_hex_hashes
                .is_empty()
        );
        for bad in ["/", "/../etc/passwd", "/a/../b"] {
            let refused = mounts
                .get_or_create(create(vec![file(bad, &sha)]), "mo-1".into())
                .expect_err(bad);
            assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{bad}");
        }
        let made = mounts
            .get_or_create(
                create(vec![
                    file("/environment.json", &sha),
                    file("/a/b.json", &sha),
                ]),
                "mo-1".into(),
            )
            .expect("a mount");
        assert_eq!(made.mount_id, "mo-1");
        let files = mounts.files("mo-1").expect("its files");
        assert_eq!(files[0].path, PathBuf::from("environment.json"));
        assert_eq!(files[1].path, PathBuf::from("a/b.json"));
        assert_eq!((files[0].mode, &files[0].data), (Some(0o640), &data));
        assert_eq!(
            mounts.files("mo-2").expect_err("no such mount").code(),
            tonic::Code::NotFound
        );

        let dir = std::env::temp_dir().join(format!("sm-mount-test-{}", std::process::id()));
        write_context(&dir, &files).expect("written");
        use std::os::unix::fs::PermissionsExt as _;
        let written = dir.join("a/b.json");
        assert_eq!(std::fs::read(&written).expect("read"), data);
        assert_eq!(
            std::fs::metadata(&written)
                .expect("stat")
                .permissions()
                .mode()
                & 0o7777,
            0o640
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
