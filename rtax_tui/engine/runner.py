"""Turn a profile into an open Session: under the reaper, its hosts connected, its
drivers made (for `rtax run`: checked, workloads and assets resolved).

Every command that acts on hosts opens its session here (`opened`): `rtax run`,
`rtax probe`, `rtax cleanup`. So each gets the same hosts (connected, their network
cost measured, the unreachable left out saying why), the same reaper (a `kill -9` at
any moment leaves nothing), and, when it records, the same header and clock.
Everything that can be wrong with a run is found here, before the first trial.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from rtax_tui.drivers import Driver, Problem, get_driver
from rtax_tui.engine import raynodes
from rtax_tui.engine.profile import Profile
from rtax_tui.engine.profile_schema import HOST
from rtax_tui.engine.session import Session, Sink, check_drivers_ready
from rtax_tui.hosts import Host, LocalHost, reaper, subreaper
from rtax_tui.model.spec import RtaxError, Workload


def make_host(name: str, profile: Profile | None = None) -> Host:
    """`local`, an `ssh://[user@]host[:port]` URL, or a `[hosts.NAME]` table's name."""
    if name == "local":
        return LocalHost()
    from rtax_tui.hosts.ssh import SSHHost, SSHTarget, parse_ssh_url

    opts = dict(profile.ssh_options) if profile else {}
    tables = profile.host_tables if profile else {}
    if name in tables:
        t = dict(tables[name])
        for key in ("identity", "known_hosts"):
            t.setdefault(key, opts.get(key))
        target = SSHTarget(
            name=name,
            address=t["address"],
            user=t.get("user"),
            port=t.get("port", HOST["port"].default),
            identity=t.get("identity"),
            known_hosts=t.get("known_hosts"),
            jump=t.get("jump"),
            concurrency=t.get("concurrency"),
            trust_new=bool(opts.get("trust_new")),
        )
        return SSHHost(target)
    if name.startswith("ssh://"):
        return SSHHost(
            parse_ssh_url(
                name,
                identity=opts.get("identity"),
                known_hosts=opts.get("known_hosts"),
                trust_new=bool(opts.get("trust_new")),
            )
        )
    raise RtaxError(f"host {name!r}: expected local, ssh://[user@]host[:port] or a [hosts] name")


async def connect_hosts(
    profile: Profile, log: Any = None, *, need_one: bool = True
) -> tuple[dict[str, Host], dict[str, dict[str, Any]]]:
    """Every host of the profile by its name, connected, its network cost measured.

    A remote host that cannot be reached (refused, unknown key, login refused) is
    reported through `log` and left out; the second result says why, per name.
    `need_one`: none reached is an error (else what says so is the second result).
    """
    made: list[Host] = []
    for name in profile.hosts:
        spec = raynodes.spec_of(name, profile.host_tables)
        if spec is None:
            made.append(make_host(name, profile))
            continue
        raynodes.join(spec)  # never starts a cluster; a non-loopback one must be trusted
        made.extend(raynodes.node_hosts(spec, profile))

    async def up(host: Host) -> None:
        await host.connect()
        await host.measure_rtt()

    results = await asyncio.gather(*(up(h) for h in made), return_exceptions=True)
    hosts: dict[str, Host] = {}
    left_out: dict[str, dict[str, Any]] = {}
    for host, res in zip(made, results, strict=True):
        if isinstance(res, BaseException):
            why = str(res) if isinstance(res, RtaxError) else f"{type(res).__name__}: {res}"
            left_out[host.name] = {"unreachable": why}
            if log is not None:
                log(f"left out: {why}")
            await host.close()
            continue
        if host.name in hosts:
            raise RtaxError(f"host {host.name} is named twice")
        hosts[host.name] = host
    if not hosts and need_one:
        raise RtaxError(
            "no host can be reached: " + "; ".join(v["unreachable"] for v in left_out.values())
        )
    return hosts, left_out


