"""What the noise sampler (rtax_tui/hosts/noise.py) costs: CPU per sample, share of a core.

    python3 bench/noise_cost.py [--samples 200] [--seconds 20]

Two figures:
- per sample, in this process: `Snapshot` (a walk of /proc for rtax's process tree,
  /proc/stat, /proc/vmstat) and `sample` (the gauges: load, cpufreq, PSI, thermal), its
  CPU time (user + system, `time.process_time_ns`) and wall time, median and P95 over
  `--samples` samples, with the number of processes the walk read;
- the real sampler, started as a run starts it (`Noise`), left to sample at 1 Hz for
  `--seconds`: its CPU time from /proc/<pid>/stat (start-up included, and without it),
  as a share of one core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rtax_tui.hosts.noise import Noise, Snapshot, sample

TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat").read()
    f = stat[stat.rfind(")") + 2 :].split()
    return int(f[11]) + int(f[12])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    procs = sum(d.isdigit() for d in os.listdir("/proc"))
    cpu, wall = [], []
    prev = Snapshot(os.getpid())
    for _ in range(a.samples):
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        cur = Snapshot(os.getpid())
        sample(prev, cur)
        cpu.append((time.process_time_ns() - c0) / 1e6)
        wall.append((time.perf_counter_ns() - w0) / 1e6)
        prev = cur
    q = lambda v, p: statistics.quantiles(v, n=100)[p - 1]  # noqa: E731
    print(f"per sample ({a.samples} samples, {procs} processes on the machine, "
          f"{os.cpu_count()} cores):")  # fmt: skip
    print(f"  CPU  P50 {statistics.median(cpu):.2f} ms  P95 {q(cpu, 95):.2f} ms")
    print(f"  wall P50 {statistics.median(wall):.2f} ms  P95 {q(wall, 95):.2f} ms")
    print(f"  at 1 Hz: {statistics.median(cpu) / 10:.3f}% of one core (the samples alone)")

    got: list[dict[str, object]] = []
    noise = Noise(got.append)
    noise.start(time.monotonic_ns())
    assert noise.proc is not None
    pid = noise.proc.pid
    time.sleep(1.5)  # past its start-up (the interpreter, the imports)
    t1, c1 = time.monotonic(), cpu_ticks(pid)
    start_ticks = c1
    time.sleep(a.seconds)
    t2, c2 = time.monotonic(), cpu_ticks(pid)
    noise.stop()  # reads what it wrote (no event loop here: all of it, at the end)
    steady = (c2 - c1) / TCK / (t2 - t1)
    print(f"the sampler process over {t2 - t1:.1f} s at 1 Hz ({len(got)} samples read):")
    print(f"  start-up: {start_ticks / TCK * 1000:.0f} ms CPU (once a run)")
    print(f"  steady: {(c2 - c1) / TCK * 1000:.0f} ms CPU, {steady * 100:.3f}% of one core "
          f"(clock ticks of {1000 / TCK:.0f} ms: a coarse figure)")  # fmt: skip


if __name__ == "__main__":
    main()
