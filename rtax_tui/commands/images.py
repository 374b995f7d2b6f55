"""`rtax images build`: the substrates' images, built locally (no registry)."""

from __future__ import annotations

import argparse
import sys

from rtax_tui.commands.command import Command
from rtax_tui.drivers import registry
from rtax_tui.model.spec import RtaxError


def add_arguments(im: argparse.ArgumentParser) -> None:
    im.add_argument("action", choices=("build",))
    im.add_argument(
        "--driver",
        action="append",
        metavar="NAME",
        help="a driver (repeatable) or an image kind (`vm`: both VM drivers' guest); "
        "default docker. A driver that starts from no image is skipped",
    )
    im.add_argument("--force", action="store_true", help="rebuild even when cached")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """`rtax images build`: each named driver's image, as the driver declares it
    (`Driver.image_recipe`); an image two drivers share is built once. A failed build
    names the daemon the driver needs and how to start it."""
    wanted = args.driver or ["docker"]
    recipes = registry.image_recipes()
    known = set(registry.names()) | set(recipes)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        print(
            f"rtax images: error: --driver: unknown {', '.join(map(repr, unknown))} "
            f"(drivers and images: {', '.join(sorted(known))})",
            file=sys.stderr,
        )
        return 2
    done: set[str] = set()
    for name in wanted:
        recipe = recipes.get(name)
        if recipe is None:
            print(f"{name}: starts from no image, nothing to build", file=sys.stderr)
            continue
        if recipe.kind in done:
            continue
        done.add(recipe.kind)
        try:
            tags = recipe.build(args.force, lambda m: print(m, file=sys.stderr))
        except RtaxError as exc:
            daemon = registry.daemon_of(name)
            hint = f" (it needs {daemon.name}: {daemon.start})" if daemon else ""
            raise RtaxError(f"{exc}{hint}") from exc
        print("\n".join(tags))
    return 0


COMMAND = Command(
    "images", "build the substrates' images locally (no registry)", add_arguments, run
)
