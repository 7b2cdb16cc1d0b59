//! `datalayer-sandbox scan-secrets`: the secrets scan, native, run inside the sandbox.
//!
//! The host sends, for each form of each build secret, a [`Target`]: a name, a length, a
//! polynomial rolling hash and the narrowest of seven fixed character classes holding its
//! bytes, never the value. The scan reports where a window of a file, a process
//! environment or a command line hashes the same ([`ScanReport`]).
//!
//! It looks where sandbox-matrix's Python probe looks, and finds what it finds: every
//! regular file under the roots (`/`) except `/proc`, `/sys`, `/dev` and pseudo file system
//! mounts, following no symlink and counting files over [`MAX_FILE`] as unreadable, then
//! every other process's environment and command line. It is faster because the walk runs
//! beside several readers, and because a window can only match inside a run of bytes of its
//! form's class at least as long as the form, so only such runs are hashed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Files larger than this are not read, and are counted as unreadable.
pub const MAX_FILE: u64 = 16 * 1024 * 1024;

/// How long a scan may take unless told otherwise; past it, it stops and says where.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Folders never descended into: kernel and device views, not files a build wrote.
pub const SKIP: [&str; 3] = ["/proc", "/sys", "/dev"];

/// File system types whose mounts are not descended into.
const PSEUDO_FS: [&str; 21] = [
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "efivarfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "proc",
    "pstore",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "sysfs",
    "tracefs",
];

/// Base and modulus of the rolling hash: base 257, modulo the Mersenne prime 2^61 − 1.
const BASE: u64 = 257;
const MODULUS: u64 = (1 << 61) - 1;

/// Whether a byte belongs to a character class.
pub type Member = fn(u8) -> bool;

/// The character classes a [`Target`] may name, narrowest first; a form's class is the
/// first holding all of its bytes ([`class_of`]), `any` when none does.
pub const CLASSES: [(&str, Member); 7] = [
    ("hex", |b| b.is_ascii_hexdigit()),
    ("lowercase", |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b)
    }),
    ("alnum", |b| b.is_ascii_alphanumeric()),
    ("base64url", |b| {
        b.is_ascii_alphanumeric() || b"-_".contains(&b)
    }),
    ("base64", |b| {
        b.is_ascii_alphanumeric() || b"+/=".contains(&b)
    }),
    ("token", |b| {
        b.is_ascii_alphanumeric() || b"%+/=._~-".contains(&b)
    }),
    ("graph", |b| b.is_ascii_graphic()),
];

/// The class that holds any byte: no run can be found first, every window is hashed.
pub const ANY_CLASS: &str = "any";

/// The narrowest class in [`CLASSES`] holding every byte of `bytes`, or [`ANY_CLASS`].
pub fn class_of(bytes: &[u8]) -> &'static str {
    CLASSES
        .iter()
        .find(|(_, member)| bytes.iter().all(|&b| member(b)))
        .map_or(ANY_CLASS, |(name, _)| name)
}

/// The polynomial rolling hash of `bytes` that the scan compares every window with.
pub fn rolling_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |h, &b| {
        reduce(u128::from(h) * u128::from(BASE) + u128::from(b))
    })
}

/// `x` modulo 2^61 − 1, for any `x` below 2^122.
fn reduce(x: u128) -> u64 {
    let modulus = u128::from(MODULUS);
    let folded = (x & modulus) + (x >> 61);
    let folded = (folded & modulus) + (folded >> 61);
    let r = u64::try_from(folded).expect("folded below 2^62");
    if r >= MODULUS { r - MODULUS } else { r }
}

/// What the sandbox is told about one form of a secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The form's name, such as `REGISTRY_TOKEN (base64)`.
    pub name: String,
    /// Its length in bytes.
    pub len: usize,
    /// Its [`rolling_hash`].
    pub hash: u64,
    /// The narrowest of [`CLASSES`] holding all of its bytes, or [`ANY_CLASS`].
    pub class: String,
    /// Whether line breaks may cut the form (wrapped base64): they are then ignored
    /// inside a run.
    pub wrapped: bool,
}

/// A place where a form was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Finding {
    /// The form's name.
    pub name: String,
    /// A path, or `process N environ` / `process N cmdline`.
    #[serde(rename = "where")]
    pub location: String,
}

