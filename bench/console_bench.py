"""The console under load, and what it does to the figures it shows.

1. Ingest: a synthetic recording whose events are 100 µs apart is replayed at the
   recorded pace (10,000 events/s) into the real app (Textual's headless driver,
   120x40); printed: events/s sustained, the frame interval (P50/P95 of the redraw
   timer) and the latency of a key press (from the pilot's press to the action
   running), 20 presses.
2. Noise: the same profile (local driver, 20 `true` actions per trial, exec channel)
   run headless and in the console in a real terminal (tmux 120x40), alternated
   A B A B; printed: the action P50 of each run and the console/headless ratio.

    python3 bench/console_bench.py [--events 200000] [--trials 40] [--pairs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtax_tui.analysis.report import build_report  # noqa: E402
from rtax_tui.model.recording import read_recording  # noqa: E402


def synthetic(path: Path, n_events: int, gap_ns: int = 100_000) -> None:
    """A valid recording of 4 cells, trials of create/ready/5 actions/teardown."""
    cells = [("local", d, "t0", c) for d in ("local", "stage") for c in ("exec", "shell")]
    header = {
        "type": "run", "t_ns": 0, "format": "rtax/1", "run_id": "bench", "started_at": "-",
        "seed": 1, "argv": ["bench"], "hosts": {},
        "profile": {"name": "bench", "trials": n_events // 10 // 4, "warmup": 0,
                    "hosts": ["local"], "drivers": ["local", "stage"], "workloads": ["t0"],
                    "channels": ["exec", "shell"], "capacity": None},
    }  # fmt: skip
    lines = [orjson.dumps(header)]
    t = 0
    trial = 0
    import random

    rng = random.Random(1)
    while len(lines) < n_events:
        trial += 1
        h, d, w, c = cells[trial % 4]

        def ev(trial: int = trial, **kw: object) -> None:
            nonlocal t
            t += gap_ns
            lines.append(orjson.dumps({"t_ns": t, "trial": trial, **kw}))

        ev(type="trial_start", cell=f"{h}/{d}/{w}/{c}", host=h, driver=d, workload=w,
           channel=c, warmup=False, batch=None)  # fmt: skip
        for ph in ("create", "ready"):
            ev(type="phase", name=ph, dur_ns=int(rng.lognormvariate(14, 0.5)), ok=True)
        for i in range(5):
            ev(type="action", i=i, dur_ns=int(rng.lognormvariate(13, 0.6)), rc=0, ok=True,
               out_bytes=0)  # fmt: skip
        ev(type="phase", name="teardown", dur_ns=int(rng.lognormvariate(13.5, 0.4)), ok=True)
        ev(type="trial_end", ok=True, valid=True, error=None)
    path.write_bytes(b"\n".join(lines) + b"\n")


async def ingest_bench(n_events: int) -> None:
    from rtax_tui.ui.app import RtaxApp, replay_screen
    from rtax_tui.ui.monitor import MonitorScreen

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "synthetic.jsonl"
        synthetic(path, n_events)
        screen = replay_screen(str(path), 1.0)
        app = RtaxApp(screen)
        presses: list[float] = []
        hit: list[float] = []
        orig = MonitorScreen.action_toggle_log

        def timed(self: MonitorScreen) -> None:
            hit.append(time.monotonic())
            orig(self)

        MonitorScreen.action_toggle_log = timed  # type: ignore[method-assign]
        costs: list[float] = []
        orig_redraw = MonitorScreen.redraw

        def timed_redraw(self: MonitorScreen, force: bool = False) -> None:
            t0 = time.perf_counter()
            orig_redraw(self, force)
            costs.append((time.perf_counter() - t0) * 1000)

        MonitorScreen.redraw = timed_redraw  # type: ignore[method-assign]
        async with app.run_test(size=(120, 40)) as pilot:
            feed = screen.replay
            assert feed is not None
            await asyncio.sleep(1.0)  # settle
            start_pos, start = feed.pos, time.monotonic()
            lags = []
            for _ in range(40):  # 10 s at the recorded pace, a key press every 0.25 s
                await asyncio.sleep(0.25)
                lags.append((feed._clock_ns() - feed.t_ns) / 1e6)
                presses.append(time.monotonic())
                app.simulate_key("l")  # as a terminal's key press arrives
            elapsed = time.monotonic() - start
            fed = feed.pos - start_pos
            frames = list(screen.frame_times)
            feed.set_speed(None)  # then as fast as possible
            max_pos, max_start = feed.pos, time.monotonic()
            while not feed.done:
                await asyncio.sleep(0.05)
            max_rate = (feed.pos - max_pos) / (time.monotonic() - max_start)
            await pilot.press("q")
    lat = sorted((h - p) * 1000 for p, h in zip(presses, hit, strict=False))
    gaps = sorted((b - a) * 1000 for a, b in zip(frames, frames[1:], strict=False))
    print("## Ingest (replay at the recorded pace: 10,000 events/s offered)")
    print(f"events fed: {fed} in {elapsed:.2f} s = {fed / elapsed:,.0f} events/s")
    lags.sort()
    print(f"behind the recorded pace: P50 {statistics.median(lags):.1f} ms, max {lags[-1]:.1f} ms")
    print(f"as fast as possible (speed max): {max_rate:,.0f} events/s")
    print(
        f"frame interval: P50 {statistics.median(gaps):.1f} ms, "
        f"P95 {gaps[int(len(gaps) * 0.95)]:.1f} ms over {len(gaps)} frames"
    )
    costs.sort()
    print(
        f"redraw (the timer's work, layout and paint excluded): P50 "
        f"{statistics.median(costs):.1f} ms, P95 {costs[int(len(costs) * 0.95)]:.1f} ms"
    )
    print(
        f"key press to action: P50 {statistics.median(lat):.1f} ms, max {lat[-1]:.1f} ms "
        f"({len(lat)} presses)"
    )


def _profile(d: Path, trials: int) -> Path:
    p = d / "noise.toml"
    p.write_text(
        f'[run]\nseed = 1\ntrials = {trials}\nwarmup = 2\ndrivers = ["local"]\n'
        'workloads = ["w"]\nchannels = ["exec"]\n[workloads.w]\n'
        "steps = [" + ", ".join(['{argv = ["true"]}'] * 20) + "]\n"
    )
    return p


def _action_p50(path: Path) -> float:
    rep = build_report(read_recording(path))
    return rep["cells"][0]["phases"]["action"]["p50_ms"]


def headless_run(prof: Path, out: Path) -> float:
    subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out),
         "--quiet"], check=True, capture_output=True,
    )  # fmt: skip
    return _action_p50(out)


def console_run(prof: Path, out: Path) -> float:
    sock = f"rtax-bench-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cmd = f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m rtax_tui run " \
          f"{shlex.quote(str(prof))} -o {shlex.quote(str(out))}; sleep 5"  # fmt: skip
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "120", "-y", "40", cmd],
                   check=True, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if out.exists() and b'"run_end"' in out.read_bytes()[-300:]:
                break
            time.sleep(0.5)
        time.sleep(0.5)
        subprocess.run([*tmux, "send-keys", "-t", "b", "q"], check=True)
        time.sleep(1)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    return _action_p50(out)


def noise_bench(trials: int, pairs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        prof = _profile(Path(d), trials)
        rows = []
        for i in range(pairs):
            h = headless_run(prof, Path(d) / f"h{i}.jsonl")
            c = console_run(prof, Path(d) / f"c{i}.jsonl")
            rows.append((h, c))
    print(f"\n## Noise: local exec `true` action P50, {trials} trials x 20 actions per run")
    for i, (h, c) in enumerate(rows, 1):
        print(f"pair {i}: headless {h:.3f} ms, console {c:.3f} ms, console/headless {c / h:.3f}")
    hs, cs = [r[0] for r in rows], [r[1] for r in rows]
    ratio = statistics.median(cs) / statistics.median(hs)
    print(f"median of runs: headless {statistics.median(hs):.3f} ms, console "
          f"{statistics.median(cs):.3f} ms, ratio {ratio:.3f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--skip-noise", action="store_true")
    args = ap.parse_args()
    asyncio.run(ingest_bench(args.events))
    if not args.skip_noise:
        noise_bench(args.trials, args.pairs)


if __name__ == "__main__":
    main()
