"""`rtax compare A B`: median differences between two recordings, per cell."""

from __future__ import annotations

import argparse
import sys

from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT, judge, parse_min_effect, regressions
from rtax_tui.commands import output
from rtax_tui.commands.command import Command
from rtax_tui.commands.gating import (
    append_summary,
    change_text,
    compare_junit,
    refuse_inputs,
    write_junit,
)
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import RtaxError


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--format", choices=("table", "json"), default="table")
    c.add_argument(
        "--changed",
        action="store_true",
        help="also pair a cell with the one cell of b that differs from it in exactly one of "
        "host, driver, channel or mode (a rerun that changed one thing); never across "
        "workloads, image modes or arrival patterns",
    )
    c.add_argument(
        "--min-effect",
        default=DEFAULT_MIN_EFFECT,
        metavar="PCT,TIME",
        help="a difference smaller than this (all parts: a share of a's P50 and a time) is "
        # argparse formats a help with %: the default's own `%` doubled
        f"`same` whatever its p-value (default {DEFAULT_MIN_EFFECT.replace('%', '%%')})",
    )
    c.add_argument(
        "--fail-on",
        choices=("regression",),
        help="exit 1 when any row is slower in b (significant after Holm's correction, and "
        "beyond --min-effect)",
    )
    c.add_argument("--summary", metavar="FILE", help="append the comparison in Markdown to FILE")
    c.add_argument(
        "--junit", metavar="FILE", help="write the rows as JUnit XML (a `slower` row fails)"
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the statistics and their tables (Rich), 35 ms of imports that `rtax --help`
    # does not make
    from rtax_tui.analysis.report import compare_reports
    from rtax_tui.render.noise_render import compare_unstable_lines
    from rtax_tui.render.reporting import (
        compare_markdown,
        compare_programs_lines,
        out_console,
        render_compare,
    )

    refuse_inputs({"--summary": args.summary, "--junit": args.junit}, [args.a, args.b])
    min_effect = parse_min_effect(args.min_effect)
    rec_a, rec_b = read_recording(args.a), read_recording(args.b)
    cmp = compare_reports(rec_a, rec_b, changed=args.changed, min_effect=min_effect)
    if not cmp["rows"]:  # an empty table that exits 0 would read as "no difference"
        raise RtaxError(
            f"{args.a} and {args.b}: no cell with samples in common "
            "(compare runs of the same host, driver, workload and channel"
            + ("" if args.changed else "; --changed pairs cells that differ in one of them")
            + ")"
        )
    judge(cmp, min_effect)
    if args.format == "json":
        output.print_json(cmp)
    else:
        console = out_console()
        console.print(render_compare(cmp))
        for line in compare_programs_lines(cmp):  # its figures are not the substrate's alone
            console.print(line, soft_wrap=True, markup=False)
        for line in compare_unstable_lines(cmp):
            console.print(line, style="yellow", soft_wrap=True, markup=False)
    if args.summary:
        append_summary(args.summary, compare_markdown(cmp))
    if args.junit:
        write_junit(args.junit, compare_junit(cmp))
    worse = regressions(cmp)
    if args.fail_on == "regression" and worse:
        for r in worse:
            print(f"regression: {r['cell']} {r['phase']}: {change_text(r)}", file=sys.stderr)
        return 1
    return 0


COMMAND = Command(
    "compare", "median differences between two recordings, per cell", add_arguments, run
)