/// What a scan found and what it looked at; the Python probe answers the same fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanReport {
    /// Every match, one per form and place (sorted by form, then place, by the doctor; in
    /// walk order by the Python probe).
    pub found: Vec<Finding>,
    /// Files read.
    pub files_scanned: u64,
    /// Files and folders that could not be read (permissions, size).
    pub unreadable: u64,
    /// The uid the scan ran as.
    pub uid: u32,
    /// The folders walked: `/`, and the home and working directory if outside it.
    pub roots: Vec<String>,
    /// The home directory.
    pub home: String,
    /// The working directory.
    pub cwd: String,
    /// Folders not descended into (those under another left out).
    pub skipped: Vec<String>,
    /// Wall time of the whole scan, in seconds.
    pub seconds: f64,
    /// Where the scan ran out of time: the file whose reading passed the deadline (other
    /// readers may have finished a file each after it); nothing after it is read.
    pub stopped_at: Option<String>,
}

/// Where and how to scan.
#[derive(Debug, Clone)]
pub struct Options {
    /// Folders to walk.
    pub roots: Vec<PathBuf>,
    /// Whether process environments and command lines are scanned too.
    pub processes: bool,
    /// When to stop.
    pub deadline: Duration,
    /// How many threads read and scan files beside the walk.
    pub readers: usize,
    /// Whether the home and working directory are walked too when outside the roots.
    pub home_and_cwd: bool,
}

impl Default for Options {
    fn default() -> Self {
        let cores = thread::available_parallelism().map_or(2, usize::from);
        Self {
            roots: vec![PathBuf::from("/")],
            processes: true,
            deadline: DEADLINE,
            // Reading through some storage drivers (fuse-overlayfs) waits on another
            // process, so more readers than cores keep the cores busy.
            readers: (cores * 2).clamp(4, 16),
            home_and_cwd: true,
        }
    }
}

/// The forms of one class and line-break rule: for each length, its `(hash, name)` pairs.
struct Group {
    members: [bool; 256],
    wrapped: bool,
    shortest: usize,
    by_len: BTreeMap<usize, Vec<(u64, String)>>,
}

/// The targets, arranged for scanning.
struct Matcher {
    groups: Vec<Group>,
    /// Bytes of any group (line breaks too, where a group is wrapped).
    union: [bool; 256],
    union_shortest: usize,
    /// Forms of class `any`, hashed over every window.
    anything: BTreeMap<usize, Vec<(u64, String)>>,
    /// `BASE^(len − 1)` for each length, to roll a byte out.
    tops: HashMap<usize, u64>,
    shortest: usize,
}

impl Matcher {
    fn new(targets: &[Target]) -> Result<Self, String> {
        let mut groups: Vec<Group> = Vec::new();
        let mut anything: BTreeMap<usize, Vec<(u64, String)>> = BTreeMap::new();
        let mut tops = HashMap::new();
        for t in targets {
            if t.len == 0 {
                return Err(format!("target `{}` has length 0", t.name));
            }
            if t.hash >= MODULUS {
                return Err(format!(
                    "target `{}` has a hash of 2^61 - 1 or more",
                    t.name
                ));
            }
            tops.entry(t.len).or_insert_with(|| power(BASE, t.len - 1));
            let by_len = if t.class == ANY_CLASS {
                &mut anything
            } else {
                let member = CLASSES
                    .iter()
                    .find(|(name, _)| *name == t.class)
                    .map(|(_, member)| *member)
                    .ok_or_else(|| {
                        format!("target `{}` names no known class: `{}`", t.name, t.class)
                    })?;
                let members = std::array::from_fn(|b| member(u8::try_from(b).expect("a byte")));
                let at = match groups
                    .iter()
                    .position(|g| g.members == members && g.wrapped == t.wrapped)
                {
                    Some(at) => at,
                    None => {
                        groups.push(Group {
                            members,
                            wrapped: t.wrapped,
                            shortest: t.len,
                            by_len: BTreeMap::new(),
                        });
                        groups.len() - 1
                    }
                };
                let group = &mut groups[at];
                group.shortest = group.shortest.min(t.len);
                &mut group.by_len
            };
            let hashes = by_len.entry(t.len).or_default();
            if !hashes
                .iter()
                .any(|(h, name)| *h == t.hash && *name == t.name)
            {
                hashes.push((t.hash, t.name.clone()));
            }
        }
        let mut union = [false; 256];
        for g in &groups {
            for (b, member) in g.members.iter().enumerate() {
                union[b] |= *member;
            }
            if g.wrapped {
                union[usize::from(b'\r')] = true;
                union[usize::from(b'\n')] = true;
            }
        }
        Ok(Self {
            union_shortest: groups.iter().map(|g| g.shortest).min().unwrap_or(0),
            shortest: targets.iter().map(|t| t.len).min().unwrap_or(1),
            groups,
            union,
            anything,
            tops,
        })
    }

