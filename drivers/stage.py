"""`stage`: namespaces + a cgroup + a private workspace, on the host's own kernel.

Each environment is one long-lived bubblewrap sandbox ("init") whose boundary is
described in `sandbox.py`: a minimal read-only view of the host (`/usr` and a
curated `/etc`), an unprivileged host uid behind a user namespace, no capability,
no_new_privs, a seccomp filter, new PID/IPC/UTS/cgroup/network namespaces, a private
`/tmp`, and the workspace (a host temporary directory, `rtax-ws-<label>-*`, owned by
the sandbox's uid) read-write at `/workspace`. A cgroup `rtax/env-<label>-<hex>` (or
under `spec.cgroup_parent`) with the cell's CPU, memory and pid limits is joined
before exec, so nothing escapes it.

Channel `shell`: the init process is the persistent `sh`, driven by FramedShell.
Channel `exec`: the init process is a sleeper on a stdin pipe, and each action is a
new process that `rtax-enter` puts into the sandbox (and its cgroup) with the same
identity, capabilities and filter.

The workload's assets (paths under rtax's attrs assets that its steps name) and the
paths of the driver option `ro_binds` are bound read-only at the same place inside;
nothing else of the host's files is visible.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.sandbox import (
    HOSTNAME,
    READY,
    SLEEPER,
    Support,
    SupportError,
    bwrap_argv,
    enter_argv,
    local_root,
    local_support,
    public_copy,
    sandbox_env,
    sandbox_shell_action,
    spawn_argv,
    uid_option,
)
from rtax_tui.drivers.shellframe import FramedShell
from rtax_tui.drivers.stage_remote import (
    RemoteStageEnvironment,
    check_remote,
    cleanup_remote,
)
from rtax_tui.drivers.workspace import (
    WORKSPACE_PREFIX,
    make_workspace,
    populate,
    remove_workspace,
    run_exec,
    workspace_cleanup,
)

from rtax_tui.core.assets import assets_root
from rtax_tui.core.cgroups import Cgroup, CgroupError
from rtax_tui.core.cgroups import cleanup as cgroup_cleanup
from rtax_tui.core.model import (
    ActionResult,
    EnvSpec,
    PhaseFailure,
    Step,
)
from rtax_tui.core.probe import ALL_CHECKS

TEARDOWN_GRACE_S = 2.0


def _safe_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40]


def asset_paths(spec: EnvSpec, extra: list[str]) -> list[str]:
    """Host paths bound read-only into the sandbox, at the same place.

    Only what is named explicitly: paths under rtax's attrs assets that the
    workload's steps or environment name (a file brings only itself), and the
    driver option `ro_binds`. A step naming any other host path (the host's
    `/tmp`, rtax's cache, `/etc/shadow`) makes nothing visible.
    """
    root = os.path.realpath(assets_root())
    words: list[str] = [w for step in spec.workload.steps for w in step.argv]
    words += list(spec.env.values())
    found: set[str] = set()
    for w in words:
        for part in re.split(r"[=:,\s]", w):
            if not part.startswith("/"):
                continue
            p = os.path.normpath(part)
            if p.startswith(root + "/") and os.path.exists(p) and ".." not in p.split("/"):
                found.add(p)
    found.update(os.path.normpath(p) for p in extra)
    out: list[str] = []
    for p in sorted(found):  # keep only the outermost of nested paths
        if not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def chown_tree(path: str, uid: int) -> None:
    """Give the workspace to the sandbox's uid (root inside), without following links."""
    os.chown(path, uid, uid)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(top, name), uid, uid, follow_symlinks=False)


