"""Issue 34, rows H5 and H6: a pooled environment's clean reset replaces what a trial can
change, and the proof is differential (engine.probe.fingerprint): on every driver that
offers a clean reset, the fingerprint of the environment as the pool made it equals the
one after a trial that changed all it could (modes of /tmp and /dev, entries, fifos,
links and device nodes there, xattrs, the IPC namespace's sysctls, IPC objects, message
queues, the init's limits, priority and oom score, processes left running) and a reset.
A reset that cleans instead of replacing (the old way, as a test double) is caught.

docker and podman no longer offer a clean reset (they cannot replace a bound /workspace
without a new container): tests/engine/test_pool_reuse.py checks that they say so and that
their pools use recreate."""

from __future__ import annotations

import asyncio
import os

import pytest
from rtax_tui.drivers.stage import StageDriver, StageEnvironment

from rtax_tui.engine.probe import fingerprint as fp
from rtax_tui.engine.probe.reuse import ReuseResult, check_reuse
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import EnvSpec, Limits, Step

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="stage needs root and cgroups")
LIMITS = Limits(cpus=1, memory_mib=256, pids=128)


def _changed(got: ReuseResult, what: str) -> bool:
    """Did the attack change a fingerprint line that starts with `what`?"""
    return any(
        d[2:].startswith(what) for d in fp.differences(list(got.fresh), list(got.attacked), 10**6)
    )


def _assert_held(got: ReuseResult) -> None:
    assert got.result == "held", got.evidence
    assert fp.complete(list(got.fresh)) and fp.complete(list(got.after))
    assert fp.differences(list(got.fresh), list(got.after)) == []


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_stage_clean_reset_gives_back_the_fresh_fingerprint(channel: str) -> None:
    got = asyncio.run(check_reuse(StageDriver(LocalHost(), {}), "local", channel, "clean", LIMITS))
    _assert_held(got)
    # the attacks took effect before the reset (H5): else equal would prove nothing
    for what in (
        "path /tmp directory drwx------",  # the mode of /tmp
        "path /dev directory dr-xr-xr-x",  # chmod 555 /dev after making entries there
        "path /dev/rtax-fifo fifo",
        "path /tmp/rtax-link symbolic link",
        "xattr /tmp user.rtax",
        "sysctl /proc/sys/kernel/msgmax 9",
        "sysctl /proc/sys/kernel/shmmni 9",
        "sysctl /proc/sys/fs/mqueue/msg_max",
        "init limits Max open files            64",  # prlimit on the init
        "init sched prio=27 nice=7",  # renice on the init
        "ipc /proc/sysvipc/msg",
        "proc . sleep",
    ):
        assert _changed(got, what), (what, fp.differences(list(got.fresh), list(got.attacked)))


class CleaningEnvironment(StageEnvironment):
    """The old reset, as a test double: the sandbox kept, its processes killed, its
    places emptied and its IPC objects removed from inside."""

    async def reset_clean(self) -> None:
        script = (
            "chmod 755 /dev; kill -9 -1 2>/dev/null; ipcrm --all 2>/dev/null; "
            "chmod -R u+rwX /tmp /workspace; "
            "rm -rf /tmp/* /tmp/.[!.]* /workspace/* /workspace/.[!.]* /dev/shm/* /dev/rtax-*; "
            "rm -rf /dev/fd; ln -s /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin; true"
        )
        res = await self.action(Step(("sh", "-c", script)), 60)
        assert res.rc == 0, res


class CleaningStage(StageDriver):
    def environment(self, spec: EnvSpec, sub=None):  # type: ignore[no-untyped-def]
        return CleaningEnvironment(self, spec, sub)


def test_a_cleaning_reset_is_caught_by_the_fingerprint() -> None:
    """The token search finds nothing after the old cleaning (files gone, processes
    killed), yet the mode of /tmp and /dev, the sysctls and the init's limits remain."""
    got = asyncio.run(check_reuse(CleaningStage(LocalHost(), {}), "local", "exec", "clean", LIMITS))
    assert got.result == "breached", got.evidence
    assert "fingerprint" in got.evidence, got.evidence
    diff = fp.differences(list(got.fresh), list(got.after), 10**6)
    assert any("Max open files" in d for d in diff), diff
    assert any(d.startswith("+ sysctl /proc/sys/kernel/msgmax") for d in diff), diff


def test_the_scripts_parse_under_dash_and_busybox() -> None:
    """Both scripts run under whatever sh the environment has (Debian's dash, busybox in
    images and VM guests): a quote or bracket that one of them reads otherwise would
    make every fingerprint incomplete (n/a), so each parses under both."""
    import shutil
    import subprocess

    shells = [["/bin/sh", "-n", "-c"]]
    bb = shutil.which("busybox")
    if bb:
        shells.append([bb, "sh", "-n", "-c"])
    for sh in shells:
        for script in (fp.FINGERPRINT, fp.ATTACK):
            res = subprocess.run([*sh, script], capture_output=True, text=True)
            assert res.returncode == 0, (sh, res.stderr)


def test_an_environments_cpu_does_not_go_back_across_a_replacing_reset() -> None:
    """The pool records `env_cpu_ns` over a reset as after - before: the replaced
    cgroup's CPU stays counted (a negative figure is a recording rtax can't read)."""
    from rtax_tui.model.spec import Cell, Workload

    spec = EnvSpec(
        cell=Cell("local", "stage", "w", "exec"),
        workload=Workload("w", (Step(("true",)),)),
        limits=LIMITS,
    )
    env = StageDriver(LocalHost(), {}).environment(spec)

    async def go() -> tuple[int | None, int | None, int | None]:
        try:
            await env.create()
            await env.ready()
            burn = Step(("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"))
            assert (await env.action(burn, 60)).rc == 0
            before = env.cpu_ns()
            await env.reset_clean()
            after = env.cpu_ns()
            assert (await env.action(burn, 60)).rc == 0
            return before, after, env.cpu_ns()
        finally:
            await env.teardown()

    before, after, later = asyncio.run(go())
    assert before is not None and after is not None and later is not None
    assert before > 0 and after >= before and later > after
