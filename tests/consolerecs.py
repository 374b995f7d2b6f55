"""Recordings for the console's tests, written with the model's writer: cells of measured
trials one after the other, with `noise`, `programs` and `precision` events beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtax_tui.model.recording import RecordingWriter

STEADY = "local/local/w/exec"
SHAKY = "local/local/[red]x[/]/exec"  # a label with Rich markup: shown as it is
OTHER = "local/stage/w/exec"  # compared with STEADY (same host, workload, channel)


def header(profile: dict[str, Any], started: str = "2026-12-01T00:00:00+00:00") -> dict[str, Any]:
    return {"type": "run", "t_ns": 0, "format": "rtax/1", "run_id": f"run-{started}",
            "started_at": started, "seed": 1, "argv": ["rtax"], "profile": profile,
            "hosts": {"local": {}}}  # fmt: skip


def trials(cells: dict[str, list[float]], t0_s: float = 1.0) -> list[dict[str, Any]]:
    """Per cell, measured trials of these totals (ms, a create each), one after the other
    from `t0_s`, in the order given."""
    out: list[dict[str, Any]] = []
    t, trial = int(t0_s * 1e9), 0
    for cell, totals in cells.items():
        parts = cell.split("/")  # a workload's name may hold a "/" (SHAKY's does)
        host, driver, workload, channel = parts[0], parts[1], "/".join(parts[2:-1]), parts[-1]
        for ms in totals:
            trial += 1
            dur = int(ms * 1e6)
            out.append({"type": "trial_start", "t_ns": t, "trial": trial, "cell": cell,
                        "host": host, "driver": driver, "workload": workload,
                        "channel": channel, "warmup": False, "batch": None})  # fmt: skip
            out.append({"type": "phase", "t_ns": t + dur, "trial": trial, "name": "create",
                        "dur_ns": dur, "ok": True})  # fmt: skip
            out.append({"type": "trial_end", "t_ns": t + dur, "trial": trial, "ok": True,
                        "valid": True, "error": None})  # fmt: skip
            t += dur + 1000
    return out


def noise(at_s: float, **kw: object) -> dict[str, Any]:
    """A quiet sample of 1 s ending at `at_s`, with `kw` changed (tests/hosts/test_noise.py's)."""
    return {"type": "noise", "host": "local", "at_ns": int(at_s * 1e9), "dur_ns": 1_000_000_000,
            "cpus": 2, "busy": 0.3, "own": 0.25, "other": 0.05, "steal": 0.0, "load1": 0.5,
            **kw}  # fmt: skip


def programs(cell: str, python3: str) -> dict[str, Any]:
    """`cell`'s answer: python3 is the file `python3`."""
    return {"type": "programs", "trial": 1, "cell": cell, "path": "/usr/bin:/bin",
            "programs": [{"name": "python3", "path": python3, "resolved": python3,
                          "sha256": None, "version": "Python 3.11.2"}]}  # fmt: skip


def precision(round_: int, cell: str, verdict: str, p50_ms: float, reach: float,
              end: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A check's event: the interval reaches `reach` of the P50 on its wider side."""
    p50 = int(p50_ms * 1e6)
    ev = {"type": "precision", "round": round_, "cell": cell, "n": 20, "trials": 20,
          "p50_ns": p50, "lo_ns": int(p50 * (1 - reach / 2)), "hi_ns": int(p50 * (1 + reach)),
          "target": 0.05, "verdict": verdict}  # fmt: skip
    if end is not None:
        ev["end"] = end
    return ev


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    """The events, numbered in time by their order, and a run_end, into a new recording."""
    w = RecordingWriter.open(path)
    last = 0
    for ev in events:
        ev.setdefault("t_ns", last)
        last = max(last, int(ev["t_ns"]))
        w.write(ev)
    w.write({"type": "run_end", "t_ns": last + 1, "status": "completed", "trials": 0})
    w.close()
    return path


def marked_run(path: Path) -> Path:
    """One run with every mark: STEADY (20 trials, 1-3 s), SHAKY (20 trials, 3-5 s, a
    load of 4 and swapping in its second half: may be unstable), OTHER (5 trials: rough
    figures); STEADY and OTHER ran another python3; a precision check after round 1."""
    evs = [header({"name": "marks", "precision": "5%"})]
    # the verdicts come from the trials (the report and the console work them out again):
    # STEADY's P50 is tight, SHAKY's a coin toss of 60 and 140 ms, OTHER has too few
    evs += trials({
        STEADY: [99.0, 101.0] * 10, SHAKY: [60.0, 140.0] * 10, OTHER: [100.0] * 5,
    })  # fmt: skip
    evs += [programs(STEADY, "/root/.pyenv/shims/python3"), programs(OTHER, "/usr/bin/python3")]
    evs += [noise(2.0), noise(3.0), noise(4.0), noise(5.0, load1=4.0, swap_in=12, swap_out=3)]
    evs += [
        precision(1, STEADY, "precise", 100.0, 0.03, end="max_trials"),
        precision(1, SHAKY, "wide", 100.0, 0.12, end="max_trials"),
        precision(1, OTHER, "wide", 100.0, 0.2, end="max_trials"),
    ]
    return write(path, evs)
