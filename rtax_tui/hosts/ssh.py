"""A remote host over SSH (asyncssh), with LocalHost's `subprocess`-shaped API.

One connection per host, reused by every trial; each command is a channel on it.
Commands are argv lists joined with `shlex.join`; nothing reaches the remote shell
unquoted. Every remote command runs as the leader of its own process group (sshd
makes one session per channel) and announces its pid first, so the controller can
kill the whole group. A remote reaper (an `awk` on its own channel) holds what is
alive on the host; when its channel closes (the run ended, rtax was killed, the
connection dropped) it kills the groups and removes the workspaces left behind. A
third long-lived channel reads the host's monotonic clock on request: the host's
clock is synchronised with the controller's at connection and on a schedule
(`hosts.clocksync`), so no action has to read it.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import secrets
import shlex
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.hosts.base import CompletedProcess, Host, Leftover
from rtax_tui.hosts.cgroup_sh import cgroup_dirs
from rtax_tui.hosts.clocksync import ClockSync, RemoteClock, from_samples
from rtax_tui.hosts.safefs import GONE_SH
from rtax_tui.model import runlock
from rtax_tui.model import spec as model
from rtax_tui.model.spec import HostLost, OutputSink, RtaxError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SAFE_PATH = re.compile(r"[A-Za-z0-9_./@:+-]+")
KEEPALIVE_S = 2.0
KEEPALIVE_COUNT = 3
CONNECT_TIMEOUT_S = 15.0
CLOCK_SYNC_S = 30.0  # between two clock syncs of a connection
CLOCK_SAMPLES = 8  # round trips a sync takes (its bound: half the quickest at most)

# The clock channel: for every line it reads, the host's monotonic "now" in ns, from the
# third line of /proc/timer_list (root only; no process started), or an empty line.
CLOCK_SH = (
    "while read -r _; do t=; { read _r _r; read _r _r; read _r _r t _r; } "
    '2>/dev/null </proc/timer_list; echo "$t"; done'
)


def _awk_string(s: str) -> str:
    """`s` as an awk string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# The remote reaper: remembers process groups, paths and cgroup dirs; at EOF it ends them.
REAPER_AWK = (
    "BEGIN { gone = "
    + _awk_string(GONE_SH + "; rtax_gone ")
    + r""" }
$1 == "+g" { g[$2] = 1; next }
$1 == "-g" { delete g[$2]; next }
$1 == "+p" { p[$2] = 1; next }
$1 == "-p" { delete p[$2]; next }
$1 == "+f" { f[$2] = 1; next }
$1 == "-f" { delete f[$2]; next }
$1 == "+c" { c[$2] = 1; next }
$1 == "-c" { delete c[$2]; next }
END {
  for (k in g) system("kill -9 -" k " 2>/dev/null")
  for (k in p) system(gone k)  # safefs.GONE_SH: a link at the name is never unmounted through
  for (k in f) system("rm -f -- " k " 2>/dev/null")  # a file: unlinked alone, a link not followed
  # cgroups: kill what is inside, rmdir; a killed process leaves its cgroup a little
  # later on a busy host, so every dir left is retried, round after round, for 30 s
  # (one not there is awaited 3 s)
  for (round = 0; round < 300; round++) {
    left = 0
    for (k in c) {
      # not there (yet): a create script cut off by the disconnect may still mkdir it
      if (system("[ -d " k " ]") != 0) { if (round >= 30) delete c[k]; else left = 1; continue }
      system("for q in $(cat " k "/cgroup.procs 2>/dev/null); do kill -KILL $q; done 2>/dev/null")
      if (system("rmdir " k " 2>/dev/null") == 0) delete c[k]; else left = 1
    }
    if (!left) break
    system("sleep 0.1")
  }
  if (lock != "") system("rm -f -- '" lock "'")
}
"""
)

