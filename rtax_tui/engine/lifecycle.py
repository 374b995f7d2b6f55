"""One trial's lifecycle: create, ready, the actions, (the barrier and its release), teardown.

Every phase is timed here with `time.monotonic_ns()` around the awaited call;
what the phases do not cover, from scheduling to the end of teardown, is recorded
as `orchestration`, so that the phases of a trial add up to its wall time. The
teardown always runs once an environment object exists, whatever happened before
(a stop, a timeout, a lost host), and a stop never cuts it short.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from rtax_tui.engine.capacity import Barrier
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.engine.pool import PooledEnv, Pools
from rtax_tui.engine.profile import Profile
from rtax_tui.model import events
from rtax_tui.model.errors import ErrorKind, TrialError, interrupted, timeout_kind
from rtax_tui.model.events import Emitter
from rtax_tui.model.fold import verdict
from rtax_tui.model.spec import Cell, EnvSpec, PhaseFailure, Workload
from rtax_tui.model.waits import phase_waits


async def timed(
    phase: str,
    fn: Callable[[], Awaitable[Any]],
    timeout: float | None,
    barrier: Barrier | None = None,
) -> tuple[int, Any, TrialError | None]:
    """Run one phase under its timeout: (duration in ns, its result, what went wrong)."""
    t = time.monotonic_ns()
    result = None
    err: TrialError | None = None
    with phase_waits() as waits:
        try:
            async with asyncio.timeout(timeout):  # no extra task: less overhead than wait_for
                result = await fn()
        except TimeoutError:
            msg = f"{phase} did not finish within {timeout:g} s"
            waited = waits.describe()
            err = TrialError(phase, timeout_kind(phase), f"{msg}: {waited}" if waited else msg)
        except PhaseFailure as exc:
            err = TrialError(phase, exc.kind, exc.message)
        except asyncio.CancelledError:
            err = interrupted(phase, barrier is not None and barrier.expired)
        except Exception as exc:
            err = TrialError(phase, ErrorKind.ERROR, f"{type(exc).__name__}: {exc}")
    return time.monotonic_ns() - t, result, err


def _oom_killed(barrier: Barrier | None, rc: int) -> bool:
    """A step killed by SIGKILL (rc 137 from a shell, -9 from a direct child) in a batch
    whose budget has seen an OOM kill: the OOM killer's work."""
    return barrier is not None and rc in (137, -9) and barrier.oom_seen() > 0


def _channel_lost(err: TrialError) -> bool:
    """An action that failed because its channel broke (not a timeout or a stop)."""
    return err.kind not in (ErrorKind.INTERRUPTED, ErrorKind.BARRIER_DEADLINE) and not str(
        err.kind
    ).endswith("_timeout")


def _oom_error(phase: str, what: str, barrier: Barrier | None) -> TrialError:
    kills = barrier.oom_seen() if barrier is not None else 0
    return TrialError(
        phase,
        ErrorKind.OOM,
        f"{what}: killed by the OOM killer (the batch's budget saw {kills} OOM kill(s))",
    )


