"""Reading rtax's input files with bounds: a regular file only, of a bounded size.

Every reader of a file a person hands to rtax (a profile, a recording, a trajectory)
goes through `read_input`: a FIFO, a device or a directory is refused at once (opened
without blocking, so that a FIFO with no writer does not hang), and a file larger than
its kind's limit is refused before a byte of it is parsed. The limits are far above any
real input's size and far below what would exhaust the machine.

A regular file that its stat says is empty is empty: rtax reads no byte of it. A kernel's
file is "regular" and says 0 bytes whatever it holds, and some are not files to read:
/proc/kmsg, linked into a directory of recordings as `x.jsonl`, blocked `rtax history`
until the kernel logged a line, and took that line from the system's log (red team,
2026-12-06).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator
from pathlib import Path

from rtax_tui.model.spec import RtaxError

MIB = 1 << 20
# the largest input of each kind rtax reads (bytes)
PROFILE_MAX = 4 * MIB
RECORDING_MAX = 8192 * MIB
TRAJECTORY_MAX = 1024 * MIB

# the largest integer a number in any input may hold: a signed 64-bit one
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def read_input(
    path: str | Path,
    what: str,
    limit: int,
    error: type[RtaxError] = RtaxError,
    prefix: str = "",
) -> bytes:
    """The bytes of the regular file `path`; an `error` of one line otherwise.
    `prefix` is what goes between the path and the message (`:1` for `FILE:LINE:`)."""
    return b"".join(read_input_chunks(path, what, limit, error, prefix, 1 << 24))


def read_input_chunks(
    path: str | Path,
    what: str,
    limit: int,
    error: type[RtaxError] = RtaxError,
    prefix: str = "",
    chunk: int = 1 << 23,
) -> Generator[bytes, None, None]:
    """`read_input` a chunk at a time (of at most `chunk` bytes), for a reader that
    streams: the file is checked (opened, regular, within `limit`) before the first
    chunk, and a file that grows past `limit` while read is an error too."""
    where = f"{path}{prefix}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"{where}: cannot open {what} ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise error(f"{where}: cannot read {what} ({kind})")
        if st.st_size > limit:
            raise error(
                f"{where}: {what} of {st.st_size} bytes is larger than rtax reads "
                f"({limit} bytes at most)"
            )
        if st.st_size == 0:
            return
        os.set_blocking(fd, True)
        total = 0
        while True:  # a file that grows while read is still bounded
            try:
                data = os.read(fd, min(limit + 1 - total, chunk))
            except OSError as exc:
                raise error(f"{where}: cannot read {what} ({exc.strerror})") from None
            if not data:
                break
            total += len(data)
            if total > limit:
                raise error(f"{where}: {what} is larger than rtax reads ({limit} bytes at most)")
            yield data
    except OSError as exc:
        raise error(f"{where}: cannot read {what} ({exc.strerror})") from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, where: str, what: str, error: type[RtaxError] = RtaxError) -> str:
    """`data` as text; bytes that are not UTF-8 are an error naming the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{where}:{line}: {what} is not UTF-8 text (byte {exc.start})") from None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (an output that would overwrite an input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


# -- the bounds of counts and numbers, shared by the profile and the command line --------
TRIALS_MAX = 100_000  # trials (and warm-up trials) per cell
CONCURRENCY_MAX = 4096  # trials in flight, a host's concurrency, a pool's size
BATCH_MAX = 4096  # a capacity batch's size
BATCHES_MAX = 10_000  # capacity batches per size
REPEAT_MAX = 1000  # `traj prepare --repeat`
PREFIXES_MAX = 1_000_000  # `traj prepare --max-prefixes`
SECONDS_MAX = 1e6  # a timeout or deadline (11.5 days)
MIB_MAX = (1 << 43) - 1  # a MiB count whose bytes fit in a signed 64-bit integer


def number_error(value: object, lo: float, hi: float, integer: bool) -> str | None:
    """Why `value` is not an integer (or, unless `integer`, a finite number) in
    [`lo`, `hi`], worded for an error message; None when it is."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return f"expected {kind}, got {_short(value)}"
    if value != value or value in (float("inf"), float("-inf")):
        return f"expected a finite number, got {value!r}"
    if value < lo:
        return f"must be at least {_num(lo)}, got {_short(value)}"
    if value > hi:
        return f"at most {_num(hi)}, got {_short(value)}"
    return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e18 else repr(x)


def _short(value: object) -> str:
    """A value for a one-line message: never a huge integer's digits nor a nested value."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


OFF = ("0", "no", "off", "false")  # what turns a part of rtax off in its environment


def switched_off(var: str) -> bool:
    """Whether environment variable `var` turns a part of rtax off (`RTAX_NOISE`,
    `RTAX_SUBREAPER`): one of OFF, in any case, spaces around it allowed. One reading
    for every switch: `RTAX_NOISE=off` left the noise sampler on while
    `RTAX_SUBREAPER=off` turned the subreaper off."""
    return os.environ.get(var, "").strip().lower() in OFF
