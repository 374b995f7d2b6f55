import numpy as np
import pytest

from rtax_tui.analysis.stats import bootstrap_medians, clusters, median_diff, project, summarize


def _lognormal_ns(rng, median_ms, sigma, n):
    return rng.lognormal(np.log(median_ms * 1e6), sigma, size=n).astype(np.int64)


def test_summarize_matches_numpy():
    rng = np.random.default_rng(42)
    x = _lognormal_ns(rng, 20.0, 0.5, 1001)
    s = summarize(x)
    ms = x / 1e6
    assert s["n"] == 1001
    assert s["min_ms"] == pytest.approx(ms.min())
    assert s["max_ms"] == pytest.approx(ms.max())
    assert s["mean_ms"] == pytest.approx(ms.mean())
    assert s["p50_ms"] == pytest.approx(np.percentile(ms, 50))
    assert s["p95_ms"] == pytest.approx(np.percentile(ms, 95))
    assert s["p99_ms"] == pytest.approx(np.percentile(ms, 99))
    lo, hi = s["p50_ci95_ms"]
    assert lo < s["p50_ms"] < hi
    # The interval of a median of ~1000 lognormal values is a few percent wide.
    assert (hi - lo) / s["p50_ms"] < 0.2
    assert isinstance(s["p50_ms"], float) and isinstance(s["n"], int)


def test_summarize_even_n_and_unsorted_input():
    x = [40e6, 10e6, 30e6, 20e6]
    s = summarize(x)
    assert s["p50_ms"] == pytest.approx(25.0)
    assert s["min_ms"] == pytest.approx(10.0)
    assert s["max_ms"] == pytest.approx(40.0)
    lo, hi = s["p50_ci95_ms"]
    assert 10.0 <= lo <= 25.0 <= hi <= 40.0


def test_summarize_ci_reproducible_and_seeded():
    rng = np.random.default_rng(7)
    x = _lognormal_ns(rng, 5.0, 0.8, 300)
    a = summarize(x, seed=3)
    b = summarize(x, seed=3)
    c = summarize(x, seed=4)
    assert a == b
    assert a["p50_ci95_ms"] != c["p50_ci95_ms"]
    assert a["p50_ms"] == c["p50_ms"]


def test_summarize_empty_and_single():
    e = summarize(np.array([], dtype=np.int64))
    assert e["n"] == 0
    assert e["p50_ms"] is None and e["mean_ms"] is None and e["min_ms"] is None
    assert e["p50_ci95_ms"] == [None, None]
    one = summarize([2_500_000])
    assert one["n"] == 1
    assert one["p50_ms"] == one["min_ms"] == one["max_ms"] == pytest.approx(2.5)
    assert one["p50_ci95_ms"] == [pytest.approx(2.5), pytest.approx(2.5)]


@pytest.mark.parametrize("n", [2, 7, 8, 51])
def test_bootstrap_medians_match_literal_resampling(n):
    """The order-statistic bootstrap has the distribution of literal resampling."""
    x = np.sort(np.random.default_rng(n).lognormal(0, 1, n))
    b = 40_000
    exact = bootstrap_medians(x, np.random.default_rng(1), b)
    idx = np.random.default_rng(2).integers(0, n, size=(b, n))
    literal = np.median(x[idx], axis=1)
    qs = [2.5, 10, 25, 50, 75, 90, 97.5]
    spread = x[-1] - x[0]
    np.testing.assert_allclose(
        np.percentile(exact, qs), np.percentile(literal, qs), atol=0.05 * spread
    )
    assert exact.mean() == pytest.approx(literal.mean(), abs=0.02 * spread)
    # Every bootstrap median is a sample value or the mean of two of them.
    assert exact.min() >= x[0] and exact.max() <= x[-1]


def test_median_diff_clear_separation():
    rng = np.random.default_rng(1)
    a = _lognormal_ns(rng, 10.0, 0.2, 200)
    b = _lognormal_ns(rng, 30.0, 0.2, 200)
    d = median_diff(a, b)
    assert d["a_p50_ms"] == pytest.approx(np.median(a) / 1e6)
    assert d["b_p50_ms"] == pytest.approx(np.median(b) / 1e6)
    assert d["diff_ms"] == pytest.approx(d["b_p50_ms"] - d["a_p50_ms"])
    assert d["ratio"] == pytest.approx(d["b_p50_ms"] / d["a_p50_ms"])
    assert 2.5 < d["ratio"] < 3.5
    lo, hi = d["ci95_ms"]
    assert 0 < lo < d["diff_ms"] < hi
    assert d["faster"] == "a"
    r = median_diff(b, a)
    assert r["faster"] == "b"
    assert r["diff_ms"] == pytest.approx(-d["diff_ms"])
    assert r["ci95_ms"][1] < 0


