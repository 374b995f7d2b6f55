"""rtax's standard streams, for every command: what happens when they cannot be written.

A reader that goes away (`rtax report r.jsonl | head`) closes the pipe: rtax then ends
quietly with status 141 (128 + SIGPIPE), what a shell expects of a program killed by the
pipe, and no traceback. Any other write error on stdout (a full disk, `/dev/full`, a
stdout that was closed: `>&-`) is one line on stderr and status 1.

`prepare()` runs first in `main`: a standard descriptor that is closed (0, 1 or 2) is
held by /dev/null, so that no file rtax opens later (a recording) takes its number and
receives what was meant for the stream; a closed stdout then raises EBADF on its first
write, as it would have.

An error is stdout's only if a write to stdout raised it: `prepare()` puts stdout's
descriptor behind a writer that marks what its writes raise. An error of the same number
from anywhere else (a descriptor of rtax's own closed twice) is not taken for stdout's:
it is reported where it happened.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from collections.abc import Callable
from typing import TextIO

EXIT_PIPE = 128 + 13  # SIGPIPE


_MARK = "rtax_stdout"  # the attribute a write to stdout sets on what it raises


def _marked(exc: OSError) -> OSError:
    setattr(exc, _MARK, True)
    return exc


class StdoutRaw(io.RawIOBase):
    """stdout's descriptor, whose write errors say they are stdout's (`_os_write` is the
    system call: a test's double of a failing device overrides it)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def _os_write(self, b: object) -> int:
        return os.write(self._fd, b)  # type: ignore[arg-type]

    def write(self, b: object) -> int | None:
        try:
            return self._os_write(b)
        except BlockingIOError:
            return None  # BufferedWriter's convention: nothing written yet
        except OSError as exc:
            raise _marked(exc) from None


class _ClosedRaw(io.RawIOBase):
    """The stdout of a process started with it closed: every write fails with EBADF
    (until `silence`: then nothing is written, so interpreter shutdown stays quiet)."""

    silent = False

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        if self.silent:
            return len(b)  # type: ignore[arg-type]
        raise _marked(OSError(errno.EBADF, "standard output is closed"))


def prepare() -> None:
    """Hold every closed standard descriptor with /dev/null; a closed stdout fails its
    writes (EBADF) rather than writing to /dev/null."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        got = os.open(os.devnull, os.O_RDWR)
        if got != fd:
            os.dup2(got, fd, inheritable=True)
            os.close(got)
    if 1 in closed:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_ClosedRaw()), write_through=True)
    else:
        cur: TextIO | None = sys.stdout
        if cur is sys.__stdout__ and cur is not None:
            sys.stdout = _marking(cur)
    if 2 in closed and sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    if 0 in closed and sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115


def _marking(old: TextIO | io.TextIOWrapper) -> TextIO:
    """`old` (the interpreter's stdout) with the same encoding and buffering, written
    through `StdoutRaw`; `old` itself where it is not descriptor 1 (rtax run inside
    another program)."""
    try:
        if old.fileno() != 1:
            return old
        old.flush()
    except (AttributeError, OSError, ValueError):
        return old
    tty = os.isatty(1)
    return io.TextIOWrapper(
        io.BufferedWriter(StdoutRaw(1)),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=tty,
        write_through=False,
    )


def silence_stdout() -> None:
    """Nothing more reaches stdout: its descriptor becomes /dev/null (what is still
    buffered is dropped there at exit, with no "Exception ignored" message)."""
    try:
        fd = sys.stdout.fileno()  # 1, unless main runs inside another program (a test)
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd >= 0:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except OSError:
            pass
    raw = getattr(getattr(sys.stdout, "buffer", None), "raw", None)
    if isinstance(raw, _ClosedRaw):
        raw.silent = True


def is_stream_error(exc: BaseException) -> bool:
    """A failed write to stdout: an OSError a write to stdout raised (`prepare`)."""
    return isinstance(exc, OSError) and getattr(exc, _MARK, False) is True


def where(exc: OSError) -> str:
    """For an error no user can act on (EBADF: a descriptor of rtax's own used after it
    was closed, a bug), where it was raised: " (at FILE:LINE, in FUNCTION)"; else ""."""
    if exc.errno != errno.EBADF or exc.__traceback__ is None:
        return ""
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f" (at {code.co_filename}:{tb.tb_lineno}, in {code.co_name})"


def stream_failed(exc: OSError) -> int:
    """The exit status for a failed write to stdout, with its one line (none for a pipe
    whose reader went away)."""
    silence_stdout()
    if isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.ECONNRESET):
        return EXIT_PIPE
    why = exc.strerror or str(exc)
    try:
        print(f"rtax: error: cannot write to standard output ({why})", file=sys.stderr)
    except OSError:
        pass
    return 1


def guarded(run: Callable[[], int]) -> int:
    """`run()`, then stdout flushed; a write error on stdout, from either, is the exit
    status `stream_failed` gives."""
    try:
        status = run()
        sys.stdout.flush()
    except OSError as exc:
        if not is_stream_error(exc):
            raise
        return stream_failed(exc)
    return status


def print_json(obj: object) -> None:
    """`obj` as indented JSON on stdout. JSON escapes a control character already (what a
    reader parses is as it was); a string holding a byte of a name that is not UTF-8 (a
    surrogate), which no JSON encoder takes, is written with it shown (`events.visible`)."""
    import orjson

    from rtax_tui.model.events import RAW_CONTROL_UTF8, visible

    try:
        data = orjson.dumps(obj, option=orjson.OPT_INDENT_2)
    except TypeError:
        data = orjson.dumps(visible(obj), option=orjson.OPT_INDENT_2)
    # What JSON leaves raw but a terminal acts on or hides: DEL, the C1 controls (U+0080-
    # U+009F: 0x9B is a CSI to xterm.js) and the invisible format characters `visible`
    # shows (bidirectional controls, U+2028/U+2029), as their UTF-8. A crafted trajectory
    # (`rtax traj inspect --format json`) holds what its agent wrote: written as \uNNNN,
    # which a JSON reader reads back as the same character.
    unescaped = re.compile(RAW_CONTROL_UTF8)  # compiled once: re's cache
    if unescaped.search(data):
        data = unescaped.sub(_json_escape, data)
    sys.stdout.buffer.write(data + b"\n")


def _json_escape(m: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(m.group().decode())
