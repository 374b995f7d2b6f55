"""`rtax replay FILE`: a recording played back in the console."""

from __future__ import annotations

import argparse

from rtax_tui.commands.command import Command
from rtax_tui.commands.run import interactive
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import RtaxError


def add_arguments(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("file")
    rp.add_argument(
        "--speed",
        choices=("1", "2", "10", "max"),
        default="1",
        help="playback speed: recorded pace (1), 2x, 10x or as fast as possible",
    )


def load(args: argparse.Namespace) -> None:
    read_recording(args.file)  # a bad file: one-line error before the terminal is taken


def run(args: argparse.Namespace, argv: list[str]) -> int:
    load(args)
    if not interactive():
        raise RtaxError("replay needs a terminal; for figures use `rtax report FILE`")
    # deferred: the console (Textual), 150 ms of imports that `rtax --help` does not make
    from rtax_tui.ui.app import run_console_replay

    return run_console_replay(args.file, args.speed)


COMMAND = Command(
    "replay", "open a recording in the console and play it back", add_arguments, run, load=load
)
