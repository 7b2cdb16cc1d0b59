//! The datalayer variant's artifact on real parts: the reference environment built on the
//! local engine, pushed by digest to a local authenticated registry as an OCI index with an
//! attestation manifest, read back with plain HTTP calls (the layout BuildKit uses, an SBOM
//! listing python3 and jupyter_server that the SPDX project's validator accepts, an SLSA
//! provenance v1 that the in-toto attestation library accepts, naming the local base by its
//! image id and the build arguments by name, no build secret in any blob; the base-image
//! chain read from the provenance pulled anew, and failing on a tampered one that names an
//! unapproved base), then launched: the local copy removed,
//! pulled by digest as a read-only user who cannot push, `1+1` through Jupyter; cleanup
//! deletes the index and its manifests from the registry. Then the variant through the
//! CLI: `preflight` checks both logins and names a refused one; with no registry
//! configured and no `docker-registry` to start one, `run` skips the variant with the
//! install command; a run killed with kill -9 (before its build) takes the registry it
//! started down with it, and `sweep --run` removes what it left. Needs Docker (and, for the
//! push, the SDK venv's spdx-tools and in-toto-attestation).

use crate::common;

use std::io::Read;

use common::registry::{self, LocalRegistry};
use sandbox_providers::datalayer::{DatalayerProvider, Settings, attest, oci};
use sandbox_providers::registry::Repository;
use sandbox_providers::{
    BaseImage, BuildRequest, CredentialSource, Housekeeping as _, Provider, RegistryCredential,
    RunLabels, Secret,
};
use serde_json::Value;

const REPOSITORY: &str = "sandbox-matrix/environment";

/// The SDK venv's distribution that validates the pushed SBOM: the SPDX project's own
/// validator (`pyspdxtools`), not our reader.
pub const SDK: &str = "spdx-tools";
/// The SDK venv's distribution that validates the pushed provenance: the in-toto
/// attestation library, through harness/tests/sdk/validate_provenance.py.
const PROVENANCE_SDK: &str = "in-toto-attestation";
/// The SDK venv's distribution that checks the pushed SBOM for the NTIA minimum elements.
const NTIA_SDK: &str = "ntia-conformance-checker";

/// A deliberate fake, made up per run: a password the test's own registry is its only taker.
fn fake(what: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one(std::time::SystemTime::now());
    format!("sm-fake-{what}-{n:016x}")
}

fn credential(registry: &str, user: &str, password: &str, name: &str) -> RegistryCredential {
    RegistryCredential {
        registry: registry.to_owned(),
        username: user.to_owned(),
        password: Secret::new(name, password),
        source: CredentialSource::Static,
    }
}

/// A GET of `path` on the registry as `user`, answered 200, with `accept`.
async fn get(
    registry: &LocalRegistry,
    (user, password): (&str, &str),
    path: &str,
    accept: &str,
) -> bytes::Bytes {
    let answer = reqwest::Client::new()
        .get(format!("http://{}/v2/{REPOSITORY}/{path}", registry.host))
        .basic_auth(user, Some(password))
        .header("accept", accept)
        .send()
        .await
        .expect("the registry answers");
    assert_eq!(answer.status(), 200, "GET {path}");
    answer.bytes().await.expect("a body")
}

