//! Modal's control plane as the variant calls it: the credentials, the metadata every
//! call carries and retries of retryable statuses under one idempotency key. Like the
//! official client 1.6.4 on the V1 sandbox calls, it authenticates by token id and secret
//! alone: the auth token of `AuthTokenGet` is for the input plane and V2 sandboxes
//! (`modal/client.py`, `get_input_plane_metadata`; `modal/sandbox/_impl_v2.py`), which
//! this client does not call.

use std::future::Future;

use std::time::Duration;

use backon::BackoffBuilder as _;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::proto::client::modal_client_client::ModalClientClient;
use crate::api::grpc::{GrpcTransport, Recorder};
use crate::{ErrorKind, ProviderError, Result, Secret};

/// The variable holding the token id.
pub const TOKEN_ID_VAR: &str = "MODAL_TOKEN_ID";
/// The variable holding the token secret.
pub const TOKEN_SECRET_VAR: &str = "MODAL_TOKEN_SECRET";
/// The variable that points the variant at another control plane (an emulator).
pub const URL_VAR: &str = "SANDBOX_MATRIX_MODAL_URL";
/// The official client's variable for the same, read when [`URL_VAR`] is not set.
pub const SERVER_URL_VAR: &str = "MODAL_SERVER_URL";
/// Modal's control plane.
pub const DEFAULT_URL: &str = "https://api.modal.com:443";
/// `x-modal-client-type`: `CLIENT_TYPE_CLIENT`, as the official Python client sends.
pub const CLIENT_TYPE: &str = "1";
/// `x-modal-client-version`: the `modal` release the protos were written from.
pub const CLIENT_VERSION: &str = "1.6.4";
/// Request metadata that replay compares and recordings keep, on the control plane and
/// the command router (the rest, such as the idempotency key, varies from run to run).
pub const MATCHED_METADATA: [&str; 7] = [
    "authorization",
    "x-modal-token-id",
    "x-modal-token-secret",
    "x-modal-client-type",
    "x-modal-client-version",
    "x-modal-auth-token",
    "x-retry-attempt",
];
/// Most attempts of one call, the first included.
const MAX_ATTEMPTS: usize = 4;

/// A Modal token: its id and secret, both kept out of logs and cassettes.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// `MODAL_TOKEN_ID`.
    pub token_id: Secret,
    /// `MODAL_TOKEN_SECRET`.
    pub token_secret: Secret,
}

impl Credentials {
    /// The token as `read` finds it (an environment): `None` when neither variable is set,
    /// an error naming the missing one when only one is.
    pub fn from_lookup(read: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        match (read(TOKEN_ID_VAR), read(TOKEN_SECRET_VAR)) {
            (None, None) => Ok(None),
            (Some(id), Some(secret)) => Ok(Some(Self {
                token_id: Secret::new(TOKEN_ID_VAR, id),
                token_secret: Secret::new(TOKEN_SECRET_VAR, secret),
            })),
            (Some(_), None) => Err(missing(TOKEN_SECRET_VAR, TOKEN_ID_VAR)),
            (None, Some(_)) => Err(missing(TOKEN_ID_VAR, TOKEN_SECRET_VAR)),
        }
    }

    /// Both values, for normalizing cassettes.
    pub fn secrets(&self) -> Vec<Secret> {
        vec![self.token_id.clone(), self.token_secret.clone()]
    }
}

fn missing(absent: &str, present: &str) -> ProviderError {
    ProviderError::new(
        ErrorKind::Config,
        format!("{present} is set but {absent} is not: a Modal token needs both"),
    )
}

