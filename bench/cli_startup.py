"""Start-up of the command line: `rtax --help` and `rtax report` of an example recording,
median wall and CPU time of N runs of this tree, and what `python -X importtime` counts
for the imports of `--help` (the sum of every module's own time, median of N).

Each run gets a warm-up first; bytecode is written (PYTHONDONTWRITEBYTECODE removed), as an
installed rtax has its .pyc files: without them every module is compiled again at each start.

    python3 bench/cli_startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
COMMANDS = {
    "rtax --help": ["--help"],
    "rtax report": ["report", str(EXAMPLE), "--format", "json"],
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run, the CPU of the child from its rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic_ns()
    res = subprocess.run(argv, capture_output=True, env=env, cwd=ROOT)
    wall = (time.monotonic_ns() - t0) / 1e6
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"{argv}: exit {res.returncode}: {res.stderr.decode()[-300:]}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def import_self_ms(env: dict[str, str]) -> float:
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "rtax_tui", "--help"],
                         capture_output=True, text=True, env=env, cwd=ROOT)  # fmt: skip
    total = 0
    for line in res.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and "cumulative" not in parts[1]:
            total += int(parts[0].split(":")[1])
    return total / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    n = ap.parse_args().runs
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for name, args in COMMANDS.items():
        argv = [sys.executable, "-m", "rtax_tui", *args]
        walls, cpus = [], []
        for _ in range(n):
            timed(argv, env)  # warm-up: the page cache, the .pyc files
            wall, cpu = timed(argv, env)
            walls.append(wall)
            cpus.append(cpu)
        wall_s = f"wall median {statistics.median(walls):6.1f} ms (min {min(walls):.1f})"
        cpu_s = f"CPU median {statistics.median(cpus):6.1f} ms (min {min(cpus):.1f})"
        print(f"{name:12} {wall_s}  {cpu_s}  n={n}")
    selfs = [import_self_ms(env) for _ in range(n)]
    print(f"imports of --help (-X importtime, own times summed): median "
          f"{statistics.median(selfs):.1f} ms (min {min(selfs):.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
