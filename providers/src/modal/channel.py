# The modal variant's code channel, run in the sandbox through the command router as the
# contract's user: a client of the sandbox's own Jupyter Server (the contract base's main
# process) and its kernels. Each call is one exec that prints one JSON line:
#   ready SECONDS            wait for the server to answer; {"waited_ms": n, "region": r}
#   run CONTEXT CODE         run CODE in CONTEXT's kernel (started on first use);
#                            {"stdout", "stderr", "result", "error", "kernel_ms"}
#   restart CONTEXT          restart CONTEXT's kernel and wait until it answers;
#                            {"restart_ms", "ready_ms"}
# The kernel state lives in the server's kernels, so it survives between calls, a restart
# clears it, and several contexts run at once. Written for sandbox-matrix; standard
# library and jupyter_client (a dependency of jupyter_server) only.
import glob
import json
import os
import pwd
import queue
import sys
import time
import urllib.request

EXECUTE_TIMEOUT = 300.0


def fail(message):
    print(json.dumps({"failure": message}))
    sys.exit(3)


def runtime_dirs():
    home = pwd.getpwuid(os.getuid()).pw_dir
    dirs = [os.environ.get("JUPYTER_RUNTIME_DIR", ""), home + "/.local/share/jupyter/runtime"]
    return [d for d in dirs if d and os.path.isdir(d)]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except (OSError, TypeError):
        return False


def server():
    """The running server's info file (url, token), newest first; None when none runs."""
    found = []
    for d in runtime_dirs():
        for path in glob.glob(d + "/jpserver-*.json"):
            try:
                with open(path) as f:
                    info = json.load(f)
                if alive(info.get("pid")):
                    found.append((os.path.getmtime(path), d, info))
            except (OSError, ValueError):
                continue
    if not found:
        return None
    found.sort(key=lambda x: x[0], reverse=True)
    _, d, info = found[0]
    info["runtime_dir"] = d
    return info


def api(info, method, path, body=None, timeout=30):
    url = "http://127.0.0.1:%d%sapi/%s" % (info["port"], info.get("base_url", "/"), path)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", "token " + info.get("token", ""))
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read()
    return json.loads(text) if text else None


def ready(seconds):
    started = time.monotonic()
    last = "no Jupyter Server has written its runtime file"
    while time.monotonic() - started < seconds:
        info = server()
        if info is not None:
            try:
                api(info, "GET", "status", timeout=2)
                # Where Modal placed the sandbox: the location it sets in every container.
                return {
                    "waited_ms": (time.monotonic() - started) * 1000,
                    "region": os.environ.get("MODAL_REGION"),
                }
            except Exception as e:  # noqa: BLE001 - any failure means not ready yet
                last = "the server at port %s does not answer: %s" % (info.get("port"), e)
        time.sleep(0.05)
    fail("not ready after %ss: %s" % (seconds, last))


def kernel_of(info, context):
    """CONTEXT's kernel id: its session's (sessions are keyed by path, so it is found again)."""
    session = api(
        info,
        "POST",
        "sessions",
        {"path": "sandbox-matrix/" + context, "name": context, "type": "console",
         "kernel": {"name": "python3"}},
    )
    return session["kernel"]["id"]


def client(info, kernel_id):
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient(
        connection_file=os.path.join(info["runtime_dir"], "kernel-%s.json" % kernel_id)
    )
    kc.load_connection_file()
    # No heartbeat channel: without a kernel manager, a client judges a starting kernel
    # dead by it ("Kernel died before replying to kernel_info", seen with four kernels
    # starting at once). The server's own state says when a kernel is lost (`state`).
    kc.start_channels(hb=False)
    # Also waits for the IOPub socket to receive, so no output of the request is missed.
    kc.wait_for_ready(timeout=60)
    return kc


def state(info, kernel_id):
    try:
        return api(info, "GET", "kernels/" + kernel_id, timeout=5).get("execution_state")
    except Exception:  # noqa: BLE001 - unknown is not lost
        return None


def run(context, code):
    info = server() or fail("no Jupyter Server runs in the sandbox")
    started = time.monotonic()
    kernel_id = kernel_of(info, context)
    kc = client(info, kernel_id)
    kernel_ms = (time.monotonic() - started) * 1000
    out = {"stdout": "", "stderr": "", "result": None, "error": None, "kernel_ms": kernel_ms}
    msg_id = kc.execute(code, store_history=False)
    deadline = time.monotonic() + EXECUTE_TIMEOUT
    idle = reply = False
    while not (idle and reply):
        if time.monotonic() > deadline:
            fail("no answer within %ss" % EXECUTE_TIMEOUT)
        if not reply:
            try:
                kc.get_shell_msg(timeout=0.01)
                reply = True
            except queue.Empty:
                pass
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            if state(info, kernel_id) in ("dead", "restarting", "autorestarting"):
                fail("the kernel was lost while it ran the code")
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out["stderr" if content.get("name") == "stderr" else "stdout"] += content.get("text", "")
        elif kind == "execute_result":
            out["result"] = content.get("data", {}).get("text/plain")
        elif kind == "error":
            out["error"] = "%s: %s" % (content.get("ename"), content.get("evalue"))
        elif kind == "status" and content.get("execution_state") == "idle":
            idle = True
    kc.stop_channels()
    return out


def restart(context):
    info = server() or fail("no Jupyter Server runs in the sandbox")
    kernel_id = kernel_of(info, context)
    started = time.monotonic()
    api(info, "POST", "kernels/%s/restart" % kernel_id, {}, timeout=120)
    restart_ms = (time.monotonic() - started) * 1000
    started = time.monotonic()
    client(info, kernel_id).stop_channels()
    return {"restart_ms": restart_ms, "ready_ms": (time.monotonic() - started) * 1000}


def main(argv):
    if argv[:1] == ["ready"] and len(argv) == 2:
        result = ready(float(argv[1]))
    elif argv[:1] == ["run"] and len(argv) == 3:
        result = run(argv[1], argv[2])
    elif argv[:1] == ["restart"] and len(argv) == 2:
        result = restart(argv[1])
    else:
        fail("usage: ready SECONDS | run CONTEXT CODE | restart CONTEXT, not %r" % argv)
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported as the call's failure
        fail("%s: %s" % (type(e).__name__, e))
