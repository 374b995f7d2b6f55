"""The console as a workbench: how long its own work takes.

1. Launcher: from the app's start (Textual's headless driver, 120x40, in a fresh
   directory) until the plan line shows its estimate (the history read), and until
   `rtax doctor --format json` has answered for every driver on `local`.
2. History: summaries of N recordings (copies of the example T0 recording, 36 trials
   each) read cold (first visit), then again (the cache: file versions unchanged).

Each figure: `--runs` runs, the median printed with the spread.

    python3 bench/workbench_bench.py [--runs 3] [--recordings 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtax_tui.analysis import history  # noqa: E402

EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"


async def launcher_once() -> tuple[float, float]:
    from rtax_tui.ui.app import RtaxApp
    from rtax_tui.ui.launcher import LauncherScreen

    t0 = time.monotonic()
    scr = LauncherScreen()
    app = RtaxApp(scr)
    estimate_s = doctor_s = float("nan")
    async with app.run_test(size=(120, 40)) as pilot:
        while scr.runs is None:
            await pilot.pause(0.01)
        estimate_s = time.monotonic() - t0
        while not scr.drivers or any(scr.status.get(("local", d)) is None for d in scr.drivers):
            await pilot.pause(0.01)
        doctor_s = time.monotonic() - t0
    return estimate_s, doctor_s


def history_once(root: Path) -> tuple[float, float]:
    history._CACHE.clear()
    t0 = time.monotonic()
    runs = history.history([root])
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    again = history.history([root])
    warm = time.monotonic() - t0
    assert len(runs) == len(again)
    return cold, warm


def fmt(xs: list[float]) -> str:
    med, lo, hi = (round(v * 1000) for v in (statistics.median(xs), min(xs), max(xs)))
    return f"median {med} ms (min {lo}, max {hi})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--recordings", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        est, doc = [], []
        for _ in range(args.runs):
            e, d = asyncio.run(launcher_once())
            est.append(e)
            doc.append(d)
        print(f"launcher: estimate shown  {fmt(est)}  ({args.runs} runs)")
        print(f"launcher: doctor answered {fmt(doc)}  ({args.runs} runs, every driver on local)")
        root = Path(tmp) / "recs"
        root.mkdir()
        for i in range(args.recordings):
            shutil.copy(EXAMPLE, root / f"r{i:04d}.jsonl")
        cold, warm = [], []
        for _ in range(args.runs):
            c, w = history_once(root)
            cold.append(c)
            warm.append(w)
        print(f"history: {args.recordings} recordings cold  {fmt(cold)}  ({args.runs} runs)")
        print(f"history: {args.recordings} recordings again {fmt(warm)}  ({args.runs} runs)")


if __name__ == "__main__":
    main()
