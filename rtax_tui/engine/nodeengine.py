"""The engine on one Ray node: the actor that runs a run's trials there (engine.raynodes).

One `NodeEngine` is placed on each chosen node (node affinity, not soft). It makes the
run's drivers on the node's own `LocalHost` and runs each trial the controller sends
through the same `TrialRunner` as a local run, so every phase is timed on the node with
`time.monotonic_ns()`; the trial's events come back to the controller in one batch when
it ends, stamped on the run's clock (the controller gives the run's origin on this
node's clock, `t0_node`, from the measured offset). The node has its own reaper
(hosts/reaper.py): if the actor dies (its node killed, the actor killed), the reaper's
pipe closes and it ends what the node's environments left.

This module imports no Ray: the controller wraps the class with `ray.remote`, and Ray
imports this module on the node (rtax installed there, as on the controller).
"""

from __future__ import annotations

import os
import time
from typing import Any

from rtax_tui.drivers import Driver, get_driver
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.lifecycle import TrialRunner
from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.engine.profile import Profile
from rtax_tui.hosts import LocalHost, reaper
from rtax_tui.hosts.hostfacts import local_facts
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Workload


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

    def _keep(self, ev: dict[str, Any]) -> None:
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
        self, pt: PlannedTrial, scheduled_ns: int, t0_node: int
    ) -> list[dict[str, Any]]:
        """One trial through the node's TrialRunner; its events, stamped on the run's clock
        (`t0_node`: the run's origin on this node's clock). `scheduled_ns`: when the
        controller scheduled it, on this node's clock (orchestration starts there)."""
        if self.runner is None:
            raise RuntimeError("setup first")
        tid = pt.id
        self.emit.t0 = t0_node
        self._events[tid] = []
        try:
            await self.runner.run(pt, min(scheduled_ns, time.monotonic_ns()))
        finally:
            got = self._events.pop(tid, [])
        return got

    async def stop(self) -> None:
        """Stop: what runs is interrupted, its teardown still happens."""
        self.control.stop()
        await self.control.drain()

    async def close(self) -> None:
        """The run is over: the reaper ends what is left (nothing, after a clean run)."""
        self._reaper.close()
