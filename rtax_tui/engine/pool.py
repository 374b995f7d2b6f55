"""Warm pools: environments made ready before a trial asks, reset or replaced after it.

What every production RL stack does to hide create + ready, measured with its own
cost counted (issue 14). One `EnvPool` per host and cell (a pooled cell: mode
`pool`); `Pools` holds them for a run.

A pooled trial `acquire`s a ready environment (timed by the trial; `acquire.wait`
when the pool had none ready and the trial waited for one), runs its actions, and
`release`s it. Everything the pool does in the background is recorded as `pool`
events, with rtax's CPU time over it and what the driver attributes to the
environment: `create` (create + ready of a new one), `reset` (clean or snapshot, in
place), `teardown` (a used one under `recreate`, a broken one, the rest at the end).

Sizes (`[pool] size`):
- `recreate`: `size` environments are kept ready; each acquire starts a replacement
  (`eager`) or a trial that finds the pool empty does (`lazy`); a released
  environment is torn down, never reused;
- `clean`, `snapshot`: the pool owns at most `size` environments, each reset in place
  after its trial and handed to the next; `eager` makes all of them at the start,
  `lazy` on demand. A pool smaller than the run's concurrency makes trials wait (in
  `acquire.wait`) for a reset.

A failed background create fails one waiting trial with its reason (an `acquire`
error of the create's kind, e.g. `substrate_lost`) and the pool recovers: the next
acquire starts another. An environment whose trial failed is never reused.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.poolspec import PoolSpec
from rtax_tui.model import events
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Cell, EnvSpec, PhaseFailure, Timeouts

if TYPE_CHECKING:  # the engine sits above the drivers (pyproject's layers)
    from rtax_tui.drivers.base import Driver, Environment

REUSABLE = ("clean", "snapshot")


@dataclass
class PooledEnv:
    """An environment the pool owns; `n` is its number in the pool's events."""

    n: int
    env: Environment
    uses: int = 0
    ready_at: int | None = None  # monotonic: when it last went into the pool ready
    idle_ns: int = 0  # how long it waited ready, not yet recorded
    mem_bytes: int | None = None  # its memory when it went in (Environment.memory_bytes)

    def went_in(self) -> None:
        """It waits ready from now: its memory is read now, off any trial's clock."""
        self.ready_at = time.monotonic_ns()
        try:
            self.mem_bytes = self.env.memory_bytes()
        except Exception:  # informative only
            self.mem_bytes = None

    def came_out(self) -> None:
        """Taken (or torn down at the pool's close): its wait is counted."""
        if self.ready_at is not None:
            self.idle_ns += time.monotonic_ns() - self.ready_at
            self.ready_at = None


def effective_reset(driver: Driver, channel: str, wanted: str) -> tuple[str, str | None]:
    """The reset the pool will use for `wanted` on this driver and channel, and why it
    differs (None when it is the wanted one): an unsupported reset falls back to
    `recreate`, which every driver has."""
    why = driver.pool_resets(channel).get(wanted, "unknown reset")
    if why is None:
        return wanted, None
    return "recreate", f"{driver.name}/{channel}: reset {wanted}: {why}"


