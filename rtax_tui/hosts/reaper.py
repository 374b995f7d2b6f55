"""A watchdog process that cleans up after rtax if rtax itself is killed (`kill -9`).

The engine tells it, over a pipe, which process groups, cgroups and directories
are alive. When the pipe closes (the engine ended, or died) the reaper kills the
groups still registered, removes the cgroups and deletes the directories (a loop
device on a file in one detached first); what was torn down normally was
unregistered before. One short write per registration keeps the cost off the
measured paths.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

# How long the reaper sleeps between reads of its pipe (see main).
BATCH_S = 0.02
CGROUP_WAIT_S = 30.0  # how long the reaper waits for a cgroup's last process to die
CGROUP_FIRST_S = 2.0  # its first pass over every cgroup, before the paths go


_MAIN = (
    "import sys; from rtax_tui.hosts.reaper import main; raise SystemExit(main(sys.stdin.buffer))"
)


# Detached: the reaper forks once more and its parent exits, so that it is nobody's child.
# A Ray worker (engine.nodeengine) SIGKILLs its own children as it dies (Ray's
# kill_child_processes_on_worker_exit), which would end a child reaper before it reaps.
_DETACHED = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid:\n"
    "    os.write(1, b'%d\\n' % pid)\n"
    "    os._exit(0)\n"
    "os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
    "from rtax_tui.hosts.reaper import main\n"
    "raise SystemExit(main(sys.stdin.buffer))\n"
)
DETACHED_WAIT_S = 40.0  # how long `close` waits for a detached reaper (its cgroups: 30 s)


class Reaper:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None
        self._pid: int | None = None  # a detached reaper's (not our child)

    def start(self, detached: bool = False) -> None:
        if detached:
            self._start_detached()
            return
        self._proc = subprocess.Popen(
            # not `-m`: running a module of a package that its __init__ already imported
            # (rtax_tui.hosts imports local, which imports this) makes runpy warn
            [sys.executable, "-c", _MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to rtax's group must not reach it
        )
        assert self._proc.stdin is not None
        self._fd = self._proc.stdin.fileno()

    def _start_detached(self) -> None:
        r, w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _DETACHED],
                stdin=r,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
        finally:
            os.close(r)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.stdout.close()
        proc.wait()
        if not line.strip().isdigit():
            os.close(w)
            raise OSError("the detached reaper did not start")
        self._pid = int(line)
        self._fd = w

    def _send(self, line: str) -> None:
        if "\n" in line:  # one registration a line: a newline would register another
            raise ValueError(f"the reaper takes no newline in what it removes: {line!r}")
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

    def add_file(self, path: str) -> None:
        self._send(f"+f {path}")

    def drop_file(self, path: str) -> None:
        self._send(f"-f {path}")

    def add_cgroup(self, relpath: str) -> None:
        self._send(f"+c {relpath}")

    def drop_cgroup(self, relpath: str) -> None:
        self._send(f"-c {relpath}")

    def add_containers(self, sock_and_label: str) -> None:
        """`SOCKET KEY=VALUE`: every container with that label on that engine."""
        self._send(f"+k {sock_and_label}")

    def drop_containers(self, sock_and_label: str) -> None:
        self._send(f"-k {sock_and_label}")

    def close(self) -> None:
        """The engine ended: whatever is still registered was not torn down, so reap it too."""
        if self._pid is not None:
            self._close_detached(self._pid)
            return
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

    def _close_detached(self, pid: int) -> None:
        """EOF on its pipe, then wait (bounded) until it has reaped and is gone."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._pid = None
        end = time.monotonic() + DETACHED_WAIT_S
        while time.monotonic() < end:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return
            time.sleep(0.02)


_current = Reaper()  # inactive until started: registrations are then no-ops


def current() -> Reaper:
    return _current


def start(detached: bool = False) -> Reaper:
    global _current
    _current = Reaper()
    _current.start(detached)
    return _current


def stop() -> None:
    _current.close()


def _engine(sock: str, method: str, path: str, timeout: float = 30) -> bytes:
    """One request to a Docker-compatible API on a unix socket (no SDK in the reaper)."""
    import http.client
    import socket

    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(sock)

    c = Conn("localhost", timeout=timeout)
    try:
        c.request(method, path)
        return c.getresponse().read()
    finally:
        c.close()


