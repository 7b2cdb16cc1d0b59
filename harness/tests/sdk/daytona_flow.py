"""Daytona's official Python SDK (daytona==0.226.1) runs its own flow against a Daytona
emulator; harness/tests/engine/sdk_daytona.rs runs it against `sandbox-matrix emulate daytona`.

create (from a snapshot) -> code_interpreter.run_code("print(1+1)")
  -> process.code_run("print(1+1)") -> process.exec("echo hi") -> delete

Daytona's code APIs return what the code printed (no expression value): the code prints.

Environment:
  SANDBOX_MATRIX_EMULATOR_URL  the API URL (the SDK's api_url), e.g.
                               https://localhost:8443/api; the toolbox is wherever the
                               emulator's `toolboxProxyUrl` points
  SANDBOX_MATRIX_SNAPSHOT      the snapshot to create from (its name or its id)
  SANDBOX_MATRIX_CA_FILE       the emulator's test CA (PEM), made SSL_CERT_FILE
  SANDBOX_MATRIX_TARGET        optional, the region sent as `target` (default "us")

Run it from an empty working folder: the SDK reads .env files there. Prints one JSON line
per step, {"step", "ok", "detail"}; on a failed step, exits 1 naming it on stderr.
"""

import json
import os
import sys

url = os.environ["SANDBOX_MATRIX_EMULATOR_URL"]
snapshot = os.environ["SANDBOX_MATRIX_SNAPSHOT"]
# urllib3 (REST), httpx (the interpreter's WebSocket) and websocket-client (Socket.IO) all
# trust what SSL_CERT_FILE names; it must be set before the SDK makes its clients.
os.environ["SSL_CERT_FILE"] = os.environ["SANDBOX_MATRIX_CA_FILE"]

from daytona import CreateSandboxFromSnapshotParams, Daytona, DaytonaConfig  # noqa: E402

# Fake: the emulator checks only that a bearer token is sent; it grants nothing anywhere.
FAKE_API_KEY = "fake-daytona-sdk-key-for-the-emulator"


def step(name, ok, detail):
    print(json.dumps({"step": name, "ok": ok, "detail": detail}), flush=True)
    if not ok:
        sys.exit(f"daytona flow failed at {name}: {detail}")


def attempt(name, run, check):
    try:
        out = run()
        ok, detail = check(out), out
    except Exception as e:  # the SDK's own error, shown as the step's detail
        ok, detail = False, f"{type(e).__name__}: {e}"
    step(name, ok, detail)


def main():
    # api_key, api_url and target all given: the SDK reads no DAYTONA_* variable or .env.
    daytona = Daytona(DaytonaConfig(
        api_key=FAKE_API_KEY,
        api_url=url,
        target=os.environ.get("SANDBOX_MATRIX_TARGET", "us"),
    ))
    try:
        sandbox = daytona.create(
            CreateSandboxFromSnapshotParams(snapshot=snapshot, language="python"),
            timeout=120,
        )
    except Exception as e:
        step("create", False, f"{type(e).__name__}: {e}")
    step("create", True, {"id": sandbox.id, "state": str(sandbox.state),
                          "toolbox_proxy_url": sandbox.toolbox_proxy_url})
    deleted = False
    try:
        def interpreter():
            r = sandbox.code_interpreter.run_code("print(1+1)", timeout=120)
            return {"stdout": r.stdout, "stderr": r.stderr,
                    "error": r.error and f"{r.error.name}: {r.error.value}"}
        attempt("run_code", interpreter, lambda o: o["stdout"].strip() == "2" and not o["error"])

        def code_run():
            r = sandbox.process.code_run("print(1+1)", timeout=120)
            return {"exit_code": r.exit_code, "result": r.result}
        attempt("code_run", code_run, lambda o: o["exit_code"] == 0 and o["result"].strip() == "2")

        def command():
            r = sandbox.process.exec("echo hi", timeout=60)
            return {"exit_code": r.exit_code, "result": r.result}
        attempt("command", command, lambda o: o["exit_code"] == 0 and o["result"].strip() == "hi")

        try:
            daytona.delete(sandbox, timeout=60)
            deleted = True
        except Exception as e:
            step("delete", False, f"{type(e).__name__}: {e}")
        step("delete", True, {"id": sandbox.id})
    finally:
        if not deleted:
            try:
                daytona.delete(sandbox)  # best effort after a failed step
            except Exception:
                pass


if __name__ == "__main__":
    main()
