"""A driver's own latency, with no engine around it: create, ready, one `true` action and
teardown per environment, then `true` actions back to back in one environment and spaced
100 ms apart (as an agent's steps are, with the model's time between them: on cgroup v1
the first migration into a cgroup after a quiet spell waits for RCU). Medians per
channel, timed here with `time.monotonic_ns()` around the driver's own calls; the engine
adds its scheduling and recording on top (bench/engine_bench.py measures that part).

Prints measured figures; asserts nothing. Needs what the driver needs (root and cgroups
for stage; dockerd or podman's service and the image, `rtax images build --driver D`).

    python3 bench/driver_latency.py [--driver stage] [--trials 30] [--actions 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

from rtax_tui.drivers import get_driver

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

TRUE = Step(("true",))


def _ms(xs: list[int]) -> str:
    return f"{statistics.median(xs) / 1e6:.2f}" if xs else "-"


async def measure(name: str, trials: int, actions: int) -> list[str]:
    drv = get_driver(name, LocalHost())
    problems = await drv.check()
    if problems:
        raise SystemExit(f"driver_latency: {name} is not usable here: {problems[0]}")
    label = f"rtaxbench{os.getpid()}"
    lines = []
    for channel in drv.channels:
        spec = EnvSpec(
            cell=Cell("local", name, "t", channel),
            workload=Workload("t", ()),
            limits=Limits(cpus=1, memory_mib=256, pids=128),
            label=label,
        )
        ph: dict[str, list[int]] = {"create": [], "ready": [], "true": [], "teardown": []}
        for _ in range(trials):
            env = drv.environment(spec)
            t = [time.monotonic_ns()]
            try:
                await env.create()
                t.append(time.monotonic_ns())
                await env.ready()
                t.append(time.monotonic_ns())
                await env.action(TRUE, 30)
                t.append(time.monotonic_ns())
            finally:
                await env.teardown()
            t.append(time.monotonic_ns())
            if len(t) == 5:
                for k, a, b in zip(ph, t, t[1:], strict=False):
                    ph[k].append(b - a)
        back: list[int] = []
        spaced: list[int] = []
        env = drv.environment(spec)
        try:
            await env.create()
            await env.ready()
            for _ in range(actions):
                a = time.monotonic_ns()
                await env.action(TRUE, 30)
                back.append(time.monotonic_ns() - a)
            for _ in range(min(actions, 10)):
                await asyncio.sleep(0.1)
                a = time.monotonic_ns()
                await env.action(TRUE, 30)
                spaced.append(time.monotonic_ns() - a)
        finally:
            await env.teardown()
        cr = [a + b for a, b in zip(ph["create"], ph["ready"], strict=True)]
        lines.append(
            f"{name}/{channel}: create {_ms(ph['create'])} ms, ready {_ms(ph['ready'])} ms "
            f"(create+ready {_ms(cr)}), first `true` {_ms(ph['true'])} ms, teardown "
            f"{_ms(ph['teardown'])} ms (medians of {trials}); `true` {_ms(back)} ms back to "
            f"back, {_ms(spaced)} ms 100 ms apart (medians of {len(back)}, {len(spaced)})"
        )
    await drv.cleanup(label)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--driver", default="stage", help="a driver's name (stage)")
    ap.add_argument("--trials", type=int, default=30, help="environments per channel (30)")
    ap.add_argument("--actions", type=int, default=30, help="back-to-back actions (30)")
    args = ap.parse_args()
    for line in asyncio.run(measure(args.driver, args.trials, args.actions)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
