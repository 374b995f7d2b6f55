"""Process checks shared by the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def tmpfs(where: Path, options: str, name: str = "rtaxtest") -> Iterator[Path]:
    """A real tmpfs mounted at `where` (made) with `options` (`size=12k`, `ro,size=64k`),
    lazily unmounted after: a full disk or a read-only one for a test (root only)."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, name, str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


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


def stop_gracefully(proc: subprocess.Popen[bytes], wait_s: float = 20.0) -> None:
    """SIGTERM `proc` (what Ctrl-C does to a server: a graceful exit) and wait for it;
    if it has not ended within `wait_s`, SIGKILL its whole session and reap it. `proc`
    must have been started with `start_new_session=True`."""
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=wait_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# A step that prints the flags of its own stdout and stderr (/proc/self/fdinfo), as every
# driver's environment can run it, and what they say: the two streams block, as programs
# expect (gVisor's exec once made one of two copies of one pipe non-blocking for the step).
STREAM_FLAGS = ("grep", "^flags", "/proc/self/fdinfo/1", "/proc/self/fdinfo/2")


def nonblocking_streams(output: bytes) -> list[bool]:
    """For each flags line STREAM_FLAGS printed, in order: is O_NONBLOCK set?"""
    return [bool(int(line.split()[-1], 8) & os.O_NONBLOCK) for line in output.decode().splitlines()]
