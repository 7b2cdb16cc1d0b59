//! The registry client against wiremock: the v2 handshake and manifest check with Basic and
//! Bearer logins, refusals naming the registry, and an ECR login token through aws-sdk-ecr.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sandbox_providers::registry::credential::{self, AuthMode};
use sandbox_providers::registry::{DigestReference, check_base};
use sandbox_providers::{CredentialSource, ErrorKind, RegistryCredential, Secret};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Deliberate fake canary credentials, made up for these tests; they grant nothing anywhere.
const FAKE_TOKEN: &str = "sm-fake-login-token-0123";
/// A second fake, the one the registry refuses.
const WRONG_TOKEN: &str = "sm-fake-wrong-token-4567";

/// The environment is process-wide: the ECR test sets it, so every test here takes turns.
static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn digest() -> String {
    format!("sha256:{}", "ab".repeat(32))
}

fn base(server: &MockServer) -> DigestReference {
    let host = server.uri().trim_start_matches("http://").to_owned();
    DigestReference::parse(&format!("{host}/team/contract-base@{}", digest())).unwrap()
}

fn credential(server: &MockServer, password: &str) -> RegistryCredential {
    RegistryCredential {
        registry: server.uri().trim_start_matches("http://").to_owned(),
        username: "AWS".into(),
        password: Secret::new("REGISTRY_CREDENTIAL", password),
        source: CredentialSource::EcrLoginToken,
    }
}

fn basic(password: &str) -> String {
    format!("Basic {}", BASE64.encode(format!("AWS:{password}")))
}

async fn basic_registry() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(
            ResponseTemplate::new(401)
                .insert_header("WWW-Authenticate", "Basic realm=\"Registry Realm\""),
        )
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .and(path(format!(
            "/v2/team/contract-base/manifests/{}",
            digest()
        )))
        .and(header("authorization", basic(FAKE_TOKEN).as_str()))
        .respond_with(ResponseTemplate::new(200).insert_header("Docker-Content-Digest", digest()))
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn basic_login_passes_with_the_right_token_and_names_the_registry_otherwise() {
    let _env = ENV.lock().await;
    let server = basic_registry().await;
    check_base(&base(&server), Some(&credential(&server, FAKE_TOKEN)))
        .await
        .expect("the right token passes");
    let error = check_base(&base(&server), Some(&credential(&server, WRONG_TOKEN)))
        .await
        .unwrap_err();
    let registry = server.uri().trim_start_matches("http://").to_owned();
    assert!(
        error.message.starts_with(&format!(
            "registry {registry} refused the credential (ECR login token)"
        )),
        "{error}"
    );
    assert!(!error.to_string().contains(WRONG_TOKEN), "{error}");
    let none = check_base(&base(&server), None).await.unwrap_err();
    assert!(none.message.contains("has no credential"), "{none}");
}

#[tokio::test]
async fn bearer_login_exchanges_the_credential_for_a_token() {
    let _env = ENV.lock().await;
    let server = MockServer::start().await;
    let realm = format!("{}/token", server.uri());
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(401).insert_header(
            "WWW-Authenticate",
            format!("Bearer realm=\"{realm}\",service=\"fake-registry\"").as_str(),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .and(query_param("scope", "repository:team/contract-base:pull"))
        .and(query_param("service", "fake-registry"))
        .and(header("authorization", basic(FAKE_TOKEN).as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"token": "sm-fake-bearer"})), // a fake
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .and(path(format!(
            "/v2/team/contract-base/manifests/{}",
            digest()
        )))
        .and(header("authorization", "Bearer sm-fake-bearer"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    check_base(&base(&server), Some(&credential(&server, FAKE_TOKEN)))
        .await
        .expect("the bearer exchange passes");
    let error = check_base(&base(&server), Some(&credential(&server, WRONG_TOKEN)))
        .await
        .unwrap_err();
    assert!(error.message.contains("refused the credential"), "{error}");
    assert!(error.message.contains("token service"), "{error}");
}

#[tokio::test]
async fn a_missing_manifest_is_named_with_how_to_push_it() {
    let _env = ENV.lock().await;
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    let error = check_base(&base(&server), None).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(error.message.contains("bootstrap --push"), "{error}");
}

#[tokio::test]
async fn an_ecr_login_token_comes_from_get_authorization_token() {
    let _env = ENV.lock().await;
    let ecr = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/"))
        .and(header(
            "x-amz-target",
            "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
        ))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "application/x-amz-json-1.1")
                .set_body_json(serde_json::json!({
                    "authorizationData": [{
                        "authorizationToken": BASE64.encode(format!("AWS:{FAKE_TOKEN}")),
                        "expiresAt": 4102444800.0,
                        "proxyEndpoint": "http://127.0.0.1:5000"
                    }]
                })),
        )
        .expect(1)
        .mount(&ecr)
        .await;
    // SAFETY: every test in this file holds ENV, so nothing reads the environment meanwhile.
    unsafe {
        std::env::set_var("AWS_ENDPOINT_URL_ECR", ecr.uri());
        std::env::set_var("AWS_REGION", "us-east-1");
        // Deliberate fake canaries, made up for this test and shaped like no real key.
        std::env::set_var("AWS_ACCESS_KEY_ID", "sm-fake-access-key-id");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "sm-fake-secret-access-key");
        std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/sandbox-matrix-aws-config");
        std::env::set_var(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/sandbox-matrix-aws-credentials",
        );
    }
    let made = credential::make_credential(AuthMode::Ecr, "127.0.0.1:5000")
        .await
        .expect("a login token")
        .expect("ecr makes a credential");
    assert_eq!(made.username, "AWS");
    assert_eq!(made.password.expose(), FAKE_TOKEN);
    assert_eq!(made.source, CredentialSource::EcrLoginToken);
    assert_eq!(made.registry, "127.0.0.1:5000");
    ecr.verify().await;

    // An ECR API that refuses: the error names the registry it was for.
    ecr.reset().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(400)
                .insert_header("content-type", "application/x-amz-json-1.1")
                .set_body_json(serde_json::json!({
                    "__type": "UnrecognizedClientException",
                    "message": "The security token included in the request is invalid."
                })),
        )
        .mount(&ecr)
        .await;
    let error = credential::make_credential(AuthMode::Ecr, "127.0.0.1:5000")
        .await
        .unwrap_err();
    assert!(
        error.message.contains("GetAuthorizationToken failed")
            && error.message.contains("127.0.0.1:5000")
            && error.message.contains("UnrecognizedClientException"),
        "{error}"
    );
    unsafe {
        std::env::remove_var("AWS_REGION");
    }
    let error = credential::make_credential(AuthMode::Ecr, "127.0.0.1:5000")
        .await
        .unwrap_err();
    assert!(error.message.contains("AWS_REGION"), "{error}");
}
