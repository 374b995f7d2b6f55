"""Capacity batches: N environments of one cell at once, released together by a barrier.

A batch's environments run under one budget cgroup (the profile's `capacity.cpus`
and `capacity.memory_mib`) when it sets one, so that the batch measures how many
environments fit in that budget. The barrier releases when every environment has
arrived (done its steps) or failed, or at the batch's deadline, which interrupts
those still on their way. Environments keep what their workload holds (the capacity
workload's touched memory) while they wait; the release reaches each through its
channel (the workload's `release` step), and the batch is timed until the last one
has let go. What the budget saw (peak memory, OOM kills, CPU time) goes into the
batch's `barrier` event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.plan import (
    PlannedBatch,
    PlannedTrial,
    build_capacity_plan,
    build_spanning_plan,
)
from rtax_tui.engine.profile import Capacity
from rtax_tui.hosts import names, reaper
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import events
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Cell


class Barrier:
    """Releases when every environment has arrived or failed, or at the deadline; then
    follows the arrived ones until each has let go of what it held.

    `oom_kills` (when the batch has a memory budget) counts the budget's OOM kills so
    far, so that a trial can tell an OOM kill from another failure. `slots` bounds the
    release steps in flight (`release_concurrency`): each starts processes in its
    environment while every environment still holds its memory, so the bound caps
    what a batch of hundreds starts at once in its budget. Below the bound the steps
    all go out at once: their start-up latency is hidden by running them together.
    """

    def __init__(
        self,
        size: int,
        oom_kills: Callable[[], int] | None = None,
        release_concurrency: int | None = None,
    ) -> None:
        self.size = size
        self.slots = asyncio.Semaphore(release_concurrency or size)
        self.arrived = 0
        self.failed = 0
        self.released = asyncio.Event()
        self.how: str | None = None
        self.expired = False
        self.settled: set[int] = set()  # trials that arrived or failed
        self.oom_kills = oom_kills
        self.released_ns: int | None = None  # monotonic: the release decision
        self.holding: set[int] = set()  # arrived, not yet let go
        self.let_go_ns: int | None = None  # monotonic: the last one let go
        self.lost = 0  # arrived, but their release found nothing held any more
        self.all_let_go = asyncio.Event()
        self.arrivals: set[int] = set()  # the trials that arrived
        # those of them not counted: held nothing at the end, or (a Ray node's) arrived
        # after a deadline's release had found them on their way (engine.raynodes)
        self.lost_trials: set[int] = set()
        self.let_go_at: dict[int, int] = {}  # monotonic: when each arrived one let go

    def arrive(self, trial: int) -> None:
        self.arrived += 1
        self.settled.add(trial)
        self.holding.add(trial)
        self.arrivals.add(trial)
        self._check()

    def let_go(self, trial: int, held: bool = True, at_ns: int | None = None) -> None:
        """The trial let go after the release (`held` False: it had lost what it held);
        `at_ns`: when, if not now (a Ray node's time, on this clock: engine.raynodes)."""
        if trial not in self.holding:
            return
        self.holding.discard(trial)
        if not held:
            self.lost += 1
            self.lost_trials.add(trial)
        at = time.monotonic_ns() if at_ns is None else at_ns
        self.let_go_at[trial] = at
        self.let_go_ns = at if self.let_go_ns is None else max(self.let_go_ns, at)
        self._check_let_go()

    def _check_let_go(self) -> None:
        if self.how is not None and not self.holding:
            self.all_let_go.set()

    @property
    def release_dur_ns(self) -> int:
        """From the release decision until the last arrived environment let go."""
        if self.released_ns is None or self.let_go_ns is None:
            return 0
        return max(0, self.let_go_ns - self.released_ns)

    def oom_seen(self) -> int:
        return self.oom_kills() if self.oom_kills is not None else 0

    def fail(self, trial: int) -> None:
        self.failed += 1
        self.settled.add(trial)
        self._check()

    def _check(self) -> None:
        if self.how is None and self.arrived + self.failed >= self.size:
            self.how = "all_arrived" if self.arrived == self.size else "settled"
            self._release()

    def expire(self) -> None:
        if self.how is None:
            self.how = "deadline"
            self.expired = True
            self._release()

    def _release(self) -> None:
        self.released_ns = time.monotonic_ns()
        self.released.set()
        self._check_let_go()


class BudgetWatch:
    """What one batch's budget cgroup saw: peak memory, OOM kills, CPU time.

    OOM kills are read per memory cgroup of the budget's tree, keeping the largest
    count seen for each (on cgroup v1 a kill is counted only in the victim's own
    cgroup, which its driver may remove at teardown); the engine reads them whenever
    a trial of the batch fails, before its teardown, and once at the end.
    """

    def __init__(self, cg: Cgroup) -> None:
        self.cg = cg
        self.kills: dict[str, int] = {}
        cg.reset_peak()
        self.cpu0 = cg.cpu_usage_ns() or 0

    def oom_kills(self) -> int:
        for path, n in self.cg.oom_kills_by_dir().items():
            if n > self.kills.get(path, 0):
                self.kills[path] = n
        return sum(self.kills.values())

    def read(self) -> dict[str, int | None]:
        cpu = self.cg.cpu_usage_ns()
        return {
            "mem_peak_bytes": self.cg.memory_peak_bytes(),
            "oom_kills": self.oom_kills(),
            "cpu_ns": None if cpu is None else max(0, cpu - self.cpu0),
        }


class LaunchInBatch(Protocol):
    """Runs one trial of a batch (`lifecycle.TrialRunner.run`)."""

    def __call__(
        self, pt: PlannedTrial, scheduled_ns: int, barrier: Barrier, cgroup_parent: str | None
    ) -> Coroutine[Any, Any, None]: ...


class BatchSpan(Protocol):
    """A batch whose environments are spread over several hosts, each running its own
    (engine.raynodes: Ray nodes). The span follows each host's part (arrivals, let-gos),
    takes the release to every host and measures when each received it."""

    def open(self, batch: PlannedBatch, barrier: Barrier) -> None: ...

    async def released(self, batch: PlannedBatch) -> dict[str, int | None]: ...

    async def close(self, batch: PlannedBatch) -> None: ...


class CapacityRun:
    """The batches of a capacity profile, one after the other. With a `span` (Ray
    nodes), a batch holds `size` environments on every host of its cells' group (the
    cells that differ only in their host) and one barrier releases them all."""

    def __init__(
        self,
        capacity: Capacity,
        *,
        run_id: str,
        emit: Emitter,
        control: RunControl,
        progress: Progress,
        launch: LaunchInBatch,
        let_go_s: float = 120.0,
        span: BatchSpan | None = None,
    ) -> None:
        self.capacity = capacity
        self.let_go_s = let_go_s  # the longest the batch waits for the release steps
        self.run_id = run_id
        self.emit = emit
        self.control = control
        self.progress = progress
        self.launch = launch
        self.span = span

    async def run(self, cells: list[Cell], warmup: int, seed: int) -> None:
        cap = self.capacity
        if self.span is None:
            plan = build_capacity_plan(cells, cap.batches, cap.curve, warmup, seed)
        else:
            plan = build_spanning_plan(cells, cap.batches, cap.curve, warmup, seed)
        self.progress.planned = sum(len(b.trials) for b in plan)
        for batch in plan:
            await self.control.gate.wait()
            if self.control.stopping:
                break
            budget = None
            if cap.cpus or cap.memory_mib:
                name = names.batch_cgroup(self.run_id, batch.id)
                rel = Cgroup.relpath_of(name)
                reaper.current().add_cgroup(rel)  # before it exists: kill -9 at any moment
                try:
                    budget = Cgroup.create(
                        name,
                        cpus=cap.cpus,
                        memory_mib=cap.memory_mib,
                        swap_mib=cap.swap_mib,
                        pids=None,
                    )
                except BaseException:
                    reaper.current().drop_cgroup(rel)  # create removed what it had made
                    raise
            try:
                await self.run_batch(batch, cap.deadline_s, budget)
            finally:
                if budget is not None:
                    await asyncio.to_thread(budget.remove)
                    reaper.current().drop_cgroup(budget.relpath)

    async def run_batch(
        self, batch: PlannedBatch, deadline_s: float, budget: Cgroup | None
    ) -> None:
        """Start every environment of the batch at once; emit `barrier` once it has
        released and the arrived environments have let go (before their teardowns)."""
        watch = BudgetWatch(budget) if budget is not None else None
        barrier = Barrier(
            len(batch.trials),
            watch.oom_kills if watch is not None else None,
            self.capacity.release_concurrency,
        )
        cg = budget.relpath if budget is not None else None
        if self.span is not None:
            self.span.open(batch, barrier)
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
        release_ns = (barrier.released_ns or time.monotonic_ns()) - start
        try:  # the release steps are actions: bounded by the action timeout
            await asyncio.wait_for(asyncio.shield(barrier.all_let_go.wait()), self.let_go_s)
        except (TimeoutError, asyncio.CancelledError):
            pass
        stats = watch.read() if watch is not None else {}
        if self.span is not None:
            await self._spanned(batch, barrier, deadline_s, release_ns)
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.span.close(batch)
            return
        self.emit(
            events.barrier(
                batch=batch.id,
                cell=batch.cell.id,
                size=barrier.size,
                # an environment that lost what it held before the release did not hold it
                arrived=barrier.arrived - barrier.lost,
                released=barrier.how,
                deadline_s=deadline_s,
                warmup=batch.warmup,
                release_ns=release_ns,
                release_dur_ns=barrier.release_dur_ns,
                mem_peak_bytes=stats.get("mem_peak_bytes"),
                oom_kills=stats.get("oom_kills"),
                cpu_ns=stats.get("cpu_ns"),
            )
        )
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _spanned(
        self, batch: PlannedBatch, barrier: Barrier, deadline_s: float, release_ns: int
    ) -> None:
        """A batch spread over hosts: one `barrier` event per cell (per host), each with
        its own part (`size`, `arrived`), the batch's one release (`released`,
        `release_ns`: the controller's decision), the whole batch's size (`span`), when its
        host received the release (`release_lag_ns`, measured there and put on this
        clock through the host's offset) and when its last environment let go
        (`release_dur_ns`, likewise)."""
        assert self.span is not None
        lags = await self.span.released(batch)
        cells: dict[Cell, list[int]] = {}
        for pt in batch.trials:
            cells.setdefault(pt.cell, []).append(pt.id)
        for cell, ids in cells.items():
            lets = [barrier.let_go_at[t] for t in ids if t in barrier.let_go_at]
            dur = 0
            if barrier.released_ns is not None and lets:
                dur = max(0, max(lets) - barrier.released_ns)
            arrived = sum(t in barrier.arrivals and t not in barrier.lost_trials for t in ids)
            self.emit(
                events.barrier(
                    batch=batch.id,
                    cell=cell.id,
                    size=len(ids),
                    arrived=arrived,
                    released=barrier.how,
                    deadline_s=deadline_s,
                    warmup=batch.warmup,
                    release_ns=release_ns,
                    release_dur_ns=dur,
                    span=barrier.size,
                    release_lag_ns=lags.get(cell.host),
                )
            )
