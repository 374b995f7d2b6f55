"""The one interface drivers see of a machine: run, spawn, files, leftovers, facts.

`LocalHost` (asyncio subprocesses) and `SSHHost` (asyncssh, one connection) implement
it; a driver does all its work through it and never asks which one it has, so a
driver that needs only a host runs on a remote machine unchanged. Where the two
differ in what they can do (pass file descriptors, read the host's own clock), the
host says so through an attribute, not through its type.
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol

from rtax_tui.hosts import cgroup_sh
from rtax_tui.hosts.clocksync import ClockSync, RemoteClock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import PhaseFailure

# What a host's reaper can end when the run ends, however it ends:
# "pgid": a process group; "path": a file or directory tree; "cgroup": a cgroup, named
# by its path below the cgroup root (e.g. "rtax/env-x"), in every hierarchy;
# "containers": "SOCKET LABEL=VALUE", every container with that label on the Docker
# API (docker's or podman's) at that unix socket.
# What a host's reaper removes if rtax dies first: a process group, a path (a workspace:
# unmounted, then removed as a tree, never following a link), a file (one name rtax chose
# in a directory it does not own: unlinked alone, never unmounted or recursed into), a
# cgroup, an engine's containers by label.
Leftover = Literal["pgid", "path", "file", "cgroup", "containers"]


@dataclass
class CompletedProcess:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    dropped: int = 0  # with `run(capped=True)`: bytes read past OUTPUT_LIMIT, not kept


class Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...
    async def readline(self) -> bytes: ...
    async def readuntil(self, separator: bytes = b"\n") -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...


class Process(Protocol):
    """A spawned process: asyncio's on the local host, a channel's on an SSH host."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class Host(ABC):
    """A machine that runs commands for drivers. Errors: a host that cannot be reached
    raises `HostLost` (a PhaseFailure) from any call; a command's own failure is its
    return code, never an exception (unless `check=True`)."""

    name: str = ""
    concurrency: int | None = None  # at most this many trials at once (None: no limit)
    # A remote host's clock against the controller's, synchronised on a schedule
    # (hosts.clocksync); None where the host is the controller or its clock unread.
    clock: RemoteClock | None = None
    # `spawn(pass_fds=...)` works (a descriptor cannot cross an SSH connection).
    passes_fds: bool = False
    # The host is the machine rtax runs on: its files, /proc and cgroups are the
    # controller's own, so a driver may use them directly (faster) rather than through
    # commands; a driver that needs this says runs_remote = False, or has both paths.
    controller_local: bool = False

    @property
    def lost(self) -> bool:
        """The connection dropped; calls fail until it is back."""
        return False

    @property
    @abstractmethod
    def path_env(self) -> str:
        """PATH for commands on this host."""

    async def connect(self) -> None:  # noqa: B027 - nothing to open by default
        """Open what the host needs (a connection). Raises HostLost or RtaxError."""

    async def close(self) -> None:  # noqa: B027 - nothing to close by default
        """Close it; the host's reaper then ends every leftover still tracked."""

    @abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        merge_stderr: bool = False,
        cgroup_procs: Sequence[str] = (),
        capped: bool = False,
    ) -> CompletedProcess:
        """Run `argv` to completion (joined to the cgroups whose `cgroup.procs` files are
        given, before exec). At `timeout` its whole process group is killed and
        TimeoutError raised; `check=True` raises CalledProcessError on a non-zero code.
        `capped` (an action's output, hostile): only the first `model.OUTPUT_LIMIT` bytes
        of stdout (and of stderr) are kept; the rest is read to the end and counted in
        `CompletedProcess.dropped`."""

    @abstractmethod
    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = subprocess.PIPE,
        stderr: int | None = subprocess.STDOUT,
        cgroup_procs: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
    ) -> Any:
        """Start a long-lived process leading its own process group (tracked with the
        reaper until `release`); returns a Process with asyncio-like stdin/stdout."""

    @abstractmethod
    async def kill(self, proc: Any) -> None:
        """SIGKILL the process's whole group."""

    @abstractmethod
    def release(self, proc: Any) -> None:
        """The process and its group are gone: stop tracking them."""

    @abstractmethod
    async def make_workspace(
        self,
        prefix: str,
        src: str | None = None,
        owner: int | None = None,
        size_mib: int | None = 1024,
    ) -> str:
        """A fresh directory `<host tmp>/<prefix>XXXX` holding a copy of the controller's
        directory `src`, given (links not followed) to uid and gid `owner` if set;
        tracked as a leftover until `remove_tree`. With `size_mib` it is its own tmpfs
        of that size (writes past it fail with ENOSPC); None: a plain directory."""

    @abstractmethod
    async def remove_tree(self, path: str) -> None:
        """Unmount a workspace's tmpfs, remove the directory tree (never following a link
        nor crossing a mount) and stop tracking it."""

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write `data` to `path` on the host atomically (its directory is made)."""
        script = (
            'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat >"$1.tmp-rtax" '
            '&& chmod "$2" "$1.tmp-rtax" && mv -f -- "$1.tmp-rtax" "$1"'
        )
        res = await self.run(["sh", "-c", script, "rtax-put", path, f"{mode:o}"], input=data)
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip()[-300:]
            raise OSError(f"host {self.name}: cannot write {path}: {err}")

    @abstractmethod
    def track(self, kind: Leftover, value: str) -> None:
        """Register a leftover with the host's reaper *before* it exists, so that rtax
        killed at any moment (kill -9 included) leaves nothing behind."""

    @abstractmethod
    def untrack(self, kind: Leftover, value: str) -> None:
        """The leftover is gone (removed by its owner)."""

    # -- cgroups: made, emptied and removed on the host (scripts by default; the local
    # host does it in-process). A cgroup is tracked with the reaper before it exists.

    async def make_cgroup(
        self,
        rel: str,
        *,
        cpus: float | None = None,
        memory_mib: int | None = None,
        pids: int | None = None,
    ) -> list[str]:
        """Make cgroup `rel` (e.g. "rtax/env-x") in every hierarchy with these limits
        and return its `cgroup.procs` files (to join: `rtax-enter`, `cgroup_procs=`).
        Tracked before it exists; raises PhaseFailure("cgroup_failed")."""
        self.track("cgroup", rel)
        self._unsettled_cgroups.add(rel)  # until the script is known to have ended
        res = await self.run(
            [
                "sh",
                "-c",
                cgroup_sh.CREATE_SH,
                "rtax-cg",
                rel,
                *cgroup_sh.limit_args(cpus, memory_mib, pids),
            ],
            timeout=30,
        )
        self._unsettled_cgroups.discard(rel)
        if res.returncode != 0:
            await self.remove_cgroup(rel)
            err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
            raise PhaseFailure(
                ErrorKind.CGROUP_FAILED, f"cannot make cgroup {rel} on {self.name}: {err}"
            )
        return res.stdout.decode().split()

    async def kill_cgroup(self, rel: str, spare: int | None = None) -> None:
        """SIGKILL every process in cgroup `rel` and below but `spare` (a pid)."""
        await self.run(
            [
                "sh",
                "-c",
                cgroup_sh.KILL_SH,
                "rtax-cg-kill",
                str(spare or 0),
                *cgroup_sh.cgroup_dirs(rel),
            ],
            timeout=30,
        )

    async def remove_cgroup(self, rel: str) -> None:
        """Kill what is inside cgroup `rel`, remove it everywhere and stop tracking it
        (already gone is fine). Raises PhaseFailure("teardown_incomplete") when it stays
        busy. A cgroup whose making was cut off stays tracked: the script may still
        make it after this removal, and the host's reaper removes it at the end."""
        res = await self.run(
            ["sh", "-c", cgroup_sh.REMOVE_SH, "rtax-cg-rm", *cgroup_sh.cgroup_dirs(rel)], timeout=30
        )
        if res.returncode != 0:
            raise PhaseFailure(
                ErrorKind.TEARDOWN_INCOMPLETE, res.stderr.decode(errors="replace").strip()
            )
        if rel not in self._unsettled_cgroups:
            self.untrack("cgroup", rel)

    @cached_property
    def _unsettled_cgroups(self) -> set[str]:
        """Cgroups whose making was cut off (see remove_cgroup)."""
        return set()

    def cgroup_procs(self, relpath: str) -> list[str]:
        """The `cgroup.procs` files of a cgroup that the controller made (a capacity
        budget), for `cgroup_procs=`. Raises PhaseFailure("not_supported") where the
        controller's cgroups are not the host's."""
        raise PhaseFailure(
            ErrorKind.NOT_SUPPORTED,
            f"capacity budgets are the controller's cgroups: not on {self.name}",
        )

    @abstractmethod
    async def facts(self) -> dict[str, Any]:
        """Kernel, CPUs, memory, clock source, versions of the substrate software."""

    async def measure_rtt(self, n: int = 5) -> float | None:
        """Median round trip of an empty command, in ms; None where it means nothing
        (the local host)."""
        return None

    async def sync_clock(self) -> ClockSync | None:
        """Synchronise the host's clock now (a remote host); None where there is no
        separate clock, or it cannot be read."""
        return None

    def watch_clock(self, fn: Callable[[ClockSync], None] | None) -> None:  # noqa: B027
        """Have `fn` called with every later sync of the host's clock (None: stop)."""
