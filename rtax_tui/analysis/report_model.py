"""The `rtax-report/1` document, typed: what `rtax report --format json` prints and
every reader (the tables, the plots, the console's history and compare) reads.

The format's history (the version is `model.spec.REPORT_FORMAT`):
- rtax-report/1: run, cells (phases, subphases, errors, clusters, capacity, optional
  startup/replay), diffs; optional pools, load (per cell and arrival pattern: issue 25),
  prep (a `rtax traj prepare -o` recording) and probe (a `rtax probe -o` recording).
  Keys have only been added since, never renamed: an older report reads as this one
  with the newer keys absent. Among them,
  `run.hosts.<host>.clock` (issue 26: the remote host's clock syncs, `syncs`, `err_us`
  the widest bound, `rtt_us`, and with two syncs or more `drift_ppm`, `drift_err_ppm`)
  and `run.hosts.<host>.clock_error` (why its clock could not be read).

TypedDicts, not classes: the document is JSON as it stands (orjson dumps it as is), and
these types let mypy check that every writer and reader agrees on its keys.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class PhaseSummary(TypedDict):
    """One phase's sample (`stats.summarize`): ms, None when the sample is empty."""

    n: int
    min_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None
    p50_ci95_ms: list[float | None]


class MedianDiff(TypedDict):
    """b's median minus a's (`stats.median_diff`), with its 95% bootstrap interval."""

    a_p50_ms: float
    b_p50_ms: float
    diff_ms: float
    ci95_ms: list[float]
    ratio: float | None
    faster: str  # "a", "b" or "neither": which side is faster, when the interval says so
    p: NotRequired[float]  # two-sided bootstrap p-value, uncorrected


class DiffRow(MedianDiff):
    """A driver against the first driver of its host + workload + channel group. A row
    whose two cells ran other programs also has `programs_differ` (a list of str: how,
    model.programs), set after it is made."""

    a: str
    b: str
    phase: str


class CellReport(TypedDict):
    """One cell (host/driver/workload/channel[/mode]): counts and per-phase figures."""

    cell: str
    host: str | None
    driver: str | None
    workload: str | None
    channel: str | None
    mode: NotRequired[str]  # "pool" for a pooled cell
    n: int
    failed: int
    invalid: int
    warmup: int
    phases: dict[str, PhaseSummary]
    subphases: dict[str, PhaseSummary]
    errors: dict[str, int]
    clusters: dict[str, Any]
    capacity: dict[str, Any] | None
    startup: NotRequired[str]  # a pooled cell: what its startup figure leaves out
    replay: NotRequired[dict[str, Any]]  # a replay's fidelity
    # which file each program was, and how they differ from the compared cells' (issue 38)
    programs: NotRequired[dict[str, Any]]
    outliers: NotRequired[dict[str, int]]  # total's outliers: mild, severe (Tukey)
    noise: NotRequired[dict[str, Any]]  # what skewed its trials (analysis.noise_report)


class Report(TypedDict):
    """The whole document."""

    format: str
    run: dict[str, Any]
    cells: list[CellReport]
    diffs: list[DiffRow]
    pools: NotRequired[dict[str, Any]]
    load: NotRequired[list[dict[str, Any]]]  # per cell and arrival pattern (load_report)
    image: NotRequired[list[dict[str, Any]]]  # per cell with an image mode (image_report)
    prep: NotRequired[dict[str, Any]]
    probe: NotRequired[dict[str, Any]]
    precision: NotRequired[dict[str, Any]]  # a run with precision: its last check
