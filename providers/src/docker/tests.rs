use super::build::{is_build_step_being_committed, label_every_stage, naming_build_id};
use super::sweep::children_first;
use super::*;

fn run_labels() -> std::collections::BTreeMap<String, String> {
    RunLabels {
        run_id: "20261201T000000Z-abcdef".into(),
        variant: "docker".into(),
        scenario: "lifecycle".into(),
    }
    .to_map()
}

const ONE_LABEL: &str = "LABEL \"sandbox-matrix.run\"=\"20261201T000000Z-abcdef\" \"sandbox-matrix.scenario\"=\"lifecycle\" \"sandbox-matrix.variant\"=\"docker\"";

#[test]
fn a_floor_is_timed_from_the_create_and_refuses_what_is_not_a_span() {
    let created = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
    let span = super::since_create(created, 1_001.25, "x").expect("a span");
    assert_eq!(span, Duration::from_millis(1_250));
    for at in [999.0, f64::NAN, 1_000.0 + 7_200.0] {
        let e = super::since_create(created, at, "a bare kernel").expect_err("refused");
        assert!(e.message.contains("a bare kernel answered at"), "{e}");
    }
}

#[test]
fn only_a_build_step_the_engine_commits_is_left_to_it() {
    use bollard::models::{ContainerConfig, ContainerInspectResponse, ContainerState};
    let container = |cmd: &[&str], status, exit_code| ContainerInspectResponse {
        config: Some(ContainerConfig {
            cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
            ..Default::default()
        }),
        state: Some(ContainerState {
            status: Some(status),
            exit_code: Some(exit_code),
            ..Default::default()
        }),
        ..Default::default()
    };
    let nop = ["/bin/sh", "-c", "#(nop) ", "LABEL a=b"];
    let run = ["/bin/sh", "-c", "sleep 20"];
    use ContainerStateStatusEnum::{CREATED, EXITED, RUNNING};
    for (cmd, status, code, committing) in [
        (&nop[..], CREATED, 0, true),
        (&run[..], EXITED, 0, true),
        // A RUN that failed, or still runs (the builder kills it), commits nothing.
        (&run[..], EXITED, 1, false),
        (&run[..], RUNNING, 0, false),
        (&run[..], CREATED, 0, false),
        // The harness's own containers.
        (
            &["jupyter-server", "--ServerApp.ip=0.0.0.0"][..],
            EXITED,
            0,
            false,
        ),
        (&["python3", "-c", "print(1+1)"][..], CREATED, 0, false),
    ] {
        assert_eq!(
            is_build_step_being_committed(&container(cmd, status, code)),
            committing,
            "{cmd:?} {status:?} {code}"
        );
    }
}

#[test]
fn a_build_request_names_its_build_id_and_no_other_request_does() {
    let build: http::Uri = "unix://2f72756e/v1.41/build?dockerfile=Dockerfile&rm=true"
        .parse()
        .expect("a URI");
    assert_eq!(
        naming_build_id(&build, "sandbox-matrix-ab12")
            .expect("named")
            .query(),
        Some("dockerfile=Dockerfile&rm=true&buildid=sandbox-matrix-ab12")
    );
    let bare: http::Uri = "http://localhost/v1.41/build".parse().expect("a URI");
    assert_eq!(
        naming_build_id(&bare, "b1").expect("named").query(),
        Some("buildid=b1")
    );
    for other in [
        "http://localhost/v1.41/session",
        "http://localhost/v1.41/build/prune",
    ] {
        let uri: http::Uri = other.parse().expect("a URI");
        assert_eq!(naming_build_id(&uri, "b1"), None, "{other}");
    }
}

#[test]
fn a_build_record_reads_back_and_refuses_any_other_shape() {
    let held = BuildRecord {
        id: "sandbox-matrix-ab12".into(),
        holder: Some(crate::process::Owner {
            pid: 42,
            start_ticks: Some(7),
            boot_id: None,
        }),
    };
    assert_eq!(held.resource().id, "sandbox-matrix-ab12:42:7");
    assert_eq!(
        BuildRecord::parse(&held.resource().id).expect("reads"),
        held
    );
    let bare = BuildRecord {
        id: "sandbox-matrix-cd34".into(),
        holder: None,
    };
    assert_eq!(
        BuildRecord::parse(&bare.resource().id).expect("reads"),
        bare
    );
    for bad in ["", "x&y=1", "b:1", "b:x:1", "b:1:2:3", "../b"] {
        assert!(BuildRecord::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn images_come_before_their_parents() {
    let image = |id: &str, parent: &str| bollard::models::ImageSummary {
        id: id.into(),
        parent_id: parent.into(),
        ..Default::default()
    };
    let ordered = children_first(vec![image("a", "base"), image("c", "b"), image("b", "a")]);
    assert_eq!(ordered, ["c", "b", "a"]);
}

#[test]
fn labels_go_in_once_right_after_every_from() {
    let dockerfile = "# escape=\\\nARG BASE_IMAGE=base:v1\nFROM ${BASE_IMAGE} AS one\nRUN true\nfrom \\\n  # a comment inside\n  other\nRUN false\n";
    let labelled = label_every_stage(dockerfile, &run_labels());
    assert_eq!(
        labelled,
        format!(
            "# escape=\\\nARG BASE_IMAGE=base:v1\nFROM ${{BASE_IMAGE}} AS one\n{ONE_LABEL}\nRUN true\nfrom \\\n  # a comment inside\n  other\n{ONE_LABEL}\nRUN false\n"
        )
    );
}

#[test]
fn a_backtick_escape_directive_continues_a_from() {
    let labelled = label_every_stage("# escape=`\nFROM `\n base\nRUN x\n", &run_labels());
    assert_eq!(
        labelled,
        format!("# escape=`\nFROM `\n base\n{ONE_LABEL}\nRUN x\n")
    );
}

#[test]
fn label_values_are_quoted_for_the_dockerfile() {
    let labels = std::collections::BTreeMap::from([("k".to_owned(), "a \"b\" $c".to_owned())]);
    assert_eq!(
        label_every_stage("FROM x\n", &labels),
        "FROM x\nLABEL \"k\"=\"a \\\"b\\\" \\$c\"\n"
    );
}

#[test]
fn engine_errors_map_to_kinds() {
    use bollard::errors::Error as E;
    let e = engine_error(E::DockerResponseServerError {
        status_code: 503,
        message: "busy".into(),
    });
    assert!(e.retryable && e.kind == ErrorKind::Api);
    let e = engine_error(E::DockerResponseServerError {
        status_code: 409,
        message: "conflict".into(),
    });
    assert!(!e.retryable);
    assert_eq!(
        engine_error(E::DockerResponseServerError {
            status_code: 404,
            message: "gone".into()
        })
        .kind,
        ErrorKind::NotFound
    );
}
