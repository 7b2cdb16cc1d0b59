"""The official e2b SDK performs the parity intents against `sandbox-matrix emulate e2b`,
each marked with the wall clock around it, so that harness/tests/engine/parity/e2b.rs can
set the requests the emulator kept for each intent beside those the project's client sent.

Intents, in order (the parity file says why the others are not applicable):
  build            Template().from_dockerfile(<environment>/Dockerfile) with the
                   environment's start and ready commands, Template.build(name=...)
  create           Sandbox.create(template=<name>, ...)
  command-root     commands.run("id -un", user="root")
  command-default  commands.run("id -un")
  state            get_info() (the sandbox's state)
  list             Sandbox.list(query=SandboxQuery(metadata=<labels>))
  delete           kill()
  state-deleted    Sandbox.get_info(<its id>) once killed: not found

Environment: SANDBOX_MATRIX_PARITY, a JSON object: url (https://<domain>:<port>), ca_file,
environment (the folder), base (its BASE_IMAGE), name, cpu_count, memory_mb, timeout, metadata, envs,
allow_public_traffic; each intent's parameters are those the project's client sent.

Prints one JSON line per intent, {"step", "ok", "from_ms", "to_ms", "detail"}; exits 1 at
the first failed one.
"""

import json
import os

from parity_flow import intent  # this folder's, beside the script
from urllib.parse import urlparse

given = json.loads(os.environ["SANDBOX_MATRIX_PARITY"])
os.environ["SSL_CERT_FILE"] = given["ca_file"]
for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG", "E2B_DOMAIN", "E2B_API_KEY"):
    os.environ.pop(name, None)

from e2b import NotFoundException, Sandbox, SandboxQuery, Template  # noqa: E402  (after SSL_CERT_FILE)

FAKE_API_KEY = "e2b_fake_parity_key_0000"  # Fake: the emulator checks only that one is sent.
domain = urlparse(given["url"]).netloc
connection = {"api_key": FAKE_API_KEY, "domain": domain, "request_timeout": 60}


def build():
    environment = given["environment"]
    with open(os.path.join(environment, "environment.json")) as f:
        start = json.load(f)["start"]
    with open(os.path.join(environment, "Dockerfile")) as f:
        # The SDK's parser leaves an ARG before FROM unexpanded in FROM: the base is
        # handed over as our client hands it over, as the build argument's value.
        dockerfile = f.read().replace("${BASE_IMAGE}", given["base"])
    template = (
        Template(file_context_path=environment)
        .from_dockerfile(dockerfile)
        .set_start_cmd(start["command"], start["ready"])
    )
    info = Template.build(template, name=given["name"], cpu_count=given["cpu_count"],
                          memory_mb=given["memory_mb"], **connection)
    return {"template_id": info.template_id, "build_id": info.build_id}


state = {}


def create():
    sbx = Sandbox.create(template=given["name"], timeout=given["timeout"],
                         metadata=given["metadata"], envs=given["envs"], secure=True,
                         network={"allow_public_traffic": given["allow_public_traffic"]},
                         **connection)
    state["sandbox"] = sbx
    return {"sandbox_id": sbx.sandbox_id}


def command(user):
    def run():
        result = state["sandbox"].commands.run("id -un", user=user, timeout=60)
        if result.exit_code != 0:
            raise RuntimeError(f"exit {result.exit_code}: {result.stderr}")
        return {"stdout": result.stdout}
    return run


def sandbox_state():
    info = state["sandbox"].get_info()
    if info.state != "running":
        raise RuntimeError(f"a running sandbox said {info.state}")
    return {"state": info.state}


def state_deleted():
    try:
        info = Sandbox.get_info(state["sandbox"].sandbox_id, **connection)
    except NotFoundException:
        return {"found": False}
    raise RuntimeError(f"a killed sandbox said {info.state}")


def listed():
    paginator = Sandbox.list(query=SandboxQuery(metadata=given["metadata"]), **connection)
    found = [s.sandbox_id for s in paginator.next_items()]
    if state["sandbox"].sandbox_id not in found:
        raise RuntimeError(f"the sandbox is not listed by its labels: {found}")
    return {"listed": found}


def delete():
    if not state["sandbox"].kill():
        raise RuntimeError("kill said the sandbox was not there")
    return {"killed": True}


intent("e2b", "build", build)
intent("e2b", "create", create)
try:
    intent("e2b", "command-root", command("root"))
    intent("e2b", "command-default", command(None))
    intent("e2b", "state", sandbox_state)
    intent("e2b", "list", listed)
finally:
    if "sandbox" in state:
        intent("e2b", "delete", delete)
intent("e2b", "state-deleted", state_deleted)
