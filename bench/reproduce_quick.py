"""`rtax reproduce STUDY --size quick`: its wall time against issue 40's target (each study
under 15 minutes here), and each experiment's share (the `[i/n]` progress lines' times).

Runs this tree's rtax as a child, `--root` a temporary directory unless `--keep DIR`
(then the reproduce-<study>-<time>/ directory is left there, e.g. for docs/reproduce/).

    python3 bench/reproduce_quick.py --study pvisor,paper --driver local,stage [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 15 * 60


def run(study: str, drivers: str, root: Path) -> tuple[float, list[tuple[str, float]], int]:
    """(wall s, [(progress line, s since start)], exit status) of one reproduce."""
    argv = [sys.executable, "-m", "rtax_tui", "reproduce", study, "--size", "quick",
            "--driver", drivers, "--root", str(root)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    marks: list[tuple[str, float]] = []
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as p:  # fmt: skip
        assert p.stderr is not None
        for line in p.stderr:
            marks.append((line.rstrip("\n"), time.monotonic() - t0))
        rc = p.wait()
    return time.monotonic() - t0, marks, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="pvisor,paper")
    ap.add_argument("--driver", default="local,stage")
    ap.add_argument("--keep", metavar="DIR", help="leave the reproduce directories in DIR")
    args = ap.parse_args()
    worst = 0
    for study in args.study.split(","):
        with tempfile.TemporaryDirectory(prefix="rtax-repro-bench-") as tmp:
            root = Path(args.keep) if args.keep else Path(tmp)
            wall, marks, rc = run(study, args.driver, root)
        print(f"## rtax reproduce {study} --size quick --driver {args.driver}")
        prev = 0.0
        for line, at in marks:
            if line.startswith("[") or line.startswith("reproduce"):
                print(f"  {at:7.1f} s (+{at - prev:6.1f})  {line[:110]}")
                prev = at
        verdict = "under" if wall < TARGET_S else "OVER"
        print(f"  wall {wall:.1f} s ({wall / 60:.1f} min), exit {rc}: {verdict} the "
              f"{TARGET_S // 60}-minute target")  # fmt: skip
        worst = max(worst, rc if rc else (1 if wall >= TARGET_S else 0))
    return worst


if __name__ == "__main__":
    sys.exit(main())
