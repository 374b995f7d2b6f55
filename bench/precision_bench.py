"""A run that stops when the answer is clear: the default profile with `--precision`.

    python3 bench/precision_bench.py [--precision 5%] [--trials 30] [--max-trials 1000]
        [--max-time 10m] [--profile default] [--runs 1]

Each run is one `rtax run PROFILE --precision P --headless --quiet -o REC` (the built-in
default profile: T0 and T1 on `local` and `stage`, 3 warm-ups, rounds of `--trials` per
cell). Prints, per run, per cell (host/driver/workload/channel): the measured trials it
took, the rounds, its verdict, its P50 total and how far its 95% interval reaches from
it (the larger side, as a share of the P50), all from the recording's `precision`
events; then why the rounds ended, the trials of the whole run, and its wall time (the
process's, start to exit, and the recording's, its first event to run_end). Asserts
nothing: the figures are for bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_run(args: argparse.Namespace, rec: Path) -> None:
    cmd = [sys.executable, "-m", "rtax_tui", "run", args.profile, "--headless", "--quiet",
           "-o", str(rec), "--precision", args.precision, "--trials", str(args.trials),
           "--max-trials", str(args.max_trials), "--max-time", args.max_time]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        sys.exit(f"rtax run failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    evs = [json.loads(line) for line in rec.read_text().splitlines() if line.strip()]
    checks = [e for e in evs if e["type"] == "precision"]
    last_round = max(e["round"] for e in checks)
    last = [e for e in checks if e["round"] == last_round]
    rounds: dict[str, set[int]] = {}  # the rounds that gave each cell trials
    for e in checks:
        rounds.setdefault(e["cell"], set()).add(e["trials"])
    print(f"{'cell':32} {'trials':>6} {'n':>5} {'rounds':>6} {'verdict':>8} "
          f"{'P50 ms':>9} {'+-':>7}")  # fmt: skip
    for e in last:
        p50, lo, hi = e["p50_ns"], e["lo_ns"], e["hi_ns"]
        reach = f"{max(p50 - lo, hi - p50) / p50 * 100:.1f}%" if p50 and lo is not None else "-"
        p50_ms = f"{p50 / 1e6:.2f}" if p50 is not None else "-"
        print(f"{e['cell']:32} {e['trials']:>6} {e['n']:>5} {len(rounds[e['cell']]):>6} "
              f"{e['verdict']:>8} {p50_ms:>9} {reach:>7}")  # fmt: skip
    end = last[0].get("end")
    measured = sum(e["trials"] for e in last)
    recorded_s = next(e["t_ns"] for e in evs if e["type"] == "run_end") / 1e9
    print(f"end: {end}; rounds {last_round}; measured trials {measured} "
          f"(the fixed plan of {args.trials} a cell: {args.trials * len(last)}); "
          f"wall {wall:.1f} s (recording {recorded_s:.1f} s)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--precision", default="5%")
    ap.add_argument("--trials", type=int, default=30, help="a round's trials per cell")
    ap.add_argument("--max-trials", type=int, default=1000)
    ap.add_argument("--max-time", default="10m")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rtax-precision-") as tmp:
        for i in range(args.runs):
            print(f"run {i + 1}: rtax run {args.profile} --precision {args.precision} "
                  f"--trials {args.trials} --max-trials {args.max_trials} "
                  f"--max-time {args.max_time}")  # fmt: skip
            one_run(args, Path(tmp) / f"r{i}.jsonl")


if __name__ == "__main__":
    main()
