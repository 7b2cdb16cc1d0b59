# sandbox-matrix secrets scan, run inside the sandbox.
# It is given each secret's name, length and polynomial rolling hash (base 257 modulo
# 2**61 - 1 over the UTF-8 bytes), never the value, and reports where a window of that
# length hashes the same: files under the scanned roots, process environments and
# command lines. One JSON line behind the marker goes to stdout.
import json
import os

BASE = 257
MOD = (1 << 61) - 1
MAX_FILE = 16 * 1024 * 1024
ROOTS = ("/etc", "/home", "/opt", "/root", "/tmp")


def main(targets_json, roots=ROOTS, processes=True):
    targets = json.loads(targets_json)
    by_len = {}
    for t in targets:
        by_len.setdefault(t["len"], {})[t["hash"]] = t["name"]
    tops = {n: pow(BASE, n - 1, MOD) for n in by_len}
    found, unreadable, scanned = [], 0, 0

    def scan(data, where):
        for n, hashes in by_len.items():
            if len(data) < n:
                continue
            top = tops[n]
            h = 0
            for b in data[:n]:
                h = (h * BASE + b) % MOD
            i, last = 0, len(data) - n
            while True:
                if h in hashes:
                    found.append({"name": hashes[h], "where": where})
                    break
                if i == last:
                    break
                h = ((h - data[i] * top) * BASE + data[i + n]) % MOD
                i += 1

    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    if os.path.islink(path) or not os.path.isfile(path):
                        continue
                    if os.path.getsize(path) > MAX_FILE:
                        unreadable += 1
                        continue
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    unreadable += 1
                    continue
                scanned += 1
                scan(data, path)
    for pid in os.listdir("/proc") if processes else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            scan(data, f"process {pid} {part}")
    print("SANDBOX_MATRIX_PROBE " + json.dumps(
        {"found": found, "files_scanned": scanned, "unreadable": unreadable, "uid": os.getuid()}
    ))
