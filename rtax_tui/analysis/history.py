"""The runs recorded so far: where recordings live, what each one holds in a line, and
how long a planned cell took before.

The console's history and its launcher's duration estimate read recordings here,
through the recording reader and the one trial fold (`model.fold`), so a trial counts
the same way as in `rtax report`. A summary is kept per file version (path, size,
mtime): going back to the history does not read every recording again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtax_tui.analysis.pairing import cell_fields, pair_fields
from rtax_tui.model.fold import TrialFold
from rtax_tui.model.recording import read_recording

# the recordings shipped with rtax (recordings/examples), beside the package
SHIPPED = Path(__file__).resolve().parents[2] / "recordings"


def recording_path(profile_name: str, root: Path = Path("recordings")) -> Path:
    """Where a new run of `profile_name` is recorded: `recordings/<UTC time>-<name>.jsonl`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return root / f"{stamp}-{profile_name}.jsonl"


def profile_beside(recording: str | Path) -> Path:
    """The profile file a run started from the console leaves beside its recording."""
    return Path(recording).with_suffix(".toml")


def find_recordings(roots: list[Path] | None = None) -> list[Path]:
    """Recordings under ./recordings and the examples shipped with rtax, newest first."""
    roots = roots or [Path("recordings"), SHIPPED]
    seen: dict[Path, Path] = {}
    for root in roots:
        if root.is_dir():
            for p in root.rglob("*.jsonl"):
                seen.setdefault(p.resolve(), p)
    return sorted(seen.values(), key=lambda p: p.stat().st_mtime, reverse=True)


@dataclass(frozen=True)
class RunSummary:
    """One recording in a line: what the history lists and the estimate reads."""

    path: str
    started_at: str
    profile: str
    profile_path: str
    cells: tuple[str, ...]
    trials: int  # trial_start events, warm-ups included
    failed: int  # measured trials that failed, ended invalid or never ended
    status: str  # run_end's status, or `incomplete`
    duration_s: float
    # per cell: the mean wall time of its trials that ended (create to teardown)
    cell_trial_ns: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # the file could not be read: why
    # per cell: its host, driver, workload, channel and mode (`analysis.pairing`)
    cell_fields: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """What the history's filter matches against."""
        return " ".join(
            (self.path, self.started_at, self.profile, self.status, *self.cells)
        ).lower()


def _summarize(path: Path) -> RunSummary:
    try:
        rec = read_recording(path)
    except Exception as exc:  # a damaged file is listed with its reason, never hides the rest
        return RunSummary(str(path), "", "?", "", (), 0, 0, "unreadable", 0.0, error=str(exc))
    fold = TrialFold()
    fold.feed(rec.events)
    walls: dict[str, list[int]] = {}
    failed = 0
    for t in fold.trials.values():
        v = t.verdict
        if v in ("failed", "invalid", "incomplete"):
            failed += 1
        if t.ended:
            walls.setdefault(t.cell, []).append(t.total_ns())
    cells = tuple(dict.fromkeys(t.cell for t in fold.trials.values()))
    prof: Any = rec.header.get("profile")
    prof = prof if isinstance(prof, dict) else {}
    end = rec.end
    last = max((int(ev.get("t_ns", 0)) for ev in rec.events[-50:]), default=0)
    return RunSummary(
        path=str(path),
        started_at=str(rec.header.get("started_at") or ""),
        profile=str(prof.get("name") or "?"),
        profile_path=str(prof.get("path") or ""),
        cells=cells,
        trials=fold.starts,
        failed=failed,
        status=str(end.get("status")) if end is not None else "incomplete",
        duration_s=last / 1e9,
        cell_trial_ns={c: statistics.fmean(v) for c, v in walls.items()},
        cell_fields=cell_fields(rec.events),
    )


def paired_cells(a: RunSummary, b: RunSummary) -> dict[str, str]:
    """The cells of a that the console's compare would pair with cells of b (the rule
    of `rtax compare --changed`), of those with a trial that ended in both runs: what
    the picker asks before it offers b."""

    def timed(r: RunSummary) -> dict[str, tuple[str, ...]]:
        return {c: f for c, f in r.cell_fields.items() if c in r.cell_trial_ns}

    return pair_fields(timed(a), timed(b), changed=True)


_CACHE: dict[tuple[str, int, int], RunSummary] = {}


def summarize(path: str | Path) -> RunSummary:
    """The recording's summary, read once per version of the file."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        return RunSummary(str(p), "", "?", "", (), 0, 0, "unreadable", 0.0, error=str(exc))
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = _summarize(p)
    return _CACHE[key]


def history(roots: list[Path] | None = None) -> list[RunSummary]:
    """Every recording's summary, the newest run first (by when it started: copies
    of recordings share their files' times)."""
    runs = [summarize(p) for p in find_recordings(roots)]
    return sorted(runs, key=lambda r: r.started_at, reverse=True)


def display_path(path: str | Path) -> str:
    """A recording's path as a person reads it: relative to here, or to rtax's own
    recordings (`examples/...`) for the shipped ones."""
    p = Path(path)
    for base in (Path.cwd(), SHIPPED):
        try:
            return str(p.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return str(p)


@dataclass(frozen=True)
class Estimate:
    seconds: float  # of the cells that ran before
    known: tuple[str, ...]  # cells with an earlier recording
    unknown: tuple[str, ...]  # cells never recorded

    def text(self) -> str:
        if not self.known:
            return "no earlier recording of these cells: no estimate"
        s = f"≈ {fmt_duration(self.seconds)}"
        if self.unknown:  # they may well have run, in a recording no longer here
            n, of = len(self.unknown), len(self.known) + len(self.unknown)
            s += f" (not counting {n} of {of} cells: no earlier timing)"
        return s


def estimate(planned: dict[str, int], concurrency: int, runs: list[RunSummary]) -> Estimate:
    """The duration of a plan (trials per cell) from the newest recording of each cell:
    its mean trial wall time, times the planned trials, over the concurrency."""
    per_trial: dict[str, float] = {}
    for run in runs:  # newest first: the first seen is the newest
        for cell, ns in run.cell_trial_ns.items():
            per_trial.setdefault(cell, ns)
    known = tuple(c for c in planned if c in per_trial)
    unknown = tuple(c for c in planned if c not in per_trial)
    total_ns = sum(planned[c] * per_trial[c] for c in known)
    return Estimate(total_ns / 1e9 / max(1, concurrency), known, unknown)


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
