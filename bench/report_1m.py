"""Time `read_recording` + `build_report` over a synthetic recording of 1,000,000 events.

The recording looks like a real run: a `run` header, trials over several cells
(T0, T1 and 10-step trajectories, exec and shell channels, three drivers), each
with trial_start, a sub-phase, create, ready, actions, teardown, orchestration and
trial_end; a few warm-up, failed and invalid trials; a run_end at the end.

    python bench/report_1m.py [--events N] [--keep PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import orjson

from rtax_tui.analysis.report import build_report
from rtax_tui.model.recording import read_recording

DRIVERS = {"local": 1.0, "docker": 40.0, "libvirt": 300.0}  # create scale, ms
WORKLOADS = {"T0": 1, "T1": 5, "trajectory": 10}  # actions per trial
CHANNEL_MS = {"exec": 8.0, "shell": 0.6}


def generate(path: str, n_events: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    cells = [(d, w, c) for d in DRIVERS for w in WORKLOADS for c in CHANNEL_MS]
    written = 0
    with open(path, "wb") as fh:
        header = {
            "type": "run",
            "t_ns": 0,
            "format": "rtax/1",
            "run_id": "bench-1m",
            "started_at": "2025-01-01T00:00:00Z",
            "seed": seed,
            "argv": ["rtax", "run", "bench"],
            "profile": {"name": "bench"},
            "hosts": {"local": {"kernel": "6.8", "cpus": 8}},
        }
        fh.write(orjson.dumps(header) + b"\n")
        written += 1
        t_ns = 0
        trial = 0
        lines: list[bytes] = []
        while True:
            driver, workload, channel = cells[trial % len(cells)]
            steps = WORKLOADS[workload]
            per_trial = 8 + steps  # start, sub, 4 phases, actions, end
            if written + len(lines) + per_trial + 1 > n_events:
                break
            cell = f"local/{driver}/{workload}/{channel}"
            scale = DRIVERS[driver]
            warmup = trial < len(cells)
            r = rng.random()
            ok = r > 0.01
            valid = ok and r > 0.015
            durs = rng.lognormal(np.log([scale * 0.2, scale, scale * 0.5, scale * 0.3, 0.4]), 0.3)
            acts = rng.lognormal(np.log(CHANNEL_MS[channel]), 0.4, size=steps)
            t_ns += 1_000_000
            lines.append(
                orjson.dumps(
                    {
                        "type": "trial_start",
                        "t_ns": t_ns,
                        "trial": trial,
                        "cell": cell,
                        "host": "local",
                        "driver": driver,
                        "workload": workload,
                        "channel": channel,
                        "warmup": warmup,
                        "batch": None,
                    }
                )
            )
            for name, d in zip(("create.image_lookup", "create", "ready"), durs[:3], strict=True):
                lines.append(
                    orjson.dumps(
                        {
                            "type": "phase",
                            "t_ns": t_ns,
                            "trial": trial,
                            "name": name,
                            "dur_ns": int(d * 1e6),
                            "ok": True,
                        }
                    )
                )
            for i, a in enumerate(acts):
                lines.append(
                    orjson.dumps(
                        {
                            "type": "action",
                            "t_ns": t_ns,
                            "trial": trial,
                            "i": i,
                            "dur_ns": int(a * 1e6),
                            "rc": 0,
                            "ok": True,
                            "out_bytes": 120,
                        }
                    )
                )
            for name, d in zip(("teardown", "orchestration"), durs[3:], strict=True):
                lines.append(
                    orjson.dumps(
                        {
                            "type": "phase",
                            "t_ns": t_ns,
                            "trial": trial,
                            "name": name,
                            "dur_ns": int(d * 1e6),
                            "ok": True,
                        }
                    )
                )
            err = None if ok else {"phase": "ready", "kind": "timeout", "message": "probe"}
            lines.append(
                orjson.dumps(
                    {
                        "type": "trial_end",
                        "t_ns": t_ns,
                        "trial": trial,
                        "ok": ok,
                        "valid": valid,
                        "error": err,
                    }
                )
            )
            trial += 1
            if len(lines) >= 50_000:
                fh.write(b"\n".join(lines) + b"\n")
                written += len(lines)
                lines = []
        lines.append(
            orjson.dumps({"type": "run_end", "t_ns": t_ns, "status": "completed", "trials": trial})
        )
        fh.write(b"\n".join(lines) + b"\n")
        written += len(lines)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the recording here and keep it")
    args = ap.parse_args()
    if args.keep:
        path = args.keep
    else:
        fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="rtax-bench-")
        os.close(fd)
        os.unlink(path)
    try:
        n = generate(path, args.events)
        size = os.path.getsize(path)
        t0 = time.monotonic_ns()
        rec = read_recording(path)
        t1 = time.monotonic_ns()
        report = build_report(rec)
        t2 = time.monotonic_ns()
    finally:
        if not args.keep and os.path.exists(path):
            os.unlink(path)
    read_s = (t1 - t0) / 1e9
    build_s = (t2 - t1) / 1e9
    total_s = read_s + build_s
    print(f"events:          {n:,} ({size / 1e6:.1f} MB, {len(report['cells'])} cells)")
    print(f"read_recording:  {read_s:.3f} s")
    print(f"build_report:    {build_s:.3f} s")
    print(f"total:           {total_s:.3f} s  ({n / total_s:,.0f} events/s)")


if __name__ == "__main__":
    main()
