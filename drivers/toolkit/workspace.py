"""The driver toolkit's workspace and process helpers, shared by every driver.

Workspaces (`rtax-ws-<label>-*` under the host's temporary directory, tracked with the
host's reaper), the environment variables of a plain workspace, a sandbox's own cgroup,
one process per action, closing a persistent shell, which tools a host lacks, and
cleanup by label. Everything goes through the `Host` interface, so it works on any host.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from rtax_tui.drivers.base import Problem
from rtax_tui.drivers.toolkit.stepenv import step_env

from rtax_tui.hosts import Host, LocalHost, names, safefs
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import runlock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure

# for plugins: what their workspaces are named starting with (hosts/names.py owns it)
WORKSPACE_PREFIX = names.WORKSPACE
T = TypeVar("T")


def base_env(workspace: str, extra: dict[str, str], path: str | None = None) -> dict[str, str]:
    """A step in a plain workspace on a host: home and temporary files in the workspace,
    the host's programs (`path`, else the controller's PATH)."""
    return step_env(
        path=path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        home=workspace,
        tmpdir=workspace,
        extra=extra,
    )


async def make_workspace(host: Host, label: str, size_mib: int | None = None) -> str:
    """An empty workspace on the controller, tracked before it exists (for drivers that
    fill it themselves; `host` is the controller: LocalHost): its own tmpfs of
    `size_mib` MiB, or a plain directory (None)."""
    if not isinstance(host, LocalHost):
        raise TypeError("make_workspace makes a directory on the controller: a LocalHost")
    return await host.make_workspace(names.workspace(label), size_mib=size_mib)


async def settled(current: T | None, making: asyncio.Future[T] | None, within_s: float) -> T | None:
    """What a create's shielded step made (`making`: a workspace, a spawned process),
    also when the create was cancelled while it ran: a teardown waits for a step still
    running (up to `within_s`) and takes its result where the create never got it
    (`current` None), so that it ends what was made and a cancelled create leaves
    nothing behind."""
    if making is not None and not making.done():
        try:
            await asyncio.wait_for(asyncio.shield(making), within_s)
        except Exception:
            pass
    if current is None and making is not None and making.done():
        if not making.cancelled() and making.exception() is None:
            return making.result()
    return current


async def made_workspace(current: str | None, making: asyncio.Future[str] | None) -> str | None:
    """The workspace a create made (`settled`, waiting up to 60 s for the make)."""
    return await settled(current, making, 60)


async def drop_workspace(
    host: Host,
    current: str | None,
    making: asyncio.Future[str] | None,
    before: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """A teardown's removal of the workspace its create made (`made_workspace`: also one
    a cancelled create left), after `before(path)` (what must end first, e.g. what runs
    in it). The caller then forgets both `current` and `making`."""
    path = await made_workspace(current, making)
    if path is not None:
        if before is not None:
            await before(path)
        await host.remove_tree(path)


async def remove_workspace(host: Host, path: str) -> None:
    """A controller-side workspace removed (`host.remove_tree`'s rule: forgotten by the
    reaper only once nothing of it is left)."""
    if not await asyncio.to_thread(safefs.remove_workspace, path):
        host.untrack("path", path)


def workspace_mib(spec: EnvSpec) -> int | None:
    """The size of a spec's workspace tmpfs: its limits' `workspace_mib` (None,
    "unlimited" in the profile: a plain directory)."""
    v = spec.limits.workspace_mib
    return None if v is None else int(v)


def start_workspace(host: Host, spec: EnvSpec) -> asyncio.Future[str]:
    """The making of a trial's plain workspace on `host` (named for its label, filled from
    its `workspace_src`, of its `workspace_mib`), started: the caller keeps the future for
    its teardown (`made_workspace`) and awaits it shielded, so a create cancelled while the
    host makes it still learns the path, and its teardown removes what was made."""
    return asyncio.ensure_future(
        host.make_workspace(
            names.workspace(spec.label), spec.workspace_src, size_mib=workspace_mib(spec)
        )
    )


class CgroupEnv(Protocol):
    """An environment with a cgroup of its own (stage's sandbox, gvisor's)."""

    host: Host
    spec: EnvSpec
    cg: str | None
    procs: list[str]


async def new_env_cgroup(env: CgroupEnv, pids: int | None, suffix: str | None = None) -> None:
    """A new cgroup for `env`'s sandbox, `rtax/env-<label>-<suffix>` (or under the
    capacity batch's budget, `spec.cgroup_parent`), with the cell's CPU and memory limits
    and `pids` (the driver's: gVisor's host cgroup holds a backstop above the sandbox's
    own); its `cgroup.procs` files in `env.procs`. Its path is `env.cg` before it is
    made, so a create cancelled meanwhile leaves its teardown the path to remove; when
    the making fails the host removed what it had made, and `env.cg` is None."""
    spec = env.spec
    lim = spec.limits
    env.cg = Cgroup.relpath_of(names.env_cgroup(spec.label, suffix), spec.cgroup_parent)
    try:
        env.procs = await env.host.make_cgroup(
            env.cg, cpus=lim.cpus, memory_mib=lim.memory_mib, pids=pids
        )
    except PhaseFailure:
        env.cg = None
        raise


def populate(workspace: str, src: str | None, uid: int | None = None) -> None:
    """Copy `src`'s contents into `workspace` (which an environment may be writing): every
    entry made beneath the workspace's fd with O_EXCL | O_NOFOLLOW, given to `uid`."""
    if src:
        fd = os.open(workspace, safefs.DIR_FLAGS)
        try:
            safefs.copy_into(src, fd, uid)
        finally:
            os.close(fd)


