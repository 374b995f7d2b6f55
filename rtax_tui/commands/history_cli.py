"""`rtax history PROFILE`: each phase's P50 run after run, per cell, and where it stepped."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT, parse_min_effect
from rtax_tui.commands import output
from rtax_tui.commands.command import Command
from rtax_tui.model.events import error_line
from rtax_tui.model.spec import PHASES, POOL_PHASES, TREND_PHASES, RtaxError

KNOWN_PHASES = PHASES + POOL_PHASES

EPILOG = """\
Every recording under --dir (default ./recordings, with the examples shipped there)
whose header names PROFILE is read; runs are ordered by when they started. A run's
figure is the P50 of a cell's measured trials, as `rtax report` prints it.

Only runs that measure the same thing are compared: one series per cell (host, driver,
workload, channel, mode) and workload definition. A custom workload's steps are recorded
(their digest splits a series when they changed); a built-in workload's are not, and are
assumed unchanged between the runs (the table says so).

Steps are found with asv's step detection (airspeed velocity, asv/step_detect.py): a
piecewise-constant L1 fit of log P50 with an automatic penalty; a step must exceed the
scatter of the runs on both sides, 3 sigmas of the run-to-run noise and --min-effect.
It is conservative on few runs: expect to see large steps, not 10% drifts.

examples:
  rtax history t0
  rtax history profiles/t2.toml --phase create,total --cell stage
  rtax history t0 --format json | jq '.series[].steps'
"""


def _phases(text: str) -> tuple[str, ...]:
    got = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in got:
        if p not in KNOWN_PHASES:
            raise argparse.ArgumentTypeError(
                f"unknown phase {p!r} (known: {', '.join(KNOWN_PHASES)})"
            )
    if not got:
        raise argparse.ArgumentTypeError("expected one phase or more, comma-separated")
    return got


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "profile",
        help="a profile's name as recorded (`t0`, or the `name` of your file) or a profile file",
    )
    c.add_argument("--format", choices=("table", "json"), default="table")
    c.add_argument(
        "--phase",
        type=_phases,
        default=TREND_PHASES,
        metavar="P,..",
        help=f"the phases shown (default {','.join(TREND_PHASES)}; "
        f"known: {', '.join(KNOWN_PHASES)})",
    )
    c.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="TEXT",
        help="only the cells whose id (host/driver/workload/channel) contains TEXT; "
        "repeatable (e.g. --cell stage/t0/exec, --cell docker)",
    )
    c.add_argument(
        "--dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="where the recordings are (searched recursively; repeatable; default ./recordings)",
    )
    c.add_argument(
        "--min-effect",
        default=DEFAULT_MIN_EFFECT,
        metavar="PCT,TIME",
        help="a step smaller than this (a share of the level before, and a time) is not "
        f"reported (default {DEFAULT_MIN_EFFECT.replace('%', '%%')})",
    )


def profile_name(arg: str) -> str:
    """The name a profile's recordings carry: a file's (loaded: its `name`, else its
    stem), or the argument itself."""
    if "/" in arg or arg.endswith(".toml"):
        # deferred: the profile's reader, 25 ms of imports that `rtax --help` does not make
        from rtax_tui.engine.profile import load_profile

        return load_profile(Path(arg)).name
    return arg


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the statistics and their tables (Rich)
    from rtax_tui.analysis.trends import find_profile_runs, history_document, run_figures
    from rtax_tui.render.history_render import render_series
    from rtax_tui.render.reporting import out_console

    min_effect = parse_min_effect(args.min_effect)
    name = profile_name(args.profile)
    roots = args.dir or [Path("recordings")]
    where = ", ".join(str(r) for r in roots)
    found = find_profile_runs(name, roots)
    if not found.paths:
        others = ", ".join(sorted(found.others)) or "none"
        raise RtaxError(
            f"history: no recording of profile {name!r} under {where} (profiles recorded: {others})"
        )
    runs = [run_figures(p) for p in found.paths]
    doc = history_document(name, runs, args.phase, args.cell, min_effect.rel, min_effect.abs_ms)
    doc["skipped"] = found.skipped
    doc["left_out"] = found.left_out
    if not doc["series"]:
        raise RtaxError(
            f"history: no cell of profile {name!r} matches --cell {' '.join(args.cell)}"
        )
    if args.format == "json":
        output.print_json(doc)
        return 0
    for why in found.skipped:  # a file's name under --dir is anyone's text: one visible line
        print(f"rtax: note: skipped (unreadable): {error_line(why)}", file=sys.stderr)
    out = out_console()
    older = f" (the newest; {found.left_out:,} older left out)" if found.left_out else ""
    out.print(f"rtax history {name}: {doc['runs']} runs{older} under {where}; {doc['method']}")
    for series in doc["series"]:
        out.print(render_series(series, list(args.phase)))
    return 0


COMMAND = Command(
    "history",
    "each phase's P50 run after run, per cell, and where it stepped",
    add_arguments,
    run,
    epilog=EPILOG,
)
