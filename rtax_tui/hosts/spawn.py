"""posix_spawn through glibc, for the exec channel's hot path: in C where rtax's install
built `_spawnc` (setup.py), else through ctypes.

`subprocess.Popen` already spawns with vfork semantics when there is no `preexec_fn`,
but around that one system call it runs some 100 us of Python (its pipes, fd lists,
the error pipe, the executable search); glibc's `posix_spawn` (clone with CLONE_VM |
CLONE_VFORK, then exec) does the same from one call made through ctypes: stdin from
/dev/null, stdout and stderr to one pipe, every other descriptor closed
(`addclosefrom_np`, glibc 2.34), the working directory (`addchdir_np`, glibc 2.29),
a session of its own (POSIX_SPAWN_SETSID, glibc 2.26). An exec failure (no such
file) comes back as posix_spawn's return value, raised as the OSError Popen raises.

`available()` is False where the C library lacks one of these (not glibc, or too old):
the caller keeps Popen there. The executable is looked up in the PATH of the `env`
given, as Popen does; found paths are cached per (name, PATH) and checked with one
access(2) a call.

`start` is what the exec channel calls: the output pipe made, the child spawned, a pidfd
of it opened (the loop watches it for the exit), in one call of the compiled helper
(`_spawnc.c`: the same posix_spawn with the same attributes and file actions, its arrays
built in C), or in the same steps through ctypes where the helper is missing (the
install found no compiler) or `RTAX_SPAWN=ctypes` is set. `backend()` says which.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import NamedTuple

from rtax_tui.hosts import subreaper

_C_VERSION = 2  # _spawnc.c's SPAWNC_VERSION that this code relies on


def _usable(mod: ModuleType | None) -> ModuleType | None:
    """The compiled helper if it was built from the _spawnc.c beside this file (its
    VERSION), else None: a .so left from an older source (an editable install not run
    again after a pull) would spawn without what this code relies on (the signals reset);
    ctypes spawns until the install builds it again. A .so of another Python version is
    never imported at all (its file name's tag)."""
    return mod if mod is not None and getattr(mod, "VERSION", None) == _C_VERSION else None


_c: ModuleType | None
try:  # by name: the import graph (tests/house/test_checks.py) sees no .py of it
    _c = _usable(importlib.import_module("rtax_tui.hosts._spawnc"))
except ImportError:  # not built: the install had no C compiler (or Python's headers)
    _c = None
if os.environ.get("RTAX_SPAWN") == "ctypes":
    _c = None

_POSIX_SPAWN_SETSID = 0x80  # glibc's values (spawn.h)
_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSIGMASK = 0x08
_SIGSET_BYTES = 128  # glibc's sigset_t: 1024 bits
_BUF = 1024  # posix_spawn_file_actions_t is 80 bytes, posix_spawnattr_t 336 on x86-64
_NEEDED = (
    "posix_spawn",
    "posix_spawn_file_actions_init",
    "posix_spawn_file_actions_destroy",
    "posix_spawn_file_actions_addopen",
    "posix_spawn_file_actions_adddup2",
    "posix_spawn_file_actions_addchdir_np",
    "posix_spawn_file_actions_addclosefrom_np",
    "posix_spawnattr_init",
    "posix_spawnattr_destroy",
    "posix_spawnattr_setflags",
    "posix_spawnattr_setsigdefault",
    "posix_spawnattr_setsigmask",
)
_NO_DEFAULT = (signal.SIGKILL, signal.SIGSTOP)
# Every signal but SIGKILL and SIGSTOP as glibc's sigset_t (bit sig - 1, little-endian
# words), glibc's own 32 and 33 included (its sigfillset leaves them out, and its
# posix_spawn would leave them ignored): the child's default actions
# (POSIX_SPAWN_SETSIGDEF); and the empty set, its mask (POSIX_SPAWN_SETSIGMASK). As
# _spawnc.c's all_signals.
_ALL_SIGNALS = sum(
    1 << (sig - 1) for sig in range(1, signal.NSIG) if sig not in _NO_DEFAULT
).to_bytes(_SIGSET_BYTES, sys.byteorder)
_NO_SIGNALS = bytes(_SIGSET_BYTES)

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None
_AVAILABLE = _libc is not None and all(hasattr(_libc, f) for f in _NEEDED)
_found: dict[tuple[str, str], str] = {}


# what Popen's child would keep of rtax's dispositions (it resets SIGPIPE and SIGXFSZ itself)
_KEPT_BY_POPEN = tuple(
    sorted(
        set(signal.valid_signals())
        - {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    )
)


def signals_to_reset() -> bool:
    """Would a child that `subprocess.Popen` makes from this thread start with a signal
    ignored or blocked (rtax started by `nohup`, or as `rtax &` from a script, which
    ignores SIGINT and SIGQUIT; a thread with a blocked mask)? Then its pre-exec hook
    must call `reset_signals`; otherwise none is needed (and Popen can vfork)."""
    try:
        if signal.pthread_sigmask(signal.SIG_BLOCK, ()):
            return True
    except (OSError, ValueError):
        return True
    return any(signal.getsignal(sig) == signal.SIG_IGN for sig in _KEPT_BY_POPEN)


def reset_signals() -> None:
    """In a child before its exec (a Popen pre-exec hook): every signal at its default
    action and none blocked, as `start` spawns (a step starts as from a fresh shell)."""
    for sig in range(1, signal.NSIG):
        if sig in _NO_DEFAULT:
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # glibc's own (32, 33): not to be set, not ignored
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def available() -> bool:
    return _AVAILABLE


def backend() -> str:
    """How `start` spawns: "c" (the compiled helper), "ctypes", or "none" (not here:
    the caller keeps Popen)."""
    if not _AVAILABLE:
        return "none"
    return "c" if _c is not None else "ctypes"


class Started(NamedTuple):
    pid: int
    rfd: int  # the read end of the child's stdout+stderr, non-blocking
    pidfd: int  # readable once the child has exited; -1: none (ctypes, or no pidfd_open)


def start(argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str] | None) -> Started:
    """Start `argv` as `spawn_to_pipe` does, into a new pipe; return its pid, the pipe's
    read end and a pidfd of it (the caller closes both)."""
    c = _c
    if c is None:
        rfd, wfd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(rfd, False)
        try:
            pid = spawn_to_pipe(argv, wfd, cwd=cwd, env=env)
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        return Started(pid, rfd, -1)  # as before the helper: a pidfd only if needed
    return Started(*_c_spawn(c, argv, -1, cwd, env))


def _c_spawn(
    c: ModuleType, argv: Sequence[str], out_fd: int, cwd: str | None, env: Mapping[str, str] | None
) -> tuple[int, int, int]:
    """(pid, rfd, pidfd) from the compiled helper, the subreaper told as for ctypes."""
    exe = _resolve(argv[0], env)
    envv = env if env is not None else os.environ
    counted = subreaper.spawning()  # the engine's subreaper must leave this child be
    err, pid, rfd, pidfd = 1, -1, -1, -1
    try:
        err, pid, rfd, pidfd = c.spawn(exe, argv, _as_dict(envv), out_fd, cwd)
    finally:
        subreaper.spawned(pid if err == 0 else None, counted)
    if err:
        raise _error(err, exe, cwd)
    return int(pid), int(rfd), int(pidfd)


def reap(pid: int) -> int | None:
    """The exit code of child `pid` (-N: killed by signal N) if it has exited, else None;
    reaped. The pipe's EOF comes as the child closes its descriptors, a moment before it
    is a zombie: the helper looks a few times, yielding the CPU between, before the
    caller falls back to waiting on the pidfd (another turn of the loop)."""
    if _c is not None:
        rc: int | None = _c.reap(pid, REAP_SPIN_US)
        return rc
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


REAP_SPIN_US = 20  # the EOF comes a moment before the zombie (when not preempted)


def _as_dict(env: Mapping[str, str]) -> dict[str, str]:
    return env if type(env) is dict else dict(env)


def _error(rc: int, exe: str, cwd: str | None) -> OSError:
    where = cwd if rc == 2 and cwd is not None and not os.path.isdir(cwd) else exe
    return OSError(rc, os.strerror(rc), where)


def _resolve(name: str, env: Mapping[str, str] | None) -> str:
    if "/" in name:
        return name
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    key = (name, path)
    hit = _found.get(key)
    if hit is not None and os.access(hit, os.X_OK):
        return hit
    found = shutil.which(name, path=path)
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", name)
    _found[key] = found
    return found


def spawn_to_pipe(
    argv: Sequence[str],
    out_fd: int,
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
) -> int:
    """Start `argv` in a session of its own, stdin /dev/null, stdout and stderr to
    `out_fd`, nothing else inherited; return its pid."""
    c = _c
    if c is not None:
        pid, _, pidfd = _c_spawn(c, argv, out_fd, cwd, env)
        if pidfd >= 0:
            os.close(pidfd)
        return pid
    assert _libc is not None
    lib = _libc
    exe = _resolve(argv[0], env)
    fa = ctypes.create_string_buffer(_BUF)
    attr = ctypes.create_string_buffer(_BUF)
    envv = env if env is not None else os.environ
    args = [os.fsencode(a) for a in argv]
    pairs = [(os.fsencode(k), os.fsencode(v)) for k, v in envv.items()]
    # c_char_p would cut each at its first NUL (`echo a\0b` run as `echo a`): refused, as
    # the C path and Popen refuse them; and a "=" in a name (another name in the child)
    if any(b"\0" in a for a in args) or any(b"\0" in k + v for k, v in pairs):
        raise ValueError("embedded null byte")
    if cwd is not None and "\0" in cwd:
        raise ValueError("embedded null byte")
    if any(b"=" in k for k, _ in pairs):
        raise ValueError("illegal environment variable name")
    c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
    c_env = (ctypes.c_char_p * (len(pairs) + 1))(*[k + b"=" + v for k, v in pairs], None)
    lib.posix_spawn_file_actions_init(fa)
    lib.posix_spawnattr_init(attr)
    try:
        # default actions and an empty mask, whatever rtax's thread has (a step must not
        # inherit Python's ignored SIGPIPE, nor a blocked or ignored stop signal)
        lib.posix_spawnattr_setsigdefault(attr, _ALL_SIGNALS)
        lib.posix_spawnattr_setsigmask(attr, _NO_SIGNALS)
        flags = _POSIX_SPAWN_SETSID | _POSIX_SPAWN_SETSIGDEF | _POSIX_SPAWN_SETSIGMASK
        lib.posix_spawnattr_setflags(attr, ctypes.c_short(flags))
        lib.posix_spawn_file_actions_addopen(fa, 0, b"/dev/null", os.O_RDONLY, 0)
        lib.posix_spawn_file_actions_adddup2(fa, out_fd, 1)
        lib.posix_spawn_file_actions_adddup2(fa, out_fd, 2)
        lib.posix_spawn_file_actions_addclosefrom_np(fa, 3)
        if cwd is not None:
            lib.posix_spawn_file_actions_addchdir_np(fa, os.fsencode(cwd))
        cpid = ctypes.c_int()
        counted = subreaper.spawning()  # the engine's subreaper must leave this child be
        rc = -1
        try:
            rc = lib.posix_spawn(ctypes.byref(cpid), os.fsencode(exe), fa, attr, c_argv, c_env)
        finally:
            subreaper.spawned(cpid.value if rc == 0 else None, counted)
    finally:
        lib.posix_spawn_file_actions_destroy(fa)
        lib.posix_spawnattr_destroy(attr)
    if rc != 0:
        raise _error(rc, exe, cwd)
    return cpid.value
