"""Engine benchmark: start-up and action latency of `local` and `stage`, and the harness's
own overhead against hyperfine. Prints measured figures; asserts nothing.

    python3 bench/engine_bench.py [--trials 60] [--actions 20] [--loops uvloop] [--rounds 1]

Per round, one rtax run per event loop of `--loops` (engine.evloop, through `RTAX_LOOP`;
their order alternates from round to round): T0-like, `true` x ACTIONS per trial, both
channels, local and stage, interleaved; then `hyperfine -N --warmup 3 true`. With more
than one round, each figure is the median of the rounds' P50s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

Cell = tuple[str, str]


def rtax(
    *args: str, loop: str | None = None, tree: str | None = None
) -> subprocess.CompletedProcess:
    """`python -m rtax_tui ARGS`; `tree`: another checkout's (its own .venv's python where
    it has one, else this python with PYTHONPATH=tree)."""
    env = dict(os.environ) if loop is None else {**os.environ, "RTAX_LOOP": loop}
    python = sys.executable
    if tree is not None:
        own = os.path.join(tree, ".venv", "bin", "python")
        if os.path.exists(own):
            python = own
        else:
            env["PYTHONPATH"] = tree
    return subprocess.run(
        [python, "-m", "rtax_tui", *args], capture_output=True, check=True, env=env
    )


def one_run(
    prof: Path, out: Path, loop: str, tree: str | None = None
) -> dict[Cell, dict[str, float]]:
    """P50 ms per cell: each phase's, and create+ready per trial (not a sum of medians);
    `tree`: run another checkout's rtax (`rtax`)."""
    import numpy as np

    from rtax_tui.model.recording import read_recording

    rtax("run", str(prof), "-o", str(out), "--quiet", loop=loop, tree=tree)
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    got: dict[Cell, dict[str, float]] = {
        (c["driver"], c["channel"]): {
            ph: c["phases"][ph]["p50_ms"] for ph in ("create", "ready", "action", "teardown")
        }
        for c in rep["cells"]
    }
    rec = read_recording(out)
    assert str(rec.header.get("loop", "asyncio")).split()[0] == loop, rec.header.get("loop")
    trial_cell = {
        e["trial"]: (e["driver"], e["channel"])
        for e in rec.events
        if e["type"] == "trial_start" and not e["warmup"]
    }
    cr: dict[tuple[Cell, int], int] = {}
    for e in rec.events:
        if e["type"] == "phase" and e["name"] in ("create", "ready") and e["trial"] in trial_cell:
            key = (trial_cell[e["trial"]], e["trial"])
            cr[key] = cr.get(key, 0) + e["dur_ns"]
    for cell in got:
        got[cell]["c+r"] = float(np.median([v for (c, _), v in cr.items() if c == cell])) / 1e6
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--actions", type=int, default=20)
    ap.add_argument("--loops", default="uvloop", help="comma-separated: uvloop, asyncio")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    loops = args.loops.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="rtax-bench-"))
    prof = tmp / "bench.toml"
    steps = ", ".join(['{argv = ["true"]}'] * args.actions)
    prof.write_text(
        f'[run]\ntrials = {args.trials}\nwarmup = 3\ndrivers = ["local", "stage"]\n'
        f'workloads = ["truex"]\nchannels = ["exec", "shell"]\n'
        f"[limits]\ncpus = 1.0\nmemory_mib = 512\npids = 256\n"
        f"[workloads.truex]\nsteps = [{steps}]\n"
    )
    runs: dict[str, list[dict[Cell, dict[str, float]]]] = {lp: [] for lp in loops}
    for r in range(args.rounds):
        for lp in loops if r % 2 == 0 else loops[::-1]:
            runs[lp].append(one_run(prof, tmp / f"bench-{lp}-{r}.jsonl", lp))
            if args.rounds > 1:
                loc = runs[lp][-1][("local", "exec")]["action"]
                print(f"round {r + 1} {lp}: local exec action {loc:.3f} ms", flush=True)

    print(
        f"rtax engine benchmark: {args.trials} trials x {args.actions} actions of `true` "
        f"per cell, {args.rounds} round(s) per loop, recordings in {tmp}"
    )
    med: dict[str, dict[Cell, dict[str, float]]] = {}
    for lp in loops:
        med[lp] = {
            cell: {
                ph: statistics.median(run[cell][ph] for run in runs[lp]) for ph in runs[lp][0][cell]
            }
            for cell in runs[lp][0]
        }
        print(f"\nloop {lp}")
        print(
            f"{'cell':<14} {'create':>8} {'ready':>8} {'c+r/trial':>10} {'action':>8} "
            f"{'teardown':>9} (P50 ms)"
        )
        for (drv, ch), c in sorted(med[lp].items()):
            print(
                f"{drv + '/' + ch:<14} {c['create']:8.3f} {c['ready']:8.3f} {c['c+r']:10.3f} "
                f"{c['action']:8.3f} {c['teardown']:9.3f}"
            )
    if len(loops) > 1:
        a, b = loops[0], loops[1]
        print(f"\n{b} / {a} (P50 ratio): ")
        for cell in sorted(med[a]):
            x, y = med[a][cell], med[b][cell]
            print(
                f"  {cell[0] + '/' + cell[1]:<14} c+r {y['c+r'] / x['c+r']:.2f}"
                f"  action {y['action'] / x['action']:.2f}"
            )

    if shutil.which("hyperfine"):
        hf = tmp / "hf.json"
        subprocess.run(
            ["hyperfine", "-N", "--warmup", "3", "--runs", "1000", "--export-json", str(hf),
             "true"],
            capture_output=True, check=True,
        )  # fmt: skip
        r0 = json.loads(hf.read_text())["results"][0]
        hmed = r0["median"] * 1000
        print(f"\nhyperfine -N true: median {hmed:.3f} ms (mean {r0['mean'] * 1000:.3f})")
        for lp in loops:
            local = med[lp][("local", "exec")]["action"]
            print(f"rtax local exec action P50 on {lp}: {local:.3f} ms; ratio {local / hmed:.2f}")
    else:
        print("hyperfine not installed: skipped the harness-overhead comparison")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
