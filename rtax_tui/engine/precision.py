"""A run with `precision`: rounds of interleaved trials until every cell's P50 is known.

The first round is the plan a run always has (`plan.build_plan`: warm-ups, then
`trials` measured trials per cell in a seeded order; at most `max_trials`). After each
round the trials in flight finish and every cell is checked by the model's rule
(`model.precision.check_cell`, the report's own bootstrap), each cell's verdict recorded
as a `precision` event; the cells still `wide` and under `max_trials` get another round
of `trials` each (`plan.build_round`), interleaved the same way. The rounds end when no
cell wants one, or at `max_time` (no trial starts past it: `Scheduler.until_ns`, and
the trials then in flight are interrupted, as a stop does), or
when the run is stopped; the last check's events say why (`end`). A cell none of whose
trials was measured is `failing`: it gets no more rounds, and is named.

The trial path is the usual one: the scheduler runs each round as a plan, and the
check reads the run's own events through the one fold (`model.fold`), which this module
keeps beside the recording as a sink (one list append per trial event).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.plan import build_plan, build_round
from rtax_tui.engine.scheduling import Launch, Scheduler
from rtax_tui.model import events
from rtax_tui.model.events import Emitter
from rtax_tui.model.fold import VERDICTS, TrialFold
from rtax_tui.model.precision import FAILING, PRECISE, WIDE, CellCheck, Target, check_cell
from rtax_tui.model.spec import Cell

_TRIAL_EVENTS = frozenset(("trial_start", "phase", "action", "trial_end"))
_MEASURED = VERDICTS.index("measured")
_WARMUP = VERDICTS.index("warmup")


class PrecisionRounds:
    """The rounds of one run (see the module's docstring)."""

    def __init__(
        self,
        target: Target,
        *,
        cells: Sequence[Cell],
        trials: int,
        warmup: int,
        seed: int,
        emit: Emitter,
        control: RunControl,
        progress: Progress,
        scheduler: Scheduler,
    ) -> None:
        self.target = target
        self.cells = list(cells)
        self.trials = trials
        self.warmup = warmup
        self.seed = seed
        self.emit = emit
        self.control = control
        self.progress = progress
        self.scheduler = scheduler
        self.fold = TrialFold()
        self._pending: list[dict[str, Any]] = []
        self.checks: list[CellCheck] = []
        self.end: str | None = None
        self.rounds = 0

    def sink(self, ev: dict[str, Any]) -> None:
        """The run's events, as the recording gets them: a trial's are kept for the fold."""
        if ev["type"] in _TRIAL_EVENTS:
            self._pending.append(ev)

    async def run(self, launch: Launch) -> None:
        t = self.target
        self.scheduler.until_ns = time.monotonic_ns() + int(t.max_time_s * 1e9)
        self.emit.sinks.append(self.sink)
        # at max_time the trials in flight are interrupted too, as a stop interrupts them
        # (their teardown is not cut): each step may take up to its timeout, so a trial
        # that began before max_time could otherwise hold the run for steps x timeout
        deadline = asyncio.get_running_loop().call_later(t.max_time_s, self._out_of_time)
        try:
            plan = build_plan(self.cells, min(self.trials, t.max_trials), self.warmup, self.seed)
            self.progress.planned = len(plan)
            next_id = len(plan) + 1
            while True:
                self.rounds += 1
                await self.scheduler.run(plan, launch)
                ran = self._check()
                counts = self._next_round(ran)
                if self.end is not None:
                    return
                plan = build_round(counts, self.seed, self.rounds + 1, next_id)
                next_id += len(plan)
                self.progress.planned += len(plan)
        finally:
            deadline.cancel()
            self.scheduler.until_ns = None
            if self.sink in self.emit.sinks:
                self.emit.sinks.remove(self.sink)

    def _out_of_time(self) -> None:
        for trial in list(self.control.interruptible):
            self.control.interrupt(trial)

    def _check(self) -> dict[str, int]:
        """Every cell checked on the trials so far; returns the measured trials each ran."""
        fold = self.fold
        fold.feed(self._pending)
        self._pending = []
        vc = fold.verdict_codes()
        totals = fold.totals()
        slot_cell = np.array([m["cell"] for m in fold.metas], dtype=object)
        self.checks = []
        ran: dict[str, int] = {}
        for c in self.cells:
            mine = slot_cell == c.id if slot_cell.size else np.zeros(0, dtype=bool)
            ran[c.id] = int(np.count_nonzero(mine & (vc != _WARMUP)))
            sample = totals[mine & (vc == _MEASURED)]
            self.checks.append(check_cell(c.id, sample, ran[c.id], self.target.precision))
        return ran

    def _next_round(self, ran: dict[str, int]) -> dict[Cell, int]:
        """The next round's trials per cell, or none (`end` then says why); records the
        check either way."""
        t = self.target
        verdicts = {ch.cell: ch.verdict for ch in self.checks}
        wanting = {
            c: min(self.trials, t.max_trials - ran[c.id])
            for c in self.cells
            if verdicts[c.id] == WIDE and ran[c.id] < t.max_trials
        }
        if self.control.stopping:
            self.end = "stopped"
        elif all(v == PRECISE for v in verdicts.values()):
            self.end = "precise"
        elif not wanting:
            self.end = "max_trials" if WIDE in verdicts.values() else FAILING
        elif self.scheduler.until_ns is not None and time.monotonic_ns() >= self.scheduler.until_ns:
            self.end = "max_time"
        for ch in self.checks:
            self.emit(
                events.precision(
                    self.rounds,
                    ch.cell,
                    n=ch.n,
                    trials=ch.trials,
                    p50_ns=ch.p50_ns,
                    lo_ns=ch.lo_ns,
                    hi_ns=ch.hi_ns,
                    target=t.precision,
                    verdict=ch.verdict,
                    end=self.end,
                )
            )
        return wanting
