use super::*;

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::parse(Path::new("scenarios/t.yaml"), text)
}

#[test]
fn a_lifetime_step_takes_a_timeout_and_a_budget_that_holds_it() {
    let with = |step: &str| {
        parse(&format!(
            "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5m\n{step}"
        ))
    };
    let s = with("  - step: lifetime\n    timeout: 60s\n    budget: 3m\n").unwrap();
    assert_eq!(
        s.steps[1].expect,
        Expectation::Ends {
            timeout: Duration::from_secs(60),
            within: DEFAULT_LIFETIME_WITHIN
        }
    );
    let no_timeout = with("  - step: lifetime\n    budget: 3m\n").unwrap_err();
    assert!(
        no_timeout
            .to_string()
            .contains("`lifetime` needs `timeout: <duration>`"),
        "{no_timeout}"
    );
    let short = with("  - step: lifetime\n    timeout: 60s\n    within: 30s\n    budget: 90s\n")
        .unwrap_err();
    assert!(
        short
            .to_string()
            .contains("must be longer than its timeout (1m) and `within` (30s)"),
        "{short}"
    );
    let elsewhere = with("  - step: launch\n    timeout: 60s\n    budget: 3m\n").unwrap_err();
    assert!(
        elsewhere
            .to_string()
            .contains("`timeout` does not apply to `launch`"),
        "{elsewhere}"
    );
}

#[test]
fn parses_steps_budgets_and_defaults() {
    let s = parse(
            "name: t\nenvironment: ../fixtures/environments/reference\nsteps:\n  - step: build\n    budget: 5m\n  - step: first-result\n    budget: 30s\n  - step: shutdown\n    budget: 20s\n",
        )
        .unwrap();
    assert_eq!(s.name, "t");
    assert_eq!(
        s.environment,
        Path::new("scenarios/../fixtures/environments/reference")
    );
    assert_eq!(
        s.steps[0],
        Step {
            kind: StepKind::Build,
            budget: Duration::from_secs(300),
            expect: Expectation::Default
        }
    );
    assert_eq!(
        s.steps[1].expect,
        Expectation::Answer {
            code: "1+1".into(),
            answer: "2".into()
        }
    );
    assert_eq!(
        s.steps[2].expect,
        Expectation::StoppedWithin(Duration::from_secs(10))
    );
    assert_eq!(s.hash.len(), 64);
}

#[test]
fn unknown_step_names_file_line_column_and_known_steps() {
    let e = parse("name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: 5m\n  - step: reboot\n    budget: 1s\n")
            .unwrap_err()
            .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:6:11: an unknown step `reboot`; a step is one of build, "),
        "{e}"
    );
    for known in StepKind::ALL {
        assert!(e.contains(known.name()), "{e} lacks {known}");
    }
}

#[test]
fn bad_budget_and_unknown_field_are_located() {
    let e = parse("name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: 5 apples\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:5:13:") && e.contains("expected a duration"),
        "{e}"
    );
    let e = parse(
        "name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: 5s\n    colour: red\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:6:5: unknown field `colour`"),
        "{e}"
    );
}

#[test]
fn misplaced_expectation_is_refused_where_it_stands() {
    let e = parse(
        "name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: 5s\n    expect: \"2\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:6:13: `expect` does not apply to `build`"),
        "{e}"
    );
    let e = parse("name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: 0s\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("zero budget"), "{e}");
    let e = parse("name: t\nenvironment: e\nsteps: []\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:3:8: `steps` is empty"),
        "{e}"
    );
}

#[test]
fn checks_take_their_own_fields_and_are_named_by_tier() {
    let s = parse(
            "name: t\nenvironment: e\nsteps:\n  - step: doctor\n    budget: 1m\n  - check: python\n    budget: 1m\n    expect: \"3.13\"\n  - check: imports\n    budget: 1m\n    packages:\n      ipykernel: \"6.29.5\"\n",
        )
        .unwrap();
    let names: Vec<&str> = s.steps.iter().map(Step::name).collect();
    assert_eq!(names, ["doctor", "core-3-python", "core-5-imports"]);
    let Expectation::Check(Check::Python, params) = &s.steps[1].expect else {
        panic!("{:?}", s.steps[1])
    };
    assert_eq!(params.python.as_deref(), Some("3.13"));
    let Expectation::Check(Check::Imports, params) = &s.steps[2].expect else {
        panic!("{:?}", s.steps[2])
    };
    assert_eq!(
        params.packages.get("ipykernel").map(String::as_str),
        Some("6.29.5")
    );

    let e = parse(
        "name: t\nenvironment: e\nsteps:\n  - check: identity\n    budget: 1m\n    kernels: 4\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:4:12: `kernels` does not apply to `core-2-identity`"),
        "{e}"
    );
    let e = parse("name: t\nenvironment: e\nsteps:\n  - check: vibes\n    budget: 1m\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:4:12: an unknown check `vibes`; a check is one of ")
            && e.contains("concurrent-kernels"),
        "{e}"
    );
    let e = parse("name: t\nenvironment: e\nsteps:\n  - budget: 1m\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("scenarios/t.yaml:4:5: every step needs `step: <kind>` or `check: <name>`"),
        "{e}"
    );
    let e = parse("name: t\nenvironment: e\nsteps:\n  - step: check\n    budget: 1m\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("an unknown step `check`"),
        "the check kind is written `check:`: {e}"
    );
}