class TrialRunner:
    """Runs planned trials through the drivers and emits their events."""

    def __init__(
        self,
        profile: Profile,
        *,
        drivers: dict[tuple[str, str], Any],
        workloads: dict[str, Workload],
        run_id: str,
        emit: Emitter,
        control: RunControl,
        progress: Progress,
        substrates: SubstrateHealth,
        hosts: HostHealth,
        pools: Pools | None = None,
    ) -> None:
        self.profile = profile
        self.drivers = drivers
        self.workloads = workloads
        self.run_id = run_id
        self.emit = emit
        self.control = control
        self.progress = progress
        self.substrates = substrates
        self.hosts = hosts
        self.pools = pools  # the warm pools of pooled cells (core.pool)
        self.ended = 0  # trials that emitted their `trial_end`
        self._nth: dict[str, int] = {}  # trials begun per cell (replay variants)

    async def _host_refusal(self, pt: PlannedTrial, barrier: Barrier | None) -> TrialError | None:
        """Why the trial is not attempted: its host is lost and the reconnect failed."""
        host = pt.cell.host
        if not self.hosts.is_lost(host):
            return None
        try:
            why = await self.hosts.back(host)
        except asyncio.CancelledError:
            return interrupted("create", False)
        if why is None:
            return None
        return TrialError("create", ErrorKind.HOST_LOST, why, reconnect_failed=True)

    async def _substrate_refusal(
        self, pt: PlannedTrial, barrier: Barrier | None
    ) -> TrialError | None:
        """Why the trial is not attempted: its substrate is lost and its check still fails."""
        key = (pt.cell.host, pt.cell.driver)
        if not self.substrates.is_lost(key):
            return None
        try:
            why = await self.substrates.still_lost(key)
        except asyncio.CancelledError:
            return interrupted("create", barrier is not None and barrier.expired)
        if why is None:
            return None
        return TrialError("create", ErrorKind.SUBSTRATE_LOST, why)

    def spec_for(
        self, cell: Cell, cgroup_parent: str | None = None, workload: Workload | None = None
    ) -> EnvSpec:
        """What a driver needs to build an environment of `cell` (a trial's, with the
        workload it runs, or a pool's, with the cell's)."""
        if workload is None:
            workload = self.workloads[cell.workload]
        return EnvSpec(
            cell=cell,
            workload=workload,
            limits=self.profile.limits,
            workspace_src=workload.files,
            cgroup_parent=cgroup_parent,
            label=self.run_id,
        )

    async def run(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        barrier: Barrier | None = None,
        cgroup_parent: str | None = None,
    ) -> None:
        if self.control.stopping:  # scheduled, but the run stopped before it began
            if barrier is not None:
                barrier.fail(pt.id)
            return
        emit = self.emit
        cell = pt.cell
        workload = self._workload(cell.id, self.workloads[cell.workload])
        to = self.profile.timeouts
        spec = self.spec_for(cell, cgroup_parent, workload)
        prog = self.progress
        prog.started += 1
        prog.in_flight += 1
        cap = self.profile.capacity
        with_batch = barrier is not None and cap is not None
        emit(
            events.trial_start(
                trial=pt.id,
                cell=cell.id,
                host=cell.host,
                driver=cell.driver,
                workload=cell.workload,
                channel=cell.channel,
                warmup=pt.warmup,
                batch=pt.batch,
                steps=len(workload.steps),
                replay=None if workload.replay is None else workload.replay.to_json(),
                batch_size=barrier.size if with_batch and barrier is not None else None,
                deadline_s=cap.deadline_s if with_batch and cap is not None else None,
                mode=cell.mode,
            )
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
                emit(events.phase(pt.id, f"{current[0]}.{name}", dur, ok))

        task = asyncio.current_task()
        if task is not None:
            self.control.interruptible[pt.id] = task
        covered = 0
        waited = 0
        error: TrialError | None = None
        actions_ok = True
        env = None
        pooled: PooledEnv | None = None
        arrived = False
        key = (cell.host, cell.driver)
        try:
            for refusal in (self._host_refusal, self._substrate_refusal):
                t = time.monotonic_ns()
                error = await refusal(pt, barrier)
                if error is not None:  # failed fast: a `create` that was not attempted
                    dur = time.monotonic_ns() - t
                    covered += dur
                    emit(events.phase(pt.id, "create", dur, False))
                    break
            if error is None and cell.mode == "pool":
                current[0] = "acquire"
                pooled, dur, error = await self._acquire(pt, barrier)
                covered += dur
                env = None if pooled is None else pooled.env
            elif error is None:
                try:
                    env = self.drivers[key].environment(spec, sub)
                except Exception as exc:
                    error = TrialError("create", ErrorKind.ERROR, f"{type(exc).__name__}: {exc}")
            if env is not None and pooled is None:
                for phase, fn, timeout in (
                    ("create", env.create, to.create),
                    ("ready", env.ready, to.ready),
                ):
                    current[0] = phase
                    dur, _, error = await timed(phase, fn, timeout, barrier)
                    covered += dur
                    emit(events.phase(pt.id, phase, dur, error is None))
                    if error is not None:
                        break
            if error is None and env is not None:
                current[0] = "action"
                for i, step in enumerate(workload.steps):
                    timeout = step.timeout_s or to.action
                    act = functools.partial(step.perform, env, timeout)
                    dur, res, err = await timed("action", act, timeout, barrier)
                    covered += dur
                    if err is not None:
                        emit(
                            events.action(
                                pt.id, i, dur, None, False, 0, **step.observed(None, dur, None)
                            )
                        )
                        if _channel_lost(err) and barrier is not None and barrier.oom_seen():
                            # the environment's shell or agent died under an OOM kill
                            error = _oom_error("action", f"step {i} ({step.argv[0]})", barrier)
                        else:
                            error = TrialError(
                                "action", err.kind, f"step {i} ({step.argv[0]}): {err.message}"
                            )
                        break
                    ok = step.matches(res.rc, res.output)
                    actions_ok = actions_ok and ok
                    emit(
                        events.action(
                            pt.id, i, dur, res.rc, ok, len(res.output), res.remote_ns,
                            out_dropped=res.dropped, **step.observed(res.rc, dur, res.remote_ns),
                        )
                    )  # fmt: skip
                    if not ok and _oom_killed(barrier, res.rc):
                        error = _oom_error("action", f"step {i} ({step.argv[0]})", barrier)
                        break
                    if self.control.stopping:
                        error = TrialError("action", ErrorKind.INTERRUPTED, "the run was stopped")
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
                emit(events.phase(pt.id, "barrier.wait", waited, not barrier.expired))
                release = workload.release
                if release is not None and env is not None and not self.control.stopping:
                    # the release, through the cell's channel: the environment lets go
                    current[0] = "barrier"
                    rto = release.timeout_s or to.action
                    rel = functools.partial(env.action, release, rto)
                    dur, res, rerr = await timed("barrier.release", rel, rto, barrier)
                    covered += dur
                    held = rerr is None and release.matches(res.rc, res.output)
                    emit(events.phase(pt.id, "barrier.release", dur, held))
                    barrier.let_go(pt.id, held)
                    if not held:
                        if barrier.oom_seen():
                            error = _oom_error("barrier.release", "the held memory", barrier)
                        elif rerr is not None:
                            error = rerr
                        else:
                            out = res.output.decode(errors="replace").strip()[-200:]
                            error = TrialError(
                                "barrier.release",
                                ErrorKind.ERROR,
                                f"nothing held at the release (rc {res.rc}): {out}",
                            )
        finally:
            self.control.interruptible.pop(pt.id, None)
            if barrier is not None and not arrived:
                barrier.fail(pt.id)
            if barrier is not None and arrived:
                barrier.let_go(pt.id)  # no-op when its release step already let go
            if pooled is not None:
                current[0] = "release"
                t = time.monotonic_ns()
                assert self.pools is not None
                self.pools.get(cell).release(pooled, healthy=error is None)
                dur = time.monotonic_ns() - t
                covered += dur
                emit(events.phase(pt.id, "release", dur, True))
            elif env is not None:
                current[0] = "teardown"
                dur, _, terr = await timed("teardown", env.teardown, to.teardown)
                covered += dur
                emit(events.phase(pt.id, "teardown", dur, terr is None))
                if terr is not None and error is None:
                    error = terr
            total = time.monotonic_ns() - scheduled_ns
            orch = max(0, total - covered - waited)
            emit(events.phase(pt.id, "orchestration", orch, True))
            self._end(pt, error, actions_ok)

    def _workload(self, cell: str, workload: Workload) -> Workload:
        """The workload a trial of `cell` runs: a replay of several trajectories takes
        them in turn, trial after trial of the cell (warm-ups included)."""
        if not workload.variants:
            return workload
        k = self._nth.get(cell, 0)
        self._nth[cell] = k + 1
        return workload.variants[k % len(workload.variants)]

    async def _acquire(
        self, pt: PlannedTrial, barrier: Barrier | None
    ) -> tuple[PooledEnv | None, int, TrialError | None]:
        """A pooled trial's start: a ready environment from its cell's pool. Emits
        `acquire` (and `acquire.wait`, when the pool had none ready)."""
        if self.pools is None:
            raise RuntimeError("a pooled cell without pools")
        pool = self.pools.get(pt.cell)
        to = self.profile.timeouts
        dur, got, error = await timed("acquire", pool.acquire, to.create + to.ready, barrier)
        if got is not None:
            pe, waited = got
            if waited:
                self.emit(events.phase(pt.id, "acquire.wait", waited, True))
            self.emit(events.phase(pt.id, "acquire", dur, True))
            return pe, dur, None
        self.emit(events.phase(pt.id, "acquire", dur, False))
        return None, dur, error

    def _end(self, pt: PlannedTrial, error: TrialError | None, actions_ok: bool) -> None:
        """Classify the trial's error (a dropped host, a lost substrate) and record its end."""
        cell = pt.cell
        if error is not None and self.hosts.dropped(cell.host, error):
            if error.kind != ErrorKind.HOST_LOST:
                error = TrialError(
                    error.phase, ErrorKind.HOST_LOST, f"host {cell.host} dropped: {error.message}"
                )
        if error is not None and error.kind == ErrorKind.SUBSTRATE_LOST:
            self.substrates.mark_lost((cell.host, cell.driver), error.message)
        ok = error is None
        valid = ok and actions_ok
        self.emit(events.trial_end(pt.id, valid, error))
        self.ended += 1
        prog = self.progress
        prog.in_flight -= 1
        prog.done += 1
        prog.per_cell_done[cell.id] = prog.per_cell_done.get(cell.id, 0) + 1
        if error is not None:
            prog.last_error = f"trial {pt.id} {cell.id}: {error.kind}: {error.message}"
        v = verdict(pt.warmup, True, ok, valid)  # the report's rule: warm-ups apart
        if v == "failed":
            prog.failed += 1
        elif v == "invalid":
            prog.invalid += 1
