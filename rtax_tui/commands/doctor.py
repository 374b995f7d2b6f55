"""`rtax doctor`: which drivers work on each host, and for each that does not, why and the fix.

`--host` names the hosts (default `local`); a remote host is checked over its own
SSH connection, so the answer is about that machine, not the one running rtax.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from rtax_tui.commands.command import Command
from rtax_tui.commands.hostflags import add_host_flags, ssh_options
from rtax_tui.drivers import Driver, DriverRegistryError, Problem, driver_class, get_driver, names
from rtax_tui.hosts import Host
from rtax_tui.model.spec import RtaxError
from rtax_tui.render.fact_words import facts_words

if TYPE_CHECKING:
    from rich.table import Table

    from rtax_tui.engine.profile import Profile

# Deferred below: the engine's hosts and checks and Rich's tables, 66 ms of imports that
# `rtax --help` does not make (the registry in cli.py imports this module for its parser).

# A daemon slower than this to answer one cheap call is named slow: every create waits on it.
SLOW_DAEMON_S = 1.0


async def time_daemon(drv: Driver, timeout: float = 30) -> tuple[str, float | None] | None:
    """(what was timed, its seconds; None: no answer within `timeout`), None when the
    driver has no daemon. Timed here, with the engine's clock."""
    call = drv.daemon_call()
    if call is None:
        return None
    daemon, what, fn = call
    t = time.monotonic_ns()
    try:
        await asyncio.wait_for(fn(), timeout)
    except Exception:
        return f"{daemon} ({what})", None
    return f"{daemon} ({what})", (time.monotonic_ns() - t) / 1e9


def slow_note(timed: tuple[str, float | None] | None) -> str | None:
    """Why the driver's daemon is slow, or None when it answered in time (or has none)."""
    if timed is None:
        return None
    what, secs = timed
    if secs is None:
        return f"{what} did not answer: every create will wait on it"
    if secs < SLOW_DAEMON_S:
        return None
    return (
        f"{what} took {secs:.1f} s to answer: every create waits at least that long "
        "(raise [timeouts] create, or look at the daemon's log)"
    )


async def _problems(host: Host, drv: Driver) -> list[Problem]:
    """The driver's check on `host`, at most 60 s; a check that breaks is a problem too."""
    from rtax_tui.engine.runner import remote_aware_check  # deferred: see the top

    try:
        return await asyncio.wait_for(remote_aware_check(host.name, drv), 60)
    except Exception as exc:  # a broken check is itself a finding
        return [_broken(exc)]


def _broken(exc: Exception) -> Problem:
    """A check that raised: a user-facing error (RtaxError, say a cache path with a line
    break) is the user's to fix; anything else is rtax's bug."""
    if isinstance(exc, RtaxError):
        return Problem(str(exc), "fix what it names")
    return Problem(f"the check failed: {exc}", "report this as a bug")


async def _check_host(
    host: Host, on_row: Any = None
) -> list[tuple[str, list[Problem], dict[str, Any], dict[str, Any]]]:
    rows = []
    for name in names():
        drv = get_driver(name, host)
        probs = await _problems(host, drv)
        facts = {}
        if not probs:
            try:
                facts = await drv.facts()
            except Exception:
                facts = {}
            timed = await time_daemon(drv)
            if timed is not None:  # raw, as the facts: the table says it in words
                what, secs = timed
                ms = None if secs is None else round(secs * 1000, 1)
                facts["daemon"] = {"call": what, "answer_ms": ms}
                slow = slow_note(timed)
                if slow is not None:
                    facts["slow"] = slow
        resets = {ch: drv.pool_resets(ch) for ch in drv.channels}  # for this host
        rows.append((name, probs, facts, resets))
        if on_row is not None:
            on_row(host.name, name, probs, facts)
    return rows


async def _doctor(
    profile: Profile, on_row: Any = None, kvm: bool = False
) -> tuple[list[tuple[str, Any, Any]], str | None]:
    """(host name, facts or why it was kept out, driver rows) of each host, the reached
    ones first; `on_row` hears of each driver as soon as it is checked. `kvm`: then also
    whether a KVM guest boots here (on `local`; else None).

    Within a session of the engine (engine/runner.py `opened`), as `rtax run`: its hosts
    connected, their network cost measured, and the reaper up: the checks start
    processes (the KVM probe's QEMU, a sandbox per channel), and a doctor killed
    half-way (the console closing, kill -9) must leave none of them."""
    from rtax_tui.engine.runner import opened  # deferred: see the top

    out: list[tuple[str, Any, Any]] = []
    kvm_said = None
    async with opened(profile, ready=False) as session:
        for name, host in session.hosts.items():
            facts = await host.facts()
            out.append((name, facts, await _check_host(host, on_row)))
        for name, why in session.left_out_hosts.items():
            said = why.get("unreachable", "")
            out.append((name, RtaxError(said), []))
            if on_row is not None:
                on_row(name, None, said, None)
        if kvm and "local" in session.hosts:
            kvm_said = await _kvm(session.hosts["local"])
    return out, kvm_said


