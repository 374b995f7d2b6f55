"""Which drivers exist: the entry-point group `rtax.drivers`, the built-ins included.

A substrate is a `Driver` subclass that any installed package can register:

    [project.entry-points."rtax.drivers"]
    mysandbox = "my_package.module:MySandboxDriver"

rtax's own pyproject.toml is the one place that names the built-in drivers;
profiles, `rtax doctor`, `rtax cleanup` and the engine read this registry, and a
driver module is imported only when its driver is used.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rtax_tui.drivers.base import DaemonNeed, Driver, ImageRecipe

from rtax_tui.hosts import Host
from rtax_tui.model.spec import RtaxError

GROUP = "rtax.drivers"
OWN_DIST = "rtax"


class DriverRegistryError(RtaxError):
    """No such driver, two packages claim one name, or an entry point is broken."""


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    eps = sorted(
        entry_points(group=GROUP),
        # rtax's own first, then the plugins'; by name within each
        key=lambda ep: (ep.dist is None or ep.dist.name != OWN_DIST, ep.name),
    )
    for ep in eps:
        old = found.get(ep.name)
        if old is not None and old.value != ep.value:
            raise DriverRegistryError(
                f"driver {ep.name!r} is registered twice ({old.value} and {ep.value}): "
                "uninstall one of the packages"
            )
        found.setdefault(ep.name, ep)
    if not found:
        raise DriverRegistryError(
            f"no drivers registered in the entry-point group {GROUP!r}: rtax is not "
            "installed (bash scripts/bootstrap, or pip install -e .)"
        )
    return found


def names() -> tuple[str, ...]:
    """Every registered driver's name: rtax's own first, then plugins', by name."""
    return tuple(_entry_points())


@functools.cache
def driver_class(name: str) -> type[Driver]:
    """The driver's class, imported on first use. Raises DriverRegistryError."""
    eps = _entry_points()
    if name not in eps:
        raise DriverRegistryError(f"unknown driver {name!r} (registered: {', '.join(eps)})")
    try:
        cls = eps[name].load()
    except Exception as exc:
        raise DriverRegistryError(
            f"driver {name!r} ({eps[name].value}) cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverRegistryError(
            f"driver {name!r} ({eps[name].value}) is not a subclass of rtax's Driver"
        )
    return cls


# The key of a `[drivers_options.NAME]` table that makes NAME an instance of a
# registered driver with its own options (`driver = "docker"`, `runtime = "runsc"`), so
# one run can measure two configurations of one driver side by side as two cells.
INSTANCE_KEY = "driver"


def resolve(
    name: str, options: dict[str, Any] | None = None
) -> tuple[type[Driver], dict[str, Any]]:
    """The class and the options of the driver a profile calls `name`: a registered
    driver, or an instance of one (`options` has `driver = "BASE"`), whose options are
    then the table without that key. Raises DriverRegistryError."""
    options = dict(options or {})
    base = options.pop(INSTANCE_KEY, None)
    if base is None:
        return driver_class(name), options
    if not isinstance(base, str):
        raise DriverRegistryError(f"{name}: {INSTANCE_KEY} must name a driver, not {base!r}")
    if name in _entry_points() and base != name:
        raise DriverRegistryError(
            f"{name} is a registered driver: an instance of {base} needs a name of its own"
        )
    return driver_class(base), options


def get_driver(name: str, host: Host, options: dict[str, Any] | None = None) -> Driver:
    """The driver a profile calls `name` (see `resolve`), on `host`. An instance keeps
    its own name, which its cells, messages and the recording's facts carry."""
    cls, opts = resolve(name, options)
    drv = cls(host, opts)
    if name != cls.name:
        drv.name = name
    return drv


def provider(name: str) -> str:
    """The package a driver comes from (for doctor): `rtax`, or the plugin's name."""
    ep = _entry_points().get(name)
    return ep.dist.name if ep is not None and ep.dist is not None else "?"


def _loadable() -> Iterator[tuple[str, type[Driver]]]:
    """Each registered driver whose class loads here (one needing an extra that is not
    installed is left out), with its class: for reading what the drivers declare."""
    for name in names():
        try:
            yield name, driver_class(name)
        except DriverRegistryError:
            continue


def image_recipes() -> dict[str, ImageRecipe]:
    """What `rtax images build --driver NAME` accepts: each driver with an image by its
    name, and each image by its kind (`vm`: the guest both VM drivers boot). A driver
    that cannot be loaded here (an extra not installed) is left out."""
    out: dict[str, ImageRecipe] = {}
    for name, cls in _loadable():
        recipe = cls.image_recipe
        if recipe is not None:
            out.setdefault(name, recipe)
            out.setdefault(recipe.kind, recipe)
    return out


def image_recipe(name: str) -> ImageRecipe:
    """The image recipe of a driver or an image kind. Raises DriverRegistryError when
    there is none, naming what there is."""
    recipes = image_recipes()
    if name not in recipes:
        known = ", ".join(sorted(recipes))
        raise DriverRegistryError(f"images: {name!r} has no image to build (known: {known})")
    return recipes[name]


def daemon_of(name: str) -> DaemonNeed | None:
    """The daemon a driver or an image kind needs (None: none or unknown)."""
    for n, cls in _loadable():
        if n == name or (cls.image_recipe is not None and cls.image_recipe.kind == name):
            if cls.daemon is not None:
                return cls.daemon
    return None


# A driver's options table in docs/drivers.md, between its two markers.
OPTIONS_DOC = re.compile(r"(<!-- options: ([\w.+-]+) [^>]*-->\n)(.*?)(<!-- /options -->)", re.S)


def options_doc(text: str) -> str:
    """`text` (docs/drivers.md) with each driver's options table, between its markers,
    generated from what the driver declares (`Driver.options_table`):
    `scripts/driver-options-doc` writes it, tests/drivers/test_driver_options.py fails when the
    doc says otherwise. Raises DriverRegistryError for a marker naming no driver."""

    def table(m: re.Match[str]) -> str:
        body = driver_class(m.group(2)).options_table().markdown()
        return f"{m.group(1)}\n{body}\n{m.group(4)}"

    return OPTIONS_DOC.sub(table, text)