async def remote_aware_check(host_name: str, drv: Driver) -> list[Problem]:
    """The driver's check; on a remote host, first whether the driver can run there at all
    (on a Ray node: the node's engine checks its own driver, on the node)."""
    if isinstance(drv.host, raynodes.RayNodeHost):
        return [Problem(r, f) for r, f in await drv.host.check_driver(drv.name)]
    if host_name != "local" and not drv.runs_remote:
        return [
            Problem(
                f"{drv.name} runs only on the local host (it uses the controller's own "
                "files, sockets or devices)",
                "run it on `local`, or use a driver that runs over SSH (local, stage)",
            )
        ]
    problems: list[Problem] = await drv.check()
    return problems


def refuse_ray_nodes(session: Session, what: str) -> None:
    """`what` does not reach Ray nodes yet (only `rtax run` and `rtax doctor` do)."""
    nodes = raynodes.nodes_of(session.hosts)
    if nodes:
        raise RtaxError(
            f"{what} does not run on Ray nodes yet ({', '.join(nodes)}); each node's own "
            "reaper removes what a run left there"
        )


async def _check_workloads(drv: Driver, wl: list[Workload]) -> list[Problem]:
    if isinstance(drv.host, raynodes.RayNodeHost):
        got = await drv.host.check_workloads(drv.name, wl)
        return [Problem(r, f) for r, f in got]
    problems: list[Problem] = await drv.check_workloads(wl)
    return problems


def resolve_workloads(profile: Profile, log: Any = None) -> dict[str, Workload]:
    from rtax_tui.drivers.toolkit import assets as assets_mod
    from rtax_tui.engine.traj.workload import with_sources
    from rtax_tui.engine.workloads import builtin_workloads

    paths = assets_mod.prepare(log=log) if profile.needs_assets else None
    cap = profile.capacity
    if cap is not None:  # the holder outlives neither the batch's deadline nor its release
        hold_s = cap.deadline_s + profile.timeouts.action + profile.timeouts.teardown
        table = dict(builtin_workloads(paths, touch_mib=cap.touch_mib, hold_s=hold_s))
    else:
        table = dict(builtin_workloads(paths))
    table.update(profile.custom_workloads)
    missing = [w for w in profile.workloads if w not in table]
    if missing:
        raise RtaxError(f"workloads not available: {', '.join(missing)}")
    return {w: with_sources(table[w], log) for w in profile.workloads}


@asynccontextmanager
async def opened(
    profile: Profile,
    *,
    sinks: list[Sink] | None = None,
    argv: list[str] | None = None,
    log: Any = None,
    ready: bool = True,
) -> AsyncIterator[Session]:
    """The session of one run of `profile`, open for the time of the block.

    First the reaper (hosts/reaper.py; the subreaper reaps orphans here at once,
    hosts/subreaper.py): connecting a host, checking a driver start processes too (the
    KVM probe's QEMU, a VM snapshot), and a kill -9 at any moment must leave none.
    Then every host connected (`connect_hosts`) and the profile's drivers made on each.
    `ready` (`rtax run`): every driver checked and the workloads resolved, a driver that
    cannot run here an error before any trial (`_build`). Else (`rtax probe`, which
    measures a driver that cannot run as n/a; `rtax cleanup`) every driver that can be
    made, unchecked, and no host reached is no error. On leaving, every host is closed
    (a remote host's own reaper then ends what is left there), then the reaper.
    """
    from rtax_tui.engine.traj.workload import refuse_unisolated

    subreaper.enable_from_env()
    reaper.start()
    try:
        if ready:
            custom = profile.custom_workloads
            refuse_unisolated(
                profile.drivers,
                {w: custom[w] for w in profile.workloads if w in custom},
                profile.driver_options,
            )
        hosts, left_out = await connect_hosts(profile, log, need_one=ready)
        try:
            if ready:
                session = await _build(
                    profile, hosts, left_out, sinks=sinks or [], argv=argv or [], log=log
                )
            else:
                session = _made(profile, hosts, left_out, sinks=sinks or [], argv=argv or [])
            try:
                yield session
            finally:  # a block that raised before `finish`: its sampler still ends here
                session.stop_watching()
        finally:  # a host a driver holds is one of these (reconnects keep the object)
            await asyncio.gather(*(h.close() for h in hosts.values()), return_exceptions=True)
            raynodes.leave()  # after every node's actor was ended
    finally:
        reaper.stop()
        subreaper.disable()