    /// The names of the forms found in `data`, each once.
    fn scan(&self, data: &[u8], hits: &mut BTreeSet<String>) {
        if !self.groups.is_empty() {
            let mut unwrapped = Vec::new();
            for (start, end) in runs(data, &self.union, self.union_shortest) {
                let part = &data[start..end];
                let mut cut = false;
                for group in &self.groups {
                    let text = if group.wrapped {
                        if !cut {
                            unwrapped.clear();
                            unwrapped.extend(part.iter().filter(|&&b| b != b'\r' && b != b'\n'));
                            cut = true;
                        }
                        unwrapped.as_slice()
                    } else {
                        part
                    };
                    for (s, e) in runs(text, &group.members, group.shortest) {
                        self.roll_all(&text[s..e], &group.by_len, hits);
                    }
                }
            }
        }
        self.roll_all(data, &self.anything, hits);
    }

    fn roll_all(
        &self,
        data: &[u8],
        by_len: &BTreeMap<usize, Vec<(u64, String)>>,
        hits: &mut BTreeSet<String>,
    ) {
        for (&n, hashes) in by_len {
            if data.len() >= n {
                roll(data, n, self.tops[&n], hashes, hits);
            }
        }
    }
}

/// `base^exp` modulo 2^61 − 1, by squaring.
fn power(base: u64, mut exp: usize) -> u64 {
    let (mut result, mut square) = (1, base);
    while exp > 0 {
        if exp & 1 == 1 {
            result = reduce(u128::from(result) * u128::from(square));
        }
        square = reduce(u128::from(square) * u128::from(square));
        exp >>= 1;
    }
    result
}

/// Every run of bytes in `members` at least `n` long, as `(start, end)`.
///
/// It looks at the byte `n − 1` past where a run could start: when that byte is not a
/// member, no run of `n` can start before it, so the search skips `n` bytes at once, and
/// most of a binary file is never looked at.
fn runs(data: &[u8], members: &[bool; 256], n: usize) -> Vec<(usize, usize)> {
    let n = n.max(1);
    let member = |b: u8| members[usize::from(b)];
    let mut found = Vec::new();
    let mut start = 0;
    while start + n <= data.len() {
        match data[start..start + n].iter().rposition(|&b| !member(b)) {
            Some(gap) => start += gap + 1,
            None => {
                let end = data[start + n..]
                    .iter()
                    .position(|&b| !member(b))
                    .map_or(data.len(), |after| start + n + after);
                found.push((start, end));
                start = end + 1;
            }
        }
    }
    found
}

/// Hashes every window of `n` bytes of `data` and adds the names of those in `hashes`.
///
/// A handful of hashes per length: comparing each is cheaper than hashing the hash.
fn roll(data: &[u8], n: usize, top: u64, hashes: &[(u64, String)], hits: &mut BTreeSet<String>) {
    let mut h = rolling_hash(&data[..n]);
    let mut i = 0;
    loop {
        for (hash, name) in hashes {
            if *hash == h && !hits.contains(name) {
                hits.insert(name.clone());
            }
        }
        if i + n == data.len() {
            return;
        }
        let out = reduce(u128::from(data[i]) * u128::from(top));
        let kept = if h >= out { h - out } else { h + MODULUS - out };
        h = reduce(u128::from(kept) * u128::from(BASE) + u128::from(data[i + n]));
        i += 1;
    }
}

