//! ECR's API stood in by wiremock: `GetAuthorizationToken` answering a login token that
//! the test's own registry accepts, and the environment that points aws-sdk-ecr at it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Makes `server` answer GetAuthorizationToken with `token` for the user AWS (forgetting
/// what it answered before).
pub async fn answering(server: &MockServer, token: &str) {
    server.reset().await;
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
                        "authorizationToken": BASE64.encode(format!("AWS:{token}")),
                        "expiresAt": 4102444800.0,
                        "proxyEndpoint": "http://127.0.0.1"
                    }]
                })),
        )
        .mount(server)
        .await;
}

/// Gives `command`'s aws-sdk-ecr fake keys, a region and none of this machine's AWS
/// configuration; `AWS_ENDPOINT_URL_ECR` then points it at the stand-in.
pub fn fake_aws(command: &mut std::process::Command) {
    command
        .env("AWS_REGION", "us-east-1")
        // Deliberate fake canaries, made up for these tests and shaped like no real key:
        // the stand-in ECR API takes anything, and the SDK only signs with them.
        .env("AWS_ACCESS_KEY_ID", "sm-fake-access-key-id")
        .env("AWS_SECRET_ACCESS_KEY", "sm-fake-secret-access-key")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent/sandbox-matrix-aws-config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/sandbox-matrix-aws-credentials",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
}