# Starts the reaper holding the run lock (model/runlock.py) on fd 9: the lock outlives
# the connection until the reaper has removed what was left. A shell loop in front
# appends `+l LABEL` lines to the lock at once (awk may read its input in blocks) and
# hands the rest to awk. Its first output line is the host's temporary directory, where
# workspaces go (their names are chosen by rtax and registered before they exist).
# Args: LOCK_ID AWK_PROGRAM
REAPER_SH = (
    runlock.RUNS_DIR_SH
    + r"""
printf '%s\n' "${TMPDIR:-/tmp}"
f="$d/$1.lock"
if mkdir -p "$d" 2>/dev/null && [ -w "$d" ]; then  # locked, then named: see runlock
  exec 9>>"$f.new"; flock -n 9 2>/dev/null; mv -f "$f.new" "$f"
else f=; fi
while IFS= read -r l; do
  case $l in
    "+l "*) [ -z "$f" ] || printf '%s\n' "${l#+l }" >&9 ;;
    *) printf '%s\n' "$l" ;;
  esac
done | awk -v lock="$f" "$2"
"""
)

# One command for the facts of the host, `key=value` a line.
FACTS_SH = r"""
echo "kernel=$(uname -r)"
echo "cpu_model=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1)"
echo "cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)"
echo "memory_kib=$(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo)"
cs=/sys/devices/system/clocksource/clocksource0/current_clocksource
echo "clocksource=$(cat $cs 2>/dev/null)"
echo "os=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null)"
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then echo cgroup=v2;
elif [ -d /sys/fs/cgroup/memory ]; then echo cgroup=v1; fi
for t in docker podman qemu-system-x86_64 libvirtd bwrap python3; do
  if command -v "$t" >/dev/null 2>&1; then
    echo "version_$t=$("$t" --version 2>&1 | head -n1)"
  fi
done
"""


def _reaper_lines(sign: str, kind: Leftover, value: str) -> list[str]:
    """The remote reaper's lines for one leftover (a cgroup: its dir in every hierarchy,
    v2's and v1's, whichever the host has)."""
    if kind == "pgid":
        return [f"{sign}g {int(value)}"]
    if kind == "containers":  # drivers with containers do not run on SSH hosts
        raise ValueError("the remote reaper does not remove containers")
    if not SAFE_PATH.fullmatch(value):  # the reaper hands it to a shell
        raise ValueError(f"unsafe {kind} for the remote reaper: {value!r}")
    if kind in ("path", "file"):
        if not value.startswith("/"):  # never an option to umount or rm (`-a`)
            raise ValueError(f"the remote reaper takes an absolute {kind}: {value!r}")
        return [f"{sign}{kind[0]} {value}"]
    return [f"{sign}c {d}" for d in cgroup_dirs(value)]


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to log in; `name` is what recordings and reports call the host."""

    name: str
    address: str
    user: str | None = None
    port: int = 22
    identity: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    concurrency: int | None = None
    trust_new: bool = False
    keepalive_s: float = KEEPALIVE_S
    clock_sync_s: float = CLOCK_SYNC_S
    extra: dict[str, Any] = field(default_factory=dict)


KEY_MAX = 1 << 20  # a private key file is a few KiB; rtax reads at most 1 MiB of one


def _private_key(path: str) -> Any:
    """The `--identity` key, read now: a file that is no private key asyncssh can import
    (or that cannot be read) is one line naming the flag."""
    import asyncssh

    from rtax_tui.model.inputs import read_input

    # a regular file of bounded size, opened without blocking: a FIFO would hold the loop's
    # thread (no signal handled), /dev/zero would be read until memory runs out
    try:
        data = read_input(path, "a private key", KEY_MAX)
    except RtaxError as exc:  # read_input's one line, named for the flag
        raise RtaxError(f"--identity {exc}") from None
    try:
        return asyncssh.import_private_key(data)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise RtaxError(f"--identity {path}: not a private key rtax can use ({exc})") from None


KNOWN_HOSTS_MAX = 16 << 20  # a known_hosts file of 100,000 hosts is about 10 MiB


def _known_hosts(path: str) -> Any:
    """The `--known-hosts` file, read now as `_private_key` reads a key (a regular file of
    bounded size, opened without blocking), and handed to asyncssh as its entries: given
    the path, asyncssh would open it itself when a server answers, where a FIFO would
    hold the loop's thread."""
    import asyncssh

    from rtax_tui.model.inputs import read_input

    try:
        data = read_input(os.path.expanduser(path), "a known_hosts file", KNOWN_HOSTS_MAX)
    except RtaxError as exc:
        raise RtaxError(f"--known-hosts {exc}") from None
    try:
        return asyncssh.import_known_hosts(data.decode("utf-8", "replace"))
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise RtaxError(f"--known-hosts {path}: not a known_hosts file ({exc})") from None


