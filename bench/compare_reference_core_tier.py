"""Times the core tier (checks 1-9) of sandbox-matrix and of the reference Python suite
(code-sandboxes 1.10.0, installed from PyPI) against the same reference image on this
machine, one after the other, and prints both wall times.

Usage (from the checkout, with the base image bootstrapped and a release build):
    python3 -m venv /tmp/ref-venv && /tmp/ref-venv/bin/pip install code-sandboxes==1.10.0
    cargo build --release --workspace
    /tmp/ref-venv/bin/python bench/compare_reference_core_tier.py [--repeat 3]

Only the checks are timed on both sides: not the image build, the container start or the
kernel start (sandbox-matrix's first check starts its kernel; that span is subtracted).
The reference side reaches the container's Jupyter Server on a 127.0.0.1 port; the
sandbox-matrix side runs `scenarios/core-tier.yaml` and sums its check steps.
"""

import argparse
import json
import secrets
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from code_sandboxes.environments.conformance import run_core_tier
from code_sandboxes.sandboxes.jupyter_server.jupyter_server import JupyterServerSandbox

IMAGE = "sandbox-matrix/contract-base:v1"
PACKAGES = {"ipykernel": "6.29.5", "jupyter-client": "8.6.3"}
LABEL = "sandbox-matrix.run=compare-reference"


def docker(*args):
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def reference_once():
    token = secrets.token_hex(16)
    container = docker(
        "run", "-d", "--label", LABEL, "-e", f"JUPYTER_TOKEN={token}", "-p", "127.0.0.1::8888", IMAGE,
        "jupyter", "server", "--ServerApp.ip=0.0.0.0", "--ServerApp.port=8888",
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
        # Warm the kernel as sandbox-matrix's launch does not: both sides time checks only.
        sandbox.run_code("1+1")
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
        return took, f"{passed}/{len(result.checks)}"
    finally:
        docker("rm", "-f", "-v", container)


def ours_once(root):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [str(root / "target/release/sandbox-matrix"), "run", "--variant", "docker",
             "--scenario", "core-tier", "--root", str(root), "--out", out],
            check=False, capture_output=True,
        )
        results = json.loads((Path(out) / "latest/results.json").read_text())
    steps = [s for s in results["scenarios"][0]["steps"] if s["step"].startswith("core-")]
    # The first check starts the kernel; the reference's kernel was started before timing.
    kernel_start = sum(t["duration"] for s in steps for t in s["timings"] if t["name"] == "kernel-start-to-first-answer")
    took = (sum(s["duration"] for s in steps) - kernel_start) / 1000
    passed = sum(1 for s in steps if s["status"] == "passed")
    return took, f"{passed}/{len(steps)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    rows = {"reference (code-sandboxes 1.10.0)": [], "sandbox-matrix": []}
    for _ in range(args.repeat):
        rows["reference (code-sandboxes 1.10.0)"].append(reference_once())
        rows["sandbox-matrix"].append(ours_once(root))
    print("| suite | core tier passed | wall time of checks 1-9, median (min-max) |")
    print("|---|---|---|")
    for name, runs in rows.items():
        times = [t for t, _ in runs]
        print(f"| {name} | {runs[-1][1]} | {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f}), n={len(times)} |")


if __name__ == "__main__":
    main()
