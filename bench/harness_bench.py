"""The harness at the limit: rtax's local exec of `true` against `hyperfine -N`, and where
the microseconds between them go. Prints measured figures; asserts nothing.

    python3 bench/harness_bench.py [--rounds 3] [--runs 2000] [--trials 20] [--actions 100]
                                   [--loops asyncio,uvloop]

Per round, in this order: `hyperfine -N --output=pipe true` (before), then rtax's own
figure (one `rtax run`: local, exec, `true` x ACTIONS per trial, the engine's action
P50), then the layers under it, each `true` timed with time.monotonic_ns() in this
process, then hyperfine again (after):

- `posix_spawn`: os.posix_spawn + os.waitpid, stdout to /dev/null: the floor of a
  spawn from Python (glibc's posix_spawn is clone(CLONE_VM|CLONE_VFORK) + exec);
- `Popen`: subprocess.Popen with rtax's arguments (pipe for stdout+stderr, own
  session, cwd, env), read to EOF, wait: vfork too, plus subprocess's Python (what the
  exec path used before);
- `rtax spawn`: rtax's own posix_spawn (hosts/spawn.py, in C where the install built
  `_spawnc`, else through ctypes: pipe for stdout+stderr, cwd, own session, other
  descriptors closed), read to EOF, waitpid, blocking: the spawn of the exec path
  without the event loop; with the C helper, also `rtax spawn ctypes` (its fallback);
- `host.run`: LocalHost.run(merge_stderr=True) in an event loop: that spawn, the pipe
  in the loop (add_reader), the exit status (a pidfd if it is not there at EOF); with
  the C helper, also `host.run LOOP ctypes`;
- `engine`: the `rtax run` figure: host.run plus the driver, the lifecycle's timing
  and the reaper's two registrations (the event's writing falls between actions).

The two layers in an event loop (`host.run`, `engine`) are taken on each loop of
`--loops` (engine.evloop: `RTAX_LOOP` for the engine's process), alternating their order
from round to round, so that each loop's figures are interleaved with the other's and with
hyperfine's. The machine may be loaded (the 1-minute load is printed); medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRUE = shutil.which("true") or "/bin/true"


def hyperfine(runs: int, command: str = "true") -> float:
    """hyperfine's median ms of `command` (no shell: -N; its output to a pipe)."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        subprocess.run(
            ["hyperfine", "-N", "--output=pipe", "--warmup", "20", "--runs", str(runs),
             "--export-json", str(out), command],
            capture_output=True, check=True, timeout=600,
        )  # fmt: skip
        return float(json.loads(out.read_text())["results"][0]["median"]) * 1000
    finally:
        out.unlink()


