"""The `rtax/1` recording: JSON Lines, one event a line, flushed after every line.

Writer and reader live side by side so the format has one definition.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
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


def iter_lines(path: str, lines: Iterable[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parse lines; a bad last line without a newline is a torn write and is skipped."""
    pending: tuple[int, bytes] | None = None
    for lineno, raw in enumerate(lines, 1):
        if pending is not None:
            yield pending[0], _parse(path, *pending)
            pending = None
        if not raw.strip():
            continue
        if raw.endswith(b"\n"):
            yield lineno, _parse(path, lineno, raw)
        else:
            pending = (lineno, raw)
    if pending is not None:
        try:
            yield pending[0], _parse(path, *pending)
        except RecordingError:
            yield pending[0], {"type": "_torn"}


def _parse(path: str, lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        ev = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordingError(f"{path}:{lineno}: not JSON ({exc})") from None
    return _check_event(path, lineno, ev)


def read_recording(path: str | Path) -> Recording:
    p = str(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115
    except OSError as exc:
        raise RecordingError(f"{p}: cannot open ({exc.strerror})") from None
    with fh:
        return read_stream(p, fh)


def read_stream(name: str, lines: Iterable[bytes]) -> Recording:
    header: dict[str, Any] | None = None
    rec: Recording | None = None
    for lineno, ev in iter_lines(name, lines):
        if ev["type"] == "_torn":
            if rec is not None:
                rec.torn_tail = True
            continue
        if header is None:
            if ev["type"] != "run":
                raise RecordingError(f"{name}:{lineno}: the first event must be `run`")
            if ev.get("format") != FORMAT:
                raise RecordingError(
                    f"{name}:{lineno}: format {ev.get('format')!r} is not {FORMAT!r}"
                )
            header = ev
            rec = Recording(name, header)
            continue
        assert rec is not None
        rec.events.append(ev)
    if rec is None:
        raise RecordingError(f"{name}: empty recording (no `run` header)")
    return rec
