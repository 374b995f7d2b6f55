"""`rtax project FILE`: worker-hours for N trajectories of S steps, per cell."""

from __future__ import annotations

import argparse

from rtax_tui.commands import argtypes, output
from rtax_tui.commands.command import Command
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import RtaxError


def add_arguments(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("file")
    pr.add_argument("--trajectories", type=argtypes.trajectories, default=1_000_000)
    pr.add_argument("--steps", type=argtypes.steps, default=None, help="S (default 150)")
    pr.add_argument(
        "--steps-from",
        nargs="+",
        metavar="PATH",
        help="S from real trajectories (files or directories): each one's replayed steps",
    )
    pr.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the statistics and their tables (Rich), 51 ms of imports that `rtax --help`
    # does not make
    from rtax_tui.analysis.report import project_report
    from rtax_tui.engine.traj.workload import step_counts
    from rtax_tui.render.reporting import out_console, render_project

    dist = None
    if args.steps_from:
        if args.steps is not None:
            raise RtaxError("--steps and --steps-from: give one of them")
        dist = step_counts(args.steps_from)
    steps = 150 if args.steps is None else args.steps
    proj = project_report(read_recording(args.file), args.trajectories, steps, steps_dist=dist)
    if args.format == "json":
        output.print_json(proj)
    else:
        out_console().print(render_project(proj))
    return 0


COMMAND = Command(
    "project", "worker-hours for N trajectories of S steps, per cell", add_arguments, run
)
