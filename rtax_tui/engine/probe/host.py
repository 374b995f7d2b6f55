"""The host's side of `rtax probe`: what it plants, what it listens with, what it sees.

Everything goes through the host abstraction (`host.run`, `host.spawn`, `host.kill`),
so the sentinels, sockets and listeners are on the machine the environments run on,
SSH hosts included. Tokens travel on stdin, never in a command line (a process list
would show them). Every planted path carries a random hex and is registered with
the host's reaper, so even a killed probe leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.engine.probe import scripts as S
from rtax_tui.engine.probe.classify import facts
from rtax_tui.hosts.base import Host

PLANT_TIMEOUT_S = 60.0


def token(kind: str) -> str:
    return f"rtax-probe-{kind}-{os.urandom(12).hex()}"


def is_local(host: Host) -> bool:
    from rtax_tui.hosts.local import LocalHost

    return isinstance(host, LocalHost)


@dataclass
class Listener:
    """The probe's host process: loopback TCP and unix listeners, a SIGCONT logger."""

    proc: Any
    port: int
    pid: int
    tag: str  # in its command line: what the process-visibility check looks for
    hello: str  # what it sends to every client
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    def count(self, what: str, since: int = 0) -> int:
        return sum(1 for line in self.lines[since:] if line == what)

    def gone(self) -> bool:
        """Its output ended: the process died (a step that can signal the host's
        processes can kill it, and then no connection or signal is ever logged)."""
        return self.reader is not None and self.reader.done()


@dataclass
class HostPlant:
    """What was planted on one host, and the host's own facts the checks compare with."""

    host: Host
    hex: str
    tmp: str = ""
    cache: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    sockets: dict[str, list[str]] = field(default_factory=dict)
    shadow_md5: str | None = None
    cmdline_md5: str | None = None
    blockdevs: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    boot: str = ""
    mntns: str = ""
    pidns: str = ""
    memavail_mib: int | None = None
    loop: str = ""  # a loop device on a file holding a token (the block device sentinel)
    python3: str | None = None
    rtax_pid: int | None = None
    listener: Listener | None = None
    extra_files: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    @property
    def sock_dir(self) -> str:
        return self.paths.get("sock_dir", "")


async def plant(host: Host) -> HostPlant:
    """Sentinels (tmp, cache, /root), the listener, and the host's facts."""
    p = HostPlant(host=host, hex=os.urandom(6).hex())
    if is_local(host):
        from rtax_tui.drivers.toolkit.assets import cache_dir

        tmp, cache = tempfile.gettempdir(), str(cache_dir())
        p.rtax_pid = os.getpid()
    else:
        tmp, cache = "", ""
    keys = ("tmp_sentinel", "cache_sentinel", "root_home", "block_devices", "usr_local")
    toks = {k: token(k.split("_")[0]) for k in keys}
    p.tokens.update(toks)
    data = (" ".join(toks[k] for k in keys) + "\n").encode()
    for path in _planted_paths(p.hex, tmp, cache):
        track(host, path)  # before anything exists: a killed probe leaves nothing
    res = await host.run(
        ["sh", "-c", S.HOST_PLANT, S.ARG0, p.hex, tmp, cache],
        input=data,
        timeout=PLANT_TIMEOUT_S,
    )
    f = facts(res.stdout.decode(errors="replace"))
    p.tmp = (f.get("tmp") or [tmp])[0]
    p.cache = (f.get("cache") or [cache])[0]
    if not is_local(host):
        for path in _planted_paths(p.hex, p.tmp, p.cache):
            track(host, path)
    for key in ("tmp_sentinel", "cache_sentinel", "sock_dir", "links_dir"):
        if f.get(key):
            p.paths[key] = f[key][0]
    if f.get("root_sentinel"):
        p.paths["root_home"] = f["root_sentinel"][0]
    if f.get("usr_local_sentinel"):
        p.paths["usr_local"] = f["usr_local_sentinel"][0]
    p.cmdline_md5 = (f.get("cmdline") or [""])[0] or None
    for kv in f.get("socket") or []:
        kind, _, path = kv.partition(":")
        p.sockets.setdefault(kind, [])
        if path not in p.sockets[kind]:
            p.sockets[kind].append(path)
    p.shadow_md5 = (f.get("shadow") or [""])[0] or None
    p.loop = (f.get("loop") or [""])[0]
    for spec in f.get("blockdev") or []:
        maj, mn, name, size, md5 = (spec.split(":") + ["", "", "", "0", ""])[:5]
        p.blockdevs.append((maj, mn, name, int(size) if size.isdigit() else 0, md5))
    mem = (f.get("memavail_kib") or [""])[0]
    p.memavail_mib = int(mem) // 1024 if mem.isdigit() else None
    p.python3 = sys.executable if is_local(host) else ((f.get("python3") or [""])[0] or None)
    ident = await host.run(["sh", "-c", S.IDENTIFY, S.ARG0], timeout=PLANT_TIMEOUT_S)
    idf = facts(ident.stdout.decode(errors="replace"))
    p.boot = (idf.get("boot") or [""])[0]
    p.mntns = (idf.get("mntns") or [""])[0]
    p.pidns = (idf.get("pidns") or [""])[0]
    try:
        p.listener = await _listen(p)
    except Exception as exc:  # the checks that need it say n/a, with this reason
        p.problems.append(f"no listener on the host: {type(exc).__name__}: {exc}")
    if p.listener is not None:
        p.paths["probe_socket"] = os.path.join(p.sock_dir, "probe.sock")
        p.tokens["probe_socket"] = p.listener.hello
        p.tokens["loopback_tcp"] = p.listener.hello
        p.tokens["host_processes"] = p.listener.tag
    return p