def host_name_wrong(host: str) -> str | None:
    """Why `host` (a name or an address) is no host name a resolver takes: a label over
    63 bytes, a name over 253, one IDNA cannot encode; None when it is one."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
        _, pct, zone = host.partition("%")  # an IPv6 scope: an interface's name or number
        if pct and not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.:-]{0,63}", zone):
            return "its zone is no interface name"
        return None
    except ValueError:
        pass
    if host.startswith("-"):
        return "it starts with '-'"
    if not host.isprintable() or any(c.isspace() for c in host):
        return "it holds a space or a control character"
    try:
        encoded = host.encode("idna")
    except UnicodeError as exc:
        return f"IDNA cannot encode it: {exc}"
    if len(encoded.rstrip(b".")) > 253:
        return "longer than 253 bytes"
    for label in encoded.rstrip(b".").split(b"."):
        if not 0 < len(label) <= 63:
            return "a label is empty or longer than 63 bytes"
    return None


USER_RULE = "letters, digits, '.', '_' and '-' (not first), at most 64"


def user_name_wrong(user: str) -> bool:
    """Whether `user` is no SSH user name rtax takes (USER_RULE): one rule for `--host`'s
    URL and a profile's `[hosts.NAME]`, so neither hands asyncssh a newline or an option."""
    return re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}", user) is None


def parse_ssh_url(url: str, **kw: Any) -> SSHTarget:
    """`ssh://[user@]host[:port]` -> SSHTarget named `user@host:port`."""
    shown = url if len(url) <= 80 else url[:77] + "..."  # an error is one short line
    if not url.startswith("ssh://"):
        raise RtaxError(f"host {shown!r}: expected `local` or ssh://[user@]host[:port]")
    rest = url[len("ssh://") :].rstrip("/")
    user, _, hostport = rest.rpartition("@")
    host, port = hostport, 22
    # a port of at most 5 digits: int() of thousands would hit Python's limit
    m = re.fullmatch(r"\[([^\]]+)\](?::([0-9]{1,5}))?|([^:]+)(?::([0-9]{1,5}))?", hostport)
    if not m:
        raise RtaxError(f"host {shown!r}: cannot read host and port")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4) or 22)
    if not host or not (0 < port < 65536):
        raise RtaxError(f"host {shown!r}: bad host or port")
    why = host_name_wrong(host)
    if why is not None:
        raise RtaxError(f"host {shown!r}: not a host name ({why})")
    if user and user_name_wrong(user):
        raise RtaxError(f"host {shown!r}: not a user name ({USER_RULE})")
    name = f"{user + '@' if user else ''}{host}:{port}"
    return SSHTarget(name=name, address=host, user=user or None, port=port, **kw)


def remote_command(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = False,
    cgroup_procs: Sequence[str] = (),
    announce: bool = True,
    discard_stderr: bool = False,
) -> str:
    """A shell command line for `argv`; every word is quoted.

    `echo $$` first: the channel's shell is its session's leader, so its pid is the
    process group of everything the command starts (it keeps the pid through exec).
    """
    parts = ["echo $$"] if announce else []
    parts += [f"echo $$ > {shlex.quote(f)}" for f in cgroup_procs]
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)}")
    cmd = "exec "
    if env is not None:
        cmd += "env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "
    cmd += shlex.join(list(argv))
    if merge_stderr:
        cmd += " 2>&1"
    elif discard_stderr:  # on the host: none crosses the connection; read-write, as
        cmd += " 2<>/dev/null"  # subprocess.DEVNULL is (shellframe.frame_apart reads it)
    parts.append(cmd)
    return " && ".join(parts)


