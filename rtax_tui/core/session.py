"""The engine: executes a plan through drivers and emits `rtax/1` events as they happen.

All durations come from `time.monotonic_ns()` taken here, around each awaited
phase. Sinks (the recording, a live stream, progress counters) are called for
every event, in order, from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from rtax_tui.core import probe_state, reaper
from rtax_tui.core.hostfacts import local_facts
from rtax_tui.core.model import (
    FORMAT,
    Cell,
    EnvSpec,
    PhaseFailure,
    RtaxError,
    Workload,
)
from rtax_tui.core.plan import (
    PlannedBatch,
    PlannedTrial,
    build_capacity_plan,
    build_plan,
    make_cells,
)
from rtax_tui.core.profile import Profile

Sink = Callable[[dict[str, Any]], None]
Error = tuple[str, str, str]  # phase, kind, message

# After a trial of a (host, driver) fails with `substrate_lost`, later trials of it
# re-run the driver's check at most this often, and fail at once while it fails.
LOST_RECHECK_S = 5.0
LOST_CHECK_TIMEOUT_S = 30.0


@dataclass
class _Lost:
    """A (host, driver) whose substrate went away during this run."""

    reason: str
    checked: float | None = None  # time.monotonic() of the last check, None: never
    checking: asyncio.Future[str | None] | None = None


# A lost remote host is reconnected with exponential backoff between these bounds.
HOST_RETRY_MIN_S = 0.5
HOST_RETRY_MAX_S = 10.0


@dataclass
class _HostLost:
    """A remote host whose connection dropped during this run."""

    reason: str
    delay: float = HOST_RETRY_MIN_S
    next_try: float = 0.0  # time.monotonic() of the next reconnect attempt
    trying: asyncio.Future[str | None] | None = None
    losses: int = 1


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


@dataclass
class Progress:
    """Plain counters the engine updates and any UI may read at its own pace."""

    planned: int = 0
    started: int = 0
    done: int = 0
    failed: int = 0
    invalid: int = 0
    in_flight: int = 0
    last_error: str | None = None
    started_ns: int = 0
    per_cell_done: dict[str, int] = field(default_factory=dict)


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


class Session:
    def __init__(
        self,
        profile: Profile,
        *,
        sinks: list[Sink],
        argv: list[str],
        drivers: dict[tuple[str, str], Any],
        workloads: dict[str, Workload],
        run_id: str | None = None,
        host_facts: dict[str, dict[str, Any]] | None = None,
        left_out_hosts: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.profile = profile
        self.sinks = sinks
        self.argv = argv
        self.drivers = drivers
        self.workloads = workloads
        self.run_id = run_id or new_run_id()
        self.host_facts = host_facts
        # Hosts by name, as the drivers hold them (remote hosts left out at the start are
        # not among them); cells are made only for (host, driver) pairs that exist.
        self.hosts: dict[str, Any] = {}
        for (h, _d), drv in drivers.items():
            self.hosts.setdefault(h, drv.host)
        self.left_out_hosts = left_out_hosts or {}
        cells = make_cells(tuple(self.hosts), profile.drivers, profile.workloads, profile.channels)
        self.cells = [c for c in cells if (c.host, c.driver) in drivers]
        self._host_sems = {
            h: asyncio.Semaphore(n) for h, host in self.hosts.items() if (n := host.concurrency)
        }
        self._hosts_lost: dict[str, _HostLost] = {}
        self._in_flight: dict[str, int] = {}  # trials in flight per host
        self.progress = Progress()
        self._t0 = 0
        self._stopping = False
        self._gate = asyncio.Event()
        self._gate.set()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Trials that may be interrupted: a trial leaves this map before its teardown,
        # so that stopping a run never cuts a teardown short.
        self._interruptible: dict[int, asyncio.Task[Any]] = {}
        self.status = "completed"
        self._trials_ended = 0
        self._lost: dict[tuple[str, str], _Lost] = {}

    # -- control -------------------------------------------------------------
    def stop(self) -> None:
        """Stop scheduling, interrupt what runs; teardown still happens."""
        if self._stopping:
            return
        self._stopping = True
        self.status = "interrupted"
        self._gate.set()
        for task in list(self._interruptible.values()):
            task.cancel()

    def pause(self) -> None:
        self._gate.clear()

    def resume(self) -> None:
        self._gate.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- events --------------------------------------------------------------
    def now(self) -> int:
        return time.monotonic_ns() - self._t0

    def emit(self, etype: str, **fields: Any) -> None:
        ev = {"type": etype, "t_ns": time.monotonic_ns() - self._t0, **fields}
        for sink in self.sinks:
            sink(ev)

    # -- the run -------------------------------------------------------------
    async def run(self) -> str:
        self._t0 = time.monotonic_ns()
        self.progress.started_ns = self._t0
        facts = self.host_facts
        if facts is None:
            facts = await self._gather_facts()
        self.emit(
            "run",
            format=FORMAT,
            run_id=self.run_id,
            started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            seed=self.profile.seed,
            argv=self.argv,
            profile=self.profile.to_dict(),
            hosts=facts,
        )
        try:
            if self.profile.capacity is not None:
                await self._run_capacity()
            else:
                await self._run_trials()
        except Exception as exc:  # an engine bug must still tear down and end the recording
            self.stop()
            await self._drain()
            self.status = "failed"
            self.emit("run_end", status="failed", trials=self._trials_ended, error=repr(exc))
            raise
        self.emit("run_end", status=self.status, trials=self._trials_ended)
        return self.status

    async def _gather_facts(self) -> dict[str, dict[str, Any]]:
        facts: dict[str, dict[str, Any]] = {}
        for host in self.hosts:
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
            for (h, d), drv in self.drivers.items():
                if h == host:
                    try:
                        drivers[d] = dict(await drv.facts())
                    except Exception as exc:  # facts are informative only
                        drivers[d] = {"error": str(exc)}
                    # what the substrate kept out when last measured (`rtax probe`)
                    drivers[d]["boundary"] = probe_state.boundary(host, d)
            f["drivers"] = drivers
            facts[host] = f
        for host, why in self.left_out_hosts.items():
            facts.setdefault(host, dict(why))
        return facts

    async def _run_trials(self) -> None:
        p = self.profile
        plan = build_plan(self.cells, p.trials, p.warmup, p.seed)
        self.progress.planned = len(plan)
        sem = asyncio.Semaphore(p.concurrency)
        pending = deque(plan)
        room = asyncio.Event()  # set whenever a trial ends (a host may have room again)
        while pending:
            await self._gate.wait()
            if self._stopping:
                break
            await sem.acquire()
            if self._stopping:
                sem.release()
                break
            # The next planned trial whose host has room under its own limit: a full
            # (or hanging) host must not hold the other hosts' trials back.
            i = self._next_with_room(pending)
            while i is None and not self._stopping:
                room.clear()
                await room.wait()
                i = self._next_with_room(pending)
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
            task = asyncio.create_task(self._run_trial(pt, time.monotonic_ns()))
            self._tasks.add(task)
            h = pt.cell.host
            self._in_flight[h] = self._in_flight.get(h, 0) + 1

            def done(
                t: asyncio.Task[Any], hs: asyncio.Semaphore | None = host_sem, h: str = h
            ) -> None:
                self._tasks.discard(t)
                self._in_flight[h] -= 1
                sem.release()
                if hs is not None:
                    hs.release()
                room.set()

            task.add_done_callback(done)
        await self._drain()

    def _next_with_room(self, pending: deque[PlannedTrial]) -> int | None:
        """Index of the first pending trial whose host can take it now."""
        if not self._host_sems and not self._hosts_lost:
            return 0 if pending else None
        for i, pt in enumerate(pending):
            h = pt.cell.host
            if h in self._hosts_lost and self._in_flight.get(h, 0):
                continue  # a lost host: one trial at a time waits for its reconnect
            hs = self._host_sems.get(h)
            if hs is None or not hs.locked():
                return i
        return None

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run_capacity(self) -> None:
        p = self.profile
        cap = p.capacity
        assert cap is not None
        plan = build_capacity_plan(self.cells, cap.batches, cap.size, p.warmup, p.seed)
        self.progress.planned = sum(len(b.trials) for b in plan)
        for batch in plan:
            await self._gate.wait()
            if self._stopping:
                break
            budget = None
            if cap.cpus or cap.memory_mib:
                from rtax_tui.core.cgroups import Cgroup

                budget = Cgroup.create(
                    f"batch-{self.run_id}-{batch.id}",
                    cpus=cap.cpus,
                    memory_mib=cap.memory_mib,
                    swap_mib=cap.swap_mib,
                    pids=None,
                )
                reaper.current().add_cgroup(budget.relpath)
            try:
                await self._run_batch(batch, cap.deadline_s, budget.relpath if budget else None)
            finally:
                if budget is not None:
                    await asyncio.to_thread(budget.remove)
                    reaper.current().drop_cgroup(budget.relpath)

    async def _run_batch(self, batch: PlannedBatch, deadline_s: float, cg: str | None) -> None:
        barrier = Barrier(len(batch.trials))
        start = time.monotonic_ns()
        tasks = []
        for pt in batch.trials:
            task = asyncio.create_task(self._run_trial(pt, start, barrier, cg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            tasks.append(task)
        try:
            await asyncio.wait_for(asyncio.shield(barrier.released.wait()), deadline_s)
        except TimeoutError:
            barrier.expire()
            for pt in batch.trials:
                if pt.id not in barrier.settled:
                    running = self._interruptible.get(pt.id)
                    if running is not None:
                        running.cancel()
        except asyncio.CancelledError:
            pass
        if barrier.how is None:  # stopped before release
            barrier.expire()
        self.emit(
            "barrier",
            batch=batch.id,
            cell=batch.cell.id,
            size=barrier.size,
            arrived=barrier.arrived,
            released=barrier.how,
            ok=barrier.arrived == barrier.size,
            deadline_s=deadline_s,
            warmup=batch.warmup,
            release_ns=time.monotonic_ns() - start,
        )
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- lost substrates -----------------------------------------------------
    def _mark_lost(self, key: tuple[str, str], message: str) -> None:
        if key not in self._lost:
            self._lost[key] = _Lost(reason=message)

    async def _still_lost(self, key: tuple[str, str]) -> str | None:
        """None when `key` is not (or no longer) lost; else why its trials fail fast.

        The driver's check runs at most every LOST_RECHECK_S, shared by the trials
        that wait for it; once it passes, trials of the driver run normally again.
        """
        st = self._lost.get(key)
        if st is None:
            return None
        if st.checking is None:
            if st.checked is not None and time.monotonic() - st.checked < LOST_RECHECK_S:
                return self._lost_message(key, st)
            st.checking = asyncio.ensure_future(self._recheck(key, st))
        return await asyncio.shield(st.checking)

    async def _recheck(self, key: tuple[str, str], st: _Lost) -> str | None:
        try:
            try:
                problems = await asyncio.wait_for(self.drivers[key].check(), LOST_CHECK_TIMEOUT_S)
            except Exception as exc:  # a check that cannot even run: still lost
                problems = None
                st.reason = f"its check failed: {type(exc).__name__}: {exc}"
            if problems == []:
                self._lost.pop(key, None)
                return None
            if problems:
                st.reason = "; ".join(p.reason for p in problems)
            st.checked = time.monotonic()
            return self._lost_message(key, st)
        finally:
            st.checking = None

    @staticmethod
    def _lost_message(key: tuple[str, str], st: _Lost) -> str:
        return (
            f"{key[0]}/{key[1]} was lost earlier in this run and its check still fails "
            f"({st.reason}); the trial was not attempted"
        )

    # -- lost hosts ----------------------------------------------------------
    def _host_dropped(self, name: str, error: Error) -> bool:
        """Whether a failed trial's host is a remote one that dropped (it is marked lost)."""
        host = self.hosts.get(name)
        if name == "local" or host is None:
            return False
        if error[1] != "host_lost" and not host.lost:
            return False
        if error[2].startswith(f"host {name} is lost"):  # its reconnect failed: marked
            return True
        st = self._hosts_lost.get(name)
        if st is None:
            self._hosts_lost[name] = _HostLost(
                reason=error[2], next_try=time.monotonic() + HOST_RETRY_MIN_S
            )
        return True

    async def _host_back(self, name: str) -> str | None:
        """None when the host is connected again; else why this trial fails.

        The trial waits for the host's next reconnect attempt; attempts are shared by
        the trials waiting for them and spaced by an exponential backoff
        (HOST_RETRY_MIN_S doubling up to HOST_RETRY_MAX_S). The scheduler lets one
        trial of a lost host in at a time, so each failed attempt fails one trial
        and the rest stay planned until the host is back or the attempts run on.
        """
        st = self._hosts_lost.get(name)
        if st is None:
            return None
        if st.trying is None:
            st.trying = asyncio.ensure_future(self._reconnect(name, st))
        return await asyncio.shield(st.trying)

    async def _reconnect(self, name: str, st: _HostLost) -> str | None:
        try:
            wait = st.next_try - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await asyncio.wait_for(self.hosts[name].connect(), LOST_CHECK_TIMEOUT_S)
            except Exception as exc:
                st.reason = str(exc) or type(exc).__name__
                st.next_try = time.monotonic() + st.delay
                st.delay = min(st.delay * 2, HOST_RETRY_MAX_S)
                return self._host_lost_message(name, st)
            self._hosts_lost.pop(name, None)
            return None
        finally:
            st.trying = None

    @staticmethod
    def _host_lost_message(name: str, st: _HostLost) -> str:
        return (
            f"host {name} is lost ({st.reason}); the reconnect before this trial "
            "failed (retried with backoff); the trial was not attempted"
        )

    # -- one trial -----------------------------------------------------------
    async def _timed(
        self,
        phase: str,
        fn: Callable[[], Awaitable[Any]],
        timeout: float | None,
        barrier: Barrier | None = None,
    ) -> tuple[int, Any, Error | None]:
        t = time.monotonic_ns()
        result = None
        err: Error | None = None
        try:
            async with asyncio.timeout(timeout):  # no extra task: less overhead than wait_for
                result = await fn()
        except TimeoutError:
            err = (phase, f"{phase}_timeout", f"{phase} did not finish within {timeout:g} s")
        except PhaseFailure as exc:
            err = (phase, exc.kind, exc.message)
        except asyncio.CancelledError:
            if barrier is not None and barrier.expired:
                err = (phase, "barrier_deadline", "the batch's deadline passed first")
            else:
                err = (phase, "interrupted", "the run was stopped")
        except Exception as exc:
            err = (phase, "error", f"{type(exc).__name__}: {exc}")
        return time.monotonic_ns() - t, result, err

    async def _run_trial(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        barrier: Barrier | None = None,
        cgroup_parent: str | None = None,
    ) -> None:
        if self._stopping:  # scheduled, but the run stopped before it began
            if barrier is not None:
                barrier.fail(pt.id)
            return
        cell: Cell = pt.cell
        workload = self.workloads[cell.workload]
        to = self.profile.timeouts
        spec = EnvSpec(
            cell=cell,
            workload=workload,
            limits=self.profile.limits,
            workspace_src=workload.files,
            cgroup_parent=cgroup_parent,
            label=self.run_id,
        )
        prog = self.progress
        prog.started += 1
        prog.in_flight += 1
        # what a live barrier view needs before the batch's `barrier` event
        batch_fields = (
            {"batch_size": barrier.size, "deadline_s": self.profile.capacity.deadline_s}
            if barrier is not None and self.profile.capacity is not None
            else {}
        )
        self.emit(
            "trial_start",
            trial=pt.id,
            cell=cell.id,
            host=cell.host,
            driver=cell.driver,
            workload=cell.workload,
            channel=cell.channel,
            warmup=pt.warmup,
            batch=pt.batch,
            steps=len(workload.steps),
            **batch_fields,
        )
        current = ["create"]

        @asynccontextmanager
        async def sub(name: str) -> AsyncIterator[None]:
            t = time.monotonic_ns()
            ok = False
            try:
                yield
                ok = True
            finally:
                dur = time.monotonic_ns() - t
                self.emit("phase", trial=pt.id, name=f"{current[0]}.{name}", dur_ns=dur, ok=ok)

        task = asyncio.current_task()
        if task is not None:
            self._interruptible[pt.id] = task
        covered = 0
        waited = 0
        error: Error | None = None
        actions_ok = True
        env = None
        arrived = False
        key = (cell.host, cell.driver)
        try:
            if cell.host in self._hosts_lost:
                t = time.monotonic_ns()
                try:
                    why = await self._host_back(cell.host)
                    if why is not None:
                        error = ("create", "host_lost", why)
                except asyncio.CancelledError:
                    error = ("create", "interrupted", "the run was stopped")
                if error is not None:
                    dur = time.monotonic_ns() - t
                    covered += dur
                    self.emit("phase", trial=pt.id, name="create", dur_ns=dur, ok=False)
            if error is None and key in self._lost:
                t = time.monotonic_ns()
                try:
                    lost = await self._still_lost(key)
                    if lost is not None:
                        error = ("create", "substrate_lost", lost)
                except asyncio.CancelledError:
                    if barrier is not None and barrier.expired:
                        error = ("create", "barrier_deadline", "the batch's deadline passed first")
                    else:
                        error = ("create", "interrupted", "the run was stopped")
                if error is not None:
                    dur = time.monotonic_ns() - t
                    covered += dur
                    self.emit("phase", trial=pt.id, name="create", dur_ns=dur, ok=False)
            if error is None:
                try:
                    env = self.drivers[key].environment(spec, sub)
                except Exception as exc:
                    error = ("create", "error", f"{type(exc).__name__}: {exc}")
            if env is not None:
                for phase, fn, timeout in (
                    ("create", env.create, to.create),
                    ("ready", env.ready, to.ready),
                ):
                    current[0] = phase
                    dur, _, error = await self._timed(phase, fn, timeout, barrier)
                    covered += dur
                    self.emit("phase", trial=pt.id, name=phase, dur_ns=dur, ok=error is None)
                    if error is not None:
                        break
            if error is None and env is not None:
                current[0] = "action"
                for i, step in enumerate(workload.steps):
                    timeout = step.timeout_s or to.action
                    dur, res, err = await self._timed(
                        "action", partial(env.action, step, timeout), timeout, barrier
                    )
                    covered += dur
                    if err is not None:
                        self.emit(
                            "action", trial=pt.id, i=i, dur_ns=dur, rc=None, ok=False, out_bytes=0
                        )
                        error = ("action", err[1], f"step {i} ({step.argv[0]}): {err[2]}")
                        break
                    ok = step.matches(res.rc, res.output)
                    actions_ok = actions_ok and ok
                    extra = {"remote_ns": res.remote_ns} if res.remote_ns is not None else {}
                    self.emit(
                        "action",
                        trial=pt.id,
                        i=i,
                        dur_ns=dur,
                        rc=res.rc,
                        ok=ok,
                        out_bytes=len(res.output),
                        **extra,
                    )
                    if self._stopping:
                        error = ("action", "interrupted", "the run was stopped")
                        break
            if barrier is not None and error is None and actions_ok:
                # arriving means the work was done: an environment whose steps failed
                # (an OOM kill under the budget, say) stays out, in the denominator
                barrier.arrive(pt.id)
                arrived = True
                t = time.monotonic_ns()
                try:
                    await barrier.released.wait()
                except asyncio.CancelledError:
                    pass
                waited = time.monotonic_ns() - t
                self.emit(
                    "phase",
                    trial=pt.id,
                    name="barrier.wait",
                    dur_ns=waited,
                    ok=not barrier.expired,
                )
        finally:
            self._interruptible.pop(pt.id, None)
            if barrier is not None and not arrived:
                barrier.fail(pt.id)
            if env is not None:
                current[0] = "teardown"
                dur, _, terr = await self._timed("teardown", env.teardown, to.teardown)
                covered += dur
                self.emit("phase", trial=pt.id, name="teardown", dur_ns=dur, ok=terr is None)
                if terr is not None and error is None:
                    error = terr
            total = time.monotonic_ns() - scheduled_ns
            orch = max(0, total - covered - waited)
            self.emit("phase", trial=pt.id, name="orchestration", dur_ns=orch, ok=True)
            if error is not None and self._host_dropped(cell.host, error):
                if error[1] != "host_lost":
                    error = (error[0], "host_lost", f"host {cell.host} dropped: {error[2]}")
            if error is not None and error[1] == "substrate_lost":
                self._mark_lost(key, error[2])
            ok = error is None
            valid = ok and actions_ok
            self.emit(
                "trial_end",
                trial=pt.id,
                ok=ok,
                valid=valid,
                error=None
                if error is None
                else {"phase": error[0], "kind": error[1], "message": error[2]},
            )
            self._trials_ended += 1
            prog.in_flight -= 1
            prog.done += 1
            prog.per_cell_done[cell.id] = prog.per_cell_done.get(cell.id, 0) + 1
            if not ok:
                prog.failed += 1
                prog.last_error = f"trial {pt.id} {cell.id}: {error[1]}: {error[2]}"  # type: ignore[index]
            elif not valid:
                prog.invalid += 1


def check_drivers_ready(problems: dict[str, list[Any]]) -> None:
    """Raise before any trial when a needed driver cannot run here."""
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        parts = []
        for name, probs in bad.items():
            parts.append(f"{name}: " + "; ".join(f"{p.reason} (fix: {p.fix})" for p in probs))
        raise RtaxError("cannot run: " + " | ".join(parts))
