"""`rtax assets prepare|status`: the workloads' assets (the attrs repository)."""

from __future__ import annotations

import argparse
import sys

from rtax_tui.commands import output
from rtax_tui.commands.command import Command


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("action", choices=("prepare", "status"))
    a.add_argument("--force", action="store_true")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from rtax_tui.drivers.toolkit import assets  # deferred: 7 ms that `rtax --help` does not make

    if args.action == "prepare":
        paths = assets.prepare(force=args.force, log=lambda m: print(m, file=sys.stderr))
        print(paths.root)
    else:
        output.print_json(assets.status())
    return 0


COMMAND = Command("assets", "workload assets (the attrs repository)", add_arguments, run)
