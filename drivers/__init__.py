"""Substrates. Installed as `rtax_tui.drivers`; no Textual or Rich here."""

from __future__ import annotations

from rtax_tui.drivers.base import Driver, Environment, Problem

DRIVER_NAMES = ("local", "stage", "docker", "podman", "libvirt", "microvm")


def driver_class(name: str) -> type[Driver]:
    """The class of a driver, imported on demand (the profile layer checks a driver's
    options with it before any host is reached)."""
    if name == "local":
        from rtax_tui.drivers.local import LocalDriver

        return LocalDriver
    if name == "stage":
        from rtax_tui.drivers.stage import StageDriver

        return StageDriver
    if name == "docker":
        from rtax_tui.drivers.docker import DockerDriver

        return DockerDriver
    if name == "podman":  # the docker driver's code, on Podman's Docker-compatible API
        from rtax_tui.drivers.podman import PodmanDriver

        return PodmanDriver
    if name == "microvm":
        from rtax_tui.drivers.microvm import MicrovmDriver

        return MicrovmDriver
    if name == "libvirt":
        from rtax_tui.drivers.libvirt import LibvirtDriver

        return LibvirtDriver
    raise KeyError(name)


def get_driver(name: str, host: object, options: dict | None = None) -> Driver:
    return driver_class(name)(host, options or {})


__all__ = ["DRIVER_NAMES", "Driver", "Environment", "Problem", "driver_class", "get_driver"]
