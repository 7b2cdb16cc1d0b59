//! Which request fields each call implements, and the refusal of any other by name; a
//! call's deadline.

use super::*;

/// How the emulator implements a request field it has.
#[derive(Debug, Clone, Copy)]
enum Honoured {
    /// As the service does, whatever its value.
    Any,
    /// For these values only (an enum's by name): what the emulator has no other form of.
    Only(&'static [&'static str]),
}

/// The request fields each call's handler implements, by path from the request (a field
/// inside one listed comes with it). Any other field a request sets is refused by name:
/// a field the subset protos have is otherwise taken and dropped unseen.
const HONOURED: &[(&str, &[(&str, Honoured)])] = &[
    ("ClientHello", &[]),
    ("AuthTokenGet", &[]),
    (
        "EnvironmentGetOrCreate",
        &[
            ("deployment_name", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_CREATE_IF_MISSING"]),
            ),
        ],
    ),
    (
        "AppGetOrCreate",
        &[
            ("app_name", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_CREATE_IF_MISSING"]),
            ),
        ],
    ),
    (
        "ImageGetOrCreate",
        &[
            ("app_id", Honoured::Any),
            ("image.dockerfile_commands", Honoured::Any),
            ("image.context_files", Honoured::Any),
            ("image.context_mount_id", Honoured::Any),
            ("image.base_images", Honoured::Any),
            ("image.secret_ids", Honoured::Any),
            ("image.image_registry_config.secret_id", Honoured::Any),
            (
                "image.image_registry_config.registry_auth_type",
                Honoured::Only(&["REGISTRY_AUTH_TYPE_STATIC_CREDS"]),
            ),
            ("force_build", Honoured::Any),
            (
                "namespace",
                Honoured::Only(&["DEPLOYMENT_NAMESPACE_WORKSPACE"]),
            ),
            ("builder_version", Honoured::Only(&[IMAGE_BUILDER_VERSION])),
        ],
    ),
    (
        "ImageJoinStreaming",
        &[
            ("image_id", Honoured::Any),
            ("timeout", Honoured::Any),
            ("last_entry_id", Honoured::Any),
            // The emulator streams a finished build's log lines too.
            ("include_logs_for_finished", Honoured::Only(&["true"])),
        ],
    ),
    ("ImageDelete", &[("image_id", Honoured::Any)]),
    // A context mount as modal 1.6.4 uploads one (modal/mount.py, `_Mount._load_mount`):
    // not a named mount (`deployment_name`, `namespace`, `environment_name`), nor a file
    // put through the blob store (`data_blob_id`), nor a file's `size`.
    (
        "MountBatchedCheckExistence",
        &[("sha256_hex_hashes", Honoured::Any)],
    ),
    (
        "MountPutFile",
        &[("sha256_hex", Honoured::Any), ("data", Honoured::Any)],
    ),
    (
        "MountGetOrCreate",
        &[
            (
                "object_creation_type",
                Honoured::Only(&["OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP"]),
            ),
            ("app_id", Honoured::Any),
            ("files.filename", Honoured::Any),
            ("files.sha256_hex", Honoured::Any),
            ("files.mode", Honoured::Any),
        ],
    ),
    (
        "SecretGetOrCreate",
        &[
            ("deployment_name", Honoured::Any),
            ("env_dict", Honoured::Any),
            ("app_id", Honoured::Any),
            (
                "object_creation_type",
                Honoured::Only(&[
                    "OBJECT_CREATION_TYPE_EPHEMERAL",
                    "OBJECT_CREATION_TYPE_CREATE_IF_MISSING",
                ]),
            ),
        ],
    ),
    ("SecretDelete", &[("secret_id", Honoured::Any)]),
    (
        "SandboxCreate",
        &[
            ("app_id", Honoured::Any),
            ("tags", Honoured::Any),
            ("definition.image_id", Honoured::Any),
            ("definition.entrypoint_args", Honoured::Any),
            ("definition.timeout_secs", Honoured::Any),
            ("definition.scheduler_placement.regions", Honoured::Any),
            (
                "definition.network_access.network_access_type",
                Honoured::Only(&["OPEN"]),
            ),
        ],
    ),
    (
        "SandboxGetTaskId",
        &[("sandbox_id", Honoured::Any), ("timeout", Honoured::Any)],
    ),
    (
        "SandboxList",
        &[
            ("app_id", Honoured::Any),
            ("before_timestamp", Honoured::Any),
            ("include_finished", Honoured::Any),
            ("tags", Honoured::Any),
        ],
    ),
    ("SandboxTerminate", &[("sandbox_id", Honoured::Any)]),
    (
        "SandboxWait",
        &[("sandbox_id", Honoured::Any), ("timeout", Honoured::Any)],
    ),
    ("TaskGetCommandRouterAccess", &[("task_id", Honoured::Any)]),
    (
        "TaskExecStart",
        &[
            ("task_id", Honoured::Any),
            ("exec_id", Honoured::Any),
            ("command_args", Honoured::Any),
            ("stdout_config", Honoured::Any),
            ("stderr_config", Honoured::Any),
            ("timeout_secs", Honoured::Any),
            ("workdir", Honoured::Any),
            ("env", Honoured::Any),
        ],
    ),
    (
        "TaskExecStdioRead",
        &[
            ("task_id", Honoured::Any),
            ("exec_id", Honoured::Any),
            ("offset", Honoured::Any),
            ("file_descriptor", Honoured::Any),
        ],
    ),
    (
        "TaskExecPoll",
        &[("task_id", Honoured::Any), ("exec_id", Honoured::Any)],
    ),
    (
        "TaskExecWait",
        &[("task_id", Honoured::Any), ("exec_id", Honoured::Any)],
    ),
];

