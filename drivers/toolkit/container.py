"""The container base: one container per environment, through the Docker Engine API
(`docker` SDK), for the `docker` driver (dockerd) and the `podman` driver (Podman's
Docker-compatible API), which set their engine's defaults and hooks on top.

The SDK is blocking, so every API call runs in a worker thread (`asyncio.to_thread`);
the low-level `APIClient` is used (the high-level `containers.create` adds an
inspect round trip). Streams (an exec's output, the shell's attach) are read on the
event loop from the hijacked socket, so a timed-out or cancelled action never
leaves a thread blocked.

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
  masked paths (`masked_paths`).
- ready: `ready.start`, then `ready.first_command` (the probe `true` through the channel).
- action: channel `exec` makes an exec instance per action (create, start, inspect:
  three API calls, the same as `exec_run`); channel `shell` frames the command
  over the attached stream to the container's own `sh` (drivers/toolkit/shellframe).
  Without a TTY the attach/exec streams are multiplexed: 8-byte headers (stream
  type, 0, 0, 0, big-endian length); stdout and stderr are merged.
- teardown: remove the container with force (kill + remove, with its volumes).

The daemon going away (connection refused or reset, the container vanishing) is
`SubstrateLost` in every phase; other API errors are `PhaseFailure("docker_error")`.
The engine's socket and the run label are registered with the host's reaper before the
first container exists (a kill -9 of rtax leaves none); `cleanup()` removes containers
by label.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import socket
import struct
import tarfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from rtax_tui.drivers.base import DaemonNeed, Driver, Environment, ImageRecipe, Problem, SubTimer
from rtax_tui.drivers.toolkit import delivery
from rtax_tui.drivers.toolkit.images import container_images
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.rootfs import image_env
from rtax_tui.drivers.toolkit.runsc import host_pids as runsc_host_pids
from rtax_tui.drivers.toolkit.runsc import limits_note as runsc_limits_note
from rtax_tui.drivers.toolkit.sandbox import SupportError, local_bin
from rtax_tui.drivers.toolkit.shellframe import FramedShell
from rtax_tui.drivers.toolkit.workspace import (
    make_workspace,
    populate,
    remove_workspace,
    workspace_cleanup,
    workspace_mib,
)

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model import spec as model
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import (
    ActionResult,
    EnvSpec,
    OptionError,
    OutputSink,
    PhaseFailure,
    RtaxError,
    Step,
    SubstrateLost,
    Workload,
)
from rtax_tui.model.waits import waiting_on

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
LABEL_KEY = "rtax.run"
WORKDIR = "/workspace"
# dockerd 20.10's own masked paths (moby oci/defaults.go), which a HostConfig's
# MaskedPaths replace
DOCKER_MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)
WORKSPACE_MODES = ("copy", "bind", "none")
# The exec channel's PID 1: a shell that waits, so it also reaps orphans (a bare
# `sleep` as PID 1 would leave every killed background process a zombie).
SLEEPER = ["sh", "-c", "while :; do sleep 3600; done"]
# ... on a local engine, rtax's own init instead (`rtax-enter --init hold`, bound in
# read-only): it makes itself non-dumpable, so a step, root in the container with the
# init's uid and capabilities, cannot rewrite it through /proc/1/mem (a sleeper shell's
# memory it can: measured, docker 20.10 and podman 4.3).
INIT_PATH = "/.rtax-init"
INIT_ARGS = ["--init", "hold"]
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
API_TIMEOUT_S = 60
POOL_SIZE = 64  # concurrent API connections (capacity batches); the SDK's default is 10
KILL_GRACE_S = 5.0
# What an exec exits with when its process could not be started (a shell's "cannot
# execute", a runtime's refusal in a stopped container): the one status checked against
# the container's state.
EXEC_FAILED_RC = 126
# How long an exec whose output ended may take to be marked exited (see _exit_code).
EXIT_WAIT_S = 30.0
CGROUP_RELEASE_WAIT_S = 5.0  # podman's conmon cgroups, busy until conmon is reaped
HEADER = struct.Struct(">BxxxL")
# The engine's log driver for every container rtax makes: none (dockerd and podman both)
NO_LOG = {"Type": "none", "Config": {}}

T = TypeVar("T")


def _default_image() -> str:
    from rtax_tui.drivers.toolkit.images import image_tag

    return image_tag("busybox")


def _workload_image() -> str:
    from rtax_tui.drivers.toolkit.images import image_tag

    return image_tag("workload")


def _assets_mount(workload: Workload) -> str | None:
    """The cache's path, where a workload with assets gets its view bound read-only (T2
    clones from, and applies a patch at, absolute paths under it), or None."""
    if not workload.needs_assets:
        return None
    from rtax_tui.drivers.toolkit.assets import cache_dir

    return os.path.abspath(cache_dir())


async def _assets_view(spec: EnvSpec) -> str:
    """The directory of only the assets `spec`'s workload names (made once per set)."""
    from rtax_tui.drivers.toolkit.assetview import workload_view

    try:
        view = await asyncio.to_thread(workload_view, spec.workload, spec.env)
    except RtaxError as exc:
        raise PhaseFailure(ErrorKind.ERROR, str(exc)) from exc
    assert view is not None
    return view


