//! `sandbox-matrix preflight`: with no credentials it names each missing variable and exits
//! 1; pointed at `emulate e2b`, then `emulate daytona`, and a local authenticated registry
//! holding the pushed base, it reports the variant ready and exits 0; with a wrong registry
//! password or an unapproved digest it says so and exits 1. It never prints a credential's
//! value.
//!
//! The second test needs Docker, Debian's `docker-registry` and `htpasswd`:
//! `cargo test -p sandbox-matrix --test engine preflight::`.

use crate::common;

use std::process::{Command, Output};

use common::Images;
use common::emulate::Emulate;
use common::registry;
use sandbox_providers::api::network::{CA_FILE_VAR, RESOLVE_VAR};

/// The repository the base is pushed to in the local registry.
const REPOSITORY: &str = "sandbox-matrix/contract-base";

/// Every variable that could point preflight elsewhere, cleared so the test sees only its own.
const CLEARED: &[&str] = &[
    "E2B_API_KEY",
    "E2B_API_URL",
    "E2B_DOMAIN",
    "DAYTONA_API_KEY",
    "DAYTONA_JWT_TOKEN",
    "DAYTONA_ORGANIZATION_ID",
    "DAYTONA_API_URL",
    "SANDBOX_MATRIX_BASE",
    "SANDBOX_MATRIX_APPROVED_BASES",
    "SANDBOX_MATRIX_REGISTRY_AUTH",
    "SANDBOX_MATRIX_REGISTRY_USER",
    "SANDBOX_MATRIX_REGISTRY_PASSWORD",
    CA_FILE_VAR,
    RESOLVE_VAR,
];

fn sandbox_matrix(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command.args(args).arg("--root").arg(common::root());
    for name in CLEARED {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("sandbox-matrix runs")
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The table row of `variant` × `check`.
fn row<'a>(output: &'a str, variant: &str, check: &str) -> &'a str {
    output
        .lines()
        .find(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells.get(1) == Some(&variant) && cells.get(2) == Some(&check)
        })
        .unwrap_or_else(|| panic!("no row {variant} × {check} in:\n{output}"))
}

