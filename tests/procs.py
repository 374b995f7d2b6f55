"""Process checks shared by the tests."""

from __future__ import annotations

import time


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def dead(pid: int, wait_s: float = 2.0) -> bool:
    """Gone, or a zombie waiting for its (foreign) parent to reap it, within `wait_s`.

    A SIGKILLed process leaves its cgroup before it becomes a zombie, so an empty
    cgroup can briefly hold a process that is still exiting: give it a moment.
    """
    deadline = time.monotonic() + wait_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
