"""False alarms of `rtax compare --fail-on regression`: the same profile run back to back,
N pairs, each pair compared; every row flagged is a false alarm (the code did not change).
Prints measured figures; asserts nothing.

    python3 bench/false_alarms.py [--pairs 20] [--profile t0] [--trials N]
                                  [--min-effect 5%,0.5ms] [--keep DIR]

Per pair: `rtax run PROFILE -o a.jsonl --quiet`, then the same into b.jsonl (alternating
seeds, so the trial order differs as it would between two commits), then `rtax compare a
b --fail-on regression --format json`. Counted: rows `slower` (what fails a build), rows
`faster` (an alarm the other way), rows whose uncorrected bootstrap interval excludes 0
(`faster` != neither: what the table said before Holm's correction and the practical
threshold), and exit codes 1. The 1-minute load before and after is printed: a machine
busy with other work moves figures between runs, which no test within a pair can tell
from a change of code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RTAX = [sys.executable, "-m", "rtax_tui"]


def run(profile: str, out: Path, seed: int, trials: int | None) -> None:
    argv = [*RTAX, "run", profile, "--headless", "--quiet", "-o", str(out), "--seed", str(seed)]
    if trials is not None:
        argv += ["--trials", str(trials)]
    subprocess.run(argv, check=True, capture_output=True, timeout=1800)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--profile", default="t0")
    ap.add_argument("--trials", type=int, default=None, help="default: the profile's")
    ap.add_argument("--min-effect", default="5%,0.5ms")
    ap.add_argument("--keep", type=Path, help="keep the recordings in this directory")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="rtax-false-alarms-"))
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"profile {args.profile}, {args.pairs} pairs, min effect {args.min_effect}")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    t0 = time.monotonic_ns()
    rows = slower = faster = raw = failed_pairs = 0
    for i in range(args.pairs):
        a, b = tmp / f"{i:02d}-a.jsonl", tmp / f"{i:02d}-b.jsonl"
        run(args.profile, a, 1 + 2 * i, args.trials)
        run(args.profile, b, 2 + 2 * i, args.trials)
        cmp = subprocess.run(
            [*RTAX, "compare", str(a), str(b), "--fail-on", "regression", "--format", "json",
             "--min-effect", args.min_effect],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        doc = json.loads(cmp.stdout)
        verdicts = [r["verdict"] for r in doc["rows"]]
        n_slow, n_fast = verdicts.count("slower"), verdicts.count("faster")
        n_raw = sum(r["faster"] != "neither" for r in doc["rows"])
        rows += len(verdicts)
        slower += n_slow
        faster += n_fast
        raw += n_raw
        failed_pairs += cmp.returncode == 1
        flagged = [f"{r['cell']} {r['phase']} {r['diff_ms']:+.3f}ms" for r in doc["rows"]
                   if r["verdict"] in ("slower", "faster")]  # fmt: skip
        print(
            f"pair {i + 1:2d}: {len(verdicts)} rows, slower {n_slow}, faster {n_fast}, "
            f"uncorrected {n_raw}, exit {cmp.returncode}"
            + (f"  [{'; '.join(flagged)}]" if flagged else ""),
            flush=True,
        )
    secs = (time.monotonic_ns() - t0) / 1e9
    print(f"load after: {os.getloadavg()[0]:.2f}; {secs:.0f} s")
    print(
        f"false alarms over {args.pairs} pairs ({rows} rows): slower {slower}, faster {faster}; "
        f"pairs exiting 1: {failed_pairs}; rows the uncorrected intervals flagged: {raw}"
    )
    if args.keep is None:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
