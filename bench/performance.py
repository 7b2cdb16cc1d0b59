"""Measures what docs/measurements/performance.md reports and keeps every measurement in a run folder
(default docs/measurements/performance-runs/), from which `harness/tests/performance_doc.rs` renders the
document's tables: nothing in them is typed by hand.

Usage (from the checkout, with the base image bootstrapped, on a machine doing nothing else):
    cargo build --release --workspace
    python3 -m venv /tmp/ref-venv && /tmp/ref-venv/bin/pip install code-sandboxes==1.10.0
    python3 bench/performance.py --reference-python /tmp/ref-venv/bin/python [--no-base]
    SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test performance_doc

What it measures, one after another (so that no two compete for the machine):
- the default `run` (every variant, every scenario, as a user types it), `--runs` times: the
  wall time of the command, and each run's results.json (host name, paths and loopback
  ports redacted), which holds its step durations, floors and create-to-first timings;
- with `--no-base`, once more after removing the base image and its root filesystem, so
  that the run bootstraps them first (the Debian mirror is part of that time);
- the core tier against the reference suite (`compare_reference_core_tier.py --json`),
  interleaved, `--reference-repeat` times each, when `--reference-python` is given;
- the harness's overhead on create to first result (`cargo bench --bench overhead`).
A part not measured this time keeps no file, and the document says "not measured".
"""

import argparse
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "target/release/sandbox-matrix"
BASE_IMAGES = ("sandbox-matrix/contract-base:v1", "sandbox-matrix/contract-rootfs:trixie")


def say(message):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


def output(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def machine():
    """What the numbers were measured on, in the words of the tools that report it."""
    memory_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    engine = json.loads(output("docker", "info", "--format", "{{json .}}"))
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024 / 1024),
        "docker": engine.get("ServerVersion"),
        "storage_driver": engine.get("Driver"),
        "cgroup": engine.get("CgroupVersion"),
    }


def redact(text, out_dir):
    """The run's results without this machine: host name, paths and loopback ports."""
    for place, name in ((str(out_dir), "[out]"), (str(ROOT), "[checkout]"), (tempfile.gettempdir(), "[tmp]"),
                        (os.environ.get("HOME", ""), "[home]"), (socket.gethostname(), "[host]")):
        if len(place) > 5 or place.startswith("/") and len(place) > 1:
            # A whole path or name only: `/root` is redacted, `/rootfs` is not.
            text = re.sub(re.escape(place) + r"(?=[/\"\s:]|$)", name, text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:[port]", text)
    results = json.loads(text)
    results["provenance"]["host"] = "[host]"
    return json.dumps(results, indent=1) + "\n"


def timed_run(folder, name):
    """One default run, timed; its redacted results kept as `<name>.results.json`."""
    with tempfile.TemporaryDirectory(prefix="sm-perf-") as out:
        started = time.monotonic()
        run = subprocess.run([str(BINARY), "run", "--root", str(ROOT), "--out", out],
                             capture_output=True, text=True)
        took = time.monotonic() - started
        if run.returncode != 0:
            sys.exit(f"{name}: `sandbox-matrix run` exited {run.returncode}; its last words:\n{run.stderr[-2000:]}")
        results = (Path(out) / "latest/results.json").read_text()
        (folder / f"{name}.results.json").write_text(redact(results, out))
    say(f"{name}: {took:.1f} s")
    return round(took, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/measurements/performance-runs")
    parser.add_argument("--runs", type=int, default=3, help="default runs with the base present")
    parser.add_argument("--no-base", action="store_true",
                        help="also time one default run after removing the base image")
    parser.add_argument("--reference-python", type=Path,
                        help="a python with code-sandboxes 1.10.0, for the core tier's comparison")
    parser.add_argument("--reference-repeat", type=int, default=5)
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    if not BINARY.exists():
        sys.exit(f"no release build at {BINARY}: run `cargo build --release --workspace` first")
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    rev = output("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD")
    if output("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"):
        rev += " with uncommitted changes"
    measured = {
        "date": datetime.date.today().isoformat(),
        "revision": rev,
        "build": "release",
        "machine": machine(),
        "default_run_s": [],
        "no_base_run_s": None,
    }
    say(f"measuring into {args.out} on {measured['machine']}")
    for i in range(1, args.runs + 1):
        measured["default_run_s"].append(timed_run(args.out, f"default-{i}"))
    if args.no_base:
        for image in BASE_IMAGES:
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
        subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True)
        say("base removed: the next run bootstraps it")
        measured["no_base_run_s"] = timed_run(args.out, "no-base")
    if args.reference_python:
        say(f"core tier against the reference, {args.reference_repeat} times each")
        subprocess.run([str(args.reference_python), str(ROOT / "bench/compare_reference_core_tier.py"),
                        "--repeat", str(args.reference_repeat), "--json", str(args.out / "reference-core-tier.json")],
                       check=True)
    if not args.skip_overhead:
        say("the harness's overhead (cargo bench --bench overhead)")
        subprocess.run(["cargo", "bench", "-q", "-p", "sandbox-matrix", "--bench", "overhead"], cwd=ROOT, check=True,
                       env={**os.environ, "SANDBOX_MATRIX_BENCH_JSON": str(args.out / "overhead.json")})
    (args.out / "measured.json").write_text(json.dumps(measured, indent=1) + "\n")
    say(f"done; render with: SANDBOX_MATRIX_BLESS=1 cargo test -p sandbox-matrix --test performance_doc")


if __name__ == "__main__":
    main()