def _made(
    profile: Profile,
    hosts: dict[str, Host],
    left_out: dict[str, dict[str, Any]],
    *,
    sinks: list[Sink],
    argv: list[str],
) -> Session:
    """A session of every (host, driver) pair whose driver can be made, none checked."""
    drivers: dict[tuple[str, str], Driver] = {}
    for h, host in hosts.items():
        for d in profile.drivers:
            try:
                drivers[(h, d)] = get_driver(d, host, profile.driver_options.get(d, {}))
            except Exception:  # the command says why, where it uses the driver
                continue
    return Session(
        profile,
        sinks=sinks,
        argv=argv,
        drivers=drivers,
        workloads={},
        left_out_hosts=left_out,
        hosts=hosts,
    )


async def _build(
    profile: Profile,
    hosts: dict[str, Host],
    left_out: dict[str, dict[str, Any]],
    *,
    sinks: list[Sink],
    argv: list[str],
    log: Any,
) -> Session:
    remote = [h for h in hosts if h != "local"]
    cap = profile.capacity
    nodes = raynodes.nodes_of(hosts)
    if remote and cap is not None and len(nodes) != len(hosts):
        raise RtaxError(
            "capacity batches run on `local` alone, or spread over a Ray cluster's nodes "
            "alone (its hosts all ray); not on SSH hosts"
        )
    if nodes and cap is not None and (cap.cpus or cap.memory_mib):
        field = "cpus" if cap.cpus else "memory_mib"
        raise RtaxError(
            f"[capacity] {field}: a budget cgroup is made on the controller's machine, and "
            "a batch spread over Ray nodes has none there yet; leave cpus and memory_mib unset"
        )
    drivers = {
        (h, d): get_driver(d, hosts[h], profile.driver_options.get(d, {}))
        for h in hosts
        for d in profile.drivers
    }
    keys = list(drivers)
    checks = await asyncio.gather(*(remote_aware_check(h, drv) for (h, _), drv in drivers.items()))
    local_problems = {}
    for (h, d), probs in zip(keys, checks, strict=True):
        if not probs:
            continue
        if h == "local":
            local_problems[f"{h}/{d}"] = probs
            continue
        why = "; ".join(p.reason for p in probs)  # a remote host runs what it supports
        left_out.setdefault(h, {}).setdefault("drivers_left_out", {})[d] = why
        if log is not None:
            log(f"{h}/{d} left out: {why}")
        del drivers[(h, d)]
    check_drivers_ready(local_problems)
    if not drivers:
        raise RtaxError("no driver can run on any host (see `rtax doctor --host ...`)")
    for (h, d), drv in drivers.items():
        for ch in profile.channels:
            if ch not in drv.channels:
                raise RtaxError(f"{h}/{d}: channel {ch!r} is not supported by this driver")
    if cap is not None:
        from rtax_tui.hosts.cgroups import Cgroup

        if (cap.cpus or cap.memory_mib) and Cgroup.version() is None:
            raise RtaxError(
                "capacity: a CPU or memory budget needs cgroups, and none is mounted here"
            )
    workloads = await asyncio.to_thread(resolve_workloads, profile, log)
    wl = list(workloads.values())
    checks = await asyncio.gather(*(_check_workloads(drv, wl) for drv in drivers.values()))
    check_drivers_ready({f"{h}/{d}": probs for (h, d), probs in zip(drivers, checks, strict=True)})
    return Session(
        profile,
        sinks=sinks,
        argv=argv,
        drivers=drivers,
        workloads=workloads,
        left_out_hosts=left_out,
    )
