"""Times, interleaved in one session, the reference Python suite (code-sandboxes 1.10.0,
installed from PyPI) and sandbox-matrix on the same reference image on this machine:
create to first 1+1, and the wall time of the core tier's checks (1-9). Prints n, median
and range of each.

Usage (from the checkout, with the base image bootstrapped and a release build):
    python3 -m venv /tmp/ref-venv && /tmp/ref-venv/bin/pip install code-sandboxes==1.10.0
    cargo build --release --workspace
    /tmp/ref-venv/bin/python bench/compare_reference_core_tier.py [--repeat 5]

Create to first 1+1: on the reference side from `docker run` to the answer of its
JupyterServerSandbox (waiting for the server by polling every 50 ms, as a user of it
would); on sandbox-matrix's side the lifecycle scenario's `create-to-first-result`.
Core tier: only the checks are timed on both sides, not the image build, the container
start or the kernel start. sandbox-matrix's first check to use the code channel starts
its kernel, so its wall time runs from the kernel's channels opening (Jupyter Server opens
them once the kernel answers) to the end of its last check, read off the start and
duration of each step in results.json. It starts its independent checks together, the
secrets scan (through exec, beside the code channel) among them, and runs restart and
shutdown after them, in order.
"""

import argparse
from importlib import metadata
import json
import secrets
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import code_sandboxes.environments.conformance as reference_suite
from code_sandboxes.environments.conformance import run_core_tier
from code_sandboxes.sandboxes.jupyter_server.jupyter_server import JupyterServerSandbox

IMAGE = "sandbox-matrix/contract-base:v1"
PACKAGES = {"ipykernel": "6.29.5", "jupyter-client": "8.6.3"}
LABEL = "sandbox-matrix.run=compare-reference"
# The checks by number, as both suites name them: the reference's functions, ours' steps.
CHECKS = ("doctor", "identity", "python", "kernel", "imports", "filesystem", "restart", "shutdown", "secrets")
# Seconds each reference check took in the current run, by name.
REFERENCE_SPENT = {}


def timed(name, check):
    """The reference's check `check`, recording its wall time under `name`."""
    def run(*args, **kwargs):
        started = time.monotonic()
        try:
            return check(*args, **kwargs)
        finally:
            REFERENCE_SPENT[name] = time.monotonic() - started
    return run


# Each reference check is timed where run_core_tier calls it (by module global).
for _name in CHECKS:
    setattr(reference_suite, "_" + _name, timed(_name, getattr(reference_suite, "_" + _name)))


