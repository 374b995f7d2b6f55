"""`stage`: namespaces + a cgroup + a private workspace, on the host's own kernel.

Each environment is one long-lived sandbox ("init") process:

- new mount, PID, IPC, UTS (hostname `rtax`) and network (only `lo`) namespaces;
- the host's file system read-only (every top-level entry of `/` bound read-only
  onto a fresh root, so `/workspace` can exist without touching the host), a fresh
  `/proc`, a minimal `/dev`, a private tmpfs `/tmp`, and the workspace (a host
  temporary directory, `rtax-ws-<label>-*`) read-write at `/workspace`;
- a cgroup `rtax/env-<label>-<hex>` (or under `spec.cgroup_parent`) with the cell's
  CPU, memory and pid limits, joined before exec so nothing escapes it.

The sandbox is made by bubblewrap when `bwrap` is on PATH, else by util-linux
`unshare` running a small sh script (force it with the option `sandbox=unshare`).

Channel `shell`: the init process is the persistent `sh`, driven by FramedShell.
Channel `exec`: the init process is a sleeper on a stdin pipe, and each action is a
new `nsenter` into its namespaces (and its cgroup).

Absolute paths under the host's temporary directory that a workload's steps name
(assets) are bound read-only at the same place inside the private `/tmp`; paths
elsewhere (`~/.cache/rtax`) are visible anyway, read-only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.local import (
    WORKSPACE_PREFIX,
    LocalDriver,
    base_env,
    is_local,
    make_workspace,
    populate,
    remove_workspace,
    run_exec,
)
from rtax_tui.drivers.shellframe import FramedShell

from rtax_tui.core import reaper
from rtax_tui.core.cgroups import Cgroup, CgroupError
from rtax_tui.core.cgroups import cleanup as cgroup_cleanup
from rtax_tui.core.model import (
    ActionResult,
    EnvSpec,
    PhaseFailure,
    Step,
)
from rtax_tui.hosts.local import kill_group

SANDBOXES = ("bwrap", "unshare")
HOSTNAME = "rtax"
SANDBOX_SUFFIX = ".sb"  # the unshare sandbox's root mount point and fstab, next to the workspace
READY = b"RTAX-READY\n"
# Top-level entries the sandbox provides itself instead of binding the host's.
OWN_ENTRIES = frozenset({"proc", "dev", "tmp", "workspace"})
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0"}
DEV_LINKS.update({"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"})
TEARDOWN_GRACE_S = 2.0

# The exec channel's init: say it is up, then wait for stdin to close.
SLEEPER = ("sh", "-c", f"echo {READY.decode().strip()}; read x")

# The unshare sandbox, run as PID 1 of its new PID namespace (already in new mount,
# IPC, UTS and network namespaces; unshare made the mounts private). Arguments:
# root mount point, workspace (also the cleanup marker), fstab, mode (shell|exec),
# the `cp --parents` list, then root-level files to bind. In exec mode it prints
# "<its host pid> RTAX-READY" when it is up (dash can't write to fds above 9, so
# no info fd here).
# `mount -n`: libmount must not record the sandbox's mounts in the host's utab.
UNSHARE_SCRIPT = r"""set -eu
R=$1 FSTAB=$3 MODE=$4 COPY=$5
shift 5
read -r hostpid _ < /proc/self/stat
mount -n -t tmpfs -o mode=0755 rtax-root "$R"
cd "$R"
for f in "$@"; do : > "./$f"; done
cp -a --parents $COPY "$R/"
mount -n -a -T "$FSTAB"
rw=$(awk -v r="$R/" '$6 !~ /^ro(,|$)/ && index($5, r) == 1 { print $5 }' /proc/self/mountinfo)
set -f
IFS='
'
for mp in $rw; do
  case $mp in *\\*) mp=$(printf '%b' "$mp") ;; esac
  case $mp in
    "$R"/workspace|"$R"/tmp|"$R"/tmp/*|"$R"/dev/*|"$R"/proc|"$R"/proc/*) ;;
    *) mount -n -o remount,bind,ro "$mp" ;;
  esac
done
unset IFS
set +f
echo rtax > proc/sys/kernel/hostname
ip link set lo up 2>/dev/null || :
mount -n -o remount,bind,ro "$R"
pivot_root . .
umount -n -l /
cd /workspace
if [ "$MODE" = shell ]; then exec sh; fi
echo "$hostpid RTAX-READY"
exec 3<&0
cat <&3 >/dev/null 3<&- &
exec 0</dev/null 3<&-
wait $!
"""


def _safe_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40]


def _root_entries() -> list[tuple[str, str, str]]:
    """(name, kind, symlink target) for the top-level entries of the host's `/`."""
    out = []
    with os.scandir("/") as it:
        for e in it:
            if e.name in OWN_ENTRIES:
                continue
            if e.is_symlink():
                out.append((e.name, "link", os.readlink(e.path)))
            elif e.is_dir(follow_symlinks=False):
                out.append((e.name, "dir", ""))
            elif e.is_file(follow_symlinks=False):
                out.append((e.name, "file", ""))
    out.sort()
    return out


def _tmp_binds(spec: EnvSpec, extra: list[str]) -> list[str]:
    """Host directories under the temporary directory that the workload names.

    They are bound read-only at the same path inside the sandbox's private /tmp. A
    named file brings its directory, except a file directly in the temporary
    directory, which stays invisible (bind its own directory instead).
    """
    tmp = os.path.realpath(tempfile.gettempdir())
    words: list[str] = [w for step in spec.workload.steps for w in step.argv]
    words += list(spec.env.values()) + list(extra)
    found: set[str] = set()
    for w in words:
        for part in re.split(r"[=:,]", w):
            p = os.path.normpath(part) if part.startswith("/") else ""
            if not p.startswith(tmp + "/"):
                continue
            if os.path.isfile(p):
                p = os.path.dirname(p)
            if p == tmp or not os.path.isdir(p):
                continue
            top = p[len(tmp) + 1 :].split("/", 1)[0]
            if top.startswith(WORKSPACE_PREFIX):
                continue
            found.add(p)
    out: list[str] = []
    for p in sorted(found):  # keep only the outermost of nested paths
        if not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _fstab_escape(path: str) -> str:
    return (
        path.replace("\\", "\\134")
        .replace(" ", "\\040")
        .replace("\t", "\\011")
        .replace("\n", "\\012")
    )


def bwrap_argv(
    bwrap: str,
    workspace: str,
    cmd: tuple[str, ...] | list[str],
    *,
    entries: list[tuple[str, str, str]],
    tmp_binds: list[str],
    info_fd: int | None,
) -> list[str]:
    a = [bwrap, "--die-with-parent", "--new-session"]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    a += ["--hostname", HOSTNAME]
    for name, kind, target in entries:
        if kind == "link":
            a += ["--symlink", target, "/" + name]
        else:
            a += ["--ro-bind", "/" + name, "/" + name]
    a += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    for p in tmp_binds:
        a += ["--ro-bind", p, p]
    a += ["--bind", workspace, "/workspace", "--remount-ro", "/", "--chdir", "/workspace"]
    if info_fd is not None:
        a += ["--info-fd", str(info_fd)]
    return a + ["--", *cmd]


def unshare_setup(
    sbdir: str, workspace: str, entries: list[tuple[str, str, str]], tmp_binds: list[str]
) -> tuple[str, str, list[str], str]:
    """Write the fstab for the unshare sandbox; return (root, fstab, root files, cp list)."""
    root = os.path.join(sbdir, "root")
    fstab = os.path.join(sbdir, "fstab")
    os.mkdir(root)
    r = _fstab_escape(root)
    lines = []
    files: list[str] = []
    copy: list[str] = []
    for name, kind, _target in entries:
        src = _fstab_escape("/" + name)
        if kind == "link":
            if re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
                copy.append("/" + name)
        elif name == "sys":
            lines.append(f"sysfs {r}/sys sysfs ro,nosuid,nodev,noexec,x-mount.mkdir 0 0")
        elif kind == "dir":
            lines.append(f"{src} {r}/{_fstab_escape(name)} none rbind,ro,x-mount.mkdir 0 0")
        else:
            files.append(name)
            lines.append(f"{src} {r}/{_fstab_escape(name)} none bind,ro 0 0")
    for n in DEV_NODES:
        if os.path.exists("/dev/" + n):
            copy.append("/dev/" + n)
    for n, target in DEV_LINKS.items():
        p = "/dev/" + n
        if os.path.islink(p) and os.readlink(p) == target:
            copy.append(p)
    lines += [
        f"devpts {r}/dev/pts devpts newinstance,ptmxmode=0666,mode=0620,x-mount.mkdir 0 0",
        f"rtax-shm {r}/dev/shm tmpfs mode=1777,nosuid,nodev,x-mount.mkdir 0 0",
        f"proc {r}/proc proc nosuid,nodev,noexec,x-mount.mkdir 0 0",
        f"rtax-tmp {r}/tmp tmpfs mode=1777,nosuid,nodev,x-mount.mkdir 0 0",
    ]
    for p in tmp_binds:
        lines.append(f"{_fstab_escape(p)} {r}{_fstab_escape(p)} none bind,ro,x-mount.mkdir 0 0")
    lines.append(f"{_fstab_escape(workspace)} {r}/workspace none bind,x-mount.mkdir 0 0")
    with open(fstab, "w") as f:
        f.write("\n".join(lines) + "\n")
    return root, fstab, files, " ".join(copy)


async def _read_info(fd: int, until: bytes) -> bytes:
    """Read the info pipe until `until` appears or EOF; closes fd."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    f = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), f)
    data = b""
    try:
        while until not in data:
            chunk = await reader.read(4096)
            if not chunk:
                break
            data += chunk
    finally:
        transport.close()
    return data


async def sandbox_shell_action(env: Any, step: Step, timeout: float | None) -> ActionResult:
    """The shell channel of a sandbox, local or remote: a stale shell is never reused."""
    if env.shell is None:
        raise PhaseFailure("not_created", "the sandbox's shell was never started")
    if env.broken:
        raise PhaseFailure("shell_lost", "an earlier action did not finish; shell is stale")
    try:
        return await asyncio.wait_for(env.shell.run(step.argv), timeout)
    except BaseException:
        env.broken = True
        raise


class StageEnvironment(Environment):
    driver: StageDriver

    def __init__(self, driver: StageDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.sandbox = driver.sandbox
        self.workspace: str | None = None
        self.sbdir: str | None = None
        self.cg: Cgroup | None = None
        self.procs: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.shell: FramedShell | None = None
        self.info_r: int | None = None
        self.pid: int | None = None  # the sandbox's init, as the host sees it
        self.broken = False  # the shell is out of step (an action timed out or failed)
        self._spawn: asyncio.Future[asyncio.subprocess.Process] | None = None
        self._populate: asyncio.Future[None] | None = None
        env = base_env("/workspace", {})
        env["TMPDIR"] = "/tmp"
        env.update(spec.env)
        self.env = env

    # -- create ------------------------------------------------------------

    async def create(self) -> None:
        spec = self.spec
        label = _safe_label(spec.label)
        setup: tuple[str, str, list[str], str] | None = None
        async with self.sub("workspace"):
            self.workspace = make_workspace(label)
            if spec.workspace_src:  # off the event loop: other trials may be in flight
                self._populate = asyncio.ensure_future(
                    asyncio.to_thread(populate, self.workspace, spec.workspace_src)
                )
                await asyncio.shield(self._populate)  # teardown waits for a cancelled copy
            entries = _root_entries()
            tmp_binds = _tmp_binds(spec, list(self.driver.options.get("ro_binds", ())))
            if self.sandbox == "unshare":
                self.sbdir = self.workspace + SANDBOX_SUFFIX
                os.mkdir(self.sbdir)
                reaper.current().add_path(self.sbdir)
                setup = unshare_setup(self.sbdir, self.workspace, entries, tmp_binds)
        async with self.sub("cgroup"):
            name = f"env-{label}-{os.urandom(4).hex()}" if label else f"env-{os.urandom(4).hex()}"
            lim = spec.limits
            try:
                self.cg = Cgroup.create(
                    name,
                    cpus=lim.cpus,
                    memory_mib=lim.memory_mib,
                    pids=lim.pids,
                    parent=spec.cgroup_parent,
                )
            except (OSError, CgroupError) as exc:
                raise PhaseFailure("cgroup_failed", f"cannot make cgroup {name}: {exc}") from exc
            reaper.current().add_cgroup(self.cg.relpath)
            self.procs = self.cg.procs_files()
        async with self.sub("spawn"):
            mode = self.channel
            info_w: int | None = None
            if mode == "exec" and self.sandbox == "bwrap":
                self.info_r, info_w = os.pipe()
            tool = self.driver.tools.get(self.sandbox)
            if tool is None:
                raise PhaseFailure("sandbox_failed", f"{self.sandbox} is not on PATH")
            if self.sandbox == "bwrap":
                cmd: tuple[str, ...] = ("sh",) if mode == "shell" else SLEEPER
                argv = bwrap_argv(
                    tool,
                    self.workspace,
                    cmd,
                    entries=entries,
                    tmp_binds=tmp_binds,
                    info_fd=info_w,
                )
            else:
                assert setup is not None
                root, fstab, files, copy = setup
                # setpriv --pdeathsig: like bwrap --die-with-parent, gone if rtax dies.
                argv = [
                    *self.driver.pdeathsig,
                    tool,
                    "--mount",
                    "--pid",
                    "--fork",
                    "--kill-child",
                    "--ipc",
                    "--uts",
                    "--net",
                    "--",
                    "sh",
                    "-c",
                    UNSHARE_SCRIPT,
                    "rtax-sandbox",
                    root,
                    self.workspace,
                    fstab,
                    mode,
                    copy,
                    *files,
                ]
            # Shielded: cancelling asyncio's subprocess creation half-way can hang it
            # for good (3.11: it then waits for pipes that a surviving grandchild
            # holds open). A cancelled create leaves the spawn to finish; teardown
            # collects the process.
            self._spawn = asyncio.ensure_future(
                self.driver.host.spawn(
                    argv,
                    cwd="/",
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    cgroup_procs=self.procs,
                    pass_fds=(info_w,) if info_w is not None else (),
                )
            )
            if info_w is not None:
                self._spawn.add_done_callback(lambda _t, fd=info_w: os.close(fd))
            try:
                self.proc = await asyncio.shield(self._spawn)
            except OSError as exc:
                raise PhaseFailure("sandbox_failed", f"cannot start {argv[0]}: {exc}") from exc
            if mode == "shell":
                assert self.proc.stdin and self.proc.stdout
                self.shell = FramedShell(self.proc.stdin, self.proc.stdout)

    # -- ready -------------------------------------------------------------

    async def _failure_output(self) -> str:
        """What the sandbox printed before it died (for the error message)."""
        if self.proc is None or self.proc.stdout is None:
            return ""
        try:
            out = await asyncio.wait_for(self.proc.stdout.read(65536), 2.0)
        except (TimeoutError, OSError):
            out = b""
        return out.decode(errors="replace").strip()

    async def _started(self) -> None:
        """Exec channel: learn the init's host pid and see it print that it is up."""
        if self.pid is not None:
            return
        if self.proc is None or self.proc.stdout is None:
            raise PhaseFailure("not_created", "the sandbox was never started")
        if self.sandbox == "bwrap":
            if self.info_r is None:
                raise PhaseFailure("not_created", "the sandbox's info pipe is gone")
            fd, self.info_r = self.info_r, None
            info = await _read_info(fd, b"}")
            try:
                pid = int(json.loads(info)["child-pid"])
            except (ValueError, KeyError, TypeError):
                out = await self._failure_output()
                raise PhaseFailure(
                    "sandbox_failed", f"bwrap sandbox did not start: {out or info!r}"
                ) from None
            line = await self.proc.stdout.readline()
            ok = line == READY
        else:
            line = await self.proc.stdout.readline()
            word, _, rest = line.partition(b" ")
            ok = rest == READY and word.isdigit()
            pid = int(word) if ok else 0
        if not ok:
            out = (line.decode(errors="replace") + await self._failure_output()).strip()
            raise PhaseFailure("sandbox_failed", f"{self.sandbox} sandbox did not start: {out}")
        self.pid = pid

    async def ready(self) -> None:
        if self.channel == "exec":
            await self._started()
            await super().ready()
            return
        try:
            await super().ready()
        except PhaseFailure as exc:
            if exc.kind != "shell_lost":
                raise
            partial = getattr(exc.__cause__, "partial", b"") or b""
            out = (partial.decode(errors="replace") + await self._failure_output()).strip()
            raise PhaseFailure(
                "sandbox_failed", f"{self.sandbox} sandbox did not start: {out or exc.message}"
            ) from exc

    # -- actions -----------------------------------------------------------

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await sandbox_shell_action(self, step, timeout)
        if self.pid is None:
            await self._started()
        nsenter = self.driver.tools.get("nsenter")
        if nsenter is None:
            raise PhaseFailure("not_supported", "nsenter is not on PATH (util-linux)")
        argv = [nsenter, "-t", str(self.pid)]
        argv += ["-m", "-u", "-i", "-n", "-p", "-r", "-w", "--", *step.argv]
        return await run_exec(
            self.driver.host, argv, cwd="/", env=self.env, timeout=timeout, cgroup_procs=self.procs
        )

    # -- teardown ----------------------------------------------------------

    async def teardown(self) -> None:
        errors: list[str] = []
        if self.info_r is not None:
            os.close(self.info_r)
            self.info_r = None
        if self.proc is None and self._spawn is not None:
            # create was cancelled while spawning: let the spawn finish, then end it.
            try:
                self.proc = await asyncio.wait_for(asyncio.shield(self._spawn), 10)
            except Exception:
                pass
        self._spawn = None
        proc = self.proc
        if proc is not None:
            await _end_init(self.driver.host, proc, self.cg, graceful=not self.broken)
            self.proc = None
            self.shell = None
        if self.cg is not None:
            try:
                await asyncio.to_thread(self.cg.remove)
                reaper.current().drop_cgroup(self.cg.relpath)
                self.cg = None
            except Exception as exc:  # keep going: the workspace still has to go
                errors.append(f"cgroup {self.cg.relpath}: {exc}")
        if self._populate is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._populate), 60)
            except Exception:
                pass
            self._populate = None
        if self.sbdir is not None:
            await asyncio.to_thread(shutil.rmtree, self.sbdir, True)
            reaper.current().drop_path(self.sbdir)
            self.sbdir = None
        if self.workspace is not None:
            await remove_workspace(self.workspace)
            self.workspace = None
        if errors:
            raise PhaseFailure("teardown_incomplete", "; ".join(errors))


async def _end_init(
    host: Any, proc: asyncio.subprocess.Process, cg: Cgroup | None, graceful: bool
) -> None:
    """End the sandbox: close the init's stdin (the shell or sleeper then exits).

    If it does not exit (or `graceful` is off), kill everything in the cgroup but
    our own child first, so that bwrap/unshare reap their children and exit
    themselves (no orphaned zombies), then kill the child's whole group.
    """
    if proc.stdin is not None and not proc.stdin.is_closing():
        try:
            if graceful:
                proc.stdin.write(b"exit 0\n")
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
    if graceful and proc.returncode is None:
        try:
            await asyncio.wait_for(proc.wait(), TEARDOWN_GRACE_S)
        except TimeoutError:
            pass
    if proc.returncode is None and cg is not None:
        for pid in cg.pids() - {proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            await asyncio.wait_for(proc.wait(), 1.0)
        except TimeoutError:
            pass
    kill_group(proc)
    await proc.wait()
    host.release(proc)


class StageDriver(Driver):
    name = "stage"
    runs_remote = True  # bubblewrap only, through drivers/stage_remote.py
    channels = ("exec", "shell")

    def __init__(self, host: Any, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        want = str(options.get("sandbox", "auto"))
        if want not in ("auto", *SANDBOXES):
            raise ValueError(f"stage: option sandbox must be auto, bwrap or unshare, not {want!r}")
        self.tools: dict[str, str] = {}
        self._remote_root: list[tuple[str, str, str]] | None = None
        if not is_local(host):  # tools are found on the remote host by check()
            self.sandbox = "bwrap"
            self.pdeathsig = []
            return
        for t in ("bwrap", "unshare", "nsenter", "setpriv"):
            p = shutil.which(t)
            if p:
                self.tools[t] = p
        self.pdeathsig: list[str] = (
            [self.tools["setpriv"], "--pdeathsig", "KILL"] if "setpriv" in self.tools else []
        )
        if want == "auto":
            want = "bwrap" if "bwrap" in self.tools else "unshare"
        self.sandbox = want

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        if not is_local(self.host):
            from rtax_tui.drivers.stage_remote import RemoteStageEnvironment

            return RemoteStageEnvironment(self, spec, sub)
        return StageEnvironment(self, spec, sub)

    async def remote_root_entries(self) -> list[tuple[str, str, str]]:
        """The remote host's top-level `/` entries, listed once over its connection."""
        if self._remote_root is None:
            from rtax_tui.drivers.stage_remote import list_root

            self._remote_root = await list_root(self.host)
        return self._remote_root

    # -- checks ------------------------------------------------------------

    async def check(self) -> list[Problem]:
        if not is_local(self.host):
            if self.options.get("sandbox", "auto") not in ("auto", "bwrap"):
                return [
                    Problem(
                        f"on a remote host (host {self.host.name}) stage uses bubblewrap only",
                        "drop the driver option sandbox=unshare",
                    )
                ]
            from rtax_tui.drivers.stage_remote import check_remote

            return await check_remote(self)
        if os.geteuid() != 0:
            return [
                Problem(
                    "stage needs root: it makes namespaces, mounts and cgroups "
                    "(without root no CPU, memory or pid limits can be applied)",
                    "run rtax as root (sudo rtax ...)",
                )
            ]
        problems: list[Problem] = []
        if "bwrap" not in self.tools and "unshare" not in self.tools:
            problems.append(
                Problem(
                    "neither bubblewrap (bwrap) nor util-linux unshare is on PATH",
                    "apt-get install bubblewrap",
                )
            )
        elif self.sandbox not in self.tools:
            fix = (
                "apt-get install bubblewrap, or use the driver option sandbox=unshare"
                if self.sandbox == "bwrap"
                else "apt-get install util-linux, or use the driver option sandbox=bwrap"
            )
            problems.append(Problem(f"{self.sandbox} is not on PATH", fix))
        if "nsenter" not in self.tools:
            problems.append(
                Problem(
                    "nsenter is not on PATH (the exec channel needs it)",
                    "apt-get install util-linux",
                )
            )
        if self.sandbox == "unshare":
            tools = ("mount", "umount", "pivot_root", "cp", "awk")
            missing = [t for t in tools if not shutil.which(t)]
            if missing:
                problems.append(
                    Problem(
                        f"the unshare sandbox needs {', '.join(missing)}",
                        "apt-get install mount util-linux coreutils, or apt-get install bubblewrap",
                    )
                )
        cg_problem = self._check_cgroups()
        if cg_problem:
            problems.append(cg_problem)
        if problems:
            return problems
        # Everything is there: make a real sandbox in each channel and run `true`.
        for channel in ("exec", "shell"):
            err = await self.try_environment(
                channel,
                Step(("sh", "-c", "test -w /workspace && hostname")),
                lambda r: r.rc == 0 and r.output.strip() == HOSTNAME.encode(),
            )
            if err:
                fix = (
                    "check that bubblewrap works as root here "
                    "(bwrap --ro-bind / / --unshare-pid --proc /proc --dev /dev true), "
                    "or use the driver option sandbox=unshare"
                    if self.sandbox == "bwrap"
                    else "run as root with CAP_SYS_ADMIN (in a container: --privileged), "
                    "or apt-get install bubblewrap"
                )
                problems.append(
                    Problem(f"{self.sandbox} could not run a sandbox ({channel}): {err}", fix)
                )
                break
        return problems

    def _check_cgroups(self) -> Problem | None:
        ver = Cgroup.version()
        if ver is None:
            return Problem(
                "no cgroup filesystem at /sys/fs/cgroup: "
                "CPU, memory and pid limits can't be applied",
                "mount one: mount -t cgroup2 none /sys/fs/cgroup",
            )
        try:
            cg = Cgroup.create(f"check-{os.urandom(4).hex()}", cpus=1, memory_mib=64, pids=64)
            cg.remove()
        except (OSError, CgroupError) as exc:
            return Problem(
                f"cannot make cgroups under /sys/fs/cgroup ({exc}): limits can't be applied",
                "run as root with /sys/fs/cgroup writable "
                "(in a container: --privileged, or --cgroupns=host with a rw /sys/fs/cgroup)",
            )
        return None

    async def facts(self) -> dict[str, Any]:
        cgv = Cgroup.version() if is_local(self.host) else "see the host's facts"
        facts: dict[str, Any] = {"sandbox": self.sandbox, "cgroup": cgv}
        tool = self.tools.get(self.sandbox)
        if tool:
            try:
                res = await self.host.run([tool, "--version"], timeout=10, merge_stderr=True)
                line = res.stdout.decode(errors="replace").strip().splitlines()
                if line:
                    v = line[0].replace("bubblewrap", "bwrap")
                    facts["sandbox"] = v
            except (OSError, TimeoutError):
                pass
        return facts

    # -- cleanup -----------------------------------------------------------

    async def cleanup(self, label: str | None = None) -> int:
        if not is_local(self.host):
            from rtax_tui.drivers.stage_remote import cleanup_remote

            return await cleanup_remote(self.host, label)
        marker = "/" + WORKSPACE_PREFIX + (f"{_safe_label(label)}-" if label else "")
        n = _kill_sandboxes(marker)
        if label:
            n += await asyncio.to_thread(cgroup_cleanup, f"rtax/env-{_safe_label(label)}-")
        else:
            n += await asyncio.to_thread(cgroup_cleanup, "rtax/")
        n += await LocalDriver(self.host, {}).cleanup(_safe_label(label) if label else None)
        return n


def _kill_sandboxes(marker: str) -> int:
    """SIGKILL bwrap/unshare sandboxes whose command line names an rtax workspace."""
    n = 0
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if not args or os.path.basename(args[0]) not in (b"bwrap", b"unshare", b"sh"):
            continue
        if not any(marker.encode() in a for a in args[1:]):
            continue
        if b"rtax-sandbox" not in args and os.path.basename(args[0]) == b"sh":
            continue
        try:
            os.kill(int(name), signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n