/// Mount points of pseudo file systems, from `/proc/self/mountinfo`.
fn pseudo_mounts() -> BTreeSet<String> {
    let Ok(bytes) = fs::read("/proc/self/mountinfo") else {
        return BTreeSet::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split_whitespace().nth(4)?;
            let fs_type = right.split_whitespace().next()?;
            PSEUDO_FS
                .contains(&fs_type)
                .then(|| point.replace("\\040", " "))
        })
        .collect()
}

fn under(path: &str, root: &str) -> bool {
    path == root || path.starts_with(&format!("{}/", root.trim_end_matches('/')))
}

/// The file's first [`MAX_FILE`] bytes, when it is still a regular file that can be read.
fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    // Not blocking on a FIFO that replaced the file since the walk saw it.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("no longer a regular file"));
    }
    // Blocking again for the reads: some file systems answer EAGAIN to a non-blocking one.
    // SAFETY: fcntl on a descriptor this function owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0
        || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len().min(MAX_FILE)).unwrap_or(0));
    file.take(MAX_FILE).read_to_end(&mut data)?;
    Ok(data)
}

/// What the readers share.
struct Shared<'a> {
    matcher: &'a Matcher,
    started: Instant,
    deadline: Duration,
    stop: AtomicBool,
    stopped_at: Mutex<Option<String>>,
    scanned: AtomicU64,
    unreadable: AtomicU64,
    found: Mutex<Vec<Finding>>,
}

