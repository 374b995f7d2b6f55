"""Run locks: what tells `rtax cleanup` that a run is still alive.

Every rtax process that makes environments holds one lock file, `<runs dir>/<id>.lock`
(the runs dir: `RTAX_RUNS_DIR`, else `/run/rtax/runs` for root, else
`${XDG_RUNTIME_DIR:-/tmp}/rtax-runs-<uid>`), locked with flock(2) for the process's
lifetime: the kernel releases it when the process ends, `kill -9` included. The file
lists, a line each, the labels (run ids, probe labels...) of what the process makes,
in `safe_label` form, written before the first resource with that label exists.

On an SSH host the remote reaper (hosts/ssh.py) holds such a lock for the connection
and appends the labels it is told; it keeps the lock until it has removed what the run
left, so a remote cleanup never races it.

A cleanup lists its candidates first, then the live labels (`live_labels`), and spares
every candidate whose name carries a live label (the names and that question are
hosts/names.py's, the layer above): a resource seen before the listing was made by a
process that had written its label before, so a live run is never missed.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

__all__ = [
    "CommandHost",
    "LIVE_SH",
    "RUNS_DIR_SH",
    "as_another_process",
    "hold",
    "live_labels",
    "live_labels_on",
    "live_runs",
    "note_spared",
    "owner",
    "remote_lock_id",
    "runs_dir",
    "safe_label",
    "script",
    "subscribe",
    "take_spared",
    "unsubscribe",
]


def safe_label(label: str) -> str:
    """The form a run's label takes in the names of what it makes (workspaces, containers,
    VM directories: hosts/names.py), and so in what `rtax cleanup` matches."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40]


def runs_dir() -> str:
    d = os.environ.get("RTAX_RUNS_DIR")
    if d:
        return d
    if os.geteuid() == 0:
        return "/run/rtax/runs"
    return os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", f"rtax-runs-{os.getuid()}")


# The same directory in sh (on any host); sets $d.
RUNS_DIR_SH = r"""d=${RTAX_RUNS_DIR:-}
if [ -z "$d" ]; then
  if [ "$(id -u)" = 0 ]; then d=/run/rtax/runs
  else d=${XDG_RUNTIME_DIR:-/tmp}/rtax-runs-$(id -u); fi
fi"""

# Prints the labels of every live lock (one a line), `#live N` (how many live locks),
# and removes dead locks' files. Without flock(1) every lock counts as live. The
# caller's own locks (@SELF@, see `script`) are left out: its own cleanup may remove
# what it made itself.
LIVE_SH = (
    RUNS_DIR_SH
    + r"""
n=0
for f in "$d"/*.lock; do
  [ -e "$f" ] || continue
  case ${f##*/} in @SELF@) continue ;; esac
  if command -v flock >/dev/null 2>&1 && flock -n -s "$f" true 2>/dev/null; then
    rm -f -- "$f"
  else
    n=$((n+1)); cat -- "$f" 2>/dev/null; echo
  fi
done
echo "#live $n"
"""
)


# What every lock of this process has in its name (this machine's and remote hosts').
TOKEN = f"{os.getpid()}-{os.urandom(4).hex()}"


_FOREIGN = [False]  # as_another_process() is on: this process's locks count as live


@contextlib.contextmanager
def as_another_process() -> Iterator[None]:
    """Cleanups in this block see this process's own locks as another process's (live):
    what a separate `rtax cleanup` would see (the probe's `cleanup_spares_live`)."""
    _FOREIGN[0] = True
    try:
        yield
    finally:
        _FOREIGN[0] = False


def script(text: str) -> str:
    """A script embedding LIVE_SH, told which locks are this process's own."""
    return text.replace("@SELF@", "@none@" if _FOREIGN[0] else f"*{TOKEN}*")


def remote_lock_id() -> str:
    """A new lock's id for a remote host's reaper."""
    return f"ssh{TOKEN}-{os.urandom(2).hex()}"


