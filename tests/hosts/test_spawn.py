"""The exec channel's spawn (hosts/spawn.py through LocalHost.run): what Popen gave,
kept: merged output, the working directory, a session of its own, nothing inherited,
the PATH of the environment given, errors as Popen raised them, signals as -N."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from collections.abc import Callable

import pytest

from rtax_tui.hosts import spawn
from rtax_tui.hosts.local import LocalHost
from tests.procs import dead

pytestmark = pytest.mark.skipif(not spawn.available(), reason="no glibc posix_spawn extensions")

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def run(argv: list[str], **kw):  # type: ignore[no-untyped-def]
    return asyncio.run(LocalHost().run(argv, merge_stderr=True, **kw))


def test_output_cwd_session_and_rc(tmp_path):
    script = 'echo out; echo err >&2; pwd; cat /proc/self/stat | cut -d" " -f6; echo $$; exit 3'
    res = run(["sh", "-c", script], cwd=str(tmp_path), env=ENV)
    out, err, cwd, sid, pid = res.stdout.decode().split()
    assert (res.returncode, out, err, cwd) == (3, "out", "err", str(tmp_path))
    assert sid == pid  # its own session, as Popen(start_new_session=True)


def test_nothing_inherited_and_stdin_is_devnull(tmp_path):
    r, w = os.pipe()
    os.set_inheritable(w, True)  # Popen's close_fds would have closed it: so must we
    try:
        res = run(["sh", "-c", "ls /proc/self/fd; readlink /proc/self/fd/0"], env=ENV)
    finally:
        os.close(r)
        os.close(w)
    fds = res.stdout.decode().split()
    assert fds[-1] == "/dev/null"
    assert set(fds[:-1]) <= {"0", "1", "2", "3"}  # 3: ls's own directory


def test_path_comes_from_the_env_given(tmp_path):
    tool = tmp_path / "rtax-spawn-probe"
    tool.write_text("#!/bin/sh\necho found-in-env-path\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    res = run(["rtax-spawn-probe"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert res.stdout == b"found-in-env-path\n"
    with pytest.raises(FileNotFoundError):
        run(["rtax-spawn-probe"], env=ENV)  # not in this PATH, though cached for the other


def test_errors_and_signals(tmp_path):
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/rtax-nothing"], env=ENV)
    with pytest.raises(FileNotFoundError):
        run(["true"], cwd=str(tmp_path / "missing"), env=ENV)
    assert run(["sh", "-c", "kill -TERM $$"], env=ENV).returncode == -15


def test_timeout_kills_the_whole_session(tmp_path):
    mark = tmp_path / "bg"
    with pytest.raises(TimeoutError):
        run(["sh", "-c", f"(sleep 2; touch {mark}) & sleep 30"], env=ENV, timeout=0.3)
    asyncio.run(asyncio.sleep(2.5))
    assert not mark.exists()  # the background child died with its group


@pytest.mark.parametrize("merged", [True, False])
def test_capped_run_keeps_the_limit_and_counts_the_rest(monkeypatch, merged):
    """Issue 19: `run(capped=True)`, both ways the local host runs a command (merged: the
    exec channel's spawn to a pipe; apart, with input: asyncio's subprocess): the first
    OUTPUT_LIMIT bytes of each stream kept, the rest read to the end and counted, and a
    writer of more than a pipe holds is not cut (its write blocks, it does not fail)."""
    from rtax_tui.model import spec as model

    monkeypatch.setattr(model, "OUTPUT_LIMIT", 1024)
    script = "cat >/dev/null; head -c 1048576 /dev/zero; echo err >&2; exit 3"
    inp = None if merged else b"in"
    r = asyncio.run(
        LocalHost().run(["sh", "-c", script], input=inp, merge_stderr=merged, capped=True)
    )
    assert (r.returncode, r.stdout) == (3, bytes(1024))
    if merged:
        assert (r.stderr, r.dropped) == (b"", (1 << 20) - 1024 + len(b"err\n"))
    else:
        assert (r.stderr, r.dropped) == (b"err\n", (1 << 20) - 1024)
    # uncapped (rtax's own commands): whole
    r = asyncio.run(LocalHost().run(["sh", "-c", script], input=inp, merge_stderr=merged))
    assert (r.returncode, len(r.stdout), r.dropped) == (3, (1 << 20) + (4 if merged else 0), 0)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_spawned_streams_on_either_loop(loop, tmp_path):
    """LocalHost.spawn (the shell channel's, and host.run's with input): the same
    asyncio Process on either loop, made through Popen and seen to exit through a pidfd:
    stdin and stdout as streams, the exit status, a kill, a session of its own, the
    descriptors passed and no other, and a missing program raised as Popen raises it."""
    factory = _loop_factory(loop)
    host = LocalHost()
    r, w = os.pipe()

    async def go() -> None:
        script = (
            'read x; echo "got $x"; ls /proc/self/fd; cat /proc/self/stat | cut -d" " -f6; exit 5'
        )
        p = await host.spawn(
            ["sh", "-c", script], cwd=str(tmp_path), env=ENV, stdin=-1, stderr=None,
            pass_fds=[w],
        )  # fmt: skip
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"hello\n")
        await p.stdin.drain()
        assert await p.stdout.readline() == b"got hello\n"
        rest = (await p.stdout.read()).decode().split()
        assert await asyncio.wait_for(p.wait(), 10) == 5 and p.returncode == 5
        fds, sid = set(rest[:-1]), rest[-1]
        assert str(w) in fds and str(r) not in fds
        assert sid == str(p.pid)  # its own session
        host.release(p)
        q = await host.spawn(["sleep", "30"], env=ENV)
        await host.kill(q)
        assert await asyncio.wait_for(q.wait(), 10) == -9
        host.release(q)
        with pytest.raises(FileNotFoundError):
            await host.spawn(["no-such-program-rtax"], env=ENV)

    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(go())
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_pipe_is_closed_once_while_it_is_still_its_own(loop, monkeypatch):
    """Every pipe Popen makes for a spawned process is closed by its file object while
    the descriptor is still that pipe. uvloop closed it in libuv first and then through
    the file object: a second close of a number that another thread may have been given
    meanwhile (an EBADF in a `subprocess.run` under `asyncio.to_thread`, once). Here the
    "other thread" is a pipe opened inside the file object's close, where it would get a
    number just freed: it must stay open. The copies rtax hands the loop are watched
    too (closed by libuv alone: a file object that closed one as well would fail).
    Whether descriptors are left is not counted here: in a worker that ran other tests,
    others' are closed by the collector meanwhile; the cancellation test below runs in a
    child of its own."""
    import fcntl
    import io

    factory = _loop_factory(loop)
    stale: list[str] = []

    def alive(fd: int) -> bool:
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
            return True
        except OSError:
            return False

    class Watched(io.FileIO):
        def close(self) -> None:
            if not self.closed and self.closefd:
                n = self.fileno()
                ours = alive(n) and os.fstat(n).st_ino == self.ino
                other = os.pipe()  # another thread, given the lowest free numbers now
                super().close()
                if not ours or not all(alive(fd) for fd in other):
                    stale.append(f"fd {n}: closed after it was no longer this pipe")
                for fd in other:
                    if alive(fd):
                        os.close(fd)
            else:
                super().close()

    real = subprocess.Popen

    class Popen(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            super().__init__(*a, **k)
            for name, mode in (("stdin", "wb"), ("stdout", "rb"), ("stderr", "rb")):
                f = getattr(self, name)
                if f is not None:
                    w = Watched(os.dup(f.fileno()), mode)
                    w.ino = os.fstat(w.fileno()).st_ino
                    f.close()
                    setattr(self, name, w)

    monkeypatch.setattr(subprocess, "Popen", Popen)

    def watched_open(fd, mode, buffering=-1, closefd=True):  # type: ignore[no-untyped-def]
        w = Watched(fd, mode, closefd=closefd)  # the copies local.py hands the loop
        w.ino = os.fstat(fd).st_ino
        return w

    from rtax_tui.hosts import local

    monkeypatch.setattr(local, "open", watched_open, raising=False)

    async def go() -> None:
        host = LocalHost()
        for _ in range(30):
            res = await host.run(["sh", "-c", "cat; echo e >&2"], input=b"in", timeout=10)
            assert (res.returncode, res.stdout, res.stderr) == (0, b"in", b"e\n")

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(go())
    assert stale == []


@pytest.mark.parametrize("capped", [True, False])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_input_to_a_child_that_never_reads_it_is_dropped_not_an_error(loop, capped):
    """`host.run(..., input=...)` of a child that exits without reading its stdin: the
    input is dropped as a broken pipe on either loop. On uvloop, asyncio's `communicate`
    raised RuntimeError ("the handler is closed") for a few runs in a hundred."""
    factory = _loop_factory(loop)

    async def go() -> list[tuple[int, bytes]]:
        host = LocalHost()
        return [
            ((r := await host.run(["sh", "-c", "echo x"], input=b"hi", capped=capped, timeout=10))
             .returncode, r.stdout)
            for _ in range(150)
        ]  # fmt: skip

    with asyncio.Runner(loop_factory=factory) as runner:
        got = runner.run(go())
    assert set(got) == {(0, b"x\n")}


def test_spawns_cancelled_at_every_turn_leave_the_loop_whole():
    """`LocalHost.spawn` (pipes on stdin, stdout and stderr) cancelled after 0 to 7 turns
    of uvloop's loop, 1,000 times, a `host.run` after each: no run fails, the process
    lives, and it holds as many descriptors after as before. A spawn cancelled while
    asyncio's transport was still handing its pipes to the loop once closed a descriptor
    that the transport's own task then gave libuv, closed or as another's number: libuv
    aborted the process (every run of this, before). In a child process, so that an
    abort fails this test, not the session."""
    pytest.importorskip("uvloop")
    script = r"""
