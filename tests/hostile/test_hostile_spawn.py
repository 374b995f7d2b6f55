"""The compiled spawn (issue 42) attacked as a step under training would, and checked for
fidelity: what a step starts with through every way rtax spawns one (the C helper, its
ctypes fallback, Popen with a pre-exec hook, Popen for a shell channel; the local and
stage drivers on top), whatever signal state rtax itself is in.

See docs/boundaries.md, "The compiled spawn (issue 42): what was tried"."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from rtax_tui.hosts import spawn
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

pytestmark = pytest.mark.skipif(not spawn.available(), reason="no glibc posix_spawn extensions")

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
C = spawn._c
STATUS = ("grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status")
# a pipeline a shell ends by SIGPIPE: with SIGPIPE ignored, `yes` fails on EPIPE instead
YES = ("sh", "-c", "yes | head -1")
STAGE = os.geteuid() == 0 and Cgroup.version() is not None and shutil.which("bwrap") is not None


@pytest.fixture(params=["c", "ctypes"])
def backend(request, monkeypatch):  # type: ignore[no-untyped-def]
    if request.param == "c" and C is None:
        pytest.skip("rtax_tui/hosts/_spawnc.c is not built")
    monkeypatch.setattr(spawn, "_c", C if request.param == "c" else None)
    return request.param


@pytest.fixture
def rtax_in_the_background() -> Iterator[None]:
    """rtax as `nohup rtax run ... &` from a script leaves it: SIGINT, SIGQUIT and SIGHUP
    ignored; and SIGUSR1 blocked in the thread that spawns; Python's SIGPIPE ignored."""
    sigs = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
    old = {s: signal.getsignal(s) for s in sigs}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    for s in sigs:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def fields(out: bytes) -> dict[str, int]:
    got = {}
    for line in out.decode().splitlines():
        k, _, v = line.partition(":")
        if k in ("SigBlk", "SigIgn"):
            got[k] = int(v, 16)
    return got


CLEAN = {"SigBlk": 0, "SigIgn": 0}


async def _via(path: str, argv: tuple[str, ...]) -> tuple[int, bytes]:
    host = LocalHost()
    if path == "exec":
        r = await host.run(argv, merge_stderr=True, capped=True, env=ENV, timeout=20)
        return r.returncode, r.stdout
    if path == "exec-cgroup-hook":  # Popen with a pre-exec hook (a capacity budget)
        fd, procs = tempfile.mkstemp()
        os.close(fd)
        try:
            r = await host.run(
                argv, merge_stderr=True, capped=True, env=ENV, timeout=20, cgroup_procs=[procs]
            )
        finally:
            os.unlink(procs)
        return r.returncode, r.stdout
    assert path == "host-spawn"  # Popen without a hook: a shell channel, a sandbox's init
    proc = await host.spawn(argv, env=ENV)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        host.release(proc)
    assert proc.returncode is not None
    return proc.returncode, out


PATHS = ["exec", "exec-cgroup-hook", "host-spawn"]


@pytest.mark.parametrize("path", PATHS)
def test_a_step_starts_with_default_signals_and_an_empty_mask(
    backend: str, path: str, rtax_in_the_background: None
) -> None:
    """Through posix_spawn (C and ctypes) a step inherited Python's ignored SIGPIPE and
    SIGXFSZ, glibc's 32 and 33, and whatever rtax ignored or its thread blocked; through
    Popen, all but SIGPIPE and SIGXFSZ."""
    rc, out = asyncio.run(_via(path, STATUS))
    assert rc == 0 and fields(out) == CLEAN, out


@pytest.mark.parametrize("path", PATHS)
def test_a_pipeline_ends_by_sigpipe_as_in_a_shell(backend: str, path: str) -> None:
    rc, out = asyncio.run(_via(path, YES))
    assert (rc, out) == (0, b"y\n")  # not "yes: standard output: Broken pipe"


def _local_env(channel: str):  # type: ignore[no-untyped-def]
    from rtax_tui.drivers.local import LocalDriver

    cell = Cell("local", "local", "w", channel)
    spec = EnvSpec(cell, Workload("w", ()), Limits(), label="testhostilespawn")
    return LocalDriver(LocalHost(), {}).environment(spec)


def _stage_env(channel: str):  # type: ignore[no-untyped-def]
    from rtax_tui.drivers import get_driver

    spec = EnvSpec(
        cell=Cell("local", "stage", "t", channel),
        workload=Workload("t", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=256),
        label=STAGE_LABEL,
    )
    return get_driver("stage", LocalHost(), {}).environment(spec)


STAGE_LABEL = f"pyspawn{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(scope="module", autouse=True)
def _stage_cleanup() -> Iterator[None]:
    yield
    if STAGE:
        from rtax_tui.drivers.stage import StageDriver

        asyncio.run(StageDriver(LocalHost(), {}).cleanup(STAGE_LABEL))


