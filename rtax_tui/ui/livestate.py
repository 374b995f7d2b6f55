"""What the console draws, kept as plain aggregates that events update in O(1).

The engine's events (live from its pipe, or read from a recording) go through
`LiveState.ingest`; the screen's timer reads the aggregates at its own pace, so the
frame rate does not follow the event rate. Trials are folded and classified by
`model.fold`, the report's own fold (a trial's samples count once it ended ok, valid
and not warm-up), so a live figure and `rtax report` of the same recording agree.
No Textual here: tests use it bare.

What the report says of a cell's figures is kept here too, by the report's own rules:
whether they may be unstable (`analysis.noise_report.stability` over the `noise` samples
of its host), whether its programs differ from a compared cell's (`model.programs`), and
a precision run's last verdict (`precision` events). Each event is folded once; the
stability is recomputed when its inputs changed, not on every frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtax_tui.analysis.noise_report import Timeline, outliers, stability
from rtax_tui.analysis.precision_report import reach_of
from rtax_tui.model.arrivals import SEQUENTIAL, parse_arrival
from rtax_tui.model.bootstrap import median_ci95
from rtax_tui.model.fold import CapacityFold, TrialFold, TrialOutcome
from rtax_tui.model.netaddr import is_ray_name
from rtax_tui.model.precision import check_cell
from rtax_tui.model.programs import Programs, compared, differences, from_event
from rtax_tui.model.spec import PHASES, TIMED_PHASES, shell_rc

# Log-spaced bins from 1 µs to 1000 s, 20 per decade: a sample costs one log10.
BIN_LO_NS = 1_000
BINS_PER_DECADE = 20
N_BINS = 9 * BINS_PER_DECADE
_TIMED = frozenset(TIMED_PHASES)
_FOLDED = frozenset(("trial_start", "action", "phase", "trial_end"))


def bin_of(ns: int) -> int:
    if ns <= BIN_LO_NS:
        return 0
    b = int(math.log10(ns / BIN_LO_NS) * BINS_PER_DECADE)
    return min(b, N_BINS - 1)


def bin_edges_ns(b: int) -> tuple[float, float]:
    lo = BIN_LO_NS * 10 ** (b / BINS_PER_DECADE)
    return lo, lo * 10 ** (1 / BINS_PER_DECADE)


class Column:
    """Integers appended one at a time into a numpy buffer that doubles as it fills."""

    __slots__ = ("_buf", "n")

    def __init__(self) -> None:
        self._buf = np.empty(64, dtype=np.int64)
        self.n = 0

    def add(self, v: int) -> None:
        if self.n == self._buf.shape[0]:
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
        self._buf[self.n] = v
        self.n += 1

    @property
    def values(self) -> np.ndarray:
        return self._buf[: self.n]


class PhaseSamples:
    """One phase of one cell: the samples (for percentiles) and their log histogram.

    Samples live in a numpy buffer that doubles as it fills, so a percentile never
    converts a Python list. Percentiles are recomputed when the sample grew by more
    than 1% (or is small, or `exact` is asked): a screen redrawn 10 times a second
    does not re-sort a million samples each time.
    """

    __slots__ = ("_buf", "n", "counts", "_cache", "_tail")

    def __init__(self) -> None:
        self._buf = np.empty(64, dtype=np.int64)
        self.n = 0
        self.counts = [0] * N_BINS
        self._cache: tuple[int, float | None, float | None] = (0, None, None)
        self._tail: tuple[int, Tail | None] = (0, None)

    def add(self, ns: int) -> None:
        if self.n == self._buf.shape[0]:
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
        self._buf[self.n] = ns
        self.n += 1
        self.counts[bin_of(ns)] += 1

    @property
    def samples(self) -> np.ndarray:
        return self._buf[: self.n]

    def __len__(self) -> int:
        return self.n

    def percentiles_ms(self, exact: bool = False) -> tuple[float | None, float | None]:
        """(P50, P95) in ms, numpy's linear method as in `rtax report`."""
        n, (cached_n, p50, p95) = self.n, self._cache
        if n == cached_n or (not exact and n > 1000 and n <= cached_n * 1.01):
            return p50, p95
        if n == 0:
            self._cache = (0, None, None)
        else:
            q50, q95 = np.percentile(self._buf[:n], [50, 95])
            self._cache = (n, float(q50) / 1e6, float(q95) / 1e6)
        return self._cache[1], self._cache[2]

    def tail(self, exact: bool = False) -> Tail | None:
        """P99, the median's 95% bootstrap interval and the outliers (Tukey's fences),
        as `rtax report` works them out (`stats.summarize`, `noise_report.outliers`);
        None while empty. Recomputed as the percentiles are (asked only for the
        columns a wide terminal shows)."""
        n, (cached_n, got) = self.n, self._tail
        if n == cached_n or (not exact and n > 1000 and n <= cached_n * 1.01):
            return got
        if n == 0:
            self._tail = (0, None)
            return None
        s = np.sort(self._buf[:n])
        lo, hi = median_ci95(s)
        out = outliers(s)
        p99 = float(np.percentile(s, 99)) / 1e6
        self._tail = (n, Tail(p99, lo / 1e6, hi / 1e6, out["mild"] + out["severe"]))
        return self._tail[1]


