"""The engine's exec action of `true` with the subreaper's wait in C, in Python, and off,
in one process, interleaved (issue 42): what the subreaper costs an action.

Each variant times the engine's own path, `lifecycle.timed` around `Step.perform` on a
local exec environment, on uvloop; the variants take turns, their order reversed every
other round, so that load falls on all alike. The subreaper is turned on and off in the
process between the variants (`subreaper.enable`/`disable`); `--runs` actions a round
per variant, after 20 unmeasured ones. Prints each variant's median over the rounds of
the per-round P50 (wall) and the loop thread's CPU per action (`time.thread_time_ns`).

    python3 bench/subreaper_wait.py --rounds 10 --runs 300
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402
from rtax_tui.drivers.local import LocalDriver, LocalEnvironment  # noqa: E402
from rtax_tui.drivers.toolkit.workspace import base_env  # noqa: E402

from rtax_tui.engine.lifecycle import timed  # noqa: E402
from rtax_tui.hosts import reaper, spawn, subreaper  # noqa: E402
from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.spec import Step  # noqa: E402

TIMEOUT_S = 30.0


def _environment(ws: str) -> LocalEnvironment:
    """A local exec environment on `ws`, without a trial around it (no EnvSpec)."""
    env = object.__new__(LocalEnvironment)
    env.driver = LocalDriver(LocalHost(), {})
    env.channel = "exec"
    env.workspace = ws
    env.env = base_env(ws, {}, "/usr/local/bin:/usr/bin:/bin")
    env.procs = []
    return env


async def _run(rounds: int, runs: int) -> dict[str, tuple[list[float], list[float]]]:
    ws = tempfile.mkdtemp(prefix="rtax-subreaper-wait-")
    try:
        env = _environment(ws)
        step = Step(("true",))
        compiled = spawn._c.wait_zombie if spawn._c is not None else None

        async def action() -> None:
            act = functools.partial(step.perform, env, TIMEOUT_S)
            _, _, err = await timed("action", act, TIMEOUT_S)
            assert err is None, err

        def on(wait: Callable[[int, int], int | None] | None) -> None:
            subreaper.use_waiter(wait)
            assert subreaper.enable()

        setups: dict[str, Callable[[], None]] = {"wait in C": lambda: on(compiled)}
        if compiled is None:
            del setups["wait in C"]
        setups["wait in Python"] = lambda: on(None)
        setups["off"] = subreaper.disable
        got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in setups}
        for r in range(rounds):
            for name in list(setups) if r % 2 == 0 else list(reversed(setups)):
                setups[name]()
                await asyncio.sleep(0.05)
                walls, cpus = await _timed_runs(action, runs)
                got[name][0].append(statistics.median(walls) / 1e3)
                got[name][1].append(statistics.mean(cpus) / 1e3)
        subreaper.disable()
        subreaper.use_waiter(compiled)
        return got
    finally:
        shutil.rmtree(ws, ignore_errors=True)


async def _timed_runs(fn: Callable[[], Awaitable[None]], runs: int) -> tuple[list[int], list[int]]:
    for _ in range(20):
        await fn()
    walls, cpus = [], []
    for _ in range(runs):
        t, c = time.monotonic_ns(), time.thread_time_ns()
        await fn()
        cpus.append(time.thread_time_ns() - c)
        walls.append(time.monotonic_ns() - t)
    return walls, cpus


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    reaper.start()  # as in a run: each action registers its process group
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            got = runner.run(_run(args.rounds, args.runs))
    finally:
        reaper.stop()
    for name, (walls, cpus) in got.items():
        rounds = " ".join(f"{w:.0f}" for w in walls)
        print(
            f"{name:15s} P50 {statistics.median(walls):6.1f} us (rounds {rounds}); "
            f"loop thread CPU {statistics.median(cpus):5.1f} us an action"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
