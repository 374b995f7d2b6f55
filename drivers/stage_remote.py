"""`stage` on a remote host: the same bubblewrap sandbox, built only through the host API.

The boundary is `sandbox.py`'s, argument for argument. Nothing here reads or writes
the controller's file system: the host's `/` is listed with a command, the support
files (the filter, the static `rtax-enter` helper) are copied to `REMOTE_SUPPORT` and
the curated /etc made there once by `check()`, the workspace arrives as a tar stream
(host.make_workspace) and is given to the sandbox uid, the cgroup is made and
removed by small sh scripts, and the sandbox's own pid (for `rtax-enter` on the exec
channel) comes back on the sandbox's stdout (`--info-fd 3`, a copy of stdout).
The remote host needs root, bubblewrap, coreutils and the same CPU
architecture as the controller (the helper is a static binary built here).
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any, Protocol, cast

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.sandbox import (
    HOSTNAME,
    ROOT_NAMES,
    SLEEPER,
    Support,
    SupportError,
    bwrap_argv,
    enter_argv,
    etc_argv,
    local_support,
    sandbox_env,
    sandbox_shell_action,
    spawn_argv,
)
from rtax_tui.drivers.shellframe import FramedShell
from rtax_tui.drivers.workspace import WORKSPACE_PREFIX, close_shell, run_exec, safe_label

from rtax_tui.core.model import ActionResult, EnvSpec, PhaseFailure, Step
from rtax_tui.hosts import Host

READY = b"RTAX-READY"
REMOTE_TOOLS = (
    "bwrap", "sh", "mktemp", "tar", "rm", "cat", "mkdir", "rmdir", "chown", "mv", "uname",
)  # fmt: skip
# Where the support files live on a remote host (root's; bubblewrap gets them as fds).
REMOTE_SUPPORT = "/var/cache/rtax/stage"
# The descriptor the wrapper opens (as root) on the filter, for bubblewrap (which runs
# as the sandbox uid); dash opens none above 9.
SECCOMP_FD = 5
# Runs ARGV with the filter on SECCOMP_FD (and, for the exec channel's --info-fd 3, a
# copy of stdout). Args: FILTER INFO(0|1) ARGV...
SPAWN_SH = r"""f=$1 i=$2; shift 2
if [ "$i" = 1 ]; then exec "$@" 5<"$f" 3>&1; fi
exec "$@" 5<"$f"
"""
# Writes stdin to DIR/NAME (atomically, mode MODE) unless it is there. Args: DIR NAME MODE
PUT_SH = r"""d=$1 n=$2 m=$3
[ -e "$d/$n" ] && { cat >/dev/null; exit 0; }
mkdir -p "$d" && chmod 0700 "$d" && cat >"$d/.tmp-$n" && chmod "$m" "$d/.tmp-$n" \
  && mv -f "$d/.tmp-$n" "$d/$n"
