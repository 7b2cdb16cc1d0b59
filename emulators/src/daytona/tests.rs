use super::interpreter::{Execute, INTERPRETER_TIMEOUT, read_execute};
use super::snapshots::write_context;
use super::*;

#[test]
fn auto_stop_takes_started_sandboxes_idle_past_their_interval() {
    let now = std::time::Instant::now();
    let sandbox = |state: &str, minutes: u64, idle_secs: u64| Sandbox {
        snapshot: "s".into(),
        size: Size {
            cpu: 1,
            memory_gib: 1,
            disk_gib: 3,
        },
        user: None,
        target: "us".into(),
        labels: BTreeMap::new(),
        state: state.into(),
        error_reason: None,
        container: None,
        auto_stop_minutes: minutes,
        last_activity: now - Duration::from_secs(idle_secs),
    };
    let sandboxes = BTreeMap::from([
        ("idle-past".to_owned(), sandbox("started", 1, 61)),
        ("idle-at".to_owned(), sandbox("started", 1, 60)),
        ("active".to_owned(), sandbox("started", 15, 600)),
        ("never".to_owned(), sandbox("started", 0, 86_400)),
        ("stopped".to_owned(), sandbox("stopped", 1, 3_600)),
    ]);
    assert_eq!(due_for_auto_stop(&sandboxes, now), ["idle-past"]);
}

#[test]
fn a_proxied_request_is_activity_unless_it_says_to_skip_it() {
    let with = |value: &str| {
        std::collections::HashMap::from([(SKIP_ACTIVITY_HEADER.to_owned(), value.to_owned())])
    };
    assert!(skips_activity(&with("true")));
    assert!(!skips_activity(&with("false")));
    assert!(!skips_activity(&std::collections::HashMap::new()));
}

fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sm-daytona-emulate-{}-{name}", std::process::id()))
}

#[test]
fn heredoc_copies_become_context_files() {
    let dir = scratch("heredoc");
    write_context(
            &dir,
            "FROM x\nCOPY <<'SANDBOX_MATRIX_CONTEXT_0' /etc/a\nline\nSANDBOX_MATRIX_CONTEXT_0\nRUN true\n",
        )
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("Dockerfile")).unwrap(),
        "FROM x\nCOPY heredoc-1 /etc/a\nRUN true\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("heredoc-1")).unwrap(),
        "line\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_execute_frame_is_read_as_the_daemon_reads_it() {
    let read = |frame: Value| read_execute(frame.to_string().as_bytes()).unwrap();
    assert_eq!(
        read(json!({"code": "1", "contextId": "c", "envs": {"A": "a", "B": null}})),
        Execute {
            code: "1".into(),
            context: Some("c".into()),
            timeout: Some(INTERPRETER_TIMEOUT),
            envs: [("A".into(), "a".into()), ("B".into(), String::new())].into(),
        }
    );
    assert_eq!(read(json!({"code": "1", "timeout": 0})).timeout, None);
    assert_eq!(
        read(json!({"code": "1", "timeout": 3})).timeout,
        Some(Duration::from_secs(3))
    );
}

