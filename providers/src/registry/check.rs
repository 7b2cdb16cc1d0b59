//! A read-only check that the base can be pulled: the registry v2 handshake, then a `HEAD`
//! of the manifest by digest, with the run's credential. The build runs it first, so a
//! refused credential is reported naming the registry, not as whatever the engine says.
//!
//! The registry is reached over HTTPS, except a loopback one (`localhost`, `127.x.x.x`,
//! `[::1]`), reached over plain HTTP as the engine does by default.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, HeaderMap, WWW_AUTHENTICATE};

use super::DigestReference;
use crate::{CredentialSource, ErrorKind, ProviderError, RegistryCredential, Result};

/// The manifest media types a pull accepts: OCI and Docker, single images and indexes.
pub const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Longest any one request of the check may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How requests to the registry are authorised.
enum Auth {
    None,
    Basic,
    Bearer(String),
}

/// Checks that `base` can be pulled from its registry with `credential`: `GET /v2/`, the
/// login its `WWW-Authenticate` asks for (Basic, or a Bearer token from the realm), then
/// `HEAD` of the manifest by digest. The error names the registry and what failed.
pub async fn check_base(
    base: &DigestReference,
    credential: Option<&RegistryCredential>,
) -> Result<()> {
    let registry = &base.repository.registry;
    let origin = format!("{}://{registry}", scheme(registry));
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| transport(registry, "building an HTTP client", &e))?;
    let what = || match credential {
        Some(c) => describe(c.source).to_owned(),
        None => "no credential".to_owned(),
    };
    let ping = client
        .get(format!("{origin}/v2/"))
        .send()
        .await
        .map_err(|e| transport(registry, "GET /v2/", &e))?;
    let auth = match ping.status() {
        status if status.is_success() => Auth::None,
        StatusCode::UNAUTHORIZED => {
            let challenge = challenge(ping.headers()).ok_or_else(|| {
                ProviderError::new(
                    ErrorKind::Protocol,
                    format!("registry {registry} answered GET /v2/ with 401 and no Basic or Bearer WWW-Authenticate challenge"),
                )
            })?;
            let Some(credential) = credential else {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "registry {registry} wants a login and the run has no credential for it (set {})",
                        super::credential::AUTH_VAR
                    ),
                ));
            };
            match challenge {
                Challenge::Basic => Auth::Basic,
                Challenge::Bearer { realm, service } => {
                    let scope = format!("repository:{}:pull", base.repository.path);
                    let mut query = vec![("scope", scope.as_str())];
                    if let Some(service) = &service {
                        query.push(("service", service));
                    }
                    let answer = client
                        .get(&realm)
                        .query(&query)
                        .basic_auth(&credential.username, Some(credential.password.expose()))
                        .send()
                        .await
                        .map_err(|e| transport(registry, "asking its token service", &e))?;
                    if answer.status() == StatusCode::UNAUTHORIZED
                        || answer.status() == StatusCode::FORBIDDEN
                    {
                        return Err(refused(
                            registry,
                            &what(),
                            "its token service",
                            answer.status(),
                        ));
                    }
                    if !answer.status().is_success() {
                        return Err(ProviderError::new(
                            ErrorKind::Api,
                            format!(
                                "registry {registry}'s token service answered {}",
                                answer.status()
                            ),
                        ));
                    }
                    let body: serde_json::Value = answer.json().await.map_err(|e| {
                        transport(registry, "reading its token service's answer", &e)
                    })?;
                    let token = body["token"]
                        .as_str()
                        .or_else(|| body["access_token"].as_str())
                        .ok_or_else(|| {
                            ProviderError::new(
                                ErrorKind::Protocol,
                                format!("registry {registry}'s token service answered no token"),
                            )
                        })?;
                    Auth::Bearer(token.to_owned())
                }
            }
        }
        status => {
            return Err(ProviderError::new(
                ErrorKind::Api,
                format!(
                    "registry {registry} answered GET /v2/ with {status}: it is not a registry v2 API"
                ),
            ));
        }
    };
    let url = format!(
        "{origin}/v2/{}/manifests/{}",
        base.repository.path, base.digest
    );
    let mut head = client.head(&url).header(ACCEPT, MANIFEST_TYPES.join(", "));
    head = match (&auth, credential) {
        (Auth::Basic, Some(c)) => head.basic_auth(&c.username, Some(c.password.expose())),
        (Auth::Bearer(token), _) => head.bearer_auth(token),
        _ => head,
    };
    let answer = head
        .send()
        .await
        .map_err(|e| transport(registry, "HEAD of the base's manifest", &e))?;
    match answer.status() {
        status if status.is_success() => {
            let served = answer
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok());
            match served {
                Some(served) if served != base.digest => Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!("registry {registry} served digest {served} for {base}"),
                )),
                _ => Ok(()),
            }
        }
        status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
            Err(refused(registry, &what(), "the base's manifest", status))
        }
        StatusCode::NOT_FOUND => Err(ProviderError::new(
            ErrorKind::NotFound,
            format!(
                "registry {registry} has no manifest {} in {} (push the base with `sandbox-matrix bootstrap --push {}`)",
                base.digest, base.repository.path, base.repository
            ),
        )),
        status => Err(ProviderError::retryable(
            ErrorKind::Api,
            format!("registry {registry} answered {status} to HEAD of {base}"),
        )),
    }
}