class EnvPool:
    """The warm pool of one host and cell."""

    def __init__(
        self,
        cell: Cell,
        driver: Driver,
        spec: EnvSpec,
        conf: PoolSpec,
        timeouts: Timeouts,
        emit: Emitter,
    ) -> None:
        self.cell = cell
        self.driver = driver
        self.spec = spec
        self.conf = conf
        self.timeouts = timeouts
        self.emit = emit
        self.reset, self.fallback = effective_reset(driver, cell.channel, conf.reset)
        self.ready: deque[PooledEnv] = deque()
        self.waiters: deque[asyncio.Future[PooledEnv]] = deque()
        self.pending = 0  # creates and resets in flight (each brings one environment)
        self.in_use = 0
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()  # creates: cancelled at close
        # resets and teardowns: never cancelled (a task cancelled before it ran would
        # leave its environment behind), awaited at close
        self._held: set[asyncio.Task[None]] = set()
        self._next = 0
        # counters (the report recomputes them from the recording)
        self.hits = 0
        self.misses = 0

    # -- what trials call ----------------------------------------------------
    def has_ready(self) -> bool:
        return bool(self.ready)

    def start(self) -> None:
        """Fill the pool (eager): `size` environments start now."""
        if self.conf.refill == "eager":
            for _ in range(self.conf.size):
                self._start_create()

    async def acquire(self) -> tuple[PooledEnv, int]:
        """A ready environment, and how long the trial waited for one (0: it was ready)."""
        if self.closed:
            raise PhaseFailure(ErrorKind.POOL_CLOSED, "the pool was closed (the run is ending)")
        if self.ready:
            pe = self.ready.popleft()
            self.hits += 1
            self._take(pe)
            return pe, 0
        self.misses += 1
        fut: asyncio.Future[PooledEnv] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        self._refill(demand=True)
        t = time.monotonic_ns()
        try:
            pe = await fut
        except asyncio.CancelledError:
            if fut in self.waiters:
                self.waiters.remove(fut)
            elif fut.done() and not fut.cancelled() and fut.exception() is None:
                self._deliver(fut.result())  # handed over as we were cancelled: pass it on
            raise
        self._take(pe)
        return pe, time.monotonic_ns() - t

    def release(self, pe: PooledEnv, healthy: bool) -> None:
        """Hand an environment back: reset in the background (or torn down, and a
        replacement made, under `recreate` or when its trial failed)."""
        self.in_use -= 1
        if healthy and not self.closed and self.reset in REUSABLE:
            self.pending += 1
            self._spawn(self._reset(pe))
            return
        self._spawn(self._teardown(pe))
        self._refill()

    async def close(self) -> None:
        """End the pool: background work stops, every environment it holds is torn down."""
        self.closed = True
        for fut in self.waiters:
            if not fut.done():
                fut.set_exception(PhaseFailure(ErrorKind.POOL_CLOSED, "the pool was closed"))
        self.waiters.clear()
        for task in list(self._tasks):
            task.cancel()
        while self._tasks:  # each create tears down what it had made when cancelled
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        while self._held or self.ready:  # a finished reset delivers to a closed pool:
            while self.ready:  # torn down
                pe = self.ready.popleft()
                pe.came_out()
                self._spawn(self._teardown(pe))
            await asyncio.gather(*list(self._held), return_exceptions=True)

    # -- the background work ---------------------------------------------------
    def _take(self, pe: PooledEnv) -> None:
        pe.came_out()
        pe.uses += 1
        self.in_use += 1
        if self.conf.refill == "eager":
            self._refill()

    def _owned(self) -> int:
        return len(self.ready) + self.pending + self.in_use

    def _refill(self, demand: bool = False) -> None:
        """Start creates: to keep `size` ready (recreate, eager), to keep `size` owned
        (clean/snapshot, eager), or for waiting trials that nothing in flight will serve."""
        if self.closed:
            return
        if self.reset in REUSABLE:
            want = self.conf.size - self._owned() if self.conf.refill == "eager" else 0
            if demand or self.waiters:
                # a waiter is served by a create only while the pool owns fewer than size
                want = max(
                    want, min(len(self.waiters) - self.pending, self.conf.size - self._owned())
                )
        else:
            want = (
                self.conf.size - len(self.ready) - self.pending
                if self.conf.refill == "eager"
                else 0
            )
            want = max(want, len(self.waiters) - self.pending)
        for _ in range(max(0, want)):
            self._start_create()

    def _start_create(self) -> None:
        self.pending += 1  # counted now: an acquire before the task runs must see it
        self._spawn(self._create())

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        held = self._tasks if coro.__name__ == "_create" else self._held
        held.add(task)
        task.add_done_callback(held.discard)

    def _deliver(self, pe: PooledEnv) -> None:
        """A ready environment: to the first waiting trial, else into the pool (or torn
        down when the pool already holds enough)."""
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(pe)
                return
        if self.closed or len(self.ready) >= self.conf.size:
            self._spawn(self._teardown(pe))
            return
        pe.went_in()
        self.ready.append(pe)

    def _fail_waiter(self, exc: PhaseFailure) -> None:
        """A create that failed fails one waiting trial that nothing else in flight serves."""
        coming = self.pending + (self.in_use if self.reset in REUSABLE else 0)
        if len(self.waiters) <= coming:
            return
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(PhaseFailure(exc.kind, f"pool refill failed: {exc.message}"))
                return

    def _record(
        self, op: str, pe: PooledEnv, t0: int, cpu0: int, env0: int | None, err: str | None
    ) -> None:
        env1 = pe.env.cpu_ns()
        idle, mem = pe.idle_ns, pe.mem_bytes
        pe.idle_ns = 0
        self.emit(
            events.pool(
                host=self.cell.host,
                cell=self.cell.id,
                env=pe.n,
                op=op,
                dur_ns=time.monotonic_ns() - t0,
                ok=err is None,
                cpu_ns=time.process_time_ns() - cpu0,
                env_cpu_ns=None if env1 is None else env1 - (env0 or 0),
                error=err,
                idle_ns=None if op == "create" else idle,  # measured: 0 when never idle
                mem_bytes=mem if idle else None,
            )
        )

    async def _create(self) -> None:
        self._next += 1
        try:
            env = self.driver.environment(self.spec)
        except Exception as exc:
            self.pending -= 1
            self._fail_waiter(PhaseFailure(ErrorKind.ERROR, f"{type(exc).__name__}: {exc}"))
            return
        pe = PooledEnv(self._next, env)
        t0, cpu0 = time.monotonic_ns(), time.process_time_ns()
        err: PhaseFailure | None = None
        try:
            async with asyncio.timeout(self.timeouts.create):
                await env.create()
            async with asyncio.timeout(self.timeouts.ready):
                await env.ready()
        except asyncio.CancelledError:  # the pool closed: its work still counts
            self._record("create", pe, t0, cpu0, 0, "interrupted: the pool was closed")
            self.pending -= 1
            self._spawn(self._teardown(pe))
            raise
        except TimeoutError:
            err = PhaseFailure(ErrorKind.TIMEOUT, "create + ready did not finish in time")
        except PhaseFailure as exc:
            err = exc
        except Exception as exc:
            err = PhaseFailure(ErrorKind.ERROR, f"{type(exc).__name__}: {exc}")
        self._record(
            "create", pe, t0, cpu0, 0, None if err is None else f"{err.kind}: {err.message}"
        )
        self.pending -= 1
        if err is not None:
            self._fail_waiter(err)
            self._spawn(self._teardown(pe))
            return
        self._deliver(pe)

    async def _reset(self, pe: PooledEnv) -> None:
        t0, cpu0, env0 = time.monotonic_ns(), time.process_time_ns(), pe.env.cpu_ns()
        err: str | None = None
        try:
            async with asyncio.timeout(self.timeouts.ready):
                if self.reset == "clean":
                    await pe.env.reset_clean()
                else:
                    await pe.env.reset_snapshot()
        except TimeoutError:
            err = "timeout: the reset did not finish in time"
        except PhaseFailure as exc:
            err = f"{exc.kind}: {exc.message}"
        except Exception as exc:
            err = f"error: {type(exc).__name__}: {exc}"
        self._record("reset", pe, t0, cpu0, env0, err)
        self.pending -= 1
        if err is not None:  # never hand out an environment whose reset failed
            self._spawn(self._teardown(pe))
            self._refill()
            return
        self._deliver(pe)

    async def _teardown(self, pe: PooledEnv) -> None:
        """Tear one environment down (its own task, never cancelled: `close` awaits it)."""
        t0, cpu0, env0 = time.monotonic_ns(), time.process_time_ns(), pe.env.cpu_ns()
        err: str | None = None
        try:
            async with asyncio.timeout(self.timeouts.teardown):
                await pe.env.teardown()
        except TimeoutError:
            err = "timeout: teardown did not finish in time"
        except PhaseFailure as exc:
            err = f"{exc.kind}: {exc.message}"
        except Exception as exc:
            err = f"error: {type(exc).__name__}: {exc}"
        self._record("teardown", pe, t0, cpu0, env0, err)


