"""The `rtax/1` recording: JSON Lines, one event a line, flushed after every line.

Writer and reader live side by side; the events themselves (their fields, encoding,
decoding and the format's history) are defined in `model.events`.
"""

from __future__ import annotations

import errno
import gc
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rtax_tui.model.events import (
    EVENT_CHECKS,
    EVENT_FIELDS,
    FORMAT,
    DecodeError,
    SinkError,
    check_event,
    decode,
    encode,
)
from rtax_tui.model.inputs import MIB, RECORDING_MAX, read_input_chunks
from rtax_tui.model.paths import finished, temp_beside, umask
from rtax_tui.model.spec import RtaxError

__all__ = [
    "EVENT_FIELDS",
    "Recording",
    "RecordingError",
    "RecordingWriteError",
    "RecordingWriter",
    "encode",
]


class RecordingError(RtaxError):
    pass


class RecordingWriteError(SinkError):
    """The recording could not take a line (ENOSPC, EIO, EFBIG...): the file was cut back
    to its last complete line, which every reader reads; nothing is written after."""

    def __init__(self, path: str, strerror: str, lines: int) -> None:
        super().__init__(
            f"{path}: cannot write the recording ({strerror}) after {lines} events; "
            "the run stopped and the file ends at its last complete line"
        )
        self.path = path
        self.lines = lines
        self.strerror = strerror


