"""What every SDK parity flow (harness/tests/sdk/*_parity.py) shares: an intent marked
with the wall clock around it, as harness/tests/engine/parity/ reads it."""

import json
import sys
import time

# The pause on each side of an intent, so that no request falls on a boundary's
# millisecond (parity/mod.rs PAUSE).
PAUSE = 0.02


def intent(flow, name, action):
    """Runs `action` as intent `name` of `flow`, prints its line
    {"step", "ok", "from_ms", "to_ms", "detail"}; exits 1 at a failure."""
    time.sleep(PAUSE)
    started = int(time.time() * 1000)
    try:
        detail = action()
        ok = True
    except Exception as e:  # the line says what failed
        ok, detail = False, f"{type(e).__name__}: {e}"
    ended = int(time.time() * 1000)
    time.sleep(PAUSE)
    print(json.dumps({"step": name, "ok": ok, "from_ms": started,
                      "to_ms": ended, "detail": detail}), flush=True)
    if not ok:
        sys.exit(f"{flow} parity flow failed at {name}: {detail}")