/// The fields a request to `method` sets that [`HONOURED`] does not list for it, each as
/// `` `path` (set to value) ``; methods it does not list are not checked.
fn unhonoured_fields(method: &str, message: &prost_reflect::DynamicMessage) -> Vec<String> {
    let Some((_, honoured)) = HONOURED.iter().find(|(m, _)| *m == method) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk_set_fields(message, "", &mut |path, value| {
        let rule = honoured
            .iter()
            .filter(|(at, _)| path == *at || path.starts_with(&format!("{at}.")))
            .map(|(_, rule)| *rule)
            .next();
        match rule {
            Some(Honoured::Any) => {}
            Some(Honoured::Only(values)) if values.contains(&value.as_str()) => {}
            _ => found.push(format!("`{path}` (set to {value})")),
        }
    });
    found
}

/// Calls `leaf` with the path and value of every field `message` sets, messages
/// descended into (an empty one sets nothing), lists and maps taken whole.
fn walk_set_fields(
    message: &prost_reflect::DynamicMessage,
    prefix: &str,
    leaf: &mut dyn FnMut(&str, String),
) {
    use prost_reflect::{Kind, Value};
    for (field, value) in message.fields() {
        let path = if prefix.is_empty() {
            field.name().to_owned()
        } else {
            format!("{prefix}.{}", field.name())
        };
        match value {
            Value::Message(inner) => walk_set_fields(inner, &path, leaf),
            Value::List(items) if items.iter().all(|i| matches!(i, Value::Message(_))) => {
                for item in items {
                    if let Value::Message(inner) = item {
                        walk_set_fields(inner, &path, leaf);
                    }
                }
            }
            Value::EnumNumber(n) => {
                let name = match field.kind() {
                    Kind::Enum(e) => e.get_value(*n).map(|v| v.name().to_owned()),
                    _ => None,
                };
                leaf(&path, name.unwrap_or_else(|| n.to_string()));
            }
            Value::String(s) => leaf(&path, s.clone()),
            Value::List(items) => leaf(&path, format!("{} items", items.len())),
            Value::Map(entries) => leaf(&path, format!("{} entries", entries.len())),
            Value::Bytes(b) => leaf(&path, format!("{} bytes", b.len())),
            other => leaf(&path, other.to_string()),
        }
    }
}

/// Why the emulator refuses the call to `path` with `body`, if a message in it sets a field
/// the emulator's protos do not have (named by message and number: the subset protos,
/// `providers/proto/modal/`, have no name for it), or one they have that its handler does
/// not implement ([`HONOURED`], named by path): the emulator would otherwise drop it
/// unseen, as prost drops unknown fields.
pub(super) fn unknown_fields(path: &str, body: &[u8]) -> Option<String> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    let pool = sandbox_providers::modal::proto::descriptors();
    let input = pool
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == method)?
        .input();
    let frames = sandbox_providers::api::grpc::decode_frames(body).ok()?;
    let mut found = Vec::new();
    for frame in frames {
        let message = prost_reflect::DynamicMessage::decode(input.clone(), frame).ok()?;
        collect_unknown(&message, &mut found);
        found.extend(unhonoured_fields(method, &message));
    }
    (!found.is_empty()).then(|| {
        format!(
            "{method}: the emulator does not implement {}",
            found.join(", ")
        )
    })
}

/// Each field `message` (or a message inside it) sets that its descriptor does not have,
/// as `<message> field <number>`.
fn collect_unknown(message: &prost_reflect::DynamicMessage, found: &mut Vec<String>) {
    use prost_reflect::{ReflectMessage as _, Value};
    let name = message.descriptor().full_name().to_owned();
    for field in message.unknown_fields() {
        found.push(format!("{name} field {}", field.number()));
    }
    for (_, value) in message.fields() {
        let mut inner = |v: &Value| {
            if let Value::Message(m) = v {
                collect_unknown(m, found);
            }
        };
        match value {
            Value::List(items) => items.iter().for_each(&mut inner),
            Value::Map(entries) => entries.values().for_each(&mut inner),
            other => inner(other),
        }
    }
}

/// A call's deadline, from its `grpc-timeout` header (`<digits><H|M|S|m|u|n>`).
pub(super) fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}
