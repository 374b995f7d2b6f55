"""Step detection in a series of figures, run after run: where its level changed.

The method is airspeed velocity's (asv, `asv/step_detect.py`, BSD-3-Clause; the exact
Potts solver of Friedrich et al., "Complexity penalized M-estimation", J. Comput. Graph.
Stat. 2008): the series y_1..y_n is fitted by a piecewise-constant x minimising

    F[x] = gamma * J(x) + sum |y_i - x_i|

(J: the number of jumps; each segment's level is its median, the L1 fit), by dynamic
programming, exactly. The penalty gamma is chosen as asv chooses it: a rough golden
search over log gamma minimising `beta * J + log(sigma_0 + sigma*)`, beta = 4 ln(n)/n (a
BIC-like cost per breakpoint), sigma* the L1 residual allowing first-order correlated
noise (its rho fitted), sigma_0 a noise floor. A boundary of the fit is reported as a
step only when, as asv's `detect_regressions` asks, its jump exceeds the mean absolute
deviation of both segments it separates, and the practical minimum (`rtax compare`'s
`--min-effect`: 5% of the level before and 0.5 ms by default); a segment of one run
between two at the same level is an outlier, not two steps.

What it assumes: a segment's figures scatter around one level, each run weighs the same,
and a run's figure is one number (its P50: the trials within a run are not looked at
here; `rtax compare` does that for two runs). What rtax changes: it fits log(y), since a
timing's noise grows with its level (a jump is a ratio); a step must also exceed three
times the series' run-to-run noise (the median successive difference, as a Gaussian's
sigma), since asv's penalty cuts a short series into single runs, whose deviation is 0;
no weights; the exact solver throughout (asv windows long series; a history holds few
runs, O(n^2 log n) here). The fit is conservative: on series of 6 to 30 runs with 10%
noise, a 2x step was found in about three of four, a 1.3x one in fewer than one in ten,
and a step was reported in about one steady series of a hundred.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

GOLDEN = 2 / (1 + math.sqrt(5))
NOISE_SIGMAS = 3.0  # a step is wider than this many sigmas of the run-to-run noise
TINY = 1e-9  # the floor of a figure before its log (a P50 of 0)


@dataclass(frozen=True)
class Segment:
    """Runs [start, end) at one level: their median, and their mean absolute deviation
    from it (asv's error estimate of the segment)."""

    start: int
    end: int
    level: float
    err: float


@dataclass(frozen=True)
class Step:
    """A change of level at run `at` (the first run of the new level)."""

    at: int
    before: float
    after: float

    @property
    def diff(self) -> float:
        return self.after - self.before

    @property
    def rel(self) -> float | None:
        """The change over the level before (None when that level is 0)."""
        return self.diff / self.before if self.before else None


def _rolling_median_dev(items: Sequence[float]) -> Iterator[tuple[float, float]]:
    """For j = 1..len(items): (median(items[:j]), sum |x - median| over items[:j]),
    in O(n log n) with two heaps (asv's `rolling_median_dev`)."""
    low: list[float] = []  # max-heap of the lower half, negated
    high: list[float] = []  # min-heap of the upper half
    low_sum = high_sum = 0.0  # sum of the lower half's values, of the upper half's
    for j, v in enumerate(items):
        if j % 2 == 0:  # odd count after: the median is high[0]
            moved = -heapq.heappushpop(low, -v)
            low_sum += v - moved
            heapq.heappush(high, moved)
            high_sum += moved
            yield high[0], max(0.0, high_sum - low_sum - high[0])
        else:
            moved = heapq.heappushpop(high, v)
            high_sum += v - moved
            heapq.heappush(low, -moved)
            low_sum += moved
            yield (high[0] - low[0]) / 2, max(0.0, high_sum - low_sum)


class _Costs:
    """Every interval's median and L1 cost, `mu[l][r - l]` and `dist[l][r - l]` for the
    runs l..r inclusive."""

    def __init__(self, y: Sequence[float]) -> None:
        self.mu: list[list[float]] = []
        self.dist: list[list[float]] = []
        for left in range(len(y)):
            pairs = list(_rolling_median_dev(y[left:]))
            self.mu.append([m for m, _ in pairs])
            self.dist.append([d for _, d in pairs])


def _solve_potts(n: int, costs: _Costs, gamma: float) -> list[int]:
    """The exact minimiser of F for this gamma: each segment's (exclusive) right end."""
    best = [-gamma] + [math.inf] * n  # best[r]: the least cost of runs 0..r-1
    prev = [0] * n  # prev[r]: where the last segment of that optimum begins
    for r in range(n):
        for left in range(r + 1):
            b = best[left] + gamma + costs.dist[left][r - left]
            if b <= best[r + 1]:  # ties: the later start, as asv's `<=`
                best[r + 1] = b
                prev[r] = left
    rights: list[int] = []
    r = n
    while r > 0:
        rights.append(r)
        r = prev[r - 1]
    return rights[::-1]


def _golden_min(f: Callable[[float], float], a: float, b: float, xatol: float) -> float:
    """The rough minimum of f on [a, b] by golden-section search, the bounds widened so
    that f is tried at a and b first (asv's `golden_search(expand_bounds=True)`)."""
    x0 = (GOLDEN * a - (1 - GOLDEN) * b) / (2 * GOLDEN - 1)
    x3 = (GOLDEN * b - (1 - GOLDEN) * a) / (2 * GOLDEN - 1)
    x1 = GOLDEN * x0 + (1 - GOLDEN) * x3
    x2 = (1 - GOLDEN) * x0 + GOLDEN * x3
    f1, f2 = f(x1), f(x2)
    while abs(x0 - x3) >= xatol:
        if f2 < f1:
            x0, x1 = x1, x2
            x2 = GOLDEN * x1 + (1 - GOLDEN) * x3
            f1, f2 = f2, f(x2)
        else:
            x3, x2 = x2, x1
            x1 = GOLDEN * x2 + (1 - GOLDEN) * x0
            f2, f1 = f1, f(x1)
    return x2 if f2 < f1 else x1


def _residual(y: Sequence[float], levels: list[float], rho: float) -> float:
    """asv's sigma*: |E_0| + sum_{j>0} |E_j - rho E_{j-1}|, E the residuals of the fit."""
    s = abs(y[0] - levels[0])
    for j in range(1, len(y)):
        s += abs((y[j] - levels[j]) - rho * (y[j - 1] - levels[j - 1]))
    return s


def segments(y: Sequence[float]) -> list[Segment]:
    """The piecewise-constant fit of `y` with asv's automatic penalty (module docstring)."""
    n = len(y)
    if n == 0:
        return []
    costs = _Costs(y)
    gamma_0 = costs.dist[0][n - 1] or 1.0
    beta = 4 * math.log(n) / n if n > 1 else 1.0
    best: tuple[float, list[int]] = (math.inf, [n])

    def objective(x: float) -> float:
        nonlocal best
        rights = _solve_potts(n, costs, gamma_0 * math.exp(x))
        values, per_run, left = [], [], 0
        for r in rights:
            values.append(costs.mu[left][r - 1 - left])
            per_run += [values[-1]] * (r - left)
            left = r
        rho = _golden_min(lambda p: _residual(y, per_run, p), -1, 1, 0.05)
        if len(values) > 2:
            floor = 0.1 * min(abs(b - a) for a, b in zip(values, values[1:], strict=False))
        else:
            floor = 0.001 * min(abs(v) for v in values)
        obj = beta * len(rights) + math.log(max(1e-300, floor) + _residual(y, per_run, rho))
        if obj < best[0]:
            best = (obj, rights)
        return obj

    a = math.log(0.1 / n)
    _golden_min(objective, a, 0.0, abs(a) * 0.1)
    out, left = [], 0
    for r in best[1]:
        level = costs.mu[left][r - 1 - left]
        out.append(Segment(left, r, level, costs.dist[left][r - 1 - left] / (r - left)))
        left = r
    return out


def _noise(z: Sequence[float]) -> float:
    """A robust width of the run-to-run noise: the median absolute difference of
    successive figures, scaled to a Gaussian's sigma (a step moves one difference only)."""
    diffs = [abs(b - a) for a, b in zip(z, z[1:], strict=False)]
    return statistics.median(diffs) / (0.6745 * math.sqrt(2)) if diffs else 0.0


def detect_steps(
    y: Sequence[float], rel: float = 0.05, abs_min: float = 0.0, sigmas: float = NOISE_SIGMAS
) -> list[Step]:
    """The steps of `y` (positive figures, each run's P50): the fit's boundaries whose
    jump exceeds both segments' mean absolute deviation and `sigmas` times the run-to-run
    noise (on the log scale), and `rel` of the level before and `abs_min` (in y's unit).
    A one-run segment between two at the same level is an outlier (no step)."""
    z = [math.log(max(v, TINY)) for v in y]
    noise = _noise(z)

    def segment(start: int, end: int) -> Segment:
        level = statistics.median(z[start:end])
        err = sum(abs(v - level) for v in z[start:end]) / (end - start)
        return Segment(start, end, level, err)

    def significant(a: Segment, b: Segment) -> bool:
        before, after = statistics.median(y[a.start : a.end]), statistics.median(y[b.start : b.end])
        jump = abs(b.level - a.level)
        return jump > max(a.err, b.err, sigmas * noise) and abs(after - before) >= max(
            rel * abs(before), abs_min
        )

    merged: list[Segment] = []
    segs = segments(z)
    for i, s in enumerate(segs):
        prev = merged[-1] if merged else None
        after = segs[i + 1] if i + 1 < len(segs) else None
        if prev is None:
            merged.append(s)
            continue
        outlier = after is not None and s.end - s.start == 1 and not significant(prev, after)
        if outlier or not significant(prev, s):
            merged[-1] = segment(prev.start, s.end)
        else:
            merged.append(s)
    return [
        Step(b.start, statistics.median(y[a.start : a.end]), statistics.median(y[b.start : b.end]))
        for a, b in zip(merged, merged[1:], strict=False)
    ]
