"""`gvisor`: gVisor's user-space kernel (`runsc`) as an OCI runtime, one sandbox per trial.

Each environment is one `runsc run` that rtax starts as its own child (so the sandbox's
processes are reaped at once: `runsc delete` waits until they are, and a machine's init
that reaps slowly would be charged to the substrate), over a bundle rtax writes:

- the workload's root filesystem, read-only: a busybox root for workloads that need no
  more (T0), the Debian root of `toolkit/rootfs` (python3, git, pytest) for those that do
  (`toolkit/needs`), each extracted once under rtax's cache (`<cache>/gvisor/`);
- the workspace (`rtax-ws-<label>-*`, its own tmpfs of `workspace_mib`) bound read-write
  at `/workspace`; `/tmp` a tmpfs of the sandbox's; the attrs assets, for workloads that
  have them, bound read-only at their host path (as the container drivers do);
- no network (`--network=none`; option `network = "sandbox"` gives gVisor's own stack,
  with no interface but loopback here either way);
- a cgroup `rtax/env-<label>-<hex>` (or under the capacity budget) with the profile's
  CPU, memory and pid limits, which `runsc run` joins before exec, so the sentry, the
  gofer and every process of the sandbox are inside it (`--ignore-cgroups`: runsc makes
  no cgroup of its own).

The runsc state (`--root`) and the bundle are a directory rtax owns,
`/run/rtax/gvisor/rtax-<label>-<hex>`, and the container is named the same
`rtax-<label>-<hex>`, so every runsc process's command line names the run's label
(`leaves = {"monitors"}`) and `cleanup(label)` finds them.

Platform: option `platform` = `auto` (default), `ptrace`, `kvm` (and `systrap` where the
installed runsc has it). `auto` does not trust `/dev/kvm`: it runs one sandbox under
each faster platform with a timeout first (KVM guests hang on nested KVM) and falls
back to `ptrace`, recording which ran and why in the facts.

Channel `exec`: the sandbox's init is a sleeper that says READY on its stdout; each
action is a `runsc exec` (its status is the sentry's report, through runsc, a host
process); at a timeout the host kills that `runsc exec`; the step's processes inside
the sandbox run on (runsc 20221219: a timed-out `sleep 100` was still there 40 s later,
red team 2026-12-07) until teardown ends the sandbox. No later step shares it with
them: a timed-out action ends its trial, and a pooled environment whose trial failed
is torn down, not reset (engine/pool.py). The exec's stderr is the output pipe opened
a second time, not a copy of its stdout (see `APART_STDERR`).
Channel `shell`: the sandbox's init is `sh`, on `runsc run`'s stdin and stdout pipes,
driven by FramedShell. `runsc run`'s stderr goes to a file (runsc hands its
stdio to the sandbox: a pipe read to its end would wait for the sandbox).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from rtax_tui.drivers.base import Driver, Environment, ImageRecipe, Problem, SubTimer, which
from rtax_tui.drivers.toolkit import bootcache, delivery, sinks
from rtax_tui.drivers.toolkit.assets import cache_dir
from rtax_tui.drivers.toolkit.assetview import view_mount, workload_view
from rtax_tui.drivers.toolkit.bootcache import file_key
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.rootfs import (
    Log,
    build_debian_rootfs,
    debian_rootfs_path,
    find_static_busybox,
    image_env,
    recipe_digest,
)
from rtax_tui.drivers.toolkit.runsc import host_pids, limits_note
from rtax_tui.drivers.toolkit.shellframe import FramedShell, shell_action
from rtax_tui.drivers.toolkit.stage_site import sandbox_cleanup
from rtax_tui.drivers.toolkit.workspace import (
    drop_workspace,
    new_env_cgroup,
    run_exec,
    settled,
    workspace_mib,
)

from rtax_tui.hosts import Host, names
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import runlock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, RtaxError, Step, Workload

STATE_BASE = "/run/rtax/gvisor"
READY = b"RTAX-READY"
WORKDIR = "/workspace"
HOSTNAME = "rtax"
# The exec channel's init: says READY once the sandbox runs the workload, then waits (a
# shell that waits also reaps the orphans of killed steps).
SLEEPER = ["sh", "-c", "echo RTAX-READY; while :; do sleep 3600; done"]
# `runsc exec` hands its stdio to the sentry, which imports each descriptor with the
# flags it has then and sets it non-blocking for itself. Stdout and stderr as copies of
# one descriptor are one open file: the second imported is non-blocking for the step,
# whose writes then fail with EAGAIN whenever the host's reader is behind (measured on
# runsc 20221219: `grep flags /proc/self/fdinfo/2` in the step said 04001; with a slow
# reader, busybox `head -c 1048575` lost its tail with "standard output: I/O error" in
# 5 of 30 runs). Stderr opened anew through /proc is another open file on the same pipe:
# merged output in order, both blocking (0 of 100). Where stdout is no pipe (a socket
# cannot be opened through /proc), stderr stays the copy.
APART_STDERR = [
    "sh",
    "-c",
    '[ -p /proc/self/fd/1 ] && command exec 2>/proc/self/fd/1; exec "$@"',
    "rtax-exec",
]
PLATFORMS = ("systrap", "kvm", "ptrace")
PLATFORM_PROBE_S = 15.0
NETWORKS = ("none", "sandbox")
KILL_WAIT_S = 5.0
RUNSC_TIMEOUT_S = 30.0
# Bump when the way a root is laid out for runsc changes.
ROOT_RECIPE_VERSION = 1


def _sandbox_env(extra: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in image_env(WORKDIR, extra).items()]


# -- the root filesystems ------------------------------------------------------------

_root_lock = threading.Lock()


def _roots_dir() -> str:
    return str(cache_dir() / "gvisor")


def _extract(tar: str, name: str) -> str:
    """`tar` extracted once as `<cache>/gvisor/<name>` (with `/workspace`, `/tmp` and the
    assets' mount point made); returns the directory. Atomic: a concurrent extraction
    gives the same content."""
    dest = os.path.join(_roots_dir(), name)
    if os.path.isdir(dest):
        return dest
    with _root_lock:
        if os.path.isdir(dest):
            return dest
        os.makedirs(_roots_dir(), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=_roots_dir())
        try:
            res = subprocess.run(
                ["tar", "--numeric-owner", "-C", tmp, "-xf", tar],
                capture_output=True,
                timeout=600,
            )
            if res.returncode != 0:
                err = res.stderr.decode(errors="replace").strip()[-300:]
                raise RtaxError(f"gvisor: cannot extract {tar}: {err}")
            for sub, mode in (("workspace", 0o755), ("tmp", 0o1777), ("proc", 0o555)):
                p = os.path.join(tmp, sub)
                os.makedirs(p, exist_ok=True)
                os.chmod(p, mode)
            os.makedirs(tmp + view_mount(), exist_ok=True)
            os.chmod(tmp, 0o755)
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def busybox_root() -> str:
    """The busybox root (the container drivers' busybox image's files), made if missing."""
    from rtax_tui.drivers.toolkit.images import _recipe, _rootfs_tar

    digest = recipe_digest({"image": _recipe(), "layout": ROOT_RECIPE_VERSION})
    name = f"busybox-{digest}"
    if os.path.isdir(os.path.join(_roots_dir(), name)):
        return os.path.join(_roots_dir(), name)
    busybox = find_static_busybox()
    if busybox is None:
        raise RtaxError("gvisor: no statically linked busybox (apt-get install busybox-static)")
    os.makedirs(_roots_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tmp-tar-", dir=_roots_dir()) as tmp:
        tar = os.path.join(tmp, "root.tar")
        _rootfs_tar(busybox, tar)
        return _extract(tar, name)


def debian_root_name() -> str:
    tar = os.path.basename(debian_rootfs_path()).removesuffix(".tar")
    return f"{tar}-{ROOT_RECIPE_VERSION}"


def debian_root(build: bool = False, log: Log | None = None) -> str | None:
    """The Debian root (extracted from rootfs' cached tarball), None when the tarball is
    not built and `build` is off."""
    dest = os.path.join(_roots_dir(), debian_root_name())
    if os.path.isdir(dest):
        return dest
    tar = debian_rootfs_path()
    if not os.path.isfile(tar):
        if not build:
            return None
        tar = build_debian_rootfs(log=log)
    return _extract(tar, debian_root_name())


def build_roots(force: bool, log: Log | None) -> list[str]:
    """`rtax images build --driver gvisor`: both roots (the Debian one needs root)."""
    if force:
        for name in (debian_root_name(),):
            shutil.rmtree(os.path.join(_roots_dir(), name), ignore_errors=True)
    out = [busybox_root()]
    deb = debian_root(build=True, log=log)
    if deb is not None:
        out.append(deb)
    return out


# -- the environment -------------------------------------------------------------------


class GvisorEnvironment(Environment):
    driver: GvisorDriver

    def __init__(self, driver: GvisorDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.host = driver.host
        self.cid = names.sandbox(spec.label)
        self.dir = os.path.join(STATE_BASE, self.cid)  # bundle + runsc state (--root)
        self.workspace: str | None = None
        self.cg: str | None = None
        self.procs: list[str] = []
        self.proc: Any = None
        self.shell: FramedShell | None = None
        self._ws: asyncio.Future[str] | None = None
        self._spawn: asyncio.Future[Any] | None = None
        self._made_dir = False
        self.img = delivery.TrialImage()  # its root in a run with image modes
        self._started = False
        self.view: str | None = None  # the assets' view (drivers.toolkit.assetview)
        self.err = sinks.HeadTail()  # runsc's stderr, the sandbox init's with it
        self._drain: asyncio.Future[None] | None = None

    def runsc(self, *args: str) -> list[str]:
        return self.driver.runsc_argv(os.path.join(self.dir, "state"), *args)

    def _log(self) -> str:
        """What runsc (and the sandbox's init, through its stderr) said, both ends."""
        return self.err.text()[-600:]

    def _config(self, root: str) -> dict[str, Any]:
        lim = self.spec.limits
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["mode=1777"]},
            {
                "destination": WORKDIR,
                "type": "bind",
                "source": self.workspace,
                "options": ["rbind", "rw"],
            },
        ]
        if self.view is not None:  # only what the workload names (toolkit.assetview)
            mounts.append(
                {
                    "destination": view_mount(),
                    "type": "bind",
                    "source": self.view,
                    "options": ["rbind", "ro"],
                }
            )
        args = ["sh"] if self.channel == "shell" else SLEEPER
        # The pid limit is the sandbox's own (gVisor counts its processes against
        # RLIMIT_NPROC and refuses the fork past it): on the host, every process of the
        # sandbox is a stub the sentry traces, plus the sentry's and gofer's threads, so
        # the host cgroup's pid limit hit first would kill the sentry, not refuse a fork.
        rlimits = []
        if lim.pids:
            n = int(lim.pids)
            rlimits.append({"type": "RLIMIT_NPROC", "hard": n, "soft": n})
        return {
            "ociVersion": "1.0.0",
            "process": {
                "terminal": False,
                "user": {"uid": 0, "gid": 0},
                "args": args,
                "env": _sandbox_env(self.spec.env),
                "cwd": WORKDIR,
                "capabilities": {},
                "noNewPrivileges": True,
                "rlimits": rlimits,
            },
            "root": {"path": root, "readonly": not self.driver.overlay},
            "hostname": HOSTNAME,
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
            },
        }

    # -- create ------------------------------------------------------------

    async def deliver_image(self) -> None:
        """The root as `spec.image` says (drivers.toolkit.delivery): the Debian root as a
        cached, pulled or lazy squashfs, for every workload; read-only, as gVisor's
        roots are (the `overlay` option puts a writable layer in the sandbox's memory)."""
        await self.img.deliver_root(self.spec)

    def image_report(self) -> dict[str, Any] | None:
        return self.img.report()

    async def create(self) -> None:
        spec = self.spec
        async with self.sub("root"):
            root = self.img.root or await self.driver.root_for(spec.workload)
            platform = await self.driver.platform()
        async with self.sub("workspace"):
            self._ws = asyncio.ensure_future(
                self.host.make_workspace(
                    names.workspace(spec.label), spec.workspace_src, None, workspace_mib(spec)
                )
            )
            self.workspace = await asyncio.shield(self._ws)
        async with self.sub("cgroup"):
            await new_env_cgroup(self, host_pids(spec.limits.pids), self.cid[-8:])
        async with self.sub("bundle"):
            if spec.workload.needs_assets:
                try:
                    self.view = await asyncio.to_thread(workload_view, spec.workload, spec.env)
                except RtaxError as exc:
                    raise PhaseFailure(ErrorKind.SANDBOX_FAILED, str(exc)) from exc
            self.host.track("path", self.dir)
            self._made_dir = True
            os.makedirs(os.path.join(self.dir, "state"), mode=0o700)
            with open(os.path.join(self.dir, "config.json"), "w") as f:
                json.dump(self._config(root), f)
        async with self.sub("spawn"):
            shell = self.channel == "shell"
            # the sandbox init's stderr (which /proc/1/fd/2 reaches inside) is runsc's: a
            # pipe rtax drains keeping both ends, never a host file that grows
            try:
                argv = self.runsc("run", "--bundle", self.dir, self.cid)
                argv[1:1] = [f"--platform={platform}"]
                # shielded: a cancelled spawn half-way can hang asyncio (3.11); teardown
                # collects the process a cancelled create left
                self._spawn = asyncio.ensure_future(
                    self.host.spawn(
                        argv,
                        cwd="/",
                        env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                        stdin=subprocess.PIPE if shell else subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        cgroup_procs=self.procs,
                    )
                )
                self.proc = await asyncio.shield(self._spawn)
            except OSError as exc:
                raise PhaseFailure(ErrorKind.SANDBOX_FAILED, f"cannot start runsc: {exc}") from exc
            self._drain = asyncio.ensure_future(sinks.drain(self.proc.stderr, self.err))
        if shell:
            self.shell = FramedShell(self.proc.stdin, self.proc.stdout)

    # -- ready -------------------------------------------------------------

    async def ready(self) -> None:
        if self.proc is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "the sandbox was never started")
        if self.channel == "shell":
            async with self.sub("first_command"):
                try:
                    await super().ready()
                except PhaseFailure as exc:
                    if exc.kind != ErrorKind.SHELL_LOST:
                        raise
                    await self._reap_quietly()
                    raise PhaseFailure(
                        ErrorKind.SANDBOX_FAILED,
                        f"runsc sandbox did not start: {self._log() or exc.message}",
                    ) from exc
            self._started = True
            return
        async with self.sub("boot"):
            line = await self.proc.stdout.readline()
            if READY not in line:
                await self._reap_quietly()
                raise PhaseFailure(
                    ErrorKind.SANDBOX_FAILED,
                    f"runsc sandbox did not start: {self._log() or line[-300:]!r}",
                )
            self._started = True
        async with self.sub("first_command"):
            await super().ready()

    async def _reap_quietly(self) -> None:
        try:
            await asyncio.wait_for(self.proc.wait(), 2.0)
        except TimeoutError:
            pass

    # -- actions -----------------------------------------------------------

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await shell_action(self.shell, step.argv, timeout, "the sandbox's shell")
        if self.proc is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "the sandbox was never started")
        argv = [*APART_STDERR, *self.runsc("exec", "--cwd", WORKDIR, self.cid, *step.argv)]
        res = await run_exec(self.host, argv, cwd="/", env=None, timeout=timeout)
        if res.rc != 0 and self.proc.returncode is not None:
            raise PhaseFailure(
                ErrorKind.ENV_LOST,
                f"the sandbox is gone (runsc run exited {self.proc.returncode}): "
                f"{res.output[-300:]!r}",
            )
        return res

    # -- teardown ----------------------------------------------------------

    async def teardown(self) -> None:
        errors: list[str] = []
        self.proc = await settled(self.proc, self._spawn, 30)
        self._spawn = None
        if self.proc is not None:
            async with self.sub("kill"):
                await self._end()
            self.proc = None
        if self._drain is not None:
            try:
                await asyncio.wait_for(self._drain, 5)
            except (TimeoutError, OSError):
                self._drain.cancel()
            self._drain = None
        if self._made_dir:
            async with self.sub("delete"):
                left = await self._delete()
            if left:
                errors.append(left)
        if self.cg is not None:
            try:
                await self.host.remove_cgroup(self.cg)
                self.cg = None
            except PhaseFailure as exc:
                errors.append(exc.message)
        await drop_workspace(self.host, self.workspace, self._ws)
        self.workspace = self._ws = None
        await self.img.release()  # after the sandbox and its gofer: nothing reads it now
        if errors:
            raise PhaseFailure(ErrorKind.TEARDOWN_INCOMPLETE, "; ".join(errors))

    async def _end(self) -> None:
        """Kill every process of the container, then let `runsc run` (rtax's child) reap
        the sandbox and exit; kill its group (and the sandbox's) if it does not."""
        proc = self.proc
        if proc.stdin is not None and not proc.stdin.is_closing():
            try:
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass
        if proc.returncode is None:
            try:
                res = await self.host.run(self.runsc("kill", "--all", self.cid, "KILL"), timeout=10)
                killed = res.returncode == 0
            except (TimeoutError, OSError, PhaseFailure):
                killed = False
            # `runsc run` exits once the container it runs is killed; one that refused the
            # kill (a sandbox still starting: a create or ready cancelled) would not, and
            # waiting for it cost every such teardown KILL_WAIT_S: its group is killed below
            if killed:
                try:
                    await asyncio.wait_for(proc.wait(), KILL_WAIT_S)
                except TimeoutError:
                    pass
        if proc.returncode is None:
            await asyncio.to_thread(_kill_naming, self.dir)
        await self.host.kill(proc)
        await proc.wait()
        self.host.release(proc)

    async def _delete(self) -> str | None:
        """Remove the container's state (if `runsc run` left any), every process that
        still names this environment's directory, and the directory."""
        state = os.path.join(self.dir, "state")
        if os.path.isdir(state) and any(n != "runsc.log" for n in os.listdir(state)):
            try:
                await self.host.run(self.runsc("delete", "--force", self.cid), timeout=30)
            except (TimeoutError, OSError, PhaseFailure):
                pass
        left = await asyncio.to_thread(_kill_naming, self.dir)
        await asyncio.to_thread(shutil.rmtree, self.dir, True)
        if os.path.exists(self.dir):
            return f"cannot remove {self.dir}"
        self.host.untrack("path", self.dir)
        self._made_dir = False
        return f"processes of {self.cid} survived: {left}" if left else None