impl Shared<'_> {
    fn read_and_scan(&self, path: &Path) {
        let Ok(meta) = fs::symlink_metadata(path) else {
            self.unreadable.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !meta.is_file() {
            return;
        }
        if meta.len() > MAX_FILE {
            self.unreadable.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if meta.len() < self.matcher.shortest as u64 {
            return;
        }
        let Ok(data) = read_regular(path) else {
            self.unreadable.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.scanned.fetch_add(1, Ordering::Relaxed);
        let where_ = path.to_string_lossy();
        self.record(&data, &where_);
        if self.started.elapsed() > self.deadline && !self.stop.swap(true, Ordering::SeqCst) {
            *self.stopped_at.lock().expect("not poisoned") = Some(where_.into_owned());
        }
    }

    fn record(&self, data: &[u8], location: &str) {
        let mut hits = BTreeSet::new();
        self.matcher.scan(data, &mut hits);
        if !hits.is_empty() {
            let mut found = self.found.lock().expect("not poisoned");
            found.extend(hits.into_iter().map(|name| Finding {
                name,
                location: location.to_owned(),
            }));
        }
    }
}

/// Scans for `targets` as `options` say.
pub fn scan(targets: &[Target], options: &Options) -> Result<ScanReport, String> {
    let started = Instant::now();
    let matcher = Matcher::new(targets)?;
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".to_owned());
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut roots: Vec<String> = options
        .roots
        .iter()
        .map(|r| r.to_string_lossy().into_owned())
        .collect();
    for extra in [&home, &cwd] {
        if options.home_and_cwd && !extra.is_empty() && !roots.iter().any(|r| under(extra, r)) {
            roots.push(extra.clone());
        }
    }
    let mut skipped: BTreeSet<String> = SKIP.iter().map(|s| (*s).to_owned()).collect();
    skipped.extend(pseudo_mounts());
    let shared = Shared {
        matcher: &matcher,
        started,
        deadline: options.deadline,
        stop: AtomicBool::new(false),
        stopped_at: Mutex::new(None),
        scanned: AtomicU64::new(0),
        unreadable: AtomicU64::new(0),
        found: Mutex::new(Vec::new()),
    };
    // A bounded queue: the walk runs ahead of the readers by at most this many files.
    let (send, receive) = mpsc::sync_channel::<PathBuf>(4096);
    let receive = Mutex::new(receive);
    thread::scope(|scope| {
        for _ in 0..options.readers.max(1) {
            scope.spawn(|| {
                loop {
                    let next = receive.lock().expect("not poisoned").recv();
                    let Ok(path) = next else { return };
                    if !shared.stop.load(Ordering::Relaxed) {
                        shared.read_and_scan(&path);
                    }
                }
            });
        }
        walk(&roots, &skipped, &shared, &send);
        drop(send);
    });
    if options.processes {
        scan_processes(&shared);
    }
    let mut found = shared.found.into_inner().expect("not poisoned");
    found.sort();
    found.dedup();
    Ok(ScanReport {
        found,
        files_scanned: shared.scanned.into_inner(),
        unreadable: shared.unreadable.into_inner(),
        uid: crate::Host::uid(&crate::SystemHost),
        roots,
        home,
        cwd,
        skipped: skipped
            .iter()
            .filter(|p| !skipped.iter().any(|q| p != &q && under(p, q)))
            .cloned()
            .collect(),
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        stopped_at: shared.stopped_at.into_inner().expect("not poisoned"),
    })
}

/// Walks `roots` depth first, sending each regular file to the readers.
fn walk(
    roots: &[String],
    skipped: &BTreeSet<String>,
    shared: &Shared,
    send: &mpsc::SyncSender<PathBuf>,
) {
    let mut stack: Vec<PathBuf> = roots.iter().rev().map(PathBuf::from).collect();
    // A root under another root is walked once.
    let mut seen = HashSet::new();
    while let Some(top) = stack.pop() {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        if !seen.insert(top.clone()) {
            continue;
        }
        let Ok(entries) = fs::read_dir(&top) else {
            shared.unreadable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        for entry in entries {
            let Ok(entry) = entry else {
                shared.unreadable.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                shared.unreadable.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                if !skipped.contains(path.to_string_lossy().as_ref()) {
                    stack.push(path);
                }
            } else if kind.is_file() && send.send(path).is_err() {
                return;
            }
        }
    }
}

/// Scans every other process's environment and command line.
fn scan_processes(shared: &Shared) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    let own = std::process::id().to_string();
    let mut pids: Vec<u64> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid: &u64| pid.to_string() != own)
        .collect();
    pids.sort_unstable();
    for pid in pids {
        for part in ["environ", "cmdline"] {
            if let Ok(data) = fs::read(format!("/proc/{pid}/{part}")) {
                shared.record(&data, &format!("process {pid} {part}"));
            }
        }
    }
}

/// `datalayer-sandbox scan-secrets`'s arguments after the command.
pub fn parse_args(args: &[&str]) -> Result<(Vec<Target>, Options), String> {
    let mut options = Options::default();
    let mut roots = Vec::new();
    let mut targets = None;
    let mut rest = args.iter();
    while let Some(&arg) = rest.next() {
        match arg {
            "--root" => roots.push(PathBuf::from(rest.next().ok_or("`--root` needs a folder")?)),
            "--no-processes" => options.processes = false,
            "--deadline" => {
                let value = rest
                    .next()
                    .ok_or("`--deadline` needs a number of seconds")?;
                options.deadline = value
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| format!("`--deadline {value}` is not a number of seconds"))?;
            }
            "--readers" => {
                let value = rest.next().ok_or("`--readers` needs a count")?;
                options.readers = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| format!("`--readers {value}` is not a count from 1 to 64"))?;
            }
            json if targets.is_none() && !json.starts_with("--") => {
                targets = Some(
                    serde_json::from_str::<Vec<Target>>(json)
                        .map_err(|e| format!("the targets are not a JSON list of targets: {e}"))?,
                );
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if !roots.is_empty() {
        // Only the folders asked for: the home and working directory are added to `/`.
        options.roots = roots;
        options.home_and_cwd = false;
    }
    Ok((targets.ok_or("no targets given")?, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, value: &[u8], wrapped: bool) -> Target {
        Target {
            name: name.to_owned(),
            len: value.len(),
            hash: rolling_hash(value),
            class: class_of(value).to_owned(),
            wrapped,
        }
    }

    fn found(targets: &[Target], data: &[u8]) -> Vec<String> {
        let mut hits = BTreeSet::new();
        Matcher::new(targets).unwrap().scan(data, &mut hits);
        hits.into_iter().collect()
    }

    #[test]
    fn the_mersenne_reduction_agrees_with_plain_remainders() {
        for x in [
            0u128,
            1,
            u128::from(MODULUS) - 1,
            u128::from(MODULUS),
            1 << 70,
            (1 << 121) + 12345,
        ] {
            assert_eq!(u128::from(reduce(x)), x % u128::from(MODULUS), "{x}");
        }
        let slow = b"sm-fake-canary-0123".iter().fold(0u128, |h, &b| {
            (h * 257 + u128::from(b)) % u128::from(MODULUS)
        });
        assert_eq!(u128::from(rolling_hash(b"sm-fake-canary-0123")), slow);
        for exp in [0, 1, 2, 3, 46, 47, 1000] {
            let plain = (0..exp).fold(1, |p, _| reduce(u128::from(p) * 257));
            assert_eq!(power(257, exp), plain, "257^{exp}");
        }
        // A length no file can hold costs nothing to prepare.
        let huge = Target {
            name: "H".into(),
            len: 1 << 50,
            hash: 5,
            class: "hex".into(),
            wrapped: false,
        };
        assert!(Matcher::new(&[huge]).is_ok());
    }

    #[test]
    fn a_window_matches_at_any_offset_in_its_class_run_and_a_near_miss_does_not() {
        // Fake values made up for this test, not credentials.
        let t = target("T", b"sm-fake-canary-0123456789abcdef", false);
        for lead in ["", "x", "prefix-", "\0\0"] {
            let data = format!("{lead}sm-fake-canary-0123456789abcdef tail");
            assert_eq!(
                found(std::slice::from_ref(&t), data.as_bytes()),
                ["T"],
                "{lead:?}"
            );
        }
        assert!(found(std::slice::from_ref(&t), b"sm-fake-canary-0123456X89abcdef").is_empty());
        // Cut by a line break: only a wrapped form may be.
        let cut = b"sm-fake-canary-01234\n56789abcdef";
        assert!(found(&[t], cut).is_empty());
        let wrapped = target("W", b"c20tZmFrZS1jYW5hcnk", true);
        assert_eq!(found(&[wrapped], b"xx c20tZmFr\r\nZS1jYW5hcnk yy"), ["W"]);
    }

    /// Runs found one byte at a time, the plain way.
    fn runs_plainly(data: &[u8], members: &[bool; 256], n: usize) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut start = None;
        for i in 0..=data.len() {
            let member = data.get(i).is_some_and(|&b| members[usize::from(b)]);
            match (member, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    if i - s >= n {
                        found.push((s, i));
                    }
                    start = None;
                }
                _ => {}
            }
        }
        found
    }

    #[test]
    fn skipping_ahead_finds_the_runs_a_plain_walk_finds() {
        let members = std::array::from_fn(|b| CLASSES[1].1(u8::try_from(b).unwrap()));
        // A linear congruential generator: the same bytes every time, mostly members.
        let mut x: u64 = 7;
        let data: Vec<u8> = (0..20_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let pick = (x >> 33) % 40;
                if pick < 36 {
                    b"abcdefghijklmnopqrstuvwxyz0123456789"[pick as usize]
                } else {
                    b' '
                }
            })
            .collect();
        for n in [1, 2, 5, 9, 20, 64] {
            for cut in [0, 1, 7, 19_999, 20_000] {
                assert_eq!(
                    runs(&data[..cut], &members, n),
                    runs_plainly(&data[..cut], &members, n),
                    "n {n}, cut {cut}"
                );
            }
            assert_eq!(
                runs(&data, &members, n),
                runs_plainly(&data, &members, n),
                "n {n}"
            );
        }
    }

    #[test]
    fn a_form_of_any_class_is_hashed_over_every_window() {
        // A fake value with a space, so of class any; not a credential.
        let t = target("ODD", b"fake canary 0123", false);
        assert_eq!(t.class, ANY_CLASS);
        assert_eq!(found(&[t], b"\x01\x02fake canary 0123\xff"), ["ODD"]);
    }

    #[test]
    fn bad_targets_and_arguments_are_named() {
        let mut t = target("T", b"abc", false);
        t.class = "emoji".into();
        let err = Matcher::new(&[t]).err().unwrap();
        assert!(err.contains("`emoji`"), "{err}");
        assert!(
            parse_args(&["[]", "--deadline", "soon"])
                .unwrap_err()
                .contains("soon")
        );
        assert!(parse_args(&["{"]).unwrap_err().contains("not a JSON list"));
        assert!(
            parse_args(&["--no-processes"])
                .unwrap_err()
                .contains("no targets")
        );
        let (_, options) = parse_args(&["[]", "--root", "/tmp", "--readers", "3"]).unwrap();
        assert_eq!(options.roots, [PathBuf::from("/tmp")]);
        assert_eq!(options.readers, 3);
    }
}
