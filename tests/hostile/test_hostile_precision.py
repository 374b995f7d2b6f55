"""The red team on precision runs (`rtax run --precision`, 2026-12-06): a recording's
`precision` events are what the run said; `rtax report` says what its trials say.

A crafted recording (handed to a user, or a run's file edited after) can record a
`precise` verdict for a cell whose trials are bimodal, a check of a cell that never ran,
and its rounds out of order. The report recomputes each cell's verdict from the raw
trials (here with a literal resampling bootstrap, not rtax's), from the highest round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from markdown_it import MarkdownIt

from rtax_tui.model.events import FORMAT

CELL = "local/local/coin/exec"
GHOST = "[all cells precise](https://attacker.invalid)"
HEADER = {
    "type": "run", "t_ns": 1, "format": FORMAT, "run_id": "r1",
    "started_at": "2026-12-05T00:00:00+00:00", "seed": 1, "argv": ["rtax"],
    "profile": {"name": "p", "precision": "20%"}, "hosts": {"local": {}},
}  # fmt: skip


def _check(round_: int, cell: str, **kw: Any) -> dict[str, Any]:
    ev = {"type": "precision", "t_ns": 0, "round": round_, "cell": cell, "n": 30, "trials": 30,
          "p50_ns": 55_000_000, "lo_ns": 54_900_000, "hi_ns": 55_100_000, "target": 0.2,
          "verdict": "precise"}  # fmt: skip
    return {**ev, **kw}


def _recording(path: Path) -> list[int]:
    """30 trials of a cell whose `ready` is 5 ms or 105 ms (a coin toss), then checks
    claiming it precise: round 2's first, round 1's after; returns the totals."""
    rng = np.random.default_rng(7)
    evs: list[dict[str, Any]] = [HEADER]
    totals = []
    t = 10
    for trial in range(1, 31):
        ready = int(rng.choice([5_000_000, 105_000_000]))
        evs.append({"type": "trial_start", "t_ns": t, "trial": trial, "cell": CELL,
                    "host": "local", "driver": "local", "workload": "coin",
                    "channel": "exec", "warmup": False, "batch": None})  # fmt: skip
        for name, dur in (("create", 1000), ("ready", ready), ("teardown", 1000)):
            t += dur
            evs.append({"type": "phase", "t_ns": t, "trial": trial, "name": name,
                        "dur_ns": dur, "ok": True})  # fmt: skip
        evs.append({"type": "trial_end", "t_ns": t, "trial": trial, "ok": True,
                    "valid": True, "error": None})  # fmt: skip
        totals.append(ready + 2000)
    evs += [_check(2, CELL, end="precise"), _check(2, GHOST, end="precise"),
            _check(1, CELL, n=10, trials=10, verdict="wide")]  # fmt: skip
    evs.append({"type": "run_end", "t_ns": t + 1, "status": "completed", "trials": 30})
    for ev in evs[1:]:
        ev["t_ns"] = ev["t_ns"] or t
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return totals


def _literal_verdict(x: list[int], precision: float) -> str:
    a = np.asarray(x, dtype=np.float64)
    meds = np.median(a[np.random.default_rng(1).integers(0, a.size, (4000, a.size))], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    p50 = float(np.median(a))
    ok = p50 * (1 - precision) <= lo and hi <= p50 * (1 + precision)
    return "precise" if ok else "wide"


def _report(rec: Path, *fmt: str) -> str:
    res = subprocess.run([sys.executable, "-m", "rtax_tui", "report", str(rec), *fmt],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_a_recorded_verdict_the_trials_do_not_bear_out_is_recomputed(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    totals = _recording(rec)
    assert _literal_verdict(totals, 0.2) == "wide"  # the coin's median jumps
    doc = json.loads(_report(rec, "--format", "json"))["precision"]
    # the highest round is the last check, though round 1's events come after it
    assert doc["rounds"] == 2 and doc["end"] == "precise"
    # the cells are the recording's: no verdict for a cell without a trial
    assert [c["cell"] for c in doc["cells"]] == [CELL]
    (cell,) = doc["cells"]
    assert cell["verdict"] == "wide" and cell["recorded"] == "precise"
    assert cell["n"] == 30 and doc["not_precise"] == [CELL]
    assert cell["p50_ms"] == float(np.median(totals)) / 1e6
    text = _report(rec)
    assert f"{CELL}: wide (the run recorded precise)" in text
    assert "not within +-20%: " + CELL in text and "attacker" not in text


def test_the_precision_section_of_the_markdown_report_is_text(tmp_path: Path) -> None:
    """A cell's name in the precision section is no link (rendered as GitHub does)."""
    rec = tmp_path / "r.jsonl"
    _recording(rec)
    body = rec.read_text().replace(CELL, "local/local/[all passed](https://attacker.invalid)/x")
    rec.write_text(body)
    md = _report(rec, "--format", "markdown")
    section = md[md.index("## Precision") :]
    html = (
        MarkdownIt("commonmark", {"html": True, "linkify": True})
        .enable(["table", "linkify"])
        .render(section)
    )
    assert "<a " not in html, html