"""

# Lists the top-level entries of `/`: `NAME<TAB>dir|file|link<TAB>TARGET`.
LIST_ROOT_SH = r"""for e in /* /.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  n=${e#/}
  if [ -L "$e" ]; then printf '%s\tlink\t%s\n' "$n" "$(readlink "$e")"
  elif [ -d "$e" ]; then printf '%s\tdir\t\n' "$n"
  elif [ -f "$e" ]; then printf '%s\tfile\t\n' "$n"; fi
done"""

CG_ROOT = "/sys/fs/cgroup"

# Makes cgroup REL in every hierarchy with the limits; prints each cgroup.procs path.
# Args: REL CPU_QUOTA_US MEMORY_BYTES PIDS (empty: no limit).
CG_CREATE_SH = r"""set -e
rel=$1 quota=$2 mem=$3 pids=$4 R=/sys/fs/cgroup
if [ -e $R/cgroup.controllers ]; then
  d=$R
  for part in $(echo "$rel" | tr / ' '); do
    for c in cpu memory pids; do
      grep -qw $c $d/cgroup.controllers 2>/dev/null &&
        { echo +$c > $d/cgroup.subtree_control; } 2>/dev/null || :
    done
    d=$d/$part; [ -d $d ] || mkdir $d
  done
  [ -z "$quota" ] || echo "$quota 100000" > $d/cpu.max
  [ -z "$mem" ] || { echo $mem > $d/memory.max; echo 0 > $d/memory.swap.max 2>/dev/null || :; }
  [ -z "$pids" ] || echo $pids > $d/pids.max
  echo $d/cgroup.procs
  exit 0
fi
[ -e $R/memory/memory.limit_in_bytes ] || { echo "no cgroup hierarchy under $R" >&2; exit 1; }
seen=
for c in cpu memory pids; do
  [ -e $R/$c/cgroup.procs ] || continue
  real=$(readlink -f $R/$c)
  case " $seen " in *" $real "*) continue ;; esac
  seen="$seen $real"
  mkdir -p $R/$c/$rel
  case $c in
    cpu) [ -z "$quota" ] || { echo 100000 > $R/$c/$rel/cpu.cfs_period_us;
         echo $quota > $R/$c/$rel/cpu.cfs_quota_us; } ;;
    memory) [ -z "$mem" ] || echo $mem > $R/$c/$rel/memory.limit_in_bytes ;;
    pids) [ -z "$pids" ] || echo $pids > $R/$c/$rel/pids.max ;;
  esac
  echo $R/$c/$rel/cgroup.procs
done"""

# Kills everything in the cgroup dirs given, then removes them (bounded wait).
CG_REMOVE_SH = r"""for i in $(seq 1 200); do
  left=
  for d in "$@"; do
    [ -d "$d" ] || continue
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 $p 2>/dev/null; left=1; done
    [ -n "$left" ] || rmdir "$d" 2>/dev/null || left=1
  done
  [ -n "$left" ] || exit 0
  sleep 0.01
done
echo "cgroup still busy: $*" >&2
exit 1"""

# Cleanup by label: sandboxes (bwrap naming the workspace), cgroups, workspaces.
CLEANUP_SH = r"""p=$1 cg=$2 n=0 t=${TMPDIR:-/tmp}
for d in /proc/[0-9]*; do
  case $(tr '\0' ' ' < $d/cmdline 2>/dev/null) in
    *bwrap*"$t/$p"*) kill -9 "${d#/proc/}" 2>/dev/null && n=$((n+1)) ;;
  esac
done
for d in /sys/fs/cgroup/rtax /sys/fs/cgroup/*/rtax; do
  for c in "$d"/$cg*; do
    [ -d "$c" ] || continue
    for q in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -9 $q 2>/dev/null; done
    sleep 0.05; rmdir "$c" 2>/dev/null && n=$((n+1))
  done