class Pools:
    """The run's pools, one per host and pooled cell."""

    def __init__(
        self,
        conf: PoolSpec,
        *,
        drivers: dict[tuple[str, str], Driver],
        spec_for: Callable[[Cell], EnvSpec],
        timeouts: Timeouts,
        emit: Emitter,
    ) -> None:
        self.conf = conf
        self.drivers = drivers
        self.spec_for = spec_for
        self.timeouts = timeouts
        self.emit = emit
        self.pools: dict[str, EnvPool] = {}

    def resets(self, cells: list[Cell]) -> dict[str, dict[str, str | None]]:
        """Per pooled cell: the reset it gets, and why not the one asked for (or None)."""
        out: dict[str, dict[str, str | None]] = {}
        for cell in cells:
            if cell.mode == "pool":
                drv = self.drivers[(cell.host, cell.driver)]
                reset, why = effective_reset(drv, cell.channel, self.conf.reset)
                out[cell.id] = {"reset": reset, "fallback": why}
        return out

    def start(self, cells: list[Cell]) -> None:
        """Make (and fill, when eager) the pool of every pooled cell."""
        for cell in cells:
            if cell.mode == "pool":
                self.get(cell)

    def get(self, cell: Cell) -> EnvPool:
        p = self.pools.get(cell.id)
        if p is None:
            drv = self.drivers[(cell.host, cell.driver)]
            p = EnvPool(cell, drv, self.spec_for(cell), self.conf, self.timeouts, self.emit)
            self.pools[cell.id] = p
            p.start()
        return p

    def has_ready(self, cell: Cell) -> bool:
        p = self.pools.get(cell.id)
        return p is not None and p.has_ready()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.pools.values()), return_exceptions=True)
