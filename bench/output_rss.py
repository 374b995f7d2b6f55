"""rtax's own peak memory while one step prints a lot (issue 19): one environment of a
driver, a step `head -c SIZE /dev/zero; echo done`, then `echo ok`; prints the step's
kept and dropped bytes and rtax's peak RSS (VmHWM of this process) before and after.
Without a bound on what rtax keeps of a step's output, the peak grows with SIZE.

Prints measured figures; asserts nothing. Needs what the driver needs (root and cgroups
for stage; dockerd or podman's service and the image).

    python3 bench/output_rss.py [--driver stage] [--channel exec] [--size 1G]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from rtax_tui.drivers import get_driver

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload


def _bytes(size: str) -> int:
    """`1G`, `512M`, `64K` or a plain number of bytes (busybox's head takes no suffix)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
    return int(size[:-1] if mult > 1 else size) * mult


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


async def measure(name: str, channel: str, size: str) -> str:
    drv = get_driver(name, LocalHost())
    problems = await drv.check()
    if problems:
        raise SystemExit(f"output_rss: {name} is not usable here: {problems[0]}")
    spec = EnvSpec(
        cell=Cell("local", name, "t", channel),
        workload=Workload("t", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        label=f"rtaxbench{os.getpid()}",
    )
    env = drv.environment(spec)
    try:
        await env.create()
        await env.ready()
        before = _status_kib("VmHWM")
        t = time.monotonic()
        res = await env.action(Step(("sh", "-c", f"head -c {_bytes(size)} /dev/zero; exit 3")), 600)
        secs = time.monotonic() - t
        after = _status_kib("VmHWM")
        nxt = await env.action(Step(("echo", "ok")), 60)
    finally:
        await env.teardown()
    await drv.cleanup(spec.label)
    dropped = getattr(res, "dropped", 0)
    return (
        f"{name}/{channel}: step of {size} output: rc {res.rc}, kept {len(res.output)} B, "
        f"dropped {dropped} B, {secs:.1f} s; rtax peak RSS {before / 1024:.0f} MiB before "
        f"the step, {after / 1024:.0f} MiB after; next step rc {nxt.rc} {nxt.output!r}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--driver", default="stage", help="a driver's name (stage)")
    ap.add_argument("--channel", default="exec", help="exec or shell (exec)")
    ap.add_argument(
        "--size", default="1G", help="the step's output, as head -c takes it (1G; K, M, G suffixes)"
    )
    args = ap.parse_args()
    print(asyncio.run(measure(args.driver, args.channel, args.size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
