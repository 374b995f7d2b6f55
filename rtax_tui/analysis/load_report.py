"""What a recording says about load (`report["load"]`): per cell, its start-up under each
arrival pattern (model.arrivals), and how closely the arrivals kept to the pattern.

A row is one cell under one pattern: its measured trials' create, ready, acquire (pooled)
and start-up (create + ready, or acquire) with P50/P95/P99 (the report's `summarize`,
so the same percentiles as every other table), the offered load (a burst's size, a
rate's arrivals a second) and what was achieved: for a rate, arrivals a second from the
first start to the last of each episode (n - 1 gaps over their span, summed over the
episodes); for a burst, how far apart its starts were (the median over its episodes of
the last start minus the first). `late` is a trial's start minus the instant it was due
(`trial_start.t_ns - arrival_ns`): what the harness added before the substrate was asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from rtax_tui.analysis.stats import summarize
from rtax_tui.model.arrivals import SEQUENTIAL, arrival_of, base_cell, order_key, parse_arrival
from rtax_tui.model.fold import TrialOutcome

NS_PER_MS = 1e6
PARTS = ("create", "ready", "acquire", "startup")


class LoadCell(Protocol):
    """What the report keeps of a cell (analysis.report's `_CellData`)."""

    cell: str
    meta: dict[str, Any]
    n: int
    failed: int
    samples: dict[str, np.ndarray]
    startup: np.ndarray

    @property
    def trials(self) -> list[TrialOutcome]: ...


def load_document(cells: Sequence[LoadCell], seed: int = 0) -> list[dict[str, Any]] | None:
    """Rows for every cell that has a pattern other than sequential (and the same cell's
    sequential row beside it), ordered by cell, then from the lightest load; None when
    the recording has no arrival pattern."""
    bases = {base_cell(cd.cell) for cd in cells if arrival_of(cd.cell) != SEQUENTIAL}
    if not bases:
        return None
    chosen = [cd for cd in cells if base_cell(cd.cell) in bases]
    first = {b: i for i, b in enumerate(dict.fromkeys(base_cell(cd.cell) for cd in chosen))}
    chosen.sort(key=lambda cd: (first[base_cell(cd.cell)], order_key(arrival_of(cd.cell))))
    return [_row(cd, seed) for cd in chosen]


def _row(cd: LoadCell, seed: int) -> dict[str, Any]:
    arrival = parse_arrival(arrival_of(cd.cell), cd.cell)
    row: dict[str, Any] = {
        "cell": base_cell(cd.cell),
        "arrival": arrival.name,
        "mode": cd.meta.get("mode", "cold"),
        "n": cd.n,
        "failed": cd.failed,
        "offered_per_s": arrival.rate if arrival.kind == "rate" else None,
        "burst": arrival.n if arrival.kind == "burst" else None,
    }
    got = _achieved(t for t in cd.trials if not t.warmup)
    if arrival.kind != "rate":  # a burst has no rate to achieve, a rate no spread
        got["achieved_per_s"] = None
    if arrival.kind != "burst":
        got["spread_p50_ms"] = None
    row.update(got)
    for part in PARTS:
        vals = cd.startup if part == "startup" else cd.samples.get(part)
        if vals is not None and vals.size:
            row[part] = summarize(vals, seed=seed)
    return row


def _achieved(trials: Iterable[TrialOutcome]) -> dict[str, Any]:
    """Achieved rate, burst spread and lateness from the trials' starts, per episode."""
    starts: dict[str, list[int]] = {}
    late: list[int] = []
    for t in trials:
        m = t.meta
        ep, due, at = m.get("episode"), m.get("arrival_ns"), m.get("t_ns")
        if ep is None or due is None or at is None:
            continue
        starts.setdefault(str(ep), []).append(int(at))
        late.append(int(at) - int(due))
    gaps = span = 0
    spreads = []
    for ts in starts.values():
        if len(ts) > 1:
            gaps += len(ts) - 1
            span += max(ts) - min(ts)
            spreads.append(max(ts) - min(ts))
    lat = np.asarray(late, dtype=np.int64)
    return {
        "episodes": len(starts),
        "achieved_per_s": gaps / (span / 1e9) if span > 0 else None,
        "spread_p50_ms": float(np.median(spreads)) / NS_PER_MS if spreads else None,
        "late_p50_ms": float(np.percentile(lat, 50)) / NS_PER_MS if lat.size else None,
        "late_p95_ms": float(np.percentile(lat, 95)) / NS_PER_MS if lat.size else None,
    }
