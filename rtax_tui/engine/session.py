"""The engine: executes a plan through drivers and emits `rtax/1` events as they happen.

`Session` coordinates the engine's parts, each in its own module:
- `scheduling`: the plan's order under the run's and each host's concurrency;
- `lifecycle`: one trial, its phases timed and its teardown guaranteed;
- `health`: lost substrates (rechecked) and lost hosts (reconnected with backoff);
- `capacity`: batches released by a barrier, under a budget cgroup;
- `pool`: warm pools of pooled cells (one per host and cell), their own work recorded;
- `precision`: a run with `precision`, in rounds until every cell's P50 is known;
- `events`: the `rtax/1` events, built, encoded and decoded in one place;
- `control`: stop/pause, the run's tasks and its progress counters.

All durations come from `time.monotonic_ns()` taken around each awaited phase.
Sinks (the recording, a live stream, progress counters) are called for every
event, in order, from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rtax_tui.engine import evloop, raynodes
from rtax_tui.engine.capacity import Barrier, CapacityRun
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.lifecycle import TrialRunner
from rtax_tui.engine.plan import build_plan, make_cells
from rtax_tui.engine.pool import Pools
from rtax_tui.engine.precision import PrecisionRounds
from rtax_tui.engine.probe import state as probe_state
from rtax_tui.engine.profile import Profile
from rtax_tui.engine.scheduling import Scheduler
from rtax_tui.hosts.clocksync import ClockSync
from rtax_tui.hosts.hostfacts import local_facts
from rtax_tui.hosts.noise import Noise
from rtax_tui.model import events, runlock
from rtax_tui.model.events import Emitter, Sink, SinkError
from rtax_tui.model.inputs import switched_off
from rtax_tui.model.spec import RtaxError, Workload

if TYPE_CHECKING:  # the engine sits above the drivers and the hosts (pyproject's layers)
    from rtax_tui.drivers.base import Driver, Problem
    from rtax_tui.hosts.base import Host

__all__ = ["Barrier", "Progress", "Session", "Sink", "check_drivers_ready", "new_run_id"]


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


class Session:
    """One run of a profile: the header, the trials (or capacity batches), the end."""

    def __init__(
        self,
        profile: Profile,
        *,
        sinks: list[Sink],
        argv: list[str],
        drivers: dict[tuple[str, str], Driver],
        workloads: dict[str, Workload],
        run_id: str | None = None,
        host_facts: dict[str, dict[str, Any]] | None = None,
        left_out_hosts: dict[str, dict[str, Any]] | None = None,
        hosts: dict[str, Host] | None = None,
    ) -> None:
        self.profile = profile
        self.sinks = sinks
        self.argv = argv
        self.drivers = drivers
        self.workloads = workloads
        self.run_id = run_id or new_run_id()
        runlock.hold(self.run_id)  # its budget cgroups carry it too (capacity)
        self.host_facts = host_facts
        # Hosts by name, as the drivers hold them (remote hosts left out at the start are
        # not among them), and those given that no driver runs on (`rtax cleanup`'s);
        # cells are made only for (host, driver) pairs that exist.
        self.hosts: dict[str, Host] = dict(hosts or {})
        for (h, _d), drv in drivers.items():
            self.hosts.setdefault(h, drv.host)
        self.left_out_hosts = left_out_hosts or {}
        cells = make_cells(
            tuple(self.hosts),
            profile.drivers,
            profile.workloads,
            profile.channels,
            profile.run_modes,
            profile.arrivals,
            profile.images or ("",),
        )
        left = profile.images_left_out()  # a driver's cells of a mode it cannot deliver
        self.cells = [
            c for c in cells
            if (c.host, c.driver) in drivers and c.image not in left.get(c.driver, ())
        ]  # fmt: skip
        self.progress = Progress()
        self.status = "completed"
        self.emit = Emitter(sinks)
        self.emit.on_failure = self._sink_failed
        self.fault: str | None = None  # why the run stopped early, when a fault stopped it
        self._noise: Noise | None = None  # the sampler beside the run (hosts.noise)
        self.control = RunControl()
        self.host_health = HostHealth(self.hosts)
        self.substrate_health = SubstrateHealth(drivers)
        self.scheduler = Scheduler(
            {h: host.concurrency for h, host in self.hosts.items()},
            profile.concurrency,
            self.control,
            self.host_health,
        )
        self.pools: Pools | None = None
        self.trials = TrialRunner(
            profile,
            drivers=drivers,
            workloads=workloads,
            run_id=self.run_id,
            emit=self.emit,
            control=self.control,
            progress=self.progress,
            substrates=self.substrate_health,
            hosts=self.host_health,
        )
        # Ray nodes run their trials in their own engine (engine.raynodes)
        nodes = raynodes.nodes_of(self.hosts)
        self.nodes = raynodes.NodeTrials(nodes, self.trials) if nodes else None
        self.launch = self.trials.run if self.nodes is None else self.nodes.launch
        if any(c.mode == "pool" for c in self.cells):
            self.pools = Pools(
                profile.pool_spec,
                drivers=drivers,
                spec_for=self.trials.spec_for,
                timeouts=profile.timeouts,
                emit=self.emit,
            )
            self.trials.pools = self.pools
            self.scheduler.prefer = self.pools.has_ready  # locality: a ready pool first

    # -- control -------------------------------------------------------------
    def stop(self) -> None:
        """Stop scheduling, interrupt what runs; teardown still happens."""
        if self.control.stop():
            self.status = "interrupted"
            if self.nodes is not None:
                self.nodes.stop()

    def _sink_failed(self, exc: SinkError) -> None:
        """A recording can take no more (a full disk): stop, keep what it holds."""
        if self.fault is None:
            self.fault = str(exc)
        self.stop()

    def pause(self) -> None:
        self.control.gate.clear()

    def resume(self) -> None:
        self.control.gate.set()

    @property
    def stopping(self) -> bool:
        return self.control.stopping

    def now(self) -> int:
        return self.emit.now()

    # -- the run -------------------------------------------------------------
    async def begin(self, profile: dict[str, Any] | None = None) -> None:
        """The run's clock started and its header emitted (every host's facts, each
        driver's among them; `profile`: the profile as recorded, else the session's);
        from now on every sync of a remote clock is recorded. `run` begins so, and so
        does every other run of the engine (`rtax probe`: engine/probe/run.py)."""
        self.progress.started_ns = self.emit.start()
        facts = self.host_facts
        if facts is None:
            facts = await self._gather_facts()
        self.emit(
            events.run(
                run_id=self.run_id,
                started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
                seed=self.profile.seed,
                argv=self.argv,
                profile=self.profile.to_dict() if profile is None else profile,
                hosts=facts,
                limits=self.profile.limits.to_json(),
                loop=evloop.describe(),
            )
        )
        self._watch_clocks()
        self._watch_noise()

    def finish(self, status: str, error: str | None = None) -> None:
        """The recording's last event (no clock or noise event after it)."""
        self.stop_watching()
        self.emit(events.run_end(status, self.trials.ended, error=error))

    def stop_watching(self) -> None:
        """End what `begin` started beside the run (clock syncs, the noise sampler);
        again is nothing. `runner.opened` calls it on leaving, however the block ends."""
        self._unwatch_clocks()
        self._unwatch_noise()

    async def run(self) -> str:
        prof = self.profile.to_dict()
        if self.pools is not None:  # the reset each pooled cell really gets, and why
            here = [c for c in self.cells if c.host not in self.nodes_named]
            prof["pool"]["resets"] = self.pools.resets(here)
            if self.nodes is not None:  # a Ray node's pools: its own driver's reset
                wanted = self.profile.pool_spec.reset
                prof["pool"]["resets"].update(await self.nodes.pool_resets(self.cells, wanted))
        await self.begin(prof)
        try:
            p = self.profile
            if p.images:  # the servers, the images, the cached mounts: before any trial
                await self._prepare_images(p.images)
            if self.nodes is not None:  # each node's engine: the run's id and workloads
                await self.nodes.setup(self.workloads)
                if self.pools is not None:  # and its own pools of its pooled cells
                    resets = {c: str(r["reset"]) for c, r in prof["pool"]["resets"].items()}
                    await self.nodes.start_pools(self.cells, resets, p.capacity is None)
            if p.capacity is not None:
                nodes = self.nodes  # Ray nodes: each batch spans them, one barrier
                batches = CapacityRun(
                    p.capacity,
                    run_id=self.run_id,
                    emit=self.emit,
                    control=self.control,
                    progress=self.progress,
                    launch=self.trials.run if nodes is None else nodes.launch_in_batch,
                    let_go_s=p.timeouts.action,
                    span=nodes,
                )
                await batches.run(self.cells, p.warmup, p.seed)
            else:
                if self.pools is not None:  # a Ray node's are its own (engine.nodeengine)
                    self.pools.start([c for c in self.cells if c.host not in self.nodes_named])
                target = p.precision_target()
                if target is None:
                    plan = build_plan(self.cells, p.trials, p.warmup, p.seed)
                    self.progress.planned = len(plan)
                    await self.scheduler.run(plan, self.launch)
                else:  # rounds until every cell's P50 is known to `target`
                    await PrecisionRounds(
                        target,
                        cells=self.cells,
                        trials=p.trials,
                        warmup=p.warmup,
                        seed=p.seed,
                        emit=self.emit,
                        control=self.control,
                        progress=self.progress,
                        scheduler=self.scheduler,
                    ).run(self.launch)
                await self._close_pools()  # every pooled environment torn down
            await self._sync_clocks()
        except Exception as exc:  # an engine bug must still tear down and end the recording
            self.stop()
            await self.control.drain()
            await self._close_pools()
            self.status = "failed"
            self.finish("failed", error=repr(exc))
            raise
        finally:  # cancelled: the pools' environments still go (close is idempotent)
            self._unwatch_clocks()  # no clock event after run_end
            self._unwatch_noise()  # nor a noise event; the sampler ends here
            await self._close_pools()
            if self.profile.images:  # nothing left mounted or serving
                from rtax_tui.drivers.toolkit import delivery

                await delivery.close_delivery()
        self.finish(self.status)
        return self.status

    @property
    def nodes_named(self) -> set[str]:
        return set() if self.nodes is None else set(self.nodes.nodes)

    async def _close_pools(self) -> None:
        """The run's pools closed, here and on every Ray node (again is nothing)."""
        if self.pools is not None:
            await self.pools.close()
        if self.nodes is not None:
            await self.nodes.close_pools()

    async def _prepare_images(self, modes: tuple[str, ...]) -> None:
        from rtax_tui.drivers.toolkit import delivery

        registry = any(getattr(d, "image_registry", False) for d in self.drivers.values())
        await delivery.open_delivery().prepare(modes, registry=registry)
        for (h, name), drv in self.drivers.items():
            mine = dict.fromkeys(c.workload for c in self.cells if (c.host, c.driver) == (h, name))
            await drv.prepare_images([self.workloads[w] for w in mine], modes)

    # -- noise ---------------------------------------------------------------------
    def _watch_noise(self) -> None:
        """Sample what skews timings on this machine (hosts.noise) beside the run, from
        a process of its own, as `noise` events; `RTAX_NOISE=0` (or off, no, false)
        leaves it out."""
        if switched_off("RTAX_NOISE"):
            return

        def record(sample: dict[str, Any]) -> None:
            ev = events.noise("local", sample)
            if ev is not None:
                self.emit(ev)

        self._noise = Noise(record)
        try:
            self._noise.start(self.emit.t0)
        except OSError:  # no process to spare: the run goes on, unsampled
            self._noise = None

    def _unwatch_noise(self) -> None:
        noise = self._noise
        if noise is not None:
            self._noise = None
            noise.stop()

    # -- remote clocks ---------------------------------------------------------
    def _watch_clocks(self) -> None:
        """Record every sync of a remote host's clock (those made at connection, then
        each later one) as a `clock` event on the run's clock, so that a reader can place
        the host's times on the run's timeline and say within what."""
        for name, h in self.hosts.items():

            def record(s: ClockSync, name: str = name) -> None:
                t0 = self.emit.t0
                self.emit(
                    events.clock(
                        name,
                        at_ns=s.mono_ns - t0,
                        offset_ns=s.offset_ns + t0,
                        err_ns=s.err_ns,
                        rtt_ns=s.rtt_ns,
                        samples=s.samples,
                        drift_ppb=s.drift_ppb,
                        drift_err_ppb=s.drift_err_ppb,
                    )
                )

            if not hasattr(h, "watch_clock"):  # a plugin's host may predate clocks
                continue
            if h.clock is not None:
                for s in h.clock.syncs:
                    record(s)
            h.watch_clock(record)  # later syncs, a reconnected host's too

    def _unwatch_clocks(self) -> None:
        for h in self.hosts.values():
            if hasattr(h, "watch_clock"):
                h.watch_clock(None)

    async def _sync_clocks(self) -> None:
        """One more sync of every remote clock at the end, so that every action of the
        run lies between two syncs (a bound by interpolation, not extrapolation)."""
        for h in self.hosts.values():
            if getattr(h, "clock", None) is not None:
                try:
                    await h.sync_clock()
                except Exception:  # informative only: the run's results stand
                    pass

    async def _gather_facts(self) -> dict[str, dict[str, Any]]:
        """Every host's facts, the hosts at once: each remote host answers over its own
        connection, so asking them in turn made the run's start grow with the number
        of hosts (about 1.7 s a host here, bench/fleet_bench.py)."""
        names = list(self.hosts)
        got = await asyncio.gather(*(self._host_facts(host) for host in names))
        facts = dict(zip(names, got, strict=True))
        for host, why in self.left_out_hosts.items():
            facts.setdefault(host, dict(why))
        return facts

    async def _host_facts(self, host: str) -> dict[str, Any]:
        h = self.hosts[host]
        if host == "local":
            f = dict(local_facts())
        else:  # over the host's own connection
            try:
                f = dict(await h.facts())
            except Exception as exc:
                f = {"error": f"{type(exc).__name__}: {exc}"}
        f.update(self.left_out_hosts.get(host, {}))
        drivers: dict[str, Any] = {}
        node = h if isinstance(h, raynodes.RayNodeHost) else None
        for (dh, d), drv in self.drivers.items():
            if dh == host:
                try:  # a Ray node's driver answers on the node, integrity included
                    drivers[d] = dict(await (drv.facts() if node is None else node.driver_facts(d)))
                except Exception as exc:  # facts are informative only
                    drivers[d] = {"error": str(exc)}
                # what the substrate kept out when last measured (`rtax probe`)
                drivers[d]["boundary"] = probe_state.boundary(host, d)
                # per channel: null where a step's result reaches rtax through
                # nothing a step can write, else why not (Driver.integrity)
                if node is None:
                    drivers[d]["integrity"] = {ch: drv.integrity(ch) for ch in drv.channels}
        f["drivers"] = drivers
        return f


def check_drivers_ready(problems: dict[str, list[Problem]]) -> None:
    """Raise before any trial when a needed driver cannot run here."""
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        parts = []
        for name, probs in bad.items():
            parts.append(f"{name}: " + "; ".join(f"{p.reason} (fix: {p.fix})" for p in probs))
        raise RtaxError("cannot run: " + " | ".join(parts))
