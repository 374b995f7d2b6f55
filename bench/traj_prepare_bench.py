"""Prefix preparation per trajectory format: `rtax traj prepare` RUNS times over the real
files in tests/data/trajectories (each run: every prefix length, or 60 spread evenly,
--repeat 3, shuffled with its own seed), then the median over runs of each format's P50
and P95, beside pVisor's published figures.

    python3 bench/traj_prepare_bench.py --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rtax_tui.analysis.report import build_report
from rtax_tui.model.recording import read_recording

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "trajectories"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    per: dict[str, list[tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            rec = Path(tmp) / f"prep{run}.jsonl"
            cmd = [sys.executable, "-m", "rtax_tui", "traj", "prepare", str(DATA)]
            cmd += ["--repeat", str(args.repeat), "--shuffle", "--seed", str(run), "-o", str(rec)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            for row in build_report(read_recording(rec))["prep"]["formats"]:
                s = row["summary"]
                per.setdefault(row["format"], []).append((s["p50_ms"], s["p95_ms"], row["n"]))
    print(f"{args.runs} runs, --repeat {args.repeat}; ms; median over runs (range of P50)")
    print(f"{'format':16} {'n/run':>6} {'P50':>7} {'P95':>7}  P50 per run")
    for fmt, rows in sorted(per.items()):
        p50 = statistics.median(r[0] for r in rows)
        p95 = statistics.median(r[1] for r in rows)
        runs = ", ".join(f"{r[0]:.3f}" for r in rows)
        print(f"{fmt:16} {rows[0][2]:>6} {p50:7.3f} {p95:7.3f}  {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
