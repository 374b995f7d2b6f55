"""The remote-host flags shared by `rtax run`, `probe`, `cleanup` and `doctor` (kept out
of cli.py)."""

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
        if item.startswith("ray://"):
            from rtax_tui.model.netaddr import address_host

            if not address_host(item):
                raise argparse.ArgumentTypeError(f"{item!r}: expected ray://HOST:PORT")
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
        help="hosts, comma-separated: local, ssh://[user@]host[:port], ray:auto or "
        "ray://HOST:PORT (a Ray cluster: one host per node), or [hosts.NAME] names",
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
