"""Command line: `rtax` and its subcommands, each a `Command` of its own module (its
parser's set-up and its run); `COMMANDS` lists them in the order `rtax --help` shows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rtax_tui import __version__
from rtax_tui.commands import (
    assets,
    cleanup,
    compare,
    doctor,
    history_cli,
    home,
    images,
    output,
    plot_cli,
    probe,
    project,
    replay,
    report,
    reproduce,
    run,
    serve,
    traj_cli,
)
from rtax_tui.commands.argtypes import one_line_errors_everywhere
from rtax_tui.commands.command import Command
from rtax_tui.model import paths
from rtax_tui.model.events import error_line
from rtax_tui.model.spec import RtaxError

EXAMPLES = """\
examples:
  rtax                                   the console on the default profile (T0, T1; local, stage)
  rtax run profiles/t0.toml --trials 50  run a profile in the console (--headless: no console)
  rtax home                              the launcher: change a run, start it, compare runs
  rtax replay recordings/examples/t0-local-stage.jsonl   play a recording back in the console
  rtax run t2 --driver local,stage -o r.jsonl
  rtax run t0 -o - | jq .                stream events to another program
  rtax report r.jsonl --format markdown
  rtax compare before.jsonl after.jsonl --fail-on regression   exit 1 on a regression
  rtax history t0 --phase create,total   each phase's P50 run after run, and its steps
  rtax run t0 --threshold 'stage/t0/exec create+ready p95 < 20ms' --threshold 'failed == 0'
  rtax project r.jsonl --trajectories 1000000 --steps 150
  rtax plot r.jsonl --kind breakdown -o breakdown.svg   a figure (also cold-start, cdf, ...)
  rtax serve replay r.jsonl              the console in a browser, http://127.0.0.1:8000
  rtax project r.jsonl --steps-from runs/*.traj   S from real trajectories' step counts
  rtax doctor
  rtax probe --driver stage,docker       what each substrate keeps out, measured from inside
  rtax traj inspect session.jsonl        the steps of a real agent trajectory (seven formats)
"""


def check_console(argv: list[str]) -> None:
    """What the console of `rtax serve ARGS` loads first, loaded now (nothing started):
    a bad flag, profile or recording is one line before serving, not a page per tab."""
    args = build_parser().parse_args(argv)
    command = BY_NAME.get(args.command, DEFAULT)
    if command.load is None:
        raise RtaxError(
            f"serve: `rtax {args.command}` is not a console; try `replay FILE` or `run P`"
        )
    if getattr(args, "headless", False):  # each tab would get a run and no console
        raise RtaxError("serve: --headless runs without the console that serve shows; drop it")
    command.load(args)


COMMANDS: tuple[Command, ...] = (
    run.COMMAND,
    replay.COMMAND,
    home.COMMAND,
    report.COMMAND,
    compare.COMMAND,
    history_cli.COMMAND,
    project.COMMAND,
    reproduce.COMMAND,
    probe.COMMAND,
    traj_cli.COMMAND,
    plot_cli.COMMAND,
    serve.command(check_console),
    doctor.COMMAND,
    assets.COMMAND,
    images.COMMAND,
    cleanup.COMMAND,
)
BY_NAME = {c.name: c for c in COMMANDS}
# `rtax` alone: the console on the default profile, as `rtax run default`
DEFAULT = Command("", "", lambda p: None, run.run, load=run.load)


class _CommandsFormatter(argparse.RawDescriptionHelpFormatter):
    """The commands' help column past the longest name: argparse (3.11) measures the
    names two columns short of where it draws them, so `reproduce` had its help on the
    next line."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action._get_subactions():
                width = len(self._format_action_invocation(sub)) + self._current_indent + 2
                self._action_max_length = max(self._action_max_length, width)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rtax",
        description="Measure the rollout infrastructure tax of execution substrates, "
        "phase by phase (create, ready, actions, teardown, orchestration).",
        epilog=EXAMPLES,
        formatter_class=_CommandsFormatter,
    )
    p.add_argument("--version", action="version", version=f"rtax {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(sub)
    one_line_errors_everywhere(p)
    return p


# where each command's paths come from, by the flag or argument that gave them
PATH_FLAGS = (
    ("profile", "PROFILE"),
    ("output", "-o"),
    ("record", "--record"),
    ("file", "FILE"),
    ("a", "A"),
    ("b", "B"),
    ("steps_from", "--steps-from"),
    ("paths", "FILE_OR_DIR"),
    ("recordings", "REC"),
    ("workspace", "--workspace"),
    ("identity", "--identity"),
    ("known_hosts", "--known-hosts"),
)


def _path_flags(args: argparse.Namespace) -> list[tuple[str, object]]:
    names = BY_NAME.get(args.command, DEFAULT).path_names
    given: list[tuple[str, object]] = []
    for key, flag in PATH_FLAGS:
        value = getattr(args, key, None)
        if value:
            given.append((names.get(key, flag), value))
    return given


def main(argv: Sequence[str] | None = None) -> int:
    # A closed standard descriptor is held first, so that no file takes its number (the
    # stop signals are handled already: `rtax_tui.commands.main`, model/signals.py).
    output.prepare()
    return output.guarded(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        with paths.taking(*_path_flags(args)):  # type: ignore[arg-type]
            return _dispatch(args, args_list)
    except RtaxError as exc:
        print(f"rtax: error: {error_line(str(exc))}", file=sys.stderr)
        return 2
    except RecursionError:  # a reader's last line of defence: inputs are bounded before
        print("rtax: error: an input is nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        paths.discard_unfinished()  # a signal between a file's making and its owner's try
        print("rtax: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if output.is_stream_error(exc):
            raise  # stdout's: `output.guarded` says it
        print(f"rtax: error: {exc.strerror or exc}{output.where(exc)}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    return BY_NAME.get(args.command, DEFAULT).run(args, ["rtax", *argv])