/// The control plane's URL: [`URL_VAR`], else [`SERVER_URL_VAR`], else [`DEFAULT_URL`];
/// `var` reads a variable (from a run's settings).
pub fn server_url(var: impl Fn(&str) -> Option<String>) -> String {
    [URL_VAR, SERVER_URL_VAR]
        .into_iter()
        .find_map(|name| var(name).filter(|v| !v.is_empty()))
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// The channel every control-plane call goes through.
pub type Transport = GrpcTransport<Channel>;

/// A channel to `url` (`https://` with the web PKI roots, `http://` in clear for an
/// emulator or a replay server), recorded by `recorder` when there is one. It connects on
/// the first call.
pub fn connect(url: &str, recorder: Option<Recorder>) -> Result<Transport> {
    let bad = |e: &dyn std::fmt::Display| {
        ProviderError::new(ErrorKind::Config, format!("Modal URL `{url}`: {e}"))
    };
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| bad(&e))?
        .connect_timeout(Duration::from_secs(10));
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_webpki_roots())
            .map_err(|e| bad(&e))?;
    }
    Ok(GrpcTransport::new(endpoint.connect_lazy(), recorder))
}

/// The control plane: `ModalClient` calls with Modal's metadata and retries.
pub struct ControlPlane {
    client: ModalClientClient<Transport>,
    /// The transport, for what its answers announced.
    transport: Transport,
    credentials: Credentials,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// Whether Modal's client retries a call that ended with `code`.
pub fn retryable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Internal
            | tonic::Code::Unknown
    )
}

/// A failed call as a provider error naming the method.
pub fn status_error(method: &str, status: &tonic::Status) -> ProviderError {
    let kind = match status.code() {
        tonic::Code::NotFound => ErrorKind::NotFound,
        tonic::Code::DeadlineExceeded => ErrorKind::Timeout,
        tonic::Code::Unavailable => ErrorKind::Transport,
        tonic::Code::InvalidArgument | tonic::Code::Unauthenticated => ErrorKind::Config,
        _ => ErrorKind::Api,
    };
    let message = format!(
        "{method}: {}: {}",
        code_name(status.code()),
        status.message()
    );
    if retryable(status.code()) {
        ProviderError::retryable(kind, message)
    } else {
        ProviderError::new(kind, message)
    }
}

impl ControlPlane {
    /// Calls go through `transport` with `credentials`.
    pub fn new(transport: Transport, credentials: Credentials) -> Self {
        Self {
            client: ModalClientClient::new(transport.clone()),
            transport,
            credentials,
        }
    }

    /// The emulator that answered, when one announced itself.
    pub fn emulator(&self) -> Option<String> {
        self.transport.emulator()
    }

    fn request<T>(
        &self,
        message: T,
        key: &str,
        attempt: usize,
        deadline: Duration,
    ) -> Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        let pairs = [
            ("x-modal-token-id", Some(self.credentials.token_id.expose())),
            (
                "x-modal-token-secret",
                Some(self.credentials.token_secret.expose()),
            ),
            ("x-modal-client-type", Some(CLIENT_TYPE)),
            ("x-modal-client-version", Some(CLIENT_VERSION)),
            ("x-idempotency-key", Some(key)),
            ("x-retry-attempt", Some(&attempt.to_string())),
        ];
        for (name, value) in pairs {
            let Some(value) = value else { continue };
            let value = value.parse().map_err(|_| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("the value for metadata `{name}` is not printable ASCII"),
                )
            })?;
            request.metadata_mut().insert(name, value);
        }
        Ok(request)
    }

    /// One `ModalClient` call: `call` (a generated client method) with the metadata and
    /// `deadline` per attempt, retried on retryable statuses.
    pub async fn call<Req, Resp, F, Fut>(
        &self,
        method: &str,
        message: Req,
        deadline: Duration,
        call: F,
    ) -> Result<Resp>
    where
        Req: Clone,
        F: Fn(ModalClientClient<Transport>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let key = format!("{:032x}", rand::random::<u128>());
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter()
            .build();
        let mut attempt = 0;
        loop {
            let request = self.request(message.clone(), &key, attempt, deadline)?;
            match call(self.client.clone(), request).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if retryable(status.code()) => match backoff.next() {
                    Some(delay) => {
                        tracing::debug!(method, code = ?status.code(), "retrying");
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                    }
                    None => {
                        return Err(status_error(method, &status)
                            .context(format!("{} attempts", attempt + 1)));
                    }
                },
                Err(status) => return Err(status_error(method, &status)),
            }
        }
    }
}

