"""Scheduling: trials in the plan's order, under the run's and each host's concurrency.

The plan's order is kept except where a host has no room: then the next planned
trial of another host goes first, so that a full (or hanging) host never holds the
other hosts' trials back. A lost host gets one trial at a time, which waits for
its reconnect (see `health.HostHealth`).

Locality (warm pools, `engine.pool`): with `prefer` set, a pending trial whose host has a
ready environment for its cell goes before the plan's next trial when that one would
have to wait for its pool (looked for among the next `LOCALITY_WINDOW` trials, so the
plan's interleaving is only locally disturbed).

Arrival patterns (`model.arrivals`): an episode of the plan waits for the trials in
flight, then starts its arrivals at their instants, open loop, outside the concurrency
limits above.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rtax_tui.engine.control import RunControl
from rtax_tui.engine.health import HostHealth
from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.model.arrivals import IN_FLIGHT_MAX
from rtax_tui.model.spec import Cell

LOCALITY_WINDOW = 64

# Runs one trial: (the planned trial, time.monotonic_ns() when it was scheduled).
Launch = Callable[[PlannedTrial, int], Coroutine[Any, Any, None]]


class Scheduler:
    """Starts planned trials as room allows; `room` is per host and for the whole run."""

    def __init__(
        self,
        host_concurrency: dict[str, int | None],
        concurrency: int,
        control: RunControl,
        host_health: HostHealth,
    ) -> None:
        self._host_sems = {h: asyncio.Semaphore(n) for h, n in host_concurrency.items() if n}
        self._concurrency = concurrency
        self._control = control
        self._host_health = host_health
        self.in_flight: dict[str, int] = {}  # trials in flight per host
        self.prefer: Callable[[Cell], bool] | None = None  # a ready pool for this cell
        # no trial starts at or past this time.monotonic_ns() (a precision run's max_time)
        self.until_ns: int | None = None

    async def run(self, plan: Sequence[PlannedTrial], launch: Launch) -> None:
        """Start every planned trial (until stopped), then wait for all of them. The
        plan's episodes (model.arrivals) each run alone, after what is in flight."""
        for seg in _segments(plan):
            if self._control.stopping:
                break
            if seg[0].episode is None:
                await self._closed_loop(seg, launch)
            else:
                await self._control.drain()  # an episode runs alone
                await self._episode(seg, launch)
        await self._control.drain()

    async def _episode(self, trials: Sequence[PlannedTrial], launch: Launch) -> None:
        """An episode's arrivals, each started at its instant (open loop: none waits for
        another to end), at most `IN_FLIGHT_MAX` in flight; its scheduled time is the
        instant it was due, however late it started."""
        ctl = self._control
        await ctl.gate.wait()
        room = asyncio.Semaphore(IN_FLIGHT_MAX)
        start = time.monotonic_ns()
        for pt in trials:
            due = start + pt.offset_ns
            # the loop may wake a timer up to its clock's resolution early: sleep again
            while (wait := due - time.monotonic_ns()) > 0:
                await asyncio.sleep(wait / 1e9)
            await ctl.gate.wait()
            if ctl.stopping:
                break
            await room.acquire()
            if ctl.stopping:
                break
            self._launch(pt, due, launch, room.release)
        await ctl.drain()

    def _launch(
        self, pt: PlannedTrial, scheduled_ns: int, launch: Launch, done: Callable[[], None]
    ) -> None:
        """One trial's task, counted in flight on its host until it ends."""
        task = asyncio.create_task(launch(pt, scheduled_ns))
        self._control.track(task)
        h = pt.cell.host
        self.in_flight[h] = self.in_flight.get(h, 0) + 1

        def ended(_t: asyncio.Task[Any]) -> None:
            self.in_flight[h] -= 1
            done()

        task.add_done_callback(ended)

    async def _closed_loop(self, plan: Sequence[PlannedTrial], launch: Launch) -> None:
        """Trials in the plan's order, under the run's and each host's concurrency."""
        ctl = self._control
        sem = asyncio.Semaphore(self._concurrency)
        pending = deque(plan)
        room = asyncio.Event()  # set whenever a trial ends (a host may have room again)
        while pending:
            await ctl.gate.wait()
            if ctl.stopping or self._past_until():
                break
            await sem.acquire()
            if ctl.stopping or self._past_until():
                sem.release()
                break
            i = self.next_with_room(pending)
            while i is None and not ctl.stopping:
                room.clear()
                await room.wait()
                i = self.next_with_room(pending)
            if i is None:
                sem.release()
                break
            if i == 0:  # the usual case: the plan's order, in O(1)
                pt = pending.popleft()
            else:
                pt = pending[i]
                del pending[i]
            host_sem = self._host_sems.get(pt.cell.host)
            if host_sem is not None:
                await host_sem.acquire()  # has room: returns at once

            def done(hs: asyncio.Semaphore | None = host_sem) -> None:
                sem.release()
                if hs is not None:
                    hs.release()
                room.set()

            self._launch(pt, time.monotonic_ns(), launch, done)

    def _past_until(self) -> bool:
        return self.until_ns is not None and time.monotonic_ns() >= self.until_ns

    def next_with_room(self, pending: deque[PlannedTrial]) -> int | None:
        """Index of the first pending trial whose host can take it now (a trial with a
        ready pooled environment first, see the module's docstring)."""
        first = self._first_with_room(pending)
        prefer = self.prefer
        if first is None or prefer is None:
            return first
        pt = pending[first]
        if pt.cell.mode != "pool" or prefer(pt.cell):
            return first
        for i in range(first + 1, min(len(pending), first + LOCALITY_WINDOW)):
            cand = pending[i]
            if cand.cell.mode == "pool" and prefer(cand.cell) and self._has_room(cand):
                return i
        return first

    def _has_room(self, pt: PlannedTrial) -> bool:
        h = pt.cell.host
        if self._host_health.is_lost(h) and self.in_flight.get(h, 0):
            return False  # a lost host: one trial at a time waits for its reconnect
        hs = self._host_sems.get(h)
        return hs is None or not hs.locked()

    def _first_with_room(self, pending: deque[PlannedTrial]) -> int | None:
        if not self._host_sems and not self._host_health.any_lost:
            return 0 if pending else None
        for i, pt in enumerate(pending):
            if self._has_room(pt):
                return i
        return None


def _segments(plan: Sequence[PlannedTrial]) -> list[Sequence[PlannedTrial]]:
    """The plan cut where an episode begins or ends: runs of trials without one, and
    each episode's trials (contiguous in the plan)."""
    out: list[Sequence[PlannedTrial]] = []
    i = 0
    n = len(plan)
    while i < n:
        e = plan[i].episode
        j = i + 1
        while j < n and plan[j].episode == e:
            j += 1
        out.append(plan[i:j])
        i = j
    return out