def _socket_path(url: str) -> str | None:
    for prefix in ("unix://", "unix:"):
        if url.startswith(prefix):
            return url[len(prefix) :] or None
    return None


# -- options -------------------------------------------------------------------

# Linux capability names (capabilities(7), kernel 6.x), without the CAP_ prefix.
CAPABILITIES = frozenset(
    """CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
    SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
    SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
    MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
    CHECKPOINT_RESTORE""".split()
)
# What `security_opt` entries may start with (the engines' own keys); the value is passed on.
SECURITY_OPT_KEYS = ("apparmor", "label", "no-new-privileges", "seccomp", "systempaths")
# A read-only container's /tmp: like an ordinary /tmp (sticky, writable by all, programs
# may run from it), in memory and charged to the container's memory limit. Docker's own
# tmpfs default would be noexec.
TMPFS_TMP = "rw,nosuid,nodev,exec,mode=1777"
MAX_ID = 2**32 - 2
USER_FORMAT = 'expected "UID" or "UID:GID" with numeric ids, to which rtax gives /workspace'


@dataclass(frozen=True)
class ContainerOptions:
    """A `[drivers_options.docker]` (or `.podman`) table, checked (`ContainerDriver.parse_options`).

    The boundary fields tighten what the engine does by default, which is root in the
    container with the engine's default capabilities, a writable root filesystem and the
    host's user namespace:

    - `user` ("UID" or "UID:GID"): the container's processes run as that user; rtax gives
      /workspace to it (the archive's owner, or a chown of the host directory), so the
      workspace stays writable. Names are refused: rtax must know the numbers.
    - `cap_drop` / `cap_add`: capability names ("ALL", "NET_RAW", ...; "CAP_" optional).
    - `read_only`: a read-only root filesystem, with a writable tmpfs /tmp and a
      /workspace bound from a host directory (the engines refuse, or ignore, copies into
      a read-only root filesystem).
    - `no_new_privileges`: setuid programs and file capabilities grant nothing.
    - `security_opt`: more `--security-opt` entries, passed on as they are, except a
      seccomp profile file (`seccomp=PATH`), sent as each engine's API takes it.
    - `userns`: docker `host` (the host's user namespace, also with a remapping daemon)
      or `remap` (the daemon's --userns-remap, checked); podman `host`, `auto[:OPTS]`,
      `keep-id[:OPTS]`, `nomap`, sent as the API's UsernsMode.

    And `runtime`: the OCI runtime the engine starts the container with, by the name the
    engine registered it under (`runsc`: gVisor, which `scripts/start-dockerd` registers
    where runsc is installed); unset, the engine's default (runc).
    """

    socket: str | None = None
    image: str | None = None
    network: str = "none"
    workspace: str = "copy"
    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    read_only: bool = False
    no_new_privileges: bool = False
    security_opt: tuple[str, ...] = ()
    userns: str | None = None
    runtime: str | None = None

    def boundary(self) -> dict[str, Any]:
        """The boundary options in effect, for the recording's header (defaults included,
        so that a header says `user: null`, root, rather than nothing)."""
        return {
            "user": self.user,
            "cap_drop": list(self.cap_drop),
            "cap_add": list(self.cap_add),
            "read_only": self.read_only,
            "no_new_privileges": self.no_new_privileges,
            "security_opt": list(self.security_opt),
            "userns": self.userns,
            "runtime": self.runtime,
        }

    def security_opts(self) -> list[str]:
        """`security_opt` with `no-new-privileges` added when `no_new_privileges` is set."""
        opts = list(self.security_opt)
        if self.no_new_privileges and not any(o.startswith("no-new-privileges") for o in opts):
            opts.append("no-new-privileges")
        return opts


