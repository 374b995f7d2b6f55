"""Reading a trajectory's bytes: whole-file JSON or JSON Lines, errors as `FILE:LINE: what`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from rtax_tui.engine.traj.model import TrajError
from rtax_tui.model.inputs import TRAJECTORY_MAX, read_input


def read_bytes(path: Path) -> bytes:
    """A trajectory file's bytes: a regular file of bounded size only (model.inputs)."""
    return read_input(path, "the trajectory", TRAJECTORY_MAX, TrajError, ":1")


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


# The fields every format's readers branch on, where a record has them: strings (a list or
# an object there would reach a set or dict lookup). The formats' own fields are checked
# by their readers (`ShapeError`, naming the field).
RECORD_STRINGS = ("type", "record_type", "role", "kind")


def iter_lines(path: Path | str, data: bytes | JsonLines) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line is an error."""
    return iter(data if isinstance(data, JsonLines) else JsonLines(path, data))


class JsonLines:
    """A JSON Lines file's records, each line decoded once however often they are walked:
    format detection walks the first few, then the reader all of them (before, each walk
    decoded every line again). A walk yields what a plain line-by-line decode yields and
    raises where it raises, at the first bad line it reaches, so a reader's own errors
    keep their order against a bad line further down."""

    __slots__ = ("_done", "_lines", "_next", "path")

    def __init__(self, path: Path | str, data: bytes) -> None:
        self.path = path
        self._lines = data.split(b"\n")
        self._next = 0  # index in _lines of the next line to decode
        self._done: list[tuple[int, dict[str, Any]]] = []

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        done, lines, path = self._done, self._lines, self.path
        i = 0
        while True:
            if i < len(done):
                yield done[i]
                i += 1
                continue
            j = self._next
            if j >= len(lines):
                return
            raw = lines[j]
            if raw.strip():
                done.append((j + 1, _record(path, raw, j + 1)))
            self._next = j + 1


def _record(path: Path | str, raw: bytes, lineno: int) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise json_error(path, raw, lineno) from None
    if not isinstance(obj, dict):
        raise TrajError(f"{path}:{lineno}: a record must be a JSON object")
    for key in RECORD_STRINGS:
        v = obj.get(key)
        if v is not None and not isinstance(v, str):
            raise TrajError(f"{path}:{lineno}: {key}: expected a string")
    return obj


def first_record(data: bytes) -> tuple[int, Any] | None:
    """The first non-blank line of the first 64 parsed, or None when it is not JSON."""
    first = first_line(data)
    return None if first is None else first[:2]


def first_line(data: bytes) -> tuple[int, Any, int] | None:
    """`first_record` and the offset where that line ends (without copying the rest)."""
    pos = 0
    for lineno in range(1, 65):
        end = data.find(b"\n", pos)
        stop = len(data) if end < 0 else end
        raw = data[pos:stop]
        if raw.strip():
            try:
                return lineno, orjson.loads(raw), stop
            except orjson.JSONDecodeError:
                return None
        if end < 0:
            return None
        pos = end + 1
    return None


_NOT_JSON_SPACE = re.compile(rb"[^ \t\r\n]")


def more_after(data: bytes, offset: int) -> bool:
    """Whether anything but JSON whitespace follows `offset`. After a first line that is a
    whole JSON value, that means the file is not one JSON value (a value, then more), so
    the whole-file parse (about 0.7 ms on a 0.75 MB JSONL file) need not be tried."""
    return _NOT_JSON_SPACE.search(data, offset) is not None


def locate(data: bytes, where: tuple[str | int, ...]) -> int:
    """The line where the value at `where` (keys and indices) starts in a JSON text; the
    deepest part found when the path does not go all the way. Used only to report errors."""
    text = data.decode("utf-8", errors="replace")
    scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    ws = " \t\r\n"

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    pos = skip(0)
    try:
        for w in where:
            if isinstance(w, int) and text[pos] == "[":
                i, n = skip(pos + 1), 0
                while n < w:
                    _, i = scan(text, i)
                    i = skip(i)
                    if text[i] != ",":
                        raise ValueError
                    i, n = skip(i + 1), n + 1
                pos = i
            elif isinstance(w, str) and text[pos] == "{":
                i = skip(pos + 1)
                while True:
                    key, i = scan(text, i)
                    i = skip(skip(i) + 1)  # past ':'
                    if key == w:
                        break
                    _, i = scan(text, i)
                    i = skip(i)
                    if text[i] != ",":
                        raise ValueError
                    i = skip(i + 1)
                pos = i
            else:
                break
    except (ValueError, IndexError, StopIteration):
        pass
    return text.count("\n", 0, pos) + 1
