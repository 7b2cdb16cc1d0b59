//! A process named so that it can be recognised later, by another process: its pid, its
//! start time and the boot it ran in, so that a reused pid or a reboot is not taken for it.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A process as a run names its own (in its ledger and registration) or a build's holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
    /// The boot it ran in (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Self {
        Self::of(std::process::id())
    }

    /// Process `pid`, as it is now.
    pub fn of(pid: u32) -> Self {
        Self {
            pid,
            start_ticks: stat(pid).map(|s| s.start_ticks),
            boot_id: boot_id(),
        }
    }

    /// Whether it still runs: its pid exists and has not exited (a zombie has), with the
    /// same start time, in the same boot (what the record leaves out is not compared).
    pub fn alive(&self) -> bool {
        let Some(now) = stat(self.pid) else {
            return false;
        };
        now.state != 'Z'
            && self.start_ticks.is_none_or(|t| t == now.start_ticks)
            && (self.boot_id.is_none() || self.boot_id == boot_id())
    }
}

/// This boot's id.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    /// Field 3: `R`, `S`, `Z`...
    state: char,
    /// Field 22: the start time in clock ticks since boot.
    start_ticks: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(Path::new(&path)).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some(Stat {
        state,
        start_ticks: fields.nth(18)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_another_start_or_boot_is_not() {
        let me = Owner::this_process();
        assert!(me.start_ticks.is_some() && me.boot_id.is_some(), "{me:?}");
        assert!(me.alive());
        let restarted = Owner {
            start_ticks: me.start_ticks.map(|t| t + 1),
            ..me.clone()
        };
        assert!(!restarted.alive(), "a reused pid is another process");
        let rebooted = Owner {
            boot_id: Some("another-boot".into()),
            ..me.clone()
        };
        assert!(
            !rebooted.alive(),
            "the same pid in another boot is another process"
        );
        assert!(!Owner::of(u32::MAX).alive(), "no process has that pid");
    }

    #[test]
    fn an_exited_child_not_yet_reaped_is_not_alive() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true starts");
        let owner = Owner::of(child.id());
        // Its exit, unreaped: a zombie, whose /proc entry stays until the wait below.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while owner.alive() {
            assert!(std::time::Instant::now() < until, "`true` never exited");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            Path::new(&format!("/proc/{}", child.id())).exists(),
            "a zombie"
        );
        child.wait().expect("reaped");
    }
}