def _planted_paths(hex_: str, tmp: str, cache: str) -> list[str]:
    out = [f"/root/.rtax-probe-{hex_}", f"/usr/local/.rtax-probe-{hex_}"]
    if tmp:
        out += [f"{tmp}/rtax-probe-{hex_}", f"{tmp}/rtax-probe-sock-{hex_}"]
        out.append(f"{tmp}/rtax-probe-blk-{hex_}")
    if cache:
        out.append(f"{cache}/probe-{hex_}")
    return out


def track(host: Host, path: str) -> None:
    """Register `path` with the host's reaper (removed if the probe dies first)."""
    host.track("path", path)


def untrack(host: Host, path: str) -> None:
    host.untrack("path", path)


async def _listen(p: HostPlant) -> Listener | None:
    if not p.python3 or not p.sock_dir:
        p.problems.append("no python3 on the host (or no socket directory): no listener")
        return None
    tag = token("proc")
    hello = token("hello")
    proc = await p.host.spawn(
        [p.python3, "-c", S.LISTENER, os.path.join(p.sock_dir, "probe.sock"), tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        proc.stdin.write(hello.encode() + b"\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        parts = line.decode(errors="replace").split()
        if len(parts) != 3 or parts[0] != "ready":
            raise RuntimeError(f"the listener said {line[-200:]!r}")
    except BaseException:
        await _stop_proc(p.host, proc)
        raise
    lst = Listener(proc=proc, port=int(parts[1]), pid=int(parts[2]), tag=tag, hello=hello)

    async def read() -> None:
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                return
            lst.lines.append(raw.decode(errors="replace").strip())

    lst.reader = asyncio.ensure_future(read())
    return lst


async def _stop_proc(host: Host, proc: Any) -> None:
    try:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 3)
    except Exception:
        pass
    try:
        await host.kill(proc)
        await asyncio.wait_for(proc.wait(), 5)
    except Exception:
        pass
    host.release(proc)


async def settle(delay: float = 0.3) -> None:
    """Let the listener's log catch up with what the last step did."""
    await asyncio.sleep(delay)


async def host_answer(host: Host, timeout: float = 10.0) -> dict[str, Any]:
    """How long the host takes to run `true` (its health during a fork bomb or a hog)."""
    t = time.monotonic_ns()
    try:
        res = await host.run(["true"], timeout=timeout)
    except Exception as exc:
        return {"host_ms": None, "host_error": f"{type(exc).__name__}: {exc}"}
    if res.returncode != 0:
        return {"host_ms": None, "host_error": f"`true` returned {res.returncode}"}
    return {"host_ms": round((time.monotonic_ns() - t) / 1e6, 1)}


async def free_mib(host: Host, path: str) -> tuple[int | None, str]:
    """The free space (MiB) of the host's filesystem holding `path`, and its mount point."""
    try:
        res = await host.run(["sh", "-c", S.HOST_FREE, S.ARG0, path], timeout=30)
    except Exception:
        return None, ""
    f = facts(res.stdout.decode(errors="replace"))
    got = (f.get("free_mib") or [""])[0]
    return (int(got) if got.isdigit() else None), (f.get("fs") or [""])[0]


async def path_exists(host: Host, path: str) -> bool:
    """`path` exists on the host (a link included)."""
    script = 'test -e "$1" || test -L "$1"'
    res = await host.run(["sh", "-c", script, S.ARG0, path], timeout=30)
    return bool(res.returncode == 0)


async def reached_host(p: HostPlant, name: str, dirs: list[str]) -> list[str]:
    """Which of `dirs` hold a file `name` on the host (each one found is removed)."""
    if not dirs:
        return []
    res = await p.host.run(["sh", "-c", S.HOST_WROTE, S.ARG0, name, *dirs], timeout=60)
    return [line for line in res.stdout.decode(errors="replace").splitlines() if line]


async def cleanup(p: HostPlant) -> None:
    """Stop the listener; remove every planted path and the files steps left on the host."""
    if p.listener is not None:
        await _stop_proc(p.host, p.listener.proc)
        if p.listener.reader is not None:
            p.listener.reader.cancel()
        p.listener = None
    res = await p.host.run(
        ["sh", "-c", S.HOST_CLEANUP, S.ARG0, p.hex, p.tmp or "/nonexistent",
         p.cache or "/nonexistent", p.loop, *sorted(p.extra_files)],
        timeout=60,
    )  # fmt: skip
    # only what went is forgotten: a cleanup cut short (a second ^C, its time limit) or
    # one that left a loop device keeps the paths with the reaper, which detaches every
    # loop on a file under them and removes them when the probe ends
    if res.returncode == 0:
        for path in _planted_paths(p.hex, p.tmp, p.cache):
            untrack(p.host, path)
