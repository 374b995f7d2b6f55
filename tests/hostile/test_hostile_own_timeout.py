"""The engine's cheaper action path (model/waits.own_timeout) attacked: an exec or shell
action runs under the phase's timeout only, its own left out where the phase's
`asyncio.timeout` "cancels the same task no later". That holds while the phase's timeout
has not fired. Once it has, it cancels nothing more: a call the same task makes after
it (a driver's cleanup that caught the cancellation and runs a step, or a stop caught
half-way) had no bound at all, and a hostile step that hangs there hung the phase.

Each test runs a real environment of the local, stage and gvisor drivers (the ones
whose actions take `own_timeout`: LocalHost.run's exec path and the framed shell): the phase's first
step hangs into the phase's timeout, the phase catches the cancellation and runs a
second hanging step with a timeout of its own (1 s), which must end it.

See docs/boundaries.md, "The engine's cheaper action path (red team, 2026-12-07)"."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from rtax_tui.engine.lifecycle import timed
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.errors import ErrorKind, timeout_kind
from rtax_tui.model.spec import Cell, EnvSpec, Limits, PhaseFailure, Step, Workload

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
STAGE = ROOT and shutil.which("bwrap") is not None
GVISOR = ROOT and shutil.which("runsc") is not None
LABEL = f"owntimeout{os.getpid()}{os.urandom(2).hex()}"
HANG_S = 12  # the second step's sleep: what the phase took when its own timeout was left out


def _nested_timeout_raises_timeout() -> bool:
    """Whether this Python's `asyncio.timeout`, entered in a task already being cancelled,
    ends in TimeoutError when it fires. Python 3.11.7 does (it counts the cancellations
    made before it, gh-102780); Debian 12's 3.11.2 re-raises the cancellation instead, so
    there the call's own timeout still ends it, but as the phase's cut."""

    async def main() -> bool:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(1)
            except TimeoutError:
                return True
            except asyncio.CancelledError:
                return False
        return False

    return asyncio.run(main())


NESTED_TIMEOUT_RAISES_TIMEOUT = _nested_timeout_raises_timeout()


def _env(driver: str, channel: str) -> Any:
    from rtax_tui.drivers import get_driver

    spec = EnvSpec(
        cell=Cell("local", driver, "w", channel),
        workload=Workload("w", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=256) if driver != "local" else Limits(),
        label=LABEL,
    )
    return get_driver(driver, LocalHost(), {}).environment(spec)


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    from rtax_tui.drivers import get_driver

    for name in ["stage"] * STAGE + ["gvisor"] * GVISOR:
        asyncio.run(get_driver(name, LocalHost(), {}).cleanup(LABEL))


DRIVERS = [
    "local",
    pytest.param("stage", marks=pytest.mark.skipif(not STAGE, reason="needs root, cgroups, bwrap")),
    pytest.param(
        "gvisor", marks=pytest.mark.skipif(not GVISOR, reason="needs root, cgroups, runsc")
    ),
]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_a_call_after_the_phase_timed_out_keeps_its_own_timeout(driver: str, channel: str) -> None:
    env = _env(driver, channel)
    marker = f"{HANG_S}.{os.getpid()}"  # the hanging step's own argv, found by pgrep after

    async def phase() -> str:
        try:
            await env.action(Step(("sleep", "30")), 0.5)
        except asyncio.CancelledError:  # the phase's timeout: the driver "cleans up"
            try:
                await env.action(Step(("sleep", marker)), 1.0)
            except TimeoutError:
                return "own timeout"
            except PhaseFailure as exc:  # the shell channel: stale after the cut
                assert exc.kind == ErrorKind.SHELL_LOST
                return "stale"
            return "finished"
        return "not cut"

    async def main() -> tuple[int, Any, Any]:
        await env.create()
        await env.ready()
        try:
            return await timed("action", phase, 0.5)
        finally:
            await env.teardown()

    dur, got, err = asyncio.run(main())
    if channel == "shell" or NESTED_TIMEOUT_RAISES_TIMEOUT:
        assert err is None, err
        assert got == ("stale" if channel == "shell" else "own timeout"), got
    else:  # the call's own timeout ended it, surfacing as the phase's cut (see above)
        assert err is not None and err.kind == timeout_kind("action"), (got, err)
    # the phase alone (its create and teardown are not in it): 1.5 s, or HANG_S unbounded
    assert dur < (HANG_S - 4) * 1e9, f"the phase took {dur / 1e9:.1f} s: the call had no timeout"
