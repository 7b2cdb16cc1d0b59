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
