"""`rtax report FILE`: the statistics of a recording, and its gates."""

from __future__ import annotations

import argparse
import sys

from rtax_tui.commands import argtypes, output
from rtax_tui.commands.command import Command
from rtax_tui.commands.gating import add_gate_flags, apply_gates, parse_thresholds, refuse_inputs
from rtax_tui.model.recording import read_header, read_recording


def add_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("file")
    rep.add_argument("--format", choices=("table", "json", "markdown", "csv"), default="table")
    rep.add_argument(
        "--fidelity-min",
        type=argtypes.integer(0, 100, "--fidelity-min"),
        default=80,
        metavar="PCT",
        help="a replay cell whose fidelity (steps with the exit code the trajectory "
        "recorded) is under PCT%% is marked not representative (default 80)",
    )
    add_gate_flags(rep)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the statistics, 35 ms of imports that `rtax --help` does not make; their
    # tables (Rich), which `--format json` does not make either
    from rtax_tui.analysis.report import report_file

    refuse_inputs({"--summary": args.summary, "--junit": args.junit}, [args.file])
    # the recorded profile's [thresholds], then the command line's
    thresholds = parse_thresholds(read_header(args.file).get("profile"), args.threshold)
    report = report_file(args.file, fidelity_min=args.fidelity_min / 100)
    # the whole recording only for a figure the report has not (create+ready)
    held = apply_gates(
        report, lambda: read_recording(args.file), thresholds, args.summary, args.junit
    )
    if args.format == "json":
        output.print_json(report)
        return 0 if held else 1
    from rtax_tui.render.reporting import out_console, print_report, render_csv, render_markdown

    if args.format == "markdown":
        sys.stdout.write(render_markdown(report))
    elif args.format == "csv":
        sys.stdout.write(render_csv(report))
    else:
        print_report(report, out_console())
    return 0 if held else 1


COMMAND = Command("report", "statistics of a recording", add_arguments, run)
