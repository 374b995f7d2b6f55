"""The bootstrap of the median, one function for every reader: the analysis (a report's
P50 intervals, compare's differences, project's worker-hours) and the engine (a run with
`precision` checks each cell's P50 interval with it between rounds), so that a run's
verdict and the report of its recording are the same computation.

The bootstrap of the median
---------------------------
A percentile bootstrap of the median resamples the n samples with replacement
`n_boot` times and takes the 2.5th and 97.5th percentiles of the resampled
medians. Doing that literally costs n_boot * n random draws, which for the pooled
`action` samples of a large recording (10^5 to 10^6 values) is billions of draws.

We draw the same bootstrap distribution exactly, without materialising resamples.
A resample of the empirical distribution is X_i = Q(U_i) with U_i iid uniform on
(0, 1] and Q(u) = sorted[ceil(n * u) - 1] the empirical quantile function. Q is
non-decreasing, so the k-th order statistic of the resample is Q(U_(k)), and the
k-th order statistic of n uniforms is Beta(k, n - k + 1). For odd n the resample
median is Q(U_(k)) with k = (n + 1) / 2. For even n it is the mean of the k-th and
(k+1)-th order statistics, k = n / 2; given U_(k) = u, the other n - k uniforms
are iid uniform on (u, 1), so U_(k+1) = u + (1 - u) * Beta(1, n - k). Each
bootstrap median therefore costs two Beta draws and two array lookups: the cost is
one sort plus O(n_boot), memory is O(n + n_boot), and the result is the textbook
resampling bootstrap in distribution (a test checks it against literal
resampling). Draws come from `numpy.random.default_rng(seed)`, so a figure is
reproducible from the seed.
"""

from __future__ import annotations

import numpy as np

# what a report's P50 interval is drawn with (analysis.stats.summarize's defaults)
N_BOOT = 2000
SEED = 0


def bootstrap_medians(sorted_x: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """`n_boot` bootstrap medians of the already sorted sample `sorted_x`.

    Exact in distribution to resampling n values with replacement and taking
    `numpy.median` of each resample (see the module docstring).
    """
    n = sorted_x.shape[0]
    if n == 0:
        raise ValueError("bootstrap of an empty sample")
    if n == 1:
        same: np.ndarray = np.full(n_boot, sorted_x[0], dtype=np.float64)
        return same
    last = n - 1
    if n % 2 == 1:
        k = (n + 1) // 2
        u = rng.beta(k, n - k + 1, size=n_boot)
        idx = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, last)
        picked: np.ndarray = sorted_x[idx].astype(np.float64)
        return picked
    k = n // 2
    u1 = rng.beta(k, n - k + 1, size=n_boot)
    u2 = u1 + (1.0 - u1) * rng.beta(1, n - k, size=n_boot)
    i1 = np.clip(np.ceil(u1 * n).astype(np.int64) - 1, 0, last)
    i2 = np.clip(np.ceil(u2 * n).astype(np.int64) - 1, 0, last)
    mid: np.ndarray = (sorted_x[i1] + sorted_x[i2]) / 2.0
    return mid


def ci95(values: np.ndarray) -> list[float]:
    """The 2.5th and 97.5th percentiles of bootstrap values: a 95% percentile interval."""
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def median_ci95(
    sorted_x: np.ndarray, *, seed: int = SEED, n_boot: int = N_BOOT
) -> tuple[float, float]:
    """The 95% bootstrap interval of the median of the sorted, non-empty sample `sorted_x`
    (its unit), drawn from `default_rng(seed)`; one value gives [x, x]."""
    if sorted_x.shape[0] == 1:
        x = float(sorted_x[0])
        return x, x
    lo, hi = ci95(bootstrap_medians(sorted_x, np.random.default_rng(seed), n_boot))
    return lo, hi