pub async fn pushes_an_index_with_attestations_and_launches_it_pulled_by_the_reader() {
    let (push_password, pull_password) = (fake("push"), fake("pull"));
    // A deliberate fake canary, handed to the build as a registry token would be.
    let canary = Secret::new("REGISTRY_TOKEN", fake("canary"));
    let registry =
        registry::start_with_puller(("pusher", &push_password), ("puller", &pull_password));
    let repository = Repository::parse(&format!("{}/{REPOSITORY}", registry.host)).unwrap();
    let settings = Settings {
        push: credential(
            &registry.host,
            "pusher",
            &push_password,
            "SANDBOX_MATRIX_DATALAYER_PUSH_PASSWORD",
        ),
        pull: credential(
            &registry.host,
            "puller",
            &pull_password,
            "SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD",
        ),
        repository: repository.clone(),
    };
    let docker = sandbox_matrix::run::variants::docker_provider(
        &common::root(),
        std::path::Path::new(env!("CARGO_BIN_EXE_sandbox-matrix")),
    )
    .await
    .expect("the docker variant connects");
    let provider = DatalayerProvider::new(docker, settings.clone());
    let base = BaseImage::local(sandbox_providers::docker::base::BASE_IMAGE);
    provider
        .prepare(&base, &|_| {})
        .await
        .expect("the local base is ready");
    let labels = RunLabels {
        run_id: format!("datalayer-push-{}", std::process::id()),
        variant: "datalayer".into(),
        scenario: "push".into(),
    };
    let request = BuildRequest {
        environment_dir: common::root().join("fixtures/environments/reference"),
        base: base.clone(),
        registry_credential: None,
        build_secrets: vec![canary.clone()],
        labels: labels.clone(),
    };
    let artifact = provider
        .build(&request, &|line| eprintln!("build: {line}"))
        .await
        .expect("built and pushed");
    let pushed = provider.pushed(&artifact).expect("pushed by this provider");
    let (_, index_digest) = artifact.id.split_once('@').expect("a reference by digest");
    assert_eq!(artifact.id, format!("{repository}@{index_digest}"));

    // The index and the attestation, read back as the puller with plain HTTP.
    let reader = ("puller", pull_password.as_str());
    let index_bytes = get(
        &registry,
        reader,
        &format!("manifests/{index_digest}"),
        oci::INDEX_TYPE,
    )
    .await;
    assert_eq!(oci::sha256(&index_bytes), index_digest);
    let index: Value = serde_json::from_slice(&index_bytes).unwrap();
    assert_eq!(index["mediaType"], oci::INDEX_TYPE);
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2, "{index}");
    assert_eq!(manifests[0]["platform"]["os"], "linux");
    assert_eq!(manifests[0]["digest"], pushed.image_manifest.as_str());
    let entry = &manifests[1];
    assert_eq!(entry["platform"]["os"], "unknown");
    assert_eq!(entry["platform"]["architecture"], "unknown");
    assert_eq!(
        entry["annotations"]["vnd.docker.reference.type"],
        "attestation-manifest"
    );
    assert_eq!(
        entry["annotations"]["vnd.docker.reference.digest"],
        pushed.image_manifest.as_str()
    );
    let attestation: Value = serde_json::from_slice(
        &get(
            &registry,
            reader,
            &format!("manifests/{}", entry["digest"].as_str().unwrap()),
            oci::MANIFEST_TYPE,
        )
        .await,
    )
    .unwrap();
    let mut statements = std::collections::HashMap::new();
    for layer in attestation["layers"].as_array().unwrap() {
        assert_eq!(layer["mediaType"], "application/vnd.in-toto+json");
        let predicate = layer["annotations"]["in-toto.io/predicate-type"]
            .as_str()
            .unwrap()
            .to_owned();
        let blob = get(
            &registry,
            reader,
            &format!("blobs/{}", layer["digest"].as_str().unwrap()),
            "*/*",
        )
        .await;
        let statement: Value = serde_json::from_slice(&blob).unwrap();
        assert_eq!(statement["predicateType"], predicate.as_str());
        assert_eq!(
            statement["subject"][0]["digest"]["sha256"],
            pushed.image_manifest.trim_start_matches("sha256:")
        );
        statements.insert(predicate, statement);
    }
    let sbom = &statements[attest::SPDX_PREDICATE]["predicate"];
    let names: Vec<&str> = sbom["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for wanted in ["python3", "jupyter_server"] {
        assert!(
            names.iter().any(|n| n.eq_ignore_ascii_case(wanted)),
            "the SBOM lists no {wanted}: {} packages",
            names.len()
        );
    }
    // An outside reader: the SPDX project's validator accepts the document as SPDX 2.3.
    let python = common::sdk::required_python(SDK, &common::sdk::pinned(SDK));
    let folder = common::out_dir("datalayer-push-sbom");
    let document = folder.join("sbom.spdx.json");
    std::fs::write(&document, serde_json::to_vec_pretty(sbom).unwrap()).unwrap();
    let validated = std::process::Command::new(python.with_file_name("pyspdxtools"))
        .arg("-i")
        .arg(&document)
        .output()
        .expect("pyspdxtools runs");
    assert!(
        validated.status.success(),
        "pyspdxtools refuses the pushed SBOM: {}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
    // A second consumer, as an SBOM's users run one: the NTIA minimum elements checker
    // (its own SPDX parser, then supplier, name, version, identifiers, relationships,
    // author and timestamp of every component).
    let python = common::sdk::required_python(NTIA_SDK, &common::sdk::pinned(NTIA_SDK));
    let checked = std::process::Command::new(python.with_file_name("ntia-checker"))
        .args(["--comply", "ntia", "--output", "json"])
        .arg(&document)
        .output()
        .expect("ntia-checker runs");
    assert!(
        checked.status.success(),
        "the NTIA minimum elements checker refuses the pushed SBOM: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let _ = std::fs::remove_dir_all(document.parent().unwrap());
    // An outside reader: the in-toto attestation library reads the statement and its SLSA
    // provenance v1 strictly, and builder.id and buildType are URIs.
    let statement = &statements[attest::SLSA_PREDICATE];
    let python = common::sdk::required_python(PROVENANCE_SDK, &common::sdk::pinned(PROVENANCE_SDK));
    let folder = common::out_dir("datalayer-push-provenance");
    let document = folder.join("provenance.json");
    std::fs::write(&document, serde_json::to_vec_pretty(statement).unwrap()).unwrap();
    let validated = std::process::Command::new(&python)
        .arg(common::root().join("harness/tests/sdk/validate_provenance.py"))
        .arg(&document)
        .output()
        .expect("the provenance validator runs");
    assert!(
        validated.status.success(),
        "the in-toto attestation library refuses the pushed provenance: {}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
    let _ = std::fs::remove_dir_all(document.parent().unwrap());
    let provenance = &statement["predicate"];
    let base_id = bollard::Docker::connect_with_local_defaults()
        .unwrap()
        .inspect_image(&base.reference)
        .await
        .unwrap()
        .id
        .unwrap();
    // The local base is named plainly as local, by the engine's image id.
    let dependency = &provenance["buildDefinition"]["resolvedDependencies"][0];
    assert_eq!(dependency["name"], sandbox_providers::PROVENANCE_BASE);
    assert_eq!(
        dependency["digest"]["sha256"],
        base_id.trim_start_matches("sha256:")
    );
    assert!(
        dependency["annotations"][sandbox_providers::PROVENANCE_LOCAL].is_string(),
        "{dependency}"
    );
    let args = provenance["buildDefinition"]["externalParameters"]["buildArgNames"].to_string();
    assert!(
        args.contains("REGISTRY_TOKEN") && args.contains("BASE_IMAGE"),
        "{args}"
    );
    // Built by the builder the engine offers (BuildKit on a Linux engine of API 1.39 on):
    // the builder is a URI, and the words say which path it took.
    let builder = provider.builder().await.expect("a builder");
    assert_eq!(
        provenance["runDetails"]["builder"]["id"],
        attest::BUILDER_ID
    );
    let words = provenance["buildDefinition"]["internalParameters"]["builder"]
        .as_str()
        .unwrap_or_default();
    assert!(words.contains(builder.describe()), "{words}");

    // The chain, read from the provenance pulled anew as the puller: the local base,
    // approved by its tag.
    let pulled = provider.provenance(&artifact).await.expect("pulled");
    assert_eq!(pulled.image_digest, pushed.image_manifest);
    let chain = sandbox_matrix::checks::chain::audit(
        &artifact.id,
        &pulled,
        None,
        sandbox_providers::docker::base::BASE_IMAGE,
    )
    .expect("a provenance of the launched image");
    assert!(chain.approved && chain.local, "{chain:?}");
    assert_eq!(chain.base_digest, base_id);
    assert_eq!(chain.approval, "local, approved by tag");
    // No secret in any pushed blob, the layers searched gunzipped.
    let image: Value = serde_json::from_slice(
        &get(
            &registry,
            reader,
            &format!("manifests/{}", pushed.image_manifest),
            oci::MANIFEST_TYPE,
        )
        .await,
    )
    .unwrap();
    let mut blobs = vec![index_bytes.to_vec()];
    for descriptor in image["layers"]
        .as_array()
        .unwrap()
        .iter()
        .chain([&image["config"], &attestation["config"]])
        .chain(attestation["layers"].as_array().unwrap())
    {
        let blob = get(
            &registry,
            reader,
            &format!("blobs/{}", descriptor["digest"].as_str().unwrap()),
            "*/*",
        )
        .await;
        if descriptor["mediaType"] == oci::LAYER_TYPE {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&blob[..])
                .read_to_end(&mut plain)
                .expect("a gzipped layer");
            blobs.push(plain);
        } else {
            blobs.push(blob.to_vec());
        }
    }
    for secret in [canary.expose(), &push_password, &pull_password] {
        let needle = secret.as_bytes();
        assert!(
            !blobs
                .iter()
                .any(|b| b.windows(needle.len()).any(|w| w == needle)),
            "a secret is in a pushed blob"
        );
    }

    // The puller cannot push: the same push as the reader is refused.
    let exported = oci::export(
        &bollard::Docker::connect_with_local_defaults().unwrap(),
        &pushed.image_id,
    )
    .await
    .expect("exported");
    let image = oci::image_manifest(&exported, &Default::default()).unwrap();
    let refused = oci::push(
        &repository,
        &settings.pull,
        &oci::assemble(image, oci::platform(&exported.config).unwrap(), &[]),
    )
    .await
    .expect_err("the puller may not push");
    assert!(refused.message.contains("403"), "{refused}");
    assert!(!refused.message.contains(&pull_password), "{refused}");

    // Launched from the pull by digest, as the reader: only the puller fetched the index.
    let from = registry.gate_log().len();
    let (sandbox, timings) = provider.launch(&artifact, &labels).await.expect("launched");
    assert!(timings.iter().any(|t| t.name == "pull"), "{timings:?}");
    // The gate saw who made each request: the index was fetched by the puller alone.
    let wanted = format!("GET /v2/{REPOSITORY}/manifests/{index_digest} 200");
    let index_gets: Vec<String> = registry.gate_log()[from..]
        .iter()
        .filter(|l| l.ends_with(&wanted))
        .cloned()
        .collect();
    assert!(!index_gets.is_empty(), "the engine did not GET the index");
    assert!(
        index_gets.iter().all(|l| l.starts_with("puller ")),
        "{index_gets:?}"
    );
    let (output, _) = provider.run_code(&sandbox, "1+1").await.expect("ran");
    assert_eq!(output.result.as_deref(), Some("2"));
    provider
        .shutdown(&sandbox, std::time::Duration::from_secs(5))
        .await
        .expect("stopped");
    for resource in provider.list_resources(&labels).await.unwrap() {
        provider.delete_resource(&resource).await.unwrap();
    }
    assert!(common::left_by_run(&labels.run_id).is_empty());

    // Cleanup deletes the index and its manifests by digest, with the push credential.
    let resource = provider
        .artifact_resource(&artifact)
        .expect("the artifact's resource");
    assert_eq!(resource.kind, "manifest");
    provider.delete_resource(&resource).await.expect("deleted");
    provider
        .delete_resource(&resource)
        .await
        .expect("deleting it again is not an error");
    for digest in [index_digest, &pushed.image_manifest] {
        let answer = reqwest::Client::new()
            .get(format!(
                "http://{}/v2/{REPOSITORY}/manifests/{digest}",
                registry.host
            ))
            .basic_auth("puller", Some(&pull_password))
            .header(
                "accept",
                format!("{}, {}", oci::INDEX_TYPE, oci::MANIFEST_TYPE),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{digest} is still served");
    }

    // A tampered attestation: the same image (its blobs are still held), pushed with a
    // provenance that names a base no approved bases file lists. The chain trusts what it
    // pulls, so it fails.
    let mut tampered = statement.clone();
    let forged = format!("sha256:{}", "e".repeat(64));
    tampered["predicate"]["buildDefinition"]["resolvedDependencies"][0] = serde_json::json!({
        "name": sandbox_providers::PROVENANCE_BASE,
        "uri": format!("pkg:docker/{}/someone/else@{forged}", registry.host),
        "digest": { "sha256": forged.trim_start_matches("sha256:") },
    });
    let image = oci::image_manifest(&exported, &Default::default()).unwrap();
    let tampered_index = oci::push(
        &repository,
        &settings.push,
        &oci::assemble(
            image,
            oci::platform(&exported.config).unwrap(),
            &[(attest::SLSA_PREDICATE, tampered)],
        ),
    )
    .await
    .expect("the tampered artifact is pushed");
    let tampered_artifact = sandbox_providers::Artifact {
        id: tampered_index.to_string(),
        kind: artifact.kind.clone(),
    };
    let pulled = provider
        .provenance(&tampered_artifact)
        .await
        .expect("the tampered provenance is pulled");
    let approved_bases = sandbox_matrix::checks::approved::ApprovedBases::load(
        &common::root().join(sandbox_matrix::checks::approved::APPROVED_BASES_FILE),
    )
    .expect("the project's approved bases");
    let chain = sandbox_matrix::checks::chain::audit(
        &tampered_artifact.id,
        &pulled,
        Some(&approved_bases),
        sandbox_providers::docker::base::BASE_IMAGE,
    )
    .expect("still a provenance of the image");
    assert!(!chain.approved && !chain.local, "{chain:?}");
    assert_eq!(chain.base_digest, forged);
    assert!(
        chain.approval.contains("someone/else is not listed"),
        "{}",
        chain.approval
    );
    oci::delete(&tampered_index, &settings.push)
        .await
        .expect("the tampered index is deleted");
}

/// The registry variables, cleared so a test sees only what it sets.
const REGISTRY_VARS: &[&str] = &[
    "SANDBOX_MATRIX_DATALAYER_REGISTRY",
    "SANDBOX_MATRIX_DATALAYER_PUSH_USER",
    "SANDBOX_MATRIX_DATALAYER_PUSH_PASSWORD",
    "SANDBOX_MATRIX_DATALAYER_PUSH_AUTH",
    "SANDBOX_MATRIX_DATALAYER_BUILDER",
    "SANDBOX_MATRIX_DOCKER_BUILDER",
    "SANDBOX_MATRIX_DATALAYER_PULL_USER",
    "SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD",
    "SANDBOX_MATRIX_BASE",
];

/// `sandbox-matrix <args>` on this checkout with the registry variables cleared, then
/// `env` set; its exit code and everything it printed.
fn cli(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    cli_with(args, env, |_| {})
}

/// [`cli`], the command first given to `prepare`.
fn cli_with(
    args: &[&str],
    env: &[(&str, &str)],
    prepare: impl FnOnce(&mut std::process::Command),
) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    command.args(args).arg("--root").arg(common::root());
    for name in REGISTRY_VARS {
        command.env_remove(name);
    }
    prepare(&mut command);
    let output = command
        .envs(env.iter().copied())
        .output()
        .expect("sandbox-matrix runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

/// The preflight table's row of the datalayer variant's `check`.
fn preflight_row<'a>(shown: &'a str, check: &str) -> &'a str {
    shown
        .lines()
        .find(|l| l.contains("| datalayer") && l.contains(&format!("| {check}")))
        .unwrap_or_else(|| panic!("no datalayer × {check} row in:\n{shown}"))
}

pub fn preflight_checks_both_logins_and_names_a_refused_one() {
    let (push_password, pull_password) = (fake("push"), fake("pull"));
    let registry =
        registry::start_with_puller(("pusher", &push_password), ("puller", &pull_password));
    let repository = format!("{}/{REPOSITORY}", registry.host);
    let settings = |pull: &str| {
        [
            ("SANDBOX_MATRIX_DATALAYER_REGISTRY", repository.clone()),
            ("SANDBOX_MATRIX_DATALAYER_PUSH_USER", "pusher".to_owned()),
            (
                "SANDBOX_MATRIX_DATALAYER_PUSH_PASSWORD",
                push_password.clone(),
            ),
            ("SANDBOX_MATRIX_DATALAYER_PULL_USER", "puller".to_owned()),
            ("SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD", pull.to_owned()),
        ]
    };
    let good = settings(&pull_password);
    let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, shown) = cli(&["preflight", "--variant", "datalayer"], &good);
    assert_eq!(code, Some(0), "{shown}");
    let answers = preflight_row(&shown, "API answers");
    assert!(
        answers.contains("push user pusher logs in")
            && answers.contains("read-only user puller logs in"),
        "{answers}"
    );

    let wrong = fake("wrong");
    let bad = settings(&wrong);
    let bad: Vec<(&str, &str)> = bad.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, shown) = cli(&["preflight", "--variant", "datalayer"], &bad);
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        preflight_row(&shown, "API answers").contains("refused the login of puller"),
        "{shown}"
    );
    for value in [&push_password, &pull_password, &wrong] {
        assert!(
            !shown.contains(value.as_str()),
            "a password was printed: {shown}"
        );
    }
}

