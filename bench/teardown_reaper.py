"""What the engine being a child subreaper changes: each local driver's trials with the
subreaper (the default) and without (`RTAX_SUBREAPER=0`), in alternating rtax runs.
Prints per driver and mode the P50 of create, ready, teardown and an action (ms), and
the orphans the engine adopted (the header says whether it was a subreaper). Asserts
nothing. Docker and podman need their daemons and images (bench/README.md).

    python3 bench/teardown_reaper.py [--rounds 2] [--trials 5] [--actions 10]
        [--drivers local,stage,gvisor,docker,podman] [--channel exec]
        [--hot-blocks 6] [--hot-calls 500] [--hot-only]

First the exec channel's hot path alone (LocalHost.run of `true`, one process per mode
and block, alternating), where the subreaper's cost would show: its spawn wrappers and
its thread's wake when a child of the engine's exits.

Each round is two rtax runs, one per mode, the order alternating round by round; a run
has every driver, its trials in rtax's seeded interleaved order. n per cell and mode is
rounds x trials.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rtax_tui.model.recording import read_recording

PHASES = ("create", "ready", "teardown")


def run(profile: Path, out: Path, subreaper: bool) -> None:
    env = os.environ | {"RTAX_SUBREAPER": "1" if subreaper else "0"}
    cmd = [sys.executable, "-m", "rtax_tui", "run", str(profile), "-o", str(out)]
    subprocess.run(cmd, env=env, capture_output=True, check=True)


# rtax run in-process, then how many orphans its engine adopted and reaped
_COUNT = (
    "import sys; from rtax_tui.commands.cli import main; from rtax_tui.hosts import subreaper\n"
    "try:\n    main(sys.argv[1:])\n"
    "finally:\n    print('REAPED', subreaper.reaped(), file=sys.stderr)"
)


def orphans(profile: Path, out: Path, driver: str, trials: int) -> int:
    """Orphans adopted and reaped by the engine over one run of `driver` alone."""
    env = os.environ | {"RTAX_SUBREAPER": "1"}
    cmd = [sys.executable, "-c", _COUNT, "run", str(profile), "-o", str(out)]
    cmd += ["--driver", driver, "--trials", str(trials), "--warmup", "0"]
    err = subprocess.run(cmd, env=env, capture_output=True, check=True).stderr.decode()
    return int(err.rsplit("REAPED", 1)[1].split()[0])


# the exec channel's hot path alone: LocalHost.run of `true` (hosts/spawn.py + pidfd),
# the subreaper as an engine has it (on) or not at all (off); prints per-call ns
_HOT = (
    "import asyncio, os, sys, time\n"
    "from rtax_tui.hosts import subreaper\n"
    "from rtax_tui.hosts.local import LocalHost\n"
    "subreaper.enable_from_env()\n"
    "async def main(n):\n"
    "    h = LocalHost(); out = []\n"
    "    for _ in range(n):\n"
    "        t = time.monotonic_ns()\n"
    "        await h.run(['true'], merge_stderr=True)\n"
    "        out.append(time.monotonic_ns() - t)\n"
    "    print(' '.join(map(str, out)))\n"
    "asyncio.run(main(int(sys.argv[1])))"
)


def hot_path(blocks: int, calls: int) -> None:
    """`blocks` processes per mode, alternating, `calls` actions each: P50 per mode."""
    got: dict[bool, list[int]] = {True: [], False: []}
    per: dict[bool, list[float]] = {True: [], False: []}
    for b in range(blocks):
        for mode in (True, False) if b % 2 == 0 else (False, True):
            env = os.environ | {"RTAX_SUBREAPER": "1" if mode else "0"}
            cmd = [sys.executable, "-c", _HOT, str(calls)]
            out = subprocess.run(cmd, env=env, capture_output=True, check=True).stdout
            xs = [int(x) for x in out.split()[calls // 10 :]]  # the first 10%: warm-up
            got[mode] += xs
            per[mode].append(statistics.median(xs) / 1e6)
    on, off = (statistics.median(got[m]) / 1e6 for m in (True, False))
    print(
        f"local exec action alone (LocalHost.run of `true`), {blocks} x {calls} per mode "
        f"alternating, n = {len(got[True])} per mode: P50 off {off:.3f} ms, "
        f"on {on:.3f} ms (on/off {on / off:.3f})"
    )
    for m in (False, True):
        blocks_s = " ".join(f"{x:.3f}" for x in per[m])
        print(f"  block P50s {'on ' if m else 'off'}: {blocks_s}")


def collect(rec_path: Path, into: dict[tuple[str, str, bool], list[float]]) -> bool:
    """Per-trial ms of each phase (and each action) of measured ok trials; returns the
    header's `subreaper` fact."""
    rec = read_recording(rec_path)
    mode = bool(rec.header["hosts"]["local"].get("subreaper"))
    drv = {e["trial"]: e["driver"] for e in rec.events if e["type"] == "trial_start"}
    warm = {e["trial"] for e in rec.events if e["type"] == "trial_start" and e["warmup"]}
    ok = {e["trial"] for e in rec.events if e["type"] == "trial_end" and e["ok"] and e["valid"]}
    for e in rec.events:
        t = e.get("trial")
        if t is None or t in warm or t not in ok:
            continue
        if e["type"] == "phase" and e["name"] in PHASES:
            into.setdefault((drv[t], e["name"], mode), []).append(e["dur_ns"] / 1e6)
        elif e["type"] == "action":
            into.setdefault((drv[t], "action", mode), []).append(e["dur_ns"] / 1e6)
    return mode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=5, help="per cell and run")
    ap.add_argument("--actions", type=int, default=10)
    ap.add_argument("--drivers", default="local,stage,gvisor,docker,podman")
    ap.add_argument("--channel", default="exec")
    ap.add_argument("--hot-blocks", type=int, default=6, help="0: skip the hot path")
    ap.add_argument("--hot-calls", type=int, default=500)
    ap.add_argument("--hot-only", action="store_true")
    args = ap.parse_args()
    if args.hot_blocks:
        hot_path(args.hot_blocks, args.hot_calls)
    if args.hot_only:
        return 0
    drivers = args.drivers.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="rtax-reaperbench-"))
    prof = tmp / "bench.toml"
    steps = ", ".join(['{argv = ["true"]}'] * args.actions)
    prof.write_text(
        f"[run]\ntrials = {args.trials}\nwarmup = 1\n"
        f'drivers = {drivers!r}\nworkloads = ["truex"]\nchannels = [{args.channel!r}]\n'
        f"[limits]\ncpus = 1.0\nmemory_mib = 512\npids = 256\n"
        f"[workloads.truex]\nsteps = [{steps}]\n".replace("'", '"')
    )
    samples: dict[tuple[str, str, bool], list[float]] = {}
    for r in range(args.rounds):
        for mode in (True, False) if r % 2 == 0 else (False, True):
            out = tmp / f"r{r}-{'on' if mode else 'off'}.jsonl"
            run(prof, out, mode)
            got = collect(out, samples)
            assert got == mode, f"{out}: header says subreaper={got}"
            print(f"round {r + 1}: subreaper {'on ' if mode else 'off'} -> {out}", flush=True)
    print("\norphans the engine adopted and reaped, per trial (one run per driver alone):")
    for d in drivers:
        n = orphans(prof, tmp / f"orphans-{d}.jsonl", d, args.trials)
        print(f"  {d:<8} {n / args.trials:.1f} ({n} in {args.trials} trials)")
    print(
        f"\n{args.rounds} rounds x {args.trials} trials per cell and mode, {args.actions} "
        f"`true` actions a trial, channel {args.channel}; P50 ms (n), on = subreaper"
    )
    head = f"{'driver':<8}" + "".join(f"{p + ' off':>14}{p + ' on':>14}" for p in PHASES)
    print(head + f"{'action off':>12}{'action on':>11}{'teardown on/off':>17}")
    for d in drivers:
        row = f"{d:<8}"

        def p50(phase: str, mode: bool) -> float | None:
            xs = samples.get((d, phase, mode))  # noqa: B023 (used within the iteration)
            return statistics.median(xs) if xs else None

        def cell(phase: str, mode: bool, width: int) -> str:
            v = p50(phase, mode)
            n = len(samples.get((d, phase, mode), []))  # noqa: B023
            return f"{'-' if v is None else f'{v:.3f} ({n})':>{width}}"

        for p in PHASES:
            row += cell(p, False, 14) + cell(p, True, 14)
        row += cell("action", False, 12) + cell("action", True, 11)
        on, off = p50("teardown", True), p50("teardown", False)
        row += f"{on / off:>17.2f}" if on and off else f"{'-':>17}"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