done
for w in "$t/$p"*; do [ -e "$w" ] || continue; rm -rf -- "$w"; n=$((n+1)); done
echo $n"""


class StageSettings(Protocol):
    """What a remote sandbox reads of its driver (StageDriver; no import of it here)."""

    host: Host
    uid: int
    tools: dict[str, str]
    root: list[tuple[str, str, str]]
    remote_support: Support | None


class RemoteStageEnvironment(Environment):
    """One bubblewrap sandbox on a remote host (see the module docstring)."""

    def __init__(self, driver: Driver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.stage = cast(StageSettings, driver)
        self.host = driver.host
        self.workspace: str | None = None
        self.cg_dirs: list[str] = []
        self.cg_rel = ""
        self.cg_settled = True
        self.procs: list[str] = []
        self.proc: Any = None
        self.shell: FramedShell | None = None
        self.pid: int | None = None
        self.broken = False
        self.env = sandbox_env(spec.env)

    async def create(self) -> None:
        spec = self.spec
        label = safe_label(spec.label)
        support = self.stage.remote_support
        if support is None:
            raise PhaseFailure("not_created", "stage's support files are not on the host")
        async with self.sub("workspace"):
            prefix = f"{WORKSPACE_PREFIX}{label}-"
            self.workspace = await self.host.make_workspace(prefix, spec.workspace_src)
        async with self.sub("cgroup"):
            name = f"env-{label}-{os.urandom(4).hex()}" if label else f"env-{os.urandom(4).hex()}"
            lim = spec.limits
            quota = str(max(1000, int(round(lim.cpus * 100_000)))) if lim.cpus else ""
            mem = str(int(lim.memory_mib) << 20) if lim.memory_mib else ""
            pids = str(int(lim.pids)) if lim.pids else ""
            # known before they exist: a run stopped while the script runs (the remote
            # mkdir goes on after our await is cancelled) must still remove them
            self.cg_dirs = [f"{CG_ROOT}/rtax/{name}"] + [
                f"{CG_ROOT}/{c}/rtax/{name}" for c in ("cpu", "memory", "pids")
            ]
            self.cg_rel = f"rtax/{name}"
            self.host.track("cgroup", self.cg_rel)
            self.cg_settled = False  # until the script is known to have ended
            # the workspace goes to the sandbox uid in the same round trip
            uid = str(self.stage.uid)
            res = await self.host.run(
                ["sh", "-c", 'chown -R -- "$1:$1" "$2" || exit 1; shift 2; ' + CG_CREATE_SH]
                + ["rtax-cg", uid, self.workspace, f"rtax/{name}", quota, mem, pids],
                timeout=30,
            )
            self.cg_settled = True
            if res.returncode != 0:
                err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
                raise PhaseFailure("cgroup_failed", f"cannot make cgroup {name}: {err}")
            self.procs = res.stdout.decode().split()
            assert {os.path.dirname(p) for p in self.procs} <= set(self.cg_dirs)
        async with self.sub("spawn"):
            tools = self.stage.tools
            if self.channel == "shell":
                cmd: tuple[str, ...] = ("sh",)
                info_fd = None
            else:
                cmd, info_fd = SLEEPER, 3  # bwrap closes its info fd: a copy of stdout
            bwrap = bwrap_argv(
                tools["bwrap"],
                self.workspace,
                cmd,
                root=self.stage.root,
                etc=support.etc,
                seccomp_fd=SECCOMP_FD,
                info_fd=info_fd,
            )
            # rtax-enter joins the cgroup and drops to the sandbox uid, as locally
            argv = ["sh", "-c", SPAWN_SH, "rtax-bwrap", support.filter, "1" if info_fd else "0"]
            argv += spawn_argv(support.enter, self.stage.uid, self.procs, bwrap)
            self.proc = await self.host.spawn(
                argv,
                cwd="/",
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            if self.channel == "shell":
                # not timed: the remote clock (/proc/timer_list) is root's, not the sandbox's
                self.shell = FramedShell(self.proc.stdin, self.proc.stdout)

    async def _started(self) -> None:
        """Exec channel: read bwrap's info (the sandbox's pid) and the sleeper's READY."""
        if self.pid is not None:
            return
        if self.proc is None:
            raise PhaseFailure("not_created", "the sandbox was never started")
        data = b""
        pid = None
        while READY not in data or pid is None:
            line = await self.proc.stdout.readline()
            if not line:
                raise PhaseFailure(
                    "sandbox_failed",
                    f"bwrap sandbox did not start: {data.decode(errors='replace').strip()}",
                )
            data += line
            m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
            if m and b"}" in data[m.end() :]:
                pid = int(m.group(1))
        self.pid = pid

    async def ready(self) -> None:
        if self.channel == "exec":
            await self._started()
        await super().ready()

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await sandbox_shell_action(self, step, timeout)
        await self._started()
        support = self.stage.remote_support
        assert self.pid is not None and support is not None
        argv = enter_argv(support.enter, support.filter, self.pid, self.procs, step.argv)
        # rtax-enter joins the environment's cgroups itself, first
        return await run_exec(self.host, argv, cwd="/", env=self.env, timeout=timeout)

    async def teardown(self) -> None:
        errors: list[str] = []
        if self.proc is not None:
            if self.broken:
                await self.host.kill(self.proc)
                self.host.release(self.proc)
            else:
                await close_shell(self.proc, self.host, grace=2.0)
            self.proc = None
            self.shell = None
        if self.cg_dirs:
            res = await self.host.run(
                ["sh", "-c", CG_REMOVE_SH, "rtax-cg-rm", *self.cg_dirs], timeout=30
            )
            if res.returncode != 0:
                errors.append(res.stderr.decode(errors="replace").strip())
            elif self.cg_settled:
                self.host.untrack("cgroup", self.cg_rel)
                self.cg_dirs = []
            # else: the create script was cut off and may still mkdir after this removal;
            # the dirs stay registered and the host's reaper removes them at the end
        if self.workspace is not None:
            await self.host.remove_tree(self.workspace)
            self.workspace = None
        if errors:
            raise PhaseFailure("teardown_incomplete", "; ".join(errors))


async def probe_tools(host: Any) -> dict[str, str]:
    """Absolute paths of the tools the remote stage needs, as the remote host sees them."""
    script = 'for t in "$@"; do p=$(command -v "$t") && echo "$t $p"; done; :'
    res = await host.run(["sh", "-c", script, "rtax-tools", *REMOTE_TOOLS], timeout=30)
    tools = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        name, _, path = line.partition(" ")
        if path.startswith("/"):
            tools[name] = path
    return tools


async def list_root(host: Any) -> list[tuple[str, str, str]]:
    """The entries of sandbox.ROOT_NAMES as the remote host has them."""
    res = await host.run(["sh", "-c", LIST_ROOT_SH], timeout=30)
    out = []
    for line in res.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] in ROOT_NAMES and parts[1] in ("dir", "link"):
            out.append((parts[0], parts[1], parts[2]))
    out.sort()
    return out


