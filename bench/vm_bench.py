"""VM substrates: ready P50 of libvirt (q35) and QEMU microvm, booted and restored, with the
accelerator named; the guest agent's per-action latency on both channels; the published
reference points beside them. Prints measured figures; asserts nothing.

Every figure comes from an rtax recording (the engine's monotonic clock): one run per
start mode, a workload of ACTIONS `true` steps, both channels. Needs libvirtd running
(scripts/start-libvirtd) and the guest built (`rtax images build --driver vm`).

    python3 bench/vm_bench.py [--trials 5] [--accel tcg|kvm|auto]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from rtax_tui.model.recording import read_recording

ACTIONS = 20
DRIVERS = ("libvirt", "microvm")
REFERENCES = (
    ("VM shell ready (published)", "101 ms, vs 25 ms staged"),
    ("QEMU microvm repair vs VM (published)", "1.40 s vs 3.25 s"),
    ("Firecracker to guest init (published)", "<= 125 ms"),
)

PROFILE = """
[run]
trials = {trials}
warmup = 1
drivers = ["libvirt", "microvm"]
workloads = ["agent{n}"]
channels = ["shell", "exec"]
[timeouts]
ready = 120
[workloads.agent{n}]
steps = [{steps}]
[drivers_options.libvirt]
accel = "{accel}"
start = "{start}"
[drivers_options.microvm]
accel = "{accel}"
start = "{start}"
"""


def run(start: str, trials: int, accel: str, tmp: Path) -> Path:
    prof = tmp / f"{start}.toml"
    steps = ", ".join('{argv = ["true"]}' for _ in range(ACTIONS))
    prof.write_text(PROFILE.format(trials=trials, accel=accel, start=start, n=ACTIONS, steps=steps))
    rec = tmp / f"{start}.jsonl"
    subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec)],
        check=True,
        capture_output=True,
    )
    return rec


def p50(xs: list[float]) -> str:
    return f"{np.median(xs) / 1e6:,.1f}" if xs else "-"


def summarize(rec_path: Path, start: str) -> list[str]:
    rec = read_recording(rec_path)
    header = rec.header
    cells: dict[int, tuple[str, str]] = {}
    for e in rec.events:
        if e["type"] == "trial_start" and not e["warmup"]:
            cells[e["trial"]] = (e["driver"], e["channel"])
    ok = {e["trial"] for e in rec.events if e["type"] == "trial_end" and e["ok"]}
    rows = []
    for drv in DRIVERS:
        accel = header["hosts"]["local"]["drivers"][drv]["accel"]
        for ch in ("shell", "exec"):
            mine = {t for t, c in cells.items() if c == (drv, ch) and t in ok}
            ph: dict[str, list[float]] = {}
            acts: list[float] = []
            remote: list[float] = []
            for e in rec.events:
                if e.get("trial") not in mine:
                    continue
                if e["type"] == "phase":
                    ph.setdefault(e["name"], []).append(e["dur_ns"])
                elif e["type"] == "action":
                    acts.append(e["dur_ns"])
                    if e.get("remote_ns") is not None:
                        remote.append(e["remote_ns"])
            n_all = sum(1 for c in cells.values() if c == (drv, ch))
            rows.append(
                f"| {drv} | {start} | {accel} | {ch} | {len(mine)}/{n_all} | "
                f"{p50(ph.get('create', []))} | {p50(ph.get('ready', []))} | "
                f"{p50(ph.get('ready.firmware_kernel', []))} | {p50(ph.get('ready.agent', []))} | "
                f"{p50(acts)} | {p50(remote)} | {p50(ph.get('teardown', []))} |"
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--accel", choices=("tcg", "kvm", "auto"), default="auto")
    args = ap.parse_args()
    print(
        "| driver | start | accel | channel | ok/n | create | ready | ready.firmware_kernel "
        "| ready.agent | action (true) | agent's own | teardown |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="rtax-vm-bench-") as tmp:
        for start in ("boot", "restore"):
            for row in summarize(run(start, args.trials, args.accel, Path(tmp)), start):
                print(row, flush=True)
    print(
        "P50 in ms over measured trials (1 warm-up left out); action: all "
        f"{ACTIONS} `true` steps of each trial, host round trip; agent's own: the agent's "
        "duration of the command by the guest clock"
    )
    for what, fig in REFERENCES:
        print(f"{what}: {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
