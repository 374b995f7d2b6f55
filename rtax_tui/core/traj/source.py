"""Reading a trajectory's bytes: whole-file JSON or JSON Lines, errors as `FILE:LINE: what`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from rtax_tui.core.traj.model import TrajError


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TrajError(f"{path}:1: cannot read ({exc.strerror})") from None


def json_error(path: Path | str, data: bytes, first_line: int = 1) -> TrajError:
    """The precise place of a JSON syntax error, from the standard library's decoder."""
    try:
        json.loads(data)
    except json.JSONDecodeError as exc:
        return TrajError(f"{path}:{first_line + exc.lineno - 1}: not JSON ({exc.msg})")
    except (UnicodeDecodeError, RecursionError) as exc:
        return TrajError(f"{path}:{first_line}: not JSON ({exc.__class__.__name__})")
    return TrajError(f"{path}:{first_line}: not JSON")


def load_whole(data: bytes) -> tuple[bool, Any]:
    """(True, value) when the whole file is one JSON value."""
    try:
        return True, orjson.loads(data)
    except orjson.JSONDecodeError:
        return False, None


def iter_lines(path: Path | str, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line is an error."""
    loads = orjson.loads
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
        except orjson.JSONDecodeError:
            raise json_error(path, raw, lineno) from None
        if not isinstance(obj, dict):
            raise TrajError(f"{path}:{lineno}: a record must be a JSON object")
        yield lineno, obj


def first_record(data: bytes) -> tuple[int, Any] | None:
    """The first non-blank line parsed, or None when it is not JSON."""
    for lineno, raw in enumerate(data.split(b"\n", 64)[:64], 1):
        if raw.strip():
            try:
                return lineno, orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
    return None
