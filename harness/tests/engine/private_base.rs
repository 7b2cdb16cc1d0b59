//! The live path on real parts: a local authenticated registry (Debian's docker-registry
//! with htpasswd), the ECR API stood in by wiremock answering GetAuthorizationToken with a
//! token that registry accepts, `bootstrap --push`, then lifecycle and core tier on docker
//! with the base pulled by digest through the registry using the token from aws-sdk-ecr.
//! A wrong token fails the build naming the registry, and the token is found nowhere in the
//! run folder or the image. Everything runs through the CLI binary. Needs Docker.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::Images;
use common::registry;
use sandbox_matrix::checks::secrets;
use sandbox_matrix::model::results::{self, StepStatus};
use sandbox_providers::Secret;
use wiremock::MockServer;

const REPOSITORY: &str = "sandbox-matrix/contract-base";

/// A fake login token, made up per test run; the local registry is its only taker.
/// A deliberate fake canary login token, made up per run: it grants nothing anywhere but the
/// test's own registry, and the test looks for it everywhere afterwards.
fn fake_token(what: &str) -> String {
    format!("sm-fake-ecr-{what}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The CLI with the registry's environment: an ECR login token from `ecr`, fake AWS keys.
fn cli(ecr: &MockServer, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command
        .args(args)
        .arg("--root")
        .arg(common::root())
        .env_remove("SANDBOX_MATRIX_BASE")
        .env_remove("SANDBOX_MATRIX_APPROVED_BASES")
        .env("SANDBOX_MATRIX_REGISTRY_AUTH", "ecr")
        .env("AWS_ENDPOINT_URL_ECR", ecr.uri());
    common::ecr::fake_aws(&mut command);
    for (key, value) in extra {
        command.env(key, value);
    }
    command.output().expect("the CLI runs")
}

/// `run --variant docker` of `scenarios` into `out`, through [`cli`].
fn run_docker(ecr: &MockServer, scenarios: &[&str], out: &Path, extra: &[(&str, &str)]) -> Output {
    let out = out.display().to_string();
    let mut args = vec!["run", "--variant", "docker"];
    for scenario in scenarios {
        args.extend(["--scenario", scenario]);
    }
    args.extend(["--out", &out]);
    cli(ecr, &args, extra)
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The one run folder under `out`.
fn run_folder(out: &Path) -> std::path::PathBuf {
    std::fs::read_dir(out)
        .expect("out folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_dir() && p.join("results.json").is_file())
        .expect("a run folder with results.json")
}

pub async fn the_base_is_pulled_by_digest_with_a_login_token_from_ecr() {
    let token = fake_token("token");
    let registry = registry::start("AWS", &token);
    let ecr = MockServer::start().await;
    common::ecr::answering(&ecr, &token).await;
    let target = format!("{}/{REPOSITORY}", registry.host);
    let mut images = Images(vec![format!("{target}:v1")]);

    // Push the base with the token aws-sdk-ecr got from the stand-in ECR API.
    let pushed = cli(&ecr, &["bootstrap", "--push", &target], &[]);
    assert!(pushed.status.success(), "{}", text(&pushed));
    let stdout = String::from_utf8_lossy(&pushed.stdout).to_string();
    let reference = common::pushed_reference(&pushed.stdout, &text(&pushed));
    let digest = reference
        .split_once('@')
        .map(|(_, d)| d.to_owned())
        .expect("a digest");
    assert!(stdout.contains(&format!("digest: {digest}")), "{stdout}");
    images.0.push(reference.clone());

    let work = common::out_dir("private-base");
    let approved =
        common::approved_bases(&work.join("approved-bases.yaml"), REPOSITORY, &[&digest]);
    // The engine must not have it by digest before the run: the pull goes to the registry.
    let _ = Command::new("docker").args(["rmi", &reference]).output();

    // Lifecycle and core tier, the base pulled by digest through the registry.
    let out = work.join("good");
    let log_from = registry.log_len();
    let run = run_docker(
        &ecr,
        &["lifecycle", "core-tier"],
        &out,
        &[
            ("SANDBOX_MATRIX_BASE", &reference),
            ("SANDBOX_MATRIX_APPROVED_BASES", &approved),
        ],
    );
    assert!(run.status.success(), "{}", text(&run));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "base {reference}: from registry {}",
            registry.host
        )),
        "{stderr}"
    );
    // The base comes from the registry: the docker variant bootstraps nothing locally.
    assert!(
        stderr.contains(&format!(
            "the run's base is {reference}: nothing to bootstrap"
        )),
        "{stderr}"
    );
    // The engine resolved the digest through the registry, logged in with the token (the
    // registry answers 200 only to an authorised request): a GET of the manifest by digest,
    // or a HEAD when its content store holds that manifest already. The one build of the
    // run (core tier reuses lifecycle's artifact) first checked the base with the token,
    // by digest.
    let engine = registry.manifest_requests(log_from, "GET", REPOSITORY, &digest, true)
        + registry.manifest_requests(log_from, "HEAD", REPOSITORY, &digest, true);
    let checks = registry.manifest_requests(log_from, "HEAD", REPOSITORY, &digest, false);
    assert!(
        engine >= 1 && checks == 1,
        "engine requests by digest: {engine}, checks: {checks}; the registry logged:\n{}",
        &registry.access_log()[log_from..]
    );
    let folder = run_folder(&out);
    let results = results::load(&folder.join("results.json")).expect("results load");
    assert_eq!(results.scenarios.len(), 2);
    // The scan looked for every form of the canary and of the real token.
    let forms = secrets::forms(&sandbox_matrix::run::runner::fake_canary()).len()
        + secrets::forms(&Secret::new("REGISTRY_CREDENTIAL", &token)).len();
    for scenario in &results.scenarios {
        assert!(
            scenario.passed(),
            "{}: {:?}",
            scenario.scenario,
            common::failures(scenario)
        );
        assert_eq!(
            scenario.base_credential.as_deref(),
            Some("ECR login token, made for this run")
        );
        assert!(
            scenario.secrets_found.is_empty(),
            "{:?}",
            scenario.secrets_found
        );
    }
    let lifecycle = results
        .scenarios
        .iter()
        .find(|s| s.scenario == "lifecycle")
        .expect("lifecycle ran");
    let scan = lifecycle.step("secrets-scan").expect("a secrets scan");
    assert_eq!(scan.status, StepStatus::Passed);
    assert!(
        scan.log
            .iter()
            .any(|l| l.ends_with(&format!("for {forms} forms"))),
        "{:?}",
        scan.log
    );
    assert!(common::left_by_run(&results.provenance.run_id).is_empty());
    let summary = std::fs::read_to_string(folder.join("summary.md")).expect("summary");
    assert!(
        summary
            .contains("| Credential for the private base     | ECR login token, made for this run"),
        "{summary}"
    );
    // No form of the token anywhere in the run folder.
    common::assert_no_value_in_tree(
        &out,
        &secrets::forms(&Secret::new("REGISTRY_CREDENTIAL", &token)),
    );

    // A digest the approved file does not list fails the build, naming the file.
    let unapproved = common::approved_bases(&work.join("unapproved.yaml"), REPOSITORY, &[]);
    let refused = run_docker(
        &ecr,
        &["lifecycle"],
        &work.join("unapproved"),
        &[
            ("SANDBOX_MATRIX_BASE", &reference),
            ("SANDBOX_MATRIX_APPROVED_BASES", &unapproved),
        ],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let results =
        results::load(&run_folder(&work.join("unapproved")).join("results.json")).expect("loads");
    let build = results.scenarios[0].step("build").expect("build");
    assert!(
        matches!(&build.status, StepStatus::Failed { reason } if reason.contains("is not approved") && reason.contains(&unapproved)),
        "{:?}",
        build.status
    );

    // A tag is refused before anything runs.
    let tagged = run_docker(
        &ecr,
        &["lifecycle"],
        &work.join("tag"),
        &[("SANDBOX_MATRIX_BASE", &format!("{target}:v1"))],
    );
    assert_eq!(tagged.status.code(), Some(2), "{}", text(&tagged));
    assert!(
        String::from_utf8_lossy(&tagged.stderr).contains("not by digest"),
        "{}",
        text(&tagged)
    );

    // A wrong token: the ECR API answers one the registry refuses; the build fails naming it.
    let wrong = fake_token("wrong");
    common::ecr::answering(&ecr, &wrong).await;
    let out = work.join("wrong");
    let failed = run_docker(
        &ecr,
        &["lifecycle"],
        &out,
        &[
            ("SANDBOX_MATRIX_BASE", &reference),
            ("SANDBOX_MATRIX_APPROVED_BASES", &approved),
        ],
    );
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    let results = results::load(&run_folder(&out).join("results.json")).expect("loads");
    let build = results.scenarios[0].step("build").expect("build");
    let expected = format!(
        "registry {} refused the credential (ECR login token)",
        registry.host
    );
    assert!(
        matches!(&build.status, StepStatus::Failed { reason } if reason.contains(&expected)),
        "{:?}",
        build.status
    );
    assert!(common::left_by_run(&results.provenance.run_id).is_empty());
    common::assert_no_value_in_tree(
        &out,
        &secrets::forms(&Secret::new("REGISTRY_CREDENTIAL", &wrong)),
    );
    let _ = std::fs::remove_dir_all(&work);
    drop(images);
    drop(registry);
}