def _host_lost(host: str, exc: BaseException) -> HostLost:
    return HostLost(f"host {host}: {type(exc).__name__}: {exc}".rstrip(": "))


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What a lost connection raises on a channel's streams (asyncssh is imported by then:
    the connection is its)."""
    import asyncssh

    return (asyncssh.Error, OSError)


class _Reader:
    """SSHReader with connection errors turned into HostLost (FramedShell's stdout). It
    reads on demand into a buffer of its own, so that `readuntil` is bounded as asyncio's
    (asyncssh's own gathers the whole stream until the separator comes): holding `limit`
    bytes with no separator, it raises `LimitOverrunError` and `readexactly` takes them
    (`shellframe.read_frame`)."""

    def __init__(self, inner: Any, host: str) -> None:
        self._r = inner
        self._host = host
        self._limit = model.READ_LIMIT
        self._buf = bytearray()
        self._eof = False
        self._errors = _connection_errors()  # looked up once, not per read

    async def _call(self, fn: Any, *a: Any) -> bytes:
        try:
            data: bytes = await fn(*a)
        except asyncio.IncompleteReadError:
            raise
        except self._errors as exc:
            raise _host_lost(self._host, exc) from exc
        return data

    async def _fill(self) -> None:
        data = await self._call(self._r.read, 1 << 16)
        if data:
            self._buf += data
        else:
            self._eof = True

    def _take(self, n: int) -> bytes:
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def readuntil(self, sep: bytes) -> bytes:
        start = 0
        while True:
            i = self._buf.find(sep, start)
            if i >= 0:
                return self._take(i + len(sep))
            start = max(0, len(self._buf) - len(sep) + 1)
            if len(self._buf) >= self._limit and start > 0:
                raise asyncio.LimitOverrunError("separator not found within the limit", start)
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buf)), None)
            await self._fill()

    async def readexactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buf)), n)
            await self._fill()
        return self._take(n)

    async def readline(self) -> bytes:
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial

    async def read(self, n: int = -1) -> bytes:
        if self._buf:
            return self._take(len(self._buf) if n < 0 else n)
        if self._eof:
            return b""
        return await self._call(self._r.read, n)


class _Writer:
    def __init__(self, inner: Any, host: str) -> None:
        self._w = inner
        self._host = host
        self._errors = _connection_errors()

    def write(self, data: bytes) -> None:
        try:
            self._w.write(data)
        except self._errors as exc:
            raise _host_lost(self._host, exc) from exc

    async def drain(self) -> None:
        try:
            await self._w.drain()
        except self._errors as exc:
            raise _host_lost(self._host, exc) from exc

    def is_closing(self) -> bool:
        return bool(self._w.is_closing())

    def close(self) -> None:
        try:
            self._w.write_eof()
        except Exception:
            self._w.close()


class RemoteProcess:
    """A running remote command: `stdin`, `stdout`, `pid` (its process group), `wait()`."""

    def __init__(self, host: SSHHost, proc: Any, pid: int) -> None:
        self.host = host
        self._proc = proc
        self.pid = pid
        self.stdin = _Writer(proc.stdin, host.name)
        self.stdout = _Reader(proc.stdout, host.name)

    @property
    def returncode(self) -> int | None:
        rc: int | None = self._proc.returncode
        return rc

    async def wait(self) -> int:
        try:
            await self._proc.wait()
        except Exception:  # the connection is gone: so is the channel
            pass
        rc = self._proc.returncode
        return rc if rc is not None else -1

    def close(self) -> None:
        self._proc.close()


class SSHHost(Host):
    """A machine reached over SSH. `connect()` first; `lost` once the connection drops."""

    path_env = DEFAULT_PATH

    def __init__(self, target: SSHTarget) -> None:
        self.target = target
        self.name = target.name
        self.concurrency = target.concurrency
        self._conn: Any = None
        self._jump: Any = None
        self._reaper: Any = None
        self._tmpdir = "/tmp"  # the host's ${TMPDIR:-/tmp}, as its reaper said at connect
        self._lock = asyncio.Lock()
        self._held = self._hold_remote  # the run lock's labels, sent to the reaper
        self.net: dict[str, Any] = {}
        self._closing = False
        self.clock: RemoteClock | None = None  # None until a sync succeeded
        self.clock_error: str | None = None  # why the host's clock cannot be read
        self._clock_proc: Any = None
        self._clock_lock = asyncio.Lock()
        self._clock_task: asyncio.Task[None] | None = None
        self._clock_watch: Callable[[ClockSync], None] | None = None

    # -- connection ----------------------------------------------------------
    @property
    def lost(self) -> bool:
        return self._conn is None or self._conn.is_closed()

    def _options(self) -> dict[str, Any]:
        t = self.target
        kw: dict[str, Any] = {
            "port": t.port,
            "keepalive_interval": t.keepalive_s,
            "keepalive_count_max": KEEPALIVE_COUNT,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "agent_path": None,
            "password": None,
            "kbdint_auth": False,
            "password_auth": False,
        }
        if t.user:  # else asyncssh's default (the local user, or ~/.ssh/config's); None breaks it
            kw["username"] = t.user
        if t.identity:
            kw["client_keys"] = [_private_key(t.identity)]
        if t.trust_new:
            kw["known_hosts"] = None
        elif t.known_hosts:
            kw["known_hosts"] = _known_hosts(t.known_hosts)
        return kw

    async def _open_jump(self) -> Any:
        """The jump host's connection (same key, known_hosts and checks as the target)."""
        import asyncssh

        jump = self.target.jump
        assert jump is not None  # called only for a target with a jump host
        j = parse_ssh_url(jump if "://" in jump else "ssh://" + jump)
        kw = self._options()
        kw["port"] = j.port
        if j.user:
            kw["username"] = j.user
        try:
            return await asyncssh.connect(j.address, **kw)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise RtaxError(
                f"host {self.name}: jump host {j.name}: its host key is not trusted ({exc}); "
                f"trust it with: ssh-keyscan -p {j.port} {shlex.quote(j.address)} >> "
                f"{self.target.known_hosts or '~/.ssh/known_hosts'}"
            ) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise RtaxError(
                f"host {self.name}: cannot connect to jump host {j.name}: {exc}"
            ) from None

    async def connect(self) -> None:
        """Open the connection (timed: `net.connect_ms`) and the remote reaper.

        Raises RtaxError with a one-line reason (refused, unknown key, auth failed).
        """
        import asyncssh

        async with self._lock:
            if not self.lost:
                return
            t0 = time.monotonic_ns()
            opts = self._options()
            if self.target.jump:
                if self._jump is not None:
                    self._jump.close()
                self._jump = await self._open_jump()
                opts["tunnel"] = self._jump
            try:
                conn = await asyncssh.connect(self.target.address, **opts)
            except asyncssh.HostKeyNotVerifiable as exc:
                raise RtaxError(self._key_message(str(exc))) from None
            except asyncssh.PermissionDenied as exc:
                raise RtaxError(
                    f"host {self.name}: login refused ({exc.reason}); check the user and "
                    "--identity (key-based login only)"
                ) from None
            except ConnectionRefusedError:
                raise RtaxError(
                    f"host {self.name}: cannot connect: connection refused "
                    f"(no SSH server on {self.target.address} port {self.target.port})"
                ) from None
            except (OSError, asyncssh.Error, TimeoutError) as exc:
                msg = str(exc) or type(exc).__name__
                raise RtaxError(f"host {self.name}: cannot connect: {msg}") from None
            self.net["connect_ms"] = round((time.monotonic_ns() - t0) / 1e6, 3)
            self._conn = conn
            self._closing = False
            try:
                lock_id = runlock.remote_lock_id()
                self._reaper = await conn.create_process(
                    shlex.join(["sh", "-c", REAPER_SH, "rtax-reaper", lock_id, REAPER_AWK]),
                    encoding=None,
                    stderr=subprocess.DEVNULL,
                )
                tmp = (await self._reaper.stdout.readline()).decode(errors="replace").strip()
            except (OSError, asyncssh.Error) as exc:
                conn.close()
                self._conn = None
                raise RtaxError(f"host {self.name}: cannot start a command: {exc}") from None
            # where workspaces go: a path the reaper can be handed, or the default
            self._tmpdir = (
                tmp.rstrip("/")
                if SAFE_PATH.fullmatch(tmp) and tmp.startswith("/") and tmp != "/"
                else "/tmp"
            )
            runlock.unsubscribe(self._held)
            runlock.subscribe(self._held)  # the labels held so far, and each later one
            await self._start_clock(conn)

    # -- the host's clock ------------------------------------------------------
    async def _start_clock(self, conn: Any) -> None:
        """Open the clock channel, sync once, and re-sync every `clock_sync_s` while the
        connection lasts. A host whose clock cannot be read (not root: /proc/timer_list
        is root's) says why in `clock_error`; the run goes on without it."""
        import asyncssh

        if self._clock_task is not None:
            self._clock_task.cancel()
            self._clock_task = None
        # a new connection starts a new relation: the host may have rebooted meanwhile
        self.clock, self.clock_error = None, None
        try:
            self._clock_proc = await conn.create_process(
                shlex.join(["sh", "-c", CLOCK_SH]), encoding=None, stderr=subprocess.DEVNULL
            )
        except (OSError, asyncssh.Error) as exc:
            self.clock_error = f"cannot open the clock channel: {exc}"
            return
        if await self.sync_clock() is None:
            return
        self._clock_task = asyncio.ensure_future(self._resync())

    async def _resync(self) -> None:
        while self.clock_error is None:
            await asyncio.sleep(self.target.clock_sync_s)
            if self.lost:
                return
            await self.sync_clock()

    async def sync_clock(self, n: int = CLOCK_SAMPLES) -> ClockSync | None:
        """Take `n` samples on the clock channel, keep the sync (see hosts.clocksync) and
        hand it to the watcher. None when the clock cannot be read (`clock_error`)."""
        proc = self._clock_proc
        if proc is None or self.clock_error is not None or self.lost:
            return None
        async with self._clock_lock:
            samples = []
            try:
                async with asyncio.timeout(10):
                    for _ in range(n):
                        a = time.monotonic_ns()
                        proc.stdin.write(b"\n")
                        line = await proc.stdout.readline()
                        b = time.monotonic_ns()
                        word = line.strip()
                        if not word.isdigit():
                            self.clock_error = (
                                "the host's monotonic clock cannot be read "
                                f"(/proc/timer_list: {'unreadable' if line else 'no answer'})"
                            )
                            return None
                        samples.append((a, int(word), b))
            except Exception as exc:  # a lost connection, or an answer out of step: stop
                if not self.lost:
                    self.clock_error = f"clock sync failed: {type(exc).__name__}: {exc}"
                return None
            if self.clock is None:
                self.clock = RemoteClock()
            s = self.clock.add(from_samples(samples))
        if self._clock_watch is not None:
            self._clock_watch(s)
        return s

    def watch_clock(self, fn: Callable[[ClockSync], None] | None) -> None:
        self._clock_watch = fn

    def _key_message(self, why: str) -> str:
        t = self.target
        kh = t.known_hosts or "~/.ssh/known_hosts"
        return (
            f"host {self.name}: its host key is not trusted ({why}); refusing to connect. "
            f"If this is the right machine, trust it with: "
            f"ssh-keyscan -p {t.port} {shlex.quote(t.address)} >> {kh} "
            "(or, for throw-away test hosts only, --trust-new-hosts)"
        )

    async def measure_rtt(self, n: int = 5) -> float:
        """Median round trip of an empty command on the open connection (ms)."""
        times = []
        for _ in range(n):
            t0 = time.monotonic_ns()
            await self.run(["true"], timeout=30)
            times.append((time.monotonic_ns() - t0) / 1e6)
        times.sort()
        rtt = round(times[len(times) // 2], 3)
        self.net["exec_rtt_ms"] = rtt
        return rtt

    async def close(self) -> None:
        """Close the reaper's stdin (it ends what is left), then the connection."""
        self._closing = True
        runlock.unsubscribe(self._held)
        if self._clock_task is not None:
            self._clock_task.cancel()
            self._clock_task = None
        if self._clock_proc is not None:
            self._clock_proc.close()
            self._clock_proc = None
        if self._reaper is not None:
            try:
                self._reaper.stdin.write_eof()
                await asyncio.wait_for(self._reaper.wait(), 40)  # its cgroup retries: 30 s
            except Exception:
                pass
            self._reaper = None
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 5)
            except Exception:
                pass
            self._conn = None
        if self._jump is not None:
            self._jump.close()
            self._jump = None

    def _hold_remote(self, label: str) -> None:
        self._register(f"+l {label}")

    def _register(self, line: str) -> None:
        if self._reaper is None:
            return
        try:
            self._reaper.stdin.write(line.encode() + b"\n")
        except Exception:
            pass

    def track(self, kind: Leftover, value: str) -> None:
        for line in _reaper_lines("+", kind, value):
            self._register(line)

    def untrack(self, kind: Leftover, value: str) -> None:
        for line in _reaper_lines("-", kind, value):
            self._register(line)

    def _need(self) -> Any:
        if self.lost:
            raise HostLost(f"host {self.name}: the connection is down")
        return self._conn

    # -- the subprocess-shaped API ------------------------------------------
    async def _open(self, command: str, merge_stderr: bool, discard: bool = False) -> Any:
        import asyncssh

        conn = self._need()
        err = asyncssh.STDOUT if merge_stderr else asyncssh.DEVNULL if discard else asyncssh.PIPE
        try:
            return await conn.create_process(command, encoding=None, stderr=err)
        except (asyncssh.Error, OSError) as exc:
            raise _host_lost(self.name, exc) from exc

    async def _pid(self, proc: Any) -> int:
        import asyncssh

        try:
            line = await proc.stdout.readline()
        except (asyncssh.Error, OSError) as exc:
            raise _host_lost(self.name, exc) from exc
        try:
            return int(line)
        except ValueError:
            proc.close()
            raise HostLost(f"host {self.name}: the remote shell did not start ({line!r})") from None

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = subprocess.PIPE,
        stderr: int | None = subprocess.STDOUT,
        cgroup_procs: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
    ) -> RemoteProcess:
        if pass_fds:
            raise HostLost(f"host {self.name}: file descriptors cannot be passed over SSH")
        cmd = remote_command(
            argv,
            cwd=cwd,
            env=env,
            merge_stderr=stderr == subprocess.STDOUT,
            cgroup_procs=cgroup_procs,
            discard_stderr=stderr == subprocess.DEVNULL,
        )
        proc = await self._open(
            cmd, merge_stderr=stderr == subprocess.STDOUT, discard=stderr == subprocess.DEVNULL
        )
        pid = await self._pid(proc)
        self._register(f"+g {pid}")
        return RemoteProcess(self, proc, pid)

    def release(self, proc: RemoteProcess) -> None:
        self._register(f"-g {proc.pid}")

    async def kill(self, proc: RemoteProcess) -> None:
        """SIGKILL the remote process group, then close its channel."""
        if not self.lost:
            try:
                await asyncio.wait_for(
                    self._conn.run(f"kill -9 -{int(proc.pid)} 2>/dev/null", encoding=None),
                    10,
                )
            except Exception:
                pass
        proc.close()

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        merge_stderr: bool = False,
        cgroup_procs: Sequence[str] = (),
        capped: bool = False,
    ) -> CompletedProcess:
        """Run to completion on the host; at the timeout its process group is killed.
        `capped`: as `Host.run` (the output read to its end, the first OUTPUT_LIMIT bytes
        kept)."""
        import asyncssh

        cmd = remote_command(
            argv, cwd=cwd, env=env, merge_stderr=merge_stderr, cgroup_procs=cgroup_procs
        )
        pid: int | None = None
        proc: Any = None
        limit = model.sink_limit(capped)
        sinks = (OutputSink(limit), OutputSink(limit))
        try:
            async with asyncio.timeout(timeout):
                proc = await self._open(cmd, merge_stderr)
                pid = await self._pid(proc)
                self._register(f"+g {pid}")
                if input:
                    proc.stdin.write(input)
                proc.stdin.write_eof()
                if merge_stderr:
                    await _drain(proc.stdout, sinks[0])
                else:
                    await asyncio.gather(
                        _drain(proc.stdout, sinks[0]), _drain(proc.stderr, sinks[1])
                    )
                await proc.wait()
        except (asyncssh.Error, OSError) as exc:
            if isinstance(exc, TimeoutError):  # ours (an OSError since 3.11): kill, re-raise
                self._abandon(proc, pid)
                raise
            raise _host_lost(self.name, exc) from exc
        except BaseException:
            self._abandon(proc, pid)
            raise
        finally:
            if pid is not None:
                self._register(f"-g {pid}")
        rc = proc.returncode if proc.returncode is not None else -1
        out, err = sinks[0].kept(), sinks[1].kept()
        if check and rc != 0:
            raise subprocess.CalledProcessError(rc, list(argv), out, err)
        return CompletedProcess(list(argv), rc, out, err, sinks[0].dropped + sinks[1].dropped)

    def _abandon(self, proc: Any, pid: int | None) -> None:
        """A run given up half-way: kill its remote group in the background."""
        if pid is not None:
            task = asyncio.ensure_future(self.kill(RemoteProcess(self, proc, pid)))
            _background.add(task)
            task.add_done_callback(_background.discard)
        elif proc is not None:
            proc.close()

    # -- workspaces and facts ------------------------------------------------
    async def make_workspace(
        self,
        prefix: str,
        src: str | None = None,
        owner: int | None = None,
        size_mib: int | None = 1024,
    ) -> str:
        """A fresh directory `<remote tmp>/<prefix><16 hex digits>`, filled with `src`'s
        contents (a tar stream on the command's stdin: nothing touches a shared file system)
        and given to `owner` in the same round trip. With `size_mib`, the directory is its
        own tmpfs (root's, 0700, until filled); `chown -R -P -h` changes links, never their
        targets, and rm --one-file-system leaves what is mounted below.

        The name is chosen here and registered with the reaper *before* the command runs:
        a connection lost while the directory is being made (or its name is on its way
        back) still leaves the reaper able to remove it. `mkdir` fails on any existing
        name, so the reaper is never handed a directory rtax did not make."""
        if not SAFE_PATH.fullmatch(prefix) or "/" in prefix:
            raise ValueError(f"unsafe workspace prefix {prefix!r}")
        path = f"{self._tmpdir}/{prefix}{secrets.token_hex(8)}"
        script = (
            GONE_SH + '; d=$1; mkdir -m 0700 -- "$d" || exit 3; '
            'f() { rtax_gone "$d"; exit 1; }; '
            'if [ -n "$4" ]; then mount -t tmpfs -o "size=$4m,mode=0700,nosuid,nodev" '
            'tmpfs "$d" || f; fi; '
            'if [ "$2" = 1 ]; then tar -x -f - -C "$d" || f; fi; '
            'if [ -n "$3" ]; then chown -R -P -h -- "$3:$3" "$d" || f; fi; '
            'echo "$d"'
        )
        data = await tar_bytes(src) if src else None
        self._register(f"+p {path}")
        res = await self.run(
            [
                "sh",
                "-c",
                script,
                "rtax-ws",
                path,
                "1" if data else "0",
                "" if owner is None else str(owner),
                "" if size_mib is None else str(int(size_mib)),
            ],  # fmt: skip
            input=data,
            timeout=120,
        )
        if res.returncode != 0 or res.stdout.decode(errors="replace").strip() != path:
            if res.returncode == 3:  # not made (the name was taken): not ours to remove
                self._register(f"-p {path}")
            raise HostLost(
                f"host {self.name}: cannot make a workspace: "
                f"{(res.stderr or res.stdout).decode(errors='replace').strip()[-300:]}"
            )
        return path

    async def remove_tree(self, path: str) -> None:
        if not SAFE_PATH.fullmatch(path):
            raise ValueError(f"unsafe path {path!r}")
        script = GONE_SH + '; rtax_gone "$1"'
        await self.run(["sh", "-c", script, "rtax-rm", path], timeout=60)
        self._register(f"-p {path}")

    async def facts(self) -> dict[str, Any]:
        """Kernel, CPU, memory, clock source and substrate versions, on this connection."""
        res = await self.run(["sh", "-c", FACTS_SH], timeout=30)
        raw: dict[str, str] = {}
        for line in res.stdout.decode(errors="replace").splitlines():
            k, sep, v = line.partition("=")
            if sep:
                raw[k] = v.strip()
        mem = raw.get("memory_kib", "")
        cpus = raw.get("cpus", "")
        return {
            "kernel": raw.get("kernel"),
            "os": raw.get("os") or None,
            "cpu_model": raw.get("cpu_model") or None,
            "cpus": int(cpus) if cpus.isdigit() else None,
            "memory_mib": int(mem) // 1024 if mem.isdigit() else None,
            "clocksource": raw.get("clocksource") or None,
            "cgroup": raw.get("cgroup"),
            "versions": {
                k[len("version_") :]: v for k, v in raw.items() if k.startswith("version_")
            },
            "transport": "ssh",
            "address": f"{self.target.address}:{self.target.port}",
            "net": dict(self.net),
            **({"clock_error": self.clock_error} if self.clock_error else {}),
        }


async def _drain(stream: Any, sink: OutputSink) -> None:
    """Read an SSH stream to its end into `sink` (at most a chunk held at a time)."""
    while data := await stream.read(1 << 16):
        sink.add(data)


_background: set[asyncio.Task[Any]] = set()
_tar_cache: dict[str, bytes] = {}
_tar_lock = threading.Lock()


async def tar_bytes(src: str) -> bytes:
    """The contents of directory `src` as an uncompressed tar (made once per run)."""

    def build() -> bytes:
        with _tar_lock:
            if src not in _tar_cache:
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                    for name in sorted(os.listdir(src)):
                        tf.add(os.path.join(src, name), arcname=name)
                _tar_cache[src] = buf.getvalue()
            return _tar_cache[src]

    return await asyncio.to_thread(build)
