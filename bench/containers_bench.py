"""Container substrates: rtax's API path against the CLI a user would run by hand, the
exec channel against the shell channel, and Docker vs Podman vs stage vs local.
Prints measured figures; asserts nothing. Needs dockerd and the podman service running
and the images built (`rtax images build --driver docker|podman`).

    python3 bench/containers_bench.py [--trials 20] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rtax_tui.drivers.toolkit.images import image_tag

from rtax_tui.model.recording import read_recording

PODMAN_ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]


def rtax(*args: str) -> bytes:
    cmd = [sys.executable, "-m", "rtax_tui", *args]
    return subprocess.run(cmd, capture_output=True, check=True).stdout


def hyperfine(cmd: list[str], runs: int, tmp: Path) -> float:
    out = tmp / "hf.json"
    import shlex

    subprocess.run(
        [
            "hyperfine",
            "-N",
            "--warmup",
            "2",
            "--runs",
            str(runs),
            "--export-json",
            str(out),
            shlex.join(cmd),
        ],
        capture_output=True,
        check=True,
    )
    return json.loads(out.read_text())["results"][0]["median"] * 1000


def per_trial(rec_path: Path, phases: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """P50 over measured trials of the per-trial sum of `phases`, by (driver, channel)."""
    rec = read_recording(rec_path)
    cell = {
        e["trial"]: (e["driver"], e["channel"])
        for e in rec.events
        if e["type"] == "trial_start" and not e["warmup"]
    }
    sums: dict[int, int] = {}
    for e in rec.events:
        if e["type"] == "phase" and e["name"] in phases and e["trial"] in cell:
            sums[e["trial"]] = sums.get(e["trial"], 0) + e["dur_ns"]
    by: dict[tuple[str, str], list[int]] = {}
    for t, v in sums.items():
        by.setdefault(cell[t], []).append(v)
    return {k: float(np.median(v)) / 1e6 for k, v in by.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--runs", type=int, default=20, help="hyperfine runs of `run --rm`")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtax-cbench-"))
    busybox = image_tag("busybox")

    # 1. rtax T0 (create+ready+teardown) vs `docker|podman run --rm IMAGE true`
    prof = tmp / "t0x.toml"
    steps = ", ".join(['{argv = ["true"]}'] * 10)
    prof.write_text(
        f'[run]\ntrials = {args.trials}\nwarmup = 2\ndrivers = ["docker", "podman"]\n'
        f'workloads = ["truex"]\nchannels = ["exec", "shell"]\n'
        f"[workloads.truex]\nsteps = [{steps}]\n"
    )
    rec = tmp / "t0x.jsonl"
    rtax("run", str(prof), "-o", str(rec))
    crt = per_trial(rec, ("create", "ready", "teardown"))
    rep = json.loads(rtax("report", str(rec), "--format", "json"))
    act = {(c["driver"], c["channel"]): c["phases"]["action"]["p50_ms"] for c in rep["cells"]}
    cli = {}
    if shutil.which("hyperfine"):
        cli["docker"] = hyperfine(
            ["docker", "run", "--rm", "--network", "none", busybox, "true"], args.runs, tmp
        )
        cli["podman"] = hyperfine(
            [
                "podman",
                "run",
                "--rm",
                "--network",
                "none",
                *PODMAN_ULIMITS,
                f"localhost/{busybox}",
                "true",
            ],
            args.runs,
            tmp,
        )
    print(f"recording {rec}; {args.trials} trials x 10 `true` actions per cell; P50 in ms")
    print(
        f"{'driver/channel':<16} {'create+ready+teardown':>22} {'CLI run --rm':>13} "
        f"{'ratio':>6} {'action':>8}"
    )
    for (drv, ch), v in sorted(crt.items()):
        c = cli.get(drv)
        ratio = f"{v / c:.2f}" if c else "-"
        cs = f"{c:.1f}" if c else "-"
        print(f"{drv + '/' + ch:<16} {v:22.1f} {cs:>13} {ratio:>6} {act[(drv, ch)]:8.3f}")
    for drv in ("docker", "podman"):
        e, s = act[(drv, "exec")], act[(drv, "shell")]
        print(f"{drv}: exec action P50 {e:.2f} ms, shell {s:.3f} ms, exec/shell {e / s:.0f}x")

    # 2. Docker vs Podman vs stage vs local, T0 and T2, with the report's differences
    for name, trials in (("t0", args.trials), ("t2", 5)):
        out = tmp / f"{name}.jsonl"
        rtax(
            "run",
            name,
            "--driver",
            "local,stage,docker,podman",
            "--channel",
            "exec",
            "--trials",
            str(trials),
            "--warmup",
            "1",
            "-o",
            str(out),
        )
        print(f"\n## {name.upper()} ({trials} trials per cell, exec channel; {out})\n")
        print(rtax("report", str(out), "--format", "markdown").decode().split("## Legend")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
