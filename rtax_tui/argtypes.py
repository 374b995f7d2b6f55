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