def _parse_user(where: str, value: Any) -> tuple[str, int, int | None]:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    m = re.fullmatch(r"(\d+)(?::(\d+))?", text) if isinstance(text, str) else None
    if m is None or any(int(g) > MAX_ID for g in m.groups() if g is not None):
        raise OptionError("user", f"{where}.user: {value!r} ({USER_FORMAT})")
    gid = m.group(2)
    return text, int(m.group(1)), None if gid is None else int(gid)


def _seccomp_file(opt: str) -> str | None:
    """The profile file a `seccomp=PATH` entry names, or None (another key, `unconfined`,
    or a profile given inline as JSON)."""
    key, sep, value = opt.partition("=")
    if key != "seccomp" or not sep or value == "unconfined" or value.lstrip().startswith("{"):
        return None
    return os.path.abspath(value)


def _seccomp_file_problem(path: str) -> str | None:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    except ValueError as exc:
        return f"{path} is not JSON: {exc}"
    if not isinstance(profile, dict):
        return f"{path} is not a seccomp profile (a JSON object)"
    return None


def _parse_caps(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise OptionError(
            key, f'{where}.{key}: {value!r} (expected a list of capability names, e.g. ["ALL"])'
        )
    caps = []
    for cap in value:
        name = cap.strip().upper().removeprefix("CAP_")
        if name != "ALL" and name not in CAPABILITIES:
            raise OptionError(
                key, f"{where}.{key}: {cap!r} is not a Linux capability (e.g. ALL, NET_RAW, CHOWN)"
            )
        caps.append(name)
    return tuple(caps)


# -- errors ----------------------------------------------------------------


def _is_connection_error(exc: BaseException) -> bool:
    import docker.errors

    if isinstance(exc, docker.errors.APIError):  # an answer (APIError is an HTTPError)
        return False
    try:
        import requests
    except ImportError:  # pragma: no cover - the SDK depends on it
        requests = None  # type: ignore[assignment]
    if requests is not None and isinstance(exc, requests.exceptions.RequestException):
        return True
    if isinstance(exc, (ConnectionError, FileNotFoundError, socket.timeout, TimeoutError)):
        return True
    # DockerException but not APIError: "Error while fetching server API version", ...
    return isinstance(exc, docker.errors.DockerException)


def _map_error(exc: BaseException, what: str, *, container: bool = False) -> PhaseFailure:
    import docker.errors

    if isinstance(exc, PhaseFailure):
        return exc
    if _is_connection_error(exc):
        return SubstrateLost(f"dockerd went away during {what}: {exc}")
    if isinstance(exc, docker.errors.ImageNotFound):
        return PhaseFailure(ErrorKind.IMAGE_MISSING, f"{what}: {exc.explanation or exc}")
    if container and isinstance(exc, docker.errors.NotFound):
        return SubstrateLost(f"the container vanished during {what}: {exc.explanation or exc}")
    if isinstance(exc, docker.errors.APIError):
        return PhaseFailure(ErrorKind.DOCKER_ERROR, f"{what}: {exc.explanation or exc}")
    return PhaseFailure(ErrorKind.DOCKER_ERROR, f"{what}: {type(exc).__name__}: {exc}")


async def _call(
    what: str, fn: Callable[..., T], *args: Any, container: bool = False, **kw: Any
) -> T:
    try:
        with waiting_on(f"the engine's API ({what})"):
            return await asyncio.to_thread(fn, *args, **kw)
    except Exception as exc:
        raise _map_error(exc, what, container=container) from exc


# -- multiplexed streams -----------------------------------------------------


class Demuxer:
    """Turns a multiplexed attach/exec stream into its payload (stdout and stderr merged)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        buf = self._buf
        pos = 0
        while len(buf) - pos >= HEADER.size:
            _, n = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - HEADER.size < n:
                break
            out += buf[pos + HEADER.size : pos + HEADER.size + n]
            pos += HEADER.size + n
        del buf[:pos]
        return bytes(out)

    @property
    def pending(self) -> int:
        return len(self._buf)


def _take_socket(raw: Any) -> tuple[socket.socket, bytes]:
    """Our own non-blocking socket for a hijacked API stream, plus bytes already buffered.

    The SDK returns a `SocketIO` (unix socket) whose HTTP response may have read past
    the headers into its buffer; those bytes come back as the prefix. The SDK's
    objects are closed, so ours is the only descriptor of the connection.
    """
    sock = raw if isinstance(raw, socket.socket) else getattr(raw, "_sock", None)
    if not isinstance(sock, socket.socket):
        raise PhaseFailure(
            ErrorKind.DOCKER_ERROR, f"unsupported stream object {type(raw).__name__}"
        )
    sock.setblocking(False)  # shared with the dup: the file status flags are per description
    mine = sock.dup()
    prefix = b""
    try:
        fp = raw._response.raw._fp.fp  # the BufferedReader the HTTP headers were read with
    except AttributeError:
        fp = None
    if fp is not None:
        try:  # what is buffered; a non-blocking raw read adds nothing or what has arrived
            prefix = fp.read1(1 << 20) or b""
        except (BlockingIOError, ValueError, OSError):
            prefix = b""
    for obj in (raw, sock):
        try:
            obj.close()
        except Exception:
            pass
    return mine, prefix


class _DemuxProtocol(asyncio.StreamReaderProtocol):
    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._demux = Demuxer()

    def data_received(self, data: bytes) -> None:
        payload = self._demux.feed(data)
        if payload:
            super().data_received(payload)


async def _read_all(sock: socket.socket, prefix: bytes, sink: OutputSink) -> None:
    """An exec's output to its end, into `sink` (what is past OUTPUT_LIMIT only counted)."""
    loop = asyncio.get_running_loop()
    demux = Demuxer()
    sink.add(demux.feed(prefix))
    while True:
        data = await loop.sock_recv(sock, 1 << 16)
        if not data:
            return
        sink.add(demux.feed(data))


# -- the environment -----------------------------------------------------------


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
            if not await asyncio.to_thread(_present, api, self.image) and d.registry:
                repo, digest, _ = self.d.pushed[self.image]
                src = f"127.0.0.1:{d.registry.port}/{repo}"
                await _call(f"restoring image {self.image}", _pull_as, api, src, digest, self.image)

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
            await _call(f"pulling {self.pulled}", _pull, api, src, digest)
        want = self.d.image_ids.get(self.image)
        have = (await _call("looking up the pulled image", api.inspect_image, self.pulled))["Id"]
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
        mount = _assets_mount(self.spec.workload)
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
            from docker.types import Ulimit

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
            await _call(f"looking up image {self.image}", api.inspect_image, self.image)
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
                raise _map_error(exc, "container create") from exc
        if self._archive_plan() is not None:
            async with self.sub("workspace"):
                await self._put_workspace(api)
        alias = self.spec.workspace_alias
        if alias is not None and self.d.places_workspace_alias:
            async with self.sub("workspace_alias"):
                data = await asyncio.to_thread(_alias_tar, alias)
                await _call("linking the workspace", api.put_archive, self.cid, "/", data)
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
        await _call("copying the workspace", api.put_archive, self.cid, path, data, container=True)

    async def _attach_shell(self, api: Any) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}

        def attach() -> tuple[socket.socket, bytes]:
            raw = api.attach_socket(self.cid, params=params)
            sock, prefix = _take_socket(raw)
            self._socks.add(sock)
            return sock, prefix

        self._attach = asyncio.ensure_future(asyncio.to_thread(attach))
        try:
            sock, prefix = await asyncio.shield(self._attach)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _map_error(exc, "attaching to the container", container=True) from exc
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=model.READ_LIMIT)
        proto = _DemuxProtocol(reader)
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
            await _call("container start", api.start, self.cid, container=True)
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
            sock, prefix = _take_socket(raw)
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
                    raise _map_error(exc, "exec", container=True) from exc
                await _read_all(sock, prefix, sink)
        except (TimeoutError, asyncio.CancelledError):
            self._kill_later(fut, holder)
            raise
        except OSError as exc:
            raise _map_error(exc, "exec output") from exc
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
            info = await _call("inspect", api.inspect_container, self.cid, container=True)
        except PhaseFailure:
            return True
        return bool((info.get("State") or {}).get("Running", False))

    async def _stopped(self, api: Any, exc: BaseException) -> bool:
        """Whether an exec the engine refused (`exc`, an API error) was refused because the
        container no longer runs: its state, asked for on this failure only. Under runc a
        step cannot kill the container's pid 1; under runsc it can, and the container stops:
        its later actions are lost, not errors of the engine."""
        import docker.errors

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
            info = await _call("exec inspect", api.exec_inspect, eid, container=True)
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
        from rtax_tui.hosts.cgroups import Cgroup, CgroupError

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
            import docker.errors

            if not isinstance(exc, docker.errors.NotFound):
                raise _map_error(exc, "container remove") from exc
        self.cid = None
        self._create = None

    def _remove(self, api: Any, target: str) -> None:
        """The forced remove (kill + remove, with volumes), in a worker thread."""
        api.remove_container(target, v=True, force=True)


