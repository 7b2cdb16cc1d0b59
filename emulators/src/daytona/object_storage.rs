//! Object storage: the push access Daytona's API hands a client for a build's local
//! files, the S3 bucket the client pushes them to, and the build context a runner makes
//! of them.
//!
//! Sources, daytonaio/daytona v0.190.0 (01c502bb1f1ff8f2885d0cd490e043736083dca8):
//! - `apps/api/src/object-storage/services/object-storage.service.ts`: push access is a
//!   temporary credential for one hour whose policy allows `s3:PutObject` and
//!   `s3:GetObject` on `<bucket>/<organizationId>/*` and `s3:ListBucket` with that prefix,
//!   nothing else (so aborting an upload is denied);
//! - `apps/runner/pkg/storage/minio_client.go`: a context hash is the object
//!   `<organizationId>/<hash>/context.tar`;
//! - `apps/runner/pkg/docker/image_build.go`: the build context is the Dockerfile and, for
//!   each hash in order, the tar's entries but its directories, each as a regular file with
//!   its name and mode; a missing or empty object fails the build.
//!
//! `region` in the push access is what the SDK's client requires (daytona_api_client
//! 0.226.1, `models/storage_access_dto.py`); the v0.190.0 server sends none. Requests are
//! checked as S3 checks them: AWS Signature Version 4 with the session token (expired
//! after its hour), a request time within 15 minutes, the payload hash, the policy, parts
//! of a multipart upload but the last at least 5 MiB. What the emulator does not
//! implement of S3 (listing, presigned URLs, other sub-resources and query parameters,
//! ranges, conditions, `x-amz-` headers it does not know) it refuses by name, 501.

use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use super::*;

/// The bucket, as Daytona's own deployment names it (`S3_DEFAULT_BUCKET=daytona`,
/// `docker/docker-compose.yaml` at v0.190.0).
pub(super) const BUCKET: &str = "daytona";
/// The storage's region; the SDK signs for it.
const STORAGE_REGION: &str = "us-east-1";
/// The object a context hash names, under the organization (`minio_client.go`).
const CONTEXT_TAR: &str = "context.tar";
/// `x-amz-` request headers the emulator implements; any other is refused by name.
const AMZ_HEADERS: [&str; 3] = ["x-amz-content-sha256", "x-amz-date", "x-amz-security-token"];
/// Request headers S3 acts on that the emulator does not implement: refused by name.
const UNIMPLEMENTED_HEADERS: [&str; 11] = [
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "content-md5",
    "content-encoding",
    "cache-control",
    "content-disposition",
    "content-language",
    "expires",
];
/// How long a push-access credential lasts (`DurationSeconds: 3600`).
const GRANT_LIFETIME: Duration = Duration::from_secs(3600);
/// How far a request's time may be from the storage's clock (S3's
/// `RequestTimeTooSkewed`).
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
/// The least size of a multipart upload's part but the last (S3's `EntityTooSmall`).
const MIN_PART: usize = 5 * 1024 * 1024;

/// The storage: the credentials handed out, the objects and the open multipart uploads.
#[derive(Default)]
pub(super) struct Storage {
    /// By access key.
    grants: BTreeMap<String, Grant>,
    /// By key (under the bucket).
    objects: BTreeMap<String, Stored>,
    /// By upload id.
    uploads: BTreeMap<String, Upload>,
}

/// A temporary credential: its secret, session token and when it was handed out.
struct Grant {
    secret: String,
    session_token: String,
    issued: Instant,
}

/// An object's bytes and what S3 tells of it.
struct Stored {
    bytes: Vec<u8>,
    content_type: Option<String>,
    etag: String,
    modified: std::time::SystemTime,
}

/// A multipart upload: its key, the content type it was created with and the parts
/// sent so far, by number.
struct Upload {
    key: String,
    content_type: Option<String>,
    parts: BTreeMap<u32, (String, Vec<u8>)>,
}

