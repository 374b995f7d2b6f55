"""Whether a cell's figures may be unstable, and why: the `noise` samples (hosts.noise)
matched to the time windows of the cell's measured trials; and its outliers.

A sample covers the window `[at_ns - dur_ns, at_ns]`; a trial the window from its
`trial_start` for its total time. A trial is touched by a kind of noise when a sample
overlapping it shows that noise; a cell "may be unstable" when at least `MIN_SHARE` of
its trials were touched by one kind (each kind its own reason, with the figure seen and
the share of trials), or when its CPU's clock varied over its trials. The thresholds
are stated here and in docs/noise.md, not tuned per run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

MIN_SHARE = 0.10  # a reason counts when it touched at least this share of the cell's trials
OTHER_CPU = 0.25  # other processes' share of every core
STEAL = 0.05  # the hypervisor's share taken from this VM
PSI_MEMORY = 10.0  # % of 10 s in which some task waited for memory
LOW_MEMORY = 256 << 20  # MemAvailable without PSI
HOT_C = 90.0
FREQ_SPREAD = 1.15  # the highest mean clock over the lowest, over the cell's samples
FEW = 10  # an interval from fewer samples than this is rough ("~")


def _load_excess(s: Mapping[str, Any]) -> float | None:
    """The load that was not rtax's own running tasks, when it exceeds the cores."""
    if "load1" not in s:
        return None
    cpus = int(s["cpus"])
    others = float(s["load1"]) - float(s.get("own", 0.0)) * cpus
    return float(s["load1"]) if others > cpus else None


# kind -> (the figure a sample shows when it is noisy, else None; its words)
REASONS: tuple[tuple[str, Callable[[Mapping[str, Any]], float | None], Callable[..., str]], ...] = (
    (
        "other_cpu",
        lambda s: s["other"] if s.get("other", 0.0) >= OTHER_CPU else None,
        lambda v, cpus: f"other processes used {v * 100:.0f}% CPU",
    ),
    ("load", _load_excess, lambda v, cpus: f"load {v:.1f} on {cpus} cores"),
    (
        "steal",
        lambda s: s["steal"] if s.get("steal", 0.0) >= STEAL else None,
        lambda v, cpus: f"steal time {v * 100:.0f}%",
    ),
    (
        "swap",
        lambda s: float(s.get("swap_in", 0) + s.get("swap_out", 0)) or None,
        lambda v, cpus: f"swapping ({v:.0f} pages a sample)",
    ),
    (
        "memory",
        lambda s: s["psi_memory"] if s.get("psi_memory", 0.0) >= PSI_MEMORY else None,
        lambda v, cpus: f"memory pressure {v:.0f}%",
    ),
    (
        "low_memory",
        lambda s: (
            s["mem_avail_bytes"] / (1 << 20)
            if s.get("mem_avail_bytes", LOW_MEMORY) < LOW_MEMORY
            else None
        ),
        lambda v, cpus: f"{v:.0f} MiB of memory available",
    ),
    (
        "heat",
        lambda s: s["temp_c"] if s.get("temp_c", 0.0) >= HOT_C else None,
        lambda v, cpus: f"CPU at {v:.0f} C (throttling likely)",
    ),
)


