"""argparse value types shared by rtax's commands: each bounded, each with a human name.

A bad value is one line naming the option and what it takes (`--trials: an integer
1..1000000, got 'x'`), never argparse's `invalid _positive value`; `one_line_errors`
makes every parser print that line alone (no usage dump) and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import IO

from rtax_tui.model import runlock
from rtax_tui.model.events import error_line
from rtax_tui.model.inputs import (
    BATCH_MAX,
    CONCURRENCY_MAX,
    INT64_MAX,
    INT64_MIN,
    PREFIXES_MAX,
    REPEAT_MAX,
    TRIALS_MAX,
)
from rtax_tui.model.precision import parse_duration, parse_precision


def integer(lo: int, hi: int, name: str) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi]; `name` is what argparse calls it."""

    def parse(value: str) -> int:
        text = value.strip()
        if len(text) > 25:  # int() of thousands of digits is slow, and past 64 bits anyway
            raise argparse.ArgumentTypeError(f"expected an integer {lo}..{hi}, got a long string")
        if not text.isascii():  # int() reads any script's digits: `--port ٣` was port 3
            raise argparse.ArgumentTypeError(
                f"expected an integer {lo}..{hi} in ASCII digits, got {value!r}"
            )
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer {lo}..{hi}, got {value!r}"
            ) from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer {lo}..{hi}, got {n}")
        return n

    parse.__name__ = name
    return parse


def run_label(value: str) -> str:
    """An argparse type: a run's id as rtax names what the run made (`runlock.safe_label`:
    letters, digits, `_.-`, at most 40). An empty one would match every run (`cleanup
    --run ""` cleaned them all), another character nothing a run ever made."""
    if not value or runlock.safe_label(value) != value:
        raise argparse.ArgumentTypeError(
            f"expected a run id (letters, digits and _.-, at most 40; as `rtax report` "
            f"prints it), got {value!r}"
        )
    return value


run_label.__name__ = "run id"

# the bounded types rtax's options take
trials = integer(1, TRIALS_MAX, "trials")
warmup = integer(0, TRIALS_MAX, "warmup")
concurrency = integer(1, CONCURRENCY_MAX, "concurrency")
seed = integer(INT64_MIN, INT64_MAX, "seed")
repeat = integer(1, REPEAT_MAX, "repeat")
prefixes = integer(1, PREFIXES_MAX, "prefixes")
port = integer(1, 65535, "port")
# `project`: trajectories and steps are only multiplied, never iterated
trajectories = integer(1, 10**15, "trajectories")
steps = integer(1, 10**9, "steps")


def checked(parse: Callable[[str], object], name: str) -> Callable[[str], str]:
    """An argparse type: the text as given, once `parse` (a model parser, which a profile's
    key goes through too) takes it; its ValueError is the one-line error."""

    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value.strip()

    check.__name__ = name
    return check


precision = checked(parse_precision, "precision")  # "5%"
duration = checked(parse_duration, "duration")  # "10m"
# the earlier names (any positive 64-bit integer; 0 or more)
_positive = integer(1, INT64_MAX, "positive integer")
_nonneg = integer(0, INT64_MAX, "integer")


def one_line_errors(parser: argparse.ArgumentParser, name: str) -> None:
    """Bad input to `parser` is one line, `rtax NAME: error: ...`, and exit status 2
    (argparse's own error prints the usage first)."""

    def error(message: str) -> None:
        print(f"rtax {name}: error: {error_line(message)}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign,assignment]
    parser._print_message = _print_message  # type: ignore[method-assign,assignment]


def _print_message(message: str | None, file: IO[str] | None = None) -> None:
    """argparse's writer of `--help` and `--version`, which swallows a write error (a
    help into /dev/full said nothing and exited 0): here the error goes on to rtax's one
    writer (`commands/output.py`: a closed pipe 141, a full disk one line and 1)."""
    if message:
        f = file or sys.stderr
        f.write(message)
        f.flush()


def one_line_errors_everywhere(parser: argparse.ArgumentParser, name: str = "") -> None:
    """`one_line_errors` on `parser` and on every subparser beneath it (`rtax: error:`
    for the top parser, `rtax run: error:` for `run`, ...)."""
    if name:
        one_line_errors(parser, name)
    else:

        def error(message: str) -> None:
            print(f"rtax: error: {error_line(message)}", file=sys.stderr)
            raise SystemExit(2)

        parser.error = error  # type: ignore[method-assign,assignment]
        parser._print_message = _print_message  # type: ignore[method-assign,assignment]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                one_line_errors_everywhere(sub, f"{name} {sub_name}".strip())


def _sizes(value: str) -> tuple[int, ...]:
    """A comma-separated list of batch sizes, each 1..BATCH_MAX (`--sizes 16,32,48`)."""
    parts = [v.strip() for v in value.split(",") if v.strip()]
    if not parts or len(parts) > 1000:
        raise argparse.ArgumentTypeError("expected 1 to 1000 sizes, comma-separated")
    size = integer(1, BATCH_MAX, "size")
    try:
        return tuple(size(v) for v in parts)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"each size: {exc}") from None
