"""gVisor beside the substrates it is compared with, in one interleaved run.

One `rtax run` of T0, T1, T2, the trajectory-10 mix and a real agent trajectory (a
replay of Claude Code's session in tests/data/trajectories) on `stage` (bubblewrap),
`docker` (runc), `gvisor` (rtax's runsc driver) and `docker-runsc` (docker with
`runtime = "runsc"`, an instance of the docker driver), both channels, trials
interleaved by the engine. Then, from the recording:

- per cell: create, ready, action and teardown P50 (ms), and trials failed / invalid;
- the per-action cost split by kind of step (what the step runs: git, python's AST
  search, pytest, grep, a file read, a shell edit; replayed steps by their command's
  first word), P50 per driver and channel: gVisor's price falls on system calls, so on
  the steps that make many of them;
- the report's clusters of the action phase, per cell;
- worker-hours per 1M trajectories of 150 steps (`rtax project`), per cell.

Prints measured figures; asserts nothing. Needs dockerd with runsc registered
(`bash scripts/start-dockerd`), the images (`rtax images build --driver docker --driver
gvisor`) and root for stage's cgroups.

    python3 bench/gvisor_bench.py [--trials 5] [--warmup 1] [--channels exec,shell]
        [--drivers stage,docker,gvisor,docker-runsc] [--keep PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from rtax_tui.analysis.report import build_report, project_report
from rtax_tui.engine.profile import load_profile
from rtax_tui.engine.runner import resolve_workloads
from rtax_tui.model.recording import read_recording

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "tests/data/trajectories/claude-code/session-196820da.jsonl"
WORKLOADS = ("t0", "t1", "t2", "trajectory-10", "claude")


def profile_text(trials: int, warmup: int, drivers: list[str], channels: list[str]) -> str:
    q = ", ".join(f'"{d}"' for d in drivers)
    c = ", ".join(f'"{ch}"' for ch in channels)
    w = ", ".join(f'"{x}"' for x in WORKLOADS)
    return f"""description = "gVisor beside stage, docker and docker+runsc (bench/gvisor_bench.py)"
[run]
trials = {trials}
warmup = {warmup}
drivers = [{q}]
workloads = [{w}]
channels = [{c}]
[timeouts]
action = 60
[drivers_options.docker-runsc]
driver = "docker"
runtime = "runsc"
[workloads.claude]
trajectory = "{REPLAY}"
"""


def step_kind(argv: tuple[str, ...]) -> str:
    """What a step runs, for the split of the action phase: pytest wherever it is run,
    a replayed command (`timeout -s KILL T bash -c CMD`) by its command's first word, a
    replayed write (`sh -c 'p=$1; shift; ... printf'`) as a write, python's AST search,
    git, grep, file reads, a shell edit."""
    if not argv:
        return "?"
    if "pytest" in " ".join(argv):
        return "pytest"
    head = os.path.basename(argv[0])
    if head == "timeout":  # a replayed command: `timeout -s KILL T bash -c CMD`
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in ("-s", "-k") else 1
        return step_kind(argv[i + 1 :])  # past the duration
    if head in ("sh", "bash") and len(argv) > 2 and argv[1] == "-c":
        text = argv[2]
        if "shift" in text and "printf" in text:
            return "write (replayed)"
        if text.lstrip().startswith("printf") or ">>" in text:
            return "edit (sh)"
        words = text.replace("&&", " ").replace(";", " ").replace("|", " ").split()
        for word in words:  # `cd DIR && cmd ...`: its command
            if word != "cd" and word[0] not in "/.-~" and "=" not in word:
                return f"{os.path.basename(word)} (replayed)" if head == "bash" else word
        return "sh"
    if head.startswith("python"):
        return "python"
    if head in ("cat", "head", "wc", "sed", "ls"):
        return "read"
    return head


def _ms(ns: list[int]) -> str:
    return f"{statistics.median(ns) / 1e6:.2f}" if ns else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--channels", default="exec,shell")
    ap.add_argument("--drivers", default="stage,docker,gvisor,docker-runsc")
    ap.add_argument("--keep", help="keep the recording at this path")
    ap.add_argument("--from", dest="source", help="no run: the tables of this recording")
    args = ap.parse_args()
    drivers = args.drivers.split(",")
    channels = args.channels.split(",")
    with tempfile.TemporaryDirectory(prefix="rtax-gvbench-") as tmp:
        prof = Path(tmp) / "gvisor-bench.toml"
        prof.write_text(profile_text(args.trials, args.warmup, drivers, channels))
        out = Path(args.source or args.keep or Path(tmp) / "r.jsonl")
        if not args.source:
            cmd = [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet"]
            res = subprocess.run([*cmd, "-o", str(out)], cwd=ROOT)
            if res.returncode != 0:
                print(f"gvisor_bench: rtax run exited {res.returncode}", file=sys.stderr)
        rec = read_recording(out)
        report = build_report(rec)
        steps = {n: w.steps for n, w in resolve_workloads(load_profile(prof)).items()}
    trial_cell: dict[int, tuple[str, str, str]] = {}
    for ev in rec.events:
        if ev["type"] == "trial_start" and not ev.get("warmup"):
            trial_cell[ev["trial"]] = (ev["driver"], ev["channel"], ev["workload"])
    by_kind: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for ev in rec.events:
        if ev["type"] != "action" or ev["trial"] not in trial_cell or ev.get("rc") is None:
            continue
        drv, ch, wl = trial_cell[ev["trial"]]
        wsteps = steps.get(wl, ())
        kind = step_kind(wsteps[ev["i"]].argv) if ev["i"] < len(wsteps) else "?"
        by_kind[(kind, drv, ch)].append(int(ev["dur_ns"]))

    print(f"# {rec.header['run_id']}: {len(trial_cell)} measured trials\n")
    print("| cell | n | failed | invalid | create | ready | action | teardown | total |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in report["cells"]:
        ph: dict[str, Any] = c["phases"]

        def p50(name: str, ph: dict[str, Any] = ph) -> str:
            s = ph.get(name)
            return f"{s['p50_ms']:.2f}" if s and s["p50_ms"] is not None else "-"

        print(
            f"| {c['cell']} | {c['n']} | {c['failed']} | {c['invalid']} | {p50('create')} | "
            f"{p50('ready')} | {p50('action')} | {p50('teardown')} | {p50('total')} |"
        )
    cols = [(d, ch) for d in drivers for ch in channels]
    print("\n## Action P50 by kind of step (ms; n in brackets)\n")
    print("| kind | " + " | ".join(f"{d} {ch}" for d, ch in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for kind in sorted({k for k, _, _ in by_kind}):
        cells = []
        for d, ch in cols:
            xs = by_kind.get((kind, d, ch), [])
            cells.append(f"{_ms(xs)} ({len(xs)})" if xs else "-")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("\n## Clusters of the action phase (the report's)\n")
    for c in report["cells"]:
        clus = c["clusters"].get("action")
        if clus:
            print(f"- {c['cell']}: {clus}")
    proj = project_report(rec, trajectories=1_000_000, steps=150)
    print("\n## Worker-hours per 1M trajectories of 150 steps\n")
    print("| cell | worker-hours | 95% CI |")
    print("|---|---|---|")
    for row in proj["cells"]:
        wh, ci = row.get("worker_hours"), row.get("ci95") or [None, None]
        if wh is None:
            print(f"| {row['cell']} | - | - |")
            continue
        lo, hi = (f"{v:,.0f}" if v is not None else "-" for v in ci)
        print(f"| {row['cell']} | {wh:,.0f} | [{lo}, {hi}] |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
