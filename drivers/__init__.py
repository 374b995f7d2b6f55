"""Substrates. Installed as `rtax_tui.drivers`; no Textual or Rich here.

Drivers are plugins (see `registry.py`): nothing here names a concrete driver.
"""

from __future__ import annotations

from rtax_tui.drivers.base import Driver, Environment, Problem
from rtax_tui.drivers.registry import DriverRegistryError, driver_class, get_driver, names

__all__ = [
    "Driver",
    "DriverRegistryError",
    "Environment",
    "Problem",
    "driver_class",
    "get_driver",
    "names",
]
