"""`rtax report FILE --format json` end to end over a synthetic recording of 1M events.

The recording looks like a real run: a `run` header, trials over several cells
(T0, T1 and 10-step trajectories, exec and shell channels, three drivers), each
with trial_start, a sub-phase, create, ready, actions, teardown, orchestration and
trial_end; a few warm-up, failed and invalid trials; a run_end at the end.

    python bench/report_1m.py [--events N] [--keep PATH] [--runs N] [--baseline PYTHONPATH]

Each run is a subprocess (interpreter start and imports included); its wall time, CPU
time and peak RSS come from its own rusage (`os.wait4`). Prints the medians, the goal
(issue 26: <= 1.0 s and <= 300 MB) and where one in-process run spends its time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import orjson

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


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one run of `cmd`, from its own rusage (wait4)."""
    t0 = time.monotonic_ns()
    # run from a directory of no checkout: `python -m` puts the working directory first on
    # sys.path, ahead of PYTHONPATH, so a run from a checkout would measure that one's code
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    _, status, ru = os.wait4(proc.pid, 0)
    wall = (time.monotonic_ns() - t0) / 1e9
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def _breakdown(path: str) -> list[tuple[str, float]]:
    """Where one in-process report spends its time (the imports are measured apart)."""
    import orjson as oj

    from rtax_tui.analysis.report import _Collect, _document
    from rtax_tui.model.scan import RecordingScan

    t = [time.monotonic_ns()]
    c = _Collect()
    sc = RecordingScan(path, c.fold)
    for rows in sc:
        c.feed(rows)
    t.append(time.monotonic_ns())
    doc = _document(c, sc.header, sc.torn_tail, 0, None)
    t.append(time.monotonic_ns())
    oj.dumps(doc, option=oj.OPT_INDENT_2)
    t.append(time.monotonic_ns())
    names = ("read + decode + fold", "per-cell columns + statistics", "JSON output")
    return [(n, (t[i + 1] - t[i]) / 1e9) for i, n in enumerate(names)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the recording here and keep it")
    ap.add_argument("--runs", type=int, default=5, help="end-to-end runs (default 5)")
    ap.add_argument(
        "--baseline",
        metavar="PYTHONPATH",
        help="also run the same command with this PYTHONPATH (another checkout), "
        "interleaved with this one, and print the ratio",
    )
    args = ap.parse_args()
    if args.keep:
        path = args.keep
    else:
        fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="rtax-bench-")
        os.close(fd)
        os.unlink(path)
    try:
        if not (args.keep and os.path.exists(path)):
            generate(path, args.events)
        with open(path, "rb") as fh:
            n = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))
        size = os.path.getsize(path)
        cmd = [sys.executable, "-m", "rtax_tui", "report", path, "--format", "json"]
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        envs = {"this": {**os.environ, "PYTHONPATH": here}}  # this checkout's code
        if args.baseline:
            envs["baseline"] = {**os.environ, "PYTHONPATH": args.baseline}
        runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in envs}
        bare = []
        imports = []
        imp = [sys.executable, "-c", "import rtax_tui.commands.cli, rtax_tui.analysis.report, "
               "rtax_tui.model.scan, rtax_tui.render.reporting"]  # fmt: skip
        for _ in range(args.runs):
            for label, env in envs.items():
                runs[label].append(_run(cmd, env))
            bare.append(_run([sys.executable, "-c", "pass"], envs["this"])[0])
            imports.append(_run(imp, envs["this"])[0])
        parts = _breakdown(path)
    finally:
        if not args.keep and os.path.exists(path):
            os.unlink(path)
    print(f"recording:       {n:,} lines ({size / 1e6:.1f} MB)")
    print(f"command:         rtax report FILE --format json  ({args.runs} runs each, medians)")
    for label, got in runs.items():
        wall = statistics.median(r[0] for r in got)
        cpu = statistics.median(r[1] for r in got)
        rss = statistics.median(r[2] for r in got)
        print(f"{label + ':':<17}{wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak RSS"
              f"  (walls {', '.join(f'{r[0]:.2f}' for r in got)})")  # fmt: skip
    if args.baseline:
        pairs = zip(runs["this"], runs["baseline"], strict=True)
        ratio = statistics.median(a[0] / b[0] for a, b in pairs)
        print(f"this / baseline: {ratio:.2f} (median of the interleaved pairs' wall ratios)")
    bare_s, imports_s = statistics.median(bare), statistics.median(imports)
    print(f"python -c pass:  {bare_s:.3f} s; with the report's imports {imports_s:.3f} s")
    for name, secs in parts:
        print(f"  {name + ':':<31}{secs:.3f} s (in process, one run)")
    wall = statistics.median(r[0] for r in runs["this"])
    rss = statistics.median(r[2] for r in runs["this"])
    met = "met" if wall <= 1.0 and rss <= 300 else "NOT met"
    print(f"goal:            <= 1.0 s and <= 300 MB end to end: {met}")


if __name__ == "__main__":
    main()
