"""`rtax cleanup`: what earlier runs left (environments, cgroups, image delivery)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from rtax_tui.commands import argtypes
from rtax_tui.commands.command import Command
from rtax_tui.commands.hostflags import add_host_flags, ssh_options
from rtax_tui.drivers import Driver, driver_class, get_driver
from rtax_tui.drivers import names as driver_names
from rtax_tui.hosts import names
from rtax_tui.model import runlock
from rtax_tui.model.events import one_line

# each driver's cleanup, at most (gVisor's once ran past a minute: drivers/gvisor.py)
CLEANUP_TIMEOUT_S = 120


def add_arguments(cl: argparse.ArgumentParser) -> None:
    cl.add_argument(
        "--run",
        type=argtypes.run_label,
        help="only this run id (refused while the run is alive: stop it first)",
    )
    cl.add_argument(
        "--driver",
        action="append",
        metavar="NAME",
        help="only these drivers' leftovers (repeatable; then no budget cgroups)",
    )
    cl.add_argument(
        "--timeout",
        type=argtypes.integer(1, 3600, "timeout"),
        default=CLEANUP_TIMEOUT_S,
        metavar="S",
        help=f"each driver's cleanup at most S seconds (default {CLEANUP_TIMEOUT_S}); one that "
        "fails or runs out of time is named, the others still run, and the exit status is 1",
    )
    add_host_flags(cl)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Leftovers of dead runs: what a live run (one holding its run lock, see
    model/runlock.py) made is spared, and `--run` of a live run is refused."""
    from rtax_tui.engine import evloop  # deferred: the engine's, not `rtax --help`'s

    local = args.host is None or "local" in args.host
    if args.run and local:
        for labels in runlock.live_runs():
            if runlock.safe_label(args.run) in labels:
                print(
                    f"rtax: run {args.run} is still running; stop it first "
                    "(its reaper removes what it made)",
                    file=sys.stderr,
                )
                return 2
    unknown = sorted(set(args.driver or ()) - set(driver_names()))
    if unknown:
        print(f"rtax: unknown driver {one_line(', '.join(unknown))}", file=sys.stderr)
        return 2
    return evloop.run(_cleanup(args, argv))


async def _cleanup(args: argparse.Namespace, argv: list[str]) -> int:
    """Within a session of the engine (engine/runner.py `opened`), as every command that
    acts on hosts: its hosts connected, under the reaper (a cleanup killed half-way
    leaves none of the processes it started), and holding a run lock of its own."""
    # deferred: the cgroups' and image delivery's cleanups, the engine's session, 15 ms
    # of imports that `rtax --help` does not make
    from rtax_tui.drivers.toolkit import delivery
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.runner import opened, refuse_ray_nodes
    from rtax_tui.hosts import cgroups

    chosen = [d for d in driver_names() if not args.driver or d in args.driver]
    prof = Profile(
        name="cleanup",
        path="command line",
        hosts=tuple(dict.fromkeys(args.host or ["local"])),
        drivers=(),
        ssh_options=ssh_options(args),
    )

    def log(msg: str) -> None:
        print(f"rtax: {one_line(msg)}", file=sys.stderr)

    async with opened(prof, argv=argv, log=log, ready=False) as session:
        refuse_ray_nodes(session, "rtax cleanup")
        total, failed = 0, 0
        local = session.hosts.get("local")
        for name in chosen if local is not None else ():
            # each bounded, on a thread of its own: one that fails or hangs stops no other
            make = partial(get_driver, name, session.hosts["local"])
            n, why = await asyncio.to_thread(_cleanup_one, name, make, args.run, args.timeout)
            failed += _said(name, n, why)
            total += n
        for host in session.hosts.values():
            if host is local:
                continue
            if args.run and runlock.safe_label(args.run) in await runlock.live_labels_on(host):
                print(
                    f"rtax: run {args.run} is still running on {host.name}; stop it first",
                    file=sys.stderr,
                )
                return 2
            for name in [d for d in chosen if driver_class(d).runs_remote]:
                n, why = await _cleanup_on(get_driver(name, host, {}), args.run, args.timeout)
                failed += _said(f"{host.name}: {name}", n, why)
                total += n
        n = 0
        if local is not None:
            spare = spare_live_cgroups()
            if args.run:  # only this run's: its budget cgroups and its environments' cgroups
                n = cgroups.cleanup(
                    f"{cgroups.PREFIX}/{names.batch_cgroup_prefix(args.run)}", spare=spare
                )
                n += cgroups.cleanup(
                    f"{cgroups.PREFIX}/{names.env_cgroup_prefix(args.run)}", spare=spare
                )
            elif not args.driver:
                n = cgroups.cleanup(spare=spare)
            if n:
                print(f"cgroups: removed {n}")
            if not args.driver:  # image delivery's mounts and servers (a run with image modes)
                got = delivery.cleanup(None if args.run is None else runlock.safe_label(args.run))
                if got:
                    print(f"image delivery: removed {got}")
                n += got
    print(f"removed {total + n} leftovers" if total + n else "nothing to clean up")
    _print_spared(runlock.take_spared())
    return 1 if failed else 0


def _said(name: str, n: int, why: str | None) -> int:
    """One driver's cleanup said: what it removed, or why it did not finish (1: failed)."""
    if why is not None:
        driver = name.rpartition(": ")[2]
        print(
            f"rtax: cleanup: {name}: {why}; what it had not removed is left "
            f"(again: rtax cleanup --driver {driver})",
            file=sys.stderr,
        )
        return 1
    if n:
        print(f"{name}: removed {n}")
    return 0


def spare_live_cgroups() -> Callable[[str], bool]:
    """`cgroups.cleanup`'s `spare`: a cgroup of any kind rtax makes below its root
    (`names.CGROUP_KINDS`) whose label is live; the live labels read once, when first
    asked (once the candidates are listed)."""
    live: list[set[str]] = []

    def spare(name: str) -> bool:
        if not live:
            live.append(runlock.live_labels())
        if names.belongs(name, live[0], *names.CGROUP_KINDS):
            runlock.note_spared(1)
            return True
        return False

    return spare


def _cleanup_one(
    name: str, make: Callable[[], Any], run: str | None, timeout_s: float
) -> tuple[int, str | None]:
    """One driver's cleanup, on a thread and event loop of its own, waited for at most
    `timeout_s`: (what it removed, None), or (0, why it did not finish). A cleanup that
    hangs (a read of /proc that blocks, a daemon that never answers) is left behind on
    its daemon thread; the others still run and rtax still ends."""
    got: list[int] = []
    err: list[BaseException] = []

    def work() -> None:
        try:
            got.append(asyncio.run(make().cleanup(run)))
        except BaseException as exc:  # reported by the caller as one line
            err.append(exc)

    t = threading.Thread(target=work, name=f"cleanup-{name}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return 0, f"did not finish within {timeout_s:g} s"
    if err:
        exc = err[0]
        return 0, f"failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return got[0], None


async def _cleanup_on(drv: Driver, run: str | None, timeout_s: float) -> tuple[int, str | None]:
    """A remote host's driver's cleanup (over its connection, in this loop), waited for
    at most `timeout_s`: as `_cleanup_one`'s result."""
    try:
        return await asyncio.wait_for(drv.cleanup(run), timeout_s), None
    except TimeoutError:
        return 0, f"did not finish within {timeout_s:g} s"
    except Exception as exc:
        return 0, f"failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def _print_spared(n: int) -> None:
    if n:
        print(f"spared {n} of live runs")


COMMAND = Command("cleanup", "remove leftovers of earlier runs", add_arguments, run)
