"""Datalayer's own Python client (datalayer-core) runs its runtime flow against
`sandbox-matrix emulate datalayer`:

  create_runtime(environment) -> get_runtime(pod_name) -> list_runtimes -> start (a kernel
  at the runtime's ingress, with the runtime's token) -> execute("1+1") -> stop (the
  kernel, then DELETE by pod_name) -> the runtime is no longer listed

Run by harness/tests/engine/sdk_datalayer.rs with the venv of harness/tests/sdk/requirements.txt,
from an empty working directory whose HOME holds no Datalayer configuration (so neither
~/.datalayer/config.json nor a keyring entry can move the URLs or the token). Environment:
  SANDBOX_MATRIX_DATALAYER_PLAIN_URL  http://127.0.0.1:<port>, the emulator's plain HTTP
                                      address: the client's run, IAM and runtimes URL
  SANDBOX_MATRIX_ENVIRONMENT          the environment to launch (ai-agents-env, datalayer-core 1.1.40's default)

Prints one JSON line per step, {"step", "ok", "detail"}; exits 1 at the first failed step.
"""

import json
import os
import sys

base = os.environ["SANDBOX_MATRIX_DATALAYER_PLAIN_URL"]
environment = os.environ["SANDBOX_MATRIX_ENVIRONMENT"]
# Each would replace what is passed below; none may come from the caller.
for name in ("DATALAYER_RUN_URL", "DATALAYER_URL", "DATALAYER_IAM_URL", "DATALAYER_RUNTIMES_URL",
             "DATALAYER_API_KEY", "TEST_DATALAYER_API_KEY", "DATALAYER_EXTERNAL_TOKEN"):
    os.environ.pop(name, None)

from datalayer_core import DatalayerClient  # noqa: E402
from datalayer_core.utils.urls import DatalayerURLs  # noqa: E402

FAKE_TOKEN = "datalayer-fake-sdk-token-0000"  # Fake: the emulator checks only that one is sent.


def step(name, ok, detail):
    print(json.dumps({"step": name, "ok": ok, "detail": detail}), flush=True)
    if not ok:
        sys.exit(f"datalayer flow failed at {name}: {detail}")


urls = DatalayerURLs.from_environment(run_url=base, iam_url=base, runtimes_url=base)
client = DatalayerClient(urls=urls, token=FAKE_TOKEN)

runtime = client.create_runtime(name="sdk-flow", environment=environment, time_reservation=10)
step("create", bool(runtime.pod_name) and runtime.ingress.startswith(base),
     {"pod_name": runtime.pod_name, "uid": runtime.uid, "ingress": runtime.ingress})

got = client.get_runtime(runtime.pod_name)
step("get", got.pod_name == runtime.pod_name, {"pod_name": got.pod_name})

listed = [r.pod_name for r in client.list_runtimes()]
step("list", runtime.pod_name in listed, {"listed": listed})

runtime.start()
outputs = runtime.execute("1+1").execute_response
results = [o.get("data", {}).get("text/plain") for o in outputs
           if o.get("output_type") == "execute_result"]
step("execute", results == ["2"], {"results": results})

runtime.stop()
after = [r.pod_name for r in client.list_runtimes()]
step("delete", runtime.pod_name not in after, {"listed_after": after})
