"""Capacity batches: N environments of one cell at once, released together by a barrier.

A batch's environments run under one budget cgroup (the profile's `capacity.cpus`
and `capacity.memory_mib`) when it sets one, so that the batch measures how many
environments fit in that budget. The barrier releases when every environment has
arrived (done its steps) or failed, or at the batch's deadline, which interrupts
those still on their way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from rtax_tui.core import events, reaper
from rtax_tui.core.cgroups import Cgroup
from rtax_tui.core.control import Progress, RunControl
from rtax_tui.core.events import Emitter
from rtax_tui.core.model import Cell
from rtax_tui.core.plan import PlannedBatch, PlannedTrial, build_capacity_plan
from rtax_tui.core.profile import Capacity


class Barrier:
    """Releases when every environment has arrived or failed, or at the deadline."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.arrived = 0
        self.failed = 0
        self.released = asyncio.Event()
        self.how: str | None = None
        self.expired = False
        self.settled: set[int] = set()  # trials that arrived or failed

    def arrive(self, trial: int) -> None:
        self.arrived += 1
        self.settled.add(trial)
        self._check()

    def fail(self, trial: int) -> None:
        self.failed += 1
        self.settled.add(trial)
        self._check()

    def _check(self) -> None:
        if self.how is None and self.arrived + self.failed >= self.size:
            self.how = "all_arrived" if self.arrived == self.size else "settled"
            self.released.set()

    def expire(self) -> None:
        if self.how is None:
            self.how = "deadline"
            self.expired = True
            self.released.set()


class LaunchInBatch(Protocol):
    """Runs one trial of a batch (`lifecycle.TrialRunner.run`)."""

    def __call__(
        self, pt: PlannedTrial, scheduled_ns: int, barrier: Barrier, cgroup_parent: str | None
    ) -> Coroutine[Any, Any, None]: ...


class CapacityRun:
    """The batches of a capacity profile, one after the other."""

    def __init__(
        self,
        capacity: Capacity,
        *,
        run_id: str,
        emit: Emitter,
        control: RunControl,
        progress: Progress,
        launch: LaunchInBatch,
    ) -> None:
        self.capacity = capacity
        self.run_id = run_id
        self.emit = emit
        self.control = control
        self.progress = progress
        self.launch = launch

    async def run(self, cells: list[Cell], warmup: int, seed: int) -> None:
        cap = self.capacity
        plan = build_capacity_plan(cells, cap.batches, cap.size, warmup, seed)
        self.progress.planned = sum(len(b.trials) for b in plan)
        for batch in plan:
            await self.control.gate.wait()
            if self.control.stopping:
                break
            budget = None
            if cap.cpus or cap.memory_mib:
                budget = Cgroup.create(
                    f"batch-{self.run_id}-{batch.id}",
                    cpus=cap.cpus,
                    memory_mib=cap.memory_mib,
                    swap_mib=cap.swap_mib,
                    pids=None,
                )
                reaper.current().add_cgroup(budget.relpath)
            try:
                await self.run_batch(batch, cap.deadline_s, budget.relpath if budget else None)
            finally:
                if budget is not None:
                    await asyncio.to_thread(budget.remove)
                    reaper.current().drop_cgroup(budget.relpath)

    async def run_batch(self, batch: PlannedBatch, deadline_s: float, cg: str | None) -> None:
        """Start every environment of the batch at once; emit `barrier` when it releases."""
        barrier = Barrier(len(batch.trials))
        start = time.monotonic_ns()
        tasks = []
        for pt in batch.trials:
            task = asyncio.create_task(self.launch(pt, start, barrier, cg))
            self.control.track(task)
            tasks.append(task)
        try:
            await asyncio.wait_for(asyncio.shield(barrier.released.wait()), deadline_s)
        except TimeoutError:
            barrier.expire()
            for pt in batch.trials:
                if pt.id not in barrier.settled:
                    self.control.interrupt(pt.id)
        except asyncio.CancelledError:
            pass
        if barrier.how is None:  # stopped before release
            barrier.expire()
        self.emit(
            events.barrier(
                batch=batch.id,
                cell=batch.cell.id,
                size=barrier.size,
                arrived=barrier.arrived,
                released=barrier.how,
                deadline_s=deadline_s,
                warmup=batch.warmup,
                release_ns=time.monotonic_ns() - start,
            )
        )
        await asyncio.gather(*tasks, return_exceptions=True)
