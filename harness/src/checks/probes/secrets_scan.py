# sandbox-matrix secrets scan, run inside the sandbox.
#
# It is given, for each form of each secret (the value, its base64, URL-encoded and hex
# forms), a name, a length, a polynomial rolling hash (base 257 modulo 2**61 - 1 over the
# bytes), the name of a character class the form's bytes all belong to, and whether line
# breaks may cut it (base64 is often wrapped); never a value.
# It reports where a window of that length hashes the same: files under the roots (every
# file system but the pseudo ones), process environments and command lines. One JSON line
# behind the marker goes to stdout.
#
# Speed: a window can only match inside a run of bytes of its class at least as long as
# the form, so each file is translated to class marks and such runs are found with
# bytes.find (both C speed); only they are hashed in Python. Files shorter than the
# shortest form are not opened, and files are read by a few threads at once, since on
# some storage drivers opening a file is slower than scanning it.
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

BASE = 257
MOD = (1 << 61) - 1
MAX_FILE = 16 * 1024 * 1024
DEADLINE = 90.0
ROOTS = ("/",)
# Never descended into: kernel and device views, not files a build or start wrote.
SKIP = ("/proc", "/sys", "/dev")
PSEUDO_FS = {
    "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts",
    "devtmpfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "proc", "pstore",
    "rpc_pipefs", "securityfs", "selinuxfs", "sysfs", "tracefs",
}
READERS = 4
BATCH = 32
DIGITS_LOWER = b"0123456789abcdefghijklmnopqrstuvwxyz"
ALNUM = DIGITS_LOWER + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# The classes the host may name, by their bytes; None means any byte (no prefilter).
CLASSES = {
    "hex": b"0123456789ABCDEFabcdef",
    "lowercase": DIGITS_LOWER + b"-_",
    "alnum": ALNUM,
    "base64url": ALNUM + b"-_",
    "base64": ALNUM + b"+/=",
    "token": ALNUM + b"%+/=._~-",
    "graph": bytes(range(0x21, 0x7F)),
    "any": None,
}


def pseudo_mounts():
    """Mount points of pseudo file systems, from /proc/self/mountinfo."""
    found = set()
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) > 4 and right.split()[:1] and right.split()[0] in PSEUDO_FS:
                    found.add(fields[4].replace("\\040", " "))
    except OSError:
        pass
    return found


def runs(marks, n):
    """The (start, end) of every run of 1s at least n long in marks."""
    found, needle = [], b"\x01" * n
    start = marks.find(needle)
    while start >= 0:
        end = marks.find(b"\x00", start + n)
        if end < 0:
            end = len(marks)
        found.append((start, end))
        start = marks.find(needle, end)
    return found


def read(path):
    """The file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE)
    except OSError:
        return None


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def marks(members):
    """A translation table: 1 for the bytes in members, 0 for the others."""
    return bytes(1 if b in members else 0 for b in range(256))


class Scanner:
    def __init__(self, targets):
        groups, self.anything = {}, {}
        for t in targets:
            if CLASSES[t["class"]] is None:
                by_len = self.anything
            else:
                by_len = groups.setdefault((t["class"], t["wrapped"]), {})
            by_len.setdefault(t["len"], {})[t["hash"]] = t["name"]
        # (class marks, wrapped, shortest length, {length: {hash: name}}) for each class
        # but any; a wrapped form may be cut by line breaks, which are then ignored.
        self.classes = [
            (marks(CLASSES[c]), wrapped, min(by_len), by_len)
            for (c, wrapped), by_len in groups.items()
        ]
        union = b"".join(CLASSES[c] + (b"\r\n" if w else b"") for c, w in groups)
        self.union = marks(union)
        self.union_shortest = min((s for _, _, s, _ in self.classes), default=0)
        self.shortest = min((t["len"] for t in targets), default=1)
        self.tops = {t["len"]: pow(BASE, t["len"] - 1, MOD) for t in targets}
        self.found = []

    def scan(self, data, where):
        hits = set()
        # One pass over the whole data for the union of the classes, then each class
        # within the runs it found.
        if self.classes:
            for start, end in runs(data.translate(self.union), self.union_shortest):
                part = data[start:end]
                unwrapped = None
                for table, wrapped, shortest, by_len in self.classes:
                    text = part
                    if wrapped:
                        if unwrapped is None:
                            unwrapped = part.replace(b"\r", b"").replace(b"\n", b"")
                        text = unwrapped
                    for s, e in runs(text.translate(table), shortest):
                        self.roll_all(text, s, e, by_len, hits)
        self.roll_all(data, 0, len(data), self.anything, hits)
        for name in sorted(hits):
            self.found.append({"name": name, "where": where})

    def roll_all(self, data, start, end, by_len, hits):
        for n, hashes in by_len.items():
            if end - start >= n:
                self.roll(data, start, end, n, hashes, hits)

    def roll(self, data, start, end, n, hashes, hits):
        top = self.tops[n]
        h = 0
        for b in data[start:start + n]:
            h = (h * BASE + b) % MOD
        i, last = start, end - n
        while True:
            if h in hashes:
                hits.add(hashes[h])
            if i == last:
                return
            h = ((h - data[i] * top) * BASE + data[i + n]) % MOD
            i += 1


def main(targets_json, roots=ROOTS, processes=True, deadline=DEADLINE):
    started = time.monotonic()
    scanner = Scanner(json.loads(targets_json))
    home, cwd = os.path.expanduser("~"), os.getcwd()
    roots = list(roots)
    for extra in (home, cwd):
        if not any(under(extra, r) for r in roots):
            roots.append(extra)
    skipped = set(SKIP) | pseudo_mounts()
    scanned, unreadable, stopped_at = 0, 0, None
    stack = list(reversed(roots))
    with ThreadPoolExecutor(READERS) as readers:
        while stack and stopped_at is None:
            top = stack.pop()
            try:
                entries = list(os.scandir(top))
            except OSError:
                unreadable += 1
                continue
            paths = []
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.path not in skipped:
                            stack.append(entry.path)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    size = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    unreadable += 1
                    continue
                if size > MAX_FILE:
                    unreadable += 1
                elif size >= scanner.shortest:
                    paths.append(entry.path)
            # In batches, so that at most a batch of files is held in memory.
            for at in range(0, len(paths), BATCH):
                batch = paths[at:at + BATCH]
                for path, data in zip(batch, readers.map(read, batch)):
                    if data is None:
                        unreadable += 1
                        continue
                    scanned += 1
                    scanner.scan(data, path)
                    if time.monotonic() - started > deadline:
                        stopped_at = path
                        break
                if stopped_at is not None:
                    break
    for pid in os.listdir("/proc") if processes else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            scanner.scan(data, f"process {pid} {part}")
    print("SANDBOX_MATRIX_PROBE " + json.dumps({
        "found": scanner.found,
        "files_scanned": scanned,
        "unreadable": unreadable,
        "uid": os.getuid(),
        "roots": roots,
        "home": home,
        "cwd": cwd,
        "skipped": sorted(p for p in skipped if not any(p != q and under(p, q) for q in skipped)),
        "seconds": round(time.monotonic() - started, 3),
        "stopped_at": stopped_at,
    }))
