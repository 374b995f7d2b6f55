"""The one fold from `rtax/1` events to trial outcomes, and the counting rule on them.

The report (and compare and project, through it) and the console's live state
both fold events with `TrialFold` and classify each trial with
`TrialOutcome.verdict`, so that a live figure and `rtax report` of the same
recording agree by construction (docs/architecture.md, "Statistics"):
- `warmup`: a warm-up trial, counted apart;
- `incomplete`: a measured trial with no `trial_end` (the run was killed): failed;
- `failed`: a measured trial that ended not `ok`;
- `invalid`: a measured trial that ended `ok` but not `valid`;
- `measured`: ended `ok` and `valid`: only these give samples.

The fold is incremental (`add` one event) because the console sees events one at a
time; the report feeds a whole recording through the same `add`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

from rtax_tui.model.spec import POOL_PHASES, TIMED_PHASES

_TIMED = frozenset(TIMED_PHASES + POOL_PHASES)

Verdict = Literal["warmup", "incomplete", "failed", "invalid", "measured"]


def verdict(warmup: bool, ended: bool, ok: bool, valid: bool) -> Verdict:
    """The counting rule (the module's docstring), for a trial's four facts: the fold's
    and the engine's live `Progress` counters use this one function."""
    if warmup:
        return "warmup"
    if not ended:
        return "incomplete"
    if not ok:
        return "failed"
    if not valid:
        return "invalid"
    return "measured"


class TrialOutcome:
    """What the events of one trial add up to.

    `phases` holds the recorded (timed) phases, `subphases` the driver's sub-phases
    (`create.image`, ...) and `barrier.wait`; `actions` the action durations in
    order, `remote` the remote side's own durations where recorded.
    """

    __slots__ = (
        "trial", "cell", "meta", "warmup", "phases", "subphases",
        "actions", "remote", "ended", "ok", "valid", "error",
    )  # fmt: skip

    def __init__(self, ev: dict[str, Any]) -> None:
        self.trial: int = ev["trial"]
        self.cell: str = ev["cell"]
        self.meta = ev  # the trial_start event: host, driver, workload, channel, ...
        self.warmup = bool(ev.get("warmup"))
        self.phases: dict[str, int] = {}
        self.subphases: dict[str, int] = {}
        self.actions: list[int] = []
        self.remote: list[int] = []
        self.ended = False
        self.ok = False
        self.valid = False
        self.error: dict[str, Any] | None = None  # trial_end.error

    @property
    def steps(self) -> int | None:
        """The workload's step count (absent from recordings made before it was added)."""
        steps: int | None = self.meta.get("steps")
        return steps

    @property
    def batch(self) -> str | None:
        """The capacity batch, or None."""
        batch: str | None = self.meta.get("batch")
        return batch

    @property
    def error_kind(self) -> str | None:
        """`trial_end.error.kind` (or "unknown" for an error without one)."""
        err = self.error
        if err is None:
            return None
        return str(err.get("kind") or "unknown")

    @property
    def verdict(self) -> Verdict:
        return verdict(bool(self.warmup), bool(self.ended), bool(self.ok), bool(self.valid))

    def total_ns(self) -> int:
        """The trial's `total`: its timed phases plus its actions."""
        return sum(self.phases.values()) + sum(self.actions)


class TrialFold:
    """Folds events into `TrialOutcome`s, by trial id, in `trial_start` order.

    `on_start` and `on_end` are called with the outcome when a trial starts and when
    its `trial_end` arrives (the console updates its counters there). Events of a
    trial that never started (a torn recording's head) are ignored.
    """

    def __init__(
        self,
        on_start: Callable[[TrialOutcome], None] | None = None,
        on_end: Callable[[TrialOutcome], None] | None = None,
        on_other: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.trials: dict[Any, TrialOutcome] = {}
        self.starts = 0  # trial_start events seen
        self.on_start = on_start
        self.on_end = on_end
        self.on_other = on_other  # any other event: run, barrier, run_end, probe, pool

    def add(self, ev: dict[str, Any]) -> TrialOutcome | None:
        """Fold one event; returns the trial it concerned, if any."""
        self.feed((ev,))
        trial = ev.get("trial")
        return None if trial is None else self.trials.get(trial)

    def feed(self, events: Iterable[dict[str, Any]]) -> None:
        """Fold events in order. The one implementation, written as a tight loop: a
        report folds a million events through it (one call per event would cost a
        third more)."""
        trials = self.trials
        get = trials.get
        timed = _TIMED
        on_start, on_end, on_other = self.on_start, self.on_end, self.on_other
        for ev in events:
            etype = ev["type"]
            if etype == "action":
                t = get(ev["trial"])
                if t is not None:
                    t.actions.append(ev["dur_ns"])
                    if "remote_ns" in ev:
                        t.remote.append(ev["remote_ns"])
            elif etype == "phase":
                t = get(ev["trial"])
                if t is not None:
                    name = ev["name"]
                    target = t.phases if name in timed else t.subphases
                    target[name] = target.get(name, 0) + ev["dur_ns"]
            elif etype == "trial_start":
                self.starts += 1
                t = TrialOutcome(ev)
                trials[t.trial] = t
                if on_start is not None:
                    on_start(t)
            elif etype == "trial_end":
                t = get(ev["trial"])
                if t is not None:
                    t.ended = True
                    t.ok = bool(ev.get("ok"))
                    t.valid = bool(ev.get("valid"))
                    err = ev.get("error")
                    t.error = err if isinstance(err, dict) else None
                    if on_end is not None:
                        on_end(t)
            elif on_other is not None:
                on_other(ev)


# -- capacity batches -----------------------------------------------------------------


class SizeFold:
    """One point of a cell's capacity curve: its measured batches of that size so far."""

    __slots__ = ("batches", "passed", "tasks", "arrived", "mem_peak_bytes", "oom_kills")

    def __init__(self) -> None:
        self.batches = 0
        self.passed = 0
        self.tasks = 0
        self.arrived = 0
        self.mem_peak_bytes: int | None = None  # None: no batch recorded its peak
        self.oom_kills: int | None = None  # None: no batch recorded its OOM kills


class CapacityFold:
    """A cell's `barrier` events (one per capacity batch), folded one at a time; warm-up
    batches are left out. The report (`summary`) and the console (`sizes`, `batches`,
    `passed_batches`) read the same fold, so their figures agree by construction."""

    __slots__ = ("batches", "passed_batches", "sizes")

    def __init__(self) -> None:
        self.batches = 0
        self.passed_batches = 0
        self.sizes: dict[int, SizeFold] = {}

    def add(self, ev: dict[str, Any]) -> None:
        if ev.get("warmup"):
            return
        size = int(ev.get("size") or 0)
        ok = bool(ev.get("ok"))
        self.batches += 1
        self.passed_batches += ok
        sf = self.sizes.get(size)
        if sf is None:
            sf = self.sizes[size] = SizeFold()
        sf.batches += 1
        sf.passed += ok
        sf.tasks += size
        sf.arrived += int(ev.get("arrived") or 0)
        peak = ev.get("mem_peak_bytes")
        if peak is not None:
            sf.mem_peak_bytes = max(int(peak), sf.mem_peak_bytes or 0)
        kills = ev.get("oom_kills")
        if kills is not None:
            sf.oom_kills = (sf.oom_kills or 0) + int(kills)

    def summary(self) -> dict[str, Any] | None:
        """The report's `capacity` object: totals, then per size pVisor's figures
        (passed/batches, arrived/tasks, the budget's peak memory, OOM kills) and the
        largest size whose batches all passed; None for a cell with no batch."""
        if not self.batches:
            return None
        sizes = [
            {
                "size": size,
                "batches": sf.batches,
                "passed": sf.passed,
                "tasks": sf.tasks,
                "arrived": sf.arrived,
                "mem_peak_bytes": sf.mem_peak_bytes,
                "oom_kills": sf.oom_kills,
            }
            for size, sf in sorted(self.sizes.items())
        ]
        passing = [size for size, sf in self.sizes.items() if sf.passed == sf.batches]
        return {
            "batches": self.batches,
            "passed_batches": self.passed_batches,
            "tasks": sum(s["tasks"] for s in sizes),
            "arrived_tasks": sum(s["arrived"] for s in sizes),
            "sizes": sizes,
            "largest_passing_size": max(passing) if passing else None,
        }