class RecordingWriter:
    """Appends events to a file (or a stream) and flushes each line at once.

    A file's line is written whole or not at all: a write that fails part-way (a full disk)
    is cut back with `ftruncate` to the end of the last complete line and raises
    `RecordingWriteError`; the writer then takes nothing more."""

    def __init__(self, stream: IO[bytes], path: Path | None = None, fsync: bool = False) -> None:
        self._stream = stream
        self.path = path
        self._fsync = fsync
        self.closed = False
        self.failed = False
        self.lines = 0
        self._end = 0  # the end of the last complete line, in bytes (files only)
        self._pending: str | None = None  # the temporary name, until linked to `path`
        self._publish_on_header = False
        self.published = path is not None

    @classmethod
    def open(cls, path: Path, *, publish: str = "header") -> RecordingWriter:
        """A new recording at `path`, never one that exists. It is written under a
        temporary name beside `path` (`.NAME.XXXX.part`) and linked into place when its
        first line (the header) is whole (`publish="header"`), or when the writer's owner
        calls `publish()` (`publish="explicit"`: a file that is only kept whole). So the
        name never holds an empty or headless file, whatever signal comes when; a writer
        closed before that removes its temporary file."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a directory of the path should be
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path)) from None
        try:
            os.lstat(path)  # a name too long, a directory not there: the error now
        except FileNotFoundError:
            pass
        else:
            raise FileExistsError(errno.EEXIST, "File exists", str(path))
        fd, tmp = temp_beside(path)  # removed on a stop signal until it is finished
        try:
            os.fchmod(fd, 0o666 & ~umask())
            writer = cls(os.fdopen(fd, "wb", buffering=0), path)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            finished(tmp)
            raise
        writer._pending = tmp
        writer._publish_on_header = publish == "header"
        writer.published = False
        return writer

    def publish(self) -> None:
        """Link the temporary file to its name (FileExistsError when another file took
        the name meanwhile: it is never replaced), then remove the temporary name."""
        if self._pending is None or self.path is None:
            return
        os.link(self._pending, self.path)
        self.published = True
        tmp, self._pending = self._pending, None
        try:
            os.unlink(tmp)
        except OSError:
            pass
        finished(tmp)

    def write(self, event: dict[str, Any]) -> None:
        if self.closed or self.failed:
            return
        line = encode(event)
        if self.path is None:  # a stream: its reader's errors are the caller's to judge
            self._stream.write(line)
            self._stream.flush()
        else:
            fd = self._stream.fileno()
            try:
                view = memoryview(line)
                while view:  # os.write may write part of it (a disk filling up)
                    view = view[os.write(fd, view) :]
                if self._fsync:
                    os.fsync(fd)
            except OSError as exc:
                self.failed = True
                try:
                    os.ftruncate(fd, self._end)
                except OSError:
                    pass
                raise RecordingWriteError(
                    str(self.path), exc.strerror or str(exc), self.lines
                ) from None
            self._end += len(line)
            if self._publish_on_header and self._pending is not None:
                try:
                    self.publish()
                except OSError as exc:
                    self.failed = True
                    raise RecordingWriteError(
                        str(self.path), exc.strerror or str(exc), self.lines
                    ) from None
        self.lines += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.path is not None:
                self._stream.close()
        if self._pending is not None:  # never published: nothing is kept
            tmp, self._pending = self._pending, None
            try:
                os.unlink(tmp)
            except OSError:
                pass
            finished(tmp)


@dataclass
class Recording:
    """A recording read back: the header, the events and what was skipped."""

    path: str
    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    torn_tail: bool = False

    @property
    def end(self) -> dict[str, Any] | None:
        ev: dict[str, Any]  # what reversed() yields is not typed
        for ev in reversed(self.events):
            if ev.get("type") == "run_end":
                return ev
        return None


def _check_event(path: str, lineno: int, ev: Any) -> dict[str, Any]:
    why = check_event(ev)
    if why is not None:
        raise RecordingError(f"{path}:{lineno}: {why}")
    return ev  # type: ignore[no-any-return]


def _parse(path: str, lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        ev = decode(raw)
    except DecodeError as exc:
        raise RecordingError(f"{path}:{lineno}: not JSON ({exc})") from None
    return _check_event(path, lineno, ev)


# The longest line rtax reads in a recording: the header (the resolved profile, the
# hosts' facts) is the longest rtax writes. Every reader stops at a longer one (a
# crafted file of a header and 8 GiB of NULs, sparse, cost its reader all its memory).
LINE_MAX = 16 << 20
HEADER_MAX = LINE_MAX


def line_too_long(name: str, lineno: int) -> RecordingError:
    return RecordingError(f"{name}:{lineno}: a line longer than rtax reads ({LINE_MAX >> 20} MiB)")


def read_recording(path: str | Path) -> Recording:
    p = str(path)
    return read_bytes(p, _read_bounded(p))


def _read_bounded(name: str) -> bytes:
    """The recording's bytes, read a chunk at a time: no line longer than LINE_MAX is
    read whole (the error names it)."""
    got: list[bytes] = []
    open_line = 0  # bytes since the last newline
    lines = 0
    for data in read_input_chunks(name, "the recording", RECORDING_MAX, RecordingError, chunk=MIB):
        last = data.rfind(b"\n")
        if last < 0:
            open_line += len(data)
        else:
            first = data.find(b"\n")
            if open_line + first > LINE_MAX:
                raise line_too_long(name, lines + 1)
            lines += data.count(b"\n")
            open_line = len(data) - last - 1
        if open_line > LINE_MAX:
            raise line_too_long(name, lines + 1)
        got.append(data)
    return b"".join(got)


def read_header(path: str | Path) -> dict[str, Any]:
    """The `run` header of a recording, its first line alone (a recording larger than
    memory is not read for it)."""
    name = str(path)
    # read as every input is (a regular file, opened without blocking: a FIFO is refused,
    # not waited on), a chunk at a time until the first newline
    chunks = read_input_chunks(path, "the recording", RECORDING_MAX, RecordingError, chunk=MIB)
    got: list[bytes] = []
    size = 0
    try:
        for data in chunks:
            end = data.find(b"\n")
            got.append(data if end < 0 else data[: end + 1])
            size += len(got[-1])
            if end >= 0 or size > HEADER_MAX:
                break
    finally:
        chunks.close()
    raw = b"".join(got)
    if len(raw) > HEADER_MAX:
        raise line_too_long(name, 1)
    ev = parse_line(name, 1, raw) if raw.endswith(b"\n") else parse_tail(name, 1, raw, None)
    if ev is None:
        raise RecordingError(f"{name}: empty recording (no `run` header)")
    return check_header(name, 1, ev)


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


def parse_line(name: str, lineno: int, raw: bytes) -> dict[str, Any] | None:
    """One whole line: its event, checked against the schema; None for a blank line;
    an error of one line naming file and line (and why) for any other."""
    try:
        ev: dict[str, Any] = decode(raw)
        fits = EVENT_CHECKS[ev["type"]](ev)  # a missing field raises KeyError
    except Exception:
        fits = False
    if not fits:
        if not raw.strip():
            return None
        ev = _parse(name, lineno, raw)  # raises with the precise reason
    return ev


def parse_tail(
    name: str, lineno: int, tail: bytes, header: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A last line with no newline (not blank): its event (checked as the header when
    there is none yet), or None when it does not parse: a torn write, skipped."""
    try:
        ev = _parse(name, lineno, tail)
        if header is None:
            return check_header(name, lineno, ev)
        return ev
    except RecordingError:
        return None


