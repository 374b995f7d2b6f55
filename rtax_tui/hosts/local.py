"""The local host: asyncio subprocesses with a `subprocess`-shaped API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rtax_tui.core import reaper


@dataclass
class CompletedProcess:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes


def _preexec(procs_files: Sequence[str]) -> Callable[[], None] | None:
    """Join cgroups in the child before exec, so no descendant escapes the limits."""
    if not procs_files:
        return None
    files = list(procs_files)

    def join() -> None:
        pid = str(os.getpid()).encode()
        for f in files:
            fd = os.open(f, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    return join


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill a process started with its own session, and whatever is left in its group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass


class LocalHost:
    name = "local"

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
    ) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=_preexec(cgroup_procs),
            pass_fds=tuple(pass_fds),
            limit=1 << 24,
        )
        reaper.current().add_pgid(proc.pid)
        return proc

    @staticmethod
    def release(proc: asyncio.subprocess.Process) -> None:
        """The process and its group are gone: the reaper may forget them."""
        reaper.current().drop_pgid(proc.pid)

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
    ) -> CompletedProcess:
        """Run to completion; at the timeout the whole process group is killed.

        The spawn itself is never cancelled half-way: on Python 3.11 a cancelled
        `create_subprocess_exec` whose grandchild still holds the pipe can hang its
        canceller forever. If the caller gives up during the spawn, the spawn finishes
        in the background, where the process group is killed and reaped.
        """
        async with asyncio.timeout(timeout):
            spawn = asyncio.ensure_future(
                self.spawn(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                    stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                    cgroup_procs=cgroup_procs,
                )
            )
            try:
                proc = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                spawn.add_done_callback(self._reap_spawned)
                raise
            try:
                out, err = await proc.communicate(input)
            except BaseException:
                kill_group(proc)
                await proc.wait()
                raise
            finally:
                self.release(proc)
        rc = proc.returncode if proc.returncode is not None else -1
        result = CompletedProcess(list(argv), rc, out or b"", err or b"")
        if check and rc != 0:
            raise subprocess.CalledProcessError(rc, list(argv), out, err)
        return result

    def _reap_spawned(self, spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if spawn.cancelled() or spawn.exception() is not None:
            return
        proc = spawn.result()
        kill_group(proc)

        async def reap() -> None:
            try:
                await proc.communicate()
            finally:
                self.release(proc)

        task = asyncio.ensure_future(reap())
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()