def engine(
    trials: int, actions: int, loop: str, pythonpath: str | None = None, **env_extra: str
) -> float:
    """The engine's action P50 ms of `true` (one `rtax run`, local exec); `pythonpath`: run
    another checkout's rtax (its directory, with rtax_tui/drivers linked to drivers/);
    `env_extra`: more of the run's environment (RTAX_SUBREAPER="0", RTAX_SPAWN="ctypes")."""
    tmp = Path(tempfile.mkdtemp(prefix="rtax-harness-"))
    try:
        steps = ", ".join(['{argv = ["true"]}'] * actions)
        prof = tmp / "p.toml"
        prof.write_text(
            f'[run]\ntrials = {trials}\nwarmup = 2\ndrivers = ["local"]\n'
            f'workloads = ["truex"]\nchannels = ["exec"]\n'
            f"[workloads.truex]\nsteps = [{steps}]\n"
        )
        rec = tmp / "r.jsonl"
        env = {**os.environ, "RTAX_LOOP": loop, **env_extra}
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec), "--quiet"],
            capture_output=True, check=True, timeout=1800, env=env,
        )  # fmt: skip
        header = json.loads(rec.read_text().split("\n", 1)[0])
        assert header.get("loop", "asyncio").split()[0] == loop, header.get("loop")
        warm = set()
        durs = []
        for line in rec.read_text().splitlines():
            e = json.loads(line)
            if e["type"] == "trial_start" and e["warmup"]:
                warm.add(e["trial"])
            elif e["type"] == "action" and e["trial"] not in warm:
                durs.append(e["dur_ns"])
        return statistics.median(durs) / 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _p50(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(20):
        fn()
    durs = []
    for _ in range(runs):
        t = time.monotonic_ns()
        fn()
        durs.append(time.monotonic_ns() - t)
    return statistics.median(durs) / 1e6


def _on(loop: str, main):  # type: ignore[no-untyped-def]
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


def layers(runs: int, loops: list[str]) -> dict[str, float]:
    ws = tempfile.mkdtemp(prefix="rtax-harness-ws-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": ws, "LANG": "C.UTF-8"}
    devnull = os.open(os.devnull, os.O_WRONLY)

    def spawn() -> None:
        pid = os.posix_spawn(TRUE, [TRUE], env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        os.waitpid(pid, 0)

    def popen() -> None:
        p = subprocess.Popen(
            [TRUE], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=ws, env=env, start_new_session=True,
        )  # fmt: skip
        assert p.stdout is not None
        p.stdout.read()
        p.stdout.close()
        p.wait()

    def rtax_spawn() -> None:
        from rtax_tui.hosts.spawn import spawn_to_pipe

        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = spawn_to_pipe([TRUE], w, cwd=ws, env=env)
        finally:
            os.close(w)
        while os.read(r, 1 << 16):
            pass
        os.close(r)
        os.waitpid(pid, 0)

    from rtax_tui.hosts import spawn as spawn_mod

    out = {"posix_spawn": _p50(spawn, runs), "Popen": _p50(popen, runs)}
    out["rtax spawn"] = _p50(rtax_spawn, runs)
    compiled = spawn_mod._c
    if compiled is not None:  # the compiled spawn's ctypes fallback beside it
        spawn_mod._c = None
        try:
            out["rtax spawn ctypes"] = _p50(rtax_spawn, runs)
        finally:
            spawn_mod._c = compiled

    async def host_run() -> float:
        from rtax_tui.hosts.local import LocalHost

        host = LocalHost()
        for _ in range(20):
            await host.run([TRUE], cwd=ws, env=env, merge_stderr=True)
        durs = []
        for _ in range(runs):
            t = time.monotonic_ns()
            await host.run([TRUE], cwd=ws, env=env, merge_stderr=True)
            durs.append(time.monotonic_ns() - t)
        return statistics.median(durs) / 1e6

    for loop in loops:
        out[f"host.run {loop}"] = _on(loop, host_run())
        if compiled is not None:
            spawn_mod._c = None
            try:
                out[f"host.run {loop} ctypes"] = _on(loop, host_run())
            finally:
                spawn_mod._c = compiled
    os.close(devnull)
    shutil.rmtree(ws, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--actions", type=int, default=100)
    ap.add_argument("--loops", default="asyncio,uvloop", help="comma-separated: asyncio, uvloop")
    args = ap.parse_args()
    loops = args.loops.split(",")
    if not shutil.which("hyperfine"):
        print("hyperfine is not installed (apt-get install hyperfine)", file=sys.stderr)
        return 2
    rows: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = loops if r % 2 == 0 else loops[::-1]
        got = {"hyperfine (before)": hyperfine(args.runs)}
        for loop in order:
            got[f"engine {loop}"] = engine(args.trials, args.actions, loop)
        got.update(layers(args.runs, order))
        got["hyperfine (after)"] = hyperfine(args.runs)
        loads.append(os.getloadavg()[0])
        hf = (got["hyperfine (before)"] + got["hyperfine (after)"]) / 2
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {v * 1000:.0f} us" for k, v in got.items())
            + "; engine / hyperfine "
            + ", ".join(f"{lp} {got[f'engine {lp}'] / hf:.2f}x" for lp in loops),
            flush=True,
        )
        for k, v in got.items():
            rows.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in rows.items()}
    hf = (med["hyperfine (before)"] + med["hyperfine (after)"]) / 2
    print(
        f"\nmedians over {args.rounds} rounds ({args.runs} runs each; engine: {args.trials} "
        f"trials x {args.actions} actions); 1-minute load {min(loads):.1f}-{max(loads):.1f} "
        "on 2 cores"
    )
    keys = ["hyperfine (before)", "hyperfine (after)", "posix_spawn", "Popen", "rtax spawn"]
    keys += [f"{k} {lp}" for k in ("host.run", "engine") for lp in loops]
    for k in keys:
        print(f"  {k:<20} {med[k] * 1000:7.0f} us   {med[k] / hf:5.2f}x hyperfine")
    for lp in loops:
        steps = [("rtax spawn", f"host.run {lp}"), (f"host.run {lp}", f"engine {lp}")]
        for a, b in [("posix_spawn", "rtax spawn"), *steps]:
            print(f"  {a} -> {b}: {(med[b] - med[a]) * 1000:+.0f} us")
    # the ratio per round (each engine against that round's own hyperfine), medians
    for lp in loops:
        ratios = [
            e / ((a + b) / 2)
            for e, a, b in zip(
                rows[f"engine {lp}"], rows["hyperfine (before)"], rows["hyperfine (after)"],
                strict=True,
            )
        ]  # fmt: skip
        print(f"  engine {lp} / hyperfine, per round: " + ", ".join(f"{x:.2f}x" for x in ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
