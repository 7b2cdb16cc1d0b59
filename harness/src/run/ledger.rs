//! The run ledger, `reports/<run-id>/ledger.jsonl`: before every create (image, container,
//! template, sandbox, BuildKit build...) an intent record is appended and fsynced, after it
//! the provider's id, and once it is gone (deleted, or a build that ended) a record of that.
//! A run killed at any point leaves a ledger that says which variant and scenario may have
//! left what, so that cleanup and `sweep` find a resource even when its label never landed,
//! and `sweep` finds the runs whose process is gone.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sandbox_providers::{Resource, RunLabels};
use serde::{Deserialize, Serialize};

pub use sandbox_providers::process::Owner;

/// The ledger's file name inside a run folder.
pub const LEDGER_FILE: &str = "ledger.jsonl";

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Record {
    /// The first line: which process runs the run, so `sweep` can tell a live run from a
    /// killed one.
    Run {
        /// The run id.
        run_id: String,
        /// The process id of the run.
        pid: u32,
        /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22),
        /// so a reused pid is not taken for the run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_ticks: Option<u64>,
        /// The boot the process ran in (`/proc/sys/kernel/random/boot_id`): after a reboot,
        /// the same pid and start ticks are another process.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot_id: Option<String>,
        /// When it started, RFC 3339.
        started_at: String,
    },
    /// Written and fsynced before a create: what is about to exist.
    Intent {
        /// Numbers the intent; its `created` line carries the same number.
        seq: u64,
        /// The variant about to create it.
        variant: String,
        /// The scenario it is for.
        scenario: String,
        /// What is created, such as `image` or `container`.
        kind: String,
    },
    /// Written after the create returned: the provider's id for what it made.
    Created {
        /// The intent's number.
        seq: u64,
        /// The variant that created it.
        variant: String,
        /// The scenario it is for.
        scenario: String,
        /// The provider's resource kind, such as `image`.
        kind: String,
        /// The provider's id.
        id: String,
        /// `kind` and `id` name what the provider's delete removes (else they only say
        /// what was made, as the provider named it).
        #[serde(default)]
        removable: bool,
    },
    /// What a `created` line named is gone: cleanup deleted it, or it was a build that
    /// ended. Cleanup and `sweep` no longer look for it.
    Gone {
        /// The variant that created it.
        variant: String,
        /// The scenario it was for.
        scenario: String,
        /// The provider's resource kind.
        kind: String,
        /// The provider's id.
        id: String,
    },
    /// Written before a cloud variant's first scenario runs against the emulator the run
    /// started (`run --emulated`): what that variant creates lives on this machine's
    /// engine, labelled with the run, and its provider ids died with the emulator, so a
    /// sweep removes it from the engine, never through the provider.
    Emulated {
        /// The cloud variant.
        variant: String,
    },
    /// A sweep removed what the run left, the run's process being gone: an age sweep
    /// passes the run over from then on.
    Swept {
        /// When, RFC 3339.
        at: String,
    },
    /// The run ended and its cleanup ran (a killed run has no such line).
    Finished {
        /// When, RFC 3339.
        at: String,
    },
}

/// An append-only ledger; every record is on disk (fsynced) when the call returns.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: Mutex<File>,
    next: Mutex<u64>,
}

impl Ledger {
    /// Creates `dir/ledger.jsonl` (and `dir`) for run `run_id` and writes its first line.
    pub fn create(dir: &Path, run_id: &str) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join(LEDGER_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // The folder's entry for the new file must survive a crash too.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        let ledger = Self {
            path,
            file: Mutex::new(file),
            next: Mutex::new(1),
        };
        let owner = Owner::this_process();
        ledger.append(&Record::Run {
            run_id: run_id.to_owned(),
            pid: owner.pid,
            start_ticks: owner.start_ticks,
            boot_id: owner.boot_id,
            started_at: now(),
        })?;
        Ok(ledger)
    }

    /// Where the ledger is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` as one line and fsyncs it.
    pub fn append(&self, record: &Record) -> Result<(), String> {
        let mut line = serde_json::to_string(record).expect("a ledger record is plain JSON");
        line.push('\n');
        let mut file = self.file.lock().expect("ledger lock");
        file.write_all(line.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("cannot write the ledger {}: {e}", self.path.display()))
    }

    /// Records that `labels.variant` is about to create a `kind` for `labels.scenario`;
    /// returns the number its [`Ledger::created`] line takes.
    pub fn intent(&self, labels: &RunLabels, kind: &str) -> Result<u64, String> {
        let seq = {
            let mut next = self.next.lock().expect("ledger counter lock");
            let seq = *next;
            *next += 1;
            seq
        };
        self.append(&Record::Intent {
            seq,
            variant: labels.variant.clone(),
            scenario: labels.scenario.clone(),
            kind: kind.to_owned(),
        })?;
        Ok(seq)
    }

    /// Records the provider's id for what intent `seq` created; `removable` when
    /// `resource` is what the provider's delete takes.
    pub fn created(
        &self,
        seq: u64,
        labels: &RunLabels,
        resource: &Resource,
        removable: bool,
    ) -> Result<(), String> {
        self.append(&Record::Created {
            seq,
            variant: labels.variant.clone(),
            scenario: labels.scenario.clone(),
            kind: resource.kind.clone(),
            id: resource.id.clone(),
            removable,
        })
    }

    /// Records that `resource`, which `labels.variant` created for `labels.scenario`, is
    /// gone.
    pub fn gone(&self, labels: &RunLabels, resource: &Resource) -> Result<(), String> {
        self.append(&Record::Gone {
            variant: labels.variant.clone(),
            scenario: labels.scenario.clone(),
            kind: resource.kind.clone(),
            id: resource.id.clone(),
        })
    }

    /// Records that `variant` runs against an emulator the run started ([`Record::Emulated`]).
    pub fn emulated(&self, variant: &str) -> Result<(), String> {
        self.append(&Record::Emulated {
            variant: variant.to_owned(),
        })
    }

    /// Records that the run ended with its cleanup done.
    pub fn finished(&self) -> Result<(), String> {
        self.append(&Record::Finished { at: now() })
    }
}

