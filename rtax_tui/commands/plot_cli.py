"""`rtax plot`: the command-line side of `rtax_tui.render.plots` (arguments, one-line errors)."""

from __future__ import annotations

import argparse
import os

from rtax_tui.commands.command import Command
from rtax_tui.model.inputs import same_file
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import RtaxError
from rtax_tui.render.plots import KINDS, check_output, plot

PLOT_HELP = """\
kinds:
  breakdown   per cell, the mean measured trial stacked as create, ready, actions,
              teardown, orchestration (ms)
  cold-start  per substrate (host/driver) and tier (workload) and channel: P50 (point)
              and P95 (whisker) of create + ready, the time until the first command
              runs, each written at its value (ms, log axis)
  cdf         the distribution of each phase, one line a cell (ms, log axis)
  trajectory  completion time against trajectory length, and the normalized
              composition of the mean trial at each length (needs several lengths:
              the trajectory profile)
  capacity    passed batches out of those run, per batch size and cell
  load        start-up P50 (and P95) against offered load: environments asked for at
              once (sequential, burst:N) and arrivals a second (rate:R); needs a run
              with [run] arrivals
  image       start-up (image + create + ready) P50 and P95 against the median bytes
              each trial's image delivery fetched, per cell and image mode; needs a
              run with [run] images

Several recordings go into one figure; a cell found in two of them is labelled with
its file name too, and keeps its colour (a line style or marker per recording), so a
before and an after pair up. Only measured trials count (not warm-up, ok, valid), as in
`rtax report`. Bad input: one line (`rtax: error: FILE:LINE: ...` for a bad
recording), exit status 2.

examples:
  rtax plot recordings/examples/t0-local-stage.jsonl --kind breakdown -o breakdown.svg
  rtax plot a.jsonl b.jsonl --kind cdf -o cdf.png
  rtax plot recordings/examples/trajectory-local-stage.jsonl --kind trajectory -o traj.svg
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recordings", nargs="+", metavar="REC", help="rtax/1 recordings")
    p.add_argument("--kind", required=True, choices=KINDS, help=", ".join(KINDS))
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.svg or FILE.png")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    check_output(args.output)  # before reading a large recording
    for rec in args.recordings:
        if same_file(args.output, rec):  # even with --force: a figure never replaces its data
            raise RtaxError(f"-o {args.output}: is the recording {rec}; name another file")
    if os.path.lexists(args.output) and not args.force:
        raise RtaxError(f"-o {args.output}: exists; overwrite it with --force")
    recs = [read_recording(path) for path in args.recordings]
    out = plot(recs, args.kind, args.output)
    print(out)
    return 0


COMMAND = Command(
    "plot",
    "draw a figure of recordings (.svg or .png)",
    add_arguments,
    run,
    description=(
        "rtax plot: figures of recordings, with matplotlib: the five of The Rollout "
        "Infrastructure Tax in Coding-Agent Reinforcement Learning (Peut, Dageli, Juki, "
        "Burazin; Daytona; arXiv 2607.01415, SoCC 2026), a load and an image figure."
    ),
    epilog=PLOT_HELP,
)
