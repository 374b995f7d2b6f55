"""The `rtax/1` recording: JSON Lines, one event a line, flushed after every line.

Writer and reader live side by side so the format has one definition.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from rtax_tui.core.model import FORMAT, RtaxError

EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "run": ("format", "run_id", "started_at", "seed", "argv", "profile", "hosts"),
    "trial_start": ("trial", "cell", "host", "driver", "workload", "channel", "warmup", "batch"),
    "phase": ("trial", "name", "dur_ns", "ok"),
    "action": ("trial", "i", "dur_ns", "rc", "ok", "out_bytes"),
    "trial_end": ("trial", "ok", "valid", "error"),
    "barrier": ("batch", "cell", "size", "arrived", "released", "ok", "deadline_s"),
    "run_end": ("status", "trials"),
    # one boundary check of `rtax probe` (rtax/1 since the format's first addition)
    "probe": ("host", "driver", "channel", "check", "result", "evidence"),
    # one timed prefix preparation of `rtax traj prepare` (rtax/1, second addition)
    "prep": ("file", "format", "k", "steps", "dur_ns", "ok"),
}


class RecordingError(RtaxError):
    pass


def encode(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event) + b"\n"


class RecordingWriter:
    """Appends events to a file (or a stream) and flushes each line at once."""

    def __init__(self, stream: IO[bytes], path: Path | None = None, fsync: bool = False) -> None:
        self._stream = stream
        self.path = path
        self._fsync = fsync
        self.closed = False

    @classmethod
    def open(cls, path: Path) -> RecordingWriter:
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(open(path, "xb", buffering=0), path)  # noqa: SIM115

    def write(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        self._stream.write(encode(event))
        self._stream.flush()
        if self._fsync:
            os.fsync(self._stream.fileno())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.path is not None:
                self._stream.close()


@dataclass
class Recording:
    """A recording read back: the header, the events and what was skipped."""

    path: str
    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    torn_tail: bool = False

    @property
    def end(self) -> dict[str, Any] | None:
        for ev in reversed(self.events):
            if ev.get("type") == "run_end":
                return ev
        return None


def _check_event(path: str, lineno: int, ev: Any) -> dict[str, Any]:
    if not isinstance(ev, dict):
        raise RecordingError(f"{path}:{lineno}: an event must be a JSON object")
    etype = ev.get("type")
    fields = EVENT_FIELDS.get(etype)  # type: ignore[arg-type]
    if fields is None:
        raise RecordingError(f"{path}:{lineno}: unknown event type {etype!r}")
    missing = [f for f in fields if f not in ev]
    if missing:
        raise RecordingError(f"{path}:{lineno}: {etype} event lacks {', '.join(missing)}")
    return ev


def _parse(path: str, lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        ev = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordingError(f"{path}:{lineno}: not JSON ({exc})") from None
    return _check_event(path, lineno, ev)


def read_recording(path: str | Path) -> Recording:
    p = str(path)
    try:
        data = Path(p).read_bytes()
    except OSError as exc:
        raise RecordingError(f"{p}: cannot open ({exc.strerror})") from None
    return read_bytes(p, data)


def read_stream(name: str, lines: Iterable[bytes]) -> Recording:
    return read_bytes(name, b"".join(lines))


def read_bytes(name: str, data: bytes) -> Recording:
    """Parse a whole recording. A last line with no newline that does not parse is a torn
    write (the run was killed mid-line) and is skipped; any other bad line is an error."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a million small dicts would trigger many useless collections
    try:
        return _read_lines(name, data)
    finally:
        if gc_was_enabled:
            gc.enable()


def _read_lines(name: str, data: bytes) -> Recording:
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the data ends with a newline
    loads = orjson.loads
    fields_of = EVENT_FIELDS
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    append = events.append
    for lineno, raw in enumerate(lines, 1):
        try:
            ev = loads(raw)
            fields = fields_of[ev["type"]]
            for f in fields:
                ev[f]  # noqa: B018 - a missing field raises KeyError
        except Exception:
            if not raw.strip():
                continue
            ev = _parse(name, lineno, raw)  # raises with the precise reason
        if header is None:
            header = _check_header(name, lineno, ev)
            continue
        append(ev)
    torn = False
    if tail.strip():
        try:
            ev = _parse(name, len(lines) + 1, tail)
            if header is None:
                header = _check_header(name, len(lines) + 1, ev)
            else:
                append(ev)
        except RecordingError:
            torn = True
    if header is None:
        raise RecordingError(f"{name}: empty recording (no `run` header)")
    return Recording(name, header, events, torn_tail=torn)


def _check_header(name: str, lineno: int, ev: dict[str, Any]) -> dict[str, Any]:
    if ev.get("type") != "run":
        raise RecordingError(f"{name}:{lineno}: the first event must be `run`")
    if ev.get("format") != FORMAT:
        raise RecordingError(f"{name}:{lineno}: format {ev.get('format')!r} is not {FORMAT!r}")
    return ev
