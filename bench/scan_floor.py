"""The floor of the secrets scan on an image: how long it takes, in a container of it, to
walk and stat every file under / (not /proc, /sys, /dev), then to read them all, one
thread. The scan (harness/src/checks/probes/secrets_scan.py) can be no faster than the
walk while it looks at every file.

    docker run --rm -v "$PWD/bench/scan_floor.py:/scan_floor.py:ro" --user 0 \\
      --entrypoint python3 sandbox-matrix/contract-base:v1 /scan_floor.py
"""
import os
import time

SKIP = ("/proc", "/sys", "/dev")


def walk(read):
    """Files seen and seconds taken, reading each when `read` is set."""
    files, started, stack = 0, time.monotonic(), ["/"]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.path not in SKIP:
                        stack.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                entry.stat(follow_symlinks=False)
            except OSError:
                continue
            files += 1
            if read:
                try:
                    with open(entry.path, "rb") as f:
                        f.read(16 * 1024 * 1024)
                except OSError:
                    pass
    return files, round(time.monotonic() - started, 3)


if __name__ == "__main__":
    print("walk and stat: %d files in %s s" % walk(False))
    print("walk, stat and read: %d files in %s s" % walk(True))