def test_median_diff_same_distribution_is_neither():
    rng = np.random.default_rng(5)
    a = _lognormal_ns(rng, 10.0, 0.3, 400)
    # The same values in another order: the difference is exactly 0.
    same = median_diff(a, rng.permutation(a), seed=9)
    assert same["diff_ms"] == 0
    assert same["ratio"] == 1.0
    lo, hi = same["ci95_ms"]
    assert lo < 0 < hi
    assert same["faster"] == "neither"
    # Independent samples of one distribution: the 95% interval covers 0 about
    # 95% of the time (binomial, 200 pairs: below 88% would be far off).
    covered = 0
    for i in range(200):
        x = _lognormal_ns(rng, 10.0, 0.3, 200)
        y = _lognormal_ns(rng, 10.0, 0.3, 200)
        covered += median_diff(x, y, seed=i, n_boot=500)["faster"] == "neither"
    assert covered >= 176
    b = _lognormal_ns(rng, 10.0, 0.3, 400)
    assert median_diff(a, b, seed=2) == median_diff(a, b, seed=2)


def test_median_diff_rejects_empty():
    with pytest.raises(ValueError):
        median_diff([], [1, 2, 3])


def test_clusters_bimodal():
    rng = np.random.default_rng(3)
    fast = _lognormal_ns(rng, 2.0, 0.1, 700)  # warm cache
    slow = _lognormal_ns(rng, 50.0, 0.1, 300)  # image pull
    x = rng.permutation(np.concatenate([fast, slow]))
    cl = clusters(x)
    assert cl is not None and len(cl) == 2
    assert [c["n"] for c in cl] == [700, 300]
    assert cl[0]["p50_ms"] == pytest.approx(np.median(fast) / 1e6)
    assert cl[1]["p50_ms"] == pytest.approx(np.median(slow) / 1e6)
    assert cl[0]["max_ms"] == pytest.approx(fast.max() / 1e6)
    assert cl[1]["min_ms"] == pytest.approx(slow.min() / 1e6)


def test_clusters_trimodal():
    rng = np.random.default_rng(4)
    parts = [_lognormal_ns(rng, m, 0.1, k) for m, k in ((1.0, 400), (20.0, 300), (400.0, 300))]
    cl = clusters(np.concatenate(parts))
    assert cl is not None
    assert [c["n"] for c in cl] == [400, 300, 300]


def test_clusters_unimodal_and_small_minority():
    rng = np.random.default_rng(8)
    assert clusters(_lognormal_ns(rng, 10.0, 0.5, 2000)) is None
    assert clusters(_lognormal_ns(rng, 10.0, 1.0, 500)) is None
    # A 5% slow minority is below the 10% threshold: not a cluster.
    x = np.concatenate([_lognormal_ns(rng, 2.0, 0.1, 950), _lognormal_ns(rng, 50.0, 0.1, 50)])
    assert clusters(x) is None
    # Too few samples to say anything.
    assert clusters([1e6] * 5 + [1e8] * 5) is None
    assert clusters([]) is None


def test_project_formula_by_hand():
    ns = 1e9
    per = {
        "create": [1.0 * ns, 2.0 * ns, 3.0 * ns],  # median 2 s
        "ready": [0.5 * ns],  # 0.5 s
        "teardown": [0.2 * ns, 0.4 * ns],  # 0.3 s
        "action": [0.1 * ns, 0.1 * ns, 0.3 * ns, 0.1 * ns, 0.2 * ns],  # 0.1 s
        "orchestration": [100 * ns],  # not part of the formula
    }
    p = project(per, trajectories=1000, steps=50, seed=0)
    per_traj = 2.0 + 0.5 + 0.3 + 50 * 0.1
    assert p["per_trajectory_s"] == pytest.approx(per_traj)
    assert p["worker_hours"] == pytest.approx(1000 * per_traj / 3600)
    lo, hi = p["ci95"]
    assert lo <= p["worker_hours"] <= hi
    # Bounds: every bootstrap median lies within the sample range of its phase.
    assert lo >= 1000 * (1.0 + 0.5 + 0.2 + 50 * 0.1) / 3600 - 1e-9
    assert hi <= 1000 * (3.0 + 0.5 + 0.4 + 50 * 0.3) / 3600 + 1e-9
    assert p["inputs"]["create"] == {"n": 3, "p50_s": pytest.approx(2.0)}
    assert p["inputs"]["action"]["n"] == 5
    assert project(per, 1000, 50, seed=0) == p


def test_project_missing_phase():
    p = project({"create": [1e9], "ready": [1e9], "teardown": [1e9]}, 10, 5)
    assert p["worker_hours"] is None
    assert p["ci95"] == [None, None]
    assert p["inputs"]["action"] == {"n": 0, "p50_s": None}


def test_summarize_large_sample_is_fast():
    import time

    x = np.random.default_rng(0).integers(1_000_000, 50_000_000, size=1_000_000)
    t0 = time.monotonic()
    s = summarize(x)
    assert time.monotonic() - t0 < 2.0
    lo, hi = s["p50_ci95_ms"]
    assert lo <= s["p50_ms"] <= hi
    assert hi - lo < 0.5  # ms: the median of a million uniform values is sharp
