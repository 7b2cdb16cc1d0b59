//! `sandbox-matrix emulate e2b`, the binary, as a client meets it: the e2b client runs the
//! lifecycle over HTTPS through E2B's live host forms (`https://api.<domain>:<port>`,
//! `https://<port>-<id>.<domain>:<port>`), with exactly the settings the command prints
//! (the test CA to trust, the name pin); and without the CA the client refuses the
//! emulator, so TLS is really checked. The emulator also refuses what E2B refuses.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine emulate_e2b::`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::emulate::Emulate;
use sandbox_emulators::Emulator as _;
use sandbox_providers::Secret;
use sandbox_providers::api::network::RESOLVE_VAR;
use sandbox_providers::api::{Endpoints, Mode, Volatiles};
use sandbox_providers::e2b::E2bProvider;
use serde_json::{Value, json};

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "e2b_fake_emulate_key_0000";

/// An e2b client configured as the printed settings say; `trust` adds the CA.
fn client(emulate: &Emulate, trust: bool, volatiles: Arc<Volatiles>) -> E2bProvider {
    E2bProvider::with_network(
        Endpoints {
            api_base: emulate.get("E2B_API_URL").to_owned(),
            sandbox_domain: emulate.get("E2B_DOMAIN").to_owned(),
        },
        Mode::Live,
        // Fake: the emulator checks only that a key is sent.
        Secret::new("E2B_API_KEY", FAKE_KEY),
        volatiles,
        Default::default(),
        &emulate.network(trust),
    )
    .expect("an e2b client")
}

pub async fn the_e2b_client_runs_the_lifecycle_against_emulate_over_https_through_live_host_forms()
{
    let emulate = Emulate::start("e2b", &[]);
    assert!(
        emulate.get("E2B_API_URL").starts_with("https://api.")
            && emulate.get(RESOLVE_VAR).ends_with("=127.0.0.1"),
        "{:?}",
        emulate.settings
    );
    common::emulate::client_runs_the_lifecycle(emulate, "e2b", client).await;
}

/// E2B's API as a test calls it by hand: raw requests to an e2b emulator on the default
/// domain, with the fake key.
struct RawE2b {
    emulator: sandbox_emulators::e2b::Emulator,
    http: reqwest::Client,
}

/// A sandbox [`RawE2b::create`] made: its id and envd token.
struct RawSandbox {
    id: String,
    token: String,
}

impl RawE2b {
    async fn start() -> Self {
        use sandbox_emulators::e2b::{DEFAULT_DOMAIN, Emulator, Options};
        let docker = common::prepared_docker(&common::root()).await;
        let emulator = Emulator::start(
            docker,
            Options {
                port: 0,
                domain: DEFAULT_DOMAIN.to_owned(),
                run_id: None,
                kill_after: None,
                start_cmd: None,
            },
        )
        .await
        .expect("the emulator starts");
        let http = emulator
            .network()
            .apply(reqwest::Client::builder())
            .expect("the test network")
            .build()
            .expect("an HTTP client");
        Self { emulator, http }
    }

