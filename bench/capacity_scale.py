"""Scale benchmark: N stage environments through one barrier, and what rtax itself costs.

    python3 bench/capacity_scale.py [--size 1000] [--runs 3] [--channel shell]
        [--workload t0|capacity] [--touch-mib 1] [--release-concurrency K]

Each run is one `rtax run --headless` of a capacity batch of N stage environments running
T0 (`true`) over the shell channel, under a budget cgroup large enough for all of them
(its peak memory is recorded). `--workload capacity` runs the capacity workload instead
(a holder of `--touch-mib` MiB, a git step, and a release step through the channel, at
most `--release-concurrency` in flight: the profile's default when not given). Prints,
per run and as the median over runs:
- the barrier's release latency (`release_dur_ns`: from the release decision until the
  last environment let go: for T0 the engine waking the N trials, for the capacity
  workload the last release step back through its channel) and the batch's time to
  release (start until the decision);
- whether the batch passed (all N arrived) and how many trials failed;
- rtax's own cost, sampled from /proc every 100 ms: its CPU time (user + system, its
  own process only: bwrap and the environments are not counted) and its peak resident
  memory (VmHWM), and the budget's peak memory for the N environments.
Asserts nothing: the figures are for bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLK = os.sysconf("SC_CLK_TCK")


class ProcWatch:
    """Samples one process's CPU time and peak RSS until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_s = 0.0
        self.hwm_kib = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with open(f"/proc/{self.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                self.cpu_s = (int(fields[11]) + int(fields[12])) / CLK  # utime + stime
                with open(f"/proc/{self.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.hwm_kib = max(self.hwm_kib, int(line.split()[1]))
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(0.1)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


def one_run(tmp: Path, i: int, args: argparse.Namespace) -> dict[str, float]:
    prof = tmp / "scale.toml"
    extra = f"touch_mib = {args.touch_mib}\n"
    if args.release_concurrency is not None:
        extra += f"release_concurrency = {args.release_concurrency}\n"
    prof.write_text(
        f'[run]\nwarmup = 0\ndrivers = ["stage"]\nworkloads = ["{args.workload}"]\n'
        f'channels = ["{args.channel}"]\n'
        "[timeouts]\ncreate = 600\nready = 600\naction = 600\nteardown = 600\n"
        f"[capacity]\nsize = {args.size}\nbatches = 1\ndeadline_s = {args.deadline}\n"
        "cpus = 2.0\nmemory_mib = 16384\n" + extra
    )
    out = tmp / f"scale-{i}.jsonl"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watch = ProcWatch(proc.pid)
    rc = proc.wait()
    watch.finish()
    wall = time.monotonic() - t0
    events = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    bar = next(e for e in events if e["type"] == "barrier")
    ends = [e for e in events if e["type"] == "trial_end"]
    return {
        "rc": rc,
        "ok": bar["ok"],
        "arrived": bar["arrived"],
        "failed": sum(not e["ok"] for e in ends),
        "to_release_s": bar["release_ns"] / 1e9,
        "release_ms": bar["release_dur_ns"] / 1e6,
        "budget_peak_mib": (bar.get("mem_peak_bytes") or 0) / (1 << 20),
        "rtax_cpu_s": watch.cpu_s,
        "rtax_hwm_mib": watch.hwm_kib / 1024,
        "wall_s": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--channel", default="shell", choices=("shell", "exec"))
    ap.add_argument("--deadline", type=float, default=900.0)
    ap.add_argument("--workload", default="t0", choices=("t0", "capacity"))
    ap.add_argument("--touch-mib", type=int, default=1, help="capacity: MiB each holds")
    ap.add_argument("--release-concurrency", type=int, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtax-scale-"))
    print(
        f"rtax capacity scale: {args.size} stage environments ({args.workload} over "
        f"{args.channel}) "
        f"through one barrier, {args.runs} runs; recordings in {tmp}"
    )
    keys = (
        "to_release_s",
        "release_ms",
        "budget_peak_mib",
        "rtax_cpu_s",
        "rtax_hwm_mib",
        "wall_s",
    )
    rows = []
    for i in range(args.runs):
        r = one_run(tmp, i, args)
        rows.append(r)
        print(
            f"run {i + 1}: rc {r['rc']}, passed {r['ok']}, arrived {r['arrived']}/{args.size}, "
            f"failed {r['failed']}; " + ", ".join(f"{k} {r[k]:.2f}" for k in keys),
            flush=True,
        )
    print("median: " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