/// A random value of `bytes` bytes, hex.
fn random_hex(bytes: usize) -> String {
    hex::encode(
        (0..bytes)
            .map(|_| rand::random::<u8>())
            .collect::<Vec<u8>>(),
    )
}

/// An S3 error: its status, code and message, as S3's XML.
fn s3_error(status: u16, code: &str, message: &str) -> Answer {
    Answer {
        status,
        content_type: "application/xml".into(),
        body: format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
            xml_text(message)
        )
        .into_bytes(),
        headers: Vec::new(),
    }
}

/// `text` escaped for an XML element.
fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An S3 XML answer.
fn s3_xml(body: String, headers: Vec<(&'static str, String)>) -> Answer {
    Answer {
        status: 200,
        content_type: "application/xml".into(),
        body: format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{body}").into_bytes(),
        headers,
    }
}

/// An opaque ETag for `bytes`, quoted (S3's is an MD5; clients only compare it).
fn etag_of(bytes: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..32])
}

/// The bytes SigV4's URI encoding leaves as they are: RFC 3986's unreserved ones.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// S3's URI encoding of `text` (RFC 3986: every byte but the unreserved ones).
fn uri_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, UNRESERVED).to_string()
}

/// `text` percent-decoded.
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// The query's parameters, decoded, in the order sent (a bare name has an empty value).
fn query_params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decoded(k), decoded(v)),
            None => (decoded(p), String::new()),
        })
        .collect()
}

