"""One container of a container engine (docker, podman) as an rtax environment: its
create, ready, actions and teardown, through the engine's API (`engine_api`), with
what its driver (`container.ContainerDriver`) says of the engine.

- create: `create.image_lookup` (inspect the image), `create.workspace_dir` (a host
  directory for /workspace, with `read_only`), `create.container_create` (network
  none, label `rtax.run=<label>`, CPU/memory/pid limits, working directory
  `/workspace`, the boundary options: `ContainerOptions`), then `create.workspace`
  when the workload has files or /workspace must be given to `user` (put_archive)
  and, channel `shell`, `create.attach` (the container's stdin/stdout/stderr).
  Limits: cpus as `nano_cpus`, memory_mib as `mem_limit`, pids as `pids_limit`
  (`--cpus`, `--memory`, `--pids-limit`), each left out when "unlimited".
  `workspace_mib`: /workspace is a tmpfs of that size on the host, bound in
  (`create.workspace_dir`), on a local engine whose containers share the host's uids
  (`sized_workspace`); the files still go through the API in `copy` mode (put_archive
  writes through the bind). Elsewhere (a remote engine, a user namespace, "unlimited")
  it is the container's writable layer, with no size (`--storage-opt size=` needs xfs
  with project quotas under overlay2); a tmpfs mount of the engine's own would refuse
  its copies into it.
  `/proc/cmdline` (the host kernel's command line) is masked beside the engine's own
  masked paths (the driver's `mask_cmdline`).
- ready: `ready.start`, then `ready.first_command` (the probe `true` through the channel).
- action: channel `exec` makes an exec instance per action (create, start, inspect:
  three API calls, the same as `exec_run`); channel `shell` frames the command
  over the attached stream to the container's own `sh` (drivers/toolkit/shellframe).
- teardown: remove the container with force (kill + remove, with its volumes).
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import tarfile
import time
from typing import Any

import docker.errors
from docker.types import Ulimit
from rtax_tui.drivers.base import Environment, SubTimer
from rtax_tui.drivers.toolkit import delivery
from rtax_tui.drivers.toolkit.assetview import workload_view
from rtax_tui.drivers.toolkit.container import ContainerDriver, assets_mount
from rtax_tui.drivers.toolkit.engine_api import (
    API_TIMEOUT_S,
    LABEL_KEY,
    DemuxProtocol,
    call,
    map_error,
    present,
    pull,
    pull_as,
    read_all,
    take_socket,
)
from rtax_tui.drivers.toolkit.rootfs import image_env
from rtax_tui.drivers.toolkit.runsc import host_pids as runsc_host_pids
from rtax_tui.drivers.toolkit.shellframe import FramedShell
from rtax_tui.drivers.toolkit.workspace import (
    make_workspace,
    populate,
    remove_workspace,
    workspace_mib,
)

from rtax_tui.hosts import names, safefs
from rtax_tui.hosts.cgroups import Cgroup, CgroupError
from rtax_tui.model import spec as model
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import (
    ActionResult,
    EnvSpec,
    OutputSink,
    PhaseFailure,
    RtaxError,
    Step,
    SubstrateLost,
)
from rtax_tui.model.waits import waiting_on

WORKDIR = "/workspace"
# The exec channel's PID 1: a shell that waits, so it also reaps orphans (a bare
# `sleep` as PID 1 would leave every killed background process a zombie).
SLEEPER = ["sh", "-c", "while :; do sleep 3600; done"]
# ... on a local engine, rtax's own init instead (`rtax-enter --init hold`, bound in
# read-only): it makes itself non-dumpable, so a step, root in the container with the
# init's uid and capabilities, cannot rewrite it through /proc/1/mem (a sleeper shell's
# memory it can: measured, docker 20.10 and podman 4.3).
INIT_PATH = "/.rtax-init"
INIT_ARGS = ["--init", "hold"]
KILL_GRACE_S = 5.0
# What an exec exits with when its process could not be started (a shell's "cannot
# execute", a runtime's refusal in a stopped container): the one status checked against
# the container's state.
EXEC_FAILED_RC = 126
# How long an exec whose output ended may take to be marked exited (see _exit_code).
EXIT_WAIT_S = 30.0
CGROUP_RELEASE_WAIT_S = 5.0  # podman's conmon cgroups, busy until conmon is reaped
# The engine's log driver for every container rtax makes: none (dockerd and podman both)
NO_LOG = {"Type": "none", "Config": {}}
# A read-only container's /tmp: like an ordinary /tmp (sticky, writable by all, programs
# may run from it), in memory and charged to the container's memory limit. Docker's own
# tmpfs default would be noexec.
TMPFS_TMP = "rw,nosuid,nodev,exec,mode=1777"


class ContainerEnvironment(Environment):
    def __init__(self, driver: ContainerDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.d = driver
        self.image = driver.image_for(spec.workload)
        self.name = names.container(spec.label)
        self.cid: str | None = None
        self._create: asyncio.Future[Any] | None = None
        self._attach: asyncio.Future[Any] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.shell: FramedShell | None = None
        self._socks: set[socket.socket] = set()
        self._bg: set[asyncio.Task[Any]] = set()
        self._cg_parent: str | None = None  # held on the driver until teardown
        self.host_workspace: str | None = None  # workspace = "bind": the host's side
        self.img = delivery.TrialImage()  # what its image phase delivered (image modes)
        self.pulled: str | None = None  # the per-trial reference a pull made, to untag
        self.view = ""  # the assets' view bound at the cache's path (assets only)

    # -- image (a run with image modes: drivers.toolkit.delivery) ---------------

    async def before_image(self) -> None:
        """`cached`: the local tag there (put back from the run's registry, untimed, when
        something else removed it); `pull`: nothing is removed. The engine is shared
        with every other run on it (a `cached` run may be using the image under its
        local name right now), so a pull trial never removes an image, under any name."""
        api = await self.d.api()
        if self.spec.image == "cached" and self.d.pushed.get(self.image) is not None:
            d = delivery.current()
            if not await asyncio.to_thread(present, api, self.image) and d.registry:
                repo, digest, _ = self.d.pushed[self.image]
                src = f"127.0.0.1:{d.registry.port}/{repo}"
                await call(f"restoring image {self.image}", pull_as, api, src, digest, self.image)

    async def deliver_image(self) -> None:
        """`cached`: nothing; `pull`: the image pulled from the run's registry through the
        content server under this trial's prefix, and kept under that name of its own
        (the run's server's port and the trial's tag: no other run or trial has it); the
        container is made from it. The engine fetches the layers it does not hold under
        any name (docs/images.md)."""
        mode = str(self.spec.image)
        got = self.d.pushed.get(self.image)
        if got is None:
            raise PhaseFailure(ErrorKind.ERROR, f"image {self.image} was not prepared")
        repo, digest, size = got
        if mode == "cached":
            self.img.got(delivery.Delivered(mode, "", size))
            return
        trial = os.urandom(6).hex()
        self.img.got(delivery.Delivered(mode, "", size, tag=trial))
        src = delivery.current().pull_ref(repo, trial)
        self.pulled = f"{src}@{digest}"
        api = await self.d.api()
        async with self.sub("pull"):
            await call(f"pulling {self.pulled}", pull, api, src, digest)
        want = self.d.image_ids.get(self.image)
        have = (await call("looking up the pulled image", api.inspect_image, self.pulled))["Id"]
        if want is not None and have != want:
            raise PhaseFailure(ErrorKind.ERROR, f"pulled {have}, pushed {want}")
        self.image = self.pulled  # the container is made from the trial's own name

    def image_report(self) -> dict[str, Any] | None:
        return self.img.report()

    async def _release_image(self) -> None:
        """After the container: the trial's own reference removed (the image stays under
        its local name), and what the server sent for it counted."""
        if self.pulled is not None:
            api = await self.d.api()
            try:  # only this name: the image stays under every other
                await asyncio.to_thread(api.remove_image, self.pulled, noprune=True)
            except Exception:
                pass  # gone already
            self.pulled = None
            self.image = self.d.image_for(self.spec.workload)
        await self.img.release()

    # -- create ------------------------------------------------------------

    def _container_kwargs(self, api: Any) -> dict[str, Any]:
        lim = self.spec.limits
        # No engine log: the shell channel's init is the shell, whose output the engine
        # would keep in a host file of no size (json-file, k8s-file); rtax reads the
        # container's streams itself (docs/boundaries.md, host-side sinks)
        hc: dict[str, Any] = {"network_mode": self.d.network, "log_config": NO_LOG}
        if lim.cpus:
            hc["nano_cpus"] = int(lim.cpus * 1e9)
        if lim.memory_mib:
            hc["mem_limit"] = lim.memory_mib << 20
        runsc = self.d.runs_gvisor()
        if lim.pids:  # under gVisor, its RLIMIT_NPROC (below) and a host backstop
            hc["pids_limit"] = runsc_host_pids(lim.pids) if runsc else lim.pids
        if self.spec.cgroup_parent:
            hc["cgroup_parent"] = "/" + self.spec.cgroup_parent.strip("/")
        binds: dict[str, dict[str, str]] = {}
        mount = assets_mount(self.spec.workload)
        if mount is not None:  # only what the workload names (drivers.toolkit.assetview)
            binds[self.view] = {"bind": mount, "mode": "ro"}
        if self.host_workspace is not None:
            binds[self.host_workspace] = {"bind": WORKDIR, "mode": "rw"}
        init = self.d.init_binary() if self.channel == "exec" else None
        if init is not None:
            binds[init] = {"bind": INIT_PATH, "mode": "ro"}
        if binds:
            hc["binds"] = binds
        opts = self.d.opts
        if opts.read_only:
            hc["read_only"] = True
            hc["tmpfs"] = {"/tmp": TMPFS_TMP}
        if opts.cap_drop:
            hc["cap_drop"] = list(opts.cap_drop)
        if opts.cap_add:
            hc["cap_add"] = list(opts.cap_add)
        security_opt = self.d.security_opts()
        if security_opt:
            hc["security_opt"] = security_opt
        if opts.runtime:
            hc["runtime"] = opts.runtime
        hc.update(self.d.host_config_extra())
        if runsc and lim.pids:
            kept = [u for u in hc.get("ulimits", []) if u.name != "nproc"]
            hc["ulimits"] = [*kept, Ulimit(name="nproc", soft=lim.pids, hard=lim.pids)]
        host_config = api.create_host_config(**hc)
        self.d.mask_cmdline(host_config)
        userns = self.d.userns_mode()
        if userns is not None:  # the SDK refuses anything but "host"; podman takes more
            host_config["UsernsMode"] = userns
        env = image_env(WORKDIR, self.spec.env)
        shell = self.channel == "shell"
        return dict(
            image=self.image,
            command=["sh"] if shell else [INIT_PATH, *INIT_ARGS] if init else SLEEPER,
            name=self.name,
            user=opts.user,
            labels={LABEL_KEY: self.spec.label, "rtax.cell": self.spec.cell.id},
            working_dir=WORKDIR,
            environment=env,
            stdin_open=shell,
            tty=False,
            host_config=host_config,
            use_config_proxy=False,
        )

    def _archive_plan(self) -> tuple[str, str | None] | None:
        """Where the workspace archive goes through the API (put_archive), and the name of
        its top directory entry, or None when nothing goes.

        Files go in "copy" mode. With `user` set, /workspace itself must be the user's:
        a host directory was chowned already; otherwise the archive is put at / with
        a `workspace` entry owned by the user (an entry for the target directory itself,
        ".", is ignored by both engines), files or not."""
        files = self.d.workspace == "copy" and bool(self.spec.workspace_src)
        if self.host_workspace is not None:
            return (WORKDIR, None) if files else None
        if self.d.opts.uid is not None:
            return "/", WORKDIR.strip("/")
        return (WORKDIR, None) if files else None

    def _do_create(self, api: Any) -> str:
        cid = str(api.create_container(**self._container_kwargs(api))["Id"])
        self.cid = cid  # set in the thread: a cancelled create is still torn down
        return cid

    async def create(self) -> None:
        async with self.sub("image_lookup"):
            api = await self.d.api()
            await call(f"looking up image {self.image}", api.inspect_image, self.image)
        if self.spec.cgroup_parent and self._cg_parent is None and self.d.local:
            self._cg_parent = self.spec.cgroup_parent
            self.d.hold_cgroup_parent(self._cg_parent)
        opts = self.d.opts
        if self.d.host_dir_workspace(self.spec):
            bind = self.d.workspace == "bind"
            async with self.sub("workspace" if bind else "workspace_dir"):
                size = workspace_mib(self.spec) if self.d.sized_workspace(self.spec) else None
                self.host_workspace = await make_workspace(self.d.host, self.spec.label, size)
                if bind:
                    await asyncio.to_thread(populate, self.host_workspace, self.spec.workspace_src)
                if opts.uid is not None:
                    await asyncio.to_thread(_own_tree, self.host_workspace, opts.uid, opts.gid)
        async with self.sub("container_create"):
            if self.spec.workload.needs_assets:
                self.view = await _assets_view(self.spec)
            self.d.track_containers(self.spec.label)  # before the container exists
            self._create = asyncio.ensure_future(asyncio.to_thread(self._do_create, api))
            try:
                with waiting_on("the engine's API (container create)"):
                    await asyncio.shield(self._create)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise map_error(exc, "container create") from exc
        if self._archive_plan() is not None:
            async with self.sub("workspace"):
                await self._put_workspace(api)
        alias = self.spec.workspace_alias
        if alias is not None and self.d.places_workspace_alias:
            async with self.sub("workspace_alias"):
                data = await asyncio.to_thread(_alias_tar, alias)
                await call("linking the workspace", api.put_archive, self.cid, "/", data)
        if self.channel == "shell":
            async with self.sub("attach"):
                await self._attach_shell(api)

    async def _put_workspace(self, api: Any) -> None:
        """The workspace archive through the API, where `_archive_plan` says (at create,
        and again after a clean reset)."""
        plan = self._archive_plan()
        if plan is None:
            return
        path, top = plan
        opts = self.d.opts
        src = self.spec.workspace_src if self.d.workspace == "copy" else None
        data = await asyncio.to_thread(_tar_workspace, src, opts.uid, opts.gid, top)
        await call("copying the workspace", api.put_archive, self.cid, path, data, container=True)

    async def _attach_shell(self, api: Any) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}

        def attach() -> tuple[socket.socket, bytes]:
            raw = api.attach_socket(self.cid, params=params)
            sock, prefix = take_socket(raw)
            self._socks.add(sock)
            return sock, prefix

        self._attach = asyncio.ensure_future(asyncio.to_thread(attach))
        try:
            sock, prefix = await asyncio.shield(self._attach)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise map_error(exc, "attaching to the container", container=True) from exc
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=model.READ_LIMIT)
        proto = DemuxProtocol(reader)
        transport, _ = await loop.create_connection(lambda: proto, sock=sock)
        self._socks.discard(sock)  # the transport owns it now
        if prefix:
            proto.data_received(prefix)
        self._writer = asyncio.StreamWriter(transport, proto, reader, loop)
        self.shell = FramedShell(self._writer, reader)

    # -- ready -------------------------------------------------------------

    async def ready(self) -> None:
        if self.cid is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "the container was never created")
        async with self.sub("start"):
            api = await self.d.api()
            await call("container start", api.start, self.cid, container=True)
        async with self.sub("first_command"):
            await super().ready()

    # -- actions -------------------------------------------------------------

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.cid is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "the container was never created")
        if self.channel == "shell":
            return await self._shell_action(step, timeout)
        return await self._exec_action(step, timeout)

    async def _shell_action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.shell is None:
            raise PhaseFailure(ErrorKind.SHELL_LOST, "the container's shell was never started")
        try:  # FramedShell keeps the stale-channel rule
            async with asyncio.timeout(timeout):
                return await self.shell.run(step.argv)
        except PhaseFailure as exc:
            if not await self.d.alive():
                raise SubstrateLost(f"dockerd went away during an action: {exc.message}") from exc
            raise

    async def _exec_action(self, step: Step, timeout: float | None) -> ActionResult:
        if self._bg:  # an earlier timeout's kill must not hit this action
            await asyncio.wait(set(self._bg), timeout=2 * KILL_GRACE_S)
        api = await self.d.api()
        holder: dict[str, Any] = {}

        def start() -> tuple[socket.socket, bytes]:
            eid = api.exec_create(self.cid, list(step.argv), stdout=True, stderr=True)["Id"]
            holder["eid"] = eid
            raw = api.exec_start(eid, socket=True)
            sock, prefix = take_socket(raw)
            self._socks.add(sock)
            holder["sock"] = sock
            return sock, prefix

        fut = asyncio.ensure_future(asyncio.to_thread(start))
        sink = OutputSink()
        try:
            async with asyncio.timeout(timeout):
                try:
                    sock, prefix = await asyncio.shield(fut)
                except (asyncio.CancelledError, TimeoutError):
                    raise
                except Exception as exc:
                    if await self._stopped(api, exc):
                        raise PhaseFailure(
                            ErrorKind.ENV_LOST,
                            f"the container is not running (its init is gone): {exc}",
                        ) from exc
                    raise map_error(exc, "exec", container=True) from exc
                await read_all(sock, prefix, sink)
        except (TimeoutError, asyncio.CancelledError):
            self._kill_later(fut, holder)
            raise
        except OSError as exc:
            raise map_error(exc, "exec output") from exc
        finally:
            s = holder.get("sock")
            if s is not None and fut.done():
                self._socks.discard(s)
                s.close()
        rc = await self._exit_code(api, holder["eid"])
        if rc == EXEC_FAILED_RC and not await self._running(api):
            # the runtime could not start the process in a container that just stopped
            # (runsc answers so when a step killed the container's pid 1): lost, not a
            # step's own 126 (which leaves the container running)
            raise PhaseFailure(
                ErrorKind.ENV_LOST, "the container stopped (its init is gone): the exec got 126"
            )
        return ActionResult(rc=rc, output=sink.kept(), dropped=sink.dropped)

    async def _running(self, api: Any) -> bool:
        """The container's state says it runs (True when it cannot be asked)."""
        try:
            info = await call("inspect", api.inspect_container, self.cid, container=True)
        except PhaseFailure:
            return True
        return bool((info.get("State") or {}).get("Running", False))

    async def _stopped(self, api: Any, exc: BaseException) -> bool:
        """Whether an exec the engine refused (`exc`, an API error) was refused because the
        container no longer runs: its state, asked for on this failure only. Under runc a
        step cannot kill the container's pid 1; under runsc it can, and the container stops:
        its later actions are lost, not errors of the engine."""
        if not isinstance(exc, docker.errors.APIError) or isinstance(exc, docker.errors.NotFound):
            return False
        return not await self._running(api)

    async def _exit_code(self, api: Any, eid: str) -> int:
        """The exec's exit status, once the engine has recorded it. Its output can end
        well before: podman marks an exec session exited only after conmon's exit file is
        read and the session cleaned up, which took over a second on a loaded machine (a
        fixed 200 x 5 ms wait failed trials there). Polled from 2 ms, backing off to
        50 ms, for up to EXIT_WAIT_S."""
        deadline = time.monotonic() + EXIT_WAIT_S
        pause = 0.002
        while True:
            info = await call("exec inspect", api.exec_inspect, eid, container=True)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() >= deadline:
                raise PhaseFailure(
                    ErrorKind.DOCKER_ERROR,
                    f"the exec's output ended but it was not marked exited in {EXIT_WAIT_S:g} s",
                )
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.05)

    def _kill_later(self, fut: asyncio.Future[Any], holder: dict[str, Any]) -> None:
        """After a timeout: close the stream and kill every process the actions left.

        `kill -9 -1` in the container ends all its processes but PID 1 (the sleeper
        loop, which reaps them), so the environment can be used again. It runs in
        the background, so that the timeout is not stretched; teardown waits for it.
        """

        async def kill() -> None:
            try:
                await asyncio.wait_for(asyncio.shield(fut), KILL_GRACE_S)
            except BaseException:
                pass
            s = holder.get("sock")
            if s is not None:
                self._socks.discard(s)
                s.close()
            api = await self.d.api()

            def run() -> None:
                eid = api.exec_create(self.cid, ["kill", "-9", "-1"])["Id"]
                api.exec_start(eid)

            try:
                await asyncio.wait_for(asyncio.to_thread(run), KILL_GRACE_S)
            except BaseException:
                pass

        task = asyncio.get_running_loop().create_task(kill())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def memory_bytes(self) -> int | None:
        """The container's memory cgroup's usage (its pages, page cache and the tmpfs
        mounts it writes), where the engine runs here and puts it where its cgroupfs
        driver does: `<parent>/<id>` (docker) or `<parent>/libpod-<id>` (podman), under
        the run's budget parent or the engine's default one."""
        if self.cid is None or not self.d.local:
            return None
        parents = [self.spec.cgroup_parent.strip("/")] if self.spec.cgroup_parent else []
        for parent in (*parents, "docker", "libpod_parent"):
            for leaf in (self.cid, f"libpod-{self.cid}"):
                try:
                    cg = Cgroup(f"{parent}/{leaf}")
                    got = cg.memory_bytes() if cg.exists() else None
                except (CgroupError, ValueError):
                    continue
                if got is not None:
                    return got
        return None

    # -- teardown ------------------------------------------------------------

    async def teardown(self) -> None:
        try:
            await self._teardown()
            if self.host_workspace is not None:  # after the container that used it
                await remove_workspace(self.d.host, self.host_workspace)
                self.host_workspace = None
            if self.img.delivered is not None:
                await self._release_image()
        finally:
            parent, self._cg_parent = self._cg_parent, None
            if parent is not None and self.d.drop_cgroup_parent(parent):  # the last one
                async with self.sub("cgroup_release"):
                    await asyncio.to_thread(_remove_engine_cgroups, parent)

    async def _teardown(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
            self.shell = None
        for fut in (self._create, self._attach):
            if fut is not None and not fut.done():
                try:  # a create cancelled mid-call: let it finish, then remove it
                    await asyncio.wait_for(asyncio.shield(fut), API_TIMEOUT_S)
                except BaseException:
                    pass
        if self._bg:
            await asyncio.wait(set(self._bg), timeout=2 * KILL_GRACE_S)
        for s in list(self._socks):
            s.close()
        self._socks.clear()
        if self.cid is None and self._create is None:
            return
        api = await self.d.api()
        target = self.cid or self.name
        try:
            await asyncio.to_thread(self._remove, api, target)
        except Exception as exc:
            if not isinstance(exc, docker.errors.NotFound):
                raise map_error(exc, "container remove") from exc
        self.cid = None
        self._create = None

    def _remove(self, api: Any, target: str) -> None:
        """The forced remove (kill + remove, with volumes), in a worker thread."""
        api.remove_container(target, v=True, force=True)


def _remove_engine_cgroups(
    parent: str, root: str = "/sys/fs/cgroup", wait_s: float = CGROUP_RELEASE_WAIT_S
) -> None:
    """rmdir, deepest first, the empty cgroups under `parent` in the v1 hierarchies rtax
    does not manage (blkio, cpuset, devices, freezer, systemd, unified, ...).

    With cgroup v1 and the cgroupfs driver, dockerd and podman make the parent in every
    hierarchy (podman also a `conmon` cgroup under it) and leave it behind when the
    container is removed; the engine's budget cgroup (rtax's own hierarchies) is
    removed by the engine. A cgroup still busy (podman's conmon processes exit, and
    are reaped, just after the container is removed) is retried for `wait_s`, then
    left."""
    rel = parent.strip("/")
    try:
        managed = {os.path.realpath(d) for d in Cgroup(rel, root=root).dirs()}
        entries = os.listdir(root)
    except Exception:
        return
    tops = []
    for entry in entries:
        base = os.path.join(root, entry)
        if os.path.islink(base) or not os.path.isdir(base):
            continue
        top = os.path.join(base, rel)
        if os.path.realpath(top) not in managed and os.path.isdir(top):
            tops.append(top)
    deadline = time.monotonic() + wait_s
    while True:
        busy = False
        for top in tops:
            for cur, _, _ in os.walk(top, topdown=False):
                try:
                    os.rmdir(cur)
                except FileNotFoundError:
                    pass
                except OSError:
                    busy = True
        if not busy or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _tar_workspace(
    src: str | None, uid: int | None = None, gid: int | None = None, top: str | None = None
) -> bytes:
    """The workspace as a tar archive for put_archive: the contents of `src` (if any),
    under a first entry `top` (a directory, mode 0755) when given.

    Every entry belongs to the container's user (`uid`:`gid`, root by default), not to
    whoever owns the files on the host: root in a container without capabilities
    (cap_drop) could not write a file that another uid owns, nor could `user`. Numeric
    ids only (no user or group names), so that the engine does not look names up."""
    owner, group = uid or 0, gid if gid is not None else 0

    def own(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = owner, group, "", ""
        return ti

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        if top is not None:
            ti = tarfile.TarInfo(top)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tf.addfile(own(ti))
        if src:
            for name in sorted(os.listdir(src)):
                arc = f"{top}/{name}" if top else name
                tf.add(os.path.join(src, name), arcname=arc, filter=own)
    return buf.getvalue()


def _alias_tar(alias: str) -> bytes:
    """A tar archive of one symbolic link, `alias` -> /workspace, to put at / before the
    container first runs (the engine makes the directories above it). The path is
    checked again here: it names a place in the container's root, and came from a
    trajectory."""
    why = model.workspace_alias_problem(alias)
    if why is not None:
        raise PhaseFailure(ErrorKind.ERROR, f"workspace alias {alias!r}: {why}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo(alias.lstrip("/"))
        ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, WORKDIR, 0o777, int(time.time())
        tf.addfile(ti)
    return buf.getvalue()


def _own_tree(path: str, uid: int, gid: int | None) -> None:
    """chown -R (without following links) a host workspace to the container's user."""
    safefs.chown_tree(path, uid, -1 if gid is None else gid)


async def _assets_view(spec: EnvSpec) -> str:
    """The directory of only the assets `spec`'s workload names (made once per set)."""
    try:
        view = await asyncio.to_thread(workload_view, spec.workload, spec.env)
    except RtaxError as exc:
        raise PhaseFailure(ErrorKind.ERROR, str(exc)) from exc
    assert view is not None
    return view
