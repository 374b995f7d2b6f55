"""The engine on one Ray node: the actor that runs a run's trials there (engine.raynodes).

One `NodeEngine` is placed on each chosen node (node affinity, not soft). It makes the
run's drivers on the node's own `LocalHost` and runs each trial the controller sends
through the same `TrialRunner` as a local run, so every phase is timed on the node with
`time.monotonic_ns()`; the trial's events come back to the controller in one batch when
it ends, stamped on the run's clock (the controller gives the run's origin on this
node's clock, `t0_node`, from the measured offset). The node has its own reaper
(hosts/reaper.py): if the actor dies (its node killed, the actor killed), the reaper's
pipe closes and it ends what the node's environments left.

A capacity batch spread over the nodes (engine.capacity, `BatchSpan`) has one barrier on
each node (`NodeBarrier`): the node's environments arrive, fail and let go there, each
logged with the node's `time.monotonic_ns()` for the controller, which follows the log
(`barrier_news`, a long poll); the node's barrier never releases itself. The controller
releases the batch once every node's environments have arrived or failed, or at its
deadline (`release_batch`: the node's time of the release is its answer; at the
deadline the node interrupts those still on their way).

This module imports no Ray: the controller wraps the class with `ray.remote`, and Ray
imports this module on the node (rtax installed there, as on the controller).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from rtax_tui.drivers import Driver, get_driver
from rtax_tui.engine.capacity import Barrier
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.lifecycle import TrialRunner
from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.engine.pool import Pools, effective_reset
from rtax_tui.engine.profile import Profile
from rtax_tui.hosts import LocalHost, reaper
from rtax_tui.hosts.hostfacts import local_facts
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Cell, RtaxError, Workload

NEWS_MAX = 4096  # the most log entries one `barrier_news` answer holds
POOL_NEWS_MAX = 10_000  # the most pool events one `pool_news` answer holds


class NodeBarrier(Barrier):
    """One node's part of a batch's barrier: what its environments do is logged for the
    controller (`log`: kind, trial, the node's monotonic ns, held); only the controller
    releases it (`release`)."""

    def __init__(self, size: int, release_concurrency: int | None) -> None:
        super().__init__(size, None, release_concurrency)
        self.log: list[tuple[str, int, int, bool]] = []
        self.changed = asyncio.Event()
        self.trials: set[int] = set()  # the batch's trials sent to this node

    def _note(self, kind: str, trial: int, held: bool = True) -> None:
        self.log.append((kind, trial, time.monotonic_ns(), held))
        self.changed.set()

    def arrive(self, trial: int) -> None:
        if trial not in self.settled:
            super().arrive(trial)
            self._note("arrive", trial)

    def fail(self, trial: int) -> None:
        if trial not in self.settled:
            super().fail(trial)
            self._note("fail", trial)

    def let_go(self, trial: int, held: bool = True, at_ns: int | None = None) -> None:
        if trial in self.holding:
            super().let_go(trial, held)
            self._note("let_go", trial, held)

    def _check(self) -> None:
        """Every environment of the node arrived: the node waits for the controller."""

    def release(self, expired: bool) -> int:
        """The controller's release (`expired`: at the batch's deadline); its time here."""
        if self.how is None:
            self.how = "deadline" if expired else "released"
            self.expired = expired
            self._release()
        assert self.released_ns is not None
        return self.released_ns


class NodeEngine:
    """The actor's body (async methods: Ray runs them on the actor's event loop, at once)."""

    def __init__(self, name: str, profile: Profile, drivers: tuple[str, ...]) -> None:
        self.name = name
        self.profile = profile
        self._reaper = reaper.start(detached=True)  # this node's: ends what trials leave
        self.host = LocalHost()
        self.drivers = {
            (name, d): get_driver(d, self.host, profile.driver_options.get(d, {})) for d in drivers
        }
        self._events: dict[int, list[dict[str, Any]]] = {}
        self.emit = Emitter([self._keep])
        self.control = RunControl()
        self.progress = Progress()
        self.runner: TrialRunner | None = None
        self._batches: dict[str, NodeBarrier] = {}  # capacity batches in progress here
        self.pools: Pools | None = None  # the warm pools of this node's pooled cells
        self._pool_events: list[dict[str, Any]] = []  # their events, not yet sent

    def _keep(self, ev: dict[str, Any]) -> None:
        if ev.get("type") == "pool":
            self._pool_events.append(ev)
            return
        trial = ev.get("trial")
        if isinstance(trial, int) and trial in self._events:
            self._events[trial].append(ev)

    # -- the controller's questions -------------------------------------------------
    async def now(self) -> int:
        """The node's monotonic clock (one clock sample: hosts.clocksync)."""
        return time.monotonic_ns()

    async def facts(self) -> dict[str, Any]:
        f = dict(local_facts())
        f["ray"] = {"pid": os.getpid()}
        return f

    def _driver(self, name: str) -> Driver:
        """The run's driver, or (`rtax doctor` asks of every driver) one made now."""
        key = (self.name, name)
        if key not in self.drivers:
            opts = self.profile.driver_options.get(name, {})
            self.drivers[key] = get_driver(name, self.host, opts)
        return self.drivers[key]

    async def check(self, driver: str) -> list[tuple[str, str]]:
        """The driver's check on this node."""
        problems = await self._driver(driver).check()
        return [(p.reason, p.fix) for p in problems]

    async def check_workloads(self, driver: str, wl: list[Workload]) -> list[tuple[str, str]]:
        problems = await self._driver(driver).check_workloads(wl)
        return [(p.reason, p.fix) for p in problems]

    async def driver_facts(self, driver: str) -> dict[str, Any]:
        drv = self._driver(driver)
        try:
            f = dict(await drv.facts())
        except Exception as exc:  # facts are informative only
            f = {"error": str(exc)}
        f["integrity"] = {ch: drv.integrity(ch) for ch in drv.channels}
        return f

    async def setup(self, run_id: str, workloads: dict[str, Workload]) -> int:
        """The run's id and workloads (resolved on the controller); returns this pid."""
        self.runner = TrialRunner(
            self.profile,
            drivers=self.drivers,
            workloads=workloads,
            run_id=run_id,
            emit=self.emit,
            control=self.control,
            progress=self.progress,
            substrates=SubstrateHealth(self.drivers),
            hosts=HostHealth({self.name: self.host}),
        )
        return os.getpid()

    async def run_trial(
        self, pt: PlannedTrial, scheduled_ns: int, t0_node: int, share: int | None = None
    ) -> list[dict[str, Any]]:
        """One trial through the node's TrialRunner; its events, stamped on the run's clock
        (`t0_node`: the run's origin on this node's clock). `scheduled_ns`: when the
        controller scheduled it, on this node's clock (orchestration starts there).
        `share`: the trial is one of its capacity batch's `share` on this node."""
        if self.runner is None:
            raise RuntimeError("setup first")
        tid = pt.id
        barrier = None
        if share is not None and pt.batch is not None:
            barrier = self._batch(pt.batch, share)
            barrier.trials.add(tid)
        self.emit.t0 = t0_node
        self._events[tid] = []
        try:
            await self.runner.run(pt, min(scheduled_ns, time.monotonic_ns()), barrier)
        finally:
            got = self._events.pop(tid, [])
        return got

    # -- warm pools (engine.pool): this node's own, one per pooled cell -------------
    async def pool_resets(self, cells: list[Cell]) -> dict[str, tuple[str, str | None]]:
        """Per pooled cell of this node: the reset its pool uses (the driver's on this
        node, as `effective_reset` gives it locally), and why not the one asked for."""
        want = self.profile.pool_spec.reset
        return {
            c.id: effective_reset(self.drivers[(self.name, c.driver)], c.channel, want)
            for c in cells
            if c.mode == "pool" and c.host == self.name
        }

    async def start_pools(
        self, cells: list[Cell], resets: dict[str, str], t0_node: int, fill: bool
    ) -> dict[str, str]:
        """This node's pools of its pooled `cells`, each with the reset the controller
        recorded for it (`resets`); a pool that would get another is not made.
        `fill`: made now (eager ones filled), else each when its first trial asks.
        Returns the resets its pools use."""
        if self.runner is None:
            raise RuntimeError("setup first")
        got = {c: r for c, (r, _) in (await self.pool_resets(cells)).items()}
        for c, r in got.items():
            if r != resets.get(c):
                raise RtaxError(f"{c}: this node's reset is {r}, the run's {resets.get(c)}")
        self.emit.t0 = t0_node  # the pools' events are stamped on the run's clock too
        self.pools = Pools(
            self.profile.pool_spec,
            drivers=self.drivers,
            spec_for=self.runner.spec_for,
            timeouts=self.profile.timeouts,
            emit=self.emit,
        )
        self.runner.pools = self.pools
        if fill:
            self.pools.start([c for c in cells if c.host == self.name])
        return got

    async def pool_news(self) -> list[dict[str, Any]]:
        """The pools' events since the last answer (the controller checks each)."""
        got = self._pool_events[:POOL_NEWS_MAX]
        del self._pool_events[:POOL_NEWS_MAX]
        return got

    async def close_pools(self) -> list[dict[str, Any]]:
        """Every pooled environment of this node torn down; the pools' last events."""
        if self.pools is not None:
            await self.pools.close()
        out = list(self._pool_events)
        self._pool_events.clear()
        return out

    def _batch(self, batch: str, share: int) -> NodeBarrier:
        b = self._batches.get(batch)
        if b is None:
            cap = self.profile.capacity
            slots = None if cap is None else cap.release_concurrency
            b = self._batches[batch] = NodeBarrier(share, slots)
        return b

    async def barrier_news(self, batch: str, cursor: int, wait_s: float, share: int) -> list[Any]:
        """The batch's log here from entry `cursor` on, once there is any (or `wait_s`
        has passed): the controller's long poll."""
        b = self._batch(batch, share)
        if len(b.log) <= cursor:
            b.changed.clear()
            try:
                async with asyncio.timeout(wait_s):
                    await b.changed.wait()
            except TimeoutError:
                pass
        return b.log[cursor : cursor + NEWS_MAX]

    async def release_batch(self, batch: str, expired: bool, share: int) -> int:
        """The controller released the batch: its environments here are woken (at the
        deadline, those still on their way interrupted). Returns this node's time of it."""
        b = self._batch(batch, share)
        at = b.release(expired)
        if expired:
            for tid in b.trials - b.settled:
                self.control.interrupt(tid)
        return at

    async def forget_batch(self, batch: str) -> None:
        self._batches.pop(batch, None)

    async def stop(self) -> None:
        """Stop: what runs is interrupted, its teardown still happens."""
        self.control.stop()
        await self.control.drain()

    async def close(self) -> None:
        """The run is over: the reaper ends what is left (nothing, after a clean run)."""
        self._reaper.close()