class _Lock:
    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.fd: int | None = None
        self.path = ""
        self.id = f"p{TOKEN}"
        self.labels: list[str] = []
        self.hosts: list[Callable[[str], None]] = []


_lock = _Lock()


def owner() -> str:
    """This process's own label (held): for what has no run label of its own."""
    hold(_lock.id)
    return _lock.id


def _open() -> None:
    d = runs_dir()
    os.makedirs(d, mode=0o755, exist_ok=True)
    path = os.path.join(d, f"{_lock.id}.lock")
    # locked under another name, then renamed: a cleanup never sees it unlocked
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new name: nobody else holds it
    os.rename(path + ".new", path)
    _lock.fd, _lock.path = fd, path
    atexit.register(_release)


def _release() -> None:
    if _lock.fd is not None:
        try:
            os.unlink(_lock.path)
        except OSError:
            pass
        os.close(_lock.fd)
        _lock.fd = None


def hold(label: str) -> None:
    """Mark `label` as this live process's, here and on every subscribed host (before
    anything carrying it is made). Cheap once held."""
    if not label:
        return
    s = safe_label(label)
    with _lock.mutex:
        if s in _lock.labels:
            return
        if _lock.fd is None:
            try:
                _open()
            except OSError:
                _lock.fd = -1  # no lock possible here: cleanups will not see this run
        _lock.labels.append(s)
        if _lock.fd is not None and _lock.fd >= 0:
            os.write(_lock.fd, f"{s}\n".encode())
        senders = list(_lock.hosts)
    for send in senders:
        send(s)


def subscribe(send: Callable[[str], None]) -> None:
    """A remote host's lock: told every label held so far and every later one."""
    with _lock.mutex:
        _lock.hosts.append(send)
        held = list(_lock.labels)
    for s in held:
        send(s)


def unsubscribe(send: Callable[[str], None]) -> None:
    with _lock.mutex:
        if send in _lock.hosts:
            _lock.hosts.remove(send)


_spared = [0]


def note_spared(n: int) -> None:
    """A cleanup spared `n` resources of live runs (summed for `rtax cleanup`)."""
    _spared[0] += n


def take_spared() -> int:
    n, _spared[0] = _spared[0], 0
    return n


def live_runs() -> list[set[str]]:
    """The labels of each live lock on this machine (dead locks' files are removed)."""
    d = runs_dir()
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".lock"))
    except OSError:
        return []
    out = []
    for n in names:
        if TOKEN in n and not _FOREIGN[0]:
            continue  # this process's own
        path = os.path.join(d, n)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                with os.fdopen(os.dup(fd)) as f:
                    out.append({x.strip() for x in f.read().split() if x.strip()})
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
        finally:
            os.close(fd)
    return out


def live_labels() -> set[str]:
    return set().union(*live_runs())


def _parse(text: str) -> tuple[set[str], int]:
    labels: set[str] = set()
    n = 0
    for line in text.splitlines():
        if line.startswith("#live "):
            n = int(line.split()[1])
        elif line.strip():
            labels.add(line.strip())
    return labels, n


class _Ran(Protocol):
    @property
    def stdout(self) -> bytes: ...


class CommandHost(Protocol):
    """What `live_on` needs of a host: a command run to its end (and, read if there,
    `controller_local`). `hosts.base.Host` is one; the model, the bottom layer, imports
    no host (pyproject's import-linter layers), so it names the method, not the class."""

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> _Ran: ...


async def live_labels_on(host: CommandHost) -> set[str]:
    """The live labels on `host` (a Host): this machine's locks, or the remote host's."""
    return (await live_on(host))[0]


async def live_on(host: CommandHost) -> tuple[set[str], int]:
    """(live labels, how many live runs) on `host`."""
    if getattr(host, "controller_local", False):
        runs = live_runs()
        return set().union(*runs), len(runs)
    res = await host.run(["sh", "-c", script(LIVE_SH)], timeout=60)
    return _parse(res.stdout.decode(errors="replace"))