def _read_lines(name: str, data: bytes) -> Recording:
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the data ends with a newline
    parse = parse_line
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    append = events.append
    for lineno, raw in enumerate(lines, 1):
        ev = parse(name, lineno, raw)
        if ev is None:
            continue
        if header is None:
            header = check_header(name, lineno, ev)
            continue
        append(ev)
    torn = False
    if tail.strip():
        ev = parse_tail(name, len(lines) + 1, tail, header)
        if ev is None:
            torn = True
        elif header is None:
            header = ev
        else:
            append(ev)
    if header is None:
        raise RecordingError(f"{name}: empty recording (no `run` header)")
    return Recording(name, header, events, torn_tail=torn)


def check_header(name: str, lineno: int, ev: dict[str, Any]) -> dict[str, Any]:
    if ev.get("type") != "run":
        raise RecordingError(f"{name}:{lineno}: the first event must be `run`")
    if ev.get("format") != FORMAT:
        raise RecordingError(f"{name}:{lineno}: format {ev.get('format')!r} is not {FORMAT!r}")
    why = header_fields_wrong(ev)
    if why is not None:
        raise RecordingError(f"{name}:{lineno}: {why}")
    return ev


_COUNTS = ("blocked", "held", "breached", "n/a", "promised")


def _str_list(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def _boundary_wrong(b: Any) -> str | None:
    """A driver's `boundary` in the header, as `render.reporting.boundary_line` and the
    console's boundary view read it."""
    if not isinstance(b, dict):
        return "expected an object"
    for key in ("status", "probed_at"):
        if b.get(key) is not None and not isinstance(b[key], str):
            return f"{key}: expected a string"
    summary = b.get("summary")
    if summary is None:
        return None
    if not isinstance(summary, dict):
        return "summary: expected an object"
    for key in _COUNTS:
        v = summary.get(key)
        if v is not None and (type(v) is not int or v < 0):
            return f"summary.{key}: expected a count"
    for key in ("breached_checks", "broken_promises", "unchecked_promises"):
        if not _str_list(summary.get(key)):
            return f"summary.{key}: expected a list of strings"
    return None


def thresholds_wrong(table: Any) -> str | None:
    """What is wrong in the shape of a `[thresholds]` table as a header holds it (keys to
    strings or lists of strings; each text is parsed where it is used), as `.KEY: why`
    or `: why`; None when nothing is."""
    if not isinstance(table, dict):
        return ": expected an object"
    for key, value in table.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            return f".{key}: expected a string or a list of strings"
    return None


def header_fields_wrong(ev: dict[str, Any]) -> str | None:
    """What is wrong in a `run` header's nested fields, to the depth its readers (report,
    compare, the console) use them; None when nothing is. The event schema checks the
    top level (`check_event`); here: `profile.name`, `limits`, and each
    `hosts.HOST.drivers.DRIVER` (`boundary`, `integrity`, `limits`)."""
    profile = ev.get("profile")
    if isinstance(profile, dict):
        for key in ("name", "path"):
            if profile.get(key) is not None and not isinstance(profile[key], str):
                return f"run.profile.{key}: expected a string"
        thresholds = profile.get("thresholds")
        if thresholds is not None:
            why = thresholds_wrong(thresholds)
            if why is not None:
                return f"run.profile.thresholds{why}"
    limits = ev.get("limits")
    if isinstance(limits, dict):
        for k, v in limits.items():
            if v is not None and not isinstance(v, str | int | float):
                return f"run.limits.{k}: expected a number or a string"
    hosts = ev.get("hosts")
    if not isinstance(hosts, dict):
        return None  # the schema's
    for host, facts in hosts.items():
        if not isinstance(facts, dict):
            return f"run.hosts.{host}: expected an object"
        drivers = facts.get("drivers")
        if drivers is None:
            continue
        if not isinstance(drivers, dict):
            return f"run.hosts.{host}.drivers: expected an object"
        for d, df in drivers.items():
            where = f"run.hosts.{host}.drivers.{d}"
            if not isinstance(df, dict):
                return f"{where}: expected an object"
            if "boundary" in df:
                why = _boundary_wrong(df["boundary"])
                if why is not None:
                    return f"{where}.boundary: {why}"
            integrity = df.get("integrity")
            if integrity is not None:
                if not isinstance(integrity, dict):
                    return f"{where}.integrity: expected an object"
                for ch, v in integrity.items():
                    if v is not None and not isinstance(v, str):
                        return f"{where}.integrity.{ch}: expected a string or null"
            if df.get("limits") is not None and not isinstance(df["limits"], str):
                return f"{where}.limits: expected a string"
    return None
