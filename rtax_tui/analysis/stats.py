"""Statistics over phase durations: pure functions of numpy arrays of nanoseconds.

Everything returned is plain Python (floats, ints, lists, None) so it serialises
to JSON as is. Milliseconds are floats; seconds appear only in projections.

The bootstrap of the median is the model's (`model/bootstrap.py`), shared with the engine
(a run with `precision` checks its cells' intervals with it while it runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtax_tui.analysis.report_model import MedianDiff, PhaseSummary
from rtax_tui.model.bootstrap import bootstrap_medians, ci95, median_ci95

NS_PER_MS = 1e6
NS_PER_S = 1e9

# Clustering thresholds (see `clusters`).
CLUSTER_MIN_N = 20
CLUSTER_MIN_FRACTION = 0.10
CLUSTER_GAP_FACTOR = 3.0
CLUSTER_MIN_RATIO = 2.0
CLUSTER_MIN_BLOCK = 10
CLUSTER_MIN_SIDE = 5
CLUSTER_MAX_DEPTH = 3


def _as_array(samples_ns: Any) -> np.ndarray:
    arr = np.asarray(samples_ns, dtype=np.float64).ravel()
    return arr


def summarize(samples_ns: Any, *, seed: int = 0, n_boot: int = 2000) -> PhaseSummary:
    """n, min, P50, P95, P99, max, mean (ms) and a 95% bootstrap interval of the median.

    Percentiles use numpy's default (linear) method. An empty sample gives None
    everywhere; a single sample gives the interval [x, x].
    """
    x = _as_array(samples_ns)
    n = int(x.shape[0])
    if n == 0:
        return {
            "n": 0,
            "min_ms": None,
            "p50_ms": None,
            "p95_ms": None,
            "p99_ms": None,
            "max_ms": None,
            "mean_ms": None,
            "p50_ci95_ms": [None, None],
        }
    s = np.sort(x)
    p50, p95, p99 = np.percentile(s, [50, 95, 99])
    lo, hi = median_ci95(s, seed=seed, n_boot=n_boot)
    ci: list[float | None] = [lo / NS_PER_MS, hi / NS_PER_MS]
    return {
        "n": n,
        "min_ms": float(s[0]) / NS_PER_MS,
        "p50_ms": float(p50) / NS_PER_MS,
        "p95_ms": float(p95) / NS_PER_MS,
        "p99_ms": float(p99) / NS_PER_MS,
        "max_ms": float(s[-1]) / NS_PER_MS,
        "mean_ms": float(s.mean()) / NS_PER_MS,
        "p50_ci95_ms": ci,
    }


def median_diff(
    a_ns: Any, b_ns: Any, *, seed: int = 0, n_boot: int = 2000, margin_ns: float = 0.0
) -> MedianDiff:
    """Median of b minus median of a (ms) with a 95% bootstrap interval.

    Both samples are resampled independently from one `default_rng(seed)` (a
    first, then b). `faster` names the sample with the smaller median when the
    interval excludes 0, else "neither". `ratio` is median(b) / median(a) (None
    when median(a) is 0). Both samples must be non-empty.
    """
    a = np.sort(_as_array(a_ns))
    b = np.sort(_as_array(b_ns))
    if a.shape[0] == 0 or b.shape[0] == 0:
        raise ValueError("median_diff needs two non-empty samples")
    rng = np.random.default_rng(seed)
    ma = float(np.median(a))
    mb = float(np.median(b))
    diffs = bootstrap_medians(b, rng, n_boot) - bootstrap_medians(a, rng, n_boot)
    lo, hi = ci95(diffs)
    if lo > 0:
        faster = "a"
    elif hi < 0:
        faster = "b"
    else:
        faster = "neither"
    # two-sided bootstrap p-value of "the difference is within `margin_ns` of 0" (the
    # share of resampled differences inside the margin on the side away from the
    # estimate, doubled; +1 so that it is never 0); with no margin, of "no difference":
    # what `rtax compare` corrects over all its rows (analysis.gates.judge)
    below = int(np.count_nonzero(diffs <= margin_ns))
    above = int(np.count_nonzero(diffs >= -margin_ns))
    p = min(1.0, 2 * (min(below, above) + 1) / (n_boot + 1))
    return {
        "a_p50_ms": ma / NS_PER_MS,
        "b_p50_ms": mb / NS_PER_MS,
        "diff_ms": (mb - ma) / NS_PER_MS,
        "ci95_ms": [lo / NS_PER_MS, hi / NS_PER_MS],
        "ratio": (mb / ma) if ma != 0 else None,
        "faster": faster,
        "p": p,
    }


def _iqr(v: np.ndarray) -> float:
    q1, q3 = np.percentile(v, [25, 75])
    return float(q3 - q1)


def _split(logs: np.ndarray, min_side: int) -> int | None:
    """Index i splitting sorted `logs` into [:i] and [i:], or None when unimodal.

    Candidate: the largest gap between neighbours leaving at least `min_side`
    samples on each side. Accepted when the gap exceeds CLUSTER_GAP_FACTOR times
    the larger interquartile range of the samples next to it (the `block` nearest
    values on each side: `min_side`, at least CLUSTER_MIN_BLOCK, at most the side)
    and the medians of the two sides differ by at least CLUSTER_MIN_RATIO.
    Measuring the spread next to the gap rather than over a whole side lets a
    side that is itself bimodal still be split off.
    """
    n = logs.shape[0]
    if n < 2 * min_side or min_side < 1:
        return None
    gaps = np.diff(logs)  # gaps[j] lies between logs[j] and logs[j + 1]
    lo, hi = min_side - 1, n - min_side  # a cut after j leaves j + 1 and n - j - 1
    if hi <= lo:
        return None
    j = lo + int(np.argmax(gaps[lo:hi]))
    cut = j + 1
    gap = float(gaps[j])
    block = max(min_side, CLUSTER_MIN_BLOCK)
    left_block = logs[max(0, cut - block) : cut]
    right_block = logs[cut : cut + block]
    if gap <= CLUSTER_GAP_FACTOR * max(_iqr(left_block), _iqr(right_block)):
        return None
    if float(np.median(logs[cut:]) - np.median(logs[:cut])) < np.log(CLUSTER_MIN_RATIO):
        return None
    return cut


def clusters(samples_ns: Any) -> list[dict[str, Any]] | None:
    """Time clusters of a plainly bimodal (or multimodal) sample, else None.

    Method: sort the log-durations and take the largest gap between neighbours
    that leaves at least 10% of all samples on each side. The split is accepted
    when the gap is more than 3 times the interquartile range (log space) of the
    values just next to it on either side (the nearest 10% of the sample, at
    least 10 values): the groups are tight compared with the distance between
    them. The medians of the two sides must also differ by at least 2x. Each side
    is split again the same way (the 10% stays relative to the whole sample), up
    to depth 3. Samples under 20 values are never split. Clusters come fastest
    first as {"n", "p50_ms", "min_ms", "max_ms"}.
    """
    x = np.sort(_as_array(samples_ns))
    n = int(x.shape[0])
    if n < CLUSTER_MIN_N:
        return None
    logs = np.log(np.maximum(x, 1.0))
    min_side = max(CLUSTER_MIN_SIDE, int(np.ceil(CLUSTER_MIN_FRACTION * n)))

    bounds: list[tuple[int, int]] = []

    def rec(start: int, stop: int, depth: int) -> None:
        i = _split(logs[start:stop], min_side) if depth < CLUSTER_MAX_DEPTH else None
        if i is None:
            bounds.append((start, stop))
            return
        rec(start, start + i, depth + 1)
        rec(start + i, stop, depth + 1)

    rec(0, n, 0)
    if len(bounds) < 2:
        return None
    out = []
    for start, stop in bounds:
        part = x[start:stop]
        out.append(
            {
                "n": int(part.shape[0]),
                "p50_ms": float(np.median(part)) / NS_PER_MS,
                "min_ms": float(part[0]) / NS_PER_MS,
                "max_ms": float(part[-1]) / NS_PER_MS,
            }
        )
    return out


PROJECT_PHASES = ("create", "ready", "teardown", "action")


def project(
    per_trial_ns: Mapping[str, Any],
    trajectories: int,
    steps: int,
    seed: int = 0,
    *,
    n_boot: int = 2000,
    steps_dist: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Worker-hours for `trajectories` rollouts of `steps` actions each.

    With `steps_dist` (the step counts of real trajectories), S is their mean and the
    interval resamples them too (after the phases, with the same generator).

    worker_hours = N * (create + ready + teardown + S * action) / 3600 with each
    term the median in seconds of that phase's samples (`per_trial_ns` maps phase
    name to durations in ns; `action` is the pool of all action durations). The
    95% interval comes from resampling each phase independently (one
    `default_rng(seed)`, phases in the order create, ready, teardown, action).
    When a phase has no samples every figure is None. A cell with an `image` phase (a
    run with image modes) adds it once a trajectory, resampled last (so a cell without
    one gets the figures it always had).
    """
    phases: tuple[str, ...] = PROJECT_PHASES
    if _as_array(per_trial_ns.get("image", ())).shape[0]:
        phases = PROJECT_PHASES + ("image",)
    arrays = {p: np.sort(_as_array(per_trial_ns.get(p, ()))) for p in phases}
    inputs: dict[str, Any] = {
        p: {
            "n": int(arrays[p].shape[0]),
            "p50_s": float(np.median(arrays[p])) / NS_PER_S if arrays[p].shape[0] else None,
        }
        for p in phases
    }
    if any(arrays[p].shape[0] == 0 for p in phases):
        return {
            "worker_hours": None,
            "ci95": [None, None],
            "per_trajectory_s": None,
            "inputs": inputs,
        }
    dist = None if steps_dist is None else np.asarray(steps_dist, dtype=np.float64)
    s_mean = steps if dist is None else float(dist.mean())
    weights = {"create": 1.0, "ready": 1.0, "teardown": 1.0, "action": s_mean, "image": 1.0}
    per_traj = sum(weights[p] * inputs[p]["p50_s"] for p in phases)
    rng = np.random.default_rng(seed)
    boot = np.zeros(n_boot, dtype=np.float64)
    for p in phases:
        meds = bootstrap_medians(arrays[p], rng, n_boot) / NS_PER_S
        if p == "action" and dist is not None:
            picks = rng.integers(0, dist.shape[0], size=(n_boot, dist.shape[0]))
            boot += dist[picks].mean(axis=1) * meds
        else:
            boot += weights[p] * meds
    boot_hours = trajectories * boot / 3600.0
    return {
        "worker_hours": trajectories * per_traj / 3600.0,
        "ci95": ci95(boot_hours),
        "per_trajectory_s": per_traj,
        "inputs": inputs,
    }
