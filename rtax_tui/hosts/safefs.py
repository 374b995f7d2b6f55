"""Tree operations that are safe as root on a tree an environment can write.

Code in an environment is hostile: while rtax (root) removes, fills or chowns its
workspace, a process of the environment may swap any entry for a symlink to a host
directory, nest directories 100,000 deep, or move directories around. Everything here:

- resolves beneath a directory fd rtax opened itself: `openat2` with RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, or, where the kernel
  lacks it, one component at a time with O_NOFOLLOW and a device check;
- never follows a symlink (a link is removed, or chowned itself, never its target) and
  never crosses a mount (a mount point inside a tree is left and reported);
- walks iteratively (an explicit stack, one fd held at a time: going back up opens ".."
  and checks it is the directory it came from, else the walk starts again from the top),
  so depth costs neither recursion nor file descriptors;
- creates entries with O_EXCL | O_NOFOLLOW beneath the destination fd and chowns the fd
  it created, so a swapped entry cannot redirect a write.

It also mounts and unmounts the sized tmpfs a workspace lives on. Standard library only
(the reaper imports it).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable

__all__ = [
    "chown_tree",
    "copy_into",
    "empty_dir",
    "is_mount_point",
    "mount_tmpfs",
    "open_beneath",
    "remove_tree",
    "unmount",
    "GONE_SH",
]

SYS_OPENAT2 = 437  # the same number on every architecture with the unified table
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_SAFE = RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
AT_EMPTY_PATH = 0x1000
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
# The same rule for a shell on any host (the SSH reaper and workspaces, `rtax cleanup`'s
# sweeps), as a function a script defines with this text and calls as `rtax_gone PATH`:
# umount(8) follows a link, so a name that is a link is removed, never unmounted
# through; a mount there is detached, then the tree removed without crossing into
# another file system. Only an absolute path: never an option to umount or rm.
GONE_SH = (
    "rtax_gone() { case $1 in /?*) ;; *) return 1 ;; esac; "
    '[ -L "$1" ] || umount -l -- "$1" 2>/dev/null; rm -rf --one-file-system -- "$1"; }'
)
MS_NOSUID = 0x2
MS_NODEV = 0x4
O_PATH = getattr(os, "O_PATH", 0o10000000)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_RESTARTS = 100  # a tree moved under the walk this often is given up on

_libc = ctypes.CDLL(None, use_errno=True)
_openat2_missing = False


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Moved(Exception):
    """A directory of the walk is no longer where it was."""


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def open_beneath(dirfd: int, rel: str, flags: int = DIR_FLAGS, mode: int = 0) -> int:
    """Open `rel` beneath `dirfd`: no symlink (anywhere in `rel`), no "..", no mount
    crossed. Raises OSError (ELOOP, EXDEV, ENOTDIR, ENOENT...) otherwise."""
    global _openat2_missing
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not _openat2_missing:
        how = _OpenHow(flags, mode, RESOLVE_SAFE)
        fd = _libc.syscall(
            SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how)
        )
        if fd >= 0:
            return int(fd)
        e = ctypes.get_errno()
        if e not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter refuses it
            raise OSError(e, os.strerror(e), rel)
        _openat2_missing = True
    return _open_beneath_fallback(dirfd, rel, flags, mode)


def _open_beneath_fallback(dirfd: int, rel: str, flags: int, mode: int) -> int:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or rel.startswith("/"):
        raise OSError(errno.EXDEV, "not beneath", rel)
    dev = os.fstat(dirfd).st_dev
    cur = dirfd
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            fd = os.open(part, flags if last else DIR_FLAGS, mode, dir_fd=cur)
            if cur != dirfd:
                os.close(cur)
            cur = fd
            if os.fstat(fd).st_dev != dev:
                raise OSError(errno.EXDEV, "crosses a mount", rel)
        return cur
    except BaseException:
        if cur != dirfd:
            os.close(cur)
        raise


def _open_top(path: str) -> tuple[int, int]:
    """(fd of `path`'s parent, fd of `path`), `path`'s last component not followed (the
    path up to it is rtax's own, e.g. the host's temporary directory)."""
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent or "/", DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        return pfd, os.open(name, DIR_FLAGS, dir_fd=pfd)
    except BaseException:
        os.close(pfd)
        raise


def _rel(frames: list[tuple[str, int, list[str], int]], name: str) -> str:
    return "/".join([f[0] for f in frames[1:]] + [name])


def _walk(
    root_fd: int,
    on_file: Callable[[int, str, os.stat_result], None],
    on_dir_in: Callable[[int], None] | None,
    on_dir_out: Callable[[int, str], None] | None,
    left: list[str],
    relist: bool,
) -> None:
    """Visit the tree beneath `root_fd` depth first, holding one fd at a time.

    `on_file(dirfd, name, st)` for every non-directory; `on_dir_in(fd)` on entering a
    directory below the root; `on_dir_out(parent_fd, name)` on leaving one. A mount
    point below the root (another st_dev) is not entered: its relative path goes to
    `left`. `relist` lists a directory again before leaving it (removal: entries made
    meanwhile)."""
    root = os.fstat(root_fd)
    dev = root.st_dev
    for _ in range(MAX_RESTARTS):
        cur = os.dup(root_fd)
        frames: list[tuple[str, int, list[str], int]] = [("", root.st_ino, os.listdir(cur), 0)]
        try:
            while frames:
                name_up, _ino, pending, lists = frames[-1]
                if pending:
                    name = pending.pop()
                    try:
                        st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if not stat.S_ISDIR(st.st_mode):
                        on_file(cur, name, st)
                        continue

                    if st.st_dev != dev:
                        left.append(_rel(frames, name))
                        continue
                    try:
                        child = open_beneath(cur, name)
                    except OSError as exc:
                        if exc.errno == errno.EXDEV:
                            left.append(_rel(frames, name))
                        elif exc.errno in (errno.ELOOP, errno.ENOTDIR) and lists < 50:
                            pending.append(name)  # swapped for a link or file: look again
                            frames[-1] = (name_up, _ino, pending, lists + 1)
                        elif exc.errno != errno.ENOENT:
                            left.append(f"{_rel(frames, name)}: {exc.strerror}")
                        continue
                    cst = os.fstat(child)
                    if cst.st_dev != dev:
                        os.close(child)
                        left.append(_rel(frames, name))
                        continue
                    os.close(cur)
                    cur = child
                    if on_dir_in is not None:
                        on_dir_in(cur)
                    frames.append((name, cst.st_ino, os.listdir(cur), 0))
                    continue
                if relist and lists < 5:
                    again = os.listdir(cur)
                    if again:
                        frames[-1] = (name_up, _ino, again, lists + 1)
                        continue
                if len(frames) == 1:
                    return
                up = os.open("..", DIR_FLAGS & ~os.O_NOFOLLOW, dir_fd=cur)
                ust = os.fstat(up)
                if (ust.st_dev, ust.st_ino) != (dev, frames[-2][1]):
                    os.close(up)
                    raise _Moved
                os.close(cur)
                cur = up
                frames.pop()
                if on_dir_out is not None:
                    on_dir_out(cur, name_up)
        except _Moved:
            continue
        finally:
            os.close(cur)
    raise OSError(errno.EBUSY, "the tree kept moving during the walk")


def _unlink(dirfd: int, name: str, _st: os.stat_result | None = None) -> None:
    try:
        os.unlink(name, dir_fd=dirfd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:  # swapped for a directory: the walk sees it next time
        pass


def _rmdir(dirfd: int, name: str) -> None:
    try:
        os.rmdir(name, dir_fd=dirfd)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EBUSY):
            raise


def empty_fd(fd: int) -> list[str]:
    """Remove everything beneath the directory `fd`; what was left (mount points)."""
    left: list[str] = []
    _walk(fd, _unlink, None, _rmdir, left, relist=True)
    return left


def empty_dir(path: str, root: str | None = None) -> list[str]:
    """Remove everything inside `path` (not `path` itself); returns what was left
    (mount points, with relative paths). With `root`, `path` is resolved beneath the
    directory `root` (no symlink, no mount crossed); without, only `path`'s last
    component is not followed."""
    if root is not None:
        rfd = os.open(root, DIR_FLAGS & ~os.O_NOFOLLOW)
        try:
            fd = open_beneath(rfd, path.lstrip("/"))
        finally:
            os.close(rfd)
    else:
        fd = os.open(path, DIR_FLAGS)
    try:
        return empty_fd(fd)
    finally:
        os.close(fd)


def remove_tree(path: str) -> list[str]:
    """Remove `path` and everything beneath it: never follows a symlink, never crosses a
    mount, no recursion. Returns what was left (mount points, refusals); a missing
    `path` is no error. A symlink or file at `path` is itself removed."""
    try:
        pfd, fd = _open_top(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return [f"{path}: {exc.strerror}"]
        try:
            os.unlink(path)  # a link or a file: the entry itself goes
        except OSError as e:
            return [f"{path}: {e.strerror}"]
        return []
    name = os.path.basename(os.path.abspath(path))
    try:
        if os.fstat(fd).st_dev != os.fstat(pfd).st_dev:
            return [f"{path}: a mount point"]
        left = [os.path.join(path, p) for p in empty_fd(fd)]
        try:
            _rmdir(pfd, name)
        except OSError as exc:
            left.append(f"{path}: {exc.strerror}")
        return left
    finally:
        os.close(fd)
        os.close(pfd)


def _fchownat_empty(fd: int, uid: int, gid: int) -> None:
    if _libc.fchownat(fd, b"", uid, gid, AT_EMPTY_PATH) != 0:
        raise _err("fchownat")


def _chown_entry(dirfd: int, name: str, uid: int, gid: int, dev: int) -> None:
    """chown one entry of `dirfd`, never a link's target, never a file with other links
    (a hard link to a host file) nor one on another device."""
    try:
        fd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(fd)
        if st.st_dev != dev or (not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1):
            return
        _fchownat_empty(fd, uid, gid)
    finally:
        os.close(fd)


def chown_fd(fd: int, uid: int, gid: int | None = None) -> list[str]:
    """Give the directory `fd` and everything beneath it to `uid`:`gid` (`gid` None: the
    same number as uid; -1: unchanged), without following a link or crossing a mount."""
    g = uid if gid is None else gid
    dev = os.fstat(fd).st_dev
    os.fchown(fd, uid, g)
    left: list[str] = []
    _walk(
        fd,
        lambda d, n, _st: _chown_entry(d, n, uid, g, dev),
        lambda d: os.fchown(d, uid, g),
        None,
        left,
        relist=False,
    )
    return left


def chown_tree(path: str, uid: int, gid: int | None = None) -> list[str]:
    fd = os.open(path, DIR_FLAGS)
    try:
        return chown_fd(fd, uid, gid)
    finally:
        os.close(fd)


def _make_file(dfd: int, name: str, src: str, mode: int, uid: int | None) -> None:
    for _ in range(10):
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600, dir_fd=dfd,
            )  # fmt: skip
            break
        except FileExistsError:
            _remove_entry(dfd, name)
    else:
        raise OSError(errno.EEXIST, "kept reappearing", name)
    try:
        if uid is not None:
            os.fchown(fd, uid, uid)
        with open(src, "rb") as f:
            while chunk := f.read(1 << 20):
                os.write(fd, chunk)
        os.fchmod(fd, mode & 0o1777)
    finally:
        os.close(fd)


def _remove_entry(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except IsADirectoryError:
        fd = open_beneath(dfd, name)
        try:
            empty_fd(fd)
        finally:
            os.close(fd)
        _rmdir(dfd, name)
    except FileNotFoundError:
        pass


def copy_into(src_dir: str, dest_dirfd: int, uid: int | None) -> None:
    """Copy the contents of `src_dir` (rtax's own, trusted) beneath `dest_dirfd`,
    creating every entry with O_EXCL | O_NOFOLLOW (an entry in the way is removed,
    never followed) and giving what it made to `uid` (None: unchanged) through the fd
    it made. Symlinks are copied as symlinks; devices, fifos and sockets are skipped."""
    dev = os.fstat(dest_dirfd).st_dev
    todo = [""]
    while todo:
        rel = todo.pop()
        dfd = open_beneath(dest_dirfd, rel) if rel else os.dup(dest_dirfd)
        try:
            with os.scandir(os.path.join(src_dir, rel)) as it:
                entries = list(it)
            for e in entries:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    try:
                        os.mkdir(e.name, 0o700, dir_fd=dfd)
                    except FileExistsError:
                        pass
                    try:
                        cfd = open_beneath(dfd, e.name)
                    except OSError as exc:
                        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                            raise
                        _remove_entry(dfd, e.name)  # a link in the way: it goes
                        os.mkdir(e.name, 0o700, dir_fd=dfd)
                        cfd = open_beneath(dfd, e.name)
                    try:
                        if uid is not None:
                            os.fchown(cfd, uid, uid)
                        os.fchmod(cfd, st.st_mode & 0o1777)
                    finally:
                        os.close(cfd)
                    todo.append(os.path.join(rel, e.name))
                elif stat.S_ISREG(st.st_mode):
                    _make_file(dfd, e.name, e.path, st.st_mode, uid)
                elif stat.S_ISLNK(st.st_mode):
                    target = os.readlink(e.path)
                    for _ in range(10):
                        try:
                            os.symlink(target, e.name, dir_fd=dfd)
                            break
                        except FileExistsError:
                            _remove_entry(dfd, e.name)
                    if uid is not None:
                        _chown_entry(dfd, e.name, uid, uid, dev)
        finally:
            os.close(dfd)


# -- mounts --------------------------------------------------------------------


def is_mount_point(path: str) -> bool:
    try:
        st = os.lstat(path)
        up = os.lstat(os.path.join(path, ".."))
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and (st.st_dev != up.st_dev or st.st_ino == up.st_ino)


def mount_tmpfs(path: str, size_mib: int, uid: int = 0, mode: int = 0o700) -> None:
    """A tmpfs of `size_mib` MiB at `path` (nosuid, nodev), its root `uid`'s."""
    opts = f"size={int(size_mib)}m,mode={mode:o},uid={int(uid)},gid={int(uid)}"
    rc = _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode())
    if rc != 0:
        raise _err(f"mount tmpfs on {path}")


def _dead_fuse(path: str) -> bool:
    """A FUSE mount whose server is gone (`ENOTCONN` on every look at it)."""
    try:
        os.lstat(path)
    except OSError as exc:
        return exc.errno == errno.ENOTCONN
    return False


def unmount(path: str) -> bool:
    """Lazily unmount whatever is mounted at `path` (not following a link), every layer;
    whether something was."""
    done = False
    for _ in range(16):
        if not is_mount_point(path) and not _dead_fuse(path):
            break
        if _libc.umount2(os.fsencode(path), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
            break
        done = True
    return done


def remove_workspace(path: str) -> list[str]:
    """Unmount the workspace's tmpfs (if any), then remove the directory."""
    unmount(path)
    return remove_tree(path)