def docker(*args):
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def reference_once():
    REFERENCE_SPENT.clear()
    token = secrets.token_hex(16)
    created = time.monotonic()
    container = docker(
        "run", "-d", "--label", LABEL, "-e", f"JUPYTER_TOKEN={token}", "-p", "127.0.0.1::8888", IMAGE,
        # The server's own executable, as sandbox-matrix's docker variant starts it.
        "jupyter-server", "--ServerApp.ip=0.0.0.0", "--ServerApp.port=8888",
        "--ServerApp.open_browser=False", "--ServerApp.root_dir=/home/datalayer",
    )
    try:
        port = docker("port", container, "8888/tcp").splitlines()[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/api", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        sandbox = JupyterServerSandbox(server_url=url, token=token, reuse_kernel=False)
        sandbox.start()
        # Warms the kernel, as sandbox-matrix's launch does not: both sides time checks only.
        first = sandbox.run_code("1+1")
        create_to_first = time.monotonic() - created
        assert "2" in str(first), first
        started = time.monotonic()
        result = run_core_tier(
            sandbox,
            python_version="3.13",
            expected_packages=PACKAGES,
            secret_values=["sm-fake-canary-" + secrets.token_hex(16)],  # a fake canary
            image_metadata=docker("image", "inspect", IMAGE),
            restart=sandbox.restart_kernel,
        )
        took = time.monotonic() - started
        sandbox.stop()
        passed = sum(1 for check in result.checks if check.passed)
        return create_to_first, took, f"{passed}/{len(result.checks)}", dict(REFERENCE_SPENT)
    finally:
        docker("rm", "-f", "-v", container)


# Checks that do not use the code channel on the docker variant: the secrets scan runs as
# root through exec, beside the others.
FREE = ("core-9-secrets",)


def ours_once(root):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [str(root / "target/release/sandbox-matrix"), "run", "--variant", "docker",
             "--scenario", "lifecycle", "--scenario", "core-tier", "--root", str(root), "--out", out],
            check=False, capture_output=True,
        )
        results = json.loads((Path(out) / "latest/results.json").read_text())
    by_name = {s["scenario"]: s for s in results["scenarios"]}
    create_to_first = next(
        t["duration"] for t in by_name["lifecycle"]["timings"] if t["name"] == "create-to-first-result"
    ) / 1000
    steps = [s for s in by_name["core-tier"]["steps"] if s["step"].startswith("core-") and "started" in s]
    # Each step says when it started (from the scenario's start) and how long it took, so
    # the checks' wall time is read off the clock: from the kernel being up (the check
    # that opens the code channel starts it, and its channels open once it answers) to
    # the end of the last check. The reference's kernel was up before its timing began.
    # The check that opened the channel is the one that timed the kernel's start.
    lead = next((s for s in steps if any(t["name"] == "kernel-start-to-channels" for t in s["timings"])),
                next(s for s in steps if s["step"] not in FREE))
    kernel_up = lead["started"] + sum(
        t["duration"] for t in lead["timings"] if t["name"] == "kernel-start-to-channels")
    took = (max(s["started"] + s["duration"] for s in steps) - kernel_up) / 1000
    # Each check's own duration; the first channel check's without the kernel's start.
    spent = {s["step"].split("-", 2)[2]: s["duration"] / 1000 for s in steps}
    spent[lead["step"].split("-", 2)[2]] -= (kernel_up - lead["started"]) / 1000
    passed = sum(1 for s in steps if s["status"] == "passed")
    return create_to_first, took, f"{passed}/{len(steps)}", spent


def cell(values):
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write every measurement to this file "
                        "(bench/performance.py keeps it in docs/measurements/performance-runs/)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    rows = {"reference (code-sandboxes 1.10.0)": [], "sandbox-matrix": []}
    # Interleaved, so that a machine getting busier or quieter weighs on both alike.
    for _ in range(args.repeat):
        rows["reference (code-sandboxes 1.10.0)"].append(reference_once())
        rows["sandbox-matrix"].append(ours_once(root))
    print(f"n={args.repeat} each, interleaved; median (min-max)")
    print("| suite | core tier passed | create to first 1+1 | wall time of checks 1-9 |")
    print("|---|---|---|---|")
    for name, runs in rows.items():
        print(f"| {name} | {runs[-1][2]} | {cell([r[0] for r in runs])} | {cell([r[1] for r in runs])} |")
    ratio = statistics.median([r[1] for r in rows["sandbox-matrix"]]) / statistics.median(
        [r[1] for r in rows["reference (code-sandboxes 1.10.0)"]])
    print(f"core tier, sandbox-matrix / reference (medians): x{ratio:.2f}")
    print()
    print("each check's own time, median (the reference runs them one after another;")
    print("sandbox-matrix runs 1-6 and 9 at once, then 7 and 8)")
    print("| check | " + " | ".join(rows) + " |")
    print("|---|---|---|")
    for number, name in enumerate(CHECKS, 1):
        times = [[r[3][name] for r in runs if name in r[3]] for runs in rows.values()]
        cells = [f"{statistics.median(t):.2f} s" if t else "did not run" for t in times]
        print(f"| {number} {name} | " + " | ".join(cells) + " |")
    if args.json:
        keys = ("create_to_first_s", "checks_wall_s", "passed", "check_s")
        args.json.write_text(json.dumps({
            "repeat": args.repeat,
            "reference": "code-sandboxes " + metadata.version("code-sandboxes"),
            "checks": list(CHECKS),
            "runs": {name: [dict(zip(keys, r)) for r in runs] for name, runs in
                     zip(("reference", "sandbox-matrix"), rows.values())},
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