pub fn without_credentials_each_missing_variable_is_named() {
    let output = sandbox_matrix(
        &["preflight", "--variant", "e2b", "--variant", "daytona"],
        &[],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(
        row(&shown, "e2b", "credentials").contains("missing")
            && row(&shown, "e2b", "credentials").contains("E2B_API_KEY"),
        "{shown}"
    );
    let daytona = row(&shown, "daytona", "credentials");
    assert!(
        daytona.contains("DAYTONA_API_KEY") && daytona.contains("DAYTONA_JWT_TOKEN"),
        "{shown}"
    );
    for variant in ["e2b", "daytona"] {
        assert!(
            row(&shown, variant, "base by digest").contains("SANDBOX_MATRIX_BASE"),
            "{shown}"
        );
        assert!(
            row(&shown, variant, "API answers").contains("not checked"),
            "{shown}"
        );
    }
    assert!(shown.contains("not ready: e2b, daytona"), "{shown}");
}

pub fn an_unknown_variant_is_bad_input() {
    let output = sandbox_matrix(&["preflight", "--variant", "nope"], &[]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    assert!(shown.contains("unknown variant `nope`"), "{shown}");
    // A base by tag is bad input too, not a variant that is not ready.
    let output = sandbox_matrix(
        &["preflight", "--base", "foo:latest", "--variant", "docker"],
        &[],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("error: --base: `foo:latest` names the base by tag or name"),
        "{shown}"
    );
}

pub fn against_the_emulator_and_a_registry_holding_the_base_e2b_is_ready() {
    // Fake credentials, made up for this test.
    let password = "sm-fake-preflight-password-1f3a";
    let fake_key = "e2b_fake_preflight_key_0000";
    let registry = registry::start("preflight", password);
    let target = format!("{}/{REPOSITORY}", registry.host);
    let static_auth = [
        ("SANDBOX_MATRIX_REGISTRY_AUTH", "static"),
        ("SANDBOX_MATRIX_REGISTRY_USER", "preflight"),
        ("SANDBOX_MATRIX_REGISTRY_PASSWORD", password),
    ];
    let pushed = sandbox_matrix(&["bootstrap", "--push", &target], &static_auth);
    let pushed_text = text(&pushed);
    assert!(pushed.status.success(), "{pushed_text}");
    let reference = common::pushed_reference(&pushed.stdout, &pushed_text);
    let _images = Images(vec![format!("{target}:v1"), reference.clone()]);
    let digest = reference.split_once('@').expect("a digest").1.to_owned();
    let work = common::out_dir("preflight");
    let approved =
        common::approved_bases(&work.join("approved-bases.yaml"), REPOSITORY, &[&digest]);

    let emulator = Emulate::start("e2b", &[]);
    let mut env = vec![
        ("E2B_API_KEY", fake_key),
        ("E2B_API_URL", emulator.get("E2B_API_URL")),
        ("E2B_DOMAIN", emulator.get("E2B_DOMAIN")),
        (CA_FILE_VAR, emulator.get(CA_FILE_VAR)),
        (RESOLVE_VAR, emulator.get(RESOLVE_VAR)),
        ("SANDBOX_MATRIX_BASE", reference.as_str()),
        ("SANDBOX_MATRIX_APPROVED_BASES", approved.as_str()),
    ];
    env.extend(static_auth);
    let ready = sandbox_matrix(&["preflight", "--variant", "e2b"], &env);
    let shown = text(&ready);
    assert_eq!(ready.status.code(), Some(0), "{shown}");
    for check in ["credentials", "API answers", "base by digest"] {
        assert!(row(&shown, "e2b", check).contains("| ready"), "{shown}");
    }
    assert!(
        row(&shown, "e2b", "base by digest").contains(&reference),
        "{shown}"
    );

    // Daytona, against its own emulator: the same base, its own CA and name pin.
    let daytona = Emulate::start("daytona", &[]);
    let mut daytona_env = vec![
        ("DAYTONA_API_KEY", fake_key),
        ("DAYTONA_API_URL", daytona.get("DAYTONA_API_URL")),
        (CA_FILE_VAR, daytona.get(CA_FILE_VAR)),
        (RESOLVE_VAR, daytona.get(RESOLVE_VAR)),
        ("SANDBOX_MATRIX_BASE", reference.as_str()),
        ("SANDBOX_MATRIX_APPROVED_BASES", approved.as_str()),
    ];
    daytona_env.extend(static_auth);
    let daytona_ready = sandbox_matrix(&["preflight", "--variant", "daytona"], &daytona_env);
    let daytona_shown = text(&daytona_ready);
    assert_eq!(daytona_ready.status.code(), Some(0), "{daytona_shown}");
    for check in ["credentials", "API answers", "base by digest"] {
        assert!(
            row(&daytona_shown, "daytona", check).contains("| ready"),
            "{daytona_shown}"
        );
    }
    assert!(!daytona_shown.contains(password), "{daytona_shown}");
    daytona.stop();

    // A wrong password: the base row names the registry, the variant is not ready.
    let wrong: Vec<(&str, &str)> = env
        .iter()
        .map(|&(k, v)| {
            if k == "SANDBOX_MATRIX_REGISTRY_PASSWORD" {
                (k, "sm-fake-wrong-password")
            } else {
                (k, v)
            }
        })
        .collect();
    let refused = sandbox_matrix(&["preflight", "--variant", "e2b"], &wrong);
    let refused_text = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{refused_text}");
    let base_row = row(&refused_text, "e2b", "base by digest");
    assert!(
        base_row.contains("missing") && base_row.contains(&registry.host),
        "{refused_text}"
    );
    // An unapproved digest: named with the approved file.
    let unapproved = common::approved_bases(&work.join("unapproved.yaml"), REPOSITORY, &[]);
    let other: Vec<(&str, &str)> = env
        .iter()
        .map(|&(k, v)| {
            if k == "SANDBOX_MATRIX_APPROVED_BASES" {
                (k, unapproved.as_str())
            } else {
                (k, v)
            }
        })
        .collect();
    let held = sandbox_matrix(&["preflight", "--variant", "e2b"], &other);
    let held_text = text(&held);
    assert_eq!(held.status.code(), Some(1), "{held_text}");
    assert!(
        row(&held_text, "e2b", "base by digest").contains("unapproved.yaml"),
        "{held_text}"
    );
    // No credential value in anything it printed.
    for output in [&shown, &refused_text, &held_text] {
        assert!(
            !output.contains(password) && !output.contains(fake_key),
            "{output}"
        );
    }
}
