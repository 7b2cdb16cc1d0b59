//! The credential for the base's registry, made once per run.
//!
//! [`AUTH_VAR`] says how: `ecr` asks ECR's `GetAuthorizationToken` for a login token
//! through aws-sdk-ecr, with the standard AWS credential chain and the region from the AWS
//! configuration (`AWS_REGION`, a profile); the ECR endpoint follows the standard
//! `AWS_ENDPOINT_URL_ECR` / `AWS_ENDPOINT_URL` variables. `static` takes a user and password
//! from [`USER_VAR`] and [`PASSWORD_VAR`]. `none` pulls without a credential. Nothing is
//! inferred from the registry's host name.

use std::fmt;

use aws_config::BehaviorVersion;
use aws_sdk_ecr::error::DisplayErrorContext;
use aws_smithy_http_client::tls::{Provider as TlsProvider, rustls_provider::CryptoMode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::{CredentialSource, ErrorKind, ProviderError, RegistryCredential, Result, Secret};

impl CredentialSource {
    /// How a credential of this source was made, for a person: `ECR login token, made for
    /// this run`, `static credential from SANDBOX_MATRIX_REGISTRY_USER`.
    pub fn made(&self) -> String {
        match self {
            Self::EcrLoginToken => "ECR login token, made for this run".to_owned(),
            Self::Static => format!("static credential from {USER_VAR}"),
        }
    }
}

/// How the registry credential is made: `ecr`, `static` or `none`.
pub const AUTH_VAR: &str = "SANDBOX_MATRIX_REGISTRY_AUTH";
/// The user name of a static credential.
pub const USER_VAR: &str = "SANDBOX_MATRIX_REGISTRY_USER";
/// The password of a static credential.
pub const PASSWORD_VAR: &str = "SANDBOX_MATRIX_REGISTRY_PASSWORD";
/// The name the credential's password goes by in logs, reports and the secrets scan.
pub const SECRET_NAME: &str = "REGISTRY_CREDENTIAL";
/// The user of an ECR login token.
pub const ECR_USER: &str = "AWS";

/// How the run gets its registry credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// A login token from ECR's `GetAuthorizationToken`.
    Ecr,
    /// A user and password from [`USER_VAR`] and [`PASSWORD_VAR`].
    Static,
    /// No credential: the registry lets anyone pull.
    None,
}

impl AuthMode {
    /// Reads [`AUTH_VAR`]; unset is an error naming it, since the run cannot guess how a
    /// registry wants to be logged in to.
    pub fn from_env() -> Result<Self> {
        match std::env::var(AUTH_VAR) {
            Ok(value) => Self::parse(&value),
            Err(_) => Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "the base is in a registry but {AUTH_VAR} is not set: set it to `ecr` (a login token \
                     from GetAuthorizationToken), `static` ({USER_VAR} and {PASSWORD_VAR}) or `none`"
                ),
            )),
        }
    }

    /// Reads `ecr`, `static` or `none`.
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim() {
            "ecr" => Ok(Self::Ecr),
            "static" => Ok(Self::Static),
            "none" => Ok(Self::None),
            other => Err(ProviderError::new(
                ErrorKind::Config,
                format!(
                    "{AUTH_VAR}={}: expected `ecr`, `static` or `none`",
                    crate::quoted(other)
                ),
            )),
        }
    }
}

impl fmt::Display for AuthMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ecr => "ecr",
            Self::Static => "static",
            Self::None => "none",
        })
    }
}

/// Makes the credential for `registry` the way `mode` says; `None` for [`AuthMode::None`].
pub async fn make_credential(mode: AuthMode, registry: &str) -> Result<Option<RegistryCredential>> {
    match mode {
        AuthMode::Ecr => ecr_login_token(registry).await.map(Some),
        AuthMode::Static => static_credential(registry).map(Some),
        AuthMode::None => Ok(None),
    }
}

/// A user and password for `registry` from [`USER_VAR`] and [`PASSWORD_VAR`]; a missing
/// one is named.
pub fn static_credential(registry: &str) -> Result<RegistryCredential> {
    let read = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::Config,
                    format!("{AUTH_VAR}=static needs {name}, which is not set"),
                )
            })
    };
    Ok(RegistryCredential {
        registry: registry.to_owned(),
        username: read(USER_VAR)?,
        password: Secret::new(SECRET_NAME, read(PASSWORD_VAR)?),
        source: CredentialSource::Static,
    })
}

/// A login token for `registry` from ECR's `GetAuthorizationToken`, through the standard
/// AWS credential chain and region. The HTTP client is rustls with ring, the TLS stack
/// reqwest uses.
pub async fn ecr_login_token(registry: &str) -> Result<RegistryCredential> {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(TlsProvider::Rustls(CryptoMode::Ring))
        .build_https();
    let config = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await;
    if config.region().is_none() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            format!(
                "{AUTH_VAR}=ecr needs an AWS region for the login token of {registry}: set AWS_REGION \
                 or a region in the AWS profile"
            ),
        ));
    }
    let answer = aws_sdk_ecr::Client::new(&config)
        .get_authorization_token()
        .send()
        .await
        .map_err(|e| {
            ProviderError::new(
                ErrorKind::Api,
                format!(
                    "ECR GetAuthorizationToken failed, so there is no login token for registry {registry}: {}",
                    DisplayErrorContext(&e)
                ),
            )
        })?;
    let encoded = answer
        .authorization_data()
        .iter()
        .find_map(|data| data.authorization_token())
        .ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("ECR GetAuthorizationToken answered no authorization token for registry {registry}"),
            )
        })?;
    let token = decode_token(encoded).map_err(|why| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!("ECR's authorization token for registry {registry} {why}"),
        )
    })?;
    Ok(RegistryCredential {
        registry: registry.to_owned(),
        username: ECR_USER.to_owned(),
        password: Secret::new(SECRET_NAME, token),
        source: CredentialSource::EcrLoginToken,
    })
}

/// The password in ECR's `authorizationToken`: base64 of `AWS:<password>`. The error says
/// what is wrong without quoting the token.
fn decode_token(encoded: &str) -> Result<String, &'static str> {
    let bytes = BASE64.decode(encoded.trim()).map_err(|_| "is not base64")?;
    let text = String::from_utf8(bytes).map_err(|_| "is not UTF-8 once decoded")?;
    match text.split_once(':') {
        Some((ECR_USER, password)) if !password.is_empty() => Ok(password.to_owned()),
        Some((_, _)) => Err("is not for the user AWS, or has an empty password"),
        None => Err("is not `AWS:<password>` once decoded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_ecr_token() {
        // A fake token, made up for this test.
        let encoded = BASE64.encode("AWS:fake-token-0123:with-colon");
        assert_eq!(
            decode_token(&encoded).as_deref(),
            Ok("fake-token-0123:with-colon")
        );
        assert!(decode_token("not base64!").is_err());
        assert!(decode_token(&BASE64.encode("root:fake")).is_err());
        assert!(decode_token(&BASE64.encode("AWS:")).is_err());
        assert!(decode_token(&BASE64.encode("AWSfake")).is_err());
    }

    #[test]
    fn auth_modes_parse_and_others_are_named() {
        assert_eq!(AuthMode::parse("ecr").unwrap(), AuthMode::Ecr);
        assert_eq!(AuthMode::parse(" static\n").unwrap(), AuthMode::Static);
        assert_eq!(AuthMode::parse("none").unwrap(), AuthMode::None);
        let e = AuthMode::parse("ECR-ish").unwrap_err();
        assert!(e.message.contains(AUTH_VAR), "{e}");
    }
}
