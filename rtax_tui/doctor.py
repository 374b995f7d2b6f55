"""`rtax doctor`: which drivers work on this host, and for each that does not, why and the fix."""

from __future__ import annotations

import asyncio

from rich.table import Table

from rtax_tui.core.hostfacts import local_facts
from rtax_tui.core.profile import IMPLEMENTED_DRIVERS, KNOWN_DRIVERS
from rtax_tui.drivers import get_driver
from rtax_tui.hosts import LocalHost
from rtax_tui.reporting import out_console


async def _check_all() -> list[tuple[str, list, dict]]:
    rows = []
    for name in IMPLEMENTED_DRIVERS:
        drv = get_driver(name, LocalHost())
        try:
            probs = await asyncio.wait_for(drv.check(), 60)
        except Exception as exc:  # a broken check is itself a finding
            from rtax_tui.drivers.base import Problem

            probs = [Problem(f"the check failed: {exc}", "report this as a bug")]
        facts = {}
        if not probs:
            try:
                facts = await drv.facts()
            except Exception:
                facts = {}
        rows.append((name, probs, facts))
    return rows


def run_doctor() -> int:
    console = out_console()
    facts = local_facts()
    console.print(
        f"host [bold]local[/bold]: {facts['os']}, kernel {facts['kernel']}, "
        f"{facts['cpus']} CPUs ({facts['cpu_model']}), {facts['memory_mib']} MiB, "
        f"cgroup {facts['cgroup'] or 'none'}, clock {facts['clocksource']}"
    )
    table = Table("driver", "status", "details / fix")
    ok_any = False
    for name, probs, dfacts in asyncio.run(_check_all()):
        if probs:
            detail = "\n".join(f"{p.reason} -> fix: {p.fix}" for p in probs)
            table.add_row(name, "[red]not usable[/red]", detail)
        else:
            ok_any = True
            table.add_row(
                name, "[green]ok[/green]", ", ".join(f"{k} {v}" for k, v in dfacts.items())
            )
    for name in KNOWN_DRIVERS:
        if name not in IMPLEMENTED_DRIVERS:
            table.add_row(name, "[dim]not in this version[/dim]", "")
    console.print(table)
    console.print(f"KVM: {asyncio.run(_kvm())}")
    return 0 if ok_any else 1


async def _kvm() -> str:
    """/dev/kvm existing proves nothing: a guest is booted with KVM under a short timeout."""
    from rtax_tui.drivers.vmguest import kvm_status

    try:
        return await kvm_status(LocalHost())
    except Exception as exc:
        return f"the probe failed: {type(exc).__name__}: {exc}"
