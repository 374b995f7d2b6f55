"""Addresses as rtax reads them: a Ray cluster's (`--host ray://...`, `[hosts.NAME] ray =
...`; no import of Ray, so that reading a profile or a flag costs nothing: engine.raynodes
joins) and whether one is loopback (a Ray address, `rtax serve --host`): one rule."""

from __future__ import annotations

import ipaddress


def is_ray_name(name: str) -> bool:
    """A host name that names a Ray cluster (one host per node): ray:auto, ray://..."""
    return name == "ray:auto" or name.startswith("ray://")


def address_host(address: str) -> str:
    """The host part of `HOST:PORT`, `ray://HOST:PORT` or `[V6]:PORT` ("" if none)."""
    rest = address.removeprefix("ray://")
    if rest.startswith("["):
        return rest[1:].partition("]")[0]
    return rest.rpartition(":")[0] if ":" in rest else rest


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback IP literal (a name is not resolved: it may change)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
