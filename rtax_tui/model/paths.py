"""Paths given to rtax: one rule for what goes wrong with them, and atomic writes.

Every path a person hands rtax (a profile, a recording, a trajectory, an output file)
can fail for reasons that are the path's, not rtax's: a component over 255 bytes, a
symbolic link that points nowhere, a read-only file system, a full disk. Each is one
line naming the flag (or argument) and the path, never a traceback: `taking` turns the
OSError of any such operation into an `RtaxError` saying so.

Every file rtax writes as a whole (a plot, a prepared trajectory's recording, a saved
profile) is written under a temporary name beside it, flushed to disk and renamed into
place when whole (`atomic_write`): a full disk or a kill leaves the old file or none,
never a cut one.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from rtax_tui.model import signals
from rtax_tui.model.spec import RtaxError

REASONS = {
    errno.ENAMETOOLONG: "a name in it is too long (at most 255 bytes a component)",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a component of it is not a directory",
    errno.EISDIR: "it is a directory",
    errno.EEXIST: "it already exists",
    errno.EFBIG: "the file is too large",
    errno.EIO: "an input/output error",
    errno.EXDEV: "a temporary file beside it is on another device",
}


def reason(exc: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """What went wrong, in words; a name that is a symbolic link pointing nowhere says so."""
    if path is not None and exc.errno in (errno.EEXIST, errno.ENOENT):
        try:
            if os.path.islink(path) and not os.path.exists(path):
                return "it is a symbolic link that points nowhere (a dangling link)"
        except (OSError, ValueError):
            pass
    if exc.errno in REASONS:
        return REASONS[exc.errno]
    return exc.strerror or type(exc).__name__


def path_error(flag: str, path: str | os.PathLike[str], exc: OSError) -> RtaxError:
    """The one line for `exc` on `path`, given as `flag`."""
    where = f"{flag} {path}" if flag else str(path)
    return RtaxError(f"{where}: {reason(exc, path)}")


Given = tuple[str, "str | os.PathLike[str] | Sequence[str] | None"]


def _flag_for(filename: str, given: Sequence[Given]) -> str:
    for flag, value in given:
        values = [value] if isinstance(value, str | os.PathLike) else list(value or ())
        for v in values:
            v = os.fspath(v)
            if filename == v or filename.startswith(v.rstrip("/") + "/"):
                return flag
    return ""


@contextmanager
def taking(*given: Given) -> Iterator[None]:
    """An OSError about a path inside the block is one `RtaxError` line naming the flag
    the path came from (`given`: pairs of flag and value, a value one path or several)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        name = os.fsdecode(exc.filename)
        raise path_error(_flag_for(name, given), name, exc) from None
    except ValueError as exc:  # a NUL byte in a path
        if "null" not in str(exc):
            raise
        raise RtaxError(f"{given[0][0] if given else 'a path'}: a path holds a NUL byte") from None


def atomic_write(
    path: str | os.PathLike[str],
    fill: Callable[[IO[bytes]], object],
    *,
    flag: str = "-o",
    overwrite: bool = True,
) -> None:
    """Write `path` as a whole: `fill` writes into a temporary file beside it, which is
    fsynced and renamed into place (linked, when `overwrite` is False: an existing file
    is then refused, never replaced). On any failure the temporary file is removed and
    the error is one line naming `flag` and `path`."""
    target = Path(path)
    with signals.armed():  # a signal now removes the temporary file (KeyboardInterrupt)
        _write_beside(target, fill, flag, overwrite)


# The temporary files (`.NAME.XXXX.part`) this process made and has not yet linked into
# place or removed. A stop signal can land between two lines of their owner (after the
# file is made, before the code that removes it on failure is entered): `rtax`'s ending
# on a signal removes what is left here (`discard_unfinished`).
_UNFINISHED: set[str] = set()


def temp_beside(target: Path) -> tuple[int, str]:
    """A new temporary file beside `target` (`.NAME.XXXX.part`): its descriptor and name,
    registered as unfinished (`finished` once it is linked into place or removed). Made
    with the stop signals held, so none lands between its making and its registration."""
    with signals.held():
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name[:200]}.", suffix=".part"
        )
        _UNFINISHED.add(tmp)
    return fd, tmp


def finished(tmp: str) -> None:
    """`tmp` was linked into place or removed: nothing left to discard."""
    _UNFINISHED.discard(tmp)


def discard_unfinished() -> None:
    """Remove every temporary file this process left unfinished (on a stop signal)."""
    while _UNFINISHED:
        try:
            os.unlink(_UNFINISHED.pop())
        except OSError:
            pass


def _write_beside(
    target: Path, fill: Callable[[IO[bytes]], object], flag: str, overwrite: bool
) -> None:
    tmp: str | None = None
    try:
        fd, tmp = temp_beside(target)
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        try:  # a file replaced keeps its mode (a private one stays private)
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = 0o644 & ~umask()
        os.chmod(tmp, mode)
        if overwrite:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
            os.unlink(tmp)
        finished(tmp)
        tmp = None
    except OSError as exc:
        raise path_error(flag, target, exc) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            finished(tmp)


def umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