/// A gRPC status code's name, as gRPC's documentation writes it in CamelCase.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::grpc::{GrpcCassette, GrpcOptions, GrpcReplayServer};
    use crate::modal::proto::client::AppGetOrCreateRequest;
    use crate::modal::proto::descriptors;

    // Fake credentials, never real ones.
    const FAKE_ID: &str = "sm-fake-token-id";
    const FAKE_SECRET: &str = "sm-fake-token-secret";

    fn cassette(retried_status: i32) -> String {
        format!(
            r#"
origin: authored by hand from the subset api.proto, for the control plane's tests
variant: modal
scenario: control-plane-unit
exchanges:
- method: /modal.client.ModalClient/AppGetOrCreate
  metadata:
    x-modal-token-id: <redacted:MODAL_TOKEN_ID>
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
    x-modal-client-type: "1"
    x-modal-client-version: "1.6.4"
    x-retry-attempt: "0"
  request: {{app_name: sandbox-matrix}}
  grpc-status: {retried_status}
  grpc-message: the scheduler is busy
- method: /modal.client.ModalClient/AppGetOrCreate
  metadata:
    x-modal-token-id: <redacted:MODAL_TOKEN_ID>
    x-modal-token-secret: <redacted:MODAL_TOKEN_SECRET>
    x-modal-client-type: "1"
    x-modal-client-version: "1.6.4"
    x-retry-attempt: "1"
  request: {{app_name: sandbox-matrix}}
  responses: [{{app_id: ap-1}}]
  grpc-status: 0
"#
        )
    }

    async fn plane(text: &str) -> (GrpcReplayServer, ControlPlane) {
        let credentials = Credentials {
            token_id: Secret::new(TOKEN_ID_VAR, FAKE_ID),
            token_secret: Secret::new(TOKEN_SECRET_VAR, FAKE_SECRET),
        };
        let volatiles = std::sync::Arc::new(crate::api::Volatiles::default());
        let pool = descriptors().clone();
        let cassette = GrpcCassette::parse(text, &pool).expect("the test cassette parses");
        let options = GrpcOptions {
            credentials: credentials.secrets(),
            volatiles,
            matched_metadata: MATCHED_METADATA.map(str::to_owned).to_vec(),
            ..GrpcOptions::default()
        };
        let server = GrpcReplayServer::start(cassette, pool, options)
            .await
            .expect("replay server starts");
        let transport = connect(&server.url(), None).expect("a loopback URL");
        (server, ControlPlane::new(transport, credentials))
    }

    async fn app(plane: &ControlPlane) -> Result<String> {
        plane
            .call(
                "AppGetOrCreate",
                AppGetOrCreateRequest {
                    app_name: "sandbox-matrix".to_owned(),
                    ..Default::default()
                },
                Duration::from_secs(5),
                |mut client, request| async move { client.app_get_or_create(request).await },
            )
            .await
            .map(|r| r.app_id)
    }

    #[tokio::test]
    async fn an_unavailable_call_is_retried_with_the_same_metadata_and_no_auth_token() {
        let (server, plane) = plane(&cassette(14)).await;
        assert_eq!(app(&plane).await.expect("the retry succeeds"), "ap-1");
        server.finish().expect("calls as recorded");
    }

    #[tokio::test]
    async fn a_failed_precondition_is_not_retried() {
        let (server, plane) = plane(&cassette(9)).await;
        let error = app(&plane).await.expect_err("not retryable");
        assert!(!error.retryable);
        assert!(
            error.to_string().contains("the scheduler is busy"),
            "{error}"
        );
        let unused = server
            .finish()
            .expect_err("the retry was never made")
            .to_string();
        assert!(
            unused.contains("1 exchanges were never requested"),
            "{unused}"
        );
    }

    #[test]
    fn the_url_is_ours_then_the_official_clients_then_modals() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        const OURS: [(&str, &str); 2] = [
            (URL_VAR, "http://127.0.0.1:1"),
            (SERVER_URL_VAR, "http://127.0.0.1:2"),
        ];
        assert_eq!(server_url(env(&OURS)), "http://127.0.0.1:1");
        assert_eq!(server_url(env(&OURS[1..])), "http://127.0.0.1:2");
        assert_eq!(server_url(env(&[(URL_VAR, "")])), DEFAULT_URL);
    }
}
