//! `sandbox-matrix emulate <provider>`, the binary, as a test's child process: started on a
//! free port, its printed `NAME=value` settings read, stopped by pid with SIGTERM on drop
//! (the emulator then removes what it made).

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandbox_providers::api::network::CA_FILE_VAR;

/// A running emulator and the settings it printed.
pub struct Emulate {
    child: Child,
    /// `NAME=value` lines it printed before serving.
    pub settings: BTreeMap<String, String>,
}

impl Emulate {
    /// Starts `emulate <provider>` with `extra` arguments and waits until it serves.
    pub fn start(provider: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
            .args(["emulate", provider])
            .args(extra)
            .arg("--root")
            .arg(super::root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox-matrix emulate starts");
        let mut settings = BTreeMap::new();
        let stdout = child.stdout.take().expect("its stdout");
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line of settings");
            if let Some((name, value)) = line.split_once('=') {
                settings.insert(name.to_owned(), value.to_owned());
            }
            // The CA file comes last: once it is printed, the emulator serves.
            if line.starts_with(CA_FILE_VAR) {
                break;
            }
        }
        assert!(
            settings.contains_key(CA_FILE_VAR),
            "emulate {provider} printed no {CA_FILE_VAR}: {settings:?}"
        );
        Self { child, settings }
    }
}

impl Drop for Emulate {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..600 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