def _end_conmon(ids: set[str]) -> None:
    """SIGKILL the `conmon` monitors Podman leaves behind for these containers (two per
    exec session, some still running after the container is removed)."""
    from rtax_tui.hosts.conmon import conmon_processes

    for pid in conmon_processes(ids) if ids else ():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _remove_containers(spec: str) -> None:
    """Force-remove every container with the label on the engine (`SOCKET KEY=VALUE`)."""
    import http.client
    import json
    import urllib.parse

    sock, _, label = spec.partition(" ")
    query = urllib.parse.quote(json.dumps({"label": [label]}))
    # A create that rtax sent just before it died may finish after a listing: list
    # again until the engine shows none twice in a row (bounded: about 10 s).
    quiet = 0
    removed: set[str] = set()
    try:
        for _ in range(20):
            try:
                found = json.loads(_engine(sock, "GET", f"/containers/json?all=1&filters={query}"))
                for c in found:
                    _engine(sock, "DELETE", f"/containers/{c['Id']}?force=1&v=1")
                    removed.add(str(c["Id"]))
            except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
                return  # the engine is gone (or answers nonsense): nothing more to do
            quiet = quiet + 1 if not found else 0
            if quiet >= 2:
                return
            time.sleep(0.5)
    finally:
        _end_conmon(removed)  # monitors that outlived their container's removal


def _reap(
    groups: set[int],
    cgroups: set[str],
    paths: set[str],
    containers: Iterable[str] = (),
    files: Iterable[str] = (),
) -> None:
    # Local things first, the engines' containers last: an engine can be slow to
    # answer (or answer badly), and nothing may keep a workspace or cgroup behind.
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Every cgroup gets a short first pass, the paths go, then the cgroups still busy get
    # the long wait and the paths a second pass: one cgroup whose last process is slow to
    # die (a sandbox in a hung KVM guest, a loaded host) must not keep every workspace
    # behind for its whole wait.
    busy = _remove_cgroups(cgroups, CGROUP_FIRST_S)
    time.sleep(0.05)
    _remove_paths(paths)
    _remove_files(files)
    if busy:
        _remove_cgroups(busy, CGROUP_WAIT_S)
        _remove_paths(paths)
    for spec in containers:
        try:
            _remove_containers(spec)
        except Exception:  # a bad answer (http.client.HTTPException...) ends one engine's
            pass


def _remove_cgroups(cgroups: Iterable[str], wait_s: float) -> set[str]:
    """Remove each cgroup (deepest first), waiting up to `wait_s` for its processes to
    die; the ones still there."""
    try:
        from rtax_tui.hosts.cgroups import Cgroup
    except ImportError:
        return set()
    left = set()
    for rel in sorted(cgroups, key=len, reverse=True):
        try:
            Cgroup.at(rel).remove(timeout=wait_s)
        except Exception:
            left.add(rel)
    return left


def _remove_files(files: Iterable[str]) -> None:
    """Unlink each: a file, a link (not followed) or a FIFO goes; a directory or a mount
    point at the name is left as it is (a name rtax chose in a directory it does not own:
    whatever else stands there is not rtax's to remove)."""
    for path in files:
        try:
            os.unlink(path)
        except OSError:
            pass


def _remove_paths(paths: Iterable[str]) -> None:
    """Detach loop devices on them, then remove directories (workspaces, maybe tmpfs
    mounts, an image's mounts) and single files, deepest first: a mount inside a
    directory goes before the directory. Never follows a link."""
    from rtax_tui.hosts import safefs

    _detach_loops(paths)
    for path in sorted(paths, key=len, reverse=True):
        try:
            safefs.remove_workspace(path)  # unmounts, then never follows a link
        except OSError:
            pass


LOOP_CLR_FD = 0x4C01  # linux/loop.h: detach a loop device from its file


def _detach_loops(paths: Iterable[str]) -> None:
    """Every loop device on a file inside one of `paths` (`rtax probe`'s block device
    sentinel), detached: removing the file alone leaves the device attached to it."""
    roots = [p.rstrip("/") for p in paths if p.rstrip("/")]
    try:
        devices = [d for d in os.listdir("/sys/block") if d.startswith("loop")]
    except OSError:
        return
    for dev in devices:
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                backing = f.read().strip().removesuffix(" (deleted)")
        except OSError:
            continue  # not attached
        if not any(backing == r or backing.startswith(r + "/") for r in roots):
            continue
        try:
            fd = os.open(f"/dev/{dev}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.ioctl(fd, LOOP_CLR_FD, 0)
        except OSError:
            pass
        finally:
            os.close(fd)


def main(stdin: IO[bytes]) -> int:
    groups: set[int] = set()
    cgroups: set[str] = set()
    paths: set[str] = set()
    files: set[str] = set()
    containers: set[str] = set()
    table: dict[str, set[Any]] = {
        "g": groups, "c": cgroups, "p": paths, "f": files, "k": containers,
    }  # fmt: skip
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = stdin.fileno()
    rest = b""
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        *lines, rest = (rest + data).split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
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
        # Registrations pile up in the pipe meanwhile: a write finds no reader waiting,
        # so the engine's every exec action does not wake this process twice (on 2
        # cores, two context switches an action). EOF still ends the sleep's batch.
        time.sleep(BATCH_S)
    _reap(groups, cgroups, paths, containers, files)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.stdin.buffer))
