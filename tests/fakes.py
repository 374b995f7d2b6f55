"""A deterministic driver double for engine tests (never a feature: see drivers/ for real ones)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer

from rtax_tui.hosts import LocalHost
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, Step


async def pause(seconds: float) -> None:
    """`asyncio.sleep`, but at least `seconds` on the monotonic clock the engine times with:
    uvloop's timers run on libuv's millisecond clock, read once per loop iteration, and
    may fire up to a millisecond early."""
    end = time.monotonic() + seconds
    await asyncio.sleep(seconds)
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(left)


class FakeEnvironment(Environment):
    def __init__(self, driver: FakeDriver, spec: EnvSpec, sub: SubTimer | None) -> None:
        super().__init__(driver, spec, sub)
        self.fd = driver
        self.n = -1

    async def create(self) -> None:
        self.n = self.fd.created_count
        self.fd.created_count += 1
        self.fd.live += 1
        async with self.sub("thing"):
            await pause(self.fd.delays.get("create", 0))
        if self.fd.fail.get("create"):
            raise PhaseFailure(ErrorKind.SANDBOX_FAILED, "create failed on purpose")

    async def ready(self) -> None:
        if self.n in self.fd.hang_ready_for:
            await asyncio.sleep(3600)
        await pause(self.fd.delays.get("ready", 0))

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        await pause(self.fd.delays.get("action", 0))
        if step.argv[0] == "hang":
            await asyncio.sleep(3600)
        if step.argv[0] == "echo":
            return ActionResult(0, (" ".join(step.argv[1:]) + "\n").encode())
        if step.argv[0] == "false":
            return ActionResult(1, b"")
        return ActionResult(0, b"")

    async def teardown(self) -> None:
        await pause(self.fd.delays.get("teardown", 0))
        self.fd.live -= 1
        self.fd.torn_down += 1


class FakeDriver(Driver):
    name = "fake"

    def __init__(self, host: Any = None, options: dict[str, Any] | None = None) -> None:
        super().__init__(host if host is not None else LocalHost(), options or {})
        self.delays: dict[str, float] = {}
        self.fail: dict[str, bool] = {}
        self.hang_ready_for: set[int] = set()
        self.created_count = 0
        self.live = 0
        self.torn_down = 0

    async def check(self) -> list[Problem]:
        return []

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return FakeEnvironment(self, spec, sub)
