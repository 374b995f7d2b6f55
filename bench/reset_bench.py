"""Warm-pool resets (issue 34): what a pool's reset costs now that a clean reset replaces
the environment (stage: a new cgroup, workspace and sandbox) instead of cleaning it, and
what a trial waits for when it asks right after the last one released (back-to-back:
the reset's latency as a trial sees it). Prints measured figures; asserts nothing.

For each driver and each reset it offers (clean falls back to recreate where it is not
offered: the reason is printed), a real pool of one (engine.pool) serves `--trials`
trials of one `true` each, one after the other:
- acquire P50: the trial's wait for a ready environment (back-to-back, so the reset or
  the replacement's create is in it);
- reset P50 (clean) or create and teardown P50 (recreate), from the pool's own events.

`--before REV` runs the same measurement on the code of git revision REV too (a copy
made with `git archive`, imported instead of this tree), for the old cleaning reset.

Needs root (stage) and, for docker/podman, the daemons and images
(`rtax images build --driver docker|podman`); docker and podman run with
`read_only = true`, the setting under which they used to offer `clean`.

    python3 bench/reset_bench.py [--trials 30] [--drivers stage,docker,podman]
                                 [--channel exec] [--before main]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _p50(xs: list[int]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[len(s) // 2] / 1e6


async def _measure(driver: str, channel: str, reset: str, trials: int) -> dict[str, Any]:
    from rtax_tui.drivers import get_driver

    from rtax_tui.engine.pool import EnvPool, effective_reset
    from rtax_tui.engine.poolspec import PoolSpec
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.events import Emitter
    from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Timeouts, Workload

    opts: dict[str, Any] = {} if driver == "stage" else {"read_only": True}
    drv = get_driver(driver, LocalHost(), opts)
    got, why = effective_reset(drv, channel, reset)
    cell = Cell("local", driver, "reset-bench", channel, "pool")
    step = Step(("true",))
    spec = EnvSpec(
        cell=cell,
        workload=Workload("reset-bench", (step,)),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        label=f"rb-{os.urandom(3).hex()}",
    )
    evs: list[dict[str, Any]] = []
    pool = EnvPool(
        cell,
        drv,
        spec,
        PoolSpec(size=1, reset=reset, refill="eager"),
        Timeouts(create=120, ready=120, teardown=60),
        Emitter([evs.append]),
    )
    pool.start()
    acquire: list[int] = []
    try:
        pe, _ = await pool.acquire()  # the first create: not counted
        pool.release(pe, True)
        for _ in range(trials):
            t0 = time.monotonic_ns()
            pe, _ = await pool.acquire()
            acquire.append(time.monotonic_ns() - t0)
            res = await pe.env.action(step, 60)
            pool.release(pe, res.rc == 0)
    finally:
        await pool.close()

    def durs(op: str) -> list[int]:
        return [e["dur_ns"] for e in evs if e["op"] == op and e["ok"]]

    return {
        "driver": driver,
        "asked": reset,
        "reset": got,
        "why": why,
        "acquire_p50_ms": _p50(acquire),
        "reset_p50_ms": _p50(durs("reset")),
        "create_p50_ms": _p50(durs("create")[1:]),
        "teardown_p50_ms": _p50(durs("teardown")),
        "failed": sum(1 for e in evs if not e["ok"] and "closed" not in str(e["error"])),
        # a create the closing pool interrupts is not a failure of the reset
        "errors": sorted(
            {str(e["error"])[:200] for e in evs if not e["ok"] and "closed" not in str(e["error"])}
        ),
    }


def _run_here(drivers: list[str], channel: str, trials: int) -> list[dict[str, Any]]:
    out = []
    for d in drivers:
        for reset in ("clean", "recreate"):
            out.append(asyncio.run(_measure(d, channel, reset, trials)))
    return out


def _run_at(rev: str, drivers: list[str], channel: str, trials: int) -> list[dict[str, Any]]:
    """The same measurement on revision `rev`'s code (a `git archive` copy)."""
    with tempfile.TemporaryDirectory(prefix="rtax-reset-bench-") as tmp:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        # the drivers live beside the package (pyproject's package-dir): link them in, so
        # that the copy's are imported, not this tree's through the editable install
        os.symlink("../drivers", os.path.join(tmp, "rtax_tui", "drivers"))
        env = dict(os.environ, PYTHONPATH=tmp)
        argv = [sys.executable, str(Path(__file__).resolve()), "--json", "--trials", str(trials)]
        argv += ["--drivers", ",".join(drivers), "--channel", channel]
        res = subprocess.run(argv, env=env, cwd=tmp, capture_output=True)
        if res.returncode != 0:
            sys.exit(f"reset_bench: at {rev}: {res.stderr.decode(errors='replace')[-800:]}")
        return list(json.loads(res.stdout))


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(
        "| driver | asked | reset used | acquire P50 ms | reset P50 ms | create P50 ms "
        "| teardown P50 ms | failed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['driver']} | {r['asked']} | {r['reset']} | {_fmt(r['acquire_p50_ms'])} "
            f"| {_fmt(r['reset_p50_ms'])} | {_fmt(r['create_p50_ms'])} "
            f"| {_fmt(r['teardown_p50_ms'])} | {r['failed']} |"
        )
    for r in rows:
        if r["why"]:
            print(f"- {r['driver']}: {r['why']}")
        for err in r.get("errors", []):
            print(f"- {r['driver']} {r['reset']} failed: {err}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--drivers", default="stage,docker,podman")
    ap.add_argument("--channel", default="exec", choices=("exec", "shell"))
    ap.add_argument("--before", metavar="REV", help="also measure git revision REV's code")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON only")
    a = ap.parse_args()
    drivers = [d for d in a.drivers.split(",") if d]
    rows = _run_here(drivers, a.channel, a.trials)
    if a.json:
        print(json.dumps(rows))
        return
    print(f"reset bench: {a.trials} back-to-back trials a pool, channel {a.channel}")
    if a.before:
        _table(f"before ({a.before}):", _run_at(a.before, drivers, a.channel, a.trials))
    _table("now:", rows)


if __name__ == "__main__":
    main()
