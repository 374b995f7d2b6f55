"""The trend of one profile's runs: per cell and phase, each run's P50, and the runs
where it stepped (`rtax history PROFILE` and the console's history).

A run's figure for a cell and phase is the P50 of its measured trials, from the report's
own samples (`analysis.report.cell_samples`: the recording reader and the one fold), so
it is the P50 `rtax report` prints. Runs are ordered by when they started. Steps are found
by asv's method (`analysis.step_detect`) over the series of P50s.

Only runs that measure the same thing are compared: a series is one cell id (host,
driver, workload, channel and any mode, arrival or image part) and one definition of
its workload. A custom workload's definition is in the recording's header
(`profile.custom_workloads`): its digest splits the series when the steps changed. A
built-in workload's is not recorded: it is assumed unchanged between the runs (the
document says so, per series). Neither is the host: a changed machine or kernel shows
as a step, which is what a trend is for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtax_tui.analysis.report import cell_samples
from rtax_tui.analysis.step_detect import detect_steps
from rtax_tui.model.recording import RecordingError, read_header, read_recording
from rtax_tui.model.spec import TREND_PHASES, RtaxError

HISTORY_FORMAT = "rtax-history/1"
# The newest runs of a profile a history reads. Step detection is exact, O(n^2 log n) per
# series and phase (analysis.step_detect): 500 runs took 1 s, 4,000 took 44 s, so a
# directory of 100,000 recordings (anyone's to fill) would have kept `rtax history` for
# days. Older runs are left out, and the document says how many (`left_out`).
RUNS_MAX = 200
NS_PER_MS = 1e6
BUILTIN = "built-in workload, assumed unchanged between runs (recordings carry no digest of it)"


class HistoryError(RtaxError):
    pass


@dataclass(frozen=True)
class CellRun:
    """One cell of one run: its workload's definition, measured trials, P50s (ms)."""

    definition: str
    n: int
    p50_ms: dict[str, float]


@dataclass(frozen=True)
class RunFigures:
    """One recording, as the history reads it."""

    path: str
    run_id: str
    started_at: str
    cells: dict[str, CellRun] = field(default_factory=dict)