def _procs_naming(needle: str) -> list[int]:
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:  # read without the mm lock
                if f.read().rpartition(b") ")[2][:1] == b"D":
                    continue  # its cmdline's read could wait minutes (stage_site.CLEANUP_SH)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if needle.encode() in f.read():
                    out.append(int(name))
        except OSError:
            continue
    return out


def _kill_naming(needle: str, tries: int = 100) -> list[int]:
    """SIGKILL every process whose command line names `needle` (the sandbox and gofer
    name their `--root`) until none is left; returns those that survived."""
    import time

    left: list[int] = []
    for _ in range(tries):
        left = _procs_naming(needle)
        if not left:
            return []
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        # zombies of ours name it until reaped: count only the living
        left = [p for p in left if _alive(p)]
        if not left:
            return []
    return left


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _platform_key(exe: str) -> dict[str, Any]:
    """What `auto`'s choice depends on (toolkit/bootcache.py keeps it until reboot): the
    runsc binary and the kernel."""
    return {
        "runsc": file_key(exe if os.path.isabs(exe) else (which(exe) or exe)),
        "kernel": os.uname().release,
    }


def _read_platform_cache(exe: str) -> tuple[str, str] | None:
    got = bootcache.read("gvisor-platform", _platform_key(exe))
    if got is None or not isinstance(got.get("platform"), str):
        return None
    if got["platform"] not in PLATFORMS:
        return None
    return got["platform"], str(got.get("reason", "")) + bootcache.KEPT_NOTE