@dataclass(frozen=True)
class Tail:
    """A phase's figures beyond P50/P95, for the wide table (ms)."""

    p99_ms: float
    ci_lo_ms: float
    ci_hi_ms: float
    outliers: int


@dataclass
class CellState:
    cell: str
    host: str
    driver: str
    workload: str
    channel: str
    n: int = 0
    failed: int = 0
    invalid: int = 0
    warmup: int = 0
    done: int = 0
    phases: dict[str, PhaseSamples] = field(
        default_factory=lambda: {p: PhaseSamples() for p in PHASES}
    )
    capacity: CapacityFold = field(default_factory=CapacityFold)  # the report's own fold
    # a replay's fidelity so far (the report's rule: measured trials' steps that have a
    # recorded exit code, and those that got it)
    same_rc: int = 0
    with_rc: int = 0
    # per measured good trial, its trial_start's time (ns), in the order of `total`'s
    # samples: the windows the host's noise samples are matched to
    starts: Column = field(default_factory=Column)
    # the last stability computed, and the (trials, samples) it was computed from
    noise: dict[str, Any] | None = None
    noise_from: tuple[int, int] = (0, 0)

    def fidelity(self) -> float | None:
        return self.same_rc / self.with_rc if self.with_rc else None


@dataclass
class BatchState:
    """The capacity batch in progress: one mark per environment."""

    batch: str
    cell: str
    size: int
    deadline_s: float | None
    start_t_ns: int
    trials: list[int] = field(default_factory=list)
    released: str | None = None


@dataclass
class Failure:
    t_ns: int
    trial: int
    cell: str
    phase: str
    kind: str
    message: str