#[test]
fn an_execute_frame_is_refused_as_the_daemon_refuses_it() {
    let refused = |frame: &str| read_execute(frame.as_bytes()).unwrap_err();
    let closed = |code: u16, reason: &str| (Vec::new(), code, reason.to_owned());
    assert_eq!(
        refused(r#"{"code": "1", "timeout": -1}"#),
        closed(1008, "timeout must be greater than or equal to 0")
    );
    assert_eq!(refused(r#"{"code": ""}"#), closed(1008, "code is required"));
    for frame in [
        "not json",
        "[]",
        r#"{"code": 1}"#,
        r#"{"code": "1", "timeout": "10"}"#,
        r#"{"code": "1", "timeout": 1.5}"#,
        r#"{"code": "1", "envs": {"A": 1}}"#,
        r#"{"code": "1", "envs": []}"#,
    ] {
        assert_eq!(
            refused(frame),
            closed(1002, "invalid JSON payload"),
            "{frame}"
        );
    }
    let (frames, code, reason) = refused(r#"{"code": "1", "language": "python"}"#);
    assert_eq!(code, 1008);
    assert!(reason.contains("`language`"), "{reason}");
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["type"], "error");
    assert!(
        frames[0]["value"].as_str().unwrap().contains("`language`"),
        "{frames:?}"
    );
}

#[test]
fn the_host_splits_from_its_port() {
    assert_eq!(
        split_host("App.Daytona.test:8443"),
        ("app.daytona.test".to_owned(), ":8443".to_owned())
    );
    assert_eq!(
        split_host("proxy.app.daytona.test"),
        ("proxy.app.daytona.test".to_owned(), String::new())
    );
}

/// AWS's published Signature Version 4 example for S3 ("Example: GET Object", the S3 API
/// reference's "Signature Calculations for the Authorization Header"): the emulator's
/// check computes the signature AWS documents.
#[test]
fn a_signature_is_computed_as_awss_published_example() {
    use super::object_storage::{Signed, signature};
    let headers = [
        ("host", "examplebucket.s3.amazonaws.com"),
        ("range", "bytes=0-9"),
        (
            "x-amz-content-sha256",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        ("x-amz-date", "20130524T000000Z"),
    ];
    let request = HttpRequest {
        method: "GET".into(),
        host: headers[0].1.into(),
        path: "/test.txt".into(),
        query: String::new(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        body: Vec::new(),
    };
    // Fake: AWS's published example access key id (AKIA…EXAMPLE) and its example
    // signature, from the S3 API reference; no credential.
    let header = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"; // fake (AWS's example)
    let signed = Signed::parse(header).expect("AWS's header parses");
    // Fake: AWS's documented example secret key (…EXAMPLEKEY), not a credential.
    let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"; // fake (AWS's example)
    assert_eq!(
        signature(&request, &signed, headers[3].1, headers[2].1, secret).as_deref(),
        Some("f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    );
    assert!(Signed::parse("AWS4-HMAC-SHA512 Credential=a/b/c/s3/aws4_request").is_none());
    assert!(Signed::parse("Bearer token").is_none());
}

/// Two requests with a query from AWS's SigV4 test suite (awslabs/aws-c-auth v0.9.0
/// `tests/aws-signing-test-suite/v4`, as the aws-sigv4 1.6.4 crate ships it):
/// `get-vanilla-query-order-key-case` and `get-vanilla-query-unreserved`. The query is
/// decoded, encoded again and sorted as SigV4 says.
#[test]
fn a_query_is_signed_as_awss_signing_test_suite_says() {
    use super::object_storage::{Signed, signature};
    let unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (query, expected) in [
        (
            "Param2=value2&Param1=value1".to_owned(),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
        (
            format!("{unreserved}={unreserved}"),
            "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
        ),
    ] {
        let request = HttpRequest {
            method: "GET".into(),
            host: "example.amazonaws.com".into(),
            path: "/".into(),
            query,
            headers: [
                ("host", "example.amazonaws.com"),
                ("x-amz-date", "20150830T123600Z"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            body: Vec::new(),
        };
        // Fake: the suite's example access key id (AKIDEXAMPLE), no credential.
        let signed = Signed::parse(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=x", // fake (the suite's example)
        )
        .expect("the suite's header parses");
        // Fake: the suite's example secret key (…EXAMPLEKEY), not a credential.
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"; // fake (the suite's example)
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(
            signature(&request, &signed, "20150830T123600Z", empty, secret).as_deref(),
            Some(expected),
            "{}",
            request.query
        );
    }
}

/// A request's time is taken within 15 minutes of the storage's clock, either way.
#[test]
fn a_request_time_is_taken_within_fifteen_minutes() {
    use super::object_storage::within_skew;
    let at = |s: &str| humantime::parse_rfc3339(s).unwrap();
    let now = at("2026-12-08T12:00:00Z");
    assert!(within_skew("20261208T120000Z", now));
    assert!(within_skew("20261208T114500Z", now));
    assert!(within_skew("20261208T121500Z", now));
    assert!(!within_skew("20261208T114459Z", now));
    assert!(!within_skew("20261208T121501Z", now));
    assert!(!within_skew("20261208", now));
    assert!(!within_skew("2026-12-08T12:00:00Z", now));
}

#[test]
fn a_complete_multipart_upload_body_lists_its_parts() {
    use super::object_storage::listed_parts;
    let body = b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part><Part><ETag>\"b\"</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>";
    assert_eq!(
        listed_parts(body).unwrap(),
        vec![(1, "\"a\"".to_owned()), (2, "\"b\"".to_owned())]
    );
    assert!(
        listed_parts(
            b"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>"
        )
        .is_err()
    );
}

/// A context tar as Daytona's runner adds it to a build (image_build.go at v0.190.0):
/// directories skipped, a symlink a regular empty file, modes kept; and a name that would
/// leave the context refused.
#[test]
fn a_context_tar_is_unpacked_as_the_runner_adds_it() {
    use super::object_storage::unpack_tar;
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir_entry = tar::Header::new_ustar();
    dir_entry.set_entry_type(tar::EntryType::Directory);
    dir_entry.set_size(0);
    dir_entry.set_mode(0o755);
    tar.append_data(&mut dir_entry, "ctx/", std::io::empty())
        .unwrap();
    let mut file = tar::Header::new_ustar();
    file.set_size(3);
    file.set_mode(0o600);
    tar.append_data(&mut file, "ctx/a.txt", &b"abc"[..])
        .unwrap();
    let mut link = tar::Header::new_ustar();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    link.set_mode(0o777);
    tar.append_link(&mut link, "ctx/link", "a.txt").unwrap();
    let bytes = tar.into_inner().unwrap();
    let out = scratch("context-tar");
    let written = unpack_tar("h", &bytes, &out).unwrap();
    assert_eq!(written, ["ctx/a.txt", "ctx/link"]);
    // A name as `tar -C dir .` writes it stays inside.
    let mut dotted = tar::Builder::new(Vec::new());
    let mut file = tar::Header::new_ustar();
    file.set_size(1);
    file.set_mode(0o644);
    dotted
        .append_data(&mut file, "./ctx/b.txt", &b"b"[..])
        .unwrap();
    unpack_tar("h", &dotted.into_inner().unwrap(), &out).unwrap();
    assert_eq!(std::fs::read(out.join("ctx/b.txt")).unwrap(), b"b");
    assert_eq!(std::fs::read(out.join("ctx/a.txt")).unwrap(), b"abc");
    let meta = std::fs::symlink_metadata(out.join("ctx/link")).unwrap();
    assert!(meta.is_file() && meta.len() == 0, "{meta:?}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(out.join("ctx/a.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let mut escape = tar::Header::new_ustar();
    escape.set_size(1);
    escape.set_mode(0o644);
    escape.as_old_mut().name[..9].copy_from_slice(b"../escape");
    escape.set_cksum();
    let mut tar = tar::Builder::new(Vec::new());
    tar.append(&escape, &b"x"[..]).unwrap();
    let refused = unpack_tar("h", &tar.into_inner().unwrap(), &out).unwrap_err();
    assert!(refused.contains("`../escape`"), "{refused}");
    assert!(!out.parent().unwrap().join("escape").exists());
    let _ = std::fs::remove_dir_all(&out);
}