def empty_dir(path: str, root: str | None = None) -> list[str]:
    """Remove everything inside `path` (not `path` itself), without following links or
    crossing mounts (`safefs.empty_dir`; with `root`, `path` is resolved beneath it): a
    pooled environment's clean reset (engine.pool) empties its writable places so."""
    return safefs.empty_dir(path, root)


async def run_exec(
    host: Host,
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str] | None,
    timeout: float | None,
    cgroup_procs: list[str] | tuple[str, ...] = (),
) -> ActionResult:
    """One process per action; stdout and stderr merged (the first OUTPUT_LIMIT bytes
    kept, the rest read and counted); killed whole at the timeout."""
    res = await host.run(
        argv,
        cwd=cwd,
        env=env,
        timeout=timeout,
        merge_stderr=True,
        cgroup_procs=cgroup_procs,
        capped=True,
    )
    return ActionResult(rc=res.returncode, output=res.stdout, dropped=res.dropped)


async def close_shell(proc: Any, host: Host, grace: float = 1.0) -> None:
    """Ask the shell to exit; kill its whole session if it does not (on its host)."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        try:
            proc.stdin.write(b"exit 0\n")
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        pass
    await host.kill(proc)  # also ends anything the shell left in the background
    await proc.wait()
    host.release(proc)


async def tools_problems(host: Host, tools: tuple[str, ...]) -> list[Problem]:
    """What a host lacks among `tools` (one command, over its connection if it has one)."""
    script = 'for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'
    try:
        res = await host.run(["sh", "-c", script, "rtax-check", *tools], timeout=30)
    except PhaseFailure as exc:
        return [Problem(f"host {host.name} does not answer: {exc.message}", "check the network")]
    except OSError as exc:  # no sh at all
        return [Problem(f"host {host.name} cannot run sh: {exc}", "install dash or bash")]
    missing = res.stdout.decode(errors="replace").split()
    if res.returncode != 0 or missing:
        return [
            Problem(
                f"not on PATH on host {host.name}: {', '.join(missing) or 'sh'}",
                "install them there (coreutils, tar, dash)",
            )
        ]
    return []


# Workspaces named `prefix*` and what runs in them (by cwd), spared when their name
# carries a live run's label (model/runlock.py): candidates first, then the live labels,
# so a run that started meanwhile made nothing listed. Prints `removed spared`. The names
# are kept in "$@", never in a string split on spaces: anyone can make `rtax-ws-x -a` in
# /tmp, and its words would reach umount and rm as an option (`-a`: every mount) or as
# names in the current directory.
CLEANUP_SH = (
    names.sh_assign()
    + safefs.GONE_SH
    + "\n"
    + r"""p=$1; n=0; s=0; t=${TMPDIR:-/tmp}
set --; for w in "$t/$p"*; do [ -e "$w" ] && set -- "$@" "$w"; done
live=$( (
"""
    + runlock.LIVE_SH
    + r"""
) | grep -v '^#')
for w in "$@"; do  # the dead stay in "$@"
  shift; k=; for l in $live; do case $w in "$t/$WS$l-"*) k=1; break ;; esac; done
  if [ -n "$k" ]; then s=$((s+1)); else set -- "$@" "$w"; fi
done
if [ $# -gt 0 ]; then
  for d in /proc/[0-9]*; do
    x=$(readlink "$d/cwd" 2>/dev/null) || continue
    for w in "$@"; do case $x in "$w"|"$w"/*) kill -KILL "${d#/proc/}" 2>/dev/null ;; esac; done
  done
fi
for w in "$@"; do
  rtax_gone "$w"; n=$((n+1))
done
echo $n $s
"""
)


def counts(out: bytes) -> int:
    """A cleanup script's last line, `removed spared`: the removed (the spared are noted
    for `rtax cleanup`'s report)."""
    removed, spared = out.split()[-2:]
    runlock.note_spared(int(spared))
    return int(removed)


async def run_cleanup(
    host: Host, script: str, args: list[str], failed: Callable[[bytes], str]
) -> int:
    """A cleanup script (one that spares a live run's, `runlock.script`) run on `host`
    with `args`: how many it removed (`counts`); CLEANUP_FAILED, `failed(its stderr)`,
    when it prints no count."""
    argv = ["sh", "-c", runlock.script(script), "rtax-cleanup", *args]
    res = await host.run(argv, timeout=60)
    try:
        return counts(res.stdout)
    except (ValueError, IndexError):
        raise PhaseFailure(ErrorKind.CLEANUP_FAILED, failed(res.stderr)) from None


async def workspace_cleanup(host: Host, prefix: str) -> int:
    """Leftover workspaces named `prefix*` on a host, and processes inside them."""
    failed = f"host {host.name}: {shlex.join(['cleanup', prefix])} failed"
    return await run_cleanup(host, CLEANUP_SH, [prefix], lambda _err: failed)
