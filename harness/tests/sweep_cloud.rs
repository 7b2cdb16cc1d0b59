//! `sandbox-matrix sweep` on the cloud variants, against `emulate e2b` and `emulate daytona`
//! over HTTPS: what a killed run left is found through its ledger (a resource whose name
//! carries no run id) and through its run label or name, with `--run` and without it (the
//! runs whose process is gone, and labelled resources older than `--older-than`); another
//! run's resources stay until they are old enough. Needs Docker (the emulators forward to
//! the docker variant; required under CI=true).

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::emulate::Emulate;
use sandbox_matrix::run::ledger::{LEDGER_FILE, Record};
use sandbox_matrix::run::runner::new_run_id;
use sandbox_providers::Secret;
use sandbox_providers::api::{
    ApiClient, ApiRequest, ApiSettings, Endpoints, Mode, Target, Volatiles,
};

/// Fake keys: the emulators check only that one is sent; they grant nothing anywhere.
const E2B_KEY: &str = "sm-fake-e2b-sweep-key";
const DAYTONA_KEY: &str = "sm-fake-daytona-sweep-key";

/// How one variant's emulator makes, lists and names a resource the way a run would.
struct Cloud {
    variant: &'static str,
    /// The resource kind the sweep deletes, as the provider names it.
    kind: &'static str,
    client: ApiClient,
    key_header: (&'static str, String),
}

impl Cloud {
    fn connect(variant: &'static str, emulate: &Emulate) -> Self {
        let (api, domain, key, kind, key_header) = match variant {
            "e2b" => (
                "E2B_API_URL",
                emulate.get("E2B_DOMAIN").to_owned(),
                ("E2B_API_KEY", E2B_KEY),
                "template",
                ("X-API-Key", E2B_KEY.to_owned()),
            ),
            _ => (
                "DAYTONA_API_URL",
                String::new(),
                ("DAYTONA_API_KEY", DAYTONA_KEY),
                "docker-registry",
                ("Authorization", format!("Bearer {DAYTONA_KEY}")),
            ),
        };
        let client = ApiClient::with_network(
            ApiSettings {
                endpoints: Endpoints {
                    api_base: emulate.get(api).to_owned(),
                    sandbox_domain: domain,
                },
                mode: Mode::Live,
                credentials: vec![Secret::new(key.0, key.1)],
                volatiles: std::sync::Arc::new(Volatiles::default()),
                call_timeout: Duration::from_secs(30),
            },
            &emulate.network(true),
        )
        .expect("an API client");
        Self {
            variant,
            kind,
            client,
            key_header,
        }
    }

    fn request(&self, req: ApiRequest) -> ApiRequest {
        req.header(self.key_header.0, self.key_header.1.clone())
    }

    /// Creates a template (e2b) or a docker-registry entry (daytona) called `name`, as a
    /// build does before it is killed; returns its id.
    async fn create(&self, name: &str) -> String {
        let (path, body, field) = match self.variant {
            "e2b" => (
                "/v3/templates",
                serde_json::json!({"name": name, "cpuCount": 2, "memoryMB": 1024}),
                "templateID",
            ),
            _ => (
                "/docker-registry",
                serde_json::json!({"name": name, "url": "registry.invalid", "username": "u",
                                   // Fake: the emulator keeps it and grants nothing.
                                   "password": "sm-fake-registry-password"}),
                "id",
            ),
        };
        let answer: serde_json::Value = self
            .client
            .call(self.request(ApiRequest::post(Target::Api, path).json(body)))
            .await
            .expect("create answers")
            .json()
            .expect("JSON");
        answer[field].as_str().expect("an id").to_owned()
    }

    /// The ids the emulator lists of this kind.
    async fn ids(&self) -> Vec<String> {
        let (path, field) = match self.variant {
            "e2b" => ("/v2/templates", "templateID"),
            _ => ("/docker-registry", "id"),
        };
        let listed: Vec<serde_json::Value> = self
            .client
            .call(self.request(ApiRequest::get(Target::Api, path)))
            .await
            .expect("list answers")
            .json()
            .expect("JSON list");
        listed
            .iter()
            .filter_map(|v| v[field].as_str().map(str::to_owned))
            .collect()
    }

