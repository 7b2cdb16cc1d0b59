use std::sync::Mutex;

use sandbox_providers::{
    Artifact, BuildRequest, Capabilities, CodeOutput, CommandOutput, Housekeeping, Labelled, LogFn,
    ProviderError, Result, RunLabels, SandboxId, ShutdownReport, Timing,
};

use super::*;
use crate::run::ledger::{Ledger, Record};

/// An engine as a sweep sees it: labelled resources, and BuildKit builds that commit
/// an image when they end.
#[derive(Default)]
struct Engine {
    labelled: Mutex<Vec<Labelled>>,
    /// What each build commits once it ends (the sweep's cancel and wait).
    commits: Mutex<Vec<(String, Labelled)>>,
    calls: Mutex<Vec<String>>,
}

fn labelled(run_id: &str, kind: &str, id: &str, age: Option<Duration>) -> Labelled {
    Labelled {
        resource: Resource {
            kind: kind.into(),
            id: id.into(),
        },
        run_id: run_id.into(),
        scenario: Some("lifecycle".into()),
        created: age.map(|a| SystemTime::now() - a),
    }
}

impl Engine {
    fn holds(&self) -> Vec<String> {
        self.labelled
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.resource.id.clone())
            .collect()
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Adds what the engine holds.
    fn add(&self, held: impl IntoIterator<Item = Labelled>) {
        self.labelled.lock().unwrap().extend(held);
    }
}

#[async_trait]
impl Provider for Engine {
    fn variant(&self) -> &str {
        "docker"
    }

    fn capabilities(&self) -> Capabilities {
        variants::capabilities("docker").expect("docker is known")
    }

    async fn build(&self, _: &BuildRequest, _: &LogFn) -> Result<Artifact> {
        unreachable!("a sweep builds nothing")
    }

    async fn launch(&self, _: &Artifact, _: &RunLabels) -> Result<(SandboxId, Vec<Timing>)> {
        unreachable!("a sweep launches nothing")
    }

    async fn run_code(&self, _: &SandboxId, _: &str) -> Result<(CodeOutput, Vec<Timing>)> {
        unreachable!("a sweep runs no code")
    }

    async fn exec(&self, _: &SandboxId, _: &[String], _: bool) -> Result<CommandOutput> {
        unreachable!("a sweep runs no command")
    }

    async fn restart(&self, _: &SandboxId) -> Result<Vec<Timing>> {
        unreachable!("a sweep restarts nothing")
    }

    async fn shutdown(&self, _: &SandboxId, _: Duration) -> Result<ShutdownReport> {
        unreachable!("a sweep shuts nothing down")
    }

    async fn artifact_metadata(&self, _: &Artifact) -> Result<String> {
        unreachable!("a sweep reads no metadata")
    }
}

#[async_trait]
impl Housekeeping for Engine {
    async fn list_resources(&self, _: &RunLabels) -> Result<Vec<Resource>> {
        Err(ProviderError::unsupported("list by three labels"))
    }

    async fn list_labelled(&self, run_id: Option<&str>) -> Result<Vec<Labelled>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("list {}", run_id.unwrap_or("*")));
        Ok(self
            .labelled
            .lock()
            .unwrap()
            .iter()
            .filter(|l| run_id.is_none_or(|id| l.run_id == id))
            .cloned()
            .collect())
    }

    async fn delete_resource(&self, resource: &Resource) -> Result<Deleted> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("delete {} {}", resource.kind, resource.id));
        if resource.kind == BUILD_RESOURCE {
            let mut commits = self.commits.lock().unwrap();
            let (ended, going): (Vec<_>, Vec<_>) =
                commits.drain(..).partition(|(b, _)| *b == resource.id);
            *commits = going;
            self.labelled
                .lock()
                .unwrap()
                .extend(ended.into_iter().map(|(_, l)| l));
            return Ok(Deleted::Settled("ended".into()));
        }
        let mut held = self.labelled.lock().unwrap();
        let before = held.len();
        held.retain(|l| l.resource != *resource);
        Ok(if held.len() < before {
            Deleted::Removed
        } else {
            Deleted::AlreadyGone
        })
    }
}

