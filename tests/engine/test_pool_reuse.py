"""The probe's `pool_reuse_clean` on real stage sandboxes: a working clean reset holds,
a deliberately broken one (a test double over stage that skips parts of the reset) is
caught, with the places the next trial found the last one's state."""

from __future__ import annotations

import asyncio
import os

import pytest
from rtax_tui.drivers.stage import StageDriver, StageEnvironment

from rtax_tui.engine.probe.reuse import check_reuse
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import EnvSpec, Limits

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="stage needs root and cgroups")
LIMITS = Limits(cpus=1, memory_mib=256, pids=128)


class FilesOnlyReset(StageEnvironment):
    """Broken on purpose: empties the workspace, leaves /tmp and the processes."""

    async def reset_clean(self) -> None:
        from rtax_tui.model.spec import Step

        # /workspace is the sandbox's own tmpfs: emptied from inside, as its uid
        script = "find /workspace -mindepth 1 -maxdepth 1 -exec rm -rf {} +"
        res = await self.action(Step(("sh", "-c", script)), 30)
        assert res.rc == 0, res


class BrokenStage(StageDriver):
    def environment(self, spec: EnvSpec, sub=None):  # type: ignore[no-untyped-def]
        return FilesOnlyReset(self, spec, sub)


def test_stage_clean_reset_holds_on_exec() -> None:
    got = asyncio.run(check_reuse(StageDriver(LocalHost(), {}), "local", "exec", "clean", LIMITS))
    assert got.result == "held", got


def test_a_broken_reset_is_caught_as_a_dirty_reuse() -> None:
    got = asyncio.run(check_reuse(BrokenStage(LocalHost(), {}), "local", "exec", "clean", LIMITS))
    assert got.result == "breached", got
    assert "file:/tmp" in got.evidence and "process:" in got.evidence
    assert "file:/workspace" not in got.evidence


def test_stage_clean_reset_holds_on_the_shell_channel() -> None:
    """A clean reset replaces the sandbox, its shell included: the exported variable and
    the working directory the planting trial left in the shell are gone."""
    drv = StageDriver(LocalHost(), {})
    assert drv.pool_resets("shell")["clean"] is None
    got = asyncio.run(check_reuse(drv, "local", "shell", "clean", LIMITS))
    assert got.result == "held", got


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_containers_offer_no_clean_reset_and_say_why(engine: str) -> None:
    """docker and podman cannot replace a container's bound /workspace (nor a writable
    root) without a new container: no clean reset, read_only or not; the pool falls back
    to recreate and the probe's check is n/a with the reason (issue 34)."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.engine.pool import effective_reset

    for opts in ({}, {"read_only": True}):
        drv = get_driver(engine, LocalHost(), opts)
        for channel in ("exec", "shell"):
            why = drv.pool_resets(channel)["clean"] or ""
            assert "replace" in why or "shell" in why, why
            got, fallback = effective_reset(drv, channel, "clean")
            assert got == "recreate" and fallback and "clean" in fallback
    drv = get_driver(engine, LocalHost(), {"read_only": True})
    got = asyncio.run(check_reuse(drv, "local", "exec", "clean", LIMITS))
    assert got.result == "n/a" and "replace" in got.evidence, got


def test_microvm_snapshot_reset_holds(request: pytest.FixtureRequest) -> None:
    """microvm with start = restore: a pooled guest is reset by loading the snapshot."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.model.spec import Step, Workload

    request.getfixturevalue("vm_guest")
    drv = get_driver("microvm", LocalHost(), {"start": "restore"})
    assert drv.pool_resets("exec")["snapshot"] is None
    assert get_driver("microvm", LocalHost(), {}).pool_resets("exec")["snapshot"] is not None

    async def run() -> object:
        probs = await drv.check()
        assert probs == [], probs
        probs = await drv.check_workloads([Workload("x", (Step(("true",)),))])
        assert probs == [], probs
        try:
            # the snapshot's own size: a restore needs the memory it was saved with
            return await check_reuse(drv, "local", "exec", "snapshot", Limits())
        finally:
            drv.forget_snapshot()  # type: ignore[attr-defined]

    got = asyncio.run(run())
    assert got.result == "held", got  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["stage", "docker", "podman"])
def test_an_environments_memory_is_what_its_cgroup_is_charged(
    name: str, request: pytest.FixtureRequest
) -> None:
    """`memory_bytes` (what a warm pool holds, engine.pool) reads the environment's own
    memory cgroup: 16 MiB written into its workspace (a tmpfs charged to it) shows."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.model.spec import Cell, Step, Workload

    if name != "stage":
        request.getfixturevalue(f"{name}_engine")  # conftest: the daemon and the images
    drv = get_driver(name, LocalHost(), {})
    spec = EnvSpec(
        cell=Cell("local", name, "w", "exec"),
        workload=Workload("w", (Step(("true",)),)),
        limits=LIMITS,
    )
    env = drv.environment(spec)

    async def go() -> tuple[int | None, int | None]:
        try:
            await env.create()
            await env.ready()
            before = env.memory_bytes()
            res = await env.action(
                Step(("sh", "-c", "dd if=/dev/zero of=big bs=1M count=16 2>/dev/null; sync")),
                60,
            )
            assert res.rc == 0, res
            return before, env.memory_bytes()
        finally:
            await env.teardown()

    before, after = asyncio.run(go())
    assert before is not None and before > 0
    assert after is not None and after - before >= 15 << 20
