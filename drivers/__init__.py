"""Substrates. Installed as `rtax_tui.drivers`; no Textual or Rich here."""

from __future__ import annotations

from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem

DRIVER_NAMES = ("local", "stage", "docker", "podman", "libvirt", "microvm")


def get_driver(name: str, host: object, options: dict[str, Any] | None = None) -> Driver:
    if name == "local":
        from rtax_tui.drivers.local import LocalDriver

        return LocalDriver(host, options or {})
    if name == "stage":
        from rtax_tui.drivers.stage import StageDriver

        return StageDriver(host, options or {})
    if name == "docker":
        from rtax_tui.drivers.docker import DockerDriver

        return DockerDriver(host, options or {})
    if name == "podman":  # the docker driver's code, on Podman's Docker-compatible API
        from rtax_tui.drivers.podman import PodmanDriver

        return PodmanDriver(host, options or {})
    if name == "microvm":
        from rtax_tui.drivers.microvm import MicrovmDriver

        return MicrovmDriver(host, options or {})
    if name == "libvirt":
        from rtax_tui.drivers.libvirt import LibvirtDriver

        return LibvirtDriver(host, options or {})
    raise KeyError(name)


__all__ = ["DRIVER_NAMES", "Driver", "Environment", "Problem", "get_driver"]