/// Reaches one engine for every variant, noting which were asked for.
struct OneEngine {
    engine: Arc<Engine>,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl Connect for OneEngine {
    async fn connect(&self, variant: &str) -> std::result::Result<Reached, String> {
        self.asked.lock().unwrap().push(variant.to_owned());
        Ok(Reached {
            provider: self.engine.clone(),
            note: None,
            elsewhere: None,
        })
    }
}

/// A sandbox for one test: its reports and registrations folders, an engine, and what
/// the sweep said.
struct Bench {
    dir: PathBuf,
    connect: OneEngine,
    said: Mutex<Vec<String>>,
}

impl Bench {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sm-sweep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("reports")).expect("reports folder");
        Self {
            dir,
            connect: OneEngine {
                engine: Arc::default(),
                asked: Mutex::default(),
            },
            said: Mutex::default(),
        }
    }

    fn engine(&self) -> &Engine {
        &self.connect.engine
    }

    fn options(&self, variants: &[&str], dry_run: bool) -> SweepOptions {
        SweepOptions {
            out: self.dir.join("reports"),
            runs_dir: self.dir.join("runs"),
            dry_run,
            variants: variants.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    /// A ledger under reports/ of run `run_id`, whose process is gone, with `records`
    /// after its first line.
    fn dead_ledger(&self, run_id: &str, records: &[Record]) -> PathBuf {
        let dir = self.dir.join("reports").join(run_id);
        std::fs::create_dir_all(&dir).expect("run folder");
        let mut text = serde_json::to_string(&Record::Run {
            run_id: run_id.into(),
            // Above pid_max: no process's.
            pid: u32::MAX,
            start_ticks: None,
            boot_id: None,
            started_at: "2026-12-06T00:00:00Z".into(),
        })
        .expect("JSON")
            + "\n";
        for record in records {
            text += &(serde_json::to_string(record).expect("JSON") + "\n");
        }
        let path = dir.join(LEDGER_FILE);
        std::fs::write(&path, text).expect("ledger written");
        path
    }

    async fn sweep(&self, scope: &Scope, options: &SweepOptions) -> (Ended, String) {
        self.said.lock().unwrap().clear();
        let say = |_: To, line: &str| self.said.lock().unwrap().push(line.to_owned());
        let ended = sweep(scope, options, &self.connect, &say).await;
        (ended, self.said.lock().unwrap().join("\n"))
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn created(variant: &str, kind: &str, id: &str) -> Record {
    Record::Created {
        seq: 1,
        variant: variant.into(),
        scenario: "lifecycle".into(),
        kind: kind.into(),
        id: id.into(),
        removable: true,
    }
}

fn run(id: &str) -> Scope {
    Scope::Run {
        id: id.into(),
        force: false,
    }
}

fn aged(seconds: u64) -> Scope {
    Scope::Gone {
        older_than: Duration::from_secs(seconds),
        shown: format!("{seconds}s"),
    }
}

#[tokio::test]
async fn a_killed_runs_build_is_settled_before_anything_is_listed_and_its_image_removed() {
    let bench = Bench::new("build");
    bench.dead_ledger("r1", &[created("docker", BUILD_RESOURCE, "b1")]);
    // The build's client is gone; the engine commits its image when the build ends.
    bench
        .engine()
        .commits
        .lock()
        .unwrap()
        .push(("b1".into(), labelled("r1", "image", "img-1", None)));
    let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert_eq!(
        bench.engine().calls()[..3],
        ["delete buildkit-build b1", "list r1", "delete image img-1"],
        "{said}"
    );
    assert!(bench.engine().holds().is_empty(), "{said}");
    assert!(
        said.contains("run r1: docker::lifecycle: BuildKit build b1: ended"),
        "{said}"
    );
    assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
}

#[tokio::test]
async fn an_emulated_variants_leftovers_are_swept_from_the_engine_not_through_the_provider() {
    let bench = Bench::new("emulated");
    bench.dead_ledger(
        "r1",
        &[
            Record::Emulated {
                variant: "e2b".into(),
            },
            // The e2b client's template, in an emulator that died with the run.
            created("e2b", "template", "tpl0001"),
        ],
    );
    // What the emulator made on the engine, labelled with the run.
    bench
        .engine()
        .labelled
        .lock()
        .unwrap()
        .push(labelled("r1", "container", "c-emulated", None));
    let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert_eq!(*bench.connect.asked.lock().unwrap(), ["docker"], "{said}");
    assert!(
        said.contains("e2b ran against emulators on this engine"),
        "{said}"
    );
    assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
    assert!(bench.engine().labelled.lock().unwrap().is_empty(), "{said}");
}

#[tokio::test]
async fn only_what_was_there_is_counted_and_what_the_run_saw_go_is_not_asked_again() {
    let bench = Bench::new("count");
    bench.dead_ledger(
        "r1",
        &[
            created("docker", "container", "c-gone"),
            created("docker", "container", "c-deleted"),
            Record::Gone {
                variant: "docker".into(),
                scenario: "lifecycle".into(),
                kind: "container".into(),
                id: "c-deleted".into(),
            },
        ],
    );
    bench.engine().add([labelled("r1", "image", "img-1", None)]);
    let (dry, said_dry) = bench.sweep(&run("r1"), &bench.options(&[], true)).await;
    assert_eq!(dry, Ended::Clean);
    assert!(said_dry.contains("would remove image img-1"), "{said_dry}");
    assert!(
        said_dry.contains("container c-gone: named in the run's ledger, not listed"),
        "{said_dry}"
    );
    assert!(
        said_dry.contains("run r1: dry run: 1 resource(s) would be removed"),
        "{said_dry}"
    );
    assert_eq!(
        bench.engine().holds(),
        ["img-1"],
        "a dry run removes nothing"
    );
    let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert!(
        said.contains("run r1: 1 resource(s) removed, 1 named in its ledger already gone"),
        "{said}"
    );
    assert!(
        !bench
            .engine()
            .calls()
            .contains(&"delete container c-deleted".to_owned()),
        "what the run recorded gone is not deleted again"
    );
}

#[tokio::test]
async fn an_age_sweep_leaves_a_live_run_alone_wherever_it_writes() {
    let bench = Bench::new("age");
    // The live run writes its ledger outside the sweep's reports folder; it registered.
    let elsewhere = bench.dir.join("elsewhere/live");
    let ledger = Ledger::create(&elsewhere, "live").expect("ledger");
    let registered =
        live_runs::Registered::register(&bench.dir.join("runs"), "live", ledger.path())
            .expect("registered");
    let old = Some(Duration::from_secs(3600));
    bench.engine().add([
        labelled("live", "container", "c-live", old),
        labelled("other", "container", "c-other", old),
        labelled(
            "young",
            "container",
            "c-young",
            Some(Duration::from_secs(1)),
        ),
    ]);
    let (ended, said) = bench
        .sweep(&aged(60), &bench.options(&["docker"], false))
        .await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert_eq!(bench.engine().holds(), ["c-live", "c-young"], "{said}");
    assert!(
        said.contains(&format!(
            "run live: left alone: its process {} is alive",
            std::process::id()
        )),
        "{said}"
    );
    assert!(said.contains("run other: 1 resource(s) removed"), "{said}");
    // By id, it is refused unless forced.
    let refused = bench
        .sweep(&run("live"), &bench.options(&["docker"], false))
        .await;
    assert!(
        matches!(&refused.0, Ended::Refused(why) if why.contains("--force")),
        "{refused:?}"
    );
    assert_eq!(bench.engine().holds(), ["c-live", "c-young"]);
    let forced = Scope::Run {
        id: "live".into(),
        force: true,
    };
    let (ended, said) = bench
        .sweep(&forced, &bench.options(&["docker"], false))
        .await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert_eq!(bench.engine().holds(), ["c-young"], "{said}");
    registered.release().expect("released");
}

#[tokio::test]
async fn a_killed_runs_registration_leads_to_its_ledger_and_is_forgotten_once_swept() {
    let bench = Bench::new("registered");
    // The killed run wrote its ledger elsewhere and registered it; its process is gone.
    let ledger = bench.dir.join("elsewhere/r1/ledger.jsonl");
    std::fs::create_dir_all(ledger.parent().unwrap()).expect("folder");
    std::fs::copy(
        bench.dead_ledger("r1", &[created("docker", "container", "c1")]),
        &ledger,
    )
    .expect("copy");
    std::fs::remove_dir_all(bench.dir.join("reports/r1")).expect("moved");
    std::fs::create_dir_all(bench.dir.join("runs")).expect("runs folder");
    let registration = live_runs::Registration {
        run_id: "r1".into(),
        owner: Owner {
            pid: u32::MAX,
            start_ticks: None,
            boot_id: None,
        },
        ledger,
        started_at: "2026-12-06T00:00:00Z".into(),
    };
    std::fs::write(
        bench.dir.join("runs/r1.json"),
        serde_json::to_string(&registration).expect("JSON"),
    )
    .expect("registered");
    bench
        .engine()
        .add([labelled("r1", "container", "c1", None)]);
    let (ended, said) = bench.sweep(&aged(86400), &bench.options(&[], false)).await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert!(bench.engine().holds().is_empty(), "{said}");
    assert_eq!(
        live_runs::find(&bench.dir.join("runs"), "r1").expect("reads"),
        None,
        "a swept run's registration is forgotten"
    );
}

#[tokio::test]
async fn a_swept_run_is_recorded_so_and_passed_over_by_the_next_age_sweep() {
    let bench = Bench::new("swept");
    let path = bench.dead_ledger("r1", &[created("docker", "container", "c1")]);
    bench
        .engine()
        .add([labelled("r1", "container", "c1", None)]);
    let (ended, said) = bench
        .sweep(&aged(86400), &bench.options(&["docker"], false))
        .await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert!(said.contains("run r1: 1 resource(s) removed"), "{said}");
    assert!(LedgerView::read(&path).expect("reads").swept());
    let (ended, said) = bench
        .sweep(&aged(86400), &bench.options(&["docker"], false))
        .await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert!(said.contains("no run to sweep"), "{said}");
    // Named, it is swept again.
    let (_, said) = bench
        .sweep(&run("r1"), &bench.options(&["docker"], false))
        .await;
    assert!(
        said.contains("run r1: 0 resource(s) removed, 1 named in its ledger already gone"),
        "{said}"
    );
}

#[tokio::test]
async fn with_its_ledger_a_run_is_swept_on_the_variants_it_names_alone() {
    let bench = Bench::new("variants");
    bench.dead_ledger("r1", &[created("datalayer", "image", "i1")]);
    let (ended, said) = bench.sweep(&run("r1"), &bench.options(&[], false)).await;
    assert_eq!(ended, Ended::Clean, "{said}");
    assert_eq!(*bench.connect.asked.lock().unwrap(), ["datalayer"]);
    // Without a ledger, every variant.
    bench.connect.asked.lock().unwrap().clear();
    bench.sweep(&run("r2"), &bench.options(&[], false)).await;
    assert_eq!(
        *bench.connect.asked.lock().unwrap(),
        variants::known(),
        "no ledger names them"
    );
}

#[tokio::test]
async fn an_unreadable_ledger_and_an_undated_resource_fail_the_sweep_and_are_named() {
    let bench = Bench::new("unreadable");
    let path = bench.dir.join("reports/r1/ledger.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).expect("folder");
    std::fs::write(&path, "garbage\n{\"event\":\"finished\",\"at\":\"x\"}\n").expect("write");
    bench
        .engine()
        .labelled
        .lock()
        .unwrap()
        .push(labelled("r9", "container", "c-undated", None));
    let (ended, said) = bench
        .sweep(&aged(60), &bench.options(&["docker"], false))
        .await;
    assert_eq!(ended, Ended::Failed, "{said}");
    assert!(
        said.contains(&format!("{}:1:", path.display())),
        "the ledger is named with its line: {said}"
    );
    assert!(
        said.contains("container c-undated has no creation time"),
        "{said}"
    );
    assert_eq!(bench.engine().holds(), ["c-undated"]);
}
