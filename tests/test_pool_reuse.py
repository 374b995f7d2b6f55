"""The probe's `pool_reuse_clean` on real stage sandboxes: a working clean reset holds,
a deliberately broken one (a test double over stage that skips parts of the reset) is
caught, with the places the next trial found the last one's state."""

from __future__ import annotations

import asyncio
import os

import pytest
from rtax_tui.drivers.stage import StageDriver, StageEnvironment

from rtax_tui.core.model import EnvSpec, Limits
from rtax_tui.core.probe_reuse import check_reuse
from rtax_tui.hosts.local import LocalHost

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="stage needs root and cgroups")
LIMITS = Limits(cpus=1, memory_mib=256, pids=128)


class FilesOnlyReset(StageEnvironment):
    """Broken on purpose: empties the workspace, leaves /tmp and the processes."""

    async def reset_clean(self) -> None:
        from rtax_tui.drivers.workspace import empty_dir

        assert self.workspace is not None
        await asyncio.to_thread(empty_dir, self.workspace)


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


def test_no_clean_reset_on_the_shell_channel_is_not_measured() -> None:
    got = asyncio.run(check_reuse(StageDriver(LocalHost(), {}), "local", "shell", "clean", LIMITS))
    assert got.result == "n/a" and "persistent shell" in got.evidence
