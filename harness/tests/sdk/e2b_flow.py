"""The official e2b-code-interpreter SDK's own flow against `sandbox-matrix emulate e2b`.

Code interpreter template:  create -> run_code("1+1") -> commands.run("echo hi") -> kill
Jupyter Server template:    create, public traffic off -> jupyter -> commands.run -> kill
  where `jupyter` asks the template's Jupyter Server on the SDK's host for port 49999 for
  its kernels, once with the sandbox's traffic access token as the SDK sends it (200) and
  once without (refused): what the project's e2b client relies on.

Run by harness/tests/engine/sdk_e2b.rs with the venv of harness/tests/sdk/requirements.txt, from an
empty working directory. Environment:
  SANDBOX_MATRIX_EMULATOR_URL  https://<domain>:<port> of the emulator, e.g.
                               https://e2b.localhost:8443. Its host:port is the SDK's
                               `domain` (E2B_DOMAIN): the control plane is then
                               https://api.<domain>, port P of sandbox S https://P-S.<domain>.
                               The SDK's own resolver sends every *.localhost to loopback.
  SANDBOX_MATRIX_TEMPLATE      the template to create from, passed as is (the SDK sends it
                               verbatim): name, name:tag, id or <templateID>:<buildID>
  SANDBOX_MATRIX_CA_FILE       PEM of the emulator's test CA (becomes SSL_CERT_FILE)
  SANDBOX_MATRIX_RUN_ID        optional: the run label the sandbox gets, as metadata
  SANDBOX_MATRIX_CODE_CHANNEL  `interpreter` (default) or `jupyter`: what the template's
                               start command serves on port 49999

Prints one JSON line per step, {"step", "ok", "detail"}; exits 1 at the first failed step.
"""

import json
import os
import sys
import http.client
import socket
import ssl
from urllib.parse import urlparse

url = os.environ["SANDBOX_MATRIX_EMULATOR_URL"]
template = os.environ["SANDBOX_MATRIX_TEMPLATE"]
run_id = os.environ.get("SANDBOX_MATRIX_RUN_ID")
channel = os.environ.get("SANDBOX_MATRIX_CODE_CHANNEL", "interpreter")
# Trust the test CA; read when the SDK builds its first transport, so set before import.
os.environ["SSL_CERT_FILE"] = os.environ["SANDBOX_MATRIX_CA_FILE"]
# Each of these would replace the URLs the domain gives; none may come from the caller.
for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG", "E2B_DOMAIN", "E2B_API_KEY"):
    os.environ.pop(name, None)

from e2b_code_interpreter import Sandbox  # noqa: E402  (after SSL_CERT_FILE)

FAKE_API_KEY = "e2b_fake_sdk_test_key_0000"  # Fake: the emulator checks only that one is sent.


def step(name, ok, detail):
    print(json.dumps({"step": name, "ok": ok, "detail": detail}), flush=True)
    if not ok:
        sys.exit(f"e2b flow failed at {name}: {detail}")


def status_of(host, path, headers):
    """The HTTP status and JSON body of GET https://host/path, the name pinned to
    127.0.0.1 (where the emulator serves every name under its domain)."""
    name, _, port = host.partition(":")
    context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    connection = http.client.HTTPSConnection(name, int(port or 443), timeout=30, context=context)
    raw = socket.create_connection(("127.0.0.1", int(port or 443)), timeout=30)
    connection.sock = context.wrap_socket(raw, server_hostname=name)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if response.status == 200 else None
    finally:
        connection.close()


def jupyter(sbx):
    """The Jupyter Server on port 49999, at the SDK's own host for that port."""
    token = sbx.traffic_access_token
    if not token:
        step("jupyter", False, "the sandbox has no traffic access token with public traffic off")
    host = sbx.get_host(49999)
    url = f"https://{host}/api/kernels"
    try:
        admitted, kernels = status_of(host, "/api/kernels", {"E2B-Traffic-Access-Token": token})
        refused, _ = status_of(host, "/api/kernels", {})
    except Exception as e:
        step("jupyter", False, f"{type(e).__name__}: {e}")
    ok = admitted == 200 and isinstance(kernels, list) and refused == 403
    step("jupyter", ok, {"url": url, "with_token": admitted, "without": refused})


def main():
    metadata = {"sandbox-matrix.run": run_id, "sandbox-matrix.scenario": "sdk-e2b"} if run_id else None
    try:
        sbx = Sandbox.create(
            template=template,
            domain=urlparse(url).netloc,
            api_key=FAKE_API_KEY,
            metadata=metadata,
            network={"allow_public_traffic": False} if channel == "jupyter" else None,
            timeout=300,
            request_timeout=60,
        )
    except Exception as e:
        step("create", False, f"{type(e).__name__}: {e}")
    step("create", True, {"sandbox_id": sbx.sandbox_id, "domain": sbx.sandbox_domain})
    killed = False
    try:
        if channel == "jupyter":
            jupyter(sbx)
        else:
            try:
                execution = sbx.run_code("1+1", timeout=120)
                ok = execution.error is None and execution.text == "2"
                detail = {"text": execution.text, "error": str(execution.error) if execution.error else None}
            except Exception as e:
                ok, detail = False, f"{type(e).__name__}: {e}"
            step("run_code", ok, detail)

        try:
            result = sbx.commands.run("echo hi", timeout=60)
            ok = result.exit_code == 0 and result.stdout == "hi\n"
            detail = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
        except Exception as e:
            ok, detail = False, f"{type(e).__name__}: {e}"
        step("command", ok, detail)

        try:
            killed = sbx.kill()
            step("kill", killed, {"killed": killed})
        except Exception as e:
            step("kill", False, f"{type(e).__name__}: {e}")
    finally:
        if not killed:
            try:
                sbx.kill()  # best effort after a failed step
            except Exception:
                pass


if __name__ == "__main__":
    main()
