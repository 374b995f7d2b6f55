"""The probe's `result_integrity` check: earlier steps attack the channel (functions and
aliases over the framing's tools, the shell's memory, a background process printing
frames) and later steps whose real status is known must be recorded as it is.

Stage holds on both channels; a shell framed the way rtax framed it before (a plain
`printf` after the command, one sentinel per shell) is caught as breached."""

from __future__ import annotations

import asyncio
import os
import shlex
from typing import Any

import pytest
from rtax_tui.drivers.stage import StageDriver, StageEnvironment

from rtax_tui.engine.probe import host as probe_host
from rtax_tui.engine.probe.classify import Context, Outcome, classify
from rtax_tui.engine.probe.run import CellProbe, integrity_of
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.checks import BLOCKED, BREACHED, INTEGRITY_CHECK, NA
from rtax_tui.model.spec import EnvSpec

ROOT = os.geteuid() == 0


def integrity(driver: Any, channel: str) -> Any:
    async def run() -> Any:
        host = LocalHost()
        plant = await probe_host.plant(host)
        try:
            got: dict[str, Any] = {}
            cell = CellProbe(driver, "local", channel, plant)
            await cell._run_integrity(lambda name, v: got.__setitem__(name, v))
            return got[INTEGRITY_CHECK]
        finally:
            await probe_host.cleanup(plant)

    return asyncio.run(run())


@pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")
@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_stage_keeps_every_later_status_real(channel: str) -> None:
    v = integrity(StageDriver(LocalHost(), {}), channel)
    assert v.result == BLOCKED, v
    assert integrity_of(StageDriver(LocalHost(), {}), channel) is None


def old_frame(argv: Any, sentinel: str) -> bytes:
    """rtax's frame before issue 19: a plain printf after the command."""
    cmd = shlex.join(argv)
    return f"{{ {cmd}\n}} </dev/null 2>&1; printf '\\n%s %d\\n' {sentinel} \"$?\"\n".encode()


class OldFrameStage(StageEnvironment):
    """Broken on purpose: the shell framed as before, on a plain pipe."""

    async def create(self) -> None:
        await super().create()
        assert self.shell is not None
        self.shell._frame = old_frame
        self.shell._verify = None


class OldFrameDriver(StageDriver):
    def environment(self, spec: EnvSpec, sub: Any = None) -> StageEnvironment:
        return OldFrameStage(self, spec, sub)


@pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")
def test_the_old_frame_is_caught_forging_a_later_status() -> None:
    # the old frame's shell can die under the attack before it forges (seen once in a
    # loaded run: "stopped answering", blocked); that is the broken double's race, not the
    # check's answer, so the probe is tried again, at most three times
    for _ in range(3):
        v = integrity(OldFrameDriver(LocalHost(), {}), "shell")
        if not (v.result == BLOCKED and "stopped answering" in v.evidence):
            break
    assert v.result == BREACHED, v
    assert "recorded as a success" in v.evidence
    assert "sh -c false` exited 1, recorded 0" in v.evidence


@pytest.mark.skipif(not ROOT, reason="the local driver's process runs as root here")
def test_the_local_driver_is_breached_and_says_it_states_nothing() -> None:
    from rtax_tui.drivers import get_driver

    drv = get_driver("local", LocalHost(), {})
    assert integrity_of(drv, "exec") is not None
    assert integrity(drv, "exec").result == BREACHED


def test_classifier() -> None:
    def v(output: str, truth: list[Any]) -> Any:
        return classify(INTEGRITY_CHECK, Outcome(output=output, observed={"truth": truth}), CTX)

    assert classify(INTEGRITY_CHECK, Outcome(), CTX).result == NA
    assert v("", [("false", 1, 1), ("sh -c exit 3", 3, 3)]).result == BLOCKED
    assert v("", [("false", 1, 0)]).result == BREACHED
    assert v("@memwritable=1\n", [("false", 1, 1)]).result == BREACHED
    got = v("", [("false", 1, "shell_lost: gone")])
    assert got.result == BLOCKED and "stopped answering" in got.evidence


CTX = Context()