    /// `method` on the control plane's `path`, with a JSON `body`: its status and JSON.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("https://api.{}{path}", self.emulator.domain());
        let mut request = self.http.request(method, url).header("X-API-Key", FAKE_KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the emulator answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A new template and its build: `(templateID, buildID)`.
    async fn template(&self, run_id: &str) -> (String, String) {
        let (status, created) = self
            .call(
                reqwest::Method::POST,
                "/v3/templates",
                Some(json!({"name": format!("sm-{run_id}")})),
            )
            .await;
        assert_eq!(status, 202, "{created}");
        let id = |key: &str| created[key].as_str().expect("an id").to_owned();
        (id("templateID"), id("buildID"))
    }

    /// Waits up to 2 minutes for a build to end: its last status answer.
    async fn wait_build(&self, tid: &str, bid: &str) -> Value {
        for _ in 0..600 {
            let (_, info) = self
                .call(
                    reqwest::Method::GET,
                    &format!("/templates/{tid}/builds/{bid}/status"),
                    None,
                )
                .await;
            if matches!(info["status"].as_str(), Some("ready" | "error")) {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the build did not end within 2 minutes");
    }

    /// A sandbox of `template`, labelled with `run_id`, for 300 s.
    async fn create(&self, template: &str, run_id: &str) -> RawSandbox {
        self.create_with(template, run_id, json!({"timeout": 300}))
            .await
    }

    /// A sandbox of `template`, labelled with `run_id`, the create's other fields `more`.
    async fn create_with(&self, template: &str, run_id: &str, more: Value) -> RawSandbox {
        let mut body = json!({"templateID": template,
                              "metadata": {"sandbox-matrix.run": run_id, "sandbox-matrix.scenario": "raw"}});
        for (k, v) in more.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let (status, sandbox) = self
            .call(reqwest::Method::POST, "/sandboxes", Some(body))
            .await;
        assert_eq!(status, 201, "{sandbox}");
        let text = |key: &str| sandbox[key].as_str().expect(key).to_owned();
        RawSandbox {
            id: text("sandboxID"),
            token: text("envdAccessToken"),
        }
    }

    /// envd's process start in `sandbox` as the Basic user `user`: status and body (its
    /// text, lossy: a Connect envelope's length prefix is binary).
    async fn process(&self, sandbox: &RawSandbox, user: &str, message: Value) -> (u16, String) {
        let (status, body) = self.process_bytes(sandbox, user, message).await;
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// envd's process start in `sandbox` as the Basic user `user`: status and body bytes.
    async fn process_bytes(
        &self,
        sandbox: &RawSandbox,
        user: &str,
        message: Value,
    ) -> (u16, Vec<u8>) {
        let body = sandbox_providers::api::cassette::encode_connect(0, &message)
            .expect("a Connect envelope");
        let response = self
            .http
            .post(format!(
                "https://{}-{}.{}/process.Process/Start",
                sandbox_providers::e2b::ENVD_PORT,
                sandbox.id,
                self.emulator.domain()
            ))
            .header("X-Access-Token", &sandbox.token)
            .header(
                "Authorization",
                format!("Basic {}", BASE64.encode(format!("{user}:"))),
            )
            .header("Content-Type", "application/connect+json")
            .body(body)
            .send()
            .await
            .expect("envd answers");
        (
            response.status().as_u16(),
            response
                .bytes()
                .await
                .map(|b| b.to_vec())
                .unwrap_or_default(),
        )
    }

    /// What `command` prints, run by bash as root in `sandbox`.
    async fn output(&self, sandbox: &RawSandbox, command: &str) -> String {
        let (status, body) = self
            .process_bytes(
                sandbox,
                "root",
                json!({"process": {"cmd": "/bin/bash", "args": ["-c", command]}}),
            )
            .await;
        assert_eq!(status, 200, "{command}: {}", String::from_utf8_lossy(&body));
        let frames =
            sandbox_providers::api::cassette::decode_connect(&body).expect("Connect frames");
        frames
            .iter()
            .filter_map(|f| f.message["event"]["data"]["stdout"].as_str())
            .map(|b| String::from_utf8_lossy(&BASE64.decode(b).expect("base64")).into_owned())
            .collect()
    }

    async fn stop(self, sandbox: Option<&RawSandbox>) {
        if let Some(sandbox) = sandbox {
            let path = format!("/sandboxes/{}", sandbox.id);
            let _ = self.call(reqwest::Method::DELETE, &path, None).await;
        }
        self.emulator.stop();
        self.emulator.cleanup().await;
    }
}

/// The emulator refuses what E2B refuses: a ready command with no start command, and the
/// code channel of a sandbox whose template has no start command does not answer.
/// A template without a start command leaves its code channel closed; its sandbox's envd
/// refuses, as envd does, an empty Basic user (e2b-dev/infra 54693ff,
/// `packages/envd/internal/permissions/authenticate.go`), and the emulator refuses by name
/// what it does not implement (a `pty`, `set_timeout`).
pub async fn without_a_start_command_the_code_channel_does_not_answer() {
    let raw = RawE2b::start().await;
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let (tid, bid) = raw.template(&run_id).await;
    let build = format!("/v2/templates/{tid}/builds/{bid}");
    let base = sandbox_providers::docker::base::BASE_IMAGE;
    let (status, refused) = raw
        .call(
            reqwest::Method::POST,
            &build,
            Some(json!({"fromImage": base, "steps": [], "readyCmd": "true"})),
        )
        .await;
    assert_eq!(status, 400, "a readyCmd without startCmd: {refused}");
    let (status, _) = raw
        .call(
            reqwest::Method::POST,
            &build,
            // A contract image's code channel runs as its user.
            Some(json!({"fromImage": base, "steps": [{"type": "USER", "args": ["datalayer"]}]})),
        )
        .await;
    assert_eq!(status, 202);
    let built = raw.wait_build(&tid, &bid).await;
    assert_eq!(built["status"], "ready", "{built}");
    let sandbox = raw.create(&format!("{tid}:{bid}"), &run_id).await;
    let health = raw
        .http
        .get(format!(
            "https://49999-{}.{}/health",
            sandbox.id,
            raw.emulator.domain()
        ))
        .header("X-Access-Token", &sandbox.token)
        .send()
        .await
        .expect("the emulator answers for the sandbox");
    let status = health.status().as_u16();
    let echo = json!({"process": {"cmd": "echo", "args": ["hi"]}, "stdin": false});
    // An empty user, as `RUN [command, ""]` made the builder send.
    let empty_user = raw.process(&sandbox, "", echo.clone()).await;
    let root = raw.process(&sandbox, "root", echo.clone()).await;
    let pty = raw
        .process(
            &sandbox,
            "root",
            json!({"process": {"cmd": "echo"}, "pty": {"size": {"cols": 80, "rows": 24}}}),
        )
        .await;
    let (timeout_status, timeout) = raw
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{}/timeout", sandbox.id),
            Some(json!({"timeout": 60})),
        )
        .await;
    raw.stop(Some(&sandbox)).await;
    assert_eq!(
        status, 502,
        "the code channel of a template without a start command answered"
    );
    assert_eq!(empty_user.0, 401, "{empty_user:?}");
    assert!(
        empty_user.1.contains("invalid username: ''"),
        "{empty_user:?}"
    );
    assert_eq!(root.0, 200, "{root:?}");
    assert_eq!(pty.0, 501, "{pty:?}");
    assert!(pty.1.contains("`pty`"), "{pty:?}");
    assert_eq!(timeout_status, 501, "{timeout}");
    assert!(
        timeout.to_string().contains("POST /sandboxes/"),
        "{timeout}"
    );
}

/// The emulator builds the steps it is sent, as E2B's builder runs them (e2b-dev/infra
/// 54693ff, `packages/orchestrator/pkg/template/build/`): the user phase creates E2B's
/// build user `user` and the steps start as it, in its home; `USER` creates a missing
/// user; a RUN goes as its named user; a COPY's gzipped upload lands, owned by its owner.
/// A RUN as a user who does not exist fails the build, and envd refuses a process start
/// as one (`invalid username`). A create's `envVars` reach envd's processes, and a sandbox
/// is killed at its `timeout`.
pub async fn the_e2b_emulator_builds_the_steps_it_is_sent_as_e2bs_builder_runs_them() {
    let raw = RawE2b::start().await;
    let run_id = sandbox_matrix::run::runner::new_run_id();
    let base = sandbox_providers::docker::base::BASE_IMAGE;
    let (tid, bid) = raw.template(&run_id).await;
    let upload = {
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(6);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, "copied.txt", &b"copied"[..])
            .expect("an entry");
        tar.into_inner().expect("tar").finish().expect("gzip")
    };
    let (status, link) = raw
        .call(
            reqwest::Method::GET,
            &format!("/templates/{tid}/files/h1"),
            None,
        )
        .await;
    assert_eq!(status, 201, "{link}");
    let put = raw
        .http
        .put(link["url"].as_str().expect("an upload url"))
        .body(upload)
        .send()
        .await
        .expect("the upload is taken");
    assert!(put.status().is_success(), "{put:?}");
    let steps = json!([
        {"type": "RUN", "args": ["id -un > who-default && pwd >> who-default && mv who-default /tmp/"]},
        {"type": "USER", "args": ["builder2"]},
        {"type": "RUN", "args": ["id -un > /tmp/who-after-user"]},
        {"type": "RUN", "args": ["id -un > /tmp/who-named", "datalayer"]},
        {"type": "COPY", "args": ["copied.txt", "/opt/copied.txt", "datalayer:users", ""], "filesHash": "h1"},
        // A contract image's code channel runs as its user.
        {"type": "USER", "args": ["datalayer"]},
    ]);
    let (status, answer) = raw
        .call(
            reqwest::Method::POST,
            &format!("/v2/templates/{tid}/builds/{bid}"),
            Some(json!({"fromImage": base, "steps": steps})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let built = raw.wait_build(&tid, &bid).await;
    assert_eq!(built["status"], "ready", "{built}");
    let sandbox = raw
        .create_with(
            &format!("{tid}:{bid}"),
            &run_id,
            json!({"timeout": 300, "envVars": {"FROM_CREATE": "envd's"}}),
        )
        .await;
    let env = raw.output(&sandbox, "echo \"$FROM_CREATE\"").await;
    let files = raw
        .output(
            &sandbox,
            "cat /tmp/who-default /tmp/who-after-user /tmp/who-named /opt/copied.txt; echo; stat -c %U /opt/copied.txt",
        )
        .await;
    // The base phase's marks (provision.sh for the debian family), readable by any user.
    let provisioned = raw
        .output(
            &sandbox,
            "cat /etc/profile.d/shell.sh /usr/local/share/e2b/distro.env /etc/chrony.conf; \
             test -e /etc/machine-id || echo no machine-id; test -e /usr/local/bin/provision.sh || echo removed",
        )
        .await;
    let created_user = raw
        .process(
            &sandbox,
            "builder2",
            json!({"process": {"cmd": "id", "args": ["-un"]}}),
        )
        .await;
    let ghost_start = raw
        .process(&sandbox, "ghost", json!({"process": {"cmd": "id"}}))
        .await;

    let (tid2, bid2) = raw.template(&format!("{run_id}-ghost")).await;
    let (status, _) = raw
        .call(
            reqwest::Method::POST,
            &format!("/v2/templates/{tid2}/builds/{bid2}"),
            Some(json!({"fromImage": base, "steps": [{"type": "RUN", "args": ["true", "ghost"]}]})),
        )
        .await;
    assert_eq!(status, 202);
    let ghost_build = raw.wait_build(&tid2, &bid2).await;
    // A sandbox is killed at its timeout, and E2B then no longer has it.
    let brief = raw
        .create_with(&format!("{tid}:{bid}"), &run_id, json!({"timeout": 2}))
        .await;
    let mut brief_status = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let path = format!("/sandboxes/{}", brief.id);
        brief_status = raw.call(reqwest::Method::GET, &path, None).await.0;
        if brief_status == 404 {
            break;
        }
    }
    raw.stop(Some(&sandbox)).await;
    assert!(common::left_by_run(&run_id).is_empty());

    assert_eq!(
        files, "user\n/home/user\nbuilder2\ndatalayer\ncopied\ndatalayer\n",
        "who ran each step, where, and the COPY"
    );
    assert_eq!(env, "envd's\n", "the create's envVars reach a process");
    assert_eq!(
        provisioned,
        "export SHELL='/bin/bash'\nE2B_DISTRO_ID='debian'\nE2B_INIT_SYSTEM='systemd'\nE2B_ADMIN_GROUP='sudo'\n\
         include /etc/chrony/chrony.conf\nno machine-id\nremoved\n",
        "the base phase ran before the steps"
    );

    assert_eq!(
        brief_status, 404,
        "a sandbox past its 2 s timeout was still there"
    );
    assert_eq!(
        created_user.0, 200,
        "the USER step's user exists: {created_user:?}"
    );
    assert_eq!(ghost_start.0, 401, "{ghost_start:?}");
    assert!(
        ghost_start.1.contains("invalid username: 'ghost'"),
        "{ghost_start:?}"
    );
    assert_eq!(ghost_build["status"], "error", "{ghost_build}");
    assert!(
        ghost_build.to_string().contains("ghost"),
        "the failed build names the user: {ghost_build}"
    );
}

/// E2B's base phase as the e2b emulator runs it (`emulators/src/e2b/base_phase.sh`), run
/// by `sh` as root in a throwaway container of the contract base after `prepare` (the
/// build's log shows it only when its layer is not cached): its output and whether it
/// succeeded.
fn base_phase(prepare: &str) -> (bool, String) {
    use std::io::Write as _;
    let script = std::fs::read(common::root().join("emulators/src/e2b/base_phase.sh"))
        .expect("the base phase script");
    let mut child = std::process::Command::new("docker")
        .args(["run", "--rm", "-i", "--user", "root", "--entrypoint", "sh"])
        .arg(sandbox_providers::docker::base::BASE_IMAGE)
        .args(["-c", &format!("{prepare} exec sh -s")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the docker CLI runs");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(&script)
        .expect("the script is sent");
    let out = child.wait_with_output().expect("the container ends");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The base phase names each package E2B's builder would install that the base lacks,
/// says it installs none and skips the init setup, and provisions only the debian family:
/// a base of another distribution fails, named, and one E2B rejects fails with its words.
pub fn the_e2b_base_phase_names_what_the_base_lacks_and_takes_the_debian_family_only() {
    let (ok, out) = base_phase("");
    assert!(ok, "{out}");
    for line in [
        "Provisioning for distro 'debian'",
        "Package systemd is missing, will install it.",
        "emulate e2b: not installed: systemd systemd-sysv",
        "emulate e2b: skipped the init setup",
        "Finished provisioning script",
    ] {
        assert!(out.contains(line), "no `{line}` in:\n{out}");
    }
    assert!(
        !out.contains("Package ca-certificates is missing"),
        "the contract base holds ca-certificates:\n{out}"
    );
    let (ok, out) = base_phase("printf 'ID=alpine\\n' > /etc/os-release &&");
    assert!(!ok, "{out}");
    assert!(
        out.contains("ID='alpine'") && out.contains("debian family only"),
        "{out}"
    );
    let (ok, out) = base_phase("printf 'ID=ol\\nID_LIKE=fedora\\n' > /etc/os-release &&");
    assert!(!ok, "{out}");
    assert!(
        out.contains("[provision] ERROR: base image distribution ID='ol' is not supported."),
        "{out}"
    );
    let (ok, out) = base_phase("printf 'ID=kali\\nID_LIKE=debian\\n' > /etc/os-release &&");
    assert!(ok, "{out}");
    assert!(
        out.contains("provisioning it as 'debian' from ID_LIKE"),
        "{out}"
    );
}