@pytest.mark.parametrize(
    "driver",
    [
        "local",
        pytest.param("stage", marks=pytest.mark.skipif(not STAGE, reason="stage: root, bwrap")),
    ],
)
@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_the_drivers_steps_start_clean(
    backend: str, driver: str, channel: str, rtax_in_the_background: None
) -> None:
    """The drivers whose exec goes through this spawn (local; stage through rtax-enter),
    and their shell channels (Popen): a step sees no signal ignored (a shell may reset
    its mask itself, so the mask is asked of `grep` run directly in the exec channel)."""

    async def go() -> list[tuple[int, bytes]]:
        env = _local_env(channel) if driver == "local" else _stage_env(channel)
        await env.create()
        try:
            await env.ready()
            got = []
            for argv in (STATUS, YES):
                r = await env.action(Step(argv), 20)
                got.append((r.rc, r.output))
            return got
        finally:
            await env.teardown()

    (rc, out), yes = asyncio.run(go())
    want = CLEAN if channel == "exec" else {"SigIgn": 0}
    got = fields(out)
    assert rc == 0 and {k: got[k] for k in want} == want, out
    assert yes == (0, b"y\n")


@pytest.mark.parametrize(
    "argv, env",
    [
        (("echo", "a\0b"), ENV),  # ctypes ran `echo a`
        (("true",), {**ENV, "A\0": "b"}),  # ctypes gave the child a bare "A"
        (("true",), {**ENV, "A": "b\0c"}),
        (("true",), {**ENV, "A=B": "c"}),  # both gave the child A="B=c"
    ],
    ids=["nul-argv", "nul-env-name", "nul-env-value", "eq-env-name"],
)
def test_what_a_child_cannot_be_given_is_refused_not_cut(
    backend: str, argv: tuple[str, ...], env: dict[str, str]
) -> None:
    """A NUL in an argument or the environment, a "=" in a name: refused before any child
    (ValueError, as Popen; the engine makes it the trial's error), never passed cut short
    or read as another variable."""
    started: list[int] = []
    real = spawn.subreaper.spawned

    def spy(pid: int | None, counted: bool) -> None:
        if pid is not None:
            started.append(pid)
        real(pid, counted)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spawn.subreaper, "spawned", spy)
        with pytest.raises(ValueError):
            asyncio.run(LocalHost().run(argv, merge_stderr=True, capped=True, env=env))
    assert started == []


_COUNT_FDS = """
import asyncio, os, sys
from rtax_tui.hosts import spawn
from rtax_tui.hosts.local import LocalHost
if sys.argv[1] == "ctypes":
    spawn._c = None
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
async def go():
    host = LocalHost()
    await host.run(["true"], merge_stderr=True, env=ENV)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(1000):
        await host.run(["true"], merge_stderr=True, env=ENV)
    return before, len(os.listdir("/proc/self/fd"))
print(*asyncio.run(go()))
"""


def test_many_steps_leave_no_descriptor_behind(backend: str) -> None:
    """In a process of its own: another test's thread in the same pytest worker (an
    xdist worker runs many) opens and closes descriptors while this one counts."""
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_FDS, backend], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert after == before


@pytest.mark.parametrize(
    "script, rc",
    [
        ("exit 255", 255),
        ("exit 256", 0),  # the shell's own truncation, as from any shell
        ("kill -9 $$", -9),
        ("kill -SEGV $$", -11),
        ("sleep 0.3 & exit 3", 3),  # a child holds the pipe: the status is still the step's
        ("exec >&- 2>&-; sleep 0.2; exit 4", 4),  # no pipe to wait on: the pidfd is
    ],
)
def test_the_status_reported_is_the_steps_own(backend: str, script: str, rc: int) -> None:
    r = asyncio.run(LocalHost().run(["sh", "-c", script], merge_stderr=True, env=ENV))
    assert r.returncode == rc


def test_a_step_that_stops_itself_is_killed_at_its_timeout(backend: str) -> None:
    """SIGSTOP is no exit (no WUNTRACED, and a stopped child's pidfd is not readable): the
    step runs into its timeout and its group is killed, stopped or not."""

    async def go() -> None:
        with pytest.raises(TimeoutError):
            await LocalHost().run(
                ["sh", "-c", "kill -STOP $$; exit 7"], merge_stderr=True, env=ENV, timeout=0.5
            )

    asyncio.run(go())


def test_a_helper_built_from_an_older_source_is_not_used() -> None:
    """An editable install's .so stays in the tree across a pull: one without this
    source's VERSION (the signals reset) must leave rtax on ctypes, not spawn with it."""
    import types

    if C is None:
        pytest.skip("rtax_tui/hosts/_spawnc.c is not built")
    assert spawn._usable(C) is C
    stale = types.ModuleType("rtax_tui.hosts._spawnc")
    stale.spawn = C.spawn  # type: ignore[attr-defined]
    stale.reap = C.reap  # type: ignore[attr-defined]
    assert spawn._usable(stale) is None
    stale.VERSION = spawn._C_VERSION - 1  # type: ignore[attr-defined]
    assert spawn._usable(stale) is None