#[test]
fn a_burst_needs_a_launch_count_in_range() {
    let s = parse(
        "name: t\nenvironment: e\nsteps:\n  - step: burst\n    launches: 100\n    budget: 5m\n",
    )
    .unwrap();
    assert_eq!(
        s.steps[0].expect,
        Expectation::Launches(100, LaunchMode::Burst)
    );
    let e = parse("name: t\nenvironment: e\nsteps:\n  - step: burst\n    budget: 5m\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":4:") && e.contains("`burst` needs `launches: <n>`"),
        "{e}"
    );
    let e = parse(
        "name: t\nenvironment: e\nsteps:\n  - step: burst\n    launches: 0\n    budget: 5m\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`launches: 0` is out of range"), "{e}");
    let e = parse(
        "name: t\nenvironment: e\nsteps:\n  - step: launch\n    launches: 3\n    budget: 5m\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`launches` does not apply to `launch`"), "{e}");
}

#[test]
fn a_name_that_is_not_a_safe_file_name_is_refused_where_it_stands() {
    for bad in ["../escape", ".hidden", "a/b", "a\\\\b"] {
        let e = parse(&format!(
            "name: \"{bad}\"\nenvironment: e\nsteps:\n  - step: build\n    budget: 5m\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("scenarios/t.yaml:1:7: scenario name") && e.contains("file name"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn durations_and_counts_out_of_range_are_refused_where_they_stand() {
    let step = |fields: &str| parse(&format!("name: t\nenvironment: e\nsteps:\n  - {fields}\n"));
    let s = step("step: build\n    budget: 24h").unwrap();
    assert_eq!(s.steps[0].budget, MAX_DURATION);
    for (fields, at, says) in [
        (
            "step: build\n    budget: 18446744073709551615s",
            "5:13",
            "out of range",
        ),
        ("step: build\n    budget: 24h 1s", "5:13", "at most 24h"),
        (
            "step: shutdown\n    budget: 1m\n    within: 25h",
            "6:13",
            "at most 24h",
        ),
        (
            "check: concurrent-kernels\n    budget: 1m\n    kernels: 0",
            "6:14",
            "`kernels: 0` is out of range",
        ),
        (
            "check: concurrent-kernels\n    budget: 1m\n    kernels: 65",
            "6:14",
            "1 to 64",
        ),
        (
            "check: concurrent-kernels\n    budget: 1m\n    kernels: 99999999999",
            "6:14",
            "out of range",
        ),
        (
            "check: gpu\n    budget: 1m\n    gpus: -1",
            "6:11",
            "`gpus: -1` is out of range",
        ),
        (
            "check: gpu\n    budget: 1m\n    gpus: 65",
            "6:11",
            "0 to 64",
        ),
        (
            "check: throughput\n    budget: 1m\n    minimum: .nan",
            "6:14",
            "out of range",
        ),
        (
            "check: throughput\n    budget: 1m\n    minimum: 1e300",
            "6:14",
            "out of range",
        ),
        (
            "step: burst\n    budget: 1m\n    launches: 1001",
            "6:15",
            "1 to 1000",
        ),
    ] {
        let e = step(fields).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("scenarios/t.yaml:{at}: ")) && e.contains(says),
            "{fields}: {e}"
        );
        assert!(!e.contains(" at line "), "one location: {e}");
    }
}

#[test]
fn errors_are_for_people_with_one_location() {
    let e = parse("name: a\nname: b\nenvironment: e\nsteps:\n  - step: build\n    budget: 1s\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "scenarios/t.yaml:2:1: `name` is given twice; give each key once"
    );
    let long = "x".repeat(50_000);
    let e = parse(&format!(
        "name: t\nenvironment: e\nsteps:\n  - step: build\n    budget: {long}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.len() < 700 && e.contains("50000 bytes in all"),
        "{} bytes: {}",
        e.len(),
        &e[..300]
    );
    assert!(e.starts_with("scenarios/t.yaml:5:13: "), "{e}");
    assert!(!e.contains(" at line "), "{e}");
}

#[test]
fn a_file_that_is_not_utf8_is_located_at_the_byte() {
    let path = std::env::temp_dir().join(format!("sm-scenario-bytes-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        b"name: t\nenvironment: e\nsteps:\n  - step: b\xffuild\n",
    )
    .unwrap();
    let e = Scenario::load(&path).unwrap_err().to_string();
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        e,
        format!(
            "{}:4:12: not UTF-8 text: a scenario file is UTF-8, and this byte is not",
            path.display()
        )
    );
}

#[test]
fn unreadable_file_names_the_path() {
    let e = Scenario::load(Path::new("no/such/scenario.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cannot read scenario file no/such/scenario.yaml"),
        "{e}"
    );
}
