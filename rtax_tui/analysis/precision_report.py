"""A precision run's verdict as the report shows it: the last check's `precision` events.

The engine recorded its checks (`engine.precision`, one event per cell and round); the
report shows the last one as it was decided (the verdict, the P50 and its interval, and
why the rounds ended), so that `rtax report` of the recording says what the run said.
The `within` column is how far the interval reaches from the P50, the larger side, as
a share of it: what the rule (`model.precision`) held against the target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtax_tui.model.precision import PRECISE

NS_PER_MS = 1e6


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def reach(ev: Mapping[str, Any]) -> float | None:
    """max(p50 - lo, hi - p50) / p50, or None (no interval, or a P50 of 0)."""
    p50, lo, hi = ev["p50_ns"], ev["lo_ns"], ev["hi_ns"]
    if p50 is None or lo is None or hi is None or p50 == 0:
        return None
    return float(max(p50 - lo, hi - p50)) / float(p50)


def precision_document(last: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The last check (its events, one per cell) as the report's `precision` section."""
    if not last:
        return None
    ends = [ev["end"] for ev in last if "end" in ev]
    cells = [
        {
            "cell": ev["cell"],
            "n": ev["n"],
            "trials": ev["trials"],
            "p50_ms": _ms(ev["p50_ns"]),
            "ci95_ms": [_ms(ev["lo_ns"]), _ms(ev["hi_ns"])],
            "within": reach(ev),
            "verdict": ev["verdict"],
        }
        for ev in last
    ]
    return {
        "target": last[0]["target"],
        "rounds": last[0]["round"],
        # why the rounds ended; None: the run ended before its last check said (killed)
        "end": ends[0] if ends else None,
        "cells": cells,
        "not_precise": [c["cell"] for c in cells if c["verdict"] != PRECISE],
    }
