"""posix_spawn through glibc, for the exec channel's hot path.

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
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Mapping, Sequence

from rtax_tui.hosts import subreaper

_POSIX_SPAWN_SETSID = 0x80  # glibc's value (spawn.h)
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
)

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None
_AVAILABLE = _libc is not None and all(hasattr(_libc, f) for f in _NEEDED)
_found: dict[tuple[str, str], str] = {}


def available() -> bool:
    return _AVAILABLE


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
    assert _libc is not None
    lib = _libc
    exe = _resolve(argv[0], env)
    fa = ctypes.create_string_buffer(_BUF)
    attr = ctypes.create_string_buffer(_BUF)
    envv = env if env is not None else os.environ
    c_argv = (ctypes.c_char_p * (len(argv) + 1))(*[os.fsencode(a) for a in argv], None)
    c_env = (ctypes.c_char_p * (len(envv) + 1))(
        *[os.fsencode(k) + b"=" + os.fsencode(v) for k, v in envv.items()], None
    )
    lib.posix_spawn_file_actions_init(fa)
    lib.posix_spawnattr_init(attr)
    try:
        lib.posix_spawnattr_setflags(attr, ctypes.c_short(_POSIX_SPAWN_SETSID))
        lib.posix_spawn_file_actions_addopen(fa, 0, b"/dev/null", os.O_RDONLY, 0)
        lib.posix_spawn_file_actions_adddup2(fa, out_fd, 1)
        lib.posix_spawn_file_actions_adddup2(fa, out_fd, 2)
        lib.posix_spawn_file_actions_addclosefrom_np(fa, 3)
        if cwd is not None:
            lib.posix_spawn_file_actions_addchdir_np(fa, os.fsencode(cwd))
        pid = ctypes.c_int()
        counted = subreaper.spawning()  # the engine's subreaper must leave this child be
        rc = -1
        try:
            rc = lib.posix_spawn(ctypes.byref(pid), os.fsencode(exe), fa, attr, c_argv, c_env)
        finally:
            subreaper.spawned(pid.value if rc == 0 else None, counted)
    finally:
        lib.posix_spawn_file_actions_destroy(fa)
        lib.posix_spawnattr_destroy(attr)
    if rc != 0:
        where = cwd if rc == 2 and cwd is not None and not os.path.isdir(cwd) else exe
        raise OSError(rc, os.strerror(rc), where)
    return pid.value
