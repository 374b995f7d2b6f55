"""`stage`: namespaces + a cgroup + a private workspace, on the host's own kernel.

Each environment is one long-lived bubblewrap sandbox ("init") whose boundary is
described in `sandbox.py`: a minimal read-only view of the host (`/usr` and a
curated `/etc`), an unprivileged host uid behind a user namespace, no capability,
no_new_privs, a seccomp filter, new PID/IPC/UTS/cgroup/network namespaces, a private
`/tmp`, and the workspace read-write at `/workspace`. Each environment has a host
temporary directory, `rtax-ws-<label>-*`, owned by the sandbox's uid and named in
bubblewrap's command line (how `rtax cleanup` and the tests find a run's sandboxes).
With the limits' `workspace_mib` (the default) it stays empty and is not bound:
/workspace is a tmpfs of that size that bubblewrap mounts in the sandbox's own mount
namespace (nothing is mounted on the host per environment), and a `workspace_src` is
unpacked into it from inside, as the sandbox's uid, before the first step; with
"unlimited" the directory is the workspace, bound, and filled on the host. A cgroup
`rtax/env-<label>-<hex>` (or under `spec.cgroup_parent`) with the cell's CPU, memory
and pid limits is joined before exec, so nothing escapes it.

Channel `shell`: the init process is the persistent `sh`, driven by FramedShell.
Channel `exec`: the init process is a sleeper on a stdin pipe, and each action is a
new process that `rtax-enter` puts into the sandbox (and its cgroup) with the same
identity, capabilities and filter.

The workload's assets (paths under rtax's attrs assets that its steps name) and the
paths of the driver option `ro_binds` are bound read-only at the same place inside;
nothing else of the host's files is visible.

One environment class for every host: the workspace, the cgroup and the processes are
made through the Host API (`make_workspace`, `make_cgroup`, `spawn`), and the sandbox
is started by the same command everywhere (`rtax-enter --spawn` opens the filter for
bubblewrap and hands back its info on stdout), so nothing here asks which host it has.
Only the assets differ: they are the controller's files, so they are bound where the
host's files are the controller's (`host.controller_local`).
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import socket
import subprocess
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.toolkit import delivery
from rtax_tui.drivers.toolkit.assetview import named_assets
from rtax_tui.drivers.toolkit.sandbox import (
    DEFAULT_UID,
    ENTER_GONE,
    HOSTNAME,
    INIT_CMD,
    READY,
    SPAWN_INFO_FD,
    SPAWN_SECCOMP_FD,
    SupportError,
    bwrap_argv,
    enter_argv,
    image_root,
    public_copy,
    sandbox_env,
    spawn_argv,
    start_time,
)
from rtax_tui.drivers.toolkit.shellframe import CredReader, FramedShell, Reader, shell_action
from rtax_tui.drivers.toolkit.stage_site import (
    TOOLS,
    Site,
    find_tools,
    host_support,
    list_root,
    sandbox_cleanup,
)
from rtax_tui.drivers.toolkit.workspace import (
    drop_workspace,
    new_env_cgroup,
    run_exec,
    workspace_mib,
)

from rtax_tui.hosts import Host, cgroups, names
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import runlock
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, Step, Workload

TEARDOWN_GRACE_S = 2.0
SPAWN_WAIT_S = 10.0  # teardown waits this long for a spawn that a cancelled create left


class StageEnvironment(Environment):
    """One bubblewrap sandbox on the driver's host (see the module docstring)."""

    driver: StageDriver

    def __init__(self, driver: StageDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.host = driver.host
        self.workspace: str | None = None
        self.cg: str | None = None  # the cgroup's path below the root, once asked for
        self.procs: list[str] = []
        self.proc: Any = None
        self.shell: FramedShell | None = None
        self.pid: int | None = None  # the sandbox's init, as the host sees it
        # Shielded steps that a cancelled create leaves running; teardown awaits them.
        self._ws: asyncio.Future[str] | None = None
        self._binds: asyncio.Future[list[tuple[str, str]]] | None = None
        self._spawn: asyncio.Future[Any] | None = None
        self.env = sandbox_env(spec.env)
        self.reader: Reader | None = None  # the sandbox's stdout (a CredReader locally)
        self.start: int | None = None  # the init's start time: with pid, its identity
        self.pidfd: int | None = None  # the init, held (controller's host): is it alive?
        self._auxv: bytes | None = None  # the shell's, when it was trusted (shell channel)
        self._cpu_replaced = 0  # CPU of the cgroups that clean resets replaced (cpu_ns)
        self.img = delivery.TrialImage()  # its root in a run with image modes
        self._fill = False  # workspace_src still to unpack into the sandbox's tmpfs

    # -- image (a run with image modes) --------------------------------------

    async def deliver_image(self) -> None:
        """The root as `spec.image` says: a cached mount, a pulled or a lazy one
        (drivers.toolkit.delivery); the sandbox then binds its entries, not the host's."""
        if not self.host.controller_local:
            raise PhaseFailure(ErrorKind.ERROR, "image modes: stage on the local host only")
        await self.img.deliver_root(self.spec)

    def image_report(self) -> dict[str, Any] | None:
        return self.img.report()

    # -- create ------------------------------------------------------------

    async def create(self) -> None:
        spec = self.spec
        site = await self.driver.site()
        uid = self.driver.uid
        size_mib = workspace_mib(spec)
        # sized: the host directory stays empty (only named), /workspace is the
        # sandbox's own tmpfs (bwrap_argv), filled from inside in ready; unlimited:
        # the directory is the workspace
        self._fill = size_mib is not None and bool(spec.workspace_src)
        src = None if size_mib is not None else spec.workspace_src
        async with self.sub("workspace"):
            self._ws = asyncio.ensure_future(
                self.host.make_workspace(names.workspace(spec.label), src, uid, None)
            )
            self.workspace = await asyncio.shield(self._ws)
            self._binds = asyncio.ensure_future(self.driver.binds(spec))
            binds = await asyncio.shield(self._binds)
        async with self.sub("cgroup"):
            await self._new_cgroup()
        async with self.sub("spawn"):
            await self._spawn_sandbox(site, binds)

    async def _new_cgroup(self) -> None:
        """A new cgroup for the sandbox with the cell's limits (self.cg, self.procs)."""
        await new_env_cgroup(self, self.spec.limits.pids)

    async def _spawn_sandbox(self, site: Site, binds: list[tuple[str, str]]) -> None:
        """Start bubblewrap (the sandbox's init) in self.cg on self.workspace."""
        spec = self.spec
        uid = self.driver.uid
        assert self.workspace is not None
        if "bwrap" not in site.tools:
            raise PhaseFailure(
                ErrorKind.SANDBOX_FAILED, f"bwrap is not on PATH on {self.host.name}"
            )
        bwrap = bwrap_argv(
            site.tools["bwrap"],
            self.workspace,
            INIT_CMD[self.channel],
            workspace_mib=workspace_mib(spec),
            root=site.root if self.img.root is None else image_root(self.img.root),
            root_dir=self.img.root or "/",
            etc=site.support.etc,
            bin_dir=site.support.bin,
            seccomp_fd=SPAWN_SECCOMP_FD,
            binds=binds,
            info_fd=SPAWN_INFO_FD,
            alias=spec.workspace_alias,
        )
        # rtax-enter joins the cgroup, opens the filter and drops to the sandbox uid:
        # no pre-exec hook (the spawn can vfork) and no descriptor to pass
        argv = spawn_argv(site.support, uid, self.procs, bwrap, info=True)
        # The controller's own shell channel reads a unix socket that says which
        # process wrote each byte, so only the shell itself can answer a frame.
        theirs: socket.socket | None = None
        if self.channel == "shell" and self.host.controller_local:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.reader = CredReader(ours)
        # Shielded: cancelling asyncio's subprocess creation half-way can hang it
        # for good (3.11: it then waits for pipes that a surviving grandchild
        # holds open). A cancelled create leaves the spawn to finish; teardown
        # collects the process.
        self._spawn = asyncio.ensure_future(
            self.host.spawn(
                argv,
                cwd="/",
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=theirs.fileno() if theirs is not None else subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
        try:
            self.proc = await asyncio.shield(self._spawn)
        except OSError as exc:
            raise PhaseFailure(ErrorKind.SANDBOX_FAILED, f"cannot start {argv[0]}: {exc}") from exc
        finally:
            if theirs is not None:
                theirs.close()
        if self.reader is None:
            self.reader = self.proc.stdout
        if self.channel == "shell":
            verify = self._verify_shell if self.host.controller_local else None
            self.shell = FramedShell(self.proc.stdin, self.reader, verify=verify)

    # -- ready -------------------------------------------------------------

    async def _failure_output(self) -> str:
        """What the sandbox printed before it died (for the error message)."""
        if self.reader is None:
            return ""
        try:
            out = await asyncio.wait_for(self.reader.read(65536), 2.0)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            out = b""
        return bytes(out).decode(errors="replace").strip()

    async def _started(self) -> None:
        """Read bubblewrap's info (the init's host pid, first on stdout) and the init's
        READY line (the sandbox is set up); then take the init's identity (pid and start
        time, and locally a pidfd)."""
        if self.pid is not None:
            return
        if self.proc is None or self.reader is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "the sandbox was never started")
        data = b""
        pid = None
        while pid is None or READY.strip() not in data:
            line = await self.reader.readline()
            if not line:
                out = (data.decode(errors="replace") + await self._failure_output()).strip()
                raise PhaseFailure(ErrorKind.SANDBOX_FAILED, f"bwrap sandbox did not start: {out}")
            data += line
            m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
            if m and b"}" in data[m.end() :]:
                pid = int(m.group(1))
        if self.host.controller_local:
            fd = -1
            try:
                fd = os.pidfd_open(pid)
                with open(f"/proc/{pid}/stat") as f:  # after the pidfd: the same process
                    self.start = start_time(f.read())
                self.pidfd, fd = fd, -1
            except (OSError, ValueError, IndexError) as exc:
                if fd >= 0:  # opened, but the process is not the one it was
                    os.close(fd)
                raise PhaseFailure(
                    ErrorKind.SANDBOX_FAILED, f"the sandbox's init is gone: {exc}"
                ) from exc
        else:
            res = await self.host.run(["cat", f"/proc/{pid}/stat"], timeout=30)
            try:
                self.start = start_time(res.stdout.decode(errors="replace"))
            except (ValueError, IndexError) as exc:
                raise PhaseFailure(
                    ErrorKind.SANDBOX_FAILED, f"the sandbox's init is gone: {exc}"
                ) from exc
        self.pid = pid

    async def _fill_workspace(self) -> None:
        """Unpack `workspace_src` into the sandbox's own /workspace tmpfs, from inside (a
        process that rtax-enter puts into the sandbox, its cgroup and its filter, as the
        sandbox's uid), before any step ran: nothing of the host's is written as root."""
        if not self._fill:
            return
        assert self.pid is not None and self.spec.workspace_src
        support = (await self.driver.site()).support
        data = await tar_of(self.spec.workspace_src)
        argv = enter_argv(
            support.enter,
            support.filter,
            self.pid,
            self.start or 0,
            self.procs,
            ["/bin/sh", "-c", FILL_SH, "rtax-fill"],
            cwd="/",
        )
        res = await self.host.run(argv, input=data, env=self.env, timeout=120, merge_stderr=True)
        if res.returncode != 0:
            out = res.stdout.decode(errors="replace").strip()[-300:]
            raise PhaseFailure(
                ErrorKind.SANDBOX_FAILED, f"filling the workspace inside the sandbox: {out}"
            )
        self._fill = False

    async def ready(self) -> None:
        # boot: bubblewrap's info and the init's READY; first_command: the probe `true`
        # through the cell's channel (bench/README.md's parts of create+ready)
        async with self.sub("boot"):
            await self._started()
            await self._fill_workspace()
        if self.channel == "exec":
            async with self.sub("first_command"):
                await super().ready()
            return
        try:
            async with self.sub("first_command"):
                await super().ready()
        except PhaseFailure as exc:
            if exc.kind != "shell_lost":
                raise
            partial = getattr(exc.__cause__, "partial", b"") or b""
            out = (partial.decode(errors="replace") + await self._failure_output()).strip()
            raise PhaseFailure(
                ErrorKind.SANDBOX_FAILED, f"bwrap sandbox did not start: {out or exc.message}"
            ) from exc

    async def _verify_shell(self, writer: int | None) -> None:
        """After every answer of the controller's shell channel: the frame was written by
        the init's child (the shell rtax started), and that process has not exec'd since
        it was first trusted. An exec changes its auxiliary vector (new random bytes and
        addresses, whatever it runs), which only root on the host reads here: a step
        that replaced the shell (`exec`, with or without LD_PRELOAD) could read the next
        frame and answer it, so the shell is not used again."""
        try:
            if writer is None:
                raise OSError("no writer for the answer")
            with open(f"/proc/{writer}/auxv", "rb") as f:
                auxv = f.read()
            if self._auxv is None:
                if _ppid(writer) != self.pid:
                    raise OSError(f"pid {writer} is not the sandbox init's child")
                self._auxv = auxv
                return
        except (OSError, ValueError, IndexError) as exc:
            raise PhaseFailure(
                ErrorKind.INTEGRITY, f"the shell's answer can't be trusted: {exc}"
            ) from exc
        if auxv != self._auxv:
            raise PhaseFailure(
                ErrorKind.INTEGRITY,
                "a step replaced the sandbox's shell (exec): no later result can be trusted",
            )

    def _init_alive(self) -> bool | None:
        """Is the sandbox's init still running? None where rtax can't tell cheaply."""
        if self.pidfd is None:
            return None
        return not select.select([self.pidfd], [], [], 0)[0]

    # -- actions -----------------------------------------------------------

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await shell_action(self.shell, step.argv, timeout, "the sandbox's shell")
        await self._started()
        assert self.pid is not None and self.start is not None
        support = (await self.driver.site()).support
        argv = enter_argv(
            support.enter, support.filter, self.pid, self.start, self.procs, step.argv
        )
        # no cgroup_procs here: rtax-enter joins them itself (no pre-exec hook, so the
        # spawn can vfork)
        res = await run_exec(self.host, argv, cwd="/", env=self.env, timeout=timeout)
        if res.rc == ENTER_GONE and await self._lost():
            raise PhaseFailure(
                ErrorKind.ENV_LOST, "the sandbox's init is gone: the environment is lost"
            )
        return res

    async def _lost(self) -> bool:
        """The init is dead or its PID is another process's (after an action's status
        said the sandbox may be gone: a command may exit with that status too)."""
        alive = self._init_alive()
        if alive is not None:
            return not alive
        res = await self.host.run(["cat", f"/proc/{self.pid}/stat"], timeout=30)
        try:
            return start_time(res.stdout.decode(errors="replace")) != self.start
        except (ValueError, IndexError):
            return True

    # -- warm pools: the clean reset (a replacement) -----------------------------

    async def reset_clean(self) -> None:
        """The next trial gets a new sandbox, not a cleaned one (both channels, on the
        controller's host: the driver's `pool_resets`). See `_replace_sandbox`."""
        if (
            not self.host.controller_local
            or self.cg is None
            or self.pid is None
            or self.proc is None
            or self.workspace is None
        ):
            raise PhaseFailure(
                ErrorKind.RESET_UNSUPPORTED, "stage: clean reset needs a live sandbox"
            )
        await self._replace_sandbox()

    async def _replace_sandbox(self) -> None:
        """Replace every writable surface of the environment instead of walking it.

        Everything of the last trial is ended with its cgroup (the init, bubblewrap and
        whatever they left), the cgroup and the workspace are removed as at teardown
        (never following a link, hosts.safefs), and a new cgroup with the cell's limits,
        a new workspace filled from `workspace_src` and a new bubblewrap sandbox are made
        as at create: fresh tmpfs /tmp and /dev/shm, /dev built by bubblewrap from its
        fixed list, new IPC, PID and UTS namespaces (with their sysctls and message
        queues), a new init with the starting limits and priority, and on the shell
        channel a new shell. What stays is what no step can write: the site's tools, the
        read-only binds and the image's root."""
        site = await self.driver.site()
        binds = (
            self._binds.result()
            if self._binds is not None and self._binds.done()
            else await self.driver.binds(self.spec)
        )
        old_ws, old_cg, old_proc = self.workspace, self.cg, self.proc
        assert old_ws is not None and old_cg is not None
        self.proc = self.shell = None
        self._let_go_of_init()
        self.pid = self.start = None
        self._auxv = None
        self._spawn = None
        self.cg = self.workspace = None
        # the old sandbox ends while the new workspace and cgroup are made; the old
        # cgroup and workspace go while the new sandbox starts
        # as at create: sized, an empty named directory and the new sandbox's own tmpfs,
        # filled from inside by `ready`; unlimited, the directory filled on the host
        size_mib = workspace_mib(self.spec)
        self._fill = size_mib is not None and bool(self.spec.workspace_src)
        src = None if size_mib is not None else self.spec.workspace_src
        self._ws = asyncio.ensure_future(
            self.host.make_workspace(names.workspace(self.spec.label), src, self.driver.uid, None)
        )
        made = await asyncio.gather(
            asyncio.shield(self._ws),
            self._new_cgroup(),
            self._end_old_sandbox(old_proc, old_cg),
            return_exceptions=True,
        )
        if isinstance(made[0], str):
            self.workspace = made[0]
        if not isinstance(made[2], BaseException):  # all of it ended: its CPU is final
            self._cpu_replaced += Cgroup(old_cg).cpu_usage_ns() or 0
        removing = asyncio.gather(
            self.host.remove_cgroup(old_cg), self.host.remove_tree(old_ws), return_exceptions=True
        )
        try:
            _reset_failed(made)
            await self._spawn_sandbox(site, binds)
            await self.ready()
        finally:
            gone = await removing
        _reset_failed(gone)

    async def _end_old_sandbox(self, proc: Any, cg: str) -> None:
        """Kill a replaced sandbox: every process of its cgroup, then bubblewrap."""
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        await self._kill_sandbox(proc, cg)

    async def _kill_sandbox(self, proc: Any, cg: str | None) -> None:
        """Kill everything in cgroup `cg` (when given) but bubblewrap itself, so that it
        reaps their children and exits, then bubblewrap's whole group; collect it."""
        if cg is not None:
            await self.host.kill_cgroup(cg, spare=proc.pid)
            try:
                await asyncio.wait_for(proc.wait(), 1.0)
            except TimeoutError:
                pass
        await self.host.kill(proc)
        await proc.wait()
        self.host.release(proc)

    def cpu_ns(self) -> int | None:
        """The environment's CPU: its cgroup's, plus the cgroups that clean resets
        replaced (so that it never goes back across a reset)."""
        if self.cg is None or not self.host.controller_local:
            return None
        now = Cgroup(self.cg).cpu_usage_ns()
        return None if now is None else now + self._cpu_replaced

    def memory_bytes(self) -> int | None:
        if self.cg is None or not self.host.controller_local:
            return None
        return Cgroup(self.cg).memory_bytes()

    def _let_go_of_init(self) -> None:
        """What this environment holds of its init (the credentials reader, the pidfd),
        closed once: a reset and a teardown both end here."""
        if isinstance(self.reader, CredReader):
            self.reader.close()
        self.reader = None
        if self.pidfd is not None:
            fd, self.pidfd = self.pidfd, None
            os.close(fd)

    # -- teardown ----------------------------------------------------------

    async def teardown(self) -> None:
        errors: list[str] = []
        if self.proc is None and self._spawn is not None:
            # create was cancelled while spawning: let the spawn finish, then end it.
            try:
                self.proc = await asyncio.wait_for(asyncio.shield(self._spawn), SPAWN_WAIT_S)
            except Exception:
                pass
        self._spawn = None
        if self.proc is not None:
            await self._end_init(graceful=not (self.shell and self.shell.broken))
            self.proc = None
            self.shell = None
        self._let_go_of_init()
        if self.cg is not None:
            try:
                await self.host.remove_cgroup(self.cg)
                self.cg = None
            except PhaseFailure as exc:  # keep going: the workspace still has to go
                errors.append(exc.message)
        if self._binds is not None and not self._binds.done():  # a cancelled create's
            try:
                await asyncio.wait_for(asyncio.shield(self._binds), 60)
            except Exception:
                pass
        await drop_workspace(self.host, self.workspace, self._ws)
        self.workspace = self._ws = self._binds = None
        await self.img.release()  # after the sandbox: nothing reads the mounts now
        if errors:
            raise PhaseFailure(ErrorKind.TEARDOWN_INCOMPLETE, "; ".join(errors))

    async def _end_init(self, graceful: bool) -> None:
        """End the sandbox: close the init's stdin (the shell or sleeper then exits).

        If it does not exit (or `graceful` is off), kill everything in the cgroup but
        our own child first, so that bwrap reaps their children and exits itself (no
        orphaned zombies), then kill the child's whole group.
        """
        proc = self.proc
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
        await self._kill_sandbox(proc, self.cg if proc.returncode is None else None)


def _reset_failed(results: tuple[Any, ...] | list[Any]) -> None:
    """Raise RESET_FAILED naming the first exception among a reset's gathered steps."""
    for res in results:
        if isinstance(res, BaseException):
            msg = res.message if isinstance(res, PhaseFailure) else repr(res)
            raise PhaseFailure(ErrorKind.RESET_FAILED, f"stage reset: {msg}") from res


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# Unpacking workspace_src into a fresh sandbox's /workspace (a tar on stdin), as the
# sandbox's uid: the files are its own (no owner from the archive).
FILL_SH = "exec tar -x --no-same-owner -f - -C /workspace"


async def tar_of(src: str) -> bytes:
    """The contents of directory `src` as a tar stream (made once per run)."""
    from rtax_tui.hosts.ssh import tar_bytes

    return await tar_bytes(src)


def _binds_error(binds: tuple[str, ...] | list[str]) -> str | None:
    """Why `ro_binds` is not a list of at most 256 absolute host paths; None when it is."""
    if len(binds) > 256:
        return f"expected at most 256 host paths, got {len(binds)}"
    for b in binds:
        if not b.startswith("/") or len(b) > 4096 or "\0" in b:
            return f"expected absolute host paths, got {b!r}"
    return None


@dataclass(frozen=True)
class StageOptions:
    """`[drivers_options.stage]`."""

    sandbox: str = option(
        Key(
            (str,),
            "auto",
            "the sandbox: bubblewrap either way (the `unshare` fallback was removed)",
            choices=("auto", "bwrap"),
        )
    )
    uid: int = option(
        Key(
            (int,),
            DEFAULT_UID,
            "the unprivileged host uid (and gid) root in the sandbox is",
            (1, 2**32 - 2),
        )
    )
    ro_binds: tuple[str, ...] = option(Key((list,), (), "more host paths, bound read-only "
                                           "at the same place (at most 256)", items=(str,),
                                           check=_binds_error))  # fmt: skip


class StageDriver(Driver):
    name = "stage"
    runs_remote = True
    channels = ("exec", "shell")
    # Every check (sandbox.py says how), locally and on an SSH host alike.
    boundary = ALL_CHECKS
    image_modes = ("cached", "pull", "lazy")  # drivers.toolkit.delivery
    places_workspace_alias = True  # a link in bubblewrap's own root (`bwrap_argv`)

    options_type = StageOptions
    opts: StageOptions

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.uid = self.opts.uid
        self.sandbox = "bwrap"
        self._site: Site | None = None
        self._site_lock = asyncio.Lock()

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """The workload root as a squashfs, and its run-long mount for `cached`."""
        await delivery.current().prepare_squashfs(modes)

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        # clean replaces the sandbox (`_replace_sandbox`): a new shell too on `shell`
        if not self.host.controller_local:
            out["clean"] = "on an SSH host: not yet (the pool uses recreate)"
        else:
            out["clean"] = None
        return out

    def integrity(self, channel: str) -> str | None:
        """exec: each status is rtax-enter's, a host process no step can reach. shell on
        the controller: the frame's answer is taken only from the shell's own pid (the
        kernel's SO_PASSCRED) while it has not exec'd (its auxv), and the shell is not
        dumpable. Over SSH the answer comes through sshd, which hides the writer."""
        if channel == "shell" and not self.host.controller_local:
            return (
                "shell over SSH: the answer comes through sshd, so rtax can't tell which "
                "process wrote it nor whether the shell was replaced (exec)"
            )
        return None

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return StageEnvironment(self, spec, sub)

    async def site(self) -> Site:
        """The host's tools, root entries and support files, found once (the helper is
        compiled off the event loop). Raises PhaseFailure("sandbox_failed")."""
        if self._site is None:
            async with self._site_lock:
                if self._site is None:
                    try:
                        support = await host_support(self.host)
                    except (SupportError, OSError) as exc:
                        raise PhaseFailure(ErrorKind.SANDBOX_FAILED, str(exc)) from exc
                    tools = await find_tools(self.host)
                    self._site = Site(tools, await list_root(self.host), support)
        return self._site

    async def binds(self, spec: EnvSpec) -> list[tuple[str, str]]:
        """(a copy the sandbox uid can read, the path inside) for the assets the workload
        names and `ro_binds`. They are the controller's files: none on another host."""
        if not self.host.controller_local:
            return []
        wanted = named_assets(spec.workload, spec.env, self.opts.ro_binds)
        if not wanted:
            return []

        def copies() -> list[tuple[str, str]]:
            out = []
            for p in wanted:
                try:
                    out.append((public_copy(p, self.uid), p))
                except OSError as exc:
                    raise PhaseFailure(ErrorKind.SANDBOX_FAILED, f"cannot bind {p}: {exc}") from exc
            return out

        return await asyncio.to_thread(copies)

    # -- checks ------------------------------------------------------------

    async def check(self) -> list[Problem]:
        """Root, the tools, the support files, cgroups, then a real sandbox in each
        channel, on the driver's host."""
        host = self.host
        try:
            uid = (await host.run(["id", "-u"], timeout=30)).stdout.strip()
            tools = await find_tools(host)
        except PhaseFailure as exc:
            return [
                Problem(f"host {host.name} does not answer: {exc.message}", "check the network")
            ]
        if uid != b"0":
            return [
                Problem(
                    f"stage needs root on host {host.name} (running as uid {uid.decode()}): it "
                    "makes cgroups and hands the sandbox to an unprivileged uid",
                    "run rtax as root (sudo rtax ...), or log in to the host as root",
                )
            ]
        if "bwrap" not in tools:
            return [
                Problem(
                    f"bubblewrap (bwrap) is not on PATH on host {host.name}: stage's boundary "
                    "is built with it",
                    "apt-get install bubblewrap",
                )
            ]
        missing = [t for t in TOOLS if t not in tools]
        if missing:
            return [
                Problem(
                    f"not on PATH on host {host.name}: {', '.join(missing)}",
                    "apt-get install util-linux coreutils tar findutils there",
                )
            ]
        arch = (await host.run(["uname", "-m"], timeout=30)).stdout.decode().strip()
        if arch != os.uname().machine:
            return [
                Problem(
                    f"host {host.name} is {arch}, this machine {os.uname().machine}: stage's "
                    "exec helper is built here for this architecture",
                    "run rtax from a controller of the same architecture",
                )
            ]
        try:
            await self.site()
        except PhaseFailure as exc:
            cause = exc.__cause__
            fix = (
                cause.fix
                if isinstance(cause, SupportError)
                else "check that root can write rtax's cache"
            )
            return [Problem(f"stage cannot make its sandbox files: {exc.message}", fix)]
        rel = f"{cgroups.PREFIX}/{names.env_cgroup(runlock.owner())}"
        try:
            await host.make_cgroup(rel, cpus=1, memory_mib=64, pids=64)
            await host.remove_cgroup(rel)
        except PhaseFailure as exc:
            return [
                Problem(
                    f"cannot make cgroups under /sys/fs/cgroup on host {host.name} "
                    f"({exc.message}): CPU, memory and pid limits can't be applied",
                    "run as root with /sys/fs/cgroup mounted and writable "
                    "(in a container: --privileged, or --cgroupns=host with a rw /sys/fs/cgroup)",
                )
            ]
        failed = await self.first_channel_failing(HOSTNAME)
        if failed:
            channel, err = failed
            return [
                Problem(
                    f"bwrap could not run a sandbox ({channel}) on host {host.name}: {err}",
                    "bubblewrap must be able to make a user namespace as an unprivileged "
                    "user: sysctl -w user.max_user_namespaces=10000 "
                    "(and kernel.unprivileged_userns_clone=1 where the kernel has it)",
                )
            ]
        return []

    async def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "sandbox": "bwrap",
            "uid": self.uid,
            "isolation": f"userns (root inside = host uid {self.uid}), no capabilities, "
            "no_new_privs, seccomp, view: /usr + curated /etc, private /tmp, no network",
            "limits": "cpus, memory_mib, pids: the environment's cgroup; "
            "workspace_mib: the workspace's own tmpfs (its pages count in the memory limit)",
        }
        try:
            site = await self.site()
        except PhaseFailure:
            return facts
        facts["cgroup"] = (await self.host.facts()).get("cgroup")  # v1, v2 or None
        tool = site.tools.get("bwrap")
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
        """Sandboxes, env cgroups and workspaces of one run (or of every run)."""
        return await sandbox_cleanup(self.host, label, f"host {self.host.name}: stage")
