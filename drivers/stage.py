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
import shutil
import signal
import subprocess
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.sandbox import (
    HOSTNAME,
    READY,
    SLEEPER,
    SPAWN_INFO_FD,
    SPAWN_SECCOMP_FD,
    SupportError,
    bwrap_argv,
    enter_argv,
    public_copy,
    sandbox_env,
    spawn_argv,
    uid_option,
)
from rtax_tui.drivers.shellframe import FramedShell
from rtax_tui.drivers.stage_site import (
    CLEANUP_SH,
    TOOLS,
    Site,
    find_tools,
    host_support,
    list_root,
)
from rtax_tui.drivers.workspace import (
    WORKSPACE_PREFIX,
    empty_dir,
    populate,
    run_exec,
    safe_label,
)

from rtax_tui.core.assets import assets_root
from rtax_tui.core.cgroups import Cgroup
from rtax_tui.core.model import ActionResult, EnvSpec, PhaseFailure, Step
from rtax_tui.core.probe import ALL_CHECKS

TEARDOWN_GRACE_S = 2.0
SPAWN_WAIT_S = 10.0  # teardown waits this long for a spawn that a cancelled create left


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
        self.dev_names: set[str] = set()  # /dev as the sandbox started (clean reset)
        self.init_pids: set[int] = set()  # bwrap, its pid-1 bwrap, the sleeper (clean reset)

    # -- create ------------------------------------------------------------

    async def create(self) -> None:
        spec = self.spec
        label = safe_label(spec.label)
        site = await self.driver.site()
        uid = self.driver.uid
        async with self.sub("workspace"):
            self._ws = asyncio.ensure_future(
                self.host.make_workspace(f"{WORKSPACE_PREFIX}{label}-", spec.workspace_src, uid)
            )
            self.workspace = await asyncio.shield(self._ws)
            self._binds = asyncio.ensure_future(self.driver.binds(spec))
            binds = await asyncio.shield(self._binds)
        async with self.sub("cgroup"):
            name = f"env-{label}-{os.urandom(4).hex()}" if label else f"env-{os.urandom(4).hex()}"
            lim = spec.limits
            self.cg = Cgroup.relpath_of(name, spec.cgroup_parent)
            try:
                self.procs = await self.host.make_cgroup(
                    self.cg, cpus=lim.cpus, memory_mib=lim.memory_mib, pids=lim.pids
                )
            except PhaseFailure:
                self.cg = None  # the host removed what it had made
                raise
        async with self.sub("spawn"):
            if "bwrap" not in site.tools:
                raise PhaseFailure("sandbox_failed", f"bwrap is not on PATH on {self.host.name}")
            info = self.channel == "exec"
            bwrap = bwrap_argv(
                site.tools["bwrap"],
                self.workspace,
                ("sh",) if self.channel == "shell" else SLEEPER,
                root=site.root,
                etc=site.support.etc,
                seccomp_fd=SPAWN_SECCOMP_FD,
                binds=binds,
                info_fd=SPAWN_INFO_FD if info else None,
            )
            # rtax-enter joins the cgroup, opens the filter and drops to the sandbox uid:
            # no pre-exec hook (the spawn can vfork) and no descriptor to pass
            argv = spawn_argv(site.support, uid, self.procs, bwrap, info=info)
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
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
            try:
                self.proc = await asyncio.shield(self._spawn)
            except OSError as exc:
                raise PhaseFailure("sandbox_failed", f"cannot start {argv[0]}: {exc}") from exc
        if self.channel == "shell":
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
        return bytes(out).decode(errors="replace").strip()

    async def _started(self) -> None:
        """Exec channel: read bubblewrap's info (the init's host pid, on stdout) and the
        sleeper's READY line."""
        if self.pid is not None:
            return
        if self.proc is None:
            raise PhaseFailure("not_created", "the sandbox was never started")
        data = b""
        pid = None
        while READY.strip() not in data or pid is None:
            line = await self.proc.stdout.readline()
            if not line:
                out = (data.decode(errors="replace") + await self._failure_output()).strip()
                raise PhaseFailure("sandbox_failed", f"bwrap sandbox did not start: {out}")
            data += line
            m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
            if m and b"}" in data[m.end() :]:
                pid = int(m.group(1))
        self.pid = pid
        if self.host.controller_local and self.cg is not None and self.proc is not None:
            try:  # for a clean reset: /dev as it started, the sandbox's own processes
                self.dev_names = set(os.listdir(f"/proc/{pid}/root/dev"))
                self.init_pids = _init_chain(pid, self.proc.pid) | {
                    p for p in Cgroup(self.cg).pids() if _ppid(p) == pid
                }
            except (OSError, PhaseFailure, ValueError, IndexError):
                pass

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
            if self.shell is None:
                raise PhaseFailure("not_created", "the sandbox's shell was never started")
            # FramedShell keeps the stale-channel rule
            async with asyncio.timeout(timeout):  # no task per action, unlike wait_for
                return await self.shell.run(step.argv)
        await self._started()
        assert self.pid is not None
        support = (await self.driver.site()).support
        argv = enter_argv(support.enter, support.filter, self.pid, self.procs, step.argv)
        # no cgroup_procs here: rtax-enter joins them itself (no pre-exec hook, so the
        # spawn can vfork)
        return await run_exec(self.host, argv, cwd="/", env=self.env, timeout=timeout)

    # -- warm pools: the clean reset ------------------------------------------

    async def reset_clean(self) -> None:
        """The next trial gets a fresh environment in this sandbox (exec channel, on the
        controller's host: the driver's `pool_resets`): every process in the cgroup but
        the sandbox's own bwrap and sleeper killed, the workspace emptied and filled
        again, the private /tmp and /dev/shm emptied and anything made in /dev removed
        (seen from the host through /proc/PID/root). No network, no capabilities and one
        process per action leave no other state to carry: sockets die with their
        processes."""
        if self.channel != "exec" or not self.init_pids or self.cg is None:
            raise PhaseFailure("reset_unsupported", "stage: clean reset needs a live exec sandbox")
        await _kill_all_but(Cgroup(self.cg), self.init_pids)
        gone = [p for p in self.init_pids if not os.path.exists(f"/proc/{p}")]
        if gone:
            raise PhaseFailure("reset_failed", f"the sandbox's init processes died: {gone}")
        await asyncio.to_thread(self._clean_files, f"/proc/{self.pid}/root")

    def _clean_files(self, root: str) -> None:
        from rtax_tui.hosts.local import chown_tree

        assert self.workspace is not None
        for d in ("/tmp", "/dev/shm"):
            if os.path.isdir(root + d):
                empty_dir(root + d)
        dev = root + "/dev"
        for name in set(os.listdir(dev)) - self.dev_names:
            p = os.path.join(dev, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        empty_dir(self.workspace)
        populate(self.workspace, self.spec.workspace_src)
        chown_tree(self.workspace, self.driver.uid)

    def cpu_ns(self) -> int | None:
        if self.cg is None or not self.host.controller_local:
            return None
        return Cgroup(self.cg).cpu_usage_ns()

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
        if self.cg is not None:
            try:
                await self.host.remove_cgroup(self.cg)
                self.cg = None
            except PhaseFailure as exc:  # keep going: the workspace still has to go
                errors.append(exc.message)
        for fut in (self._binds, self._ws):  # a copy a cancelled create left running
            if fut is not None and not fut.done():
                try:
                    await asyncio.wait_for(asyncio.shield(fut), 60)
                except Exception:
                    pass
        if self.workspace is None and self._ws is not None and self._ws.done():
            if not self._ws.cancelled() and self._ws.exception() is None:
                self.workspace = self._ws.result()
        self._ws = self._binds = None
        if self.workspace is not None:
            await self.host.remove_tree(self.workspace)
            self.workspace = None
        if errors:
            raise PhaseFailure("teardown_incomplete", "; ".join(errors))

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
        if proc.returncode is None and self.cg is not None:
            await self.host.kill_cgroup(self.cg, spare=proc.pid)
            try:
                await asyncio.wait_for(proc.wait(), 1.0)
            except TimeoutError:
                pass
        await self.host.kill(proc)
        await proc.wait()
        self.host.release(proc)


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _init_chain(pid: int, top: int) -> set[int]:
    """`pid` and its ancestors up to `top` (the sandbox's bwrap processes)."""
    chain = {pid, top}
    try:
        while pid not in (top, 0, 1):
            pid = _ppid(pid)
            chain.add(pid)
    except (OSError, ValueError, IndexError) as exc:
        raise PhaseFailure("reset_failed", f"the sandbox's init is gone: {exc}") from exc
    return chain


async def _kill_all_but(cg: Cgroup, keep: set[int], tries: int = 200) -> None:
    """SIGKILL every process of the cgroup outside `keep` until none is left (a process
    may fork while its siblings die: the pid limit bounds how often)."""
    for _ in range(tries):
        others = cg.pids() - keep
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        await asyncio.sleep(0.001)
    raise PhaseFailure("reset_failed", "processes kept appearing in the environment's cgroup")


class StageDriver(Driver):
    name = "stage"
    runs_remote = True
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
        self._site: Site | None = None
        self._site_lock = asyncio.Lock()

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        if not self.host.controller_local:
            out["clean"] = "on an SSH host: not yet (the pool uses recreate)"
        elif channel == "shell":
            out["clean"] = (
                "shell channel: the persistent shell is the sandbox's init, its variables "
                "and working directory would survive (the pool uses recreate)"
            )
        else:
            out["clean"] = None
        return out

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
                        raise PhaseFailure("sandbox_failed", str(exc)) from exc
                    tools = await find_tools(self.host)
                    self._site = Site(tools, await list_root(self.host), support)
        return self._site

    async def binds(self, spec: EnvSpec) -> list[tuple[str, str]]:
        """(a copy the sandbox uid can read, the path inside) for the assets the workload
        names and `ro_binds`. They are the controller's files: none on another host."""
        if not self.host.controller_local:
            return []
        wanted = asset_paths(spec, list(self.options.get("ro_binds", ())))
        if not wanted:
            return []

        def copies() -> list[tuple[str, str]]:
            out = []
            for p in wanted:
                try:
                    out.append((public_copy(p, self.uid), p))
                except OSError as exc:
                    raise PhaseFailure("sandbox_failed", f"cannot bind {p}: {exc}") from exc
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
        rel = f"rtax/check-{os.urandom(4).hex()}"
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
        for channel in ("exec", "shell"):
            err = await self.try_environment(
                channel,
                Step(("sh", "-c", "test -w /workspace && hostname")),
                lambda r: r.rc == 0 and r.output.strip() == HOSTNAME.encode(),
            )
            if err:
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
            "workspace_mib: not applied (a host directory)",
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
        prefix = WORKSPACE_PREFIX + (f"{safe_label(label)}-" if label else "")
        cg = f"env-{safe_label(label)}-" if label else "env-"
        res = await self.host.run(["sh", "-c", CLEANUP_SH, "rtax-cleanup", prefix, cg], timeout=60)
        try:
            return int(res.stdout.split()[-1])
        except (ValueError, IndexError):
            raise PhaseFailure(
                "cleanup_failed",
                f"host {self.host.name}: stage cleanup failed: {res.stderr[-300:]!r}",
            ) from None
