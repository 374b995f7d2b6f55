"""A watchdog process that cleans up after rtax if rtax itself is killed (`kill -9`).

The engine tells it, over a pipe, which process groups, cgroups and directories
are alive. When the pipe closes (the engine ended, or died) the reaper kills the
groups still registered, removes the cgroups and deletes the directories; what
was torn down normally was unregistered before. One short write per
registration keeps the cost off the measured paths.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import IO, Any


class Reaper:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui.core.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to rtax's group must not reach it
        )
        assert self._proc.stdin is not None
        self._fd = self._proc.stdin.fileno()

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line.encode() + b"\n")
        except OSError:
            self._fd = None

    def add_pgid(self, pgid: int) -> None:
        self._send(f"+g {pgid}")

    def drop_pgid(self, pgid: int) -> None:
        self._send(f"-g {pgid}")

    def add_path(self, path: str) -> None:
        self._send(f"+p {path}")

    def drop_path(self, path: str) -> None:
        self._send(f"-p {path}")

    def add_cgroup(self, relpath: str) -> None:
        self._send(f"+c {relpath}")

    def drop_cgroup(self, relpath: str) -> None:
        self._send(f"-c {relpath}")

    def close(self) -> None:
        """The engine ended: whatever is still registered was not torn down, so reap it too."""
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        self._fd = None


_current = Reaper()  # inactive until started: registrations are then no-ops


def current() -> Reaper:
    return _current


def start() -> Reaper:
    global _current
    _current = Reaper()
    _current.start()
    return _current


def stop() -> None:
    _current.close()


def _reap(groups: set[int], cgroups: set[str], paths: set[str]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if cgroups:
        try:
            from rtax_tui.core.cgroups import Cgroup

            for rel in sorted(cgroups, key=len, reverse=True):
                try:
                    Cgroup.at(rel).remove()
                except Exception:
                    pass
        except ImportError:
            pass
    time.sleep(0.05)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def main(stdin: IO[bytes]) -> int:
    groups: set[int] = set()
    cgroups: set[str] = set()
    paths: set[str] = set()
    table: dict[str, set[Any]] = {"g": groups, "c": cgroups, "p": paths}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for raw in stdin:
        line = raw.decode(errors="replace").rstrip("\n")
        if line == "exit":
            return 0
        if len(line) < 4:
            continue
        op, kind, arg = line[0], line[1], line[3:]
        target = table.get(kind)
        if target is None:
            continue
        value: int | str = int(arg) if kind == "g" else arg
        if op == "+":
            target.add(value)
        else:
            target.discard(value)
    _reap(groups, cgroups, paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.stdin.buffer))