async def push_support(host: Any) -> Support:
    """Copy the support files to REMOTE_SUPPORT on the host (once: names carry hashes)
    and make the curated /etc there."""
    local = await asyncio.to_thread(local_support)
    paths = {}
    for key, path, mode in (("enter", local.enter, "0755"), ("filter", local.filter, "0644")):
        name = Path(path).name
        res = await host.run(
            ["sh", "-c", PUT_SH, "rtax-put", REMOTE_SUPPORT, name, mode],
            input=Path(path).read_bytes(),
            timeout=60,
        )
        if res.returncode != 0:
            err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
            raise PhaseFailure("sandbox_failed", f"cannot copy {name} to {host.name}: {err}")
        paths[key] = f"{REMOTE_SUPPORT}/{name}"
    res = await host.run(etc_argv(), timeout=60)
    etc = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or not etc.startswith("/"):
        err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
        raise PhaseFailure(
            "sandbox_failed", f"cannot make the sandbox's /etc on {host.name}: {err}"
        )
    return Support(enter=paths["enter"], filter=paths["filter"], etc=etc)


async def check_remote(driver: Any) -> list[Problem]:
    """Root, the tools, cgroups, then a real sandbox in each channel, on the remote host."""
    host = driver.host
    try:
        uid = (await host.run(["id", "-u"], timeout=30)).stdout.strip()
        driver.tools = await probe_tools(host)
    except PhaseFailure as exc:
        return [Problem(f"host {host.name} does not answer: {exc.message}", "check the network")]
    if uid != b"0":
        return [
            Problem(
                f"stage needs root on host {host.name} (logged in as uid {uid.decode()})",
                "log in as root, or as a user with uid 0",
            )
        ]
    missing = [t for t in REMOTE_TOOLS if t not in driver.tools]
    if missing:
        return [
            Problem(
                f"not on PATH on host {host.name}: {', '.join(missing)}",
                "apt-get install bubblewrap util-linux coreutils tar there",
            )
        ]
    arch = (await host.run(["uname", "-m"], timeout=30)).stdout.decode().strip()
    if arch != platform.machine():
        return [
            Problem(
                f"host {host.name} is {arch}, this machine {platform.machine()}: stage's "
                "exec helper is built here for this architecture",
                "run rtax from a controller of the same architecture",
            )
        ]
    try:
        driver.remote_support = await push_support(host)
    except SupportError as exc:
        return [Problem(f"stage cannot make its sandbox files: {exc}", exc.fix)]
    except PhaseFailure as exc:
        return [Problem(exc.message, "check that root can write /var/cache there")]
    driver.root = await list_root(host)
    name = f"rtax/check-{os.urandom(4).hex()}"
    res = await host.run(["sh", "-c", CG_CREATE_SH, "rtax-cg", name, "100000", "", ""], timeout=30)
    dirs = [os.path.dirname(p) for p in res.stdout.decode().split()]
    if dirs:
        await host.run(["sh", "-c", CG_REMOVE_SH, "rtax-cg-rm", *dirs], timeout=30)
    if res.returncode != 0 or not dirs:
        err = res.stderr.decode(errors="replace").strip()[-300:]
        return [
            Problem(
                f"cannot make cgroups under /sys/fs/cgroup on host {host.name} ({err})",
                "run as root there with /sys/fs/cgroup mounted and writable",
            )
        ]
    for channel in ("exec", "shell"):
        err = await driver.try_environment(
            channel,
            Step(("sh", "-c", "test -w /workspace && hostname")),
            lambda r: r.rc == 0 and r.output.strip() == HOSTNAME.encode(),
        )
        if err:
            return [
                Problem(
                    f"bwrap could not run a sandbox ({channel}) on host {host.name}: {err}",
                    "bubblewrap must be able to make a user namespace as an unprivileged user "
                    "there: sysctl -w user.max_user_namespaces=10000",
                )
            ]
    return []


async def cleanup_remote(host: Any, label: str | None) -> int:
    prefix = WORKSPACE_PREFIX + (f"{safe_label(label)}-" if label else "")
    cg = f"env-{safe_label(label)}-" if label else "env-"
    res = await host.run(["sh", "-c", CLEANUP_SH, "rtax-cleanup", prefix, cg], timeout=60)
    try:
        return int(res.stdout.split()[-1])
    except (ValueError, IndexError):
        return 0