/// How the table and messages name a credential's source.
pub fn describe(source: CredentialSource) -> &'static str {
    match source {
        CredentialSource::EcrLoginToken => "ECR login token",
        CredentialSource::Static => "static credential",
    }
}

fn refused(registry: &str, what: &str, during: &str, status: StatusCode) -> ProviderError {
    ProviderError::new(
        ErrorKind::Config,
        format!(
            "registry {registry} refused the credential ({what}): {status} for {during}; \
             the token may be wrong or expired"
        ),
    )
}

fn transport(registry: &str, during: &str, e: &reqwest::Error) -> ProviderError {
    // reqwest's errors name the URL, which holds no credential.
    ProviderError::retryable(
        ErrorKind::Transport,
        format!("cannot reach registry {registry} ({during}): {e}"),
    )
}

/// `http` for a loopback registry, `https` for any other.
pub(crate) fn scheme(registry: &str) -> &'static str {
    let host = match registry.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => registry,
    };
    let loopback = host == "localhost"
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback { "http" } else { "https" }
}

/// What `GET /v2/` asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// The first Basic or Bearer challenge in `WWW-Authenticate`.
pub(crate) fn challenge(headers: &HeaderMap) -> Option<Challenge> {
    headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(parse_challenge)
}

fn parse_challenge(value: &str) -> Option<Challenge> {
    let (scheme, params) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let param = |name: &str| {
        params.split(',').find_map(|p| {
            let (key, value) = p.trim().split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().trim_matches('"').to_owned())
        })
    };
    Some(Challenge::Bearer {
        realm: param("realm")?,
        service: param("service"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_basic_and_bearer_challenges() {
        assert_eq!(
            parse_challenge("Basic realm=\"Registry Realm\""),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge(
                "Bearer realm=\"https://auth.example/token\",service=\"registry.example\",scope=\"x\""
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into())
            })
        );
        assert_eq!(parse_challenge("Bearer service=\"x\""), None);
        assert_eq!(parse_challenge("Negotiate"), None);
    }

    #[test]
    fn loopback_registries_are_plain_http() {
        assert_eq!(scheme("127.0.0.1:5000"), "http");
        assert_eq!(scheme("localhost:5000"), "http");
        assert_eq!(scheme("[::1]:5000"), "http");
        assert_eq!(scheme("registry.example"), "https");
        assert_eq!(scheme("10.0.0.1:5000"), "https");
    }
}