impl sandbox_providers::CreateLog for Ledger {
    fn intent(&self, labels: &RunLabels, kind: &str) -> Result<u64, String> {
        Ledger::intent(self, labels, kind)
    }

    fn created(&self, seq: u64, labels: &RunLabels, resource: &Resource) -> Result<(), String> {
        Ledger::created(self, seq, labels, resource, true)
    }

    fn gone(&self, labels: &RunLabels, resource: &Resource) -> Result<(), String> {
        Ledger::gone(self, labels, resource)
    }
}

/// A ledger as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerView {
    /// Its records, in order; a torn last line (the process killed mid-write) is left out.
    pub records: Vec<Record>,
}

impl LedgerView {
    /// Reads the ledger at `path`; an unreadable file or a line that is not a record
    /// (other than a torn last one) is an error naming the file and line.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the ledger {}: {e}", path.display()))?;
        let mut records = Vec::new();
        let lines: Vec<&str> = text.split('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(record) => records.push(record),
                // The last line, unterminated: a write the kill cut short.
                Err(_) if i + 1 == lines.len() => {}
                Err(e) => {
                    return Err(format!(
                        "{}:{}:{}: not a ledger record: {}",
                        path.display(),
                        i + 1,
                        e.column(),
                        sandbox_providers::tail(&e.to_string(), 200)
                    ));
                }
            }
        }
        Ok(Self { records })
    }

    /// The run id its first line names.
    pub fn run_id(&self) -> Option<&str> {
        self.records.iter().find_map(|r| match r {
            Record::Run { run_id, .. } => Some(run_id.as_str()),
            _ => None,
        })
    }

    /// The process that wrote it, as its first line names it.
    pub fn owner(&self) -> Option<Owner> {
        self.records.iter().find_map(|r| match r {
            Record::Run {
                pid,
                start_ticks,
                boot_id,
                ..
            } => Some(Owner {
                pid: *pid,
                start_ticks: *start_ticks,
                boot_id: boot_id.clone(),
            }),
            _ => None,
        })
    }

    /// Whether the process that wrote it still runs (same boot, pid and start time).
    pub fn process_alive(&self) -> bool {
        self.owner().is_some_and(|o| o.alive())
    }

    /// Whether the run ended with its cleanup done.
    pub fn finished(&self) -> bool {
        self.records
            .iter()
            .any(|r| matches!(r, Record::Finished { .. }))
    }

    /// Whether a sweep removed what the run left.
    pub fn swept(&self) -> bool {
        self.records
            .iter()
            .any(|r| matches!(r, Record::Swept { .. }))
    }

    /// Every (variant, scenario) that meant to create something.
    pub fn scenarios(&self) -> BTreeSet<(String, String)> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Intent {
                    variant, scenario, ..
                }
                | Record::Created {
                    variant, scenario, ..
                } => Some((variant.clone(), scenario.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every variant that meant to create something.
    pub fn variants(&self) -> BTreeSet<String> {
        self.scenarios().into_iter().map(|(v, _)| v).collect()
    }

    /// The cloud variants that ran against an emulator the run started.
    pub fn emulated(&self) -> BTreeSet<String> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Emulated { variant } => Some(variant.clone()),
                _ => None,
            })
            .collect()
    }

    /// What `variant` created that its delete removes, with the scenario it was for, in
    /// the order created; what was recorded gone since is left out.
    pub fn outstanding(&self, variant: &str) -> Vec<Outstanding> {
        let mut seen: BTreeSet<(String, String)> = self
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Gone {
                    variant: v,
                    kind,
                    id,
                    ..
                } if v == variant => Some((kind.clone(), id.clone())),
                _ => None,
            })
            .collect();
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Created {
                    variant: v,
                    scenario,
                    kind,
                    id,
                    removable: true,
                    ..
                } if v == variant && seen.insert((kind.clone(), id.clone())) => Some(Outstanding {
                    scenario: scenario.clone(),
                    resource: Resource {
                        kind: kind.clone(),
                        id: id.clone(),
                    },
                }),
                _ => None,
            })
            .collect()
    }

    /// The resources [`LedgerView::outstanding`] names for `scenario` or, with `None`, for
    /// any scenario.
    pub fn created(&self, variant: &str, scenario: Option<&str>) -> Vec<Resource> {
        self.outstanding(variant)
            .into_iter()
            .filter(|o| scenario.is_none_or(|want| want == o.scenario))
            .map(|o| o.resource)
            .collect()
    }
}

