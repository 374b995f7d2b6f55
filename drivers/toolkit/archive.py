"""The one way rtax unpacks a tar archive it did not make: `safe_extract`.

Every member is checked before it is written, on every Python rtax supports (the
`filter="data"` of `tarfile` exists only from 3.11.4 on, and Debian 12 ships 3.11.2):
refused are absolute names, names with `..`, symbolic or hard links whose target
resolves outside the destination (following the links already extracted), device
files and FIFOs. Where `tarfile.data_filter` exists it is applied on top; where it
does not, no owner is set and set-uid/set-gid/sticky bits and write access for others
are dropped, as the data filter does.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

from rtax_tui.model.spec import RtaxError

_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _check(member: tarfile.TarInfo, root: str, where: str) -> str:
    """The real path `member` will be written at, or RtaxError saying why it may not be."""
    name = member.name
    if name.startswith(("/", "\\")) or os.path.isabs(name):
        raise RtaxError(f"{where}: refusing absolute path {name!r}")
    if ".." in Path(name).parts:
        raise RtaxError(f"{where}: refusing path with '..': {name!r}")
    if member.isdev():  # character or block device, or FIFO
        raise RtaxError(f"{where}: refusing device file {name!r}")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise RtaxError(f"{where}: refusing member {name!r} of type {member.type!r}")
    # the parent as it really is now, through any link extracted before this member
    parent = os.path.realpath(os.path.join(root, os.path.dirname(name)))
    target = os.path.join(parent, os.path.basename(name))
    if not _inside(parent, root) or not _inside(os.path.realpath(target), root):
        raise RtaxError(f"{where}: refusing {name!r}: it would be written outside")
    if member.issym():
        link = member.linkname
        if os.path.isabs(link):
            raise RtaxError(f"{where}: refusing symbolic link {name!r} to absolute {link!r}")
        if not _inside(os.path.realpath(os.path.join(parent, link)), root):
            raise RtaxError(f"{where}: refusing symbolic link {name!r} pointing outside: {link!r}")
    elif member.islnk():
        link = member.linkname
        if os.path.isabs(link) or ".." in Path(link).parts:
            raise RtaxError(f"{where}: refusing hard link {name!r} to {link!r}")
        if not _inside(os.path.realpath(os.path.join(root, link)), root):
            raise RtaxError(f"{where}: refusing hard link {name!r} pointing outside: {link!r}")
    return target


def safe_extract(
    archive: str | os.PathLike[str] | tarfile.TarFile, dest: str | os.PathLike[str]
) -> None:
    """Extract every member of `archive` (a path, any compression tarfile reads, or an
    open TarFile) into directory `dest` (made if missing), refusing the whole archive's
    remainder with RtaxError at the first unsafe member."""
    if isinstance(archive, tarfile.TarFile):
        _extract_all(archive, dest, str(archive.name or "archive"))
        return
    try:
        with tarfile.open(os.fspath(archive)) as tf:
            _extract_all(tf, dest, os.fspath(archive))
    except tarfile.TarError as e:
        raise RtaxError(f"{os.fspath(archive)}: not a readable tar archive: {e}") from e


def _extract_all(tf: tarfile.TarFile, dest: str | os.PathLike[str], where: str) -> None:
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    dirs: list[tuple[str, int]] = []
    links: list[str] = []
    try:
        _members(tf, root, where, dirs, links)
    except BaseException:
        _unlink_escaping(links, root)
        raise
    escaping = _unlink_escaping(links, root)
    if escaping:
        raise RtaxError(f"{where}: refusing symbolic link {escaping[0]!r}: it points outside")
    for path, mode in reversed(dirs):
        os.chmod(path, mode)


def _members(
    tf: tarfile.TarFile, root: str, where: str, dirs: list[tuple[str, int]], links: list[str]
) -> None:
    for member in tf:
        target = _check(member, root, where)
        if member.issym():
            links.append(target)
        if _HAS_DATA_FILTER:
            try:
                tf.extract(member, root, filter="data")
            except tarfile.FilterError as e:
                raise RtaxError(f"{where}: refusing {member.name!r}: {e}") from e
            continue
        # Python < 3.11.4: no owner, no special bits, nothing writable by others
        tf.extract(member, root, set_attrs=False)
        if member.issym():
            continue
        mode = stat.S_IMODE(member.mode) & ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
        mode &= ~(stat.S_IWGRP | stat.S_IWOTH)
        if member.isdir():
            dirs.append((target, mode | stat.S_IRWXU))  # set last: it may lack write access
        elif member.isreg() or member.islnk():
            if mode & stat.S_IXUSR == 0:
                mode &= ~(stat.S_IXGRP | stat.S_IXOTH)
            os.chmod(target, mode | stat.S_IRUSR | stat.S_IWUSR)


def _unlink_escaping(links: list[str], root: str) -> list[str]:
    """Remove the links that point outside `root` now: one that resolved inside when it was
    made can point outside through a link made after it."""
    escaping = [p for p in links if os.path.islink(p) and not _inside(os.path.realpath(p), root)]
    for path in escaping:
        os.unlink(path)
    return escaping
