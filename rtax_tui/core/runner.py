"""Turn a profile into a ready Session: drivers checked, workloads and assets resolved.

Everything that can be wrong with a run is found here, before the first trial.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rtax_tui.core.model import RtaxError, Workload
from rtax_tui.core.profile import Profile
from rtax_tui.core.session import Session, Sink, check_drivers_ready
from rtax_tui.drivers import get_driver
from rtax_tui.hosts import LocalHost


def make_host(name: str) -> Any:
    if name == "local":
        return LocalHost()
    raise RtaxError(f"host {name!r}: only `local` is supported so far")


def resolve_workloads(profile: Profile, log: Any = None) -> dict[str, Workload]:
    from rtax_tui.core import assets as assets_mod
    from rtax_tui.core.workloads import builtin_workloads

    paths = assets_mod.prepare(log=log) if profile.needs_assets else None
    table = dict(builtin_workloads(paths))
    table.update(profile.custom_workloads)
    missing = [w for w in profile.workloads if w not in table]
    if missing:
        raise RtaxError(f"workloads not available: {', '.join(missing)}")
    return {w: table[w] for w in profile.workloads}


async def build_session(
    profile: Profile,
    *,
    sinks: list[Sink],
    argv: list[str],
    log: Any = None,
) -> Session:
    hosts = {h: make_host(h) for h in profile.hosts}
    drivers = {
        (h, d): get_driver(d, hosts[h], profile.driver_options.get(d, {}))
        for h in profile.hosts
        for d in profile.drivers
    }
    checks = await asyncio.gather(*(drv.check() for drv in drivers.values()))
    check_drivers_ready({f"{h}/{d}": probs for (h, d), probs in zip(drivers, checks, strict=True)})
    for (h, d), drv in drivers.items():
        for ch in profile.channels:
            if ch not in drv.channels:
                raise RtaxError(f"{h}/{d}: channel {ch!r} is not supported by this driver")
    if profile.capacity is not None:
        from rtax_tui.core.cgroups import Cgroup

        cap = profile.capacity
        if (cap.cpus or cap.memory_mib) and Cgroup.version() is None:
            raise RtaxError(
                "capacity: a CPU or memory budget needs cgroups, and none is mounted here"
            )
    workloads = await asyncio.to_thread(resolve_workloads, profile, log)
    wl = list(workloads.values())
    checks = await asyncio.gather(*(drv.check_workloads(wl) for drv in drivers.values()))
    check_drivers_ready({f"{h}/{d}": probs for (h, d), probs in zip(drivers, checks, strict=True)})
    return Session(profile, sinks=sinks, argv=argv, drivers=drivers, workloads=workloads)
