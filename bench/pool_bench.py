"""Warm pools (issue 14): a pooled trial's `acquire` against a cold trial's create+ready,
per substrate, in one interleaved rtax run; then what a warm pool saves per 1M
trajectories of 10, 50 and 150 steps, with the pool's own work counted (`rtax project`
adds the pool's worker-time per trajectory to a pooled cell). Prints measured figures;
asserts nothing.

Needs root (stage) and, for docker/podman, the daemons and images
(`rtax images build --driver docker|podman`). docker and podman run with
`read_only = true`, the setting under which they used to offer the `clean` reset (since
issue 34 they offer none: their pools recreate; bench/reset_bench.py compares).

    python3 bench/pool_bench.py [--trials 40] [--size 2] [--reset clean]
                                [--drivers stage,docker,podman] [--channel exec]
                                [--vm-start boot|restore]  (with --drivers microvm)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from rtax_tui.model.recording import read_recording

STEPS = (10, 50, 150)
N = 1_000_000


def rtax(*args: str) -> bytes:
    cmd = [sys.executable, "-m", "rtax_tui", *args]
    return subprocess.run(cmd, capture_output=True, check=True).stdout


def profile(
    path: Path, drivers: list[str], trials: int, size: int, reset: str, ch: str, vm_start: str
) -> None:
    path.write_text(
        f"[run]\ntrials = {trials}\nwarmup = 3\nconcurrency = 1\n"
        f'drivers = {json.dumps(drivers)}\nworkloads = ["true10"]\nchannels = ["{ch}"]\n'
        'modes = ["cold", "pool"]\n'
        f'[pool]\nsize = {size}\nreset = "{reset}"\nrefill = "eager"\n'
        "[drivers_options.docker]\nread_only = true\n"
        "[drivers_options.podman]\nread_only = true\n"
        f'[drivers_options.microvm]\nstart = "{vm_start}"\n'
        "[timeouts]\ncreate = 120\nready = 240\n"
        "[workloads.true10]\n"
        'description = "10 x true: start-up and steady actions"\n'
        "steps = [" + ", ".join(['{ argv = ["true"] }'] * 10) + "]\n"
    )


def p50(xs: list[int]) -> float | None:
    return float(np.median(xs)) / 1e6 if xs else None


def figures(rec_path: Path) -> dict[str, dict[str, object]]:
    """Per cell: cold create+ready P50, pooled acquire P50 (ms), hit rate, the pool's
    work and CPU per served trial (ms), the reset each pooled cell really had."""
    rec = read_recording(rec_path)
    resets = rec.header["profile"].get("pool", {}).get("resets", {})
    start: dict[int, dict[str, object]] = {}
    per: dict[int, dict[str, int]] = {}
    pool_work: dict[str, list[int]] = {}
    pool_cpu: dict[str, list[int]] = {}
    acts: dict[int, list[int]] = {}
    served: dict[str, int] = {}  # pooled trials, warm-ups included: the pool served them all
    for e in rec.events:
        t = e["type"]
        if t == "trial_start":
            served[e["cell"]] = served.get(e["cell"], 0) + 1
        if t == "trial_start" and not e["warmup"]:
            start[e["trial"]] = e
            per[e["trial"]] = {}
        elif t == "phase" and e["trial"] in per:
            per[e["trial"]][e["name"]] = e["dur_ns"]
        elif t == "action" and e["trial"] in per:
            acts.setdefault(e["trial"], []).append(e["dur_ns"])
        elif t == "pool":
            pool_work.setdefault(e["cell"], []).append(e["dur_ns"])
            pool_cpu.setdefault(e["cell"], []).append(e["cpu_ns"])
    out: dict[str, dict[str, object]] = {}
    for tid, ev in start.items():
        cell = str(ev["cell"])
        d = out.setdefault(cell, {"driver": ev["driver"], "mode": ev.get("mode", "cold"),
                                  "start": [], "hits": 0, "n": 0, "first": [],
                                  "rest": [], "end": []})  # fmt: skip
        ph = per[tid]
        a = acts.get(tid, [])
        d["first"].extend(a[:1])  # type: ignore[union-attr]
        d["rest"].extend(a[1:])  # type: ignore[union-attr]
        d["n"] = int(d["n"]) + 1  # type: ignore[call-overload]
        end = ph.get("release", ph.get("teardown"))
        if end is not None:
            d["end"].append(end)  # type: ignore[union-attr]
        if d["mode"] == "pool":
            if "acquire" in ph:
                d["start"].append(ph["acquire"])  # type: ignore[union-attr]
                d["hits"] = int(d["hits"]) + ("acquire.wait" not in ph)  # type: ignore[call-overload]
        elif "create" in ph and "ready" in ph:
            d["start"].append(ph["create"] + ph["ready"])  # type: ignore[union-attr]
    for cell, d in out.items():
        d["start_p50_ms"] = p50(d.pop("start"))  # type: ignore[arg-type]
        d["first_p50_ms"] = p50(d.pop("first"))  # type: ignore[arg-type]
        d["end_p50_ms"] = p50(d.pop("end"))  # type: ignore[arg-type]
        d["rest_p50_ms"] = p50(d.pop("rest"))  # type: ignore[arg-type]
        if d["mode"] == "pool":
            n = max(1, served.get(cell, 0))
            d["pool_ms_per_trial"] = sum(pool_work.get(cell, [])) / n / 1e6
            d["pool_cpu_ms_per_trial"] = sum(pool_cpu.get(cell, [])) / n / 1e6
            d["reset"] = resets.get(cell, {}).get("reset")
    return out


def projections(rec_path: Path) -> dict[str, dict[int, float]]:
    """Worker-hours per 1M trajectories of each step count, per cell (`rtax project`)."""
    out: dict[str, dict[int, float]] = {}
    for s in STEPS:
        doc = json.loads(rtax("project", str(rec_path), "--trajectories", str(N),
                              "--steps", str(s), "--format", "json"))  # fmt: skip
        for c in doc["cells"]:
            out.setdefault(c["cell"], {})[s] = c["worker_hours"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--size", type=int, default=2)
    ap.add_argument("--reset", default="clean", choices=("recreate", "clean", "snapshot"))
    ap.add_argument("--drivers", default="stage,docker,podman")
    ap.add_argument("--channel", default="exec", choices=("exec", "shell"))
    ap.add_argument(
        "--vm-start",
        default="boot",
        choices=("boot", "restore"),
        help="microvm: boot each guest, or restore the saved one (the snapshot reset)",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtax-poolbench-"))
    prof, rec = tmp / "pool.toml", tmp / "pool.jsonl"
    drivers = args.drivers.split(",")
    profile(prof, drivers, args.trials, args.size, args.reset, args.channel, args.vm_start)
    rtax("run", str(prof), "--headless", "--quiet", "-o", str(rec))
    figs = figures(rec)
    proj = projections(rec)
    print(f"recording: {rec}")
    print(f"\n{args.trials} measured trials per cell (10 x true, {args.channel}), pool size "
          f"{args.size}, reset {args.reset}, eager, concurrency 1; P50 in ms\n")  # fmt: skip
    print("| substrate | cold create+ready | pooled acquire | hit rate | reset used "
          "| pool work / trial | pool rtax CPU / trial | 1st action cold / pooled "
          "| later actions cold / pooled |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for drv in drivers:
        cold = next((f for f in figs.values() if f["driver"] == drv and f["mode"] == "cold"), None)
        pool = next((f for f in figs.values() if f["driver"] == drv and f["mode"] == "pool"), None)
        if cold is None or pool is None:
            continue
        hit = int(pool["hits"]) / max(1, int(pool["n"]))  # type: ignore[call-overload]
        print(f"| {drv} | {cold['start_p50_ms']:.3f} | {pool['start_p50_ms']:.3f} | "
              f"{hit:.0%} | {pool['reset']} | {pool['pool_ms_per_trial']:.2f} | "
              f"{pool['pool_cpu_ms_per_trial']:.2f} | {cold['first_p50_ms']:.2f} / "
              f"{pool['first_p50_ms']:.2f} | {cold['rest_p50_ms']:.2f} / "
              f"{pool['rest_p50_ms']:.2f} |")  # fmt: skip
    print(f"\nworker-hours per {N:,} trajectories (rtax project; pooled: acquire + release "
          "+ the pool's own work per trajectory; `saved` also carries the difference of the "
          "two cells' action medians, `start-up saved` only create+ready+teardown against "
          "acquire+release+pool work)\n")  # fmt: skip
    print("| substrate | steps | cold | pooled | saved | start-up saved | of cold |")
    print("|---|---|---|---|---|---|---|")
    for drv in drivers:
        by = {str(f["mode"]): (c, f) for c, f in figs.items() if f["driver"] == drv}
        if "cold" not in by or "pool" not in by:
            continue
        (cc, cf), (pc, pf) = by["cold"], by["pool"]
        # start-up and end only (the actions' medians differ by noise, not by the pool):
        # cold create+ready+teardown against acquire+release+the pool's work, per trajectory
        cold_ms = float(cf["start_p50_ms"]) + float(cf["end_p50_ms"])  # type: ignore[arg-type]
        pool_ms = (float(pf["start_p50_ms"]) + float(pf["end_p50_ms"])  # type: ignore[arg-type]
                   + float(pf["pool_ms_per_trial"]))  # type: ignore[arg-type]  # fmt: skip
        startup_h = N * (cold_ms - pool_ms) / 1000 / 3600
        for s in STEPS:
            c, p = proj[cc].get(s), proj[pc].get(s)
            if c is None or p is None:
                continue
            print(f"| {drv} | {s} | {c:,.1f} | {p:,.1f} | {c - p:,.1f} | "
                  f"{startup_h:,.1f} | {startup_h / c:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
