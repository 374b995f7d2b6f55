"""argparse value types shared by rtax's commands."""

from __future__ import annotations

import argparse


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _nonneg(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n


def one_line_errors(parser: argparse.ArgumentParser, name: str) -> None:
    """Bad input to `parser` is one line, `rtax NAME: error: ...`, and exit status 2
    (argparse's own error prints the usage first)."""
    import sys

    def error(message: str) -> None:
        print(f"rtax {name}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign,assignment]


def _sizes(value: str) -> tuple[int, ...]:
    """A comma-separated list of batch sizes, each at least 1 (`--sizes 16,32,48`)."""
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {value!r}") from None
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError("each size must be at least 1")
    return sizes
