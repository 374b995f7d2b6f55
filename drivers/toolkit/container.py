"""The container drivers' base: one container per environment on a container engine's
Engine API (`docker` SDK), for the `docker` driver (dockerd) and the `podman` driver
(Podman's Docker-compatible API), which set their engine's defaults and hooks on top
(its socket, images, service, masked paths, seccomp and runtime rules) and choose the
environment (`container_env`).

What each part holds: `container_options` parses and checks the options table;
`engine_api` makes the API calls (the SDK's client of the socket, a worker thread per
blocking call, typed errors, the multiplexed streams); `container_env` is one container
through create, ready, actions and teardown; this driver ties them: it checks the
engine and the options against it, prepares images, reports facts, and cleans up.

The daemon going away (connection refused or reset, the container vanishing) is
`SubstrateLost` in every phase; other API errors are `PhaseFailure("docker_error")`.
The engine's socket and the run label are registered with the host's reaper before the
first container exists (a kill -9 of rtax leaves none); `cleanup()` removes containers
by label.
"""

from __future__ import annotations

import asyncio
import os
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import docker
from rtax_tui.drivers.base import DaemonNeed, Driver, Problem
from rtax_tui.drivers.toolkit import delivery
from rtax_tui.drivers.toolkit.assetview import view_mount
from rtax_tui.drivers.toolkit.container_options import ContainerOptions, seccomp_file
from rtax_tui.drivers.toolkit.engine_api import LABEL_KEY, EngineClient, call, socket_path
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.runsc import limits_note as runsc_limits_note
from rtax_tui.drivers.toolkit.sandbox import SupportError, local_bin
from rtax_tui.drivers.toolkit.workspace import workspace_cleanup, workspace_mib

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.spec import EnvSpec, PhaseFailure, Step, Workload

# Why docker and podman offer no clean reset (issue 34): a clean reset must replace every
# writable surface, not walk it. A restart would bring new tmpfs mounts, /dev, an IPC
# namespace and an init, but not /workspace, a host directory bound at create (its root's
# mode, owner and xattrs are the trial's), nor a writable root, a layer of this container.
# Replacing those on the host before a restart is not done: the pool uses `recreate`.
CONTAINER_NO_CLEAN = (
    "a clean reset must replace, not clean: a restart would not replace /workspace (a host "
    "directory bound at create) nor a writable root (this container's layer), and rtax "
    "does not replace them yet (the pool uses recreate)"
)


def assets_mount(workload: Workload) -> str | None:
    """The cache's path, where a workload with assets gets its view bound read-only (T2
    clones from, and applies a patch at, absolute paths under it), or None."""
    return view_mount() if workload.needs_assets else None