def driver_problems(drivers: list[str]) -> dict[str, str]:
    """Why each of `drivers` cannot run on this machine (the checks `rtax doctor` makes,
    within the engine's session as doctor's: the reaper up while checks start
    processes), one line each; a driver that can is left out. `rtax reproduce` decides
    with it."""
    from rtax_tui.engine import evloop
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.runner import opened  # deferred: see the top

    async def all_of() -> dict[str, str]:
        out: dict[str, str] = {}
        profile = Profile(name="doctor", path="command line", hosts=("local",), drivers=())
        async with opened(profile, ready=False) as session:
            host = session.hosts.get("local")
            for name in drivers:
                try:
                    if host is None:
                        raise RtaxError("this machine could not be reached")
                    drv = get_driver(name, host)
                except Exception as exc:  # as a check that breaks (_problems)
                    probs = [_broken(exc)]
                else:
                    probs = await _problems(host, drv)
                if probs:
                    out[name] = "; ".join(f"{p.reason} (fix: {p.fix})" for p in probs)
        return out

    return evloop.run(all_of())


def run_doctor(args: argparse.Namespace | None = None) -> int:
    from rich.table import Table  # deferred: see the top

    from rtax_tui.engine import evloop
    from rtax_tui.engine.profile import Profile
    from rtax_tui.render.plaintext import styled
    from rtax_tui.render.reporting import out_console

    console = out_console()
    names = (getattr(args, "host", None) or ["local"]) if args is not None else ["local"]
    opts = ssh_options(args) if args is not None else {}
    profile = Profile(
        name="doctor",
        path="command line",
        hosts=tuple(dict.fromkeys(names)),
        drivers=(),  # each host's are checked here, every registered one
        ssh_options=opts,
    )
    if getattr(args, "format", "table") == "json":
        return _doctor_json(names, profile)
    ok_all = True
    found, kvm = evloop.run(_doctor(profile, kvm=True))
    for hname, facts, rows in found:
        if isinstance(facts, Exception):
            console.print(
                styled("host ", (hname, "bold"), ": ", ("unreachable", "red"), f": {facts}")
            )
            ok_all = False
            continue
        net = facts.get("net") or {}
        net_s = (
            f", connect {net['connect_ms']:.0f} ms, empty command {net['exec_rtt_ms']:.1f} ms"
            if "connect_ms" in net and "exec_rtt_ms" in net
            else ""
        )
        console.print(
            styled(
                "host ",
                (hname, "bold"),
                f": {facts.get('os')}, kernel {facts.get('kernel')}, "
                f"{facts.get('cpus')} CPUs ({facts.get('cpu_model')}), "
                f"{facts.get('memory_mib')} MiB, "
                f"cgroup {facts.get('cgroup') or 'none'}, clock {facts.get('clocksource')}{net_s}",
            )
        )
        table = Table("driver", "status", "details / fix", title=f"drivers on {hname}")
        ok_any = False
        for name, probs, dfacts, _ in rows:
            if probs:
                detail = "\n".join(f"{p.reason} -> fix: {p.fix}" for p in probs)
                table.add_row(name, styled(("not usable", "red")), styled(detail))
            else:
                ok_any = True
                slow = dfacts.pop("slow", None)
                detail = "\n".join(facts_words(dfacts))  # the raw values: --format json
                if slow is not None:
                    table.add_row(name, styled(("ok, slow", "yellow")), styled(f"{slow}\n{detail}"))
                else:
                    table.add_row(name, styled(("ok", "green")), styled(detail))
        console.print(table)
        console.print(_pool_table(hname, [(n, r) for n, probs, _, r in rows if not probs]))
        if hname == "local":
            console.print(f"KVM: {kvm}")
            _steadier(console)
        ok_all = ok_all and ok_any
    return 0 if ok_all else 1


