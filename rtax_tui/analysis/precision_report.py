"""A precision run's verdict as the report shows it: the rule, recomputed from the trials.

The engine recorded its checks (`engine.precision`, one event per cell and round). The
report takes from the last check (the highest round, wherever its events lie: the
report's collector keeps it) the target, the number of rounds and why they ended, and
recomputes every cell's verdict with the engine's own rule (`model.precision.check_cell`,
the same bootstrap and seed) on the recording's own measured trials, so that `rtax
report` says what the trials say: a recording whose events claim a verdict its trials do
not bear out (crafted, or cut short after its last check) shows the recomputed verdict
with the recorded one beside it, and a check of a cell that has no trial in the
recording names no cell.
The `within` column is how far the interval reaches from the P50, the larger side, as
a share of it: what the rule (`model.precision`) held against the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rtax_tui.model.precision import PRECISE, check_cell

NS_PER_MS = 1e6


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def reach_of(p50: int | None, lo: int | None, hi: int | None) -> float | None:
    """max(p50 - lo, hi - p50) / p50, or None (no interval, or a P50 of 0)."""
    if p50 is None or lo is None or hi is None or p50 == 0:
        return None
    return float(max(p50 - lo, hi - p50)) / float(p50)


def precision_document(
    last: Sequence[dict[str, Any]], cells: Sequence[tuple[str, Any, int]]
) -> dict[str, Any] | None:
    """The report's `precision` section from the last check's events (the highest round)
    and the recording's cells, each (name, measured totals in ns, measured trials run)."""
    if not last:
        return None
    target = float(last[0]["target"])
    ends = [ev["end"] for ev in last if "end" in ev]
    recorded = {ev["cell"]: ev["verdict"] for ev in last}
    out = []
    for name, totals, trials in cells:
        ch = check_cell(name, np.asarray(totals), trials, target)
        row: dict[str, Any] = {
            "cell": name,
            "n": ch.n,
            "trials": ch.trials,
            "p50_ms": _ms(ch.p50_ns),
            "ci95_ms": [_ms(ch.lo_ns), _ms(ch.hi_ns)],
            "within": reach_of(ch.p50_ns, ch.lo_ns, ch.hi_ns),
            "verdict": ch.verdict,
        }
        if recorded.get(name) != ch.verdict:  # the run said otherwise, or said nothing
            row["recorded"] = recorded.get(name)
        out.append(row)
    return {
        "target": target,
        "rounds": last[0]["round"],
        # why the rounds ended; None: the run ended before its last check said (killed)
        "end": ends[0] if ends else None,
        "cells": out,
        "not_precise": [c["cell"] for c in out if c["verdict"] != PRECISE],
    }