class ContainerDriver(Driver):
    """A driver of a container engine's Engine API; the engine's own defaults and hooks
    are its subclass's (drivers/docker.py, drivers/podman.py)."""

    channels = ("exec", "shell")
    # Where the engine listens, what the messages call it, how to start it: the engine's.
    default_socket: ClassVar[str]
    service: ClassVar[str]
    daemon: ClassVar[DaemonNeed]
    log_hint: ClassVar[str]
    cli: ClassVar[str]
    leaves: ClassVar[frozenset[str]] = frozenset({"containers", "monitors"})
    # its options: ContainerOptions, or a subclass of them that narrows `userns` to what
    # this engine honours (and adds its own keys)
    options_type: ClassVar[type] = ContainerOptions
    opts: ContainerOptions

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.socket = self.opts.socket or self.engine_socket()
        self.engine = EngineClient(self.socket)
        self._tracked_labels: set[str] = set()
        # image modes (prepare_images): per local image, (repository, tag, whole size) in
        # the run's registry, and the id a pull must give back
        self.pushed: dict[str, tuple[str, str, int]] = {}
        self.image_ids: dict[str, str] = {}
        # The option `image` names the one image of every environment; without it,
        # busybox for what runs with busybox (t0) and the Debian image for the rest.
        self.image = self.opts.image or self.default_image()
        self.workload_image = self.opts.image or self.default_workload_image()
        # `network`: the container's network mode ("none" by default: no bridge here).
        self.network = self.opts.network
        # `workspace`: "copy" the workload's files into the container (put_archive),
        # "bind" a host directory holding them at /workspace, or "none" (no files).
        self.workspace = self.opts.workspace
        # The engine runs on this machine (a unix socket): its cgroups are ours to see.
        self.local = socket_path(self.socket) is not None
        self._cg_users: dict[str, int] = {}
        self._init: str | None = None
        # a link put into the root at create: not into a read-only one
        self.places_workspace_alias = not self.opts.read_only

    def engine_socket(self) -> str:
        """The engine's socket when the options name none."""
        return self.default_socket

    def security_opts(self) -> list[str]:
        """The security options as this engine's API takes them: a seccomp profile file
        (`seccomp=PATH`) as `seccomp_profile` says."""
        out = []
        for opt in self.opts.security_opts():
            path = seccomp_file(opt)
            out.append(opt if path is None else f"seccomp={self.seccomp_profile(path)}")
        return out

    @abstractmethod
    def seccomp_profile(self, path: str) -> str:
        """What follows `seccomp=` in the API's security options for a profile file."""

    def userns_mode(self) -> str | None:
        """The API's UsernsMode for the `userns` option: none for "remap" (the daemon's
        default when it remaps) and when unset; the value itself otherwise."""
        return None if self.opts.userns in (None, "remap") else self.opts.userns

    def host_dir_workspace(self, spec: EnvSpec) -> bool:
        """Whether /workspace is a host directory that rtax makes and binds: with
        workspace = "bind" and files, always with read_only (docker refuses an archive
        into a read-only root filesystem; podman writes it, under a /workspace that then
        stays read-only), and whenever it is sized (`sized_workspace`)."""
        return (
            self.opts.read_only
            or (self.workspace == "bind" and bool(spec.workspace_src))
            or self.sized_workspace(spec)
        )

    def sized_workspace_here(self) -> bool:
        """Whether this engine's workspaces can be a sized tmpfs of the host's: a local
        engine, in the host's user namespace (a namespace of the engine's own would map
        the files' owners; "remap" is the daemon's)."""
        return self.local and self.opts.userns in (None, "host")

    def sized_workspace(self, spec: EnvSpec) -> bool:
        """Whether /workspace is a tmpfs of `workspace_mib` on the host, bound in."""
        return self.sized_workspace_here() and workspace_mib(spec) is not None

    def init_binary(self) -> str | None:
        """The exec channel's init on a local engine: rtax-enter's execute-only copy that
        stage's sandboxes run as their init (under sandbox.PUBLIC: a path in rtax's cache
        would show in the container's mountinfo), made on first use (bound at
        `container_env.INIT_PATH`); None for a remote engine (the sleeper shell: the
        binary is not on its machine, and it offers no clean reset to protect).
        Raises SupportError when it cannot be compiled (`check` says so first)."""
        if not self.local:
            return None
        if self._init is None:  # stage's execute-only copy, outside rtax's cache
            self._init = os.path.join(local_bin(), "init")
        return self._init

    @abstractmethod
    def mask_cmdline(self, host_config: dict[str, Any]) -> None:
        """Mask /proc/cmdline (the host kernel's command line) beside the engine's own
        masked paths, in the API's HostConfig, as this engine's API takes it."""

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """Each workload's image pushed to the run's registry (with `pull`), its id kept
        (a pull must give the same image back) and its whole size."""
        api = await self.api()
        for ref in dict.fromkeys(self.image_for(w) for w in workloads):
            info = await call(f"looking up image {ref}", api.inspect_image, ref)
            self.image_ids[ref] = str(info["Id"])
            if "pull" in modes:
                self.pushed[ref] = await delivery.current().push(api, ref)
            else:  # cached only: its size as the engine has it, nothing is fetched
                self.pushed[ref] = (ref, "", int(info.get("Size") or 0))

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        if channel == "shell":
            out["clean"] = (
                "shell channel: the persistent shell is the container's init, its variables "
                "and working directory would survive"
            )
        else:
            out["clean"] = CONTAINER_NO_CLEAN
        return out

    def promised_checks(self) -> frozenset[str]:
        out = self.boundary
        if self.network != "none":  # a network mode that reaches the host's loopback, maybe
            out = out - {"loopback_tcp"}
        if not self.sized_workspace_here():  # the container's own layer: no size, no path
            out = out - {"workspace_size", "deep_tree"}
        return out

    @abstractmethod
    def default_image(self) -> str:
        """The engine's name of rtax's busybox image (workloads that need no more)."""

    @abstractmethod
    def default_workload_image(self) -> str:
        """The engine's name of rtax's Debian image (python3, git, pytest)."""

    def host_config_extra(self) -> dict[str, Any]:
        """More `create_host_config` arguments for every container (none by default)."""
        return {}

    def image_for(self, workload: Workload) -> str:
        return self.workload_image if needs_full_image(workload) else self.image

    async def api(self) -> Any:
        return await self.engine.api()

    async def alive(self) -> bool:
        return await self.engine.alive()

    def integrity(self, channel: str) -> str | None:
        """exec: the engine reports each exec's status, outside the container. shell: the
        container's shell is an ordinary process of the workload's uid, which a step can
        rewrite (/proc/PID/mem) or replace (exec)."""
        if channel == "shell":
            return (
                "shell: the container's shell is a process of the workload's own uid, "
                "which a step can rewrite (/proc/PID/mem) or replace (exec)"
            )
        return None

    # -- the cgroup parent -----------------------------------------------------

    def hold_cgroup_parent(self, parent: str) -> None:
        self._cg_users[parent] = self._cg_users.get(parent, 0) + 1

    def drop_cgroup_parent(self, parent: str) -> bool:
        """True when the last of this driver's containers under `parent` is gone: the
        caller then removes what the engine made for it (`_remove_engine_cgroups`)."""
        n = self._cg_users.get(parent, 0) - 1
        if n > 0:
            self._cg_users[parent] = n
            return False
        self._cg_users.pop(parent, None)
        return True

    # -- checks ------------------------------------------------------------

    def daemon_call(self) -> tuple[str, str, Callable[[], Awaitable[object]]] | None:
        async def ping() -> object:
            return await call("ping", (await self.api()).ping)

        return self.service, "ping", ping

    async def check(self) -> list[Problem]:
        path = socket_path(self.socket)
        start = self.start_command()
        if path is not None and not os.path.exists(path):
            return [Problem(f"{self.service} is not running (no {path})", start)]
        try:
            api = await self.api()
            await call("ping", api.ping)
        except PhaseFailure as exc:
            self.engine.forget()
            return [
                Problem(f"{self.service} does not answer on {self.socket}: {exc.message}", start)
            ]
        try:
            await call("image lookup", api.inspect_image, self.image)
        except PhaseFailure as exc:
            fix = self._image_fix(self.image, self.default_image())
            return [Problem(f"the image {self.image} is missing: {exc.message}", fix)]
        problems = await self._check_boundary(api)
        if problems:
            return problems
        try:
            await asyncio.to_thread(self.init_binary)
        except SupportError as exc:
            return [Problem(f"{self.name}: the exec channel's init: {exc}", exc.fix)]
        fix = f"see {self.log_hint}, then {start}"
        set_opts = [k for k, v in self.opts.boundary().items() if v not in (None, False, [])]
        if set_opts:  # the engine may refuse one of them: say which ones are set
            fix = f"check [drivers_options.{self.name}] {', '.join(set_opts)}; else {fix}"
        for channel in self.channels:
            err = await self.try_environment(
                channel,
                Step(("sh", "-c", "test -w /workspace && echo ok")),
                lambda r: r.rc == 0 and r.output == b"ok\n",
            )
            if err:
                return [Problem(f"a container could not run a command ({channel}): {err}", fix)]
        return []

    async def _check_boundary(self, api: Any) -> list[Problem]:
        """What the options need of the engine, before a container tries them: a host
        directory for read_only (the engine must run here), and for userns = "remap" a
        daemon that remaps (`--userns-remap`, shown as `name=userns` in its security
        options); without it every container shares the host's user namespace, so
        root in the container is root on the host, which "remap" promises it is not."""
        where = f"drivers_options.{self.name}"
        if self.opts.read_only and not self.local:
            return [
                Problem(
                    f"{where}.read_only needs the engine on this machine (/workspace is then "
                    f"a host directory that rtax binds), and {self.socket} is not",
                    "use a unix socket, or read_only = false",
                )
            ]
        if self.opts.runtime:
            problem = await self.runtime_problem(api)
            if problem is not None:
                return [problem]
        if self.opts.userns == "remap":
            info = await call("info", api.info)
            sec = info.get("SecurityOptions") or []
            if not any("name=userns" in o for o in sec):
                return [
                    Problem(
                        f'{where}.userns = "remap": {self.service} runs without --userns-remap '
                        f"(security options: {', '.join(sec) or 'none'}), so its containers "
                        "share the host's user namespace",
                        f'start {self.service} with --userns-remap=default, or set userns = "host"',
                    )
                ]
        return []

    @abstractmethod
    async def runtime_problem(self, api: Any) -> Problem | None:
        """Why the engine cannot start containers with the option `runtime`, or None."""

    def runs_gvisor(self) -> bool:
        """Whether the containers run under gVisor's runsc (`runtime`), whose pid limit
        must be the sandbox's RLIMIT_NPROC (see toolkit/runsc.py)."""
        return (self.opts.runtime or "").startswith("runsc")

    def start_command(self) -> str:
        """How to start the engine this driver's options need (the fix in messages)."""
        return self.daemon.start

    async def check_workloads(self, workloads: list[Workload]) -> list[Problem]:
        """The images these workloads need (beyond the one `check()` saw) exist."""
        needed = sorted({self.image_for(w) for w in workloads} - {self.image})
        problems = []
        for image in needed:
            try:
                api = await self.api()
                await call("image lookup", api.inspect_image, image)
            except PhaseFailure as exc:
                fix = self._image_fix(image, self.default_workload_image())
                problems.append(Problem(f"the image {image} is missing: {exc.message}", fix))
        problems += self._user_reach_problems(workloads)
        if self.workspace == "none":
            for w in workloads:
                if w.files:
                    problems.append(
                        Problem(
                            f'workload {w.name} brings files, and workspace = "none"',
                            f'set drivers_options.{self.name}.workspace to "copy" or "bind"',
                        )
                    )
        if self.workspace == "bind" and not self.local:
            problems.append(
                Problem(
                    'workspace = "bind" needs the engine on this machine',
                    f'use workspace = "copy" with {self.socket}',
                )
            )
        return problems

    def _user_reach_problems(self, workloads: list[Workload]) -> list[Problem]:
        """Workloads whose steps name a path under the bound assets (T2 clones from it
        and applies a patch from it) cannot reach it as a `user` other than root when
        the assets live under /root: the container's /root comes from the image, and
        the Debian image's is mode 0700."""
        if not self.opts.uid:
            return []
        problems = []
        for w in workloads:
            mount = assets_mount(w)
            if mount is None or not mount.startswith("/root/"):
                continue
            if any(mount in arg for step in w.steps for arg in step.argv):
                problems.append(
                    Problem(
                        f"workload {w.name} reads {mount} from its steps, which user "
                        f"{self.opts.user} cannot reach (the image's /root is mode 0700)",
                        f"set RTAX_CACHE to a directory outside /root, or run {w.name} "
                        f"without drivers_options.{self.name}.user",
                    )
                )
        return problems

    def _image_fix(self, image: str, default: str) -> str:
        """How to get a missing image: rtax builds its own (`rtax/...`, which no registry
        has); any other is pulled or imported."""
        build = f"rtax images build --driver {self.name}"
        if image == default:
            return build
        pull = f"{self.cli} pull {image} (or {self.cli} import it)"
        if image.removeprefix("localhost/").startswith("rtax/"):
            return f"{pull}; rtax's own images: {build}"
        return pull

    async def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "sdk": docker.__version__,
            "socket": self.socket,
            "image": self.image,
            "workload_image": self.workload_image,
            "workspace": self.workspace,
            "boundary_options": self.opts.boundary(),
            "limits": (
                "cpus, memory_mib: the engine's (--cpus, --memory); "
                + runsc_limits_note("--pids-limit")
                + "; "
                if self.runs_gvisor()
                else "cpus, memory_mib, pids: the engine's (--cpus, --memory, --pids-limit); "
            )
            + (
                "workspace_mib: a tmpfs of that size on the host as /workspace"
                if self.sized_workspace_here()
                else "workspace_mib: not applied (the container's own layer)"
            ),
        }
        try:
            api = await self.api()
            v = await call("version", api.version)
            facts["server"] = v.get("Version")
            facts["api"] = v.get("ApiVersion")
            info = await call("info", api.info)
            facts["storage"] = info.get("Driver")
            facts["cgroup"] = info.get("CgroupVersion")
            # seccomp profile, apparmor, userns (a remapping daemon), rootless, ...
            facts["security_options"] = info.get("SecurityOptions")
            facts["runtime"] = self.opts.runtime or info.get("DefaultRuntime")
            img = await call("image lookup", api.inspect_image, self.image)
            facts["image_id"] = img.get("Id")
            if self.workload_image != self.image:
                try:
                    img = await call("image lookup", api.inspect_image, self.workload_image)
                    facts["workload_image_id"] = img.get("Id")
                except PhaseFailure:
                    facts["workload_image_id"] = None
        except PhaseFailure as exc:
            facts["error"] = exc.message
        return facts

    # -- cleanup -----------------------------------------------------------

    def track_containers(self, label: str) -> None:
        """Have the host's reaper remove this run's containers if rtax dies (kill -9):
        by the engine's socket and the run label, registered once per run."""
        path = socket_path(self.socket)
        if path is None or not label or label in self._tracked_labels:
            return
        self._tracked_labels.add(label)
        self.host.track("containers", f"{path} {LABEL_KEY}={label}")

    async def cleanup(self, label: str | None = None) -> int:
        sel = f"{LABEL_KEY}={label}" if label else LABEL_KEY
        try:
            api = await self.api()
            found = await call(
                "listing containers", api.containers, all=True, filters={"label": sel}
            )
        except PhaseFailure:
            return 0  # no daemon, nothing of ours can be running
        live = await runlock.live_labels_on(self.host)  # after the listing: see runlock
        n = spared = 0
        for c in found:
            if names.safe_label((c.get("Labels") or {}).get(LABEL_KEY, "")) in live:
                spared += 1
                continue
            try:
                await asyncio.to_thread(api.remove_container, c["Id"], v=True, force=True)
                n += 1
            except Exception:
                pass
        runlock.note_spared(spared)
        if self.local:  # the host workspaces (tmpfs) those containers had bound
            n += await workspace_cleanup(self.host, names.workspace_prefix(label))
        return n