def _present(api: Any, ref: str) -> bool:
    import docker.errors

    try:
        api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _pull(api: Any, src: str, digest: str) -> None:
    """`src@digest` pulled (an error in the engine's stream raised). By its manifest's
    digest, never a tag: whatever a tag of the registry says now (a step with the host's
    network could push one), the pull gets the pushed image."""
    for line in api.pull(src, tag=digest, stream=True, decode=True):
        if isinstance(line, dict) and line.get("error"):
            raise RuntimeError(f"pull of {src}@{digest}: {line['error']}")


def _pull_as(api: Any, src: str, digest: str, local: str) -> None:
    """`src@digest` pulled, then tagged `local` (a cached image put back)."""
    _pull(api, src, digest)
    repo, _, ltag = local.rpartition(":")
    api.tag(f"{src}@{digest}", repo or local, ltag if repo else "latest")


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
    from rtax_tui.hosts.cgroups import Cgroup

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
    from rtax_tui.hosts import safefs

    safefs.chown_tree(path, uid, -1 if gid is None else gid)


# -- the driver ----------------------------------------------------------------


class ContainerDriver(Driver):
    """The Docker Engine API's driver; its defaults are dockerd's (see docker.py)."""

    name = "docker"
    channels = ("exec", "shell")
    # Every check: namespaces, Docker's default capability set and seccomp profile, the
    # devices cgroup, no network, limits, /proc/cmdline masked, a sized host tmpfs as
    # /workspace. Root in the container all the same. But not `vsock` (dockerd 20.10.24
    # of Debian 12, measured: its default profile lets socket(AF_VSOCK) through; moby
    # #44562 refuses it from 23.0); a `seccomp=PATH` security_opt can close it.
    # `workspace_size` and `deep_tree` only where the workspace is that host tmpfs
    # (`promised_checks`).
    boundary = ALL_CHECKS - {"vsock"}
    # Hooks for a server that speaks the same API through the same SDK code
    # (drivers/podman.py): where it listens, what the messages call it, how to start it.
    default_socket = DEFAULT_SOCKET
    service = "dockerd"
    daemon: ClassVar[DaemonNeed] = DaemonNeed("dockerd", "bash scripts/start-dockerd")
    image_recipe: ClassVar[ImageRecipe | None] = ImageRecipe("docker", container_images("docker"))
    leaves: ClassVar[frozenset[str]] = frozenset({"containers", "monitors"})
    log_hint = "the dockerd log (/tmp/rtax-dockerd.log)"
    cli = "docker"
    option_names: tuple[str, ...] = (
        "socket",
        "image",
        "network",
        "workspace",
        "user",
        "cap_drop",
        "cap_add",
        "read_only",
        "no_new_privileges",
        "security_opt",
        "userns",
        "runtime",
    )
    # `userns` values this engine honours: exact ones, and prefixes of ones with options.
    # dockerd's API knows only "host" (per container, opting out of a remapping daemon);
    # "remap" asks for the daemon's --userns-remap, which `check()` verifies.
    userns_values: tuple[str, ...] = ("host", "remap")
    userns_prefixes: tuple[str, ...] = ()

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.opts = self.parse_options(options)
        self.socket = self.opts.socket or self.default_socket
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
        self._client: Any = None
        # The engine runs on this machine (a unix socket): its cgroups are ours to see.
        self.local = _socket_path(self.socket) is not None
        self._cg_users: dict[str, int] = {}
        self._init: str | None = None
        # a link put into the root at create: not into a read-only one
        self.places_workspace_alias = not self.opts.read_only

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        cls.parse_options(options)

    @classmethod
    def parse_options(cls, options: dict[str, Any]) -> ContainerOptions:
        """The options table, checked; a mistake is one `OptionError` naming the field.

        Only what is wrong in the table itself is refused here; what the engine cannot
        honour (a daemon without --userns-remap, podman's rootless-only modes) is found
        by `check()` before any trial."""
        where = f"drivers_options.{cls.name}"
        unknown = sorted(set(options) - set(cls.option_names))
        if unknown:
            raise OptionError(
                unknown[0],
                f"{where}: unknown {', '.join(unknown)} (allowed: {', '.join(cls.option_names)})",
            )
        kw: dict[str, Any] = {}
        for key in ("socket", "image", "network", "runtime"):
            if key in options:
                if not isinstance(options[key], str) or not options[key]:
                    raise OptionError(
                        key, f"{where}.{key}: {options[key]!r} (expected a non-empty string)"
                    )
                kw[key] = options[key]
        workspace = options.get("workspace", "copy")
        if workspace not in WORKSPACE_MODES:
            allowed = ", ".join(WORKSPACE_MODES)
            raise OptionError("workspace", f"{where}.workspace: {workspace!r} (allowed: {allowed})")
        kw["workspace"] = workspace
        if "runtime" in options and not re.fullmatch(r"[A-Za-z0-9_.+-]+", kw["runtime"]):
            raise OptionError(
                "runtime", f"{where}.runtime: {kw['runtime']!r} (a runtime's name: runc, runsc)"
            )
        if options.get("user") is not None:
            kw["user"], kw["uid"], kw["gid"] = _parse_user(where, options["user"])
        for key in ("cap_drop", "cap_add"):
            if key in options:
                kw[key] = _parse_caps(where, key, options[key])
        for key in ("read_only", "no_new_privileges"):
            if key in options:
                if not isinstance(options[key], bool):
                    raise OptionError(
                        key, f"{where}.{key}: {options[key]!r} (expected true or false)"
                    )
                kw[key] = options[key]
        if "security_opt" in options:
            sec = options["security_opt"]
            if not isinstance(sec, list) or not all(isinstance(o, str) and o for o in sec):
                raise OptionError(
                    "security_opt", f"{where}.security_opt: {sec!r} (expected a list of strings)"
                )
            for opt in sec:
                if re.split("[=:]", opt, maxsplit=1)[0] not in SECURITY_OPT_KEYS:
                    raise OptionError(
                        "security_opt",
                        f"{where}.security_opt: {opt!r} (keys: {', '.join(SECURITY_OPT_KEYS)})",
                    )
                path = _seccomp_file(opt)
                if path is not None:
                    why = _seccomp_file_problem(path)
                    if why:
                        raise OptionError("security_opt", f"{where}.security_opt: {opt!r} ({why})")
            kw["security_opt"] = tuple(sec)
        if "userns" in options:
            userns = options["userns"]
            if not isinstance(userns, str) or not (
                userns in cls.userns_values or userns.startswith(cls.userns_prefixes)
            ):
                known = [*cls.userns_values, *(p + "OPTIONS" for p in cls.userns_prefixes)]
                raise OptionError(
                    "userns", f"{where}.userns: {userns!r} (allowed: {', '.join(known)})"
                )
            kw["userns"] = userns
            if userns != "host" and (kw.get("read_only") or workspace == "bind"):
                raise OptionError(
                    "userns",
                    f'{where}.userns: {userns!r} with read_only or workspace = "bind": '
                    "/workspace is then a host directory, given to host uids that this user "
                    'namespace does not map (use userns = "host", or workspace = "copy" '
                    "without read_only)",
                )
        return ContainerOptions(**kw)

    def security_opts(self) -> list[str]:
        """The security options as this engine's API takes them: a seccomp profile file
        (`seccomp=PATH`) becomes its JSON text, as the docker CLI sends it (dockerd
        would try to decode the path itself as JSON)."""
        out = []
        for opt in self.opts.security_opts():
            path = _seccomp_file(opt)
            out.append(opt if path is None else f"seccomp={self.seccomp_profile(path)}")
        return out

    def seccomp_profile(self, path: str) -> str:
        """What follows `seccomp=` for a profile file: docker's API wants the JSON."""
        with open(path, encoding="utf-8") as f:
            return f.read()

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
        would show in the container's mountinfo), made on first use (`INIT_PATH`); None
        for a remote engine (the sleeper shell:
        the binary is not on its machine, and it offers no clean reset to protect).
        Raises SupportError when it cannot be compiled (`check` says so first)."""
        if not self.local:
            return None
        if self._init is None:  # stage's execute-only copy, outside rtax's cache
            self._init = os.path.join(local_bin(), "init")
        return self._init

    def mask_cmdline(self, host_config: dict[str, Any]) -> None:
        """Mask /proc/cmdline (the host kernel's command line) beside the engine's own
        masked paths, in the API's HostConfig: docker's MaskedPaths replace its
        defaults, so they are given too."""
        host_config["MaskedPaths"] = [*DOCKER_MASKED_PATHS, "/proc/cmdline"]

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """Each workload's image pushed to the run's registry (with `pull`), its id kept
        (a pull must give the same image back) and its whole size."""
        api = await self.api()
        for ref in dict.fromkeys(self.image_for(w) for w in workloads):
            info = await _call(f"looking up image {ref}", api.inspect_image, ref)
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

    def default_image(self) -> str:
        return _default_image()

    def default_workload_image(self) -> str:
        return _workload_image()

    def host_config_extra(self) -> dict[str, Any]:
        """More `create_host_config` arguments for every container (none for docker)."""
        return {}

    def image_for(self, workload: Workload) -> str:
        return self.workload_image if needs_full_image(workload) else self.image

    def _connect(self) -> Any:
        import docker

        return docker.DockerClient(
            base_url=self.socket, version="auto", timeout=API_TIMEOUT_S, max_pool_size=POOL_SIZE
        )

    async def client(self) -> Any:
        """The SDK client, made on first use (its construction asks for the API version)."""
        if self._client is None:
            c = await _call(f"connecting to {self.socket}", self._connect)
            if self._client is None:
                self._client = c
            elif c is not self._client:
                c.close()
        return self._client

    async def api(self) -> Any:
        return (await self.client()).api

    async def alive(self) -> bool:
        try:
            api = await self.api()
            return bool(await asyncio.wait_for(asyncio.to_thread(api.ping), 5))
        except BaseException:
            return False

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

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return ContainerEnvironment(self, spec, sub)

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
            return await _call("ping", (await self.api()).ping)

        return self.service, "ping", ping

    async def check(self) -> list[Problem]:
        try:
            import docker  # noqa: F401
        except ImportError:
            return [Problem("the docker Python SDK is not installed", "pip install docker")]
        path = _socket_path(self.socket)
        start = self.start_command()
        if path is not None and not os.path.exists(path):
            return [Problem(f"{self.service} is not running (no {path})", start)]
        try:
            api = await self.api()
            await _call("ping", api.ping)
        except PhaseFailure as exc:
            self._client = None
            return [
                Problem(f"{self.service} does not answer on {self.socket}: {exc.message}", start)
            ]
        try:
            await _call("image lookup", api.inspect_image, self.image)
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
            info = await _call("info", api.info)
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

    async def runtime_problem(self, api: Any) -> Problem | None:
        """Why the engine cannot start containers with `runtime`, or None: dockerd lists
        the runtimes it knows in `info` (`--add-runtime`, or daemon.json's `runtimes`)."""
        info = await _call("info", api.info)
        known = sorted(info.get("Runtimes") or {})
        if self.opts.runtime in known:
            return None
        return Problem(
            f"drivers_options.{self.name}.runtime = {self.opts.runtime!r}: {self.service} "
            f"does not know it (its runtimes: {', '.join(known) or 'none'})",
            f"install it (apt-get install runsc), stop {self.service} and start it again "
            f"with {self.start_command()}, which registers runsc",
        )

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
                await _call("image lookup", api.inspect_image, image)
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
            mount = _assets_mount(w)
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
        import docker

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
            v = await _call("version", api.version)
            facts["server"] = v.get("Version")
            facts["api"] = v.get("ApiVersion")
            info = await _call("info", api.info)
            facts["storage"] = info.get("Driver")
            facts["cgroup"] = info.get("CgroupVersion")
            # seccomp profile, apparmor, userns (a remapping daemon), rootless, ...
            facts["security_options"] = info.get("SecurityOptions")
            facts["runtime"] = self.opts.runtime or info.get("DefaultRuntime")
            img = await _call("image lookup", api.inspect_image, self.image)
            facts["image_id"] = img.get("Id")
            if self.workload_image != self.image:
                try:
                    img = await _call("image lookup", api.inspect_image, self.workload_image)
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
        path = _socket_path(self.socket)
        if path is None or not label or label in self._tracked_labels:
            return
        self._tracked_labels.add(label)
        self.host.track("containers", f"{path} {LABEL_KEY}={label}")

    async def cleanup(self, label: str | None = None) -> int:
        sel = f"{LABEL_KEY}={label}" if label else LABEL_KEY
        try:
            api = await self.api()
            found = await _call(
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
