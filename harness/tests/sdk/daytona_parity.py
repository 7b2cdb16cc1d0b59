"""Daytona's official SDK (daytona 0.226.1) performs the parity intents against the
daytona emulator, each marked with the wall clock around it, so that
harness/tests/engine/parity/daytona.rs can set the requests the emulator kept for each
intent beside those the project's client sent.

Intents, in order (the parity file says why the others are not applicable):
  build            snapshot.create(CreateSnapshotParams(name, Image.base(<base>)
                   .add_local_file(<its COPY>).run_commands(<its RUN>)
                   .dockerfile_commands([<its USER>]), resources), on_logs=...); the COPY's
                   file goes to the emulator's object storage, which the SDK's S3 client
                   (obstore, built with the environment cleared) trusts only through the
                   system's CA bundle: the test runs this script in a mount namespace of
                   its own where the emulator's test CA is that bundle
  create           create(CreateSandboxFromSnapshotParams(snapshot=<its id>, labels=...))
  run-1+1          code_interpreter.run_code("1+1")
  command-default  process.exec("id -un")
  state            sandbox.refresh_data() (the sandbox's state)
  list             list(ListSandboxesQuery(labels=...))
  delete           delete(sandbox)
  state-deleted    get(<its id>) once deleted: destroyed, or not found

Environment: SANDBOX_MATRIX_PARITY, a JSON object: url (the API URL), ca_file,
environment (the folder), base (its BASE_IMAGE), name, resources, labels, target,
exec_timeout; each intent's
parameters are those the project's client sent.

Prints one JSON line per intent, {"step", "ok", "from_ms", "to_ms", "detail"}; exits 1 at
the first failed one.
"""

import json
import os

from parity_flow import intent  # this folder's, beside the script

given = json.loads(os.environ["SANDBOX_MATRIX_PARITY"])
os.environ["SSL_CERT_FILE"] = given["ca_file"]

from daytona import (  # noqa: E402  (after SSL_CERT_FILE)
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    Daytona,
    DaytonaConfig,
    DaytonaNotFoundError,
    Image,
    ListSandboxesQuery,
    Resources,
)

FAKE_API_KEY = "fake-daytona-parity-key"  # Fake: the emulator checks only that one is sent.


daytona = Daytona(DaytonaConfig(api_key=FAKE_API_KEY, api_url=given["url"], target=given["target"]))
state = {}


def build():
    with open(os.path.join(given["environment"], "Dockerfile")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    # The environment's steps after FROM, in order: a COPY as the SDK adds a local file
    # (pushed to object storage, its hash in contextHashes), a RUN, a USER.
    image = Image.base(given["base"])
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "COPY":
            source, destination = rest.split()
            image = image.add_local_file(os.path.join(given["environment"], source), destination)
        elif word == "RUN":
            image = image.run_commands(rest)
        elif word == "USER":
            image = image.dockerfile_commands([line])
        elif word not in ("ARG", "FROM"):
            raise RuntimeError(f"the parity environment has a step the flow does not translate: {line}")
    resources = Resources(**given["resources"])
    # With a log callback, as a user who wants the build's log: the SDK then asks for the
    # build-log URL once the snapshot has left `pending`.
    snapshot = daytona.snapshot.create(
        CreateSnapshotParams(name=given["name"], image=image, resources=resources),
        on_logs=lambda line: None, timeout=300)
    state["snapshot"] = snapshot.id
    # Active, so the COPY ran: its file can only have reached the build's context from
    # object storage, and a COPY of a file missing from the context fails the build.
    return {"id": snapshot.id, "state": str(snapshot.state)}


def create():
    sandbox = daytona.create(
        CreateSandboxFromSnapshotParams(snapshot=state["snapshot"], labels=given["labels"]), timeout=120)
    state["sandbox"] = sandbox
    return {"id": sandbox.id}


def run_code():
    r = state["sandbox"].code_interpreter.run_code("1+1", timeout=120)
    if r.error:
        raise RuntimeError(f"{r.error.name}: {r.error.value}")
    return {"stdout": r.stdout}


def command():
    r = state["sandbox"].process.exec("id -un", timeout=given["exec_timeout"])
    if r.exit_code != 0:
        raise RuntimeError(f"exit {r.exit_code}: {r.result}")
    return {"result": r.result}


def sandbox_state():
    state["sandbox"].refresh_data()
    if state["sandbox"].state != "started":
        raise RuntimeError(f"a running sandbox said {state['sandbox'].state}")
    return {"state": str(state["sandbox"].state)}


def state_deleted():
    try:
        gone = daytona.get(state["sandbox"].id)
    except DaytonaNotFoundError:
        return {"found": False}
    if gone.state not in ("destroyed", "destroying"):
        raise RuntimeError(f"a deleted sandbox said {gone.state}")
    return {"state": str(gone.state)}


def listed():
    found = [s.id for s in daytona.list(ListSandboxesQuery(labels=given["labels"]))]
    if state["sandbox"].id not in found:
        raise RuntimeError(f"the sandbox is not listed by its labels: {found}")
    return {"listed": found}


def delete():
    daytona.delete(state["sandbox"], timeout=60)
    return {"deleted": True}


intent("daytona", "build", build)
intent("daytona", "create", create)
try:
    intent("daytona", "run-1+1", run_code)
    intent("daytona", "command-default", command)
    intent("daytona", "state", sandbox_state)
    intent("daytona", "list", listed)
finally:
    if "sandbox" in state:
        intent("daytona", "delete", delete)
intent("daytona", "state-deleted", state_deleted)