def definition(header: dict[str, Any], workload: str) -> str:
    """What a cell's workload was, as the recording says: `sha256:…` of a custom
    workload's steps (or a replay's source), `builtin:NAME` for a built-in one."""
    profile = header.get("profile")
    custom = profile.get("custom_workloads") if isinstance(profile, dict) else None
    if isinstance(custom, dict) and workload in custom:
        text = json.dumps(custom[workload], sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"builtin:{workload}"


def _read(path: Path) -> RunFigures:
    rec = read_recording(path)
    cells: dict[str, CellRun] = {}
    for cell, (meta, samples) in cell_samples(rec).items():
        p50 = {p: float(np.percentile(v, 50)) / NS_PER_MS for p, v in samples.items() if v.size}
        n = int(samples["total"].size) if "total" in samples else 0
        cells[cell] = CellRun(definition(rec.header, str(meta.get("workload"))), n, p50)
    return RunFigures(
        str(path), str(rec.header.get("run_id") or ""), str(rec.header.get("started_at")), cells
    )


_CACHE: dict[tuple[str, int, int], RunFigures] = {}


def run_figures(path: str | Path) -> RunFigures:
    """A recording's figures, read once per version of the file (path, size, mtime)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = _read(p)
    return _CACHE[key]


def profile_name(header: dict[str, Any]) -> str:
    prof = header.get("profile")
    return str(prof.get("name") or "?") if isinstance(prof, dict) else "?"


@dataclass
class Found:
    """The recordings of a profile under the roots, and what else was there."""

    paths: list[Path] = field(default_factory=list)  # the newest RUNS_MAX, oldest first
    others: set[str] = field(default_factory=set)  # the other profiles recorded
    skipped: list[str] = field(default_factory=list)  # unreadable headers of other files
    left_out: int = 0  # this profile's older runs past RUNS_MAX


def find_profile_runs(profile: str, roots: Iterable[Path]) -> Found:
    """Every `*.jsonl` under `roots` whose header names `profile` (`profile.name`). A
    file whose header cannot be read is an error when its name says it is this
    profile's (`<time>-PROFILE.jsonl`), else skipped and named in `skipped`. Only the
    newest RUNS_MAX runs (by their headers' `started_at`) are kept."""
    found = Found()
    seen: set[Path] = set()
    mine: list[tuple[str, str, Path]] = []
    for root in roots:
        if not root.is_dir():
            raise HistoryError(f"{root}: no such directory of recordings")
        for p in sorted(root.rglob("*.jsonl")):
            if p.resolve() in seen:
                continue
            seen.add(p.resolve())
            try:
                header = read_header(p)
            except RecordingError as exc:
                if p.name.endswith(f"-{profile}.jsonl"):
                    raise
                found.skipped.append(str(exc))
                continue
            name = profile_name(header)
            if name == profile:
                mine.append((str(header.get("started_at")), str(p), p))
            else:
                found.others.add(name)
    found.left_out = max(0, len(mine) - RUNS_MAX)
    found.paths = [Path(p) for p in newest([(started, path) for started, path, _ in mine])]
    return found


def _step_row(
    series: list[dict[str, Any]], phase: str, at: int, before: float, after: float
) -> dict[str, Any]:
    """A step of `phase` at run `at` of the series (its first run at the new level)."""
    diff = after - before
    return {
        "phase": phase,
        "run": at,
        "run_id": series[at]["run_id"],
        "started_at": series[at]["started_at"],
        "before_ms": before,
        "after_ms": after,
        "diff_ms": diff,
        "diff_pct": 100 * diff / before if before else None,
    }


def trends(
    runs: Sequence[RunFigures],
    phases: Sequence[str] = TREND_PHASES,
    cells: Sequence[str] = (),
    rel: float = 0.05,
    abs_ms: float = 0.5,
) -> list[dict[str, Any]]:
    """Per series (cell and workload definition, in order first recorded): each run's n
    and P50 per phase, and per phase its steps. `cells` keeps the series whose cell id
    contains one of them; `rel` and `abs_ms` are the smallest step that counts."""
    ordered = sorted(runs, key=lambda r: (r.started_at, r.path))
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in ordered:
        for cell, cr in run.cells.items():
            if cells and not any(c in cell for c in cells):
                continue
            series.setdefault((cell, cr.definition), []).append(
                {
                    "run_id": run.run_id,
                    "started_at": run.started_at,
                    "recording": run.path,
                    "n": cr.n,
                    "p50_ms": {p: cr.p50_ms.get(p) for p in phases},
                }
            )
    out = []
    for (cell, defn), points in series.items():
        steps = []
        for phase in phases:
            idx = [i for i, pt in enumerate(points) if pt["p50_ms"][phase] is not None]
            ys = [points[i]["p50_ms"][phase] for i in idx]
            for st in detect_steps(ys, rel=rel, abs_min=abs_ms):
                steps.append(_step_row(points, phase, idx[st.at], st.before, st.after))
        out.append(
            {
                "cell": cell,
                "definition": defn,
                "assumed": BUILTIN if defn.startswith("builtin:") else None,
                "runs": points,
                "steps": sorted(steps, key=lambda s: (s["run"], phases.index(s["phase"]))),
            }
        )
    return out


def history_document(
    profile: str,
    runs: Sequence[RunFigures],
    phases: Sequence[str] = TREND_PHASES,
    cells: Sequence[str] = (),
    rel: float = 0.05,
    abs_ms: float = 0.5,
) -> dict[str, Any]:
    """The `rtax-history/1` document: the profile, the method, the series."""
    return {
        "format": HISTORY_FORMAT,
        "profile": profile,
        "runs": len(runs),
        "phases": list(phases),
        "method": "asv step detection (L1 Potts fit of log P50, automatic penalty); "
        f"a step exceeds its segments' deviation, 3 sigmas of the run-to-run noise, "
        f"{rel:.0%} and {abs_ms:g} ms",
        "series": trends(runs, phases, cells, rel, abs_ms),
    }


def steps_by_recording(series: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The steps of `trends(...)`'s series, by the recording of the run each stepped at
    (its first run at the new level), each with its series' `cell`: what the console's
    history marks beside a run."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in series:
        for step in s["steps"]:
            path = s["runs"][step["run"]]["recording"]
            out.setdefault(path, []).append({**step, "cell": s["cell"]})
    return out


def newest(paths: Sequence[tuple[str, str]]) -> list[str]:
    """Of (started_at, path) pairs, the paths of the newest RUNS_MAX, oldest first: the
    runs a history reads."""
    ordered = sorted(paths)
    return [p for _, p in ordered[max(0, len(ordered) - RUNS_MAX) :]]
