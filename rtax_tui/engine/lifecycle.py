"""One trial's lifecycle: create, ready, the actions, (the barrier and its release), teardown.

Every phase is timed here with `time.monotonic_ns()` around the awaited call;
what the phases do not cover, from scheduling to the end of teardown, is recorded
as `orchestration`, so that the phases of a trial add up to its wall time. The
teardown always runs once an environment object exists, whatever happened before
(a stop, a timeout, a lost host), and a stop never cuts it short.

`TrialRunner.run` is the trial as a sequence of named steps, each a method that
emits its own events and leaves what the next one needs in the trial's
`TrialState`: admission (a lost host or substrate refuses the trial), the
environment (a cold create + ready, or a pooled acquire), the actions, the batch's
barrier and release (capacity batches), the cell's programs (its first trial to get
there only: `model.programs`), then, whatever happened, leaving the batch,
the environment's end (teardown, or release to its pool) and the accounting
(`orchestration`, `trial_end`, the progress counters). A step that finds the trial
already failed (`error` set) does nothing; the first failure is the trial's.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.capacity import Barrier
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.engine.pool import PooledEnv, Pools
from rtax_tui.engine.profile import Profile
from rtax_tui.model import events, programs
from rtax_tui.model.errors import ErrorKind, TrialError, interrupted, timeout_kind
from rtax_tui.model.events import Emitter
from rtax_tui.model.fold import verdict
from rtax_tui.model.spec import (
    ActionResult,
    Cell,
    EnvSpec,
    PhaseFailure,
    ProbeFailed,
    Step,
    Timeouts,
    Workload,
)
from rtax_tui.model.waits import phase_waits

if TYPE_CHECKING:  # the engine sits above the drivers (pyproject's layers)
    from rtax_tui.drivers.base import Driver, Environment


# The programs query's timeout at most (the action timeout, when shorter).
PROGRAMS_TIMEOUT_S = 30.0


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
    with phase_waits(timeout) as waits:
        try:
            async with asyncio.timeout(timeout):  # no extra task: less overhead than wait_for
                result = await fn()
        except TimeoutError:
            msg = f"{phase} did not finish within {timeout:g} s"
            waited = waits.describe()
            err = TrialError(phase, timeout_kind(phase), f"{msg}: {waited}" if waited else msg)
        except ProbeFailed as exc:  # ready's probe: the OOM killer's, as an action's
            err = (
                _oom_error(phase, "the probe `true`", barrier)
                if _oom_killed(barrier, exc.rc)
                else TrialError(phase, exc.kind, exc.message)
            )
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


@dataclass(eq=False)
class TrialState:
    """One trial on its way through `TrialRunner.run`'s steps: what each step leaves
    for the next, so that the steps share no local variables."""

    pt: PlannedTrial
    scheduled_ns: int  # monotonic: when the scheduler launched it (orchestration's start)
    barrier: Barrier | None  # its capacity batch's, if any
    workload: Workload  # the one it runs (a replay's variant for this trial)
    spec: EnvSpec
    timeouts: Timeouts
    emit: Emitter
    current: str = "create"  # the phase a driver's sub-phases (`sub`) belong to
    covered: int = 0  # ns inside timed phases (orchestration is the rest)
    waited: int = 0  # ns at the barrier (neither a phase's nor orchestration's)
    aside: int = 0  # ns asking the cell's programs (neither either: not the trial's work)
    spoiled: bool = False  # that query failed: a pooled environment is not reused
    error: TrialError | None = None  # the first failure: it ends the trial
    actions_ok: bool = True  # every step's result matched what it expects
    env: Environment | None = None  # once one exists (made or acquired)
    pooled: PooledEnv | None = None  # the pool's wrapper of `env`, for a pooled trial
    arrived: bool = False  # arrived at its batch's barrier

    @asynccontextmanager
    async def sub(self, name: str) -> AsyncIterator[None]:
        """A driver's sub-phase of the current phase (`create.pull`, say), timed and
        emitted as `<phase>.<name>` when it ends, whether it succeeded or not."""
        t = time.monotonic_ns()
        ok = False
        try:
            yield
            ok = True
        finally:
            dur = time.monotonic_ns() - t
            self.emit(events.phase(self.pt.id, f"{self.current}.{name}", dur, ok))


class TrialRunner:
    """Runs planned trials through the drivers and emits their events."""

    def __init__(
        self,
        profile: Profile,
        *,
        drivers: dict[tuple[str, str], Driver],
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
        self.pools = pools  # the warm pools of pooled cells (engine.pool)
        self.ended = 0  # trials that emitted their `trial_end`
        self._nth: dict[str, int] = {}  # trials begun per cell (replay variants)
        self._programs_asked: set[str] = set()  # cells whose programs were asked (once)

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
            workspace_alias=None if workload.replay is None else workload.replay.alias,
            image=cell.image or None,
        )

    def _replay_json(self, cell: Cell, workload: Workload, spec: EnvSpec) -> dict[str, Any] | None:
        """`trial_start.replay`: the trajectory, its workspace's source, its root, and
        whether this cell's environments show the workspace there (`at_root`)."""
        if workload.replay is None:
            return None
        driver = self.drivers.get((cell.host, cell.driver))
        places = bool(getattr(driver, "places_workspace_alias", False))
        return workload.replay.to_json() | {"at_root": places and spec.workspace_alias is not None}

    async def run(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        barrier: Barrier | None = None,
        cgroup_parent: str | None = None,
    ) -> None:
        """One trial, step by step (see the module's docstring). The steps under `finally`
        run whatever happened before them, a stop or an engine bug included."""
        if self._stopped_before_start(pt, barrier):
            return
        tr = self._start(pt, scheduled_ns, barrier, cgroup_parent)
        try:
            await self._admit(tr)
            await self._environment(tr)
            await self._actions(tr)
            await self._barrier(tr)
            await self._programs(tr)
        finally:
            self.control.interruptible.pop(pt.id, None)  # a stop never cuts the rest short
            self._leave_batch(tr)
            await self._end_environment(tr)
            self._account(tr)

    # -- the steps, in their order -----------------------------------------------
    def _stopped_before_start(self, pt: PlannedTrial, barrier: Barrier | None) -> bool:
        """Scheduled, but the run stopped before it began: the trial leaves no event
        (it never started) and only settles its place in its batch, so that the
        barrier does not wait for it."""
        if not self.control.stopping:
            return False
        if barrier is not None:
            barrier.fail(pt.id)
        return True

    def _start(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        barrier: Barrier | None,
        cgroup_parent: str | None,
    ) -> TrialState:
        """The trial begins: counted as started and in flight, `trial_start` says what it
        runs (and its batch), and a stop or its batch's deadline may now cancel it."""
        cell = pt.cell
        workload = self._workload(cell.id, self.workloads[cell.workload])
        timeouts = self.profile.timeouts
        spec = self.spec_for(cell, cgroup_parent, workload)
        prog = self.progress
        prog.started += 1
        prog.in_flight += 1
        size = None if barrier is None else barrier.size
        self.emit(self.start_event(pt, scheduled_ns, workload, spec, size))
        tr = TrialState(pt, scheduled_ns, barrier, workload, spec, timeouts, self.emit)
        task = asyncio.current_task()
        if task is not None:
            self.control.interruptible[pt.id] = task
        return tr

    def start_event(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        workload: Workload,
        spec: EnvSpec,
        batch_size: int | None = None,
    ) -> events.TrialStartEvent:
        """The trial's `trial_start`: what it runs (its mode, its episode's arrival, its
        replay, its image), its batch. The one builder of a run's trial starts: a Ray
        node's trial that its node never accounted for starts with it too
        (engine.raynodes), so that readers group and pair it as any other. `batch_size`:
        the environments at its batch's barrier (on its host), for a capacity batch's."""
        cell = pt.cell
        cap = self.profile.capacity
        with_batch = batch_size is not None and cap is not None
        return events.trial_start(
            trial=pt.id,
            cell=cell.id,
            host=cell.host,
            driver=cell.driver,
            workload=cell.workload,
            channel=cell.channel,
            warmup=pt.warmup,
            batch=pt.batch,
            steps=len(workload.steps),
            replay=self._replay_json(cell, workload, spec),
            batch_size=batch_size if with_batch else None,
            deadline_s=cap.deadline_s if with_batch and cap is not None else None,
            mode=cell.mode,
            arrival=None if pt.episode is None else cell.arrival,
            episode=pt.episode,
            arrival_ns=None if pt.episode is None else max(0, scheduled_ns - self.emit.t0),
            image=cell.image or None,
        )

    async def _admit(self, tr: TrialState) -> None:
        """Admission: a trial on a lost host (whose reconnect fails) or a lost substrate
        (whose check still fails) is not attempted. It fails fast, as a `create` that
        was not attempted, timed for what the refusal took (a reconnect, a recheck)."""
        for refusal in (self._host_refusal, self._substrate_refusal):
            t = time.monotonic_ns()
            tr.error = await refusal(tr.pt, tr.barrier)
            if tr.error is not None:
                dur = time.monotonic_ns() - t
                tr.covered += dur
                self.emit(events.phase(tr.pt.id, "create", dur, False))
                return

    async def _environment(self, tr: TrialState) -> None:
        """The environment's source, by the cell's mode: acquired ready from the cell's
        warm pool (`pool`), or made by the trial itself (`cold`)."""
        if tr.error is not None:
            return
        if tr.pt.cell.mode == "pool":
            await self._from_pool(tr)
        else:
            await self._cold(tr)

    async def _from_pool(self, tr: TrialState) -> None:
        """A pooled trial's environment: `acquire` (see `_acquire`) stands for create +
        ready, which the pool did beforehand and records as its own work."""
        tr.current = "acquire"
        tr.pooled, dur, tr.error = await self._acquire(tr.pt, tr.barrier)
        tr.covered += dur
        tr.env = None if tr.pooled is None else tr.pooled.env

    async def _cold(self, tr: TrialState) -> None:
        """A cold trial's environment: the driver's object (a driver that cannot make one
        fails the trial at `create`), then `create` and `ready`, each timed under its
        timeout. Once the object exists it is torn down, whatever happens next."""
        cell = tr.pt.cell
        try:
            tr.env = self.drivers[(cell.host, cell.driver)].environment(tr.spec, tr.sub)
        except Exception as exc:
            tr.error = TrialError("create", ErrorKind.ERROR, f"{type(exc).__name__}: {exc}")
        if tr.env is None:
            return
        to = tr.timeouts
        if tr.spec.image is not None:  # the mode's starting state: not the trial's cost
            dur, _, tr.error = await timed("image", self._before_image(tr.env), to.create)
            tr.waited += dur
            self.emit(events.phase(tr.pt.id, "image.before", dur, tr.error is None))
            if tr.error is not None:
                return
        steps = [("create", tr.env.create, to.create), ("ready", tr.env.ready, to.ready)]
        if tr.spec.image is not None:  # the image's delivery, under create's timeout
            steps.insert(0, ("image", tr.env.deliver_image, to.create))
        for phase, fn, timeout in steps:
            tr.current = phase
            dur, _, tr.error = await timed(phase, fn, timeout, tr.barrier)
            tr.covered += dur
            self.emit(events.phase(tr.pt.id, phase, dur, tr.error is None))
            if tr.error is not None:
                return

    def _before_image(self, env: Environment) -> Callable[[], Awaitable[None]]:
        """The environment's `before_image`, then the page cache dropped if the profile
        says so (`page_cache`): both before the image phase, neither timed as it."""

        async def before() -> None:
            await env.before_image()
            if self.profile.page_cache == "dropped":
                from rtax_tui.drivers.toolkit.delivery import drop_page_cache

                await asyncio.to_thread(drop_page_cache)

        return before

    async def _actions(self, tr: TrialState) -> None:
        """The workload's steps, in order, each under its timeout: the work the trial
        measures. The first step that fails (or is killed by the OOM killer) ends them,
        and so does a stop, after the step under way; a step whose result does not match
        what it expects makes the trial invalid, not failed."""
        if tr.error is not None or tr.env is None:
            return
        tr.current = "action"
        for i, step in enumerate(tr.workload.steps):
            timeout = step.timeout_s or tr.timeouts.action
            act = functools.partial(step.perform, tr.env, timeout)
            dur, res, err = await timed("action", act, timeout, tr.barrier)
            tr.covered += dur
            if err is not None:
                tr.error = self._action_failed(tr, i, step, dur, err)
                return
            tr.error = self._action_done(tr, i, step, dur, res)
            if tr.error is not None:
                return

    def _action_failed(
        self, tr: TrialState, i: int, step: Step, dur: int, err: TrialError
    ) -> TrialError:
        """A step that did not finish: its `action` event (no exit code), and the trial's
        error, blamed on the OOM killer when the step's channel broke in a batch whose
        budget saw an OOM kill (the environment's shell or agent died under it)."""
        self.emit(events.action(tr.pt.id, i, dur, None, False, 0, **step.observed(None, dur, None)))
        if _channel_lost(err) and tr.barrier is not None and tr.barrier.oom_seen():
            return _oom_error("action", f"step {i} ({step.argv[0]})", tr.barrier)
        return TrialError("action", err.kind, f"step {i} ({step.argv[0]}): {err.message}")

    def _action_done(
        self, tr: TrialState, i: int, step: Step, dur: int, res: ActionResult
    ) -> TrialError | None:
        """A step that finished: its `action` event, with whether its result matched.
        What ends the trial's actions there: a SIGKILL in a batch whose budget saw an OOM
        kill (the OOM killer's work), or a stop."""
        ok = step.matches(res.rc, res.output)
        tr.actions_ok = tr.actions_ok and ok
        self.emit(
            events.action(
                tr.pt.id, i, dur, res.rc, ok, len(res.output), res.remote_ns,
                out_dropped=res.dropped, **step.observed(res.rc, dur, res.remote_ns),
            )
        )  # fmt: skip
        if not ok and _oom_killed(tr.barrier, res.rc):
            return _oom_error("action", f"step {i} ({step.argv[0]})", tr.barrier)
        if self.control.stopping:
            return TrialError("action", ErrorKind.INTERRUPTED, "the run was stopped")
        return None

    async def _barrier(self, tr: TrialState) -> None:
        """A batch's trial that did its work arrives at the barrier and waits, holding
        what its workload holds, until the batch is released (`barrier.wait`, not a
        phase of its own: neither covered nor orchestration); then it lets go, through
        its release step when the workload has one (`_release_slot`). Arriving means
        the work was done: an environment whose steps failed (an OOM kill under the
        budget, say) stays out, in the denominator."""
        barrier = tr.barrier
        if barrier is None or tr.error is not None or not tr.actions_ok:
            return
        barrier.arrive(tr.pt.id)
        tr.arrived = True
        t = time.monotonic_ns()
        try:
            await barrier.released.wait()
        except asyncio.CancelledError:
            pass
        if tr.workload.release is not None and tr.env is not None:
            await self._release_slot(tr, barrier, t)
            return
        # Nothing to send through the channel: woken is let go. Then yield once, so that
        # every trial the release woke (queued behind this one) lets go before this one
        # starts its teardown, whose synchronous start would otherwise stand in the way
        # of the rest (N - 1 teardown starts inside the last one's release latency).
        tr.waited = time.monotonic_ns() - t
        self.emit(events.phase(tr.pt.id, "barrier.wait", tr.waited, not barrier.expired))
        barrier.let_go(tr.pt.id)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass

    async def _release_slot(self, tr: TrialState, barrier: Barrier, t: int) -> None:
        """A woken trial with a release step waits for one of the batch's release slots
        (`Barrier.slots`): its `barrier.wait` runs from its arrival until its release
        step is sent. A stop while it waits sends none (`_leave_batch` lets it go)."""
        try:
            await barrier.slots.acquire()
        except asyncio.CancelledError:
            tr.waited = time.monotonic_ns() - t
            self.emit(events.phase(tr.pt.id, "barrier.wait", tr.waited, False))
            return
        try:
            tr.waited = time.monotonic_ns() - t
            self.emit(events.phase(tr.pt.id, "barrier.wait", tr.waited, not barrier.expired))
            await self._release(tr, barrier)
        finally:
            barrier.slots.release()

    async def _release(self, tr: TrialState, barrier: Barrier) -> None:
        """The release, through the cell's channel (the workload's `release` step): the
        environment lets go of what it held, and the batch is timed until the last one
        has. Nothing left to let go of fails the trial (by OOM, when the budget saw one)."""
        release = tr.workload.release
        if release is None or tr.env is None or self.control.stopping:
            return
        tr.current = "barrier"
        rto = release.timeout_s or tr.timeouts.action
        rel = functools.partial(tr.env.action, release, rto)
        dur, res, rerr = await timed("barrier.release", rel, rto, barrier)
        tr.covered += dur
        held = rerr is None and release.matches(res.rc, res.output)
        self.emit(events.phase(tr.pt.id, "barrier.release", dur, held))
        barrier.let_go(tr.pt.id, held)
        if held:
            return
        if barrier.oom_seen():
            tr.error = _oom_error("barrier.release", "the held memory", barrier)
        elif rerr is not None:
            tr.error = rerr
        else:
            out = res.output.decode(errors="replace").strip()[-200:]
            tr.error = TrialError(
                "barrier.release",
                ErrorKind.ERROR,
                f"nothing held at the release (rc {res.rc}): {out}",
            )

    async def _programs(self, tr: TrialState) -> None:
        """Once per cell, in its first trial that got through its steps: which file each
        of the workload's programs is inside the environment, asked through the cell's
        own channel after the trial's work (`model.programs`: the answer is hostile text,
        bounded), recorded as a `programs` event. The query is timed apart (`aside`),
        neither a phase nor orchestration; every other trial pays one set lookup."""
        cell = tr.pt.cell.id
        if cell in self._programs_asked or tr.error is not None or tr.env is None:
            return
        if self.control.stopping:
            return
        self._programs_asked.add(cell)
        names = programs.names_of(tr.workload)
        if not names:
            return
        step = Step(programs.query_argv(names))
        timeout = min(PROGRAMS_TIMEOUT_S, tr.timeouts.action)
        query = functools.partial(tr.env.action, step, timeout)
        dur, res, err = await timed("programs", query, timeout)
        tr.aside += dur
        tr.spoiled = err is not None
        got = programs.parse(
            b"" if res is None else res.output,
            names,
            None if res is None else res.rc,
            None if err is None else err.message,
        )
        self.emit(events.programs(tr.pt.id, cell, **got.to_json()))

    def _leave_batch(self, tr: TrialState) -> None:
        """The trial's place in its batch, settled before its teardown: a trial that never
        arrived failed (so the barrier waits for it no longer), one that arrived has let
        go (a no-op when its release step already did)."""
        barrier = tr.barrier
        if barrier is not None and not tr.arrived:
            barrier.fail(tr.pt.id)
        if barrier is not None and tr.arrived:
            barrier.let_go(tr.pt.id)

    async def _end_environment(self, tr: TrialState) -> None:
        """The environment's end, whatever happened: a pooled one goes back to its pool
        (`release`: reset or replaced in the background, never reused after a failure),
        a cold one is torn down (`teardown`, whose failure fails a trial that had none)."""
        if tr.pooled is not None:
            tr.current = "release"
            t = time.monotonic_ns()
            assert self.pools is not None
            healthy = tr.error is None and not tr.spoiled
            self.pools.get(tr.pt.cell).release(tr.pooled, healthy=healthy)
            dur = time.monotonic_ns() - t
            tr.covered += dur
            self.emit(events.phase(tr.pt.id, "release", dur, True))
        elif tr.env is not None:
            tr.current = "teardown"
            dur, _, terr = await timed("teardown", tr.env.teardown, tr.timeouts.teardown)
            tr.covered += dur
            self.emit(events.phase(tr.pt.id, "teardown", dur, terr is None))
            if terr is not None and tr.error is None:
                tr.error = terr

    def _account(self, tr: TrialState) -> None:
        """The trial's accounting: `orchestration`, what its phases did not cover from its
        scheduling until now (so that its phases add up to its wall time), then its end."""
        total = time.monotonic_ns() - tr.scheduled_ns
        orch = max(0, total - tr.covered - tr.waited - tr.aside)
        self.emit(events.phase(tr.pt.id, "orchestration", orch, True))
        if tr.spec.image is not None and tr.env is not None:
            got = tr.env.image_report()
            if got is not None:
                pt = tr.pt
                self.emit(events.image(pt.id, pt.cell.id, pt.warmup, **got))
        self._end(tr.pt, tr.error, tr.actions_ok)

    # -- helpers -------------------------------------------------------------------
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
