"""Where the CPU of a capacity batch goes until its barrier releases, per program, on two
trees (issue 36).

    sudo python3 bench/capacity_perf.py [--size 1000] [--runs 2] [--before REV] [--top 12]

Runs the batch of bench/capacity_scale.py (N stage environments, T0 over shell, one
barrier) under `perf record -a -k mono` (every CPU, timestamps on CLOCK_MONOTONIC),
alternating the tree of REV (default 7c45ed1) and this checkout. From each run it takes
the samples between the first bubblewrap sample and the barrier's release (the
recording's first `create.spawn` start to `release_ns`, both on the engine's clock), and
prints per program (perf's `comm`: python is rtax and its children before they exec,
init is stage's pid 1, sh the shell) the samples in that window, then, per program
named with `--symbols`, its hottest symbols. The sampling rate is 999 Hz a CPU, so a
sample is about 1 ms of CPU; perf costs the batch a few per cent, so the times are
a little longer than without it. Needs `perf` (Debian: linux-perf). Asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capacity_scale import REPO, before_tree, python_of  # noqa: E402

PROFILE = """[run]
warmup = 0
drivers = ["stage"]
workloads = ["t0"]
channels = ["shell"]
[timeouts]
create = 600
ready = 600
action = 600
teardown = 600
[capacity]
size = {size}
batches = 1
deadline_s = 600
cpus = 2.0
memory_mib = 16384
touch_mib = 1
"""


def window(recording: Path) -> tuple[float, float]:
    """(first spawn to release in s, the release's t_ns) from a run's recording."""
    first = rel = None
    with recording.open() as f:
        for line in f:
            e = json.loads(line)
            if e.get("type") == "phase" and e.get("name") == "create.spawn":
                s = e["t_ns"] - e["dur_ns"]
                first = s if first is None else min(first, s)
            if "release_ns" in e:
                rel = e["release_ns"]
    if first is None or rel is None:
        raise SystemExit(f"capacity_perf: {recording}: no spawn or no barrier release")
    return (rel - first) / 1e9, rel


def samples(data: Path, span_s: float) -> list[tuple[str, str]]:
    """(comm, symbol) of every sample from the first bwrap sample for `span_s`."""
    out = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,time,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        head, _, rest = line.partition(": ")
        comm, _, t = head.rpartition(" ")
        parts = rest.split(None, 1)
        rows.append((comm.strip(), float(t), parts[1] if len(parts) > 1 else "?"))
    start = min((t for c, t, _ in rows if c == "bwrap"), default=None)
    if start is None:
        raise SystemExit(f"capacity_perf: {data}: no bubblewrap sample")
    return [(c, s) for c, t, s in rows if start <= t <= start + span_s]


def program(comm: str) -> str:
    """Threads and helpers folded into one name (kworker/1:0-cgroup -> kworker)."""
    for prefix in ("kworker", "rtax-enter", "ksoftirqd"):
        if comm.startswith(prefix):
            return prefix
    return comm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--before", default="7c45ed1")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--symbols", default="bwrap,python,init", help="programs to break down")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("capacity_perf: no perf on PATH (Debian: apt-get install linux-perf)")
    trees = {"before": before_tree(args.before), "after": REPO}
    tmp = Path(tempfile.mkdtemp(prefix="rtax-capacity-perf-"))
    prof = tmp / f"perf-{args.size}.toml"
    prof.write_text(PROFILE.format(size=args.size))
    print(f"capacity batch of {args.size} under perf, {args.runs} runs a tree, in {tmp}")
    for i in range(args.runs):
        for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
            tree = trees[name]
            rec, data = tmp / f"{name}-{i}.jsonl", tmp / f"{name}-{i}.data"
            subprocess.run(
                [
                    "perf",
                    "record",
                    "-q",
                    "-a",
                    "-k",
                    "mono",
                    "-F",
                    "999",
                    "-o",
                    str(data),
                    "--",
                    python_of(tree),
                    "-m",
                    "rtax_tui",
                    "run",
                    str(prof),
                    "--headless",
                    "-o",
                    str(rec),
                ],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            span, _ = window(rec)
            got = samples(data, span)
            by = collections.Counter(program(c) for c, _ in got)
            busy = sum(v for k, v in by.items() if k != "swapper")
            label = args.before if name == "before" else "this checkout"
            print(
                f"\n{label}, run {i + 1}: spawn to release {span:.2f} s, "
                f"{busy} busy samples, {by['swapper']} idle"
            )
            print("  " + ", ".join(f"{k} {v}" for k, v in by.most_common(args.top)))
            for prog in args.symbols.split(","):
                syms = collections.Counter(s for c, s in got if program(c) == prog)
                top = ", ".join(f"{s.split(' (')[0]} {v}" for s, v in syms.most_common(8))
                print(f"  {prog}: {top}")


if __name__ == "__main__":
    main()
