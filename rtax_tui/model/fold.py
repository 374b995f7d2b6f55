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

The fold is columnar: it takes `Rows`, a batch of events in recording order as numpy
columns, and keeps state per trial only (a slot: its `trial_start`, its phase sums, its
end) plus one column per action (trial slot, duration, remote duration), which is what
the statistics need. Two readers make `Rows`: `RowBuilder` from event dicts (the console
one event at a time, `read_recording`'s events), and the recording scanner
(`model.scan`), which decodes the common lines straight into columns. Both feed the same
`TrialFold.feed_rows`, so there is one fold whatever the reader; a report of a million
events never holds a dict per event. `TrialOutcome` is a view of one slot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np

from rtax_tui.model.spec import EXTRA_PHASES, TIMED_PHASES

# Durations are counts of 0..2**63-1 ns each; what the fold adds of them (a phase seen
# twice in a trial, a trial's total, create + ready) saturates at the largest int64
# instead of wrapping into a small or negative figure (a crafted recording's: no
# timeout allows 146 years).
INT64_MAX = np.iinfo(np.int64).max


def add_sat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b of non-negative int64 arrays, saturating at INT64_MAX."""
    out: np.ndarray = a + b
    over = out < a  # b >= 0: only a wrap makes the sum smaller
    if over.any():
        out[over] = INT64_MAX
    return out


def add_at_sat(out: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """np.add.at(out, index, values) of non-negative int64s, saturating at INT64_MAX:
    where the sum could pass it (bounded by the largest of `out` plus all `values`),
    a float shadow of the sums finds the slots that did."""
    if not values.size:
        return
    risky = float(out.max(initial=0)) + float(values.sum(dtype=np.float64)) >= INT64_MAX
    shadow = out.astype(np.float64) if risky else None
    np.add.at(out, index, values)
    if shadow is not None:
        np.add.at(shadow, index, values.astype(np.float64))
        out[shadow >= INT64_MAX] = INT64_MAX


_TIMED = frozenset(TIMED_PHASES + EXTRA_PHASES)

Verdict = Literal["warmup", "incomplete", "failed", "invalid", "measured"]
VERDICTS: tuple[Verdict, ...] = ("warmup", "incomplete", "failed", "invalid", "measured")

# trial ids are folded as int64 codes: an id 0 <= id < 2**62 is its own code; any other
# (a string, a negative or larger integer) gets one from this base up, in order seen
_CODE_BASE = 1 << 62
_NONE = -1  # "no remote duration" in the remote column; "no trial" in a slot column


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


# `verdict` over its 16 inputs, indexed warmup*8 + ended*4 + ok*2 + valid: the fold
# classifies all its trials at once with this table, so the rule stays the function above
_VERDICT_TABLE = np.array(
    [
        VERDICTS.index(verdict(bool(i & 8), bool(i & 4), bool(i & 2), bool(i & 1)))
        for i in range(16)
    ],
    dtype=np.int8,
)


def _i64(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


class Rows:
    """Events in recording order, as columns: `pos` is an event's place in the recording
    (any increasing number), `tid` a trial id's code (`TrialFold.code`).

    starts: `trial_start` dicts (few: one per trial); phases: (pos, tid, name index into
    `phase_names`, dur_ns); actions: (pos, tid, dur_ns, remote_ns or -1); ends: (pos, tid,
    ok, valid) with `end_errors` {row: the `error` object} for the rows that have one;
    others: (pos, event) of every other type (run_end, barrier, pool, prep, probe, ...).
    """

    __slots__ = (
        "start_pos", "starts", "ph_pos", "ph_tid", "ph_name", "phase_names", "ph_dur",
        "ac_pos", "ac_tid", "ac_dur", "ac_remote", "en_pos", "en_tid", "en_ok", "en_valid",
        "end_errors", "others",
    )  # fmt: skip

    def __init__(self) -> None:
        empty = np.zeros(0, dtype=np.int64)
        self.start_pos: list[int] = []
        self.starts: list[dict[str, Any]] = []
        self.ph_pos = self.ph_tid = self.ph_name = self.ph_dur = empty
        self.phase_names: list[str] = []
        self.ac_pos = self.ac_tid = self.ac_dur = self.ac_remote = empty
        self.en_pos = self.en_tid = empty
        self.en_ok = self.en_valid = np.zeros(0, dtype=bool)
        self.end_errors: dict[int, dict[str, Any]] = {}
        self.others: list[tuple[int, dict[str, Any]]] = []

    @property
    def size(self) -> int:
        return (
            len(self.starts) + self.ph_pos.size + self.ac_pos.size + self.en_pos.size
            + len(self.others)
        )  # fmt: skip

    @staticmethod
    def merge(parts: Sequence[Rows]) -> Rows:
        """One batch of several (a scanner's columns and its dict rows), in `pos` order."""
        parts = [r for r in parts if r.size] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        out = Rows()
        with_starts = [r for r in parts if r.starts]
        if len(with_starts) == 1:  # in order already
            out.start_pos, out.starts = with_starts[0].start_pos, with_starts[0].starts
        elif with_starts:
            starts = sorted(
                (p, ev) for r in with_starts for p, ev in zip(r.start_pos, r.starts, strict=True)
            )  # positions are distinct: the dicts are never compared
            out.start_pos = [p for p, _ in starts]
            out.starts = [ev for _, ev in starts]
        out.others = sorted((o for r in parts for o in r.others), key=lambda o: o[0])
        names: dict[str, int] = {}
        remaps = []
        for r in parts:
            remaps.append(_i64([names.setdefault(n, len(names)) for n in r.phase_names]))
        out.phase_names = list(names)
        o = np.argsort(np.concatenate([r.ph_pos for r in parts]), kind="stable")
        out.ph_pos = np.concatenate([r.ph_pos for r in parts])[o]
        out.ph_tid = np.concatenate([r.ph_tid for r in parts])[o]
        out.ph_dur = np.concatenate([r.ph_dur for r in parts])[o]
        out.ph_name = np.concatenate(
            [
                m[r.ph_name] if r.ph_name.size else r.ph_name
                for r, m in zip(parts, remaps, strict=True)
            ]
        )[o]
        o = np.argsort(np.concatenate([r.ac_pos for r in parts]), kind="stable")
        for col in ("ac_pos", "ac_tid", "ac_dur", "ac_remote"):
            setattr(out, col, np.concatenate([getattr(r, col) for r in parts])[o])
        en_pos = np.concatenate([r.en_pos for r in parts])
        o = np.argsort(en_pos, kind="stable")
        rank = np.empty_like(o)
        rank[o] = np.arange(o.size)
        for col in ("en_pos", "en_tid", "en_ok", "en_valid"):
            setattr(out, col, np.concatenate([getattr(r, col) for r in parts])[o])
        base = 0
        for r in parts:
            for row, err in r.end_errors.items():
                out.end_errors[int(rank[base + row])] = err
            base += r.en_pos.size
        return out


class RowBuilder:
    """Event dicts (already checked against the schema) to `Rows`: the reader of events
    that are dicts already (the console's, a `Recording`'s)."""

    def __init__(self, fold: TrialFold) -> None:
        self.code = fold.code
        self.rows = Rows()
        self._ph: list[tuple[int, int, int, int]] = []
        self._ac: list[tuple[int, int, int, int]] = []
        self._en: list[tuple[int, int, bool, bool]] = []
        self._names: dict[str, int] = {}

    def add(self, pos: int, ev: dict[str, Any]) -> None:
        etype = ev["type"]
        if etype == "action":
            self._ac.append((pos, self.code(ev["trial"]), ev["dur_ns"], ev.get("remote_ns", _NONE)))
        elif etype == "phase":
            name = self._names.setdefault(ev["name"], len(self._names))
            self._ph.append((pos, self.code(ev["trial"]), name, ev["dur_ns"]))
        elif etype == "trial_start":
            self.rows.start_pos.append(pos)
            self.rows.starts.append(ev)
        elif etype == "trial_end":
            err = ev.get("error")
            if isinstance(err, dict):
                self.rows.end_errors[len(self._en)] = err
            self._en.append(
                (pos, self.code(ev["trial"]), bool(ev.get("ok")), bool(ev.get("valid")))
            )
        else:
            self.rows.others.append((pos, ev))

    def build(self) -> Rows:
        r = self.rows
        if self._ph:
            ph = np.array(self._ph, dtype=np.int64)
            r.ph_pos, r.ph_tid, r.ph_name, r.ph_dur = ph.T.copy()
            r.phase_names = list(self._names)
        if self._ac:
            ac = np.array(self._ac, dtype=np.int64)
            r.ac_pos, r.ac_tid, r.ac_dur, r.ac_remote = ac.T.copy()
        if self._en:
            en = np.array(self._en, dtype=np.int64)
            r.en_pos, r.en_tid = en[:, 0].copy(), en[:, 1].copy()
            r.en_ok, r.en_valid = en[:, 2].astype(bool), en[:, 3].astype(bool)
        return r


class _Grow:
    """A numpy column that grows by doubling (the fold's state, appended batch by batch)."""

    __slots__ = ("a", "n")

    def __init__(self, dtype: Any, fill: Any = 0) -> None:
        self.a = np.full(64, fill, dtype=dtype)
        self.n = 0

    def reserve(self, n: int, fill: Any) -> None:
        if n > self.a.size:
            size = max(n, 2 * self.a.size)
            b = np.full(size, fill, dtype=self.a.dtype)
            b[: self.a.size] = self.a
            self.a = b

    def extend(self, values: np.ndarray) -> None:
        self.reserve(self.n + values.size, 0)
        self.a[self.n : self.n + values.size] = values
        self.n += values.size

    @property
    def view(self) -> np.ndarray:
        return self.a[: self.n]


class _PhaseCol:
    """One phase name's per-trial state: its summed duration and its first position."""

    __slots__ = ("name", "timed", "sum", "first")

    def __init__(self, name: str, timed: bool) -> None:
        self.name = name
        self.timed = timed
        self.sum = np.zeros(64, dtype=np.int64)
        self.first = np.full(64, np.iinfo(np.int64).max, dtype=np.int64)  # max: absent


class TrialOutcome:
    """What the events of one trial add up to: a view of its slot in the fold.

    `phases` holds the recorded (timed) phases, `subphases` the driver's sub-phases
    (`create.image`, ...) and `barrier.wait`, each in the order first recorded; `actions`
    the action durations in order, `remote` the remote side's own durations where
    recorded.
    """

    __slots__ = ("_fold", "slot")

    def __init__(self, fold: TrialFold, slot: int) -> None:
        self._fold = fold
        self.slot = slot

    @property
    def meta(self) -> dict[str, Any]:
        """The trial_start event: host, driver, workload, channel, ..."""
        return self._fold.metas[self.slot]

    @property
    def trial(self) -> Any:
        return self.meta["trial"]

    @property
    def cell(self) -> str:
        cell: str = self.meta["cell"]
        return cell

    @property
    def warmup(self) -> bool:
        return bool(self._fold.warmup.a[self.slot])

    @property
    def ended(self) -> bool:
        return bool(self._fold.ended.a[self.slot])

    @property
    def ok(self) -> bool:
        return bool(self._fold.ok.a[self.slot])

    @property
    def valid(self) -> bool:
        return bool(self._fold.valid.a[self.slot])

    @property
    def error(self) -> dict[str, Any] | None:
        """trial_end.error"""
        return self._fold.errors.get(self.slot)

    @property
    def phases(self) -> dict[str, int]:
        return self._fold.phases_of(self.slot, timed=True)

    @property
    def subphases(self) -> dict[str, int]:
        return self._fold.phases_of(self.slot, timed=False)

    @property
    def actions(self) -> list[int]:
        return self._fold.actions_of(self.slot)[0]

    @property
    def remote(self) -> list[int]:
        return self._fold.actions_of(self.slot)[1]

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
        return verdict(self.warmup, self.ended, self.ok, self.valid)

    def total_ns(self) -> int:
        """The trial's `total`: its timed phases plus its actions (saturating at
        INT64_MAX, as the fold's columns do)."""
        return min(sum(self.phases.values()) + sum(self.actions), int(INT64_MAX))


class TrialFold:
    """Folds events into trial slots, in `trial_start` order.

    A trial's events count towards the latest `trial_start` of its id before them;
    events of a trial that never started (a torn recording's head) are ignored.
    `on_start` and `on_end` are called with the outcome when a trial starts and when
    its `trial_end` arrives (the console updates its counters there); `on_other` with
    any other event (run, barrier, run_end, probe, pool). With any of them set, `feed`
    folds one event at a time so that each sees the fold as of its event.
    """

    def __init__(
        self,
        on_start: Callable[[TrialOutcome], None] | None = None,
        on_end: Callable[[TrialOutcome], None] | None = None,
        on_other: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.on_start = on_start
        self.on_end = on_end
        self.on_other = on_other
        self.metas: list[dict[str, Any]] = []  # per slot: its trial_start
        self.slot_code = _Grow(np.int64)
        self.warmup = _Grow(bool)
        self.ended = _Grow(bool)
        self.ok = _Grow(bool)
        self.valid = _Grow(bool)
        self.errors: dict[int, dict[str, Any]] = {}  # slot -> trial_end.error, where one
        self.phase_cols: list[_PhaseCol] = []
        self._phase_ix: dict[str, int] = {}
        self.ac_slot = _Grow(np.int64)  # one row per action counted, in recording order
        self.ac_dur = _Grow(np.int64)
        self.ac_remote = _Grow(np.int64)
        self._latest: dict[int, int] = {}  # code -> the latest slot of that trial id
        self._codes: dict[Any, int] = {}  # ids that are not their own code
        self._pos = 0  # positions given to the events of `feed`
        self._map: tuple[int, np.ndarray, np.ndarray] | None = None  # (starts, codes, slots)
        self._groups: tuple[int, np.ndarray, np.ndarray] | None = None
        self._asked_at = -1
        # the batch being folded, its trial codes and each start's rank among them
        self._batch: tuple[Rows, np.ndarray, np.ndarray] | None = None

    # -- ids ---------------------------------------------------------------------------
    def code(self, trial: Any) -> int:
        """The int64 code of a trial id (checked: an int of 64 bits or a string)."""
        if type(trial) is int and 0 <= trial < _CODE_BASE:
            return trial
        key = (type(trial) is str, trial)
        c = self._codes.get(key)
        if c is None:
            c = self._codes[key] = _CODE_BASE + len(self._codes)
        return c

    @property
    def starts(self) -> int:
        """trial_start events seen."""
        return len(self.metas)

    @property
    def trials(self) -> dict[Any, TrialOutcome]:
        """id -> its outcome (the latest trial of that id), in first-start order."""
        out: dict[Any, TrialOutcome] = {}
        for slot, meta in enumerate(self.metas):
            out[meta["trial"]] = TrialOutcome(self, slot)
        return out

    def outcome(self, slot: int) -> TrialOutcome:
        return TrialOutcome(self, slot)

    # -- folding -----------------------------------------------------------------------
    def add(self, ev: dict[str, Any]) -> TrialOutcome | None:
        """Fold one event; returns the trial it concerned, if any."""
        b = RowBuilder(self)
        b.add(self._pos, ev)
        self._pos += 1
        self.feed_rows(b.build())
        trial = ev.get("trial")
        if trial is None:
            return None
        slot = self._latest.get(self.code(trial))
        return None if slot is None else TrialOutcome(self, slot)

    def feed(self, events: Iterable[dict[str, Any]]) -> None:
        """Fold events (dicts) in order."""
        if self.on_start or self.on_end or self.on_other:
            for ev in events:
                self.add(ev)
            return
        b = RowBuilder(self)
        pos = self._pos
        for ev in events:
            b.add(pos, ev)
            pos += 1
        self._pos = pos
        self.feed_rows(b.build())

    def feed_rows(self, rows: Rows) -> list[tuple[int, dict[str, Any]]]:
        """Fold a batch in order; returns its other events (and calls `on_other`)."""
        first = len(self.metas)
        code = self.code
        new_codes = [
            t if type(t) is int and 0 <= t < _CODE_BASE else code(t)
            for t in [ev["trial"] for ev in rows.starts]
        ]  # `code`, inline for the ids that are their own code
        self._latest.update(zip(new_codes, range(first, first + len(new_codes)), strict=True))
        self.metas.extend(rows.starts)
        n = len(self.metas)
        new = n - first
        if new:
            for col in (self.slot_code, self.warmup, self.ended, self.ok, self.valid):
                col.reserve(n, 0)
                col.n = n
            self.slot_code.a[first:n] = new_codes
            self.warmup.a[first:n] = [bool(ev.get("warmup")) for ev in rows.starts]
            for pc in self.phase_cols:
                self._fit(pc)
            if self.on_start is not None:
                for slot in range(first, n):
                    self.on_start(TrialOutcome(self, slot))
        if rows.ph_pos.size:
            self._phases(rows, first)
        if rows.ac_pos.size:
            slots = self._slots(rows.ac_pos, rows.ac_tid, rows, first)
            keep = slots >= 0
            self.ac_slot.extend(slots[keep])
            self.ac_dur.extend(rows.ac_dur[keep])
            self.ac_remote.extend(rows.ac_remote[keep])
        if rows.en_pos.size:
            self._ends(rows, first)
        self._batch = None
        if self.on_other is not None:
            for _, ev in rows.others:
                self.on_other(ev)
        return rows.others

    def _fit(self, pc: _PhaseCol) -> None:
        n = len(self.metas)
        if pc.sum.size < n:
            size = max(n, 2 * pc.sum.size)
            s = np.zeros(size, dtype=np.int64)
            s[: pc.sum.size] = pc.sum
            f = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
            f[: pc.first.size] = pc.first
            pc.sum, pc.first = s, f

    def _slots(self, pos: np.ndarray, tid: np.ndarray, rows: Rows, first: int) -> np.ndarray:
        """Each row's trial slot: the latest start of its id before it, or -1."""
        n_new = len(rows.start_pos)
        if pos.size <= 64:  # the console's one event: plain lookups
            return self._slots_small(pos, tid, rows, first)
        # the starts before this batch: one code -> slot table, rebuilt when it grew
        latest_before = self._map_before(first)
        codes, slots = latest_before
        k = np.searchsorted(codes, tid)
        k = np.minimum(k, max(codes.size - 1, 0))
        out = np.full(pos.size, _NONE, dtype=np.int64)
        if codes.size:
            hit = codes[k] == tid
            out[hit] = slots[k[hit]]
        if n_new:  # a start in this batch before the row wins
            spos = _i64(rows.start_pos)
            if self._batch is None or self._batch[0] is not rows:
                scode = self.slot_code.a[first : first + n_new]
                u = np.unique(scode)  # once a batch: its phases, actions and ends share it
                self._batch = (rows, u, np.searchsorted(u, scode))
            _, u, srank = self._batch
            rrank = np.minimum(np.searchsorted(u, tid), u.size - 1)
            inb = u[rrank] == tid
            lo = int(min(spos.min(), pos.min()))
            span = int(max(spos.max(), pos.max())) - lo + 2
            skey = srank * span + (spos - lo)
            order = np.argsort(skey, kind="stable")
            sk = skey[order]
            rkey = rrank * span + (pos - lo)
            j = np.searchsorted(sk, rkey) - 1  # the last start of the id before the row
            jj = np.maximum(j, 0)
            got = inb & (j >= 0) & (sk[jj] // span == rrank)
            out[got] = first + order[jj[got]]
        return out

    def _slots_small(self, pos: np.ndarray, tid: np.ndarray, rows: Rows, first: int) -> np.ndarray:
        before = self._latest
        starts = list(zip(rows.start_pos, range(first, first + len(rows.start_pos)), strict=True))
        codes = self.slot_code.a
        out = []
        for p, c in zip(pos.tolist(), tid.tolist(), strict=True):
            slot = _NONE
            for sp, s in starts:  # the latest start of this batch before the row
                if sp < p and codes[s] == c:
                    slot = s
            if slot == _NONE:
                slot = self._before(c, first, before)
            out.append(slot)
        return _i64(out)

    def _before(self, c: int, first: int, latest: dict[int, int]) -> int:
        """The latest slot of code `c` among the slots before `first`."""
        s = latest.get(c, _NONE)
        if s < first:
            return s
        codes = self.slot_code.a[:first]
        hits = np.flatnonzero(codes == c)
        return int(hits[-1]) if hits.size else _NONE

    def _map_before(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        if self._map is None or self._map[0] != first:
            codes = self.slot_code.a[:first]
            # the latest slot of each code: sort by (code, slot), keep each group's last
            order = np.lexsort((np.arange(first), codes))
            c = codes[order]
            last = np.ones(first, dtype=bool)
            last[:-1] = c[1:] != c[:-1]
            self._map = (first, c[last], order[last].astype(np.int64))
        return self._map[1], self._map[2]

    def _phases(self, rows: Rows, first: int) -> None:
        slots = self._slots(rows.ph_pos, rows.ph_tid, rows, first)
        keep = slots >= 0
        slots, names, durs, pos = (
            slots[keep],
            rows.ph_name[keep],
            rows.ph_dur[keep],
            rows.ph_pos[keep],
        )
        for i in np.flatnonzero(np.bincount(names, minlength=len(rows.phase_names))).tolist():
            name = rows.phase_names[i]
            ix = self._phase_ix.get(name)
            if ix is None:
                ix = self._phase_ix[name] = len(self.phase_cols)
                self.phase_cols.append(_PhaseCol(name, name in _TIMED))
            pc = self.phase_cols[ix]
            self._fit(pc)
            m = names == i
            s = slots[m]
            add_at_sat(pc.sum, s, durs[m])
            np.minimum.at(pc.first, s, pos[m])

    def _ends(self, rows: Rows, first: int) -> None:
        slots = self._slots(rows.en_pos, rows.en_tid, rows, first)
        rows_ix = np.flatnonzero(slots >= 0)
        if not rows_ix.size:
            return
        s = slots[rows_ix]
        # the last trial_end of each slot wins, as folding them one by one would
        rev = s[::-1]
        _, last_rev = np.unique(rev, return_index=True)
        pick = rows_ix[rows_ix.size - 1 - last_rev]
        ps = slots[pick]
        self.ended.a[ps] = True
        self.ok.a[ps] = rows.en_ok[pick]
        self.valid.a[ps] = rows.en_valid[pick]
        errors = rows.end_errors
        if errors or self.errors:
            # each slot's last end: its error, or none (each slot is picked once, so the
            # order of the two loops does not matter)
            has = np.isin(pick, np.fromiter(errors, dtype=np.int64, count=len(errors)))
            if self.errors:
                for slot in self.errors.keys() & set(ps[~has].tolist()):
                    del self.errors[slot]
            for row, slot in zip(pick[has].tolist(), ps[has].tolist(), strict=True):
                self.errors[slot] = errors[row]
        if self.on_end is not None:
            for row in rows_ix.tolist():
                self.on_end(TrialOutcome(self, int(slots[row])))

    # -- reading -----------------------------------------------------------------------
    def phases_of(self, slot: int, timed: bool) -> dict[str, int]:
        got = [
            (int(pc.first[slot]), pc.name, int(pc.sum[slot]))
            for pc in self.phase_cols
            if pc.timed == timed
            and pc.first.size > slot
            and pc.first[slot] != np.iinfo(np.int64).max
        ]
        return {name: dur for _, name, dur in sorted(got)}

    def actions_of(self, slot: int) -> tuple[list[int], list[int]]:
        """A trial's action durations and remote durations, in order."""
        n = self.ac_slot.n
        if self._groups is not None and self._groups[0] == n:
            _, order, bounds = self._groups
            ix = order[bounds[slot] : bounds[slot + 1]]
        elif self._asked_at == n and n:  # asked twice with no action between: index them
            order = np.argsort(self.ac_slot.view, kind="stable")
            bounds = np.searchsorted(self.ac_slot.view[order], np.arange(len(self.metas) + 1))
            self._groups = (n, order, bounds)
            ix = order[bounds[slot] : bounds[slot + 1]]
        else:
            ix = np.flatnonzero(self.ac_slot.view == slot)
        self._asked_at = n
        remote = self.ac_remote.a[ix]
        return self.ac_dur.a[ix].tolist(), remote[remote != _NONE].tolist()

    def totals(self) -> np.ndarray:
        """Every slot's `total` (`TrialOutcome.total_ns`): its timed phases plus its
        actions, at once (what the report's `total` column and a precision check read)."""
        n = len(self.metas)
        out = np.zeros(n, dtype=np.int64)
        add_at_sat(out, self.ac_slot.view, self.ac_dur.view)
        for pc in self.phase_cols:
            if pc.timed:
                out = add_sat(out, pc.sum[:n])
        return out

    def verdict_codes(self) -> np.ndarray:
        """Every slot's verdict, as an index into `VERDICTS`."""
        n = len(self.metas)
        i = (
            self.warmup.a[:n].astype(np.int8) * 8
            + self.ended.a[:n] * 4
            + self.ok.a[:n] * 2
            + self.valid.a[:n]
        )
        codes: np.ndarray = _VERDICT_TABLE[i]
        return codes


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
