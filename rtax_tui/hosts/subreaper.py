"""The engine as a child subreaper that reaps adopted orphans at once.

Why: a process whose parent dies is reparented to the nearest ancestor that is a
"child subreaper" (prctl PR_SET_CHILD_SUBREAPER), else to PID 1. Some substrates wait
until such orphans are reaped (`runsc delete` waits for the sandbox's processes), and
an init that reaps slowly (this machine's PID 1, a firecracker `process_api`, takes
1-2 s) would be charged to the substrate's teardown. With the engine as the subreaper,
its own thread reaps them as soon as they exit.

The hard part is what it must never do: reap a child the process spawned itself. Those
are waited for by their owners (asyncio's child watcher, `Popen.wait`, the exec
channel's `waitpid` in `hosts/local.py`); reaping one first would hand its owner
ECHILD, which `subprocess` reports as exit status 0, a forged result. So:

- every spawn primitive of the process is wrapped (`_posixsubprocess.fork_exec`, which
  `subprocess` (as `subprocess._fork_exec`) and `multiprocessing` call,
  `os.posix_spawn[p]`, `os.fork`, `os.forkpty`, `os.system`; `hosts/spawn.py` calls
  `spawning()`/`spawned()` itself): a counter of spawns in flight is raised before the
  child can exist and lowered only after its pid is registered, and while it is above
  zero no unknown zombie is reaped (the race between fork and registration is closed);
- a registered pid is held with a pidfd, which names that very process: once its
  owner has reaped it, `waitid(P_PIDFD)` says ECHILD even if the pid number has been
  given to another process since (pid_max is 32768 here, so numbers come round), and
  the entry is dropped;
- the children that exist when `enable()` is called are registered as ours (nothing was
  adopted before then);
- the thread learns of a zombie with `waitid(P_ALL, WEXITED | WNOWAIT)`, which reaps
  nothing; an orphan is then reaped by its pid (`waitpid(pid, WNOHANG)`) under the lock
  the spawn wrappers take, so no registration can land in between. When the zombie is
  ours it backs off (1 ms, doubling to 100 ms) for its owner; while one of ours lingers
  it also reads the main thread's children (the kernel reparents orphans to the thread
  group's leader), since `waitid(P_ALL)` shows the first zombie only.

uvloop is such a library: libuv forks in C, unseen by the wrappers, and waits for its
child by pid; a child the thread reaped first was lost to it (libuv ignores the ECHILD, so
`proc.wait()` never returned: the test suite hung on it in a fresh root). Its
`subprocess_exec`/`subprocess_shell` are wrapped too, counting the spawn in flight until
the transport's pid is registered.

Not covered: another C library that forks on its own and waits for that child by pid
(none of the engine's: libvirt's Python binding talks to the daemon over a socket). Its
child would look adopted. `RTAX_SUBREAPER=0` in the environment turns the whole thing off.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from rtax_tui.model.inputs import switched_off

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
ENV = "RTAX_SUBREAPER"

_FIRST_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 0.1
_SWEEP_FROM_S = 0.004  # an own zombie still there after ~3 ms: look behind it
_IDLE_WAIT_S = 1.0  # no child at all: woken by the next spawn, or after this
_PRUNE_MIN = 64

_lock = threading.Lock()
_ours: dict[int, int] = {}  # pid -> pidfd (-1: none could be opened, held until ECHILD)
_spawning = 0
_prune_at = _PRUNE_MIN
_active = False
_installed = False
_idle = False
_wake = threading.Event()
_thread: threading.Thread | None = None
_reaped = 0  # orphans reaped so far (tests and the bench read it)

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None


def _prctl(option: int, arg: int) -> int:
    if _libc is None:
        raise OSError("no C library for prctl")
    rc = int(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc


def is_subreaper() -> bool:
    """What the kernel says about this process (PR_GET_CHILD_SUBREAPER)."""
    if _libc is None:
        return False
    out = ctypes.c_int(0)
    if int(_libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(out), 0, 0, 0)) < 0:
        return False
    return out.value != 0


def wanted() -> bool:
    """Whether the environment leaves the subreaper on (`RTAX_SUBREAPER=0` turns it off)."""
    return not switched_off(ENV)


def reaped() -> int:
    """How many adopted orphans the thread has reaped in this process."""
    return _reaped


# -- the registry: what this process spawned itself ---------------------------


def spawning() -> bool:
    """A spawn begins: until `spawned`, an unknown zombie may be its child. Returns
    whether it was counted (not before `enable()`), for `spawned`."""
    global _spawning
    if not _installed:
        return False
    with _lock:
        _spawning += 1
    return True


def spawned(pid: int | None, counted: bool = True) -> None:
    """The spawn that `spawning` announced ended: `pid` its child (None: it failed, or
    its child was waited for inside the call)."""
    global _spawning
    if not counted:
        return
    fd = -1
    if pid is not None and pid > 0:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            fd = -1
    with _lock:
        if pid is not None and pid > 0:
            old = _ours.get(pid)
            if old is not None and old >= 0:
                os.close(old)
            _ours[pid] = fd
        _spawning -= 1
        if len(_ours) >= _prune_at and not _spawning:
            _prune_locked()
        idle = _idle
    if idle and pid:
        _wake.set()


def _is_ours(pid: int) -> bool:
    """Under `_lock`: whether zombie `pid` may be a child this process spawned."""
    if _spawning:
        return True
    fd = _ours.get(pid)
    if fd is None:
        return False
    try:
        if fd >= 0:
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        else:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # the registered process was reaped by its owner
        _forget(pid)
        return False
    return True


def _forget(pid: int) -> None:
    fd = _ours.pop(pid, -1)
    if fd >= 0:
        os.close(fd)


def _prune() -> None:
    with _lock:
        if not _spawning:
            _prune_locked()


def _prune_locked() -> None:
    """Drop the entries whose process its owner has reaped. Owners mostly reap before
    the thread even wakes (the kernel's wait then finds no zombie and sleeps on), so
    registration prunes too, when the registry has doubled: one waitid a spawn, amortized."""
    global _prune_at
    for pid in list(_ours):
        _is_ours(pid)
    _prune_at = max(_PRUNE_MIN, 2 * len(_ours))


def _reap_if_orphan(pid: int) -> bool:
    """Reap `pid` if it is an adopted orphan's zombie; True if it is (maybe) ours."""
    global _reaped
    with _lock:
        if _is_ours(pid):
            return True
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if done:
            _reaped += 1
    return False


def _leader_children() -> list[int]:
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _all_children() -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                out.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def _sweep() -> None:
    """Reap the orphans among the main thread's children (those an own zombie hides)."""
    for pid in _leader_children():
        _reap_if_orphan(pid)


def _wait_for_a_child() -> None:
    """No child at all, so no descendant that could be orphaned: sleep until a spawn."""
    global _idle
    with _lock:
        _idle = True
        _wake.clear()
    try:
        try:  # a spawn between the ECHILD and `_idle` did not wake us: look again
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            return
        except ChildProcessError:
            pass
        _wake.wait(_IDLE_WAIT_S)
    finally:
        with _lock:
            _idle = False


def _loop() -> None:
    delay = 0.0
    while True:
        if not _active:  # disabled: wait for enable()
            _wake.wait()
            _wake.clear()
            delay = 0.0
            continue
        if delay:
            time.sleep(delay)
        flags = os.WEXITED | os.WNOWAIT | (os.WNOHANG if delay else 0)
        try:
            info = os.waitid(os.P_ALL, 0, flags)
        except ChildProcessError:
            _wait_for_a_child()
            delay = 0.0
            continue
        if not _active:
            continue
        if info is None:  # what kept us backing off was reaped by its owner
            _prune()
            delay = 0.0
            continue
        if not _reap_if_orphan(info.si_pid):
            delay = 0.0
            continue
        # the first zombie is ours (or a spawn is in flight): its owner reaps it
        if delay >= _SWEEP_FROM_S:
            _sweep()
        delay = min(max(delay * 2, _FIRST_BACKOFF_S), _MAX_BACKOFF_S)


# -- the spawn primitives, wrapped --------------------------------------------


def _wrap_pid(fn: Callable[..., Any], pid_of: Callable[[Any], int]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spawning()
        pid: int | None = None
        try:
            result = fn(*args, **kwargs)
            pid = pid_of(result)
            return result
        finally:
            if pid == 0:  # os.fork's child: the hook below reset the state
                pass
            else:
                spawned(pid)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _wrap_whole(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A call that spawns and waits for its child itself (`os.system`)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spawning()
        try:
            return fn(*args, **kwargs)
        finally:
            spawned(None)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _wrap_loop_spawn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A loop's `subprocess_exec`/`subprocess_shell` whose child the loop forks in C (uvloop):
    counted from before the fork until the transport's pid is registered."""

    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        counted = spawning()
        pid: int | None = None
        try:
            transport, protocol = await fn(self, *args, **kwargs)
            pid = transport.get_pid()
            return transport, protocol
        finally:
            spawned(pid, counted)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _loop_patches() -> list[tuple[Any, str, Callable[..., Any]]]:
    """uvloop's spawning methods, where uvloop is installed."""
    try:
        import uvloop
    except ImportError:
        return []
    return [
        (uvloop.Loop, name, _wrap_loop_spawn(getattr(uvloop.Loop, name)))
        for name in ("subprocess_exec", "subprocess_shell")
    ]


def _after_fork_in_child() -> None:
    """A forked child is not a subreaper, has no reaping thread and none of these
    children: start it clean (a lock held by another thread at fork stays held)."""
    global _lock, _spawning, _prune_at, _active, _idle, _thread, _reaped
    _lock = threading.Lock()
    for fd in _ours.values():
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    _ours.clear()
    _spawning = 0
    _prune_at = _PRUNE_MIN
    _active = False
    _idle = False
    _thread = None
    _reaped = 0


def _install() -> None:
    global _installed
    if _installed:
        return
    import _posixsubprocess
    import subprocess

    fork_exec = _wrap_pid(_posixsubprocess.fork_exec, int)
    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (_posixsubprocess, "fork_exec", fork_exec),  # multiprocessing's spawnv_passfds
        (os, "posix_spawn", _wrap_pid(os.posix_spawn, int)),
        (os, "posix_spawnp", _wrap_pid(os.posix_spawnp, int)),
        (os, "fork", _wrap_pid(os.fork, int)),
        (os, "forkpty", _wrap_pid(os.forkpty, lambda r: int(r[0]))),
        (os, "system", _wrap_whole(os.system)),
    ]
    if hasattr(subprocess, "_fork_exec"):  # 3.11.3+: Popen's, imported by name
        patches.append((subprocess, "_fork_exec", fork_exec))
    patches += _loop_patches()
    for module, name, wrapper in patches:
        setattr(module, name, wrapper)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _installed = True


# -- on and off ----------------------------------------------------------------


def enable() -> bool:
    """Make this process a child subreaper that reaps adopted orphans at once.

    Call it before the engine starts threads that spawn. Returns whether it is on
    (False where prctl is refused)."""
    global _active, _thread
    if _libc is None:
        return False
    _install()
    # what exists now was spawned here (nothing was adopted yet): it is ours
    for pid in _all_children():
        spawned(pid, spawning())
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        return False
    _active = True
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_loop, name="rtax-subreaper", daemon=True)
        _thread.start()
    _wake.set()
    return True


def disable() -> None:
    """No longer a subreaper; orphans adopted until now and already dead are reaped."""
    global _active
    if not _active:
        return
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 0)
    except OSError:
        pass
    _active = False
    for pid in _leader_children():
        _reap_if_orphan(pid)


def enable_from_env() -> bool:
    """`enable()` unless `RTAX_SUBREAPER=0`; the commands that run the engine call it."""
    return enable() if wanted() else False
