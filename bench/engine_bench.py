"""Engine benchmark: start-up and action latency of `local` and `stage`, and the harness's
own overhead against hyperfine. Prints measured figures; asserts nothing.

    python3 bench/engine_bench.py [--trials 60] [--actions 20]

One rtax run (T0-like: `true` x ACTIONS per trial, both channels, local and stage,
interleaved) and, in the same run of this script, `hyperfine -N --warmup 3 true`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def rtax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, check=True
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--actions", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtax-bench-"))
    prof = tmp / "bench.toml"
    steps = ", ".join(['{argv = ["true"]}'] * args.actions)
    prof.write_text(
        f'[run]\ntrials = {args.trials}\nwarmup = 3\ndrivers = ["local", "stage"]\n'
        f'workloads = ["truex"]\nchannels = ["exec", "shell"]\n'
        f"[limits]\ncpus = 1.0\nmemory_mib = 512\npids = 256\n"
        f"[workloads.truex]\nsteps = [{steps}]\n"
    )
    out = tmp / "bench.jsonl"
    rtax("run", str(prof), "-o", str(out))
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    cells = {(c["driver"], c["channel"]): c for c in rep["cells"]}

    def p50(drv: str, ch: str, phase: str) -> float:
        return cells[(drv, ch)]["phases"][phase]["p50_ms"]

    print(
        f"rtax engine benchmark: {args.trials} trials x {args.actions} actions of `true` "
        f"per cell, recording {out}"
    )
    print(
        f"{'cell':<14} {'create':>8} {'ready':>8} {'c+r':>7} {'action':>8} {'teardown':>9} (P50 ms)"
    )
    for (drv, ch), c in sorted(cells.items()):
        cr = c["phases"]["create"]["p50_ms"] + c["phases"]["ready"]["p50_ms"]
        print(
            f"{drv + '/' + ch:<14} {p50(drv, ch, 'create'):8.3f} {p50(drv, ch, 'ready'):8.3f} "
            f"{cr:8.3f} {p50(drv, ch, 'action'):8.3f} {p50(drv, ch, 'teardown'):9.3f}"
        )
    # create+ready per trial, P50 (not the sum of medians): recomputed from the recording
    import numpy as np

    from rtax_tui.model.recording import read_recording

    rec = read_recording(out)
    trial_cell = {
        e["trial"]: (e["driver"], e["channel"])
        for e in rec.events
        if e["type"] == "trial_start" and not e["warmup"]
    }
    cr: dict = {}
    for e in rec.events:
        if e["type"] == "phase" and e["name"] in ("create", "ready") and e["trial"] in trial_cell:
            key = (trial_cell[e["trial"]], e["trial"])
            cr[key] = cr.get(key, 0) + e["dur_ns"]
    for cell in sorted(set(trial_cell.values())):
        vals = [v for (c, _), v in cr.items() if c == cell]
        print(f"create+ready per trial P50 {cell[0]}/{cell[1]}: {np.median(vals) / 1e6:.3f} ms")

    if shutil.which("hyperfine"):
        hf = tmp / "hf.json"
        subprocess.run(
            [
                "hyperfine",
                "-N",
                "--warmup",
                "3",
                "--runs",
                "1000",
                "--export-json",
                str(hf),
                "true",
            ],
            capture_output=True,
            check=True,
        )
        r = json.loads(hf.read_text())["results"][0]
        med = r["median"] * 1000
        local = p50("local", "exec", "action")
        print(
            f"hyperfine -N true: median {med:.3f} ms (mean {r['mean'] * 1000:.3f}); "
            f"rtax local exec action P50 {local:.3f} ms; ratio {local / med:.2f}"
        )
    else:
        print("hyperfine not installed: skipped the harness-overhead comparison")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