def _steadier(console: Any) -> None:
    """What to change here for steadier figures, measured now (hosts.noise.advice)."""
    from rtax_tui.hosts.noise import advice
    from rtax_tui.render.plaintext import styled

    found = advice()
    if not found:
        console.print("steadier figures: nothing found to change (measured over 1 s)")
        return
    console.print("steadier figures: what to change here (measured over 1 s):")
    for what, fix in found:
        console.print(styled("  ", (what, "yellow"), f" -> {fix}"), soft_wrap=True)


class DoctorProblem(TypedDict):
    reason: str
    fix: str


class DoctorHead(TypedDict):
    """`rtax doctor --format json`'s first line: what is checked."""

    drivers: list[str]
    hosts: list[str]


class DoctorRow(TypedDict):
    """A driver on a host: whether it can run there, why not, its versions, and what it
    declares it needs (its image's kind and its daemon's start command, or None)."""

    host: str
    driver: str
    ok: bool
    problems: list[DoctorProblem]
    facts: dict[str, Any]  # the driver's, raw (as a recording's header holds them)
    details: list[str]  # the same in words, one a line, as the table says them
    image: str | None
    daemon: str | None


class DoctorUnreachable(TypedDict):
    host: str
    unreachable: str


DoctorLine = DoctorHead | DoctorRow | DoctorUnreachable


def add_arguments(d: argparse.ArgumentParser) -> None:
    add_host_flags(d)
    d.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="json: one object a line, each driver as soon as it is checked",
    )


COMMAND = Command(
    "doctor",
    "which drivers work here, and how to fix those that do not",
    add_arguments,
    lambda args, argv: run_doctor(args),
)


def _declared(driver: str) -> tuple[str | None, str | None]:
    """The driver's image kind and daemon start command, as it declares them."""
    try:
        cls = driver_class(driver)
    except DriverRegistryError:
        return None, None
    image = cls.image_recipe.kind if cls.image_recipe is not None else None
    return image, (cls.daemon.start if cls.daemon is not None else None)


def _doctor_json(hosts: list[str], profile: Profile) -> int:
    """One JSON object a line, each as soon as it is known (the console shows them live):
    `DoctorHead` first, then per host and driver a `DoctorRow`, or a `DoctorUnreachable`
    for a host that could not be reached."""

    def emit(obj: DoctorLine) -> None:
        sys.stdout.buffer.write(orjson.dumps(obj, default=str) + b"\n")
        sys.stdout.flush()

    ok = {"any": False, "unreachable": False}

    def on_row(host: str, driver: str | None, probs: Any, facts: Any) -> None:
        if driver is None:
            ok["unreachable"] = True
            emit({"host": host, "unreachable": str(probs)})
            return
        ok["any"] = ok["any"] or not probs
        image, daemon = _declared(driver)
        emit(
            {
                "host": host,
                "driver": driver,
                "ok": not probs,
                "problems": [{"reason": p.reason, "fix": p.fix} for p in probs],
                "facts": dict(facts or {}),
                "details": facts_words(facts or {}),
                "image": image,
                "daemon": daemon,
            }
        )

    emit({"drivers": list(names()), "hosts": hosts})
    from rtax_tui.engine import evloop

    evloop.run(_doctor(profile, on_row))
    return 0 if ok["any"] and not ok["unreachable"] else 1


def _pool_table(hname: str, usable: list[tuple[str, dict[str, Any]]]) -> Table:
    """Which warm-pool resets (`[pool] reset`) each usable driver offers, per channel;
    for one it lacks, why (a pool asked for it uses `recreate`)."""
    from rich.table import Table  # deferred: see the top

    from rtax_tui.engine.poolspec import RESETS
    from rtax_tui.render.plaintext import styled

    table = Table("driver", "channel", *RESETS, title=f"warm pool resets on {hname}")
    for name, per_channel in usable:
        for ch, got in per_channel.items():
            cells = [
                styled(("yes", "green")) if got.get(r) is None else styled(f"no: {got.get(r)}")
                for r in RESETS
            ]
            table.add_row(name, ch, *cells)
    return table


async def _kvm(local: Host) -> str:
    """/dev/kvm existing proves nothing: a guest is booted with KVM under a short timeout."""
    from rtax_tui.drivers.toolkit.vmguest import kvm_status  # deferred: 18 ms of imports

    try:
        return await kvm_status(local)
    except Exception as exc:
        return f"the probe failed: {type(exc).__name__}: {exc}"
