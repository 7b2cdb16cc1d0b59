use super::*;

/// `message` as one gRPC frame, with `extra` (raw protobuf bytes) after it.
pub(super) fn framed(message: &impl prost::Message, extra: &[u8]) -> Vec<u8> {
    let mut payload = message.encode_to_vec();
    payload.extend_from_slice(extra);
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(payload.len()).expect("small").to_be_bytes());
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn a_field_the_emulator_does_not_have_is_refused_by_message_and_number() {
    let app = api::AppGetOrCreateRequest {
        app_name: "sandbox-matrix".into(),
        ..Default::default()
    };
    let path = "/modal.client.ModalClient/AppGetOrCreate";
    assert_eq!(unknown_fields(path, &framed(&app, &[])), None);
    // Field 99, varint 1: a field no subset proto has.
    assert_eq!(
        unknown_fields(path, &framed(&app, &[0x98, 0x06, 0x01])),
        Some(
            "AppGetOrCreate: the emulator does not implement \
                 modal.client.AppGetOrCreateRequest field 99"
                .to_owned()
        )
    );
    // Inside a message inside the request: a GPU asked of an image (GPUConfig.count, 2).
    let image = api::ImageGetOrCreateRequest {
        image: Some(api::Image {
            gpu_config: Some(api::GpuConfig {}),
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = "/modal.client.ModalClient/ImageGetOrCreate";
    assert_eq!(
        unknown_fields(path, &framed(&image, &[])),
        None,
        "no GPU is emulated"
    );
    // ImageGetOrCreateRequest.image (2) holding Image.gpu_config (16) holding
    // GPUConfig.count (2) = 1, encoded by hand: the subset has no field to set it with.
    let gpu_config = [0x82, 0x01, 0x02, 0x10, 0x01];
    let mut request = vec![0x12, u8::try_from(gpu_config.len()).expect("small")];
    request.extend_from_slice(&gpu_config);
    let empty = api::ImageGetOrCreateRequest::default();
    assert_eq!(
        unknown_fields(path, &framed(&empty, &request)),
        Some(
            "ImageGetOrCreate: the emulator does not implement modal.client.GPUConfig field 2"
                .to_owned()
        )
    );
}

#[test]
fn a_field_the_emulator_has_but_does_not_implement_is_refused_by_path() {
    let create = |definition: api::Sandbox| api::SandboxCreateRequest {
        app_id: "ap-1".into(),
        definition: Some(definition),
        ..Default::default()
    };
    let path = "/modal.client.ModalClient/SandboxCreate";
    let open = api::NetworkAccess {
        network_access_type: api::network_access::NetworkAccessType::Open as i32,
        ..Default::default()
    };
    let implemented = api::Sandbox {
        image_id: "im-1".into(),
        timeout_secs: 900,
        network_access: Some(open.clone()),
        // Present but empty: nothing asked of them.
        resources: Some(api::Resources::default()),
        open_ports: Some(api::PortSpecs {}),
        ..Default::default()
    };
    assert_eq!(
        unknown_fields(path, &framed(&create(implemented.clone()), &[])),
        None
    );
    let memory = api::Sandbox {
        resources: Some(api::Resources {
            memory_mb: 512,
            ..Default::default()
        }),
        ..implemented.clone()
    };
    assert_eq!(
        unknown_fields(path, &framed(&create(memory), &[])),
        Some(
            "SandboxCreate: the emulator does not implement \
                 `definition.resources.memory_mb` (set to 512)"
                .to_owned()
        )
    );
    let blocked = api::Sandbox {
        network_access: Some(api::NetworkAccess {
            network_access_type: api::network_access::NetworkAccessType::Blocked as i32,
            ..open
        }),
        idle_timeout_secs: Some(60),
        ..implemented
    };
    assert_eq!(
        unknown_fields(path, &framed(&create(blocked), &[])),
        Some(
            "SandboxCreate: the emulator does not implement \
                 `definition.network_access.network_access_type` (set to BLOCKED), \
                 `definition.idle_timeout_secs` (set to 60)"
                .to_owned()
        )
    );
    let image = api::ImageGetOrCreateRequest {
        image: Some(api::Image {
            dockerfile_commands: vec!["FROM base:v1".into()],
            ..Default::default()
        }),
        builder_version: "2024.10".into(),
        ..Default::default()
    };
    assert_eq!(
        unknown_fields(
            "/modal.client.ModalClient/ImageGetOrCreate",
            &framed(&image, &[])
        ),
        Some(
            "ImageGetOrCreate: the emulator does not implement `builder_version` (set to \
                 2024.10)"
                .to_owned()
        )
    );
}

#[test]
fn the_base_is_what_the_first_from_names() {
    let commands = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        from_reference(&commands(&["FROM base:v1", "RUN true"])),
        Ok("base:v1".into())
    );
    assert_eq!(
        from_reference(&commands(&[
            "from --platform=linux/amd64 r.io/x@sha256:ab AS one"
        ])),
        Ok("r.io/x@sha256:ab".into())
    );
    assert!(from_reference(&commands(&["RUN true"])).is_err());
    assert!(from_reference(&commands(&["FROM"])).is_err());
    assert!(from_reference(&[]).is_err());
}

#[test]
fn a_jwt_carries_its_claims_and_ids_have_modals_shape() {
    let token = jwt(&serde_json::json!({"exp": 42}));
    let payload = token.split('.').nth(1).expect("three parts");
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON");
    assert_eq!(claims["exp"], 42);
    let id = random_id(22);
    assert!(id.len() == 22 && id.chars().all(|c| c.is_ascii_alphanumeric()));
}

#[test]
fn a_grpc_timeout_header_is_read_in_each_unit() {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (value, expected) in [
        ("2S", Some(Duration::from_secs(2))),
        ("1500m", Some(Duration::from_millis(1500))),
        ("1M", Some(Duration::from_secs(60))),
        ("7x", None),
    ] {
        metadata.insert("grpc-timeout", value.parse().expect("ascii"));
        assert_eq!(grpc_timeout(&metadata), expected, "{value}");
    }
}

#[test]
fn long_polls_are_bounded() {
    assert_eq!(long_poll(-1.0), Duration::ZERO);
    assert_eq!(long_poll(f32::NAN), Duration::ZERO);
    assert_eq!(long_poll(2.5), Duration::from_millis(2500));
    assert_eq!(long_poll(1e9), LONG_POLL);
}