class Timeline:
    """A host's samples in order, each kind's figure read once: what every cell of the
    host is matched against. Built once per host, not per cell: a long run has a sample
    a second (a day is 86,400) and a recording can hold a million, so a pass over the
    samples per cell would cost cells x samples in Python. The console's live state
    `extend`s one as samples come, so each sample is read once there too."""

    def __init__(self, samples: Sequence[Mapping[str, Any]] = ()) -> None:
        self.size = 0
        self.end = np.empty(0, dtype=np.int64)
        self.start = np.empty(0, dtype=np.int64)
        self.cpus = np.empty(0, dtype=np.int64)
        self.other = np.empty(0)
        self.freq = np.empty(0)
        # kind -> (its figure per sample, NaN where not noisy; hits so far, from 0)
        self.kinds: dict[str, tuple[np.ndarray, np.ndarray]] = {
            kind: (np.empty(0), np.zeros(1, dtype=np.int64)) for kind, _, _ in REASONS
        }
        self.extend(samples)

    def extend(self, samples: Sequence[Mapping[str, Any]]) -> None:
        """Add `samples` (in any order: the timeline is kept sorted by `at_ns`)."""
        if not samples:
            return
        new = sorted(samples, key=lambda s: int(s["at_ns"]))
        end = np.asarray([s["at_ns"] for s in new], dtype=np.int64)
        cols = {
            "end": end,
            "start": end - np.asarray([s["dur_ns"] for s in new], dtype=np.int64),
            "cpus": np.asarray([s["cpus"] for s in new], dtype=np.int64),
            "other": np.asarray([float(s.get("other", 0.0)) for s in new]),
            "freq": np.asarray([float(s.get("freq_mhz", np.nan)) for s in new]),
        }
        figures = {}
        for kind, figure, _ in REASONS:
            got = [figure(s) for s in new]
            figures[kind] = np.asarray([np.nan if v is None else float(v) for v in got])
        in_order = self.size == 0 or int(end[0]) >= int(self.end[-1])
        order = None
        if not in_order:
            order = np.argsort(np.concatenate([self.end, end]), kind="stable")
        for name, col in cols.items():
            joined = np.concatenate([getattr(self, name), col])
            setattr(self, name, joined if order is None else joined[order])
        for kind, values in figures.items():
            joined = np.concatenate([self.kinds[kind][0], values])
            joined = joined if order is None else joined[order]
            hits = np.concatenate([[0], np.cumsum(~np.isnan(joined))])
            self.kinds[kind] = (joined, hits)
        self.size = int(self.end.size)


def stability(
    starts: np.ndarray,
    durs: np.ndarray,
    samples: Timeline | Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """A cell's stability from its measured trials (`starts`, `durs`: ns on the run's
    clock) and its host's samples (a `Timeline`, made once per host); None when no
    sample overlaps a trial."""
    tl = samples if isinstance(samples, Timeline) else Timeline(samples)
    if tl.size == 0 or starts.size == 0:
        return None
    ends = starts + durs
    # the samples overlapping trial j: [lo[j], hi[j]) (windows follow each other); a
    # sample is seen when some trial's range holds it
    lo = np.searchsorted(tl.end, starts, side="right")
    hi = np.maximum(np.searchsorted(tl.start, ends, side="left"), lo)
    marks = np.zeros(tl.size + 1, dtype=np.int64)
    np.add.at(marks, lo, 1)
    np.add.at(marks, hi, -1)
    seen = np.flatnonzero(np.cumsum(marks)[:-1] > 0)
    if seen.size == 0:
        return None
    n = int(starts.size)
    cpus = int(tl.cpus[seen[0]])
    reasons: list[str] = []
    kinds: dict[str, float] = {}
    for kind, _, words in REASONS:
        values, hits = tl.kinds[kind]
        noisy = values[seen]
        noisy = noisy[~np.isnan(noisy)]
        if noisy.size == 0:
            continue
        touched = int(np.count_nonzero(hits[hi] - hits[lo]))
        share = touched / n
        if share < MIN_SHARE:
            continue
        mean = float(np.sum(noisy / noisy.size))  # no overflow: each term <= the largest
        kinds[kind] = round(share, 3)
        reasons.append(f"{words(mean, cpus)} during {share * 100:.0f}% of this cell's trials")
    freqs = tl.freq[seen]
    freqs = freqs[~np.isnan(freqs)]
    if freqs.size and freqs.min() > 0 and freqs.max() / freqs.min() > FREQ_SPREAD:
        lo_f, hi_f = float(freqs.min()), float(freqs.max())
        kinds["frequency"] = round(hi_f / lo_f, 3)
        reasons.append(f"CPU clock varied {lo_f / 1000:.1f}-{hi_f / 1000:.1f} GHz over its trials")
    return {
        "samples": int(seen.size),
        "other_cpu_max": round(float(tl.other[seen].max()), 3),
        "unstable": bool(reasons),
        "kinds": kinds,
        "reasons": reasons,
    }


def outliers(x: np.ndarray) -> dict[str, int]:
    """Tukey's fences, as Criterion and hyperfine count them: a sample beyond 1.5 IQR
    of the quartiles is a mild outlier, beyond 3 IQR a severe one (both sides)."""
    if x.size < 4:
        return {"mild": 0, "severe": 0}
    q1, q3 = np.percentile(x.astype(np.float64), [25, 75])
    iqr = q3 - q1
    out3 = (x < q1 - 3 * iqr) | (x > q3 + 3 * iqr)
    out15 = (x < q1 - 1.5 * iqr) | (x > q3 + 1.5 * iqr)
    return {"mild": int(np.count_nonzero(out15 & ~out3)), "severe": int(np.count_nonzero(out3))}
