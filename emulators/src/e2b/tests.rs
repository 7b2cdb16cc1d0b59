use super::builds::{builder_rules, implemented};
use super::sandboxes::create_refusal;
use super::*;

/// The form the project's client sent before following the builder: a plain tar upload
/// and `RUN [command, ""]`; both fail the build as E2B's builder fails it.
#[test]
fn the_builder_refuses_a_plain_tar_and_an_empty_run_user() {
    let tar = {
        let mut b = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_mode(0o644);
        b.append_data(&mut header, "a.json", &b"{}"[..]).unwrap();
        b.into_inner().unwrap()
    };
    let gz = {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    };
    let uploads = HashMap::from([
        (("tpl1".to_owned(), "plain".to_owned()), tar),
        (("tpl1".to_owned(), "gz".to_owned()), gz),
    ]);
    let copy = |hash: &str| json!([{"type": "COPY", "args": ["a.json", "/a.json", "root", ""], "filesHash": hash, "force": false}]);
    let refused = builder_rules("tpl1", &copy("plain"), &uploads).unwrap_err();
    assert!(
        refused.contains("not in gzip format") && refused.contains("copy.go"),
        "{refused}"
    );
    assert_eq!(builder_rules("tpl1", &copy("gz"), &uploads), Ok(()));
    let missing = builder_rules("tpl1", &copy("other"), &uploads).unwrap_err();
    assert!(missing.contains("no files uploaded"), "{missing}");
    let run = |args: Value| json!([{"type": "RUN", "args": args, "force": false}]);
    let refused = builder_rules("tpl1", &run(json!(["echo hi", ""])), &uploads).unwrap_err();
    assert!(refused.contains("invalid username: ''"), "{refused}");
    assert_eq!(
        builder_rules("tpl1", &run(json!(["echo hi"])), &uploads),
        Ok(())
    );
    assert_eq!(
        builder_rules("tpl1", &run(json!(["id", "root"])), &uploads),
        Ok(())
    );
}

#[test]
fn a_build_field_or_step_the_emulator_does_not_implement_is_refused_by_name() {
    let ok = json!({"fromImage": "a", "force": false, "steps": [
            {"type": "RUN", "args": ["x"], "force": false}]});
    assert!(implemented(&ok).is_ok());
    for (body, named) in [
        (
            json!({"fromImage": "a", "fromTemplate": "t"}),
            "`fromTemplate`",
        ),
        (
            json!({"fromImage": "a", "steps": [{"type": "RUN", "args": ["x"], "user": "u"}]}),
            "`user` (step 0)",
        ),
        (
            json!({"fromImage": "a", "steps": [{"type": "ARG", "args": ["x"]}]}),
            "`ARG` (step 0)",
        ),
    ] {
        let refused = implemented(&body).expect_err("refused");
        let text = String::from_utf8_lossy(&refused.body);
        assert_eq!(refused.status, 501, "{text}");
        assert!(text.contains(named), "{text}");
    }
}

#[test]
fn the_start_command_decides_what_port_49999_serves() {
    let reference: Value = serde_json::from_str(include_str!(
        "../../../fixtures/environments/reference/environment.json"
    ))
    .expect("the reference environment is JSON");
    let command = reference["start"]["command"].as_str();
    assert_eq!(
        CodeChannel::of(command),
        CodeChannel::Jupyter { open: true }
    );
    let with_token = "jupyter server --ServerApp.port=49999 --ServerApp.ip=0.0.0.0";
    assert_eq!(
        CodeChannel::of(Some(with_token)),
        CodeChannel::Jupyter { open: false }
    );
    let elsewhere = "jupyter server --ServerApp.port=8888 --IdentityProvider.token=";
    assert_eq!(CodeChannel::of(Some(elsewhere)), CodeChannel::Closed);
    assert_eq!(
        CodeChannel::of(Some("/root/.jupyter/start-up.sh")),
        CodeChannel::Interpreter
    );
    assert_eq!(CodeChannel::of(Some("sleep infinity")), CodeChannel::Closed);
    assert_eq!(CodeChannel::of(None), CodeChannel::Closed);
}

fn template(id: &str, build: &str, name: &str, tags: &[&str]) -> Template {
    Template {
        id: id.into(),
        build: build.into(),
        name: name.into(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        logs: Arc::default(),
        outcome: Arc::default(),
        start_cmd: None,
        limits: Default::default(),
    }
}

#[test]
fn a_create_field_the_emulator_does_not_implement_is_refused_by_name() {
    let refused = |body: Value| {
        create_refusal(&body).map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))
    };
    let ok = json!({"templateID": "t", "timeout": 900, "secure": true, "metadata": {},
                        "envVars": {"LANG": "C.UTF-8"}, "network": {"allowPublicTraffic": false},
                        "autoPause": false, "mcp": null});
    assert_eq!(refused(ok), None);
    for (body, named) in [
        (
            json!({"templateID": "t", "volumeMounts": []}),
            "`volumeMounts`",
        ),
        (
            json!({"templateID": "t", "network": {"allowOut": ["1.1.1.1"]}}),
            "`network.allowOut`",
        ),
        (
            json!({"templateID": "t", "autoPause": true}),
            "`autoPause` other than `false`",
        ),
        (
            json!({"templateID": "t", "secure": false}),
            "`secure` other than `true`",
        ),
    ] {
        let (status, said) = refused(body).expect("refused");
        assert_eq!(status, 501);
        assert!(said.contains(named), "{said}");
    }
}

#[test]
fn templates_resolve_by_name_tag_id_and_build_as_e2b_does() {
    let templates = [
        template("tpl1", "b-old", "ref", &["default"]),
        template("tpl2", "b-new", "ref", &["default", "v2"]),
        template("tpl3", "b-other", "other", &["stable"]),
    ];
    let found = |s: &str| resolve(&templates, s).map(|t| t.build.as_str());
    assert_eq!(
        found("ref"),
        Some("b-new"),
        "a name: its newest default build"
    );
    assert_eq!(found("ref:default"), Some("b-new"));
    assert_eq!(found("ref:v2"), Some("b-new"));
    assert_eq!(found("tpl1"), Some("b-old"), "a bare id");
    assert_eq!(
        found("tpl1:b-old"),
        Some("b-old"),
        "id:build, the exact build"
    );
    assert_eq!(found("other:stable"), Some("b-other"));
    assert_eq!(found("other"), None, "no default tag");
    assert_eq!(found("ref:v3"), None, "no such tag");
    assert_eq!(found("tpl1:b-new"), None, "a build of another template");
    assert_eq!(found("ref:b-new"), None, "a build id is no tag of a name");
    assert_eq!(found(""), None);
}