def _open_ro(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


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


class StageEnvironment(Environment):
    driver: StageDriver

    def __init__(self, driver: StageDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.workspace: str | None = None
        self.cg: Cgroup | None = None
        self.procs: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.shell: FramedShell | None = None
        self.info_r: int | None = None
        self.pid: int | None = None  # the sandbox's init, as the host sees it
        self.broken = False  # the shell is out of step (an action timed out or failed)
        self._spawn: asyncio.Future[asyncio.subprocess.Process] | None = None
        self._populate: asyncio.Future[list[tuple[str, str]]] | None = None
        self.env = sandbox_env(spec.env)

    # -- create ------------------------------------------------------------

    def _prepare(self, src: str | None, binds: list[str]) -> list[tuple[str, str]]:
        """Fill the workspace and give it to the sandbox uid; the binds' public copies."""
        assert self.workspace is not None
        populate(self.workspace, src)
        chown_tree(self.workspace, self.driver.uid)
        out = []
        for p in binds:
            try:
                out.append((public_copy(p, self.driver.uid), p))
            except OSError as exc:
                raise PhaseFailure("sandbox_failed", f"cannot bind {p}: {exc}") from exc
        return out

    async def create(self) -> None:
        spec = self.spec
        label = _safe_label(spec.label)
        support = await self.driver.support()
        async with self.sub("workspace"):
            self.workspace = make_workspace(self.driver.host, label)
            wanted = asset_paths(spec, list(self.driver.options.get("ro_binds", ())))
            # off the event loop: other trials may be in flight
            self._populate = asyncio.ensure_future(
                asyncio.to_thread(self._prepare, spec.workspace_src, wanted)
            )
            binds = await asyncio.shield(self._populate)  # teardown waits for a cancelled copy
        async with self.sub("cgroup"):
            name = f"env-{label}-{os.urandom(4).hex()}" if label else f"env-{os.urandom(4).hex()}"
            lim = spec.limits
            rel = Cgroup.relpath_of(name, spec.cgroup_parent)
            self.driver.host.track("cgroup", rel)  # before it exists: kill -9 at any moment
            try:
                self.cg = Cgroup.create(
                    name,
                    cpus=lim.cpus,
                    memory_mib=lim.memory_mib,
                    pids=lim.pids,
                    parent=spec.cgroup_parent,
                )
            except (OSError, CgroupError) as exc:
                self.driver.host.untrack("cgroup", rel)  # create removed what it had made
                raise PhaseFailure("cgroup_failed", f"cannot make cgroup {name}: {exc}") from exc
            self.procs = self.cg.procs_files()
        async with self.sub("spawn"):
            await self._spawn_sandbox(support, binds)

    async def _spawn_sandbox(self, support: Support, binds: list[tuple[str, str]]) -> None:
        """Start bubblewrap as the sandbox uid, handing it root-opened descriptors."""
        assert self.workspace is not None
        tools = self.driver.tools
        if "bwrap" not in tools:
            raise PhaseFailure("sandbox_failed", "bwrap is not on PATH")
        opened: list[int] = []
        try:
            opened.append(_open_ro(support.filter))
            info_w: int | None = None
            if self.channel == "exec":
                self.info_r, info_w = os.pipe()
                opened.append(info_w)
            cmd: tuple[str, ...] = ("sh",) if self.channel == "shell" else SLEEPER
            bwrap = bwrap_argv(
                tools["bwrap"],
                self.workspace,
                cmd,
                root=self.driver.root,
                etc=support.etc,
                seccomp_fd=opened[0],
                binds=binds,
                info_fd=info_w,
            )
            # rtax-enter joins the cgroup and drops to the sandbox uid: no pre-exec hook
            argv = spawn_argv(support.enter, self.driver.uid, self.procs, bwrap)
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
                    pass_fds=tuple(opened),
                )
            )
            fds_to_close, opened = opened, []

            def close_fds(_t: object) -> None:
                for fd in fds_to_close:
                    os.close(fd)

            self._spawn.add_done_callback(close_fds)
            try:
                self.proc = await asyncio.shield(self._spawn)
            except OSError as exc:
                raise PhaseFailure("sandbox_failed", f"cannot start {argv[0]}: {exc}") from exc
        finally:
            for fd in opened:
                os.close(fd)
        if self.channel == "shell":
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
        if line != READY:
            out = (line.decode(errors="replace") + await self._failure_output()).strip()
            raise PhaseFailure("sandbox_failed", f"bwrap sandbox did not start: {out}")
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
                "sandbox_failed", f"bwrap sandbox did not start: {out or exc.message}"
            ) from exc

    # -- actions -----------------------------------------------------------

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await sandbox_shell_action(self, step, timeout)
        if self.pid is None:
            await self._started()
        assert self.pid is not None
        support = await self.driver.support()
        argv = enter_argv(support.enter, support.filter, self.pid, self.procs, step.argv)
        # no cgroup_procs here: rtax-enter joins them itself (no pre-exec hook, so the
        # spawn can vfork)
        return await run_exec(self.driver.host, argv, cwd="/", env=self.env, timeout=timeout)

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
            cg = self.cg
            try:
                await asyncio.to_thread(cg.remove)
                self.driver.host.untrack("cgroup", cg.relpath)
                self.cg = None
            except Exception as exc:  # keep going: the workspace still has to go
                errors.append(f"cgroup {cg.relpath}: {exc}")
        if self._populate is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._populate), 60)
            except Exception:
                pass
            self._populate = None
        if self.workspace is not None:
            await remove_workspace(self.driver.host, self.workspace)
            self.workspace = None
        if errors:
            raise PhaseFailure("teardown_incomplete", "; ".join(errors))


