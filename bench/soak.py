"""A soak: one long stage run (an hour by default), sampled every minute, to see that rtax
holds nothing it should have let go: its memory (RSS), its open descriptors and threads,
and what the run keeps on the machine (workspaces, cgroups, sandbox processes) while the
trials go on. At the end the run is stopped with SIGINT (as Ctrl-C would) and what it left
is counted.

Prints a row a minute and a verdict on the growth from the first sample after the warm-up
(`--settle` minutes) to the last; asserts nothing (figures in bench/README.md).

Needs root and cgroups (stage).

    python3 bench/soak.py [--minutes 60] [--every 60] [--settle 5] [--concurrency 2]
                          [--pace S]

`--pace S` adds a step `sleep S` to each trial: a soak that leaves the machine's CPU to
other work (the count of trials, not their speed, is what a soak needs).
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rtax_tui.hosts import names
from rtax_tui.model.recording import read_recording

PROFILE = """\
description = "soak: stage, both channels, cold and pooled"
[run]
drivers = ["stage"]
workloads = ["soak"]
channels = ["exec", "shell"]
modes = ["cold", "pool"]
trials = 100000
warmup = 0
concurrency = {concurrency}
[pool]
size = 2
reset = "clean"
[workloads.soak]
description = "files, a pipe, output, a failing step: what a test-running agent does"
steps = [
  {{ argv = ["sh", "-c", "mkdir -p src && for i in 1 2 3 4 5; do echo $i > src/f$i; done"] }},
  {{ argv = ["sh", "-c", "cat src/* | sort | uniq -c | wc -l"] }},
  {{ argv = ["sh", "-c", "seq 1 2000"] }},
  {{ argv = ["sh", "-c", "ls -la src >/dev/null; exit 3"] }},
  {{ argv = ["true"] }},{pace}
]
"""


def _status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key in ("VmRSS", "Threads"):
                    out[key] = int(val.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _reaper(pid: int) -> int | None:
    """rtax's reaper: the child running `rtax_tui.hosts.reaper`."""
    for c in _children(pid):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                if b"reaper" in f.read():
                    return c
        except OSError:
            continue
    return None


def _held(run_id: str) -> tuple[int, int, int]:
    """(workspaces, cgroups, sandbox processes) of the run on this machine now."""
    ws_prefix, cg = names.workspace_prefix(run_id), names.env_cgroup_prefix(run_id)
    ws = glob.glob(os.path.join(tempfile.gettempdir(), f"{ws_prefix}*"))
    cgs = glob.glob(f"/sys/fs/cgroup/*/rtax/{cg}*") + glob.glob(f"/sys/fs/cgroup/rtax/{cg}*")
    procs = 0
    needle = ws_prefix.encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    procs += needle in f.read()
            except OSError:
                pass
    return len(ws), len(cgs), procs


def _trials(path: Path) -> tuple[int, int]:
    """(trials ended, of them failed), from the recording as it stands."""
    ended = failed = 0
    with open(path, "rb") as f:
        for line in f:
            if b'"type":"trial_end"' in line:
                ended += 1
                failed += b'"ok":false' in line
    return ended, failed


Row = tuple[float, int, float, int, int, float, int]


def _sample(
    args: argparse.Namespace,
    proc: subprocess.Popen[bytes],
    rec: Path,
    run_id: str,
    t0: float,
    end: float,
    rows: list[Row],
) -> None:
    """A row every `--every` seconds until the end or the run's own exit."""
    next_at = t0
    while time.monotonic() < end and proc.poll() is None:
        now = time.monotonic()
        if now >= next_at:
            st = _status(proc.pid)
            rp = _reaper(proc.pid)
            rst = _status(rp) if rp else {}
            done, failed = _trials(rec)
            ws, cg, procs = _held(run_id)
            mins = (now - t0) / 60
            rss = st.get("VmRSS", 0) / 1024
            rrss = rst.get("VmRSS", 0) / 1024
            rows.append((mins, done, rss, st.get("fds", 0), st.get("Threads", 0), rrss,
                         rst.get("fds", 0)))  # fmt: skip
            print(
                f"{mins:6.1f} {done:7d} {failed:6d} {rss:8.1f} {st.get('fds', 0):4d} "
                f"{st.get('Threads', 0):4d} {rrss:10.1f} {rst.get('fds', 0):5d} {ws:3d} {cg:3d} "
                f"{procs:5d}",
                flush=True,
            )
            next_at += args.every
        time.sleep(min(1.0, max(0.0, next_at - time.monotonic())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--settle", type=float, default=5, help="minutes before the baseline")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--pace", type=float, default=0.0, help="a `sleep S` step per trial")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rtax-soak-"))
    prof = tmp / "soak.toml"
    pace = f'\n  {{ argv = ["sleep", "{args.pace:g}"] }},' if args.pace > 0 else ""
    prof.write_text(PROFILE.format(concurrency=args.concurrency, pace=pace))
    rec = tmp / "soak.jsonl"
    cmd = [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(rec)]
    log = open(tmp / "stderr.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    t0 = time.monotonic()
    while not (rec.exists() and b"\n" in rec.read_bytes()[:65536]):
        if proc.poll() is not None:
            print((tmp / "stderr.log").read_text()[-2000:], file=sys.stderr)
            return 1
        time.sleep(0.1)
    run_id = read_recording(rec).header["run_id"]
    print(f"soak: run {run_id}, {args.minutes:g} min, recording {rec}", flush=True)
    print(
        f"{'min':>6} {'trials':>7} {'failed':>6} {'rss MiB':>8} {'fds':>4} {'thr':>4} "
        f"{'reaper MiB':>10} {'r.fds':>5} {'ws':>3} {'cg':>3} {'procs':>5}",
        flush=True,
    )
    rows: list[Row] = []
    end = t0 + args.minutes * 60
    try:
        _sample(args, proc, rec, run_id, t0, end, rows)
    except KeyboardInterrupt:  # Ctrl-C ends the soak early: the run is still stopped below
        print("soak: interrupted: stopping the run", flush=True)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    log.close()
    time.sleep(2)
    left = _held(run_id)
    r = read_recording(rec)
    ended = [e for e in r.events if e["type"] == "trial_end"]
    bad = [e for e in ended if not e["ok"] and e["error"]["kind"] != "interrupted"]
    print(
        f"soak: exit {rc}; {len(ended)} trials, {len(bad)} failed (not counting the ones "
        f"the stop interrupted); after the run: workspaces {left[0]}, cgroups {left[1]}, "
        f"sandbox processes {left[2]}"
    )
    base = [x for x in rows if x[0] >= args.settle]
    if len(base) >= 2:
        a, b = base[0], base[-1]
        print(
            f"soak: minute {a[0]:.0f} -> {b[0]:.0f}: rss {a[2]:.1f} -> {b[2]:.1f} MiB "
            f"({b[2] - a[2]:+.1f}), fds {a[3]} -> {b[3]}, threads {a[4]} -> {b[4]}, "
            f"reaper rss {a[5]:.1f} -> {b[5]:.1f} MiB, reaper fds {a[6]} -> {b[6]}"
        )
    if bad:
        kinds: dict[str, int] = {}
        for e in bad:
            kinds[e["error"]["kind"]] = kinds.get(e["error"]["kind"], 0) + 1
        print(f"soak: failures by kind: {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
