"""Datalayer's own Python client (datalayer-core 1.1.40) performs the parity intents
against the datalayer emulator, each marked with the wall clock around it, so that
harness/tests/engine/parity/datalayer_runtimes.rs can set the requests the emulator kept
for each intent beside those the project's client sent.

Intents, in order (the parity file says why the others are not applicable):
  create   create_runtime(name, environment, time_reservation)
  run-1+1  start() (a kernel at the runtime's ingress), execute("1+1")
  state    get_runtime(<its pod_name>)
  list     list_runtimes()
  delete   stop() (the kernel, then the runtime)
  state-deleted  get_runtime(<its pod_name>) once stopped: not found

Environment: SANDBOX_MATRIX_PARITY, a JSON object: url (the emulator's plain address, the
client's run, IAM and runtimes URL), name, environment, time_reservation; each intent's
parameters are those the project's client sent. Run from an empty folder whose HOME holds
no Datalayer configuration.

Prints one JSON line per intent, {"step", "ok", "from_ms", "to_ms", "detail"}; exits 1 at
the first failed one.
"""

import json
import os

from parity_flow import intent  # this folder's, beside the script

given = json.loads(os.environ["SANDBOX_MATRIX_PARITY"])
for name in ("DATALAYER_RUN_URL", "DATALAYER_URL", "DATALAYER_IAM_URL", "DATALAYER_RUNTIMES_URL",
             "DATALAYER_API_KEY", "TEST_DATALAYER_API_KEY", "DATALAYER_EXTERNAL_TOKEN"):
    os.environ.pop(name, None)

from datalayer_core import DatalayerClient  # noqa: E402
from datalayer_core.utils.urls import DatalayerURLs  # noqa: E402

FAKE_TOKEN = "datalayer-fake-parity-token-0000"  # Fake: the emulator checks only that one is sent.


base = given["url"]
client = DatalayerClient(
    urls=DatalayerURLs.from_environment(run_url=base, iam_url=base, runtimes_url=base),
    token=FAKE_TOKEN)
state = {}


def create():
    runtime = client.create_runtime(name=given["name"], environment=given["environment"],
                                    time_reservation=given["time_reservation"])
    state["runtime"] = runtime
    return {"pod_name": runtime.pod_name}


def run_code():
    runtime = state["runtime"]
    runtime.start()
    outputs = runtime.execute("1+1").execute_response
    results = [o.get("data", {}).get("text/plain") for o in outputs
               if o.get("output_type") == "execute_result"]
    if results != ["2"]:
        raise RuntimeError(f"1+1 gave {results}")
    return {"results": results}


def runtime_state():
    found = client.get_runtime(state["runtime"].pod_name)
    return {"pod_name": found.pod_name}


def state_deleted():
    try:
        client.get_runtime(state["runtime"].pod_name)
    except RuntimeError as e:
        if "404" in str(e):
            return {"found": False}
        raise
    raise RuntimeError("a stopped runtime is still there")


def listed():
    found = [r.pod_name for r in client.list_runtimes()]
    if state["runtime"].pod_name not in found:
        raise RuntimeError(f"the runtime is not listed: {found}")
    return {"listed": found}


def delete():
    state["runtime"].stop()
    return {"stopped": True}


intent("datalayer", "create", create)
try:
    intent("datalayer", "run-1+1", run_code)
    intent("datalayer", "state", runtime_state)
    intent("datalayer", "list", listed)
finally:
    if "runtime" in state:
        intent("datalayer", "delete", delete)
intent("datalayer", "state-deleted", state_deleted)
