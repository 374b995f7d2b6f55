"""Runs that stop when the answer is clear: the rule of a precision check, and its inputs.

A run with `precision` (`rtax run --precision 5%`, `[run] precision = "5%"`) goes on in
rounds until every cell's P50 of `total` (a trial's whole time) is known to that
precision: the rule is that both ends of the cell's 95% bootstrap interval of that P50
(the interval `rtax report` prints, `model.bootstrap`) lie within +-precision of the
P50 itself, `p50 * (1 - p) <= lo` and `hi <= p50 * (1 + p)`, from at least
`MIN_MEASURED` measured trials. The engine checks it between rounds and records each
check as `precision` events; the report reads the last check back. The rule is here,
in the model, so that the engine, the report and a test recompute the same verdict.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtax_tui.model.bootstrap import median_ci95
from rtax_tui.model.inputs import TRIALS_MAX

# fewer measured trials than this never make a cell precise: an interval of a handful
# of values is narrow by chance (one value's is [x, x])
MIN_MEASURED = 10
# the budget when a run gives none: measured trials per cell, seconds of the whole run
MAX_TRIALS_DEFAULT = 1000
MAX_TIME_DEFAULT_S = 600.0
MAX_TIME_MAX_S = 30 * 86400.0  # a budget past 30 days is a mistake

# a cell's verdict at a check
PRECISE = "precise"  # its interval is within the precision
WIDE = "wide"  # not yet
FAILING = "failing"  # no measured trial at all: it never gets there, and gets no more rounds
VERDICTS = (PRECISE, WIDE, FAILING)
# why the rounds ended (the last check's `end`)
ENDS = ("precise", "max_trials", "max_time", "failing", "stopped")

_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)%")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(s|m|h)?")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_precision(text: Any) -> float:
    """`"5%"` as 0.05: a percentage above 0 and at most 100; a ValueError says why not."""
    if not isinstance(text, str):
        raise ValueError(f'expected a percentage such as "5%", got {text!r}')
    m = _PERCENT.fullmatch(text.strip()) if len(text) <= 32 else None
    if m is None:
        raise ValueError(f"expected a percentage such as 5%, got {text!r}")
    pct = float(m.group(1))
    if not 0.0 < pct <= 100.0:
        raise ValueError(f"expected a percentage above 0% and at most 100%, got {text!r}")
    return pct / 100.0


def parse_duration(text: Any) -> float:
    """`"90s"`, `"10m"`, `"1.5h"` or `"30"` (seconds) as seconds, more than 0 and at most
    30 days; a ValueError says why not."""
    if not isinstance(text, str):
        raise ValueError(f'expected a duration such as "10m", got {text!r}')
    m = _DURATION.fullmatch(text.strip()) if len(text) <= 32 else None
    if m is None:
        raise ValueError(f"expected a duration such as 90s, 10m or 1h, got {text!r}")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not 0.0 < seconds <= MAX_TIME_MAX_S or not math.isfinite(seconds):
        raise ValueError(f"expected a duration above 0 and at most 30 days, got {text!r}")
    return seconds


def check_max_trials(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= TRIALS_MAX:
        raise ValueError(f"expected an integer 1..{TRIALS_MAX}, got {n!r}")
    return n


@dataclass(frozen=True)
class Target:
    """What a precision run aims at and what it may spend: the fraction (0.05 for 5%),
    measured trials per cell at most, seconds of the run at most."""

    precision: float
    max_trials: int = MAX_TRIALS_DEFAULT
    max_time_s: float = MAX_TIME_DEFAULT_S


@dataclass(frozen=True)
class CellCheck:
    """One cell at one check: its measured trials' P50 of total and its interval (ns,
    None without a measured trial), and the verdict."""

    cell: str
    n: int  # measured trials (ok and valid): the sample
    trials: int  # measured trials run (failed and invalid too)
    p50_ns: int | None
    lo_ns: int | None
    hi_ns: int | None
    verdict: str


def within(p50: float, lo: float, hi: float, precision: float) -> bool:
    """The rule: the interval [lo, hi] lies within +-precision of p50."""
    return p50 * (1.0 - precision) <= lo and hi <= p50 * (1.0 + precision)


def check_cell(cell: str, totals_ns: Any, trials: int, precision: float) -> CellCheck:
    """The verdict on one cell from its measured trials' totals (ns)."""
    x = np.sort(np.asarray(totals_ns, dtype=np.float64).ravel())
    n = int(x.shape[0])
    if n == 0:
        return CellCheck(cell, 0, trials, None, None, None, FAILING)
    p50 = float(np.median(x))
    lo, hi = median_ci95(x)
    ok = n >= MIN_MEASURED and within(p50, lo, hi, precision)
    return CellCheck(cell, n, trials, round(p50), round(lo), round(hi), PRECISE if ok else WIDE)
