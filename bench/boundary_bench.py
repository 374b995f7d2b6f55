"""The price of stage's boundary: stage before and after it, in one run of this script.

    python3 bench/boundary_bench.py [--before REV] [--rounds 3] [--trials 30] [--actions 20]

"Before" is the stage driver of git revision REV (default: the last commit before the
boundary landed, when the host's whole `/` was bound read-only into a root sandbox
with every capability); "after" is this checkout. Both run the same profile (ACTIONS
`true` actions per trial, both channels, the same limits) through rtax itself, in
alternating rounds so that a busy spell on the machine hits both. Prints, per
channel, the P50 of create, ready, create+ready per trial and the action, pooled
over every round's trials (recomputed from the recordings, not from the reports).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEFORE = "dc6370b"  # the last commit with the old stage sandbox


def run_rtax(tree: Path, profile: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(profile), "--headless", "-o", str(out)],
        cwd=tree,
        env=env,
        capture_output=True,
        check=True,
    )


def per_trial(rec_path: Path) -> dict[str, dict[str, list[int]]]:
    """channel -> {create, ready, create+ready, action} -> durations (ns), no warm-ups."""
    sys.path.insert(0, str(REPO))
    from rtax_tui.model.recording import read_recording

    rec = read_recording(rec_path)
    chan = {
        e["trial"]: e["channel"]
        for e in rec.events
        if e["type"] == "trial_start" and not e["warmup"]
    }
    out: dict[str, dict[str, list[int]]] = {}
    cr: dict[int, int] = {}
    for e in rec.events:
        t = e.get("trial")
        if t not in chan:
            continue
        d = out.setdefault(chan[t], {"create": [], "ready": [], "create+ready": [], "action": []})
        if e["type"] == "phase" and e["name"] in ("create", "ready"):
            d[e["name"]].append(e["dur_ns"])
            cr[t] = cr.get(t, 0) + e["dur_ns"]
        elif e["type"] == "action":
            d["action"].append(e["dur_ns"])
    for t, v in cr.items():
        out[chan[t]]["create+ready"].append(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", default=BEFORE, help=f"git revision of 'before' ({BEFORE})")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=30, help="measured trials per cell and round")
    ap.add_argument("--actions", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtax-boundary-bench-"))
    old = tmp / "before"
    try:
        # the old tree, as a plain export (no worktree to clean up)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.before], capture_output=True, check=True
        ).stdout
        old.mkdir()
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        (old / "rtax_tui" / "drivers").symlink_to("../drivers")  # as the installed package
        prof = tmp / "boundary.toml"
        steps = ", ".join(['{argv = ["true"]}'] * args.actions)
        prof.write_text(
            f'[run]\ntrials = {args.trials}\nwarmup = 3\ndrivers = ["stage"]\n'
            f'workloads = ["truex"]\nchannels = ["exec", "shell"]\n'
            f"[limits]\ncpus = 1.0\nmemory_mib = 512\npids = 256\n"
            f"[workloads.truex]\nsteps = [{steps}]\n"
        )
        pooled: dict[str, dict[str, dict[str, list[int]]]] = {"before": {}, "after": {}}
        for r in range(args.rounds):
            for name, tree in (("before", old), ("after", REPO)):
                out = tmp / f"{name}-{r}.jsonl"
                run_rtax(tree, prof, out)
                for ch, phases in per_trial(out).items():
                    dst = pooled[name].setdefault(ch, {})
                    for ph, vals in phases.items():
                        dst.setdefault(ph, []).extend(vals)
                print(f"round {r + 1}/{args.rounds}: {name} done ({out})", file=sys.stderr)
        print(
            f"stage before ({args.before}) and after (this checkout): {args.rounds} rounds x "
            f"{args.trials} trials x {args.actions} `true` actions per channel, P50 in ms"
        )
        print(f"{'channel':<8} {'phase':<13} {'before':>9} {'after':>9} {'after-before':>13}")
        for ch in ("exec", "shell"):
            for ph in ("create", "ready", "create+ready", "action"):
                b = statistics.median(pooled["before"][ch][ph]) / 1e6
                a = statistics.median(pooled["after"][ch][ph]) / 1e6
                n = len(pooled["after"][ch][ph])
                print(f"{ch:<8} {ph:<13} {b:9.3f} {a:9.3f} {a - b:+13.3f}  (n={n})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
