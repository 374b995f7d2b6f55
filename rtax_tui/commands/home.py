"""`rtax home [PROFILE]`: the console's launcher (choose, change, run, compare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rtax_tui.commands.command import Command
from rtax_tui.commands.hostflags import add_host_flags
from rtax_tui.commands.run import interactive, ssh_flags
from rtax_tui.model.spec import RtaxError


def add_arguments(home: argparse.ArgumentParser) -> None:
    home.add_argument("profile", nargs="?", help="the profile to start from (default: default)")
    add_host_flags(home)


def _profile_path(args: argparse.Namespace) -> Path | None:
    # deferred: the profile's reader, 25 ms of imports that `rtax --help` does not make
    from rtax_tui.engine.profile import load_profile, resolve_profile_path

    path = resolve_profile_path(args.profile) if args.profile else None
    if path is not None:
        load_profile(path)  # a bad profile: one line naming it, before the terminal
    return path


def load(args: argparse.Namespace) -> None:
    _profile_path(args)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    path = _profile_path(args)
    if not interactive():
        raise RtaxError("home needs a terminal; without one use `rtax run PROFILE`")
    # deferred: the console (Textual), 150 ms of imports that `rtax --help` does not make
    from rtax_tui.ui.app import run_console_home

    flags = ssh_flags(args)  # for the ssh:// hosts the launcher checks and runs on
    return run_console_home(str(path) if path else None, args.host, flags)


COMMAND = Command(
    "home",
    "open the console on its launcher: choose, change, run, compare",
    add_arguments,
    run,
    load=load,
)
