"""Load (issue 25, item 2): start-up under arrival patterns, per substrate, cold and
pooled, in one interleaved rtax run; prints the report's load table and checks each
start-up P50 a second way, from the raw recording; then the projection of 1M
trajectories of 150 steps per cell, with what each pool held idle. Asserts nothing.

Needs root (stage) and, for docker, the daemon and its image (`bash scripts/start-dockerd`
starts the daemon and builds the images).

    python3 bench/load_bench.py [--drivers stage,docker] [--trials 32] [--pool 4]
                                [--arrivals sequential,burst:8,burst:32,rate:4]
                                [--out DIR]   (keeps the recording and load.svg there)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rtax(*args: str) -> bytes:
    cmd = [sys.executable, "-m", "rtax_tui", *args]
    return subprocess.run(cmd, capture_output=True, check=True).stdout


def raw_startup_p50(rec: Path) -> dict[str, float]:
    """Per cell: the P50 of create + ready (or acquire), from the events themselves."""
    starts: dict[int, dict] = {}
    phases: dict[int, dict[str, int]] = {}
    ends: dict[int, dict] = {}
    for line in rec.read_text().splitlines():
        e = json.loads(line)
        if e["type"] == "trial_start":
            starts[e["trial"]] = e
        elif e["type"] == "phase":
            phases.setdefault(e["trial"], {})[e["name"]] = e["dur_ns"]
        elif e["type"] == "trial_end":
            ends[e["trial"]] = e
    per: dict[str, list[int]] = {}
    for t, s in starts.items():
        end = ends.get(t)
        if s["warmup"] or end is None or not end["ok"] or not end.get("valid", True):
            continue
        ph = phases.get(t, {})
        up = ph["acquire"] if "acquire" in ph else ph.get("create", 0) + ph.get("ready", 0)
        per.setdefault(s["cell"], []).append(up)
    return {c: float(np.percentile(v, 50)) / 1e6 for c, v in per.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drivers", default="stage,docker")
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--arrivals", default="sequential,burst:8,burst:32,rate:4")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="rtax-load-"))
    out.mkdir(parents=True, exist_ok=True)
    prof = out / "load.toml"
    arrivals = ", ".join(json.dumps(x) for x in a.arrivals.split(","))
    drivers = ", ".join(json.dumps(x) for x in a.drivers.split(","))
    prof.write_text(
        f'[run]\ndrivers = [{drivers}]\nworkloads = ["t0"]\nchannels = ["exec"]\n'
        f"trials = {a.trials}\nwarmup = 1\nseed = 1\narrivals = [{arrivals}]\n"
        f'modes = ["cold", "pool"]\n[pool]\nsize = {a.pool}\n'
    )
    rec = out / "load.jsonl"
    rec.unlink(missing_ok=True)
    t0 = time.monotonic()
    rtax("run", str(prof), "--headless", "--quiet", "-o", str(rec))
    wall = time.monotonic() - t0
    report = json.loads(rtax("report", str(rec), "--format", "json"))
    raw = raw_startup_p50(rec)
    print(f"# one run: {a.drivers}, t0/exec, {a.trials} trials a cell, pool size {a.pool}, "
          f"{wall:.0f} s wall; {rec}")  # fmt: skip
    print(
        "| cell | arrival | n | failed | achieved/s | spread ms | late P95 ms "
        "| start-up P50 / P95 / P99 ms | P50 from the raw events |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in report["load"]:
        su = r.get("startup") or {}
        cell = r["cell"] + ("" if r["arrival"] == "sequential" else "@" + r["arrival"])

        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.3g}"

        print(
            f"| {r['cell']} | {r['arrival']} | {r['n']} | {r['failed']} "
            f"| {f(r.get('achieved_per_s'))} | {f(r.get('spread_p50_ms'))} "
            f"| {f(r.get('late_p95_ms'))} | {f(su.get('p50_ms'))} / {f(su.get('p95_ms'))} / "
            f"{f(su.get('p99_ms'))} | {f(raw.get(cell))} |"
        )
    # worker-hours with the pattern and the pool's idle capacity: 1M trajectories of 150 steps
    proj = json.loads(rtax("project", str(rec), "--trajectories", "1000000", "--steps", "150",
                           "--format", "json"))  # fmt: skip
    print("\n# rtax project: 1,000,000 trajectories x 150 steps")
    print("| cell | worker-h | 95% CI | pool work s/traj | pool idle env-h | pool idle GiB-h |")
    print("|---|---|---|---|---|---|")

    def g(v: float | None) -> str:
        return "-" if v is None else f"{v:,.4g}"

    for c in proj["cells"]:
        lo, hi = c["ci95"]
        print(
            f"| {c['cell']} | {g(c['worker_hours'])} | [{g(lo)}, {g(hi)}] "
            f"| {g(c.get('pool_s_per_trajectory'))} | {g(c.get('pool_idle_env_hours'))} "
            f"| {g(c.get('pool_idle_gib_hours'))} |"
        )
    svg = out / "load.svg"
    rtax("plot", str(rec), "--kind", "load", "-o", str(svg), "--force")
    print(f"plot: {svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
