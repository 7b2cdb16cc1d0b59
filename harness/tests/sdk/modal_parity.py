"""The official modal client (1.6.4) performs the parity intents against `sandbox-matrix
emulate modal`, each marked with the wall clock around it, so that
harness/tests/engine/parity/modal.rs can set the calls the emulator kept for each intent
beside those the project's client sent.

Intents, in order (the parity file says why the others are not applicable):
  build            App.lookup, Image.from_dockerfile(<the environment's Dockerfile from its
                   FROM, the base resolved>, context_dir=<the environment>).build(app): the
                   COPY's file goes in a context mount, as the client sends one by default
                   (MountBatchedCheckExistence, MountPutFile, MountGetOrCreate; the image
                   names it in context_mount_id), and builder version 2025.06 adds a
                   layer `FROM base` on it (base_images). Read from modal 1.6.4's
                   modal/_image.py (from_dockerfile, _create_context_mount_function,
                   _create_context_mount) and modal/mount.py (_Mount._load_mount)
  create           Sandbox.create(app=, image=, timeout=, tags=, region=)
  command-root     exec("id", "-un"): Modal runs an exec as root
  command-default  exec("id", "-un") again: the client has no other default user
  (no intent)      exec("cat", <the COPY's destination>): the COPY put the environment's
                   file into the image
  state            poll() (None: still running)
  list             Sandbox.list(app_id=, tags=)
  delete           terminate()
  state-deleted    poll() once terminated: its exit code

Environment: MODAL_SERVER_URL, MODAL_TOKEN_ID, MODAL_TOKEN_SECRET (the emulator's fakes),
and SANDBOX_MATRIX_PARITY, a JSON object: environment (the folder), base (its
BASE_IMAGE), builder_version, timeout, tags; each intent's parameters are those the
project's client sent. `MODAL_SANDBOX_V2=0` keeps the client on the Sandbox* RPCs the
emulator serves, as the project's client speaks them.

Prints one JSON line per intent, {"step", "ok", "from_ms", "to_ms", "detail"}; exits 1 at
the first failed one.
"""

import json
import os

from parity_flow import intent  # this folder's, beside the script

given = json.loads(os.environ["SANDBOX_MATRIX_PARITY"])
os.environ["MODAL_SANDBOX_V2"] = "0"
os.environ["MODAL_CONFIG_PATH"] = os.path.join(os.getcwd(), "modal.toml")
os.environ["MODAL_IMAGE_BUILDER_VERSION"] = given["builder_version"]
for name in ("MODAL_PROFILE", "MODAL_ENVIRONMENT"):
    os.environ.pop(name, None)

import modal  # noqa: E402  (after the settings above)


state = {}


def dockerfile_steps():
    """The environment's Dockerfile from its first FROM, comments dropped, its base
    argument resolved (the base given): the commands the project's client sends."""
    with open(os.path.join(given["environment"], "Dockerfile")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    first = next(i for i, line in enumerate(lines) if line.split()[0].upper() == "FROM")
    return [f"FROM {given['base']}", *lines[first + 1:]]


def build():
    steps = dockerfile_steps()
    # Written beside the flow (its working folder), not in the environment: the same
    # Dockerfile as the project's client sends, whose COPY takes its file from the
    # environment folder, the build context.
    dockerfile = os.path.join(os.getcwd(), "Dockerfile")
    with open(dockerfile, "w") as f:
        f.write("\n".join(steps))  # no newline at the end: the client splits on "\n"
    app = modal.App.lookup("sandbox-matrix", create_if_missing=True)
    image = modal.Image.from_dockerfile(dockerfile, context_dir=given["environment"])
    image.build(app)
    state["app"], state["image"] = app, image
    return {"image_id": image.object_id, "steps": steps}


def copied():
    """Outside any intent: each COPY of the Dockerfile put its file into the image."""
    copies = [step.split() for step in dockerfile_steps() if step.split()[0].upper() == "COPY"]
    if not copies:
        raise RuntimeError("the parity environment's Dockerfile has no COPY to check")
    for words in copies:
        step = " ".join(words)
        source, destination = words[-2], words[-1]
        p = state["sandbox"].exec("cat", destination)
        found = p.stdout.read()
        code = p.wait()
        with open(os.path.join(given["environment"], source)) as f:
            expected = f.read()
        if code != 0 or found != expected:
            raise RuntimeError(f"{step}: {destination} in the sandbox (exit {code}) is not "
                               f"the environment's {source}: {found!r}")


def create():
    sb = modal.Sandbox.create(app=state["app"], image=state["image"],
                              timeout=given["timeout"], tags=given["tags"],
                              region=given["region"])
    state["sandbox"] = sb
    return {"sandbox_id": sb.object_id}


def command():
    p = state["sandbox"].exec("id", "-un")
    out = p.stdout.read()
    code = p.wait()
    if code != 0:
        raise RuntimeError(f"exit {code}: {p.stderr.read()}")
    return {"stdout": out}


def sandbox_state():
    code = state["sandbox"].poll()
    if code is not None:
        raise RuntimeError(f"a running sandbox had ended with {code}")
    return {"returncode": None}


def state_deleted():
    code = state["sandbox"].poll()
    if code is None:
        raise RuntimeError("a terminated sandbox was still running")
    return {"returncode": code}


def listed():
    found = [s.object_id for s in modal.Sandbox.list(app_id=state["app"].app_id, tags=given["tags"])]
    if state["sandbox"].object_id not in found:
        raise RuntimeError(f"the sandbox is not listed by its tags: {found}")
    return {"listed": found}


def delete():
    state["sandbox"].terminate()
    return {"terminated": True}


intent("modal", "build", build)
intent("modal", "create", create)
try:
    intent("modal", "command-root", command)
    intent("modal", "command-default", command)
    copied()
    intent("modal", "state", sandbox_state)
    intent("modal", "list", listed)
finally:
    if "sandbox" in state:
        intent("modal", "delete", delete)
intent("modal", "state-deleted", state_deleted)
