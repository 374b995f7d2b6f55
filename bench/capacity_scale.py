"""Scale benchmark: N stage environments through one barrier, and what rtax itself costs.

    python3 bench/capacity_scale.py [--size 1000 | --sizes 10,100,1000] [--runs 3]
        [--before REV] [--channel shell] [--workload t0|capacity] [--touch-mib 1]
        [--release-concurrency K]

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
- the phases of the N trials: create and ready P50 / P95, teardown P50 (the batch's
  own trials, from the recording's `phase` events).
With `--before REV`, every run is made twice, with the tree of git revision REV (a
worktree of it, made once under ~/.cache/rtax/bench-trees and kept, or `--before-tree
DIR`, a checkout of it; run with its own .venv, made there if missing) and with this
checkout, in alternating order, so that a busy spell on the machine hits both; the
medians are printed per tree, with the ratio after/before and what the batch costs per
environment (time to release / N). Asserts nothing: the figures are for bench/README.md.
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
REPO = Path(__file__).resolve().parent.parent
TREES = Path.home() / ".cache" / "rtax" / "bench-trees"


def before_tree(rev: str) -> Path:
    """A worktree of `rev` (made once, detached, kept for the next run)."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = TREES / sha[:12]
    if not (tree / "rtax_tui").is_dir():
        TREES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=True)
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), sha],
            check=True,
            capture_output=True,
        )
    return tree


def python_of(tree: Path) -> str:
    """The tree's own virtual environment's Python (made with rtax installed editable from
    the tree when it has none: its package layout maps rtax_tui.drivers to drivers/)."""
    py = tree / ".venv" / "bin" / "python"
    if tree != REPO and not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", str(tree)],
            check=True,
        )
    return str(py) if py.exists() else sys.executable


def pct(vals: list[float], q: float) -> float:
    if not vals:
        return float("nan")
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(q * len(vals)))]


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


def one_run(
    tmp: Path, i: int, args: argparse.Namespace, size: int, tree: Path = REPO, name: str = "run"
) -> dict[str, float]:
    prof = tmp / f"scale-{size}.toml"
    extra = f"touch_mib = {args.touch_mib}\n"
    limits = (
        "" if args.workspace_mib is None else f"[limits]\nworkspace_mib = {args.workspace_mib}\n"
    )
    if args.release_concurrency is not None:
        extra += f"release_concurrency = {args.release_concurrency}\n"
    prof.write_text(
        f'[run]\nwarmup = 0\ndrivers = ["stage"]\nworkloads = ["{args.workload}"]\n'
        f'channels = ["{args.channel}"]\n'
        "[timeouts]\ncreate = 600\nready = 600\naction = 600\nteardown = 600\n"
        f"[capacity]\nsize = {size}\nbatches = 1\ndeadline_s = {args.deadline}\n"
        "cpus = 2.0\nmemory_mib = 16384\n" + extra + limits
    )
    out = tmp / f"{name}-{size}-{i}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [python_of(tree), "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        cwd=tree,
        env=env,
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
    phases: dict[str, list[float]] = {"create": [], "ready": [], "teardown": []}
    for e in events:
        if e["type"] == "phase" and e.get("name") in phases:
            phases[e["name"]].append(e["dur_ns"] / 1e9)
    return {
        "create_p50_s": pct(phases["create"], 0.5),
        "create_p95_s": pct(phases["create"], 0.95),
        "ready_p50_s": pct(phases["ready"], 0.5),
        "ready_p95_s": pct(phases["ready"], 0.95),
        "teardown_p50_s": pct(phases["teardown"], 0.5),
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


KEYS = (
    "to_release_s",
    "release_ms",
    "create_p50_s",
    "create_p95_s",
    "ready_p50_s",
    "ready_p95_s",
    "teardown_p50_s",
    "budget_peak_mib",
    "rtax_cpu_s",
    "rtax_hwm_mib",
    "wall_s",
)


def show(label: str, r: dict[str, float], size: int) -> None:
    print(
        f"{label}: rc {r['rc']}, passed {r['ok']}, arrived {r['arrived']}/{size}, "
        f"failed {r['failed']}; " + ", ".join(f"{k} {r[k]:.2f}" for k in KEYS),
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--sizes", default=None, help="batch sizes, e.g. 10,100,1000 (else --size)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", default=None, help="git revision to compare with, interleaved")
    ap.add_argument("--before-tree", default=None, help="an existing checkout of --before")
    ap.add_argument("--channel", default="shell", choices=("shell", "exec"))
    ap.add_argument("--deadline", type=float, default=900.0)
    ap.add_argument("--workload", default="t0", choices=("t0", "capacity"))
    ap.add_argument("--touch-mib", type=int, default=1, help="capacity: MiB each holds")
    ap.add_argument("--release-concurrency", type=int, default=None)
    ap.add_argument(
        "--workspace-mib", default=None, help="[limits] workspace_mib (a number or '\"unlimited\"')"
    )
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else [args.size]
    trees: list[tuple[str, Path]] = []
    if args.before:
        old = Path(args.before_tree) if args.before_tree else before_tree(args.before)
        trees.append((f"before {args.before}", old))
    trees.append(("after" if args.before else "run", REPO))
    tmp = Path(tempfile.mkdtemp(prefix="rtax-scale-"))
    print(
        f"rtax capacity scale: {','.join(map(str, sizes))} stage environments "
        f"({args.workload} over {args.channel}) through one barrier, {args.runs} runs"
        + (f", interleaved with {args.before} ({trees[0][1]})" if args.before else "")
        + f"; recordings in {tmp}",
        flush=True,
    )
    for size in sizes:
        rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
        for i in range(args.runs):
            # the order alternates: a machine growing busier does not always hit "after"
            for name, tree in trees if i % 2 == 0 else trees[::-1]:
                r = one_run(tmp, i, args, size, tree, name.split()[0])
                rows[name].append(r)
                show(f"N={size} run {i + 1} {name}", r, size)
        med: dict[str, dict[str, float]] = {}
        for name, _ in trees:
            med[name] = {k: statistics.median(r[k] for r in rows[name]) for k in KEYS}
            print(
                f"N={size} median {name}: "
                + ", ".join(f"{k} {med[name][k]:.2f}" for k in KEYS)
                + f"; per environment {1000 * med[name]['to_release_s'] / size:.2f} ms to "
                f"release, {1000 * med[name]['wall_s'] / size:.2f} ms wall",
                flush=True,
            )
        if args.before:
            b, a = med[trees[0][0]], med[trees[1][0]]
            print(
                f"N={size} after/before: "
                + ", ".join(f"{k} {a[k] / b[k]:.2f}x" for k in KEYS if b[k] and b[k] == b[k]),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
