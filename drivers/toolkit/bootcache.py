"""Verdicts kept until the machine reboots: what a slow probe of this host found.

A KVM guest boots here or hangs (`rtax doctor`, `accel = "auto"`: up to 20 s a process);
which gVisor platform runs (`platform = "auto"`). Each is kept in `/run/rtax` (a tmpfs:
a reboot clears it), under a name made of what would change the answer (a binary's size
and time, the kernel, the guest's files), so that a later process reads the verdict
instead of probing again; a new binary, kernel or guest probes afresh.
`RTAX_FRESH_PROBES=1` always probes.

A verdict is read only from a regular file (no link followed) that this user owns and
nobody else may write, of at most 4 KiB of JSON, in a directory of the same kind: a
/run/rtax that others may write (made under umask 000: its other makers, runlock's
`mkdir -p`, follow the umask) let another user rename a verdict kept for another key
(an older QEMU that booted) onto this one's name. A forged verdict could only make rtax
choose another accelerator or platform, and the recording says which ran and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from typing import Any

from rtax_tui.drivers.toolkit.rootfs import recipe_digest

BASE = "/run/rtax"
FRESH_ENV = "RTAX_FRESH_PROBES"
MAX_BYTES = 4096
KEPT_NOTE = " (found at an earlier start)"  # said after a kept verdict's reason


def _path(kind: str, key: dict[str, Any]) -> str:
    return os.path.join(BASE, f".{kind}-{recipe_digest({'key': key})}.json")


def file_key(path: str) -> dict[str, Any] | None:
    """What identifies a file's contents cheaply: its real path, size and time (None:
    not there)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _ours_alone(st: os.stat_result) -> bool:
    """Owned by this user, and neither its group nor others may write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def read(kind: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """The verdict kept for `key`, or None (none kept, `RTAX_FRESH_PROBES`, or a file or
    directory that is not ours alone)."""
    if os.environ.get(FRESH_ENV):
        return None
    try:
        dfd = os.open(BASE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _ours_alone(os.fstat(dfd)):
            return None
        fd = os.open(
            os.path.basename(_path(kind, key)),
            os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=dfd,
        )
    except OSError:
        return None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not _ours_alone(st) or st.st_size > MAX_BYTES:
            return None
        try:
            got = json.loads(f.read(MAX_BYTES + 1))
        except ValueError:
            return None
    return got if isinstance(got, dict) else None


def write(kind: str, key: dict[str, Any], verdict: dict[str, Any]) -> None:
    """Keep `verdict` for `key` (replaced whole; a host where /run/rtax cannot be made,
    as a user without root, or where others may write it, keeps nothing)."""
    try:
        os.makedirs(BASE, mode=0o700, exist_ok=True)
        st = os.lstat(BASE)
        if not stat.S_ISDIR(st.st_mode) or not _ours_alone(st):
            return
        fd, tmp = tempfile.mkstemp(dir=BASE, prefix=f".{kind}-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(verdict, f)
        os.replace(tmp, _path(kind, key))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
