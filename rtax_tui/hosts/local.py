"""The local host: asyncio subprocesses with a `subprocess`-shaped API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from rtax_tui.hosts import reaper, safefs, spawn
from rtax_tui.hosts.base import CompletedProcess, Host, Leftover
from rtax_tui.model import spec as model
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import OutputSink, PhaseFailure
from rtax_tui.model.waits import own_timeout

__all__ = ["CompletedProcess", "LocalHost", "join_cgroups_before_exec", "kill_group"]


def join_cgroups_before_exec(procs_files: Sequence[str]) -> Callable[[], None] | None:
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


def before_exec(procs_files: Sequence[str]) -> Callable[[], None] | None:
    """The pre-exec hook of a step Popen starts: its signals reset where rtax's state would
    leak into it (`spawn.signals_to_reset`: an ignored or blocked signal), then the
    cgroups joined; None where neither is needed (Popen then spawns with vfork)."""
    join = join_cgroups_before_exec(procs_files)
    if not spawn.signals_to_reset():
        return join

    def hook() -> None:
        spawn.reset_signals()
        if join is not None:
            join()

    return hook


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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


def _fill(path: str, src: str | None, owner: int | None, size_mib: int | None) -> None:
    """Mount the workspace's tmpfs (root's until filled), copy `src` beneath its fd, then
    give it to `owner`: each entry chowned through the fd that made it."""
    if size_mib is not None:
        safefs.mount_tmpfs(path, size_mib)
    fd = os.open(path, safefs.DIR_FLAGS)
    try:
        if src:
            safefs.copy_into(src, fd, owner)
        if owner is not None:
            os.fchown(fd, owner, owner)
    finally:
        os.close(fd)


def chown_tree(path: str, uid: int) -> None:
    """Give a tree to uid and gid `uid`, without following links or crossing mounts."""
    safefs.chown_tree(path, uid)


class LocalHost(Host):
    name = "local"
    passes_fds = True
    controller_local = True

    @property
    def path_env(self) -> str:
        return os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")

    async def make_cgroup(
        self,
        rel: str,
        *,
        cpus: float | None = None,
        memory_mib: int | None = None,
        pids: int | None = None,
    ) -> list[str]:
        from rtax_tui.hosts.cgroups import Cgroup, CgroupError

        parent, _, name = rel.strip("/").rpartition("/")
        self.track("cgroup", rel)
        try:
            cg = Cgroup.create(name, cpus=cpus, memory_mib=memory_mib, pids=pids, parent=parent)
        except (OSError, CgroupError, ValueError) as exc:
            self.untrack("cgroup", rel)  # create removed what it had made
            raise PhaseFailure(ErrorKind.CGROUP_FAILED, f"cannot make cgroup {rel}: {exc}") from exc
        return cg.procs_files(made=True)

    async def kill_cgroup(self, rel: str, spare: int | None = None) -> None:
        from rtax_tui.hosts.cgroups import Cgroup, CgroupError

        try:
            pids = Cgroup(rel).pids()
        except CgroupError:
            return
        for pid in pids - {spare}:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    async def remove_cgroup(self, rel: str) -> None:
        from rtax_tui.hosts.cgroups import Cgroup, CgroupError

        try:
            await asyncio.to_thread(Cgroup(rel).remove)
        except (OSError, CgroupError) as exc:
            raise PhaseFailure(ErrorKind.TEARDOWN_INCOMPLETE, f"cgroup {rel}: {exc}") from exc
        self.untrack("cgroup", rel)

    def cgroup_procs(self, relpath: str) -> list[str]:
        from rtax_tui.hosts.cgroups import Cgroup

        return Cgroup.at(relpath).procs_files()

    def track(self, kind: Leftover, value: str) -> None:
        r = reaper.current()
        if kind == "pgid":
            r.add_pgid(int(value))
        elif kind == "path":
            r.add_path(value)
        elif kind == "file":
            r.add_file(value)
        elif kind == "containers":
            r.add_containers(value)
        else:
            r.add_cgroup(value)

    def untrack(self, kind: Leftover, value: str) -> None:
        r = reaper.current()
        if kind == "pgid":
            r.drop_pgid(int(value))
        elif kind == "path":
            r.drop_path(value)
        elif kind == "file":
            r.drop_file(value)
        elif kind == "containers":
            r.drop_containers(value)
        else:
            r.drop_cgroup(value)

    async def facts(self) -> dict[str, Any]:
        from rtax_tui.hosts.hostfacts import local_facts

        return dict(local_facts())

    async def kill(self, proc: asyncio.subprocess.Process) -> None:
        """SIGKILL a spawned process's whole group (SSHHost does it remotely)."""
        kill_group(proc)

    def new_dir(self, prefix: str) -> str:
        """`mkdtemp`, but registered with the reaper *before* the directory exists (a
        kill -9 between the two would leave it): the name is chosen, tracked, then made."""
        tmp = tempfile.gettempdir()
        for _ in range(100):
            path = os.path.join(tmp, prefix + os.urandom(6).hex())
            self.track("path", path)
            try:
                os.mkdir(path, 0o700)
                return path
            except FileExistsError:
                self.untrack("path", path)
        raise FileExistsError(f"no free name for {prefix}* in {tmp}")

    async def make_workspace(
        self,
        prefix: str,
        src: str | None = None,
        owner: int | None = None,
        size_mib: int | None = 1024,
    ) -> str:
        """A fresh temporary directory, its own tmpfs of `size_mib` MiB (None: a plain
        directory, no limit), holding a copy of `src`'s contents, given to `owner` if set.

        The copy runs off the event loop (other trials may be in flight); the
        directory is registered with the reaper (which unmounts) before it exists.
        """
        path = self.new_dir(prefix)
        if src or size_mib is not None:
            try:
                await asyncio.to_thread(_fill, path, src, owner, size_mib)
            except BaseException:
                await self.remove_tree(path)
                raise
        elif owner is not None:
            os.chown(path, owner, owner)
        return path

    async def remove_tree(self, path: str) -> None:
        """Unmount and remove `path` (never following a link); the reaper forgets it only
        when nothing of it is left (a mount it could not undo, an entry a process still in
        the environment made meanwhile), so that it tries again at the run's end."""
        if not await asyncio.to_thread(safefs.remove_workspace, path):
            reaper.current().drop_path(path)

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
        make = _popen_process if _HAS_PIDFD else asyncio.create_subprocess_exec
        proc = await make(
            *argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=before_exec(cgroup_procs),
            pass_fds=tuple(pass_fds),
            limit=model.READ_LIMIT,
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
        capped: bool = False,
    ) -> CompletedProcess:
        """Run to completion; at the timeout the whole process group is killed. `capped`:
        as `Host.run` (the output read to its end, the first OUTPUT_LIMIT bytes kept).

        The spawn itself is never cancelled half-way: on Python 3.11 a cancelled
        `create_subprocess_exec` whose grandchild still holds the pipe can hang its
        canceller forever. If the caller gives up during the spawn, the spawn finishes
        in the background, where the process group is killed and reaped.
        """
        limit = model.sink_limit(capped)
        if input is None and merge_stderr and _HAS_PIDFD:
            sink = OutputSink(limit)
            async with own_timeout(timeout):  # under an action's timeout: that one
                rc = await self._run_merged(argv, sink, cwd=cwd, env=env, cgroup_procs=cgroup_procs)
            out = sink.kept()
            if check and rc != 0:
                raise subprocess.CalledProcessError(rc, list(argv), out, b"")
            return CompletedProcess(list(argv), rc, out, b"", sink.dropped)
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
                out, err, dropped = await _communicate(proc, input, limit)
            except BaseException:
                kill_group(proc)
                # and its pipes closed: one that a process outside the group holds (setsid)
                # kept proc.wait() waiting for its end, past the timeout
                proc._transport.close()  # type: ignore[attr-defined]
                await proc.wait()
                raise
            finally:
                self.release(proc)
        rc = proc.returncode if proc.returncode is not None else -1
        result = CompletedProcess(list(argv), rc, out or b"", err or b"", dropped)
        if check and rc != 0:
            raise subprocess.CalledProcessError(rc, list(argv), out, err)
        return result

    async def _run_merged(
        self,
        argv: Sequence[str],
        sink: OutputSink,
        *,
        cwd: str | None,
        env: dict[str, str] | None,
        cgroup_procs: Sequence[str],
    ) -> int:
        """The exec channel's path: stdout+stderr in one pipe (into `sink`), the exit seen
        through a pidfd; returns the exit status.

        The spawn is glibc's posix_spawn (`hosts/spawn.py`: vfork semantics, no Python
        between fork and exec; called from C where the install built `_spawnc`, which
        also opens the pidfd, else through ctypes); a process that must join cgroups
        before it runs (a capacity budget) goes through Popen with a pre-exec hook
        instead, as does a C library without posix_spawn's extensions. asyncio's
        subprocess transport would cost about 0.3 ms a process more on Python 3.11
        (measured against hyperfine in bench/).
        """
        loop = asyncio.get_running_loop()
        popen: subprocess.Popen[bytes] | None = None
        pidfd = -1
        if not cgroup_procs and spawn.available():
            # the pipe, the spawn and the pidfd in one call (`spawn.start`); only rtax's
            # end of the pipe is non-blocking: the step's stdout must block when the pipe
            # is full (a non-blocking one fails a step's write of more than 64 KiB, EAGAIN)
            pid, rfd, pidfd = spawn.start(argv, cwd=cwd, env=env)
        else:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=before_exec(cgroup_procs),
            )
            assert popen.stdout is not None
            pid = popen.pid
            rfd = os.dup(popen.stdout.fileno())
            popen.stdout.close()
            os.set_blocking(rfd, False)
        reaper.current().add_pgid(pid)
        eof: asyncio.Future[None] = loop.create_future()

        def on_output() -> None:
            while True:  # drain what is there: often the output and the EOF at once
                try:
                    data = os.read(rfd, 1 << 16)
                except BlockingIOError:
                    return
                except OSError:
                    data = b""
                if not data:
                    break
                sink.add(data)
            loop.remove_reader(rfd)
            if not eof.done():
                eof.set_result(None)

        loop.add_reader(rfd, on_output)
        rc: int | None = None
        watching = False
        try:
            await eof
            # the pipe closes as the process exits: its status is mostly there already,
            # else the pidfd says when (no thread, no SIGCHLD handler)
            if popen is None:
                rc = spawn.reap(pid)
            elif popen.poll() is not None:
                rc = popen.returncode
            if rc is None:
                if pidfd < 0:
                    pidfd = os.pidfd_open(pid)
                exited: asyncio.Future[None] = loop.create_future()

                def on_exit() -> None:
                    if not exited.done():
                        exited.set_result(None)

                loop.add_reader(pidfd, on_exit)
                watching = True
                await exited
        except BaseException:
            _killpg(pid)
            raise
        finally:
            loop.remove_reader(rfd)
            os.close(rfd)
            if pidfd >= 0:
                if watching:
                    loop.remove_reader(pidfd)
                os.close(pidfd)
            if rc is None:  # exited, or killed just now: does not block for long
                if popen is not None:
                    rc = popen.wait()
                else:
                    rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            reaper.current().drop_pgid(pid)
        assert rc is not None
        return rc

    def _reap_spawned(self, fut: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        proc = fut.result()
        kill_group(proc)

        async def reap() -> None:
            try:
                await proc.communicate()
            finally:
                self.release(proc)

        task = asyncio.ensure_future(reap())
        _background.add(task)
        task.add_done_callback(_background.discard)


async def _popen_process(
    *argv: str,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    limit: int,
    **popen: Any,
) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec`, on whatever loop runs (engine.evloop), made the
    way asyncio's own loop makes it on Linux: `subprocess.Popen` (vfork, when there is no
    `preexec_fn`) with its pipes connected to the loop, the exit seen through a pidfd.

    Why not the loop's own: uvloop spawns through libuv, with fork, which took 13-30 ms
    a process here against 1-2 ms for Popen (more the larger rtax's heap), and the shell
    channel's create, stage's set-up commands and every `host.run` with input go through
    here. asyncio's loop on 3.11 would wait for the exit in a thread per process; the
    pidfd needs none. Uses asyncio's own Unix subprocess transport (a private class of
    the standard library, unchanged from 3.11 to 3.13) with the pidfd in place of its
    child watcher."""
    from asyncio import unix_events

    loop = asyncio.get_running_loop()
    protocol = asyncio.subprocess.SubprocessStreamProtocol(limit=limit, loop=loop)
    waiter: asyncio.Future[None] = loop.create_future()
    transp: Any = unix_events._UnixSubprocessTransport(  # type: ignore[attr-defined]
        loop, protocol, argv, False, stdin, stdout, stderr, 0, waiter=waiter, **popen
    )
    popen_obj: subprocess.Popen[bytes] = transp._proc
    if not isinstance(loop, asyncio.BaseEventLoop):  # uvloop
        _hand_copies(popen_obj)
    pidfd = os.pidfd_open(transp.get_pid())

    def on_exit() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        rc = popen_obj.poll()  # the pidfd is readable: the process has exited
        transp._process_exited(rc if rc is not None else popen_obj.wait())

    loop.add_reader(pidfd, on_exit)
    try:
        await asyncio.shield(waiter)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        # the whole group is killed (a grandchild holding a pipe kept its stream open),
        # and the transport's task, which runs on after a cancel, is let finish handing
        # every pipe to the loop (a few turns) before all are closed: a pipe connected
        # after close() stayed open, and _wait() with it, while anything held its other
        # end; a copy closed before the task handed it over reached libuv closed, or as
        # another's number (libuv aborted the process)
        _killpg(transp.get_pid())
        try:
            await asyncio.wait([waiter])
        finally:  # a second cancel here still closes what is connected
            transp.close()
        await transp._wait()
        raise
    return asyncio.subprocess.Process(transp, protocol, loop)


def _hand_copies(popen_obj: subprocess.Popen[bytes]) -> None:
    """Before the transport connects the child's pipes (a task of its own, not yet run):
    each pipe's file object is swapped for one over a copy of its descriptor that does not
    close it.

    Why: uvloop's `connect_read_pipe` and `connect_write_pipe` hand the file object's own
    descriptor to libuv, which closes it with the transport, and then close the file
    object too: the same number closed twice (uvloop issue 763, 0.23.0). Between the two
    closes another thread (a `subprocess.run` under `asyncio.to_thread`) may have been
    given that number for a pipe of its own, or a recording's file, and the second close
    takes it from under it (found as an EBADF in a cancelled stage create). With the
    swap, libuv closes the copy, once; the original is closed here, once; the file object
    the loop closes owns nothing."""
    for name, mode in (("stdin", "wb"), ("stdout", "rb"), ("stderr", "rb")):
        f = getattr(popen_obj, name)
        if f is None:
            continue
        fd = os.dup(f.fileno())  # O_CLOEXEC, as the original
        f.close()
        setattr(popen_obj, name, open(fd, mode, buffering=0, closefd=False))


async def _communicate(
    proc: asyncio.subprocess.Process, input: bytes | None, limit: int | None
) -> tuple[bytes, bytes, int]:
    """`communicate`, each output stream read to its end into an `OutputSink` of `limit`
    (None: OUTPUT_LIMIT): (stdout, stderr, bytes dropped past it from both). Not asyncio's
    own: on uvloop its write to a child that exited without reading raised RuntimeError
    (a closed transport), where asyncio's loop drops the input as a broken pipe."""

    async def feed() -> None:
        if proc.stdin is not None:
            # a child that exits without reading may have closed the pipe already: uvloop
            # then refuses the write (RuntimeError), asyncio's loop drops it
            if input and not proc.stdin.is_closing():
                proc.stdin.write(input)
                try:
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass
            proc.stdin.close()

    async def drain(stream: asyncio.StreamReader | None, sink: OutputSink) -> None:
        while stream is not None and (data := await stream.read(1 << 16)):
            sink.add(data)

    out, err = OutputSink(limit), OutputSink(limit)
    await asyncio.gather(feed(), drain(proc.stdout, out), drain(proc.stderr, err))
    await proc.wait()
    return out.kept(), err.kept(), out.dropped + err.dropped


_background: set[asyncio.Task[None]] = set()
_HAS_PIDFD = hasattr(os, "pidfd_open")