async def _end_init(
    host: Any, proc: asyncio.subprocess.Process, cg: Cgroup | None, graceful: bool
) -> None:
    """End the sandbox: close the init's stdin (the shell or sleeper then exits).

    If it does not exit (or `graceful` is off), kill everything in the cgroup but
    our own child first, so that bwrap reaps their children and exit
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
    await host.kill(proc)
    await proc.wait()
    host.release(proc)


class StageDriver(Driver):
    name = "stage"
    runs_remote = True  # through drivers/stage_remote.py
    channels = ("exec", "shell")
    # Every check (sandbox.py says how), locally and on an SSH host alike.
    boundary = ALL_CHECKS

    def __init__(self, host: Any, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        want = str(options.get("sandbox", "auto"))
        if want == "unshare":
            raise ValueError(
                "stage: option sandbox=unshare was removed: it could not keep the same "
                "boundary; stage needs bubblewrap (apt-get install bubblewrap)"
            )
        if want not in ("auto", "bwrap"):
            raise ValueError(f"stage: option sandbox must be auto or bwrap, not {want!r}")
        self.uid = uid_option(options)
        self.sandbox = "bwrap"
        self.tools: dict[str, str] = {}
        self.root: list[tuple[str, str, str]] = []
        self.remote_support: Support | None = None  # set by check_remote
        self._support: Support | None = None
        if not host.controller_local:  # tools are found on the remote host by check()
            return
        p = shutil.which("bwrap")
        if p:
            self.tools["bwrap"] = p
        self.root = local_root()

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        if not self.host.controller_local:
            return RemoteStageEnvironment(self, spec, sub)
        return StageEnvironment(self, spec, sub)

    async def support(self) -> Support:
        """The local support files (the helper is compiled once, off the event loop)."""
        if self._support is None:
            try:
                self._support = await asyncio.to_thread(local_support)
            except (SupportError, OSError) as exc:
                raise PhaseFailure("sandbox_failed", str(exc)) from exc
        return self._support

    # -- checks ------------------------------------------------------------

    async def check(self) -> list[Problem]:
        if not self.host.controller_local:
            return await check_remote(self)
        if os.geteuid() != 0:
            return [
                Problem(
                    "stage needs root: it makes cgroups and hands the sandbox to an "
                    "unprivileged uid (without root no CPU, memory or pid limits can be applied)",
                    "run rtax as root (sudo rtax ...)",
                )
            ]
        problems: list[Problem] = []
        if "bwrap" not in self.tools:
            problems.append(
                Problem(
                    "bubblewrap (bwrap) is not on PATH: stage's boundary is built with it",
                    "apt-get install bubblewrap",
                )
            )
        try:
            await asyncio.to_thread(local_support)
        except SupportError as exc:
            problems.append(Problem(f"stage cannot make its sandbox files: {exc}", exc.fix))
        except OSError as exc:
            problems.append(
                Problem(f"stage cannot make its sandbox files: {exc}", "check rtax's cache dir")
            )
        cg_problem = self._check_cgroups()
        if cg_problem:
            problems.append(cg_problem)
        if problems:
            return problems
        # Everything is there: make a real sandbox in each channel and run a command.
        for channel in ("exec", "shell"):
            err = await self.try_environment(
                channel,
                Step(("sh", "-c", "test -w /workspace && hostname")),
                lambda r: r.rc == 0 and r.output.strip() == HOSTNAME.encode(),
            )
            if err:
                problems.append(
                    Problem(
                        f"bwrap could not run a sandbox ({channel}): {err}",
                        "bubblewrap must be able to make a user namespace as an unprivileged "
                        "user: sysctl -w user.max_user_namespaces=10000 "
                        "(and kernel.unprivileged_userns_clone=1 where the kernel has it)",
                    )
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
        cgv = Cgroup.version() if self.host.controller_local else "see the host's facts"
        facts: dict[str, Any] = {
            "sandbox": "bwrap",
            "cgroup": cgv,
            "uid": self.uid,
            "isolation": f"userns (root inside = host uid {self.uid}), no capabilities, "
            "no_new_privs, seccomp, view: /usr + curated /etc, private /tmp, no network",
        }
        tool = self.tools.get("bwrap")
        if tool:
            try:
                res = await self.host.run([tool, "--version"], timeout=10, merge_stderr=True)
                line = res.stdout.decode(errors="replace").strip().splitlines()
                if line:
                    facts["sandbox"] = line[0].replace("bubblewrap", "bwrap")
            except (OSError, TimeoutError, PhaseFailure):
                pass
        return facts

    # -- cleanup -----------------------------------------------------------

    async def cleanup(self, label: str | None = None) -> int:
        if not self.host.controller_local:
            return await cleanup_remote(self.host, label)
        marker = "/" + WORKSPACE_PREFIX + (f"{_safe_label(label)}-" if label else "")
        n = _kill_sandboxes(marker)
        if label:
            n += await asyncio.to_thread(cgroup_cleanup, f"rtax/env-{_safe_label(label)}-")
        else:
            n += await asyncio.to_thread(cgroup_cleanup, "rtax/")
        n += await workspace_cleanup(self.host, marker.lstrip("/"))
        return n


def _kill_sandboxes(marker: str) -> int:
    """SIGKILL bwrap sandboxes whose command line names an rtax workspace."""
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
        if not args or os.path.basename(args[0]) != b"bwrap":
            continue
        if not any(marker.encode() in a for a in args[1:]):
            continue
        try:
            os.kill(int(name), signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n
