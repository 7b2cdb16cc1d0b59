"""The official `modal` client's own sandbox flow against `sandbox-matrix emulate modal`.

  App.lookup with a token the emulator did not issue: refused
  App.lookup(create_if_missing)
  -> Sandbox.create(image=Image.from_registry(base, setup_dockerfile_commands=[...]))
  -> exec("python", "-c", "print(1+1)"): stdout.read() == "2\\n", wait() == 0
  -> exec as root by default, and in the requested workdir
  -> terminate(), then wait() reports it ended; terminate() again is a no-op
  -> a sandbox from an image whose build fails: ImageBuildError with the failing step's output

Run by harness/tests/engine/sdk_modal.rs with the venv of harness/tests/sdk/requirements.txt, from an
empty working directory (so no modal config file applies). Environment:
  MODAL_SERVER_URL        the emulator's plain gRPC URL, http://127.0.0.1:<port>
  MODAL_TOKEN_ID          the token id the emulator printed (a fake)
  MODAL_TOKEN_SECRET      the token secret the emulator printed (a fake)
  SANDBOX_MATRIX_IMAGE    the image the sandbox is made from (FROM <it>)
  SANDBOX_MATRIX_RUN_ID   the run label the sandbox gets, as its `sandbox-matrix.run` tag

`MODAL_SANDBOX_V2=0` keeps the client on the Sandbox* RPCs the emulator serves. Prints one
JSON line per step, {"step", "ok", "detail"}; exits 1 at the first failed step.
"""

import json
import os
import sys

os.environ["MODAL_SANDBOX_V2"] = "0"
# Nothing from a config file or profile of the caller's.
os.environ["MODAL_CONFIG_PATH"] = os.path.join(os.getcwd(), "modal.toml")
for name in ("MODAL_PROFILE", "MODAL_ENVIRONMENT", "MODAL_IMAGE_BUILDER_VERSION"):
    os.environ.pop(name, None)

import modal  # noqa: E402  (after the settings above)

image_ref = os.environ["SANDBOX_MATRIX_IMAGE"]
run_id = os.environ["SANDBOX_MATRIX_RUN_ID"]


def step(name, ok, detail):
    print(json.dumps({"step": name, "ok": ok, "detail": detail}), flush=True)
    if not ok:
        sys.exit(f"modal flow failed at {name}: {detail}")


def run(sb, *argv, **kwargs):
    p = sb.exec(*argv, **kwargs)
    out = p.stdout.read()
    err = p.stderr.read()
    return out, err, p.wait()


# Fakes: a token the emulator did not issue is refused (Unauthenticated: AuthError).
stranger = modal.Client.from_credentials("sm-fake-ak-stranger", "sm-fake-as-stranger")
try:
    modal.App.lookup("sandbox-matrix-sdk-proof", create_if_missing=True, client=stranger)
    step("refused", False, "a token the emulator did not issue was accepted")
except modal.exception.AuthError as e:
    step("refused", True, str(e))

app = modal.App.lookup("sandbox-matrix-sdk-proof", create_if_missing=True)
# The base has `python3` only; Modal's images have `python`: a RUN as root adds it, so the
# build runs a Dockerfile step too, not only FROM.
image = modal.Image.from_registry(
    image_ref,
    setup_dockerfile_commands=[
        "USER root",
        "RUN ln -s /usr/bin/python3 /usr/local/bin/python",
        "USER 1000:100",
    ],
)
sb = modal.Sandbox.create(
    app=app, image=image, tags={"sandbox-matrix.run": run_id, "sandbox-matrix.scenario": "sdk"}
)
step("create", sb.object_id.startswith("sb-"), sb.object_id)

out, err, code = run(sb, "python", "-c", "print(1+1)")
step("exec", (out, code) == ("2\n", 0), {"stdout": out, "stderr": err, "code": code})

out, err, code = run(sb, "sh", "-c", "id -u; pwd", workdir="/tmp")
step("exec_user_workdir", (out, code) == ("0\n/tmp\n", 0), {"stdout": out, "stderr": err, "code": code})

sb.terminate()
sb.wait(raise_on_termination=False)
step("terminate", sb.returncode is not None, {"returncode": sb.returncode})

# Terminating a sandbox that has ended is a no-op, not an error.
sb.terminate()
step("terminate_again", True, {"returncode": sb.returncode})

# A build that fails is reported with its log: the failing step's own output.
broken = modal.Image.from_registry(image_ref, setup_dockerfile_commands=["RUN echo sm-broken-step && false"])
try:
    modal.Sandbox.create(app=app, image=broken, tags={"sandbox-matrix.run": run_id})
    step("build_fails", False, "a sandbox was created from an image whose build failed")
except modal.exception.ImageBuildError as e:
    step("build_fails", "sm-broken-step" in str(e), str(e))