/// HMAC-SHA256 of `data` under `key`.
fn hmac_sha256(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` header.
pub(super) struct Signed<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    headers: Vec<&'a str>,
    signature: &'a str,
}

impl<'a> Signed<'a> {
    /// Reads the header; none when it is not one.
    pub(super) fn parse(header: &'a str) -> Option<Self> {
        let fields = header.strip_prefix("AWS4-HMAC-SHA256 ")?;
        let mut credential = None;
        let mut headers = None;
        let mut signature = None;
        for field in fields.split(',').map(str::trim) {
            match field.split_once('=')? {
                ("Credential", v) => credential = Some(v),
                ("SignedHeaders", v) => headers = Some(v.split(';').collect()),
                ("Signature", v) => signature = Some(v),
                _ => return None,
            }
        }
        let scope: Vec<&str> = credential?.split('/').collect();
        let [access_key, date, region, service, "aws4_request"] = scope[..] else {
            return None;
        };
        Some(Self {
            access_key,
            date,
            region,
            service,
            headers: headers?,
            signature: signature?,
        })
    }
}

impl Emulator {
    /// `GET /api/object-storage/push-access`: a fresh temporary credential for the
    /// storage at `origin` (the origin the client called), as `StorageAccessDto`.
    pub(super) fn push_access(&self, origin: &str) -> Answer {
        let access_key = format!("SMEMULATOR{}", random_hex(5).to_ascii_uppercase());
        let grant = Grant {
            secret: random_hex(20),
            session_token: random_hex(32),
            issued: Instant::now(),
        };
        let mut state = self.state();
        // Expired credentials are of no more use to anyone.
        state
            .storage
            .grants
            .retain(|_, g| g.issued.elapsed() < GRANT_LIFETIME);
        let answer = json!({
            "accessKey": access_key, "secret": grant.secret,
            "sessionToken": grant.session_token, "storageUrl": origin,
            "organizationId": ORGANIZATION, "bucket": BUCKET, "region": STORAGE_REGION,
        });
        state.storage.grants.insert(access_key, grant);
        Answer::json(200, answer)
    }

    /// One S3 request to the bucket, path-style (`/<bucket>/<key>`).
    pub(super) fn storage(&self, request: &HttpRequest) -> Answer {
        if let Err(refused) = self.authorize(request) {
            return refused;
        }
        let key = request
            .path
            .strip_prefix(&format!("/{BUCKET}/"))
            .map(decoded)
            .unwrap_or_default();
        if key.is_empty() {
            return s3_error(
                501,
                "NotImplemented",
                &format!(
                    "the daytona emulator implements no bucket request ({} {}); it refuses it rather than answer wrong",
                    request.method, request.path
                ),
            );
        }
        // The push access's policy: objects under the organization only.
        if !key.starts_with(&format!("{ORGANIZATION}/")) {
            return s3_error(
                403,
                "AccessDenied",
                &format!(
                    "the credential's policy allows objects under {BUCKET}/{ORGANIZATION}/ only"
                ),
            );
        }
        let params = query_params(&request.query);
        let names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        match (request.method.as_str(), names.as_slice()) {
            ("HEAD" | "GET", []) => self.get_object(&key, request.method == "HEAD"),
            ("PUT", []) => {
                let stored = Stored {
                    etag: etag_of(&request.body),
                    content_type: request.headers.get("content-type").cloned(),
                    bytes: request.body.clone(),
                    modified: std::time::SystemTime::now(),
                };
                let etag = stored.etag.clone();
                self.state().storage.objects.insert(key, stored);
                Answer {
                    headers: vec![("etag", etag)],
                    ..Answer::empty(200)
                }
            }
            ("POST", ["uploads"]) => {
                let upload_id = random_hex(16);
                self.state().storage.uploads.insert(
                    upload_id.clone(),
                    Upload {
                        key: key.clone(),
                        content_type: request.headers.get("content-type").cloned(),
                        parts: BTreeMap::new(),
                    },
                );
                s3_xml(
                    format!(
                        "<InitiateMultipartUploadResult><Bucket>{BUCKET}</Bucket><Key>{}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>",
                        xml_text(&key)
                    ),
                    Vec::new(),
                )
            }
            ("PUT", ["partNumber", "uploadId"] | ["uploadId", "partNumber"]) => {
                let number = param("partNumber").and_then(|n| n.parse::<u32>().ok());
                let Some(number) = number.filter(|n| (1..=10_000).contains(n)) else {
                    return s3_error(400, "InvalidArgument", "partNumber is 1 to 10000");
                };
                let upload_id = param("uploadId").unwrap_or_default();
                let etag = etag_of(&request.body);
                let mut state = self.state();
                let Some(upload) = state
                    .storage
                    .uploads
                    .get_mut(&upload_id)
                    .filter(|u| u.key == key)
                else {
                    return s3_error(404, "NoSuchUpload", "the upload does not exist");
                };
                upload
                    .parts
                    .insert(number, (etag.clone(), request.body.clone()));
                Answer {
                    headers: vec![("etag", etag)],
                    ..Answer::empty(200)
                }
            }
            ("POST", ["uploadId"]) => {
                self.complete_upload(&key, &param("uploadId").unwrap_or_default(), &request.body)
            }
            // AbortMultipartUpload is not in the push access's policy.
            ("DELETE", ["uploadId"]) => s3_error(
                403,
                "AccessDenied",
                "the credential's policy does not allow s3:AbortMultipartUpload",
            ),
            (method, names) => s3_error(
                501,
                "NotImplemented",
                &format!(
                    "the daytona emulator does not implement {method} on an object with query `{}`; it refuses it rather than answer wrong",
                    names.join("&")
                ),
            ),
        }
    }

    /// HEAD or GET of object `key`.
    fn get_object(&self, key: &str, head: bool) -> Answer {
        let state = self.state();
        let Some(stored) = state.storage.objects.get(key) else {
            return match head {
                true => Answer::empty(404),
                false => s3_error(404, "NoSuchKey", "The specified key does not exist."),
            };
        };
        let headers = vec![
            ("etag", stored.etag.clone()),
            ("last-modified", httpdate::fmt_http_date(stored.modified)),
            ("content-length", stored.bytes.len().to_string()),
        ];
        Answer {
            status: 200,
            content_type: stored
                .content_type
                .clone()
                .unwrap_or_else(|| "binary/octet-stream".into()),
            body: match head {
                true => Vec::new(),
                false => stored.bytes.clone(),
            },
            headers,
        }
    }

    /// `CompleteMultipartUpload` of `upload_id` with the parts `body` lists, in order.
    fn complete_upload(&self, key: &str, upload_id: &str, body: &[u8]) -> Answer {
        let listed = match listed_parts(body) {
            Ok(listed) if !listed.is_empty() => listed,
            Ok(_) => return s3_error(400, "MalformedXML", "the upload lists no part"),
            Err(why) => return s3_error(400, "MalformedXML", &why),
        };
        let mut state = self.state();
        let Some(upload) = state
            .storage
            .uploads
            .get(upload_id)
            .filter(|u| u.key == key)
        else {
            return s3_error(404, "NoSuchUpload", "the upload does not exist");
        };
        let mut bytes = Vec::new();
        let mut last = 0;
        for (i, (number, etag)) in listed.iter().enumerate() {
            if *number <= last {
                return s3_error(
                    400,
                    "InvalidPartOrder",
                    "parts are listed in ascending order",
                );
            }
            last = *number;
            match upload.parts.get(number) {
                Some((_, part)) if part.len() < MIN_PART && i + 1 < listed.len() => {
                    return s3_error(
                        400,
                        "EntityTooSmall",
                        &format!("part {number} is under 5 MiB and not the last"),
                    );
                }
                Some((sent, part)) if sent.trim_matches('"') == etag.trim_matches('"') => {
                    bytes.extend_from_slice(part)
                }
                _ => {
                    return s3_error(
                        400,
                        "InvalidPart",
                        &format!("part {number} was not uploaded with that ETag"),
                    );
                }
            }
        }
        let content_type = upload.content_type.clone();
        state.storage.uploads.remove(upload_id);
        let etag = format!("\"{}-{}\"", &etag_of(&bytes)[1..33], listed.len());
        state.storage.objects.insert(
            key.to_owned(),
            Stored {
                bytes,
                content_type,
                etag: etag.clone(),
                modified: std::time::SystemTime::now(),
            },
        );
        s3_xml(
            format!(
                "<CompleteMultipartUploadResult><Bucket>{BUCKET}</Bucket><Key>{}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
                xml_text(key),
                xml_text(&etag)
            ),
            vec![("etag", etag)],
        )
    }

    /// Checks `request` as S3 does: signed (Signature Version 4) with a credential the
    /// push access handed out, for this storage's region, with that credential's session
    /// token, and a payload that matches its signed hash; no `x-amz-` header the emulator
    /// does not implement.
    fn authorize(&self, request: &HttpRequest) -> Result<(), Answer> {
        if let Some(name) = request
            .headers
            .keys()
            .filter(|name| name.starts_with("x-amz-") && !AMZ_HEADERS.contains(&name.as_str()))
            .min()
        {
            return Err(s3_error(
                501,
                "NotImplemented",
                &format!(
                    "the daytona emulator does not implement the header `{name}`; it refuses it rather than drop it"
                ),
            ));
        }
        if let Some(name) = UNIMPLEMENTED_HEADERS
            .iter()
            .find(|name| request.headers.contains_key(**name))
        {
            return Err(s3_error(
                501,
                "NotImplemented",
                &format!(
                    "the daytona emulator does not implement the header `{name}`; it refuses it rather than drop it"
                ),
            ));
        }
        if query_params(&request.query)
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Signature"))
        {
            return Err(s3_error(
                501,
                "NotImplemented",
                "the daytona emulator does not implement presigned (query-string) authentication",
            ));
        }
        let denied = |code: &str, message: &str| Err(s3_error(403, code, message));
        let Some(signed) = request
            .headers
            .get("authorization")
            .and_then(|h| Signed::parse(h))
        else {
            return denied(
                "AccessDenied",
                "a request must be signed with AWS Signature Version 4",
            );
        };
        let state = self.state();
        let Some(grant) = state.storage.grants.get(signed.access_key) else {
            return denied(
                "InvalidAccessKeyId",
                "the access key was not handed out by push access",
            );
        };
        if grant.issued.elapsed() >= GRANT_LIFETIME {
            return denied("ExpiredToken", "the provided token has expired");
        }
        if request.headers.get("x-amz-security-token") != Some(&grant.session_token) {
            return denied(
                "InvalidToken",
                "a temporary credential's request carries its session token",
            );
        }
        if signed.region != STORAGE_REGION || signed.service != "s3" {
            return Err(s3_error(
                400,
                "AuthorizationHeaderMalformed",
                &format!(
                    "the credential is scoped to {}/{}; this storage is {STORAGE_REGION}/s3",
                    signed.region, signed.service
                ),
            ));
        }
        let header = |name: &str| request.headers.get(name).map(String::as_str);
        let Some(stamp) = header("x-amz-date").filter(|d| d.get(..8) == Some(signed.date)) else {
            return denied(
                "AccessDenied",
                "x-amz-date is missing or not of the credential's date",
            );
        };
        if !within_skew(stamp, std::time::SystemTime::now()) {
            return denied(
                "RequestTimeTooSkewed",
                "the difference between the request time and the current time is too large",
            );
        }
        let Some(payload) = header("x-amz-content-sha256") else {
            return Err(s3_error(
                400,
                "InvalidRequest",
                "x-amz-content-sha256 is missing",
            ));
        };
        if payload != "UNSIGNED-PAYLOAD" {
            if payload.starts_with("STREAMING-") {
                return Err(s3_error(
                    501,
                    "NotImplemented",
                    "the daytona emulator does not implement streaming (chunked) signatures",
                ));
            }
            if payload != hex::encode(Sha256::digest(&request.body)) {
                return Err(s3_error(
                    400,
                    "XAmzContentSHA256Mismatch",
                    "the payload does not match its x-amz-content-sha256",
                ));
            }
        }
        if !signed.headers.contains(&"host") {
            return denied("AccessDenied", "the signature must cover the host header");
        }
        let expected = signature(request, &signed, stamp, payload, &grant.secret);
        if expected.as_deref() != Some(signed.signature) {
            return denied(
                "SignatureDoesNotMatch",
                "the request signature does not match the one computed with the credential's secret",
            );
        }
        Ok(())
    }

    /// The build context files of `hashes`, as the runner makes them: each hash's
    /// `context.tar` under the organization, unpacked under `dir` ([`unpack_tar`]). Fails,
    /// as the runner does, on a missing or empty object.
    pub(super) fn unpack_context(
        &self,
        hashes: &[String],
        dir: &std::path::Path,
    ) -> Result<(), String> {
        for hash in hashes {
            let key = format!("{ORGANIZATION}/{hash}/{CONTEXT_TAR}");
            let tar = match self.state().storage.objects.get(&key) {
                Some(stored) => stored.bytes.clone(),
                None => {
                    return Err(format!(
                        "failed to get tar from storage with hash {hash}: The specified key does not exist."
                    ));
                }
            };
            if tar.is_empty() {
                return Err(format!("empty tar file received for hash {hash}"));
            }
            unpack_tar(hash, &tar, dir)?;
        }
        Ok(())
    }
}

/// Writes the entries of `tar` (hash `hash`'s context) under `dir` as the runner adds
/// them to a build context: directories skipped, every other entry a regular file with its
/// name, content and mode; the rest of a tar it cannot read skipped. Answers the names
/// written; fails on an entry whose name would leave `dir`.
pub(super) fn unpack_tar(
    hash: &str,
    tar: &[u8],
    dir: &std::path::Path,
) -> Result<Vec<String>, String> {
    let mut written = Vec::new();
    let mut archive = tar::Archive::new(tar);
    let Ok(entries) = archive.entries() else {
        return Ok(written);
    };
    for entry in entries {
        // The runner skips the rest of a tar it cannot read.
        let Ok(mut entry) = entry else { break };
        if entry.header().entry_type().is_dir() {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let relative = std::path::Path::new(&name);
        // The emulator's own rule: the runner puts the name in the context's tar as is; the
        // emulator writes files, so it refuses a name that would leave the folder.
        if relative.is_absolute()
            || relative.components().any(|c| {
                !matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            })
        {
            return Err(format!(
                "context entry `{name}` of hash {hash} names a path outside the build context"
            ));
        }
        let mut content = Vec::new();
        if std::io::Read::read_to_end(&mut entry, &mut content).is_err() {
            continue;
        }
        let mode = entry.header().mode().unwrap_or(0o644);
        let path = dir.join(relative);
        let wrote = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, &content))
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            });
        wrote.map_err(|e| format!("cannot write context file {name}: {e}"))?;
        written.push(name);
    }
    Ok(written)
}

/// The Signature Version 4 of `request` (its signed headers, `stamp`, `payload` hash)
/// under `secret`; none when a signed header is missing.
pub(super) fn signature(
    request: &HttpRequest,
    signed: &Signed<'_>,
    stamp: &str,
    payload: &str,
    secret: &str,
) -> Option<String> {
    let mut params: Vec<(String, String)> = query_params(&request.query)
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    params.sort();
    let query = params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in &signed.headers {
        let value = request.headers.get(*name)?;
        // Trimmed, and a run of spaces one space (SigV4's canonical header value).
        let value = value
            .trim()
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical = format!(
        "{}\n{}\n{query}\n{canonical_headers}\n{}\n{payload}",
        request.method,
        request.path,
        signed.headers.join(";")
    );
    let scope = format!(
        "{}/{}/{}/aws4_request",
        signed.date, signed.region, signed.service
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), signed.date);
    for part in [signed.region, signed.service, "aws4_request"] {
        key = hmac_sha256(&key, part);
    }
    Some(hex::encode(hmac_sha256(&key, &to_sign)))
}

/// Whether `stamp` (`x-amz-date`, `YYYYMMDDTHHMMSSZ`) is within [`MAX_SKEW`] of `now`.
pub(super) fn within_skew(stamp: &str, now: std::time::SystemTime) -> bool {
    let rfc3339 = match (
        stamp.get(..4),
        stamp.get(4..6),
        stamp.get(6..8),
        stamp.get(9..11),
        stamp.get(11..13),
        stamp.get(13..15),
    ) {
        (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s))
            if stamp.len() == 16 && stamp.ends_with('Z') =>
        {
            format!("{y}-{mo}-{d}T{h}:{mi}:{s}Z")
        }
        _ => return false,
    };
    let Ok(at) = humantime::parse_rfc3339(&rfc3339) else {
        return false;
    };
    let skew = match now.duration_since(at) {
        Ok(behind) => behind,
        Err(ahead) => ahead.duration(),
    };
    skew <= MAX_SKEW
}

/// The `(PartNumber, ETag)` pairs a `CompleteMultipartUpload` body lists.
pub(super) fn listed_parts(body: &[u8]) -> Result<Vec<(u32, String)>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
    let mut parts = Vec::new();
    for part in text.split("<Part>").skip(1) {
        let field = |name: &str| {
            part.split_once(&format!("<{name}>"))
                .and_then(|(_, rest)| rest.split_once(&format!("</{name}>")))
                .map(|(value, _)| value.replace("&quot;", "\"").replace("&amp;", "&"))
        };
        let number = field("PartNumber")
            .and_then(|n| n.trim().parse().ok())
            .ok_or("a Part without a PartNumber")?;
        let etag = field("ETag").ok_or("a Part without an ETag")?;
        parts.push((number, etag));
    }
    Ok(parts)
}
