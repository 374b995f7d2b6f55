"""The remote-host flags shared by `rtax run` and `rtax doctor` (kept out of cli.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

TRUST_WARNING = (
    "rtax: WARNING: --trust-new-hosts: host keys are NOT checked; anyone on the path can "
    "pose as these hosts. Use it only for throw-away test hosts."
)


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _hosts(value: str) -> list[str]:
    """`--host`: the list, each ssh:// URL read now (a host name that is no name, a label
    over 63 bytes: one line naming the flag, before anything connects)."""
    items = _csv(value)
    for item in items:
        if item.startswith("ssh://"):
            from rtax_tui.hosts.ssh import parse_ssh_url
            from rtax_tui.model.spec import RtaxError

            try:
                parse_ssh_url(item)
            except RtaxError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
    return items


def add_host_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        type=_hosts,
        help="hosts, comma-separated: local, ssh://[user@]host[:port], or [hosts.NAME] names",
    )
    p.add_argument("--identity", metavar="FILE", help="SSH private key for the ssh:// hosts")
    p.add_argument(
        "--known-hosts", metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)"
    )
    p.add_argument(
        "--trust-new-hosts",
        action="store_true",
        help="do not check SSH host keys (throw-away test hosts only)",
    )


def ssh_options(args: argparse.Namespace) -> dict[str, Any]:
    """identity / known_hosts / trust_new from the flags (no secret: paths only)."""
    opts: dict[str, Any] = {}
    if getattr(args, "identity", None):
        opts["identity"] = args.identity
    if getattr(args, "known_hosts", None):
        opts["known_hosts"] = args.known_hosts
    if getattr(args, "trust_new_hosts", False):
        print(TRUST_WARNING, file=sys.stderr)
        opts["trust_new"] = True
    return opts


def host_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for Profile.with_overrides."""
    opts = ssh_options(args)
    return {"hosts": getattr(args, "host", None), "ssh_options": opts or None}


def cleanup_remote_hosts(args: argparse.Namespace) -> int:
    """`rtax cleanup --host ssh://...`: leftovers of the drivers that run over SSH, on each
    remote host named (workspaces, sandboxes and cgroups of one run with --run); -1 when
    the run of --run is alive on one of them."""
    import asyncio

    from rtax_tui.drivers import driver_class, get_driver
    from rtax_tui.drivers import names as driver_names
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.runner import make_host
    from rtax_tui.model import runlock
    from rtax_tui.model.spec import RtaxError

    names = [h for h in (getattr(args, "host", None) or []) if h != "local"]
    if not names:
        return 0
    prof = Profile(name="cleanup", path="command line", ssh_options=ssh_options(args))

    async def go() -> int:
        total = 0
        for name in names:
            host = make_host(name, prof)
            try:
                await host.connect()
            except RtaxError as exc:
                print(f"rtax: {exc}", file=sys.stderr)
                continue
            try:
                run = getattr(args, "run", None)
                if run and runlock.safe_label(run) in await runlock.live_labels_on(host):
                    print(
                        f"rtax: run {run} is still running on {host.name}; stop it first",
                        file=sys.stderr,
                    )
                    return -1
                for drv in [d for d in driver_names() if driver_class(d).runs_remote]:
                    n = await get_driver(drv, host, {}).cleanup(getattr(args, "run", None))
                    if n:
                        print(f"{host.name}: {drv}: removed {n}")
                    total += n
            finally:
                await host.close()
        return total

    return asyncio.run(go())
