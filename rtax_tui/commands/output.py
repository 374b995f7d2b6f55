"""rtax's standard streams, for every command: what happens when they cannot be written.

A reader that goes away (`rtax report r.jsonl | head`) closes the pipe: rtax then ends
quietly with status 141 (128 + SIGPIPE), what a shell expects of a program killed by the
pipe, and no traceback. Any other write error on stdout (a full disk, `/dev/full`, a
stdout that was closed: `>&-`) is one line on stderr and status 1.

`prepare()` runs first in `main`: a standard descriptor that is closed (0, 1 or 2) is
held by /dev/null, so that no file rtax opens later (a recording) takes its number and
receives what was meant for the stream; a closed stdout then raises EBADF on its first
write, as it would have.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from collections.abc import Callable

EXIT_PIPE = 128 + 13  # SIGPIPE


class _ClosedRaw(io.RawIOBase):
    """The stdout of a process started with it closed: every write fails with EBADF
    (until `silence`: then nothing is written, so interpreter shutdown stays quiet)."""

    silent = False

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        if self.silent:
            return len(b)  # type: ignore[arg-type]
        raise OSError(errno.EBADF, "standard output is closed")


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
    if 2 in closed and sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    if 0 in closed and sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115


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
    """A failed write to stdout: an OSError of no file name (a file's names its path)."""
    return isinstance(exc, OSError) and exc.filename is None and exc.errno in STREAM_ERRNOS


STREAM_ERRNOS = {
    errno.EPIPE,
    errno.ENOSPC,
    errno.EBADF,
    errno.EIO,
    errno.EFBIG,
    errno.EDQUOT,
    errno.EINVAL,
    errno.ECONNRESET,
}


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