import asyncio, os, subprocess, uvloop
from rtax_tui.hosts.local import LocalHost
async def main():
    h, bad = LocalHost(), []
    await h.run(["true"], input=b"", timeout=10)
    n0 = len(os.listdir("/proc/self/fd"))
    for i in range(1000):
        t = asyncio.ensure_future(
            h.spawn(["cat"], stdin=subprocess.PIPE, stderr=subprocess.PIPE))
        for _ in range(i % 8):
            await asyncio.sleep(0)
        t.cancel()
        try:
            p = await t
            p.kill(); await p.wait(); h.release(p)
        except asyncio.CancelledError:
            pass
        r = await h.run(["sh", "-c", "cat; echo e >&2"], input=b"in", timeout=10)
        if (r.returncode, r.stdout, r.stderr) != (0, b"in", b"e\n"):
            bad.append(r)
    await asyncio.sleep(0.5)  # the last killed children's pipes at their end
    print("bad", len(bad), "fds", n0, len(os.listdir("/proc/self/fd")))
uvloop.run(main())
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    _, bad, _, before, after = res.stdout.split()
    assert (bad, after) == (b"0", before), res.stdout


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_cancelled_spawn_returns_at_once_and_ends_the_group(loop, tmp_path):
    """A spawn cancelled 1 to 8 turns in, on a loop that another task keeps busy 5 ms a
    turn, whose child forks a grandchild that holds its pipes: the cancel returns at once
    and the grandchild is gone. Before, the transport's task connected a pipe after the
    transport was closed; that pipe, and the cancel waiting on it, stayed open as long as
    the grandchild lived, and only the child was killed (6 of 8 blocked for 20 s)."""
    import signal
    import subprocess
    import time

    factory = _loop_factory(loop)
    pidf = tmp_path / "grandchild"

    async def busy() -> None:
        while True:
            time.sleep(0.005)
            await asyncio.sleep(0)

    async def go() -> list[str]:
        b = asyncio.ensure_future(busy())
        host, bad = LocalHost(), []
        try:
            for k in range(1, 9):
                pidf.unlink(missing_ok=True)
                t = asyncio.ensure_future(
                    host.spawn(
                        ["sh", "-c", f"sleep 20 & echo $! > {pidf}; exec cat"],
                        stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                    )
                )  # fmt: skip
                for _ in range(k):
                    await asyncio.sleep(0)
                t.cancel()
                done, _ = await asyncio.wait([t], timeout=3)
                if not done:
                    bad.append(f"turn {k}: the cancel still waits after 3 s")
                if not t.cancelled() and t.done() and t.exception() is None:
                    p = t.result()  # it had started: kill it as a caller would
                    await host.kill(p)
                    await p.wait()
                    host.release(p)
                await asyncio.sleep(0.2)
                gc = pidf.read_text().strip() if pidf.exists() else ""
                if gc and not dead(int(gc), 0):
                    bad.append(f"turn {k}: the grandchild {gc} lives")
                    os.kill(int(gc), signal.SIGKILL)
                await asyncio.wait([t], timeout=25)
        finally:
            b.cancel()
        return bad

    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(go()) == []


def _loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop a test parametrized over "asyncio" and "uvloop" runs on."""
    if loop == "uvloop":
        return pytest.importorskip("uvloop").new_event_loop  # type: ignore[no-any-return]
    return asyncio.SelectorEventLoop


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_timeout_holds_when_a_process_outside_the_group_holds_the_output(loop, tmp_path):
    """`host.run(..., input=..., timeout=0.5)` of a child that starts a grandchild in a
    session of its own (setsid: out of the group rtax kills) holding its stdout: the
    TimeoutError comes at the timeout, not when the grandchild lets go (4 s before)."""
    import signal
    import time

    factory = _loop_factory(loop)
    pidf = tmp_path / "escaped"
    script = f"setsid sh -c 'echo $$ > {pidf}; exec sleep 4' & cat >/dev/null; sleep 30"

    async def go() -> float:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await LocalHost().run(["sh", "-c", script], input=b"x", timeout=0.5)
        return time.monotonic() - t0

    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            took = runner.run(go())
    finally:
        if pidf.exists() and not dead(int(pidf.read_text()), 0):
            os.kill(int(pidf.read_text()), signal.SIGKILL)
    assert took < 3.0