def _write_platform_cache(exe: str, platform: str, reason: str) -> None:
    bootcache.write("gvisor-platform", _platform_key(exe), {"platform": platform, "reason": reason})


# -- the driver ----------------------------------------------------------------------


@dataclass(frozen=True)
class GvisorOptions:
    """`[drivers_options.gvisor]`."""

    platform: str = option(
        Key(
            (str,),
            "auto",
            "runsc's platform; `auto` tries KVM under a "
            "timeout first and records which ran and why",
            choices=("auto", *PLATFORMS),
        )
    )
    network: str = option(
        Key((str,), "none", "`none`, or gVisor's own network stack", choices=NETWORKS)
    )
    overlay: bool = option(
        Key(
            (bool,),
            False,
            "the root writable, its writes kept in the sentry's memory (`runsc --overlay`)",
        )
    )
    runsc: str | None = option(Key((str,), None, "the runsc binary (none: the one on PATH)",
                                   check=lambda v: None if v else "expected a program's "
                                   "name or path"))  # fmt: skip


class GvisorDriver(Driver):
    name = "gvisor"
    channels = ("exec", "shell")
    runs_remote = False  # runsc, the bundle and the cached roots are the controller's
    image_recipe: ClassVar[ImageRecipe | None] = ImageRecipe("gvisor", build_roots)
    leaves: ClassVar[frozenset[str]] = frozenset({"monitors"})
    image_modes = ("cached", "pull", "lazy")  # drivers.toolkit.delivery
    # What `rtax probe --driver gvisor` found kept on both channels here (runsc
    # 2022-12-19, ptrace), pids_limit and default_limits included (the sandbox's
    # RLIMIT_NPROC refuses the fork past the limit; the probe's bomb keeps its processes
    # until counted, as forks under ptrace take ~20 ms), assets_view and host_sinks
    # (the named assets' view; the init's stderr a drained pipe). Not stated: sys_write (gVisor's
    # /sys has no setting the probe knows: n/a), and the pool's reuse checks (recreate
    # only).
    boundary = frozenset(
        {
            "host_paths",
            "vsock",
            "cgroup_escape",
            "loopback_tcp",
            "memory_limit",
            "pids_limit",
            "default_limits",
            "workspace_size",
            "init_kill",
            "result_integrity",
            "tmp_sentinel",
            "cache_sentinel",
            "assets_view",
            "host_sinks",
            "etc_shadow",
            "root_home",
            "usr_local",
            "docker_socket",
            "podman_socket",
            "libvirt_socket",
            "probe_socket",
            "remount_rw",
            "block_devices",
            "proc_sys",
            "module_load",
            "proc_cmdline",
            "host_processes",
            "host_signal",
            "process_vm",
            "other_env",
            "workspace_persists",
            "fresh_env",
            "deep_tree",
            "cleanup_spares_live",
        }
    )

    options_type = GvisorOptions
    opts: GvisorOptions

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.want_platform = self.opts.platform
        self.network = self.opts.network
        # `overlay`: the root writable, its writes kept in the sentry's memory (runsc
        # --overlay): a workload may change /usr or /etc, the cached root stays as built
        self.overlay = self.opts.overlay
        self._platform: str | None = None
        self._platform_reason = ""
        self._platform_lock = asyncio.Lock()

    def promised_checks(self) -> frozenset[str]:
        if self.network != "none":  # gVisor's own network stack: not measured
            return self.boundary - {"loopback_tcp"}
        return self.boundary

    @property
    def exe(self) -> str:
        return str(self.opts.runsc or which("runsc") or "runsc")

    def runsc_argv(self, state: str, *args: str) -> list[str]:
        return [
            self.exe,
            f"--root={state}",
            f"--network={self.network}",
            "--ignore-cgroups",
            *(["--overlay"] if self.overlay else []),
            *args,
        ]

    def integrity(self, channel: str) -> str | None:
        """exec: each status is the sentry's report of that process, through `runsc exec`,
        a host process no step reaches. shell: the sandbox's shell is a process of the
        sandbox's root, which a step can replace (exec) or rewrite, and its stdout pipe is
        open to every process inside: rtax cannot tell who wrote an answer."""
        if channel == "shell":
            return (
                "shell: the sandbox's shell is a process of the workload's own root, which a "
                "step can replace (exec) or rewrite; gVisor's processes are all one host "
                "process (the sentry), so rtax cannot tell which one wrote the answer"
            )
        return None

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """The Debian root as a squashfs, and its run-long mount for `cached`."""
        await delivery.current().prepare_squashfs(modes)

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        out["snapshot"] = (
            "runsc checkpoint/restore works here, but a restored sandbox is slower to its "
            "first exec than a fresh one (bench/gvisor_restore.py: P50 626 ms against 445 ms, "
            "n = 10 each, ptrace), and a pristine sandbox holds nothing a restore would "
            "keep warm: the pool uses recreate"
        )
        return out

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return GvisorEnvironment(self, spec, sub)

    async def root_for(self, workload: Workload) -> str:
        if needs_full_image(workload):
            root = await asyncio.to_thread(debian_root)
            if root is None:
                raise PhaseFailure(
                    ErrorKind.IMAGE_MISSING,
                    "gvisor: the Debian root is not built (rtax images build --driver gvisor)",
                )
            return root
        try:
            return await asyncio.to_thread(busybox_root)
        except RtaxError as exc:
            raise PhaseFailure(ErrorKind.IMAGE_MISSING, str(exc)) from exc

    # -- the platform ------------------------------------------------------

    def _known_platforms(self) -> list[str]:
        try:
            res = subprocess.run([self.exe, "flags"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ["ptrace"]
        text = (res.stdout + res.stderr).decode(errors="replace")
        line = next((ln for ln in text.splitlines() if "which platform to use" in ln), "")
        return [p for p in PLATFORMS if p in line] or ["ptrace"]

    async def platform(self) -> str:
        """The platform sandboxes run on: the option, or with `auto` the first of
        systrap, kvm (only where /dev/kvm is there) that runs a sandbox within
        PLATFORM_PROBE_S, else ptrace. Found once per driver."""
        if self._platform is not None:
            return self._platform
        async with self._platform_lock:
            if self._platform is not None:
                return self._platform
            if self.want_platform != "auto":
                self._platform, self._platform_reason = self.want_platform, "asked for"
                return self._platform
            cached = _read_platform_cache(self.exe)
            if cached is not None:
                self._platform, self._platform_reason = cached
                return cached[0]
            known = await asyncio.to_thread(self._known_platforms)
            why: list[str] = []
            for p in ("systrap", "kvm"):
                if p not in known:
                    why.append(f"{p}: not in this runsc")
                    continue
                if p == "kvm" and not os.path.exists("/dev/kvm"):
                    why.append("kvm: no /dev/kvm")
                    continue
                err = await self._try_platform(p)
                if err is None:
                    self._platform = p
                    self._platform_reason = "; ".join([*why, f"{p}: a sandbox ran"])
                    break
                why.append(f"{p}: {err}")
            else:
                self._platform = "ptrace"
                self._platform_reason = "; ".join([*why, "ptrace: the fallback"])
            _write_platform_cache(self.exe, self._platform, self._platform_reason)
            return self._platform

    async def _try_platform(self, platform: str) -> str | None:
        """Run `true` in a throw-away busybox sandbox on `platform`; None when it ran.

        runsc starts its sandbox in a session of its own, out of reach of a kill of
        runsc's process group: the probe runs in a cgroup of its own, registered with the
        host's reaper before it exists, so a sandbox that hangs (KVM here) is ended by
        the cgroup's removal, or by the reaper if rtax itself is killed meanwhile."""
        try:
            root = await asyncio.to_thread(busybox_root)
        except RtaxError as exc:
            return str(exc)
        me, tag = runlock.owner(), f"p{os.urandom(3).hex()}"
        d = os.path.join(STATE_BASE, names.sandbox(me, tag))
        cg = Cgroup.relpath_of(names.probe_cgroup(me, tag))
        self.host.track("path", d)
        try:
            procs = await self.host.make_cgroup(cg)
            os.makedirs(os.path.join(d, "state"), mode=0o700)
            cfg = {
                "ociVersion": "1.0.0",
                "process": {"user": {"uid": 0, "gid": 0}, "args": ["true"], "cwd": "/"},
                "root": {"path": root, "readonly": True},
                "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
                "linux": {"namespaces": [{"type": t} for t in ("pid", "mount", "network")]},
            }
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            argv = self.runsc_argv(os.path.join(d, "state"), "run", "--bundle", d, "probe")
            argv[1:1] = [f"--platform={platform}"]
            with open(os.path.join(d, "run.log"), "wb") as log:
                proc = await self.host.spawn(
                    argv,
                    cwd="/",
                    env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log.fileno(),
                    cgroup_procs=procs,
                )
            try:
                rc = await asyncio.wait_for(proc.wait(), PLATFORM_PROBE_S)
            except TimeoutError:
                return f"no sandbox ran within {PLATFORM_PROBE_S:.0f} s (hangs here)"
            finally:
                if proc.returncode is None:
                    await self.host.kill(proc)
                self.host.release(proc)
            if rc != 0:
                with open(os.path.join(d, "run.log"), "rb") as f:
                    return f"runsc exited {rc}: {f.read()[-200:].decode(errors='replace')}"
            return None
        except PhaseFailure as exc:  # the cgroup could not be made
            return exc.message
        finally:
            try:
                await self.host.remove_cgroup(cg)  # the sandbox and gofer with it
            except PhaseFailure:
                pass  # still tracked: the reaper removes it
            await asyncio.to_thread(_kill_naming, d)
            await asyncio.to_thread(shutil.rmtree, d, True)
            self.host.untrack("path", d)

    # -- checks ------------------------------------------------------------

    async def check(self) -> list[Problem]:
        if os.geteuid() != 0:
            return [
                Problem(
                    "gvisor needs root here: runsc makes the sandbox's namespaces and cgroup",
                    "run rtax as root (sudo rtax ...)",
                )
            ]
        if self.opts.runsc is None and which("runsc") is None:
            return [Problem("runsc (gVisor) is not installed", "apt-get install runsc")]
        if find_static_busybox() is None:
            return [
                Problem(
                    "no statically linked busybox: the sandboxes' small root is made from it",
                    "apt-get install busybox-static",
                )
            ]
        try:
            await asyncio.to_thread(busybox_root)
        except (RtaxError, OSError) as exc:
            return [Problem(f"gvisor cannot make its busybox root: {exc}", "check rtax's cache")]
        await self.platform()
        failed = await self.first_channel_failing(HOSTNAME)
        if failed:
            channel, err = failed
            return [
                Problem(
                    f"runsc could not run a sandbox ({channel}, platform {self._platform}): {err}",
                    'check `runsc --platform=ptrace do true` as root; option platform = "ptrace"',
                )
            ]
        return []

    async def check_workloads(self, workloads: list[Workload]) -> list[Problem]:
        if any(needs_full_image(w) for w in workloads):
            built = os.path.isdir(os.path.join(_roots_dir(), debian_root_name()))
            if not built and not os.path.isfile(debian_rootfs_path()):
                return [
                    Problem(
                        "gvisor: the Debian root (python3, git, pytest) is not built",
                        "rtax images build --driver gvisor",
                    )
                ]
        return []

    async def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "network": self.network,
            "overlay": self.overlay,
            "isolation": "gVisor sentry (a user-space kernel) per environment, "
            + (
                "root writable in the sentry's memory (--overlay)"
                if self.overlay
                else "read-only root"
            )
            + ", workspace bound at /workspace, root inside the sandbox only",
            "limits": "cpus, memory_mib: the environment's cgroup (the sentry, the gofer and "
            f"runsc inside it); {limits_note('the cgroup')}; "
            "workspace_mib: the workspace's own tmpfs",
        }
        try:
            res = await self.host.run([self.exe, "--version"], timeout=10)
            lines = res.stdout.decode(errors="replace").strip().splitlines()
            if lines:
                facts["runsc"] = lines[0]
        except (OSError, TimeoutError, PhaseFailure):
            pass
        facts["platform"] = await self.platform()
        facts["platform_reason"] = self._platform_reason
        return facts

    # -- cleanup -----------------------------------------------------------

    async def cleanup(self, label: str | None = None) -> int:
        """Sandboxes and runsc state, env cgroups and workspaces of one run (or every run),
        sparing a live run's."""
        want = names.sandbox_prefix(label)
        n = 0
        try:
            found = sorted(os.listdir(STATE_BASE))
        except OSError:
            found = []
        live = runlock.live_labels()  # after the listing: see runlock
        for name in found:
            if not name.startswith(want):
                continue
            if names.belongs(name, live, names.sandbox_prefix):
                runlock.note_spared(1)
                continue
            d = os.path.join(STATE_BASE, name)
            await asyncio.to_thread(_kill_naming, d)
            await asyncio.to_thread(shutil.rmtree, d, True)
            n += 1
        return n + await sandbox_cleanup(self.host, label, "gvisor")
