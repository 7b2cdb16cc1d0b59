//! Daytona's object storage as its API, its storage and its runner use it (the emulator's
//! `emulators/src/daytona/object_storage.rs` names the server files): push access hands
//! out a temporary credential; the storage takes an S3 request signed with it by AWS's
//! own signer (aws-sigv4, not the emulator's code) and refuses one signed with another
//! secret, one without the session token, one outside the organization's prefix, a body
//! that is not the one signed, a header it does not implement, a multipart upload with a
//! part under 5 MiB but the last, and an abort (not in the policy); a snapshot whose `contextHashes` names a pushed
//! tar builds with its files, and one naming a hash never pushed fails as the runner fails.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine daytona_object_storage::`.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use sandbox_emulators::Emulator as _;
use sandbox_emulators::daytona::{DEFAULT_DOMAIN, Emulator, Options};
use sandbox_providers::RunLabels;
use serde_json::{Value, json};

/// Fake: the emulator checks only that a bearer key is sent.
const FAKE_KEY: &str = "fake-daytona-storage-key-0000";
/// What the pushed file holds, checked by the build's RUN.
const PUSHED: &str = "pushed through object storage";

/// A push-access credential as the API answered it.
struct Access {
    storage: String,
    bucket: String,
    organization: String,
    region: String,
    credentials: Credentials,
}