def _stage_ok() -> bool:
    from rtax_tui.hosts.cgroups import Cgroup

    return os.geteuid() == 0 and Cgroup.version() is not None


@pytest.mark.parametrize("driver", ["local", "stage"])
def test_a_trial_in_flight_at_max_time_does_not_hold_the_run(tmp_path: Path, driver: str) -> None:
    """Each step just under its timeout: a trial begun before max_time would hold the run
    for steps x timeout (15 s here for a 1 s budget); it is interrupted at max_time."""
    if driver == "stage" and not _stage_ok():
        pytest.skip("stage needs root and cgroups")
    prof = tmp_path / "p.toml"
    prof.write_text(
        f'[run]\nwarmup = 0\ntrials = 2\ndrivers = ["{driver}"]\nchannels = ["exec"]\n'
        'workloads = ["slow"]\nprecision = "5%"\nmax_time = "1s"\n'
        '[timeouts]\naction = 6\n'
        # a duration no other test's step uses: the check below looks for it machine-wide
        '[workloads.slow]\nsteps = [{argv = ["sleep", "5.0173"]}, {argv = ["sleep", "5.0173"]}, '
        '{argv = ["sleep", "5.0173"]}]\n'
    )  # fmt: skip
    rec = tmp_path / "r.jsonl"
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    took = time.monotonic() - t
    assert res.returncode in (0, 1), res.stderr
    evs = [json.loads(line) for line in rec.read_text().splitlines()]
    (end,) = [e for e in evs if e["type"] == "trial_end"]
    assert not end["ok"] and end["error"]["kind"] == "interrupted"
    (check,) = [e for e in evs if e["type"] == "precision"]
    assert check["verdict"] == "failing"  # its one trial was cut: no measured trial
    assert evs[-1]["type"] == "run_end" and evs[-1]["t_ns"] < 4e9, evs[-1]
    assert took < 12, took
    # nothing of the trial left running
    ps = subprocess.run(["pgrep", "-f", "^sleep 5.0173$"], capture_output=True, text=True)
    assert ps.stdout == "", ps.stdout


def test_the_one_number_style_holds_at_a_units_edge_and_at_crafted_magnitudes() -> None:
    """Red team 2026-12-06 of render.tables: 0.9995 ms read `1,000µs` and 999.5 ms
    `1,000ms` (a figure a unit too small, four digits); 99.95 `100.0ms`; a crafted
    recording's 1e300 ms or 5e-324 ms was written out in full (over 300 characters, every
    column after it pushed off the screen), and so was a ratio of 1e300."""
    from rtax_tui.render.tables import fmt_interval, fmt_num, fmt_ratio, fmt_time

    assert fmt_time(0.9995) == "1.00ms" and fmt_time(999.5) == "1.00s"
    assert fmt_time(0.0009999) == "1.00µs" and fmt_time(99.95) == "100ms"
    assert fmt_time(999.4) == "999ms" and fmt_time(0.0631) == "63.1µs"
    assert fmt_time(-0.9995, signed=True) == "-1.00ms"
    for v in (1e300, -1e300, 5e-324, 1e-320, 1e20):
        for got in (fmt_time(v), fmt_time(v, signed=True), fmt_num(v), fmt_ratio(v)):
            assert len(got) <= 12, (v, got)
        assert len(fmt_interval(-v, v, signed=True)) <= 30
    assert fmt_num(0.00025) == "0.00025"  # no exponent for a real quantity
    assert fmt_ratio(1.4321) == "1.43×"