    /// The name a run's scenario gives what it creates.
    fn name(&self, run_id: &str) -> String {
        match self.variant {
            "e2b" => sandbox_providers::e2b::template_name(&sandbox_providers::RunLabels {
                run_id: run_id.to_owned(),
                variant: "e2b".into(),
                scenario: "lifecycle".into(),
            }),
            _ => format!("sandbox-matrix-{run_id}-lifecycle"),
        }
    }
}

/// A ledger in `out/<run_id>/` of a run whose process is gone (this pid, another start
/// time), that created `id` and was killed before it finished.
fn killed_ledger(out: &Path, run_id: &str, variant: &str, kind: &str, id: &str) {
    let records = [
        Record::Run {
            run_id: run_id.to_owned(),
            pid: std::process::id(),
            start_ticks: Some(1),
            boot_id: None,
            started_at: "2026-12-01T00:00:00Z".to_owned(),
        },
        Record::Intent {
            seq: 1,
            variant: variant.to_owned(),
            scenario: "lifecycle".to_owned(),
            kind: "artifact".to_owned(),
        },
        Record::Created {
            seq: 1,
            variant: variant.to_owned(),
            scenario: "lifecycle".to_owned(),
            kind: kind.to_owned(),
            id: id.to_owned(),
            removable: true,
        },
    ];
    let dir = out.join(run_id);
    std::fs::create_dir_all(&dir).expect("run folder");
    let text: String = records
        .iter()
        .map(|r| serde_json::to_string(r).expect("a record") + "\n")
        .collect();
    std::fs::write(dir.join(LEDGER_FILE), text).expect("ledger written");
}

fn sweep(emulate: &Emulate, variant: &str, out: &Path, extra: &[&str]) -> (Output, String) {
    let key = if variant == "e2b" {
        ("E2B_API_KEY", E2B_KEY)
    } else {
        ("DAYTONA_API_KEY", DAYTONA_KEY)
    };
    let output = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["sweep", "--variant", variant, "--out"])
        .arg(out)
        .args(extra)
        .current_dir(common::root())
        .envs(&emulate.settings)
        .env(key.0, key.1)
        .output()
        .expect("sandbox-matrix runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text)
}

async fn sweep_finds_a_killed_runs_leftovers(variant: &'static str) {
    let emulate = Emulate::start(variant, &[]);
    let cloud = Cloud::connect(variant, &emulate);
    let out = common::out_dir(&format!("sweep-cloud-{variant}"));
    let (killed, later, other) = (new_run_id(), new_run_id(), new_run_id());

    // Run `killed`: one resource its ledger names (its name carries no run id, as if the
    // name never landed), one named for the run and not in the ledger.
    let by_ledger = cloud.create(&format!("unnamed-{killed}")).await;
    killed_ledger(&out, &killed, variant, cloud.kind, &by_ledger);
    let by_name = cloud.create(&cloud.name(&killed)).await;
    let of_other = cloud.create(&cloud.name(&other)).await;

    let (output, text) = sweep(&emulate, variant, &out, &["--run", &killed]);
    assert_eq!(output.status.code(), Some(0), "{text}");
    for id in [&by_ledger, &by_name] {
        assert!(
            text.contains(&format!("removed {} {id}", cloud.kind)),
            "{text}"
        );
    }
    let left = cloud.ids().await;
    assert!(
        !left.contains(&by_ledger) && !left.contains(&by_name),
        "{left:?}"
    );
    assert!(
        left.contains(&of_other),
        "another run's was removed: {text}"
    );

    // Without --run: the ledger of run `later`, whose process is gone, and what run
    // `other` left, by its name, once older than --older-than.
    let by_later_ledger = cloud.create(&format!("unnamed-{later}")).await;
    killed_ledger(&out, &later, variant, cloud.kind, &by_later_ledger);
    let (output, text) = sweep(&emulate, variant, &out, &["--older-than", "0s"]);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "run {later}: {variant}::lifecycle: removed {} {by_later_ledger}",
            cloud.kind
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "run {other}: {variant}::lifecycle: removed {} {of_other}",
            cloud.kind
        )),
        "{text}"
    );
    let left = cloud.ids().await;
    assert!(
        !left.contains(&by_later_ledger) && !left.contains(&of_other),
        "{left:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
    emulate.stop();
}

pub async fn sweep_finds_an_e2b_runs_leftovers_by_ledger_and_by_name() {
    sweep_finds_a_killed_runs_leftovers("e2b").await;
}

pub async fn sweep_finds_a_daytona_runs_leftovers_by_ledger_and_by_name() {
    sweep_finds_a_killed_runs_leftovers("daytona").await;
}

fn main() {
    use common::trials::Need;
    let args = libtest_mimic::Arguments::from_args();
    let trials = trials![
        Need::Docker => [
            async(2) sweep_finds_an_e2b_runs_leftovers_by_ledger_and_by_name,
            async(2) sweep_finds_a_daytona_runs_leftovers_by_ledger_and_by_name,
        ];
    ];
    libtest_mimic::run(&args, trials).exit();
}