/// The headers AWS's signer adds to `method url` with `headers` and `body` under
/// `credentials`, as an S3 client signs (the payload's SHA-256 in `x-amz-content-sha256`,
/// the path encoded once).
fn signed(
    access: &Access,
    credentials: &Credentials,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<(String, String)> {
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&access.region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing parameters")
        .into();
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .expect("a signable request");
    let (instructions, _) = sign(request, &params).expect("signed").into_parts();
    instructions
        .headers()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Sends `method key` (a key, and a query if any) to the bucket with `body`, signed
/// under `credentials`, with the extra `headers` (signed too); answers the status and body.
async fn s3(
    http: &reqwest::Client,
    access: &Access,
    credentials: &Credentials,
    method: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let request = S3Request {
        method,
        key,
        headers,
        signed_body: body,
    };
    s3_sending(http, access, credentials, &request, body).await
}

/// An S3 request as signed.
struct S3Request<'a> {
    method: &'a str,
    key: &'a str,
    headers: &'a [(&'a str, &'a str)],
    signed_body: &'a [u8],
}

/// Sends `request`, signed under `credentials`, with `body` (which may not be the body
/// it was signed with); answers the status and body.
async fn s3_sending(
    http: &reqwest::Client,
    access: &Access,
    credentials: &Credentials,
    request: &S3Request<'_>,
    body: &[u8],
) -> (u16, String) {
    let S3Request {
        method,
        key,
        headers,
        signed_body,
    } = *request;
    let url = format!("{}/{}/{key}", access.storage, access.bucket);
    let mut request = http.request(method.parse().expect("a method"), &url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    for (name, value) in signed(access, credentials, method, &url, headers, signed_body) {
        request = request.header(name, value);
    }
    let response = request
        .body(body.to_vec())
        .send()
        .await
        .expect("the storage answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A tar of `parity-context/hello.txt` (mode 0604, readable by the base image's user) holding [`PUSHED`], with its directory.
fn context_tar() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_ustar();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    tar.append_data(&mut dir, "parity-context/", std::io::empty())
        .expect("a directory entry");
    let mut file = tar::Header::new_ustar();
    file.set_mode(0o604);
    file.set_size(PUSHED.len() as u64);
    tar.append_data(&mut file, "parity-context/hello.txt", PUSHED.as_bytes())
        .expect("a file entry");
    tar.into_inner().expect("the tar")
}

/// The API's answer to `request`, sent with the bearer key, as JSON.
async fn api_json(request: reqwest::RequestBuilder) -> Value {
    request
        .bearer_auth(FAKE_KEY)
        .send()
        .await
        .expect("the API answers")
        .json()
        .await
        .expect("a JSON answer")
}

/// Creates a snapshot of `dockerfile` with `hashes` and waits until it is built or failed;
/// answers its record and its build log.
async fn build(
    http: &reqwest::Client,
    api: &str,
    name: &str,
    dockerfile: &str,
    hashes: &[&str],
) -> (Value, String) {
    let created = api_json(http.post(format!("{api}/snapshots")).json(
        &json!({"name": name, "buildInfo": {"dockerfileContent": dockerfile, "contextHashes": hashes}}),
    ))
    .await;
    let id = created["id"].as_str().expect("an id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let snapshot = api_json(http.get(format!("{api}/snapshots/{id}"))).await;
        let state = snapshot["state"].as_str().unwrap_or_default().to_owned();
        if state == "active" || state == "build_failed" || Instant::now() > deadline {
            let log = http
                .get(format!("{api}/snapshots/{id}/build-logs"))
                .bearer_auth(FAKE_KEY)
                .send()
                .await
                .expect("the API answers")
                .text()
                .await
                .unwrap_or_default();
            let _ = http
                .delete(format!("{api}/snapshots/{id}"))
                .bearer_auth(FAKE_KEY)
                .send()
                .await;
            return (snapshot, log);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn daytona_object_storage_takes_what_push_access_signs_and_the_runner_builds_from_it() {
    let docker = common::prepared_docker(&common::root()).await;
    let labels = RunLabels {
        run_id: sandbox_matrix::run::runner::new_run_id(),
        variant: "daytona".into(),
        scenario: "object-storage".into(),
    };
    let emulator = Emulator::start(
        docker,
        Options {
            labels: Some(labels.clone()),
            ..Options::new(0, DEFAULT_DOMAIN)
        },
    )
    .await
    .expect("the daytona emulator starts");
    let origin = format!("https://localhost:{}", emulator.port());
    let api = format!("{origin}/api");
    let http = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(
            reqwest::Certificate::from_pem(emulator.ca_pem().as_bytes()).expect("the test CA"),
        )
        .build()
        .expect("an HTTP client");

    let answer = api_json(http.get(format!("{api}/object-storage/push-access"))).await;
    let text = |key: &str| {
        answer[key]
            .as_str()
            .unwrap_or_else(|| panic!("push access has no {key}: {answer}"))
            .to_owned()
    };
    let access = Access {
        storage: text("storageUrl"),
        bucket: text("bucket"),
        organization: text("organizationId"),
        region: text("region"),
        credentials: Credentials::new(
            text("accessKey"),
            text("secret"),
            Some(text("sessionToken")),
            None,
            "push-access",
        ),
    };
    assert_eq!(
        access.storage, origin,
        "the storage is where the client called"
    );

    let hash = "0123456789abcdef0123456789abcdef";
    let key = format!("{}/{hash}/context.tar", access.organization);
    let tar = context_tar();
    let credentials = access.credentials.clone();
    // Refused: another secret, no session token, outside the organization, a header the
    // emulator does not implement.
    let forged = Credentials::new(
        credentials.access_key_id(),
        "not-the-secret",
        credentials.session_token().map(str::to_owned),
        None,
        "forged",
    );
    let (status, body) = s3(&http, &access, &forged, "PUT", &key, &[], &tar).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
    let tokenless = Credentials::new(
        credentials.access_key_id(),
        credentials.secret_access_key(),
        None,
        None,
        "tokenless",
    );
    let (status, body) = s3(&http, &access, &tokenless, "PUT", &key, &[], &tar).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("InvalidToken"), "{body}");
    let elsewhere = format!("another-organization/{hash}/context.tar");
    let (status, body) = s3(&http, &access, &credentials, "PUT", &elsewhere, &[], &tar).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("AccessDenied"), "{body}");
    let tagged = [("x-amz-tagging", "a=b")];
    let (status, body) = s3(&http, &access, &credentials, "PUT", &key, &tagged, &tar).await;
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("x-amz-tagging"), "{body}");
    let tampered = S3Request {
        method: "PUT",
        key: &key,
        headers: &[],
        signed_body: &tar,
    };
    let (status, body) = s3_sending(&http, &access, &credentials, &tampered, b"other").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("XAmzContentSHA256Mismatch"), "{body}");
    let ranged = [("range", "bytes=0-9")];
    let (status, body) = s3(&http, &access, &credentials, "GET", &key, &ranged, &[]).await;
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("`range`"), "{body}");
    let (status, _) = s3(&http, &access, &credentials, "HEAD", &key, &[], &[]).await;
    assert_eq!(status, 404, "nothing was stored by the refused requests");

    // A multipart upload, its query signed by AWS's signer: a part under 5 MiB but the
    // last is refused at completion, and aborting is outside the policy.
    let (status, body) = s3(
        &http,
        &access,
        &credentials,
        "POST",
        &format!("{key}?uploads"),
        &[],
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let upload = body
        .split_once("<UploadId>")
        .and_then(|(_, rest)| rest.split_once("</UploadId>"))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("no UploadId in {body}"));
    let mut etags = Vec::new();
    for (number, part) in [(1, &b"small"[..]), (2, &b"last"[..])] {
        let url = format!(
            "{}/{}/{key}?partNumber={number}&uploadId={upload}",
            access.storage, access.bucket
        );
        let response = http
            .put(&url)
            .headers(
                signed(&access, &credentials, "PUT", &url, &[], part)
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            k.parse().expect("a header name"),
                            v.parse().expect("a header value"),
                        )
                    })
                    .collect(),
            )
            .body(part.to_vec())
            .send()
            .await
            .expect("the storage answers");
        assert_eq!(response.status().as_u16(), 200);
        etags.push(
            response.headers()["etag"]
                .to_str()
                .expect("an ETag")
                .to_owned(),
        );
    }
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag></Part></CompleteMultipartUpload>",
        etags[0], etags[1]
    );
    let (status, body) = s3(
        &http,
        &access,
        &credentials,
        "POST",
        &format!("{key}?uploadId={upload}"),
        &[],
        complete.as_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("EntityTooSmall"), "{body}");
    let (status, body) = s3(
        &http,
        &access,
        &credentials,
        "DELETE",
        &format!("{key}?uploadId={upload}"),
        &[],
        &[],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("AbortMultipartUpload"), "{body}");

    // Taken: the tar, signed as an S3 client signs it.
    let (status, body) = s3(&http, &access, &credentials, "PUT", &key, &[], &tar).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = s3(&http, &access, &credentials, "HEAD", &key, &[], &[]).await;
    assert_eq!(status, 200);
    let (status, got) = s3(&http, &access, &credentials, "GET", &key, &[], &[]).await;
    assert_eq!(
        (status, got.len()),
        (200, tar.len()),
        "the object as stored"
    );

    let name = format!("storage-{}", labels.run_id.to_ascii_lowercase());
    let dockerfile = format!(
        "FROM {}\nCOPY parity-context/hello.txt /tmp/hello.txt\nRUN test \"$(cat /tmp/hello.txt)\" = '{PUSHED}' && test \"$(stat -c %a /tmp/hello.txt)\" = 604\n",
        sandbox_providers::docker::base::BASE_IMAGE
    );
    let (built, log) = build(&http, &api, &name, &dockerfile, &[hash]).await;
    let missing = "fedcba9876543210fedcba9876543210";
    let (failed, _) = build(
        &http,
        &api,
        &format!("{name}-missing"),
        &dockerfile,
        &[missing],
    )
    .await;
    emulator.stop();
    emulator.cleanup().await;

    assert_eq!(built["state"], "active", "{built}\n{log}");
    assert!(log.contains("COPY parity-context/hello.txt"), "{log}");
    assert_eq!(failed["state"], "build_failed", "{failed}");
    assert!(
        failed["errorReason"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!(
                "failed to get tar from storage with hash {missing}"
            )),
        "{failed}"
    );
    assert!(
        common::left_by_run(&labels.run_id).is_empty(),
        "the test's builds left images"
    );
}