pub async fn the_push_logs_in_with_a_login_token_from_ecr_in_preflight_and_in_a_run() {
    // The registry's push user is ECR's: AWS, with the login token as its password.
    let (token, pull_password) = (fake("ecr-token"), fake("pull"));
    let registry = registry::start_with_puller(("AWS", &token), ("puller", &pull_password));
    let ecr = wiremock::MockServer::start().await;
    let repository = format!("{}/{REPOSITORY}", registry.host);
    let out = common::out_dir("datalayer-ecr");
    let cli_ecr = |args: Vec<String>, ecr_uri: String| {
        let env = [
            ("SANDBOX_MATRIX_DATALAYER_REGISTRY", repository.clone()),
            ("SANDBOX_MATRIX_DATALAYER_PUSH_AUTH", "ecr".to_owned()),
            ("SANDBOX_MATRIX_DATALAYER_PULL_USER", "puller".to_owned()),
            (
                "SANDBOX_MATRIX_DATALAYER_PULL_PASSWORD",
                pull_password.clone(),
            ),
            ("AWS_ENDPOINT_URL_ECR", ecr_uri),
            ("SANDBOX_MATRIX_DATALAYER_BUILDER", "classic".to_owned()),
        ];
        tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli_with(&args, &env, common::ecr::fake_aws)
        })
    };
    let preflight = |ecr_uri: String| {
        cli_ecr(
            ["preflight", "--variant", "datalayer"]
                .map(String::from)
                .to_vec(),
            ecr_uri,
        )
    };

    common::ecr::answering(&ecr, &token).await;
    let (code, shown) = preflight(ecr.uri()).await.expect("preflight ran");
    assert_eq!(code, Some(0), "{shown}");
    let answers = preflight_row(&shown, "API answers");
    assert!(
        answers.contains("push user AWS logs in")
            && answers.contains("read-only user puller logs in"),
        "{answers}"
    );

    // A run pushes as AWS, pulls as the reader, and writes the token nowhere; its rebuild
    // (pushed, never launched) leaves no image behind either, not even the intermediate
    // images of the classic builder, which this run is made to use.
    let run = [
        "run",
        "--variant",
        "datalayer",
        "--scenario",
        "lifecycle",
        "--scenario",
        "rebuild",
        "--out",
        out.to_str().expect("a UTF-8 path"),
    ]
    .map(String::from)
    .to_vec();
    let (code, shown) = cli_ecr(run, ecr.uri()).await.expect("the run ran");
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("as AWS (an ECR login token), pulling as puller"),
        "{shown}"
    );
    assert!(!shown.contains(&token), "the token was printed: {shown}");
    let run_id = std::fs::read_dir(&out)
        .expect("the run's reports")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name != "latest")
        .expect("a run folder");
    assert_eq!(
        common::left_by_run(&run_id),
        Vec::<String>::new(),
        "{shown}"
    );
    let results =
        std::fs::read_to_string(out.join(&run_id).join("results.json")).expect("the run's results");
    assert!(
        results.contains("builder: classic builder"),
        "the build did not say it used the classic builder"
    );
    // The rebuild's push finds in the registry every layer it shares with the build: all
    // the base's (the launch's pull replaced the local image, so the classic builder makes
    // the environment's own COPY layer again, with new times in it).
    let held = results
        .split("layers already in the registry")
        .next()
        .filter(|before| before.len() < results.len())
        .and_then(|before| before.rsplit("; ").next())
        .and_then(|counts| counts.trim().split_once(" of "))
        .unwrap_or_else(|| panic!("the rebuild's push gzipped its layers again"));
    let (held, layers): (usize, usize) = (
        held.0.parse().expect("a count"),
        held.1.parse().expect("a count"),
    );
    assert!(
        layers >= 2 && held + 1 >= layers,
        "{held} of {layers} layers held: the base's were gzipped again"
    );
    common::assert_no_value_in_tree(&out, &[Secret::new("ECR_LOGIN_TOKEN", token.clone())]);

    // A token the registry does not take: the push login is refused, by name.
    let wrong = fake("wrong-token");
    common::ecr::answering(&ecr, &wrong).await;
    let (code, shown) = preflight(ecr.uri()).await.expect("preflight ran");
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        preflight_row(&shown, "API answers").contains("refused the login of AWS"),
        "{shown}"
    );
    for value in [&token, &wrong, &pull_password] {
        assert!(
            !shown.contains(value.as_str()),
            "a password was printed: {shown}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

pub fn without_a_registry_or_the_tools_to_start_one_the_variant_is_skipped_with_the_install_command()
 {
    // A PATH with neither docker-registry nor htpasswd on it.
    let empty = common::out_dir("datalayer-empty-path");
    let path = empty.to_str().expect("a UTF-8 path");
    let out = common::out_dir("datalayer-skipped");
    let (_, shown) = cli(
        &[
            "run",
            "--variant",
            "datalayer",
            "--scenario",
            "lifecycle",
            "--out",
            out.to_str().expect("a UTF-8 path"),
        ],
        &[("PATH", path)],
    );
    assert!(
        shown.contains(
            "datalayer::lifecycle: skipped, no registry configured (SANDBOX_MATRIX_DATALAYER_REGISTRY unset) and none can be started here: docker-registry and htpasswd not found (apt-get install docker-registry apache2-utils)"
        ),
        "{shown}"
    );
    let (code, shown) = cli(&["preflight", "--variant", "datalayer"], &[("PATH", path)]);
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        preflight_row(&shown, "credentials")
            .contains("apt-get install docker-registry apache2-utils"),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&empty);
}

/// Pids of running `docker-registry` processes whose command line names `needle`.
fn registries_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc lists processes")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.starts_with("docker-registry") && cmdline.contains(needle))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

pub fn a_killed_run_takes_its_registry_down_and_sweep_removes_what_it_left() {
    use std::io::{BufRead, BufReader};
    let out = common::out_dir("datalayer-killed");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"));
    for name in REGISTRY_VARS {
        command.env_remove(name);
    }
    let mut child = command
        .args([
            "run",
            "--variant",
            "datalayer",
            "--scenario",
            "lifecycle",
            "--root",
        ])
        .arg(common::root())
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandbox-matrix starts");
    let lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    let (mut host, mut run_id, mut seen) = (None, None, Vec::new());
    for line in lines.map_while(Result::ok) {
        if let Some((_, rest)) = line.split_once("started one for this run on ") {
            host = rest.split_whitespace().next().map(str::to_owned);
        }
        // Killed once the run has its id and its registry, before it builds: a build the
        // engine is still committing would race the sweep.
        if let Some(rest) = line.strip_prefix("run ") {
            run_id = rest.split(':').next().map(str::to_owned);
            seen.push(line);
            break;
        }
        seen.push(line);
    }
    let host = host.unwrap_or_else(|| panic!("no registry started: {seen:#?}"));
    let run_id = run_id.unwrap_or_else(|| panic!("no run id printed: {seen:#?}"));
    let port = host.rsplit(':').next().expect("host:port").to_owned();
    // The registry behind the read-only gate lives in the run's folder, which its command names.
    let folder = format!("sandbox-matrix-{run_id}");
    assert!(
        !registries_naming(&folder).is_empty(),
        "no docker-registry of the run ({folder}, gate on {port}) is running"
    );
    child.kill().expect("kill -9");
    child.wait().expect("the run ends");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !registries_naming(&folder).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        registries_naming(&folder),
        Vec::<String>::new(),
        "the run's registry outlived it"
    );

    let (code, swept) = cli(
        &[
            "sweep",
            "--run",
            &run_id,
            "--variant",
            "docker",
            "--variant",
            "datalayer",
            "--out",
            out.to_str().expect("a UTF-8 path"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{swept}");
    let scratch = std::env::temp_dir().join(&folder);
    assert!(!scratch.exists(), "{} is left: {swept}", scratch.display());
    assert!(common::left_by_run(&run_id).is_empty(), "{swept}");
    let _ = std::fs::remove_dir_all(&out);
}