class LiveState:
    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.cells: dict[str, CellState] = {}
        # the one fold of analysis.report: this state counts what it classifies
        self.fold = TrialFold(on_start=self._started, on_end=self._ended)
        self.marks: dict[int, str] = {}  # capacity trials: working, arrived, failed, done
        self._end_t_ns = 0
        self._steps_failed: set[int] = set()  # capacity trials with a step that failed
        self.failures: list[Failure] = []
        self.batch: BatchState | None = None
        self.batches_done = 0
        self.planned = 0
        self.started = 0
        self.ended = 0
        self.in_flight = 0
        self.last_t_ns = 0
        # the engine's clock now, as the screen estimates it between events (display only)
        self.now_ns: int | None = None
        self.events = 0
        self.status: str | None = None  # run_end status once the run ended
        self.version = 0  # bumped by every ingest: the screen redraws only on change
        # per host, its noise samples so far; those not yet in its timeline
        self.timelines: dict[str, Timeline] = {}
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self.precision_round: int | None = None  # the latest precision check's
        self.precision_target: float | None = None
        self.precision_end: str | None = None  # why the rounds ended (the last check)
        self._differ: dict[str, list[tuple[str, list[str]]]] = {}
        self._differ_from: tuple[int, int] = (-1, -1)  # (cells, programs) it was made from
        self.programs: dict[str, Programs] = {}  # per cell, its first `programs` event
        self.precision: dict[str, dict[str, Any]] = {}  # per cell, its latest `precision`
        # per cell: ((its measured totals, the target), verdict, reach), see precision_of
        self._checked: dict[str, tuple[tuple[int, float], str, float | None]] = {}

    # -- the plan, from the header ------------------------------------------
    def _plan_from_header(self, h: dict[str, Any]) -> None:
        prof = h.get("profile") or {}
        n_cells = 1
        for k in ("workloads", "channels", "modes"):
            n_cells *= max(1, len(prof.get(k) or ()))
        n_cells *= max(1, self._hosts_planned(prof, h.get("hosts")))
        # per driver, its image modes (those it cannot deliver are left out of the run)
        images = prof.get("images") or ()
        left = prof.get("images_left_out") or {}
        n_cells *= sum(
            max(1, len(images) - len(left.get(d) or ())) for d in prof.get("drivers") or ("",)
        )
        cap = prof.get("capacity")
        if isinstance(cap, dict) and cap.get("batches"):
            curve = [int(n) for n in cap.get("sizes") or ()] or [int(cap.get("size") or 1)]
            warm = min(curve) if int(prof.get("warmup") or 0) > 0 else 0  # one per cell
            self.planned = (int(cap["batches"]) * sum(curve) + warm) * n_cells
        else:
            trials, warmup = int(prof.get("trials") or 0), int(prof.get("warmup") or 0)
            per_cell = 0
            for a in prof.get("arrivals") or (SEQUENTIAL,):  # a burst rounds its trials up
                try:
                    measured = sum(parse_arrival(a, "arrivals").episodes(trials)) or trials
                except Exception:  # a header this rtax cannot read: the plain count
                    measured = trials
                per_cell += measured + warmup
            self.planned = per_cell * n_cells

    @staticmethod
    def _hosts_planned(prof: dict[str, Any], facts: Any) -> int:
        """The profile's hosts, a Ray cluster counted as its nodes in the header (the
        hosts whose facts say `ray`; engine.raynodes): one name, one host per node."""
        names = [h for h in prof.get("hosts") or () if isinstance(h, str)]
        ray_tables = {
            n
            for n, t in (prof.get("host_tables") or {}).items()
            if isinstance(t, dict) and "ray" in t
        }
        clusters = [h for h in names if is_ray_name(h) or h in ray_tables]
        if not clusters or not isinstance(facts, dict):
            return len(names)
        nodes = sum(1 for f in facts.values() if isinstance(f, dict) and "ray" in f)
        return len(names) - len(clusters) + nodes

    # -- events ----------------------------------------------------------------
    def ingest(self, ev: dict[str, Any]) -> None:
        self.events += 1
        self.version += 1
        t = ev.get("t_ns")
        if isinstance(t, int) and t > self.last_t_ns:
            self.last_t_ns = t
        etype = ev.get("type")
        if etype in _FOLDED:
            if etype == "trial_end":
                self._end_t_ns = int(ev.get("t_ns") or 0)  # the failure's time
            tr = self.fold.add(ev)
            if tr is not None and tr.batch is not None and etype in ("action", "phase"):
                self._mark(tr, ev)
            if etype == "action" and "expect_rc" in ev and tr is not None:
                self._replayed(tr, ev)
        elif etype == "barrier":
            self._barrier(ev)
        elif etype == "run":
            self.header = ev
            self._plan_from_header(ev)
        elif etype == "run_end":
            self.status = str(ev.get("status"))
        elif etype == "noise":
            self._pending.setdefault(str(ev.get("host")), []).append(ev)
        elif etype == "programs":
            self._programs_of(ev)
        elif etype == "precision":
            self._precision(ev)

    def _programs_of(self, ev: dict[str, Any]) -> None:
        cell = str(ev.get("cell"))
        if cell not in self.programs:
            self.programs[cell] = from_event(ev)

    def _precision(self, ev: dict[str, Any]) -> None:
        self.precision[str(ev.get("cell"))] = ev
        self.precision_round = int(ev.get("round") or 0)
        self.precision_target = float(ev.get("target") or 0.0)
        if "end" in ev:
            self.precision_end = str(ev["end"])

    def _mark(self, tr: TrialOutcome, ev: dict[str, Any]) -> None:
        """Where a capacity trial stands, for the batch's marks."""
        state = self.marks.get(tr.trial, "working")
        if ev["type"] == "action":
            if not ev.get("ok"):
                self._steps_failed.add(tr.trial)
            elif tr.steps is not None and ev["i"] == tr.steps - 1:
                if tr.trial not in self._steps_failed:
                    state = "arrived"
        else:  # phase
            name = ev["name"]
            if name in _TIMED:
                if not ev.get("ok"):
                    state = "failed"
            elif name == "barrier.wait" and state == "working":
                state = "arrived"
        self.marks[tr.trial] = state

    def _replayed(self, tr: TrialOutcome, ev: dict[str, Any]) -> None:
        if tr.meta.get("warmup"):
            return
        cs = self.cells.get(tr.cell)
        if cs is not None:
            cs.with_rc += 1
            cs.same_rc += shell_rc(ev.get("rc")) == ev["expect_rc"]

    def _cell(self, ev: dict[str, Any]) -> CellState:
        cid = ev["cell"]
        cs = self.cells.get(cid)
        if cs is None:
            cs = self.cells[cid] = CellState(
                cid,
                str(ev.get("host")),
                str(ev.get("driver")),
                str(ev.get("workload")),
                str(ev.get("channel")),
            )
        return cs

    def _started(self, tr: TrialOutcome) -> None:
        ev = tr.meta
        cs = self._cell(ev)
        batch = tr.batch
        self.started += 1
        self.in_flight += 1
        if batch is not None:
            self.marks[tr.trial] = "working"
            if self.batch is None or self.batch.batch != batch:
                self.batch = BatchState(
                    batch,
                    cs.cell,
                    int(ev.get("batch_size") or 0),
                    ev.get("deadline_s"),
                    int(ev.get("t_ns") or 0),
                )
            self.batch.trials.append(tr.trial)
            self.batch.size = max(self.batch.size, len(self.batch.trials))

    def _ended(self, tr: TrialOutcome) -> None:
        self.ended += 1
        self.in_flight = max(0, self.in_flight - 1)
        cs = self.cells[tr.cell]
        cs.done += 1
        if not tr.ok:
            if tr.batch is not None:
                self.marks[tr.trial] = "failed"
            err = tr.error
            if err is not None:
                self.failures.append(
                    Failure(
                        self._end_t_ns,
                        tr.trial,
                        tr.cell,
                        str(err.get("phase")),
                        str(err.get("kind")),
                        str(err.get("message")),
                    )
                )
        elif tr.batch is not None and self.marks.get(tr.trial) != "arrived":
            self.marks[tr.trial] = "done"
        verdict = tr.verdict
        if verdict == "warmup":
            cs.warmup += 1
            return
        cs.n += 1
        if verdict == "failed":
            cs.failed += 1
            return
        if verdict == "invalid":
            cs.invalid += 1
            return
        phases = cs.phases
        for name, dur in tr.phases.items():
            ps = phases.get(name)
            if ps is None:  # a pooled trial's acquire and release
                ps = phases[name] = PhaseSamples()
            ps.add(dur)
        acts = cs.phases["action"]
        for a in tr.actions:
            acts.add(a)
        cs.phases["total"].add(tr.total_ns())
        cs.starts.add(int(tr.meta.get("t_ns") or 0))

    def _barrier(self, ev: dict[str, Any]) -> None:
        cid = ev["cell"]
        cs = self.cells.get(cid)
        if cs is not None:
            cs.capacity.add(ev)
        self.batches_done += 1
        if self.batch is not None and self.batch.batch == ev.get("batch"):
            self.batch.released = str(ev.get("released"))

    # -- views ---------------------------------------------------------------
    @property
    def is_capacity(self) -> bool:
        prof = (self.header or {}).get("profile") or {}
        return isinstance(prof.get("capacity"), dict)

    def batch_marks(self) -> list[str]:
        """State of each environment of the current batch, padded with `waiting`."""
        b = self.batch
        if b is None:
            return []
        marks = [self.marks[t] for t in b.trials if t in self.marks]
        return marks + ["waiting"] * max(0, b.size - len(marks))

    def batches_per_cell(self) -> int | None:
        prof = (self.header or {}).get("profile") or {}
        cap = prof.get("capacity")
        return int(cap["batches"]) if isinstance(cap, dict) and cap.get("batches") else None

    def clock_ns(self) -> int:
        """The run's time for display: the latest event's, or the screen's estimate."""
        if self.status is not None or self.now_ns is None:
            return self.last_t_ns
        return max(self.now_ns, self.last_t_ns)

    def elapsed_s(self) -> float:
        return self.clock_ns() / 1e9

    def eta_s(self) -> float | None:
        if self.ended == 0 or self.planned <= self.ended or self.status is not None:
            return None
        return self.elapsed_s() / self.ended * (self.planned - self.ended)

    def medians_ms(self, phase: str) -> dict[str, float]:
        """Each cell's P50 of `phase`, for marking other cells on a histogram."""
        out = {}
        for cid, cs in self.cells.items():
            p50, _ = cs.phases[phase].percentiles_ms(exact=self.status is not None)
            if p50 is not None:
                out[cid] = p50
        return out

    # -- what the report says of a cell's figures -------------------------------
    @property
    def is_precision(self) -> bool:
        """A run that goes on in rounds until its cells are precise (`--precision`)."""
        prof = (self.header or {}).get("profile") or {}
        return bool(prof.get("precision")) or self.precision_round is not None

    def _timeline(self, host: str) -> Timeline | None:
        pending = self._pending.pop(host, None)
        tl = self.timelines.get(host)
        if pending:
            if tl is None:
                tl = self.timelines[host] = Timeline()
            tl.extend(pending)
        return tl

    def stability(self, cid: str, exact: bool = False) -> dict[str, Any] | None:
        """The cell's stability as the report says it (`noise_report.stability`: its
        reasons, `unstable`), or None (no sample of its host overlaps its trials).
        Recomputed when its trials or its host's samples grew (once it has over 1,000
        trials, by more than 1% of either, unless `exact`: a large cell is not matched
        again on every frame)."""
        cs = self.cells.get(cid)
        if cs is None:
            return None
        tl = self._timeline(cs.host)
        if tl is None:
            return None
        n, m = cs.starts.n, tl.size
        old_n, old_m = cs.noise_from
        if (n, m) == (old_n, old_m):
            return cs.noise
        if not exact and n > 1000 and n <= old_n * 1.01 and m <= old_m * 1.01:
            return cs.noise
        totals = cs.phases["total"].samples
        cs.noise = stability(cs.starts.values, totals, tl) if n else None
        cs.noise_from = (n, m)
        return cs.noise

    def programs_differ(self, cid: str) -> list[tuple[str, list[str]]]:
        """The cells `cid` is compared with (`model.programs.compared`, the report's
        pairs) whose programs differ from its own, with how (its side first)."""
        if self._differ_from != (len(self.cells), len(self.programs)):
            self._differ_from = (len(self.cells), len(self.programs))
            out: dict[str, list[tuple[str, list[str]]]] = {}
            metas = (
                (c.cell, {"host": c.host, "workload": c.workload, "channel": c.channel})
                for c in self.cells.values()
            )
            for base, other in compared(metas):
                pa, pb = self.programs.get(base), self.programs.get(other)
                if pa is None or pb is None:
                    continue
                ab, ba = differences(pb, pa), differences(pa, pb)
                if ab:
                    out.setdefault(other, []).append((base, ab))
                    out.setdefault(base, []).append((other, ba))
            self._differ = out
        return self._differ.get(cid, [])

    def precision_of(self, cid: str) -> tuple[str, float | None] | None:
        """The cell's verdict (`precise`, `wide`, `failing`) and how far its interval
        reaches (a share of its P50), or None before the run's first check. Worked out
        from the cell's measured trials by the engine's rule, as `rtax report` does: a
        recording's own verdict is only its say (a crafted one claimed `precise` for a
        coin toss). Kept until the cell has another trial."""
        if cid not in self.precision or self.precision_target is None:
            return None
        cs = self.cells.get(cid)
        totals = cs.phases["total"].samples if cs is not None else np.empty(0)
        key = (int(totals.shape[0]), self.precision_target)
        got = self._checked.get(cid)
        if got is None or got[0] != key:
            ch = check_cell(cid, totals, cs.n if cs is not None else 0, self.precision_target)
            got = self._checked[cid] = (key, ch.verdict, reach_of(ch.p50_ns, ch.lo_ns, ch.hi_ns))
        return got[1], got[2]
