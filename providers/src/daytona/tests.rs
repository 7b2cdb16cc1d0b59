use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn credentials_come_from_the_key_or_a_jwt_with_its_organization() {
    // Fake values, made up for this test.
    let (key, org) = credentials_from(env(&[("DAYTONA_API_KEY", "fake-key")])).unwrap();
    assert_eq!((key.name(), org), ("DAYTONA_API_KEY", None));
    let (jwt, org) = credentials_from(env(&[
        ("DAYTONA_JWT_TOKEN", "fake-jwt"),
        ("DAYTONA_ORGANIZATION_ID", "fake-org"),
    ]))
    .unwrap();
    assert_eq!(
        (jwt.name(), org.as_deref()),
        ("DAYTONA_JWT_TOKEN", Some("fake-org"))
    );
}

#[test]
fn a_missing_credential_is_named() {
    let e = credentials_from(env(&[])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("DAYTONA_API_KEY"), "{e}");
    let e = credentials_from(env(&[("DAYTONA_JWT_TOKEN", "fake-jwt")])).unwrap_err();
    assert!(e.message.contains("DAYTONA_ORGANIZATION_ID"), "{e}");
}

fn build_request(credential: Option<crate::RegistryCredential>) -> BuildRequest {
    BuildRequest {
        environment_dir: std::path::PathBuf::from("/nowhere"),
        base: crate::BaseImage::local("local/base:v1"),
        registry_credential: credential,
        // A fake canary, made up for this test.
        build_secrets: vec![Secret::new("REGISTRY_TOKEN", "sm-fake-canary-00")],
        labels: RunLabels {
            run_id: "r".into(),
            variant: "daytona".into(),
            scenario: "s".into(),
        },
    }
}

#[test]
fn the_registry_entry_holds_the_credential_else_the_canary() {
    let credential = crate::RegistryCredential {
        registry: "127.0.0.1:5000".into(),
        username: "AWS".into(),
        // A fake token, made up for this test.
        password: Secret::new("REGISTRY_PASSWORD", "fake-login-token"),
        source: crate::CredentialSource::EcrLoginToken,
    };
    let entry = registry_entry(&build_request(Some(credential)), "FROM x\n").unwrap();
    assert_eq!(
        (entry.url.as_str(), entry.username.as_str()),
        ("127.0.0.1:5000", "AWS")
    );
    assert_eq!(entry.password.expose(), "fake-login-token");
    let entry = registry_entry(&build_request(None), "FROM local/base:v1\n").unwrap();
    assert_eq!(
        (entry.url.as_str(), entry.password.name()),
        (CANARY_REGISTRY, "REGISTRY_TOKEN")
    );
    let entry = registry_entry(&build_request(None), "FROM reg.test:1/b@sha256:a\n").unwrap();
    assert_eq!(entry.url, "reg.test:1");
    let mut bare = build_request(None);
    bare.build_secrets.clear();
    assert!(registry_entry(&bare, "FROM x\n").is_none());
}

#[test]
fn queries_are_url_encoded() {
    assert_eq!(
        with_query("/sandbox", &[("labels", "{\"a\":\"b c\"}")]),
        "/sandbox?labels=%7B%22a%22%3A%22b+c%22%7D"
    );
}

#[tokio::test]
async fn artifact_metadata_holds_the_snapshot_its_build_log_and_its_registry_entries() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let answer = |p: &str, body: serde_json::Value| {
        Mock::given(method("GET"))
            .and(path(p.to_owned()))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
    };
    answer(
        "/snapshots/s1",
        json!({"id": "s1", "name": "sandbox-matrix-r-x", "state": "active",
                   "buildInfo": {"dockerfileContent": "FROM x"}}),
    )
    .mount(&server)
    .await;
    answer(
        "/snapshots/s1/build-logs-url",
        json!({"url": format!("{}/logs/s1", server.uri())}),
    )
    .mount(&server)
    .await;
    Mock::given(method("GET"))
        .and(path("/logs/s1"))
        .respond_with(ResponseTemplate::new(200).set_body_string("step 1\nstep 2\n"))
        .mount(&server)
        .await;
    answer(
        "/docker-registry",
        json!([{"id": "r1", "name": "sandbox-matrix-r-x", "username": "build"},
                   {"id": "r2", "name": "someone-else", "username": "u"}]),
    )
    .mount(&server)
    .await;
    let provider = DaytonaProvider::new(
        ApiSettings {
            endpoints: Endpoints {
                api_base: server.uri(),
                sandbox_domain: String::new(),
            },
            mode: Mode::Live,
            // A fake key, made up for this test.
            credentials: vec![Secret::new("DAYTONA_API_KEY", "fake-daytona-key")],
            volatiles: Arc::default(),
            call_timeout: CALL_TIMEOUT,
        },
        None,
        None,
    )
    .unwrap();
    let artifact = Artifact {
        id: "s1".into(),
        kind: "snapshot-id".into(),
    };
    let metadata: serde_json::Value =
        serde_json::from_str(&provider.artifact_metadata(&artifact).await.unwrap()).unwrap();
    assert_eq!(
        metadata["snapshot"]["buildInfo"]["dockerfileContent"],
        "FROM x"
    );
    assert_eq!(metadata["build log"], json!(["step 1", "step 2"]));
    assert_eq!(
        metadata["docker registries"],
        json!([{"id": "r1", "name": "sandbox-matrix-r-x", "username": "build"}])
    );
}