/// A resource a ledger names as created and not gone since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outstanding {
    /// The scenario it was created for.
    pub scenario: String,
    /// What the provider's delete takes.
    pub resource: Resource,
}

/// Appends to the ledger at `path`, of a run whose process is gone, that a sweep removed
/// what it left.
pub fn record_swept(path: &Path) -> Result<(), String> {
    let mut line =
        serde_json::to_string(&Record::Swept { at: now() }).expect("a ledger record is plain JSON");
    line.push('\n');
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| {
            file.write_all(line.as_bytes())?;
            file.sync_data()
        })
        .map_err(|e| format!("cannot write the ledger {}: {e}", path.display()))
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> RunLabels {
        RunLabels {
            run_id: "20261201T000000Z-abcdef".into(),
            variant: "docker".into(),
            scenario: "outside".into(),
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sm-ledger-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn intents_and_ids_read_back_and_a_torn_last_line_is_skipped() {
        let dir = temp("roundtrip");
        let ledger = Ledger::create(&dir, "20261201T000000Z-abcdef").expect("ledger");
        let seq = ledger.intent(&labels(), "image").expect("intent");
        let image = Resource {
            kind: "image".into(),
            id: "sha256:1".into(),
        };
        ledger
            .created(seq, &labels(), &image, true)
            .expect("created");
        let sandbox = Resource {
            kind: "sandbox".into(),
            id: "sbx-1".into(),
        };
        ledger
            .created(seq + 1, &labels(), &sandbox, false)
            .expect("created");
        ledger.intent(&labels(), "container").expect("intent");
        drop(ledger);
        // A kill in the middle of a write.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(LEDGER_FILE))
            .expect("ledger opens");
        file.write_all(b"{\"event\":\"crea").expect("write");
        let view = LedgerView::read(&dir.join(LEDGER_FILE)).expect("reads");
        assert_eq!(view.run_id(), Some("20261201T000000Z-abcdef"));
        assert!(view.process_alive(), "this test's own process runs");
        assert!(!view.finished());
        assert_eq!(view.created("docker", None), vec![image]);
        assert_eq!(
            view.scenarios(),
            BTreeSet::from([("docker".to_owned(), "outside".to_owned())])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn what_is_recorded_gone_is_no_longer_outstanding() {
        let dir = temp("gone");
        let ledger = Ledger::create(&dir, "20261201T000000Z-abcdef").expect("ledger");
        let build = Resource {
            kind: "buildkit-build".into(),
            id: "sandbox-matrix-b1".into(),
        };
        let image = Resource {
            kind: "image".into(),
            id: "sha256:1".into(),
        };
        for resource in [&build, &image] {
            let seq = ledger.intent(&labels(), &resource.kind).expect("intent");
            ledger
                .created(seq, &labels(), resource, true)
                .expect("created");
        }
        ledger.gone(&labels(), &build).expect("gone");
        let view = LedgerView::read(ledger.path()).expect("reads");
        assert_eq!(
            view.outstanding("docker"),
            vec![Outstanding {
                scenario: "outside".into(),
                resource: image.clone()
            }]
        );
        assert_eq!(view.variants(), BTreeSet::from(["docker".to_owned()]));
        // Another variant's record of the same id is not this variant's.
        let other = RunLabels {
            variant: "datalayer".into(),
            ..labels()
        };
        ledger.gone(&other, &image).expect("gone");
        let view = LedgerView::read(ledger.path()).expect("reads");
        assert_eq!(view.created("docker", Some("outside")), vec![image]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_line_in_the_middle_is_an_error_with_its_place() {
        let dir = temp("bad");
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(LEDGER_FILE);
        std::fs::write(&path, "nonsense\n{\"event\":\"finished\",\"at\":\"x\"}\n").expect("write");
        let e = LedgerView::read(&path).expect_err("refused");
        assert!(e.contains(&format!("{}:1:", path.display())), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_dead_process_is_seen_as_gone() {
        let view = LedgerView {
            records: vec![Record::Run {
                run_id: "x".into(),
                pid: std::process::id(),
                start_ticks: Some(1),
                boot_id: None,
                started_at: String::new(),
            }],
        };
        assert!(
            !view.process_alive(),
            "a different start time is another process"
        );
    }
}
