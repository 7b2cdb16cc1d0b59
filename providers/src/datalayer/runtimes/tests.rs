use super::*;

#[test]
fn a_command_runs_as_a_json_list_and_its_line_is_read_back() {
    let code = command_code(&["sh".into(), "-c".into(), "echo \"a'b\"".into()]);
    assert!(code.contains(r#"_sm_subprocess.run(["sh","-c","echo \"a'b\""]"#));
    let printed = CodeOutput {
        stdout: "noise\n{\"exit_code\": 3, \"stdout\": \"out\", \"stderr\": \"err\"}\n".into(),
        ..CodeOutput::default()
    };
    let out = command_output(&printed).expect("the line parses");
    assert_eq!(
        (out.exit_code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(3), "out", "err")
    );
    let raised = CodeOutput {
        error: Some("NameError: x".into()),
        ..CodeOutput::default()
    };
    assert!(command_output(&raised).is_err());
}

#[test]
fn given_names_give_back_their_run_and_scenario() {
    let labels = RunLabels {
        run_id: "20261202T143000Z-0a1b2c".into(),
        variant: VARIANT.into(),
        scenario: "core-tier".into(),
    };
    let name = given_name(&labels);
    assert_eq!(
        crate::run_of_name(NAME_PREFIX, &name),
        Some((labels.run_id.clone(), labels.scenario.clone()))
    );
}
