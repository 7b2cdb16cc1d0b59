//! A [`Host`] made of data: a contract sandbox by default, changed field by field.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use doctor::Host;

/// What a fake machine answers.
pub struct FakeHost {
    pub system: Option<String>,
    pub machine: Option<String>,
    pub files: BTreeMap<String, String>,
    pub links: BTreeMap<String, String>,
    pub uid: u32,
    pub gid: u32,
    pub users: BTreeMap<u32, String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub dirs: BTreeSet<String>,
    pub writable: BTreeSet<String>,
    pub executables: BTreeSet<String>,
    pub file_lens: BTreeMap<String, u64>,
    pub python: Result<String, String>,
    pub zone_name: Option<String>,
    pub orphan_zombies: Option<u32>,
    /// Each `run_python` call: the interpreter and its arguments after the script.
    pub python_calls: Mutex<Vec<(String, Vec<String>)>>,
}

/// `/etc/os-release` of Debian trixie.
pub const TRIXIE: &str = "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n\
NAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\nID=debian\n";

/// What the base's `python3` answers.
pub const PYTHON_ANSWER: &str =
    r#"{"version": "3.13.5", "packages": {"ipykernel": "6.29.5", "jupyter_client": "8.6.3"}}"#;

fn strings<const N: usize>(items: [&str; N]) -> BTreeSet<String> {
    items.into_iter().map(str::to_owned).collect()
}

impl FakeHost {
    /// A sandbox that satisfies every row, like the contract base image.
    pub fn sandbox() -> Self {
        let pairs = |items: &[(&str, &str)]| -> BTreeMap<String, String> {
            items
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect()
        };
        FakeHost {
            system: Some("Linux".into()),
            machine: Some("x86_64".into()),
            files: pairs(&[("/etc/os-release", TRIXIE), ("/proc/1/comm", "tini\n")]),
            links: pairs(&[("/etc/localtime", "/usr/share/zoneinfo/UTC")]),
            uid: 1000,
            gid: 100,
            users: BTreeMap::from([(1000, "datalayer".to_owned()), (0, "root".to_owned())]),
            env: pairs(&[
                ("HOME", "/home/datalayer"),
                ("PATH", "/usr/local/bin:/usr/bin:/bin"),
                ("LANG", "C.UTF-8"),
                ("LC_ALL", "C.UTF-8"),
                ("TZ", "UTC"),
            ]),
            cwd: Some("/home/datalayer".into()),
            dirs: strings(["/home/datalayer", "/opt/datalayer", "/opt/datalayer/bin"]),
            writable: strings(["/home/datalayer"]),
            executables: strings(["/usr/bin/python3", "/usr/bin/pip"]),
            file_lens: BTreeMap::from([("/etc/ssl/certs/ca-certificates.crt".to_owned(), 219_000)]),
            python: Ok(format!("{PYTHON_ANSWER}\n")),
            zone_name: Some("UTC".into()),
            orphan_zombies: Some(0),
            python_calls: Mutex::new(Vec::new()),
        }
    }

    /// Sets an environment variable.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.insert(name.to_owned(), value.to_owned());
    }

    /// Unsets an environment variable.
    pub fn unset_env(&mut self, name: &str) {
        self.env.remove(name);
    }
}

impl Host for FakeHost {
    fn system(&self) -> Option<String> {
        self.system.clone()
    }

    fn machine(&self) -> Option<String> {
        self.machine.clone()
    }

    fn read_file(&self, path: &str) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn read_link(&self, path: &str) -> Option<String> {
        self.links.get(path).cloned()
    }

    fn uid(&self) -> u32 {
        self.uid
    }

    fn gid(&self) -> u32 {
        self.gid
    }

    fn user_name(&self, uid: u32) -> Option<String> {
        self.users.get(&uid).cloned()
    }

    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn cwd(&self) -> Option<String> {
        self.cwd.clone()
    }

    fn is_dir(&self, path: &str) -> bool {
        self.dirs.contains(path)
    }

    fn is_executable(&self, path: &str) -> bool {
        self.executables.contains(path)
    }

    fn file_len(&self, path: &str) -> Option<u64> {
        self.file_lens.get(path).copied()
    }

    fn can_write(&self, dir: &str) -> bool {
        self.dirs.contains(dir) && self.writable.contains(dir)
    }

    fn run_python(&self, python3: &str, _script: &str, args: &[&str]) -> Result<String, String> {
        self.python_calls.lock().unwrap().push((
            python3.to_owned(),
            args.iter().map(|&arg| arg.to_owned()).collect(),
        ));
        self.python.clone()
    }

    fn local_zone_name(&self) -> Option<String> {
        self.zone_name.clone()
    }

    fn orphan_zombies(&self) -> Option<u32> {
        self.orphan_zombies
    }
}
