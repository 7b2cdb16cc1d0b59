# sandbox-matrix secrets scan, run inside the sandbox.
#
# It is given, for each form of each secret (the value, its base64, URL-encoded and hex
# forms), a name, a length, a polynomial rolling hash (base 257 modulo 2**61 - 1 over the
# bytes) and the name of a character class the form's bytes all belong to; never a value.
# It reports where a window of that length hashes the same: files under the roots (every
# file system but the pseudo ones), process environments and command lines. One JSON line
# behind the marker goes to stdout.
#
# Speed: a window can only match inside a run of bytes of its class at least as long as
# the form, so runs are found with a regular expression (C speed) and only they are
# hashed in Python. Files shorter than the shortest form are not read.
import json
import os
import re
import time

BASE = 257
MOD = (1 << 61) - 1
MAX_FILE = 16 * 1024 * 1024
DEADLINE = 60.0
ROOTS = ("/",)
# Never descended into: kernel and device views, not files a build or start wrote.
SKIP = ("/proc", "/sys", "/dev")
PSEUDO_FS = {
    "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts",
    "devtmpfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "proc", "pstore",
    "rpc_pipefs", "securityfs", "selinuxfs", "sysfs", "tracefs",
}
# The classes the host may name; None means any byte (no prefilter).
CLASSES = {
    "hex": rb"[0-9A-Fa-f]",
    "base64": rb"[A-Za-z0-9+/=]",
    "token": rb"[A-Za-z0-9%+/=._~\-]",
    "graph": rb"[!-~]",
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


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


class Scanner:
    def __init__(self, targets):
        # class -> (run pattern, {length: {hash: name}})
        groups = {}
        for t in targets:
            by_len = groups.setdefault(t["class"], {})
            by_len.setdefault(t["len"], {})[t["hash"]] = t["name"]
        self.groups = []
        for cls, by_len in groups.items():
            shortest = min(by_len)
            pattern = None
            if CLASSES[cls] is not None:
                c = CLASSES[cls]
                pattern = re.compile(b"(?<!" + c + b")" + c + b"{%d,}" % shortest)
            self.groups.append((pattern, by_len))
        self.shortest = min((t["len"] for t in targets), default=1)
        self.tops = {t["len"]: pow(BASE, t["len"] - 1, MOD) for t in targets}
        self.found = []

    def scan(self, data, where):
        hits = set()
        for pattern, by_len in self.groups:
            if pattern is None:
                spans = [(0, len(data))]
            else:
                spans = [m.span() for m in pattern.finditer(data)]
            for start, end in spans:
                for n, hashes in by_len.items():
                    if end - start >= n:
                        self.roll(data, start, end, n, hashes, hits)
        for name in sorted(hits):
            self.found.append({"name": name, "where": where})

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
    while stack and stopped_at is None:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            unreadable += 1
            continue
        for entry in entries:
            path = entry.path
            try:
                if entry.is_dir(follow_symlinks=False):
                    if path not in skipped:
                        stack.append(path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
                if size < scanner.shortest:
                    continue
                if size > MAX_FILE:
                    unreadable += 1
                    continue
                with open(path, "rb") as f:
                    data = f.read(MAX_FILE)
            except OSError:
                unreadable += 1
                continue
            scanned += 1
            scanner.scan(data, path)
            if time.monotonic() - started > deadline:
                stopped_at = path
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
        "skipped": sorted(skipped),
        "seconds": round(time.monotonic() - started, 3),
        "stopped_at": stopped_at,
    }))
