"""What the two VM drivers (libvirt, microvm) share as drivers: the boundary they state,
their options, the accelerator they resolve, the snapshot a `start = "restore"` run
boots once and saves before its first trial, and the facts' words on limits.

The guest, its agent and its trial directories are `vmguest`'s; how a booted guest is
saved differs (libvirt's `save`, QEMU's migration to a file), so each driver gives only
that step (`save_snapshot`), and what its log is called when saving fails. What a trial's
guest is made of is the same for both (its guest files, its size, its disks), and so is
how a cleanup ends (the dead runs' trial directories, the snapshot): one method each here.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, ImageRecipe, Problem, SubTimer
from rtax_tui.drivers.toolkit.images import vm_guest_images
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.vmguest import (
    AgentChannel,
    SerialWatch,
    TrialDir,
    VmOptions,
    overlay,
    remove_dead_dirs,
    resolve_accel,
    vm_integrity,
    workload_problems,
    workspace_disk_mib,
)
from rtax_tui.drivers.toolkit.vmimage import (
    ROOT_SERIAL,
    WS_SERIAL,
    GuestFiles,
    guest_files,
    make_workspace_disk,
)

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY_MIB,
    ActionResult,
    Cell,
    EnvSpec,
    Limits,
    PhaseFailure,
    Step,
    Workload,
    vm_size,
)

# A guest's disk: (its file, its format for QEMU, the serial /init finds it by)
Disk = tuple[str, str, str]
# How an environment awaits a call to its guest (microvm's `_guard`: unless QEMU dies)
Guard = Callable[[Coroutine[Any, Any, Any]], Awaitable[Any]]


async def _unguarded(coro: Coroutine[Any, Any, Any]) -> Any:
    return await coro


class VmEnvironment(Environment):
    """A trial's guest (drivers/libvirt.py, drivers/microvm.py): its name and trial
    directory, its serial console and agent channel, whether it is restored from the
    driver's snapshot; and what both drivers do with them once the guest runs (wait
    until it serves, run a step through its agent)."""

    def __init__(self, driver: VmDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.name = names.vm(spec.label)
        self.dir: TrialDir | None = None
        self.serial: SerialWatch | None = None
        self.agent: AgentChannel | None = None
        self.restore = driver.opts.start == "restore"

    async def wait_guest(self, guard: Guard = _unguarded) -> None:
        """The resumed guest until its agent serves, in the sub-phases the recordings
        name: a booted guest `firmware_kernel` (until /init's mark on the serial console),
        then `agent` (the agent's hello); a restored one only `agent` (a ping: the agent
        was serving when it was saved). Each wait goes through `guard`."""
        assert self.agent is not None and self.serial is not None  # create made them
        if self.restore:
            async with self.sub("agent"):
                await guard(self.agent.ping())
            return
        async with self.sub("firmware_kernel"):
            await guard(self.serial.wait_init())
        async with self.sub("agent"):
            await guard(self.agent.hello())

    async def agent_step(self, step: Step, guard: Guard = _unguarded) -> ActionResult:
        """A step through the guest's agent: channel `exec` in a fresh process (uid
        1000), `shell` in the agent's own shell (vmguest.VM_INTEGRITY)."""
        if self.agent is None:
            raise PhaseFailure(ErrorKind.AGENT_LOST, "no agent channel")
        res: ActionResult = await guard(self.agent.run(step, fresh_process=self.channel == "exec"))
        return res


SETUP_TIMEOUT_S = 60.0  # a guest's create, and saving it to a file
SNAPSHOT_READY_S = 120.0  # the guest booted for the snapshot becomes ready


class VmDriver(Driver):
    """A driver whose environment is a guest with its own kernel (drivers/libvirt.py,
    drivers/microvm.py)."""

    channels = ("exec", "shell")
    image_recipe = ImageRecipe("vm", vm_guest_images)
    exec_reusable_after_timeout = False  # exec goes through the agent's one stream
    boots_a_kernel = True
    # Every check but `process_vm`: its own kernel, no network, no shared file system, the
    # VM's memory. A shell-channel step is the guest's root, which reads the guest's other
    # processes (nothing of the host); an exec step is uid 1000.
    # `workspace_size` only with start = "boot" (a disk image of workspace_mib; a restored
    # guest has no disk: `promised_checks`). Not `default_limits` (nor pids: a fork bomb
    # of 2 x 1024 fills the guest's RAM first; not measured under TCG) nor `deep_tree`
    # (the workspace is in the VM's disk image: no host path to look at).
    # assets_view: an asset workload does not run in a guest (no cache is shared with it)
    boundary = ALL_CHECKS - {"process_vm", "deep_tree", "default_limits", "assets_view"}
    options_type = VmOptions
    opts: VmOptions
    # where to look when saving the booted guest failed (a Problem's hint)
    snapshot_log = "the driver's log"

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.append = self.opts.append
        self.accel = self.opts.accel if self.opts.accel != "auto" else "tcg"
        self.accel_reason = "not resolved yet"
        self._accel_done = False
        self.snapshot: str | None = None
        self._snap_dir: TrialDir | None = None
        self._snap_registered = False

    def promised_checks(self) -> frozenset[str]:
        if self.opts.start != "boot":
            return self.boundary - {"workspace_size"}
        return self.boundary

    def integrity(self, channel: str) -> str | None:
        return vm_integrity(channel)

    async def resolve_accel(self) -> None:
        """`accel = "auto"` made `kvm` or `tcg` once, by trying KVM (vmguest)."""
        if not self._accel_done:
            self.accel, self.accel_reason = await resolve_accel(self.host, self.opts)
            self._accel_done = True

    def guest_for(self, workload: Workload) -> GuestFiles:
        """The guest files a workload boots (its root disk too when it needs the full
        image); IMAGE_MISSING when `rtax images build --driver vm` has not made them."""
        g = guest_files(need_root=needs_full_image(workload))
        if g is None:
            raise PhaseFailure(ErrorKind.IMAGE_MISSING, "the VM guest is not built")
        return g

    # A VM's limits are its size (model.spec.vm_size); pids inside the guest are the
    # guest kernel's business (its own pid table, not the host's); the workspace is a
    # disk image of workspace_mib (vmguest.workspace_disk_mib).
    def vcpus_for(self, spec: EnvSpec) -> int:
        return vm_size(spec.limits.cpus, DEFAULT_CPUS, self.opts.vcpus)

    def memory_for(self, spec: EnvSpec) -> int:
        return vm_size(spec.limits.memory_mib, DEFAULT_MEMORY_MIB, self.opts.memory_mib)

    async def disks(
        self, spec: EnvSpec, d: TrialDir, sub: SubTimer, rootdisk: str | None
    ) -> list[Disk]:
        """A trial's disks, in `d`, under `create.disks` (none, and no sub-phase, for a
        workload that boots from the initramfs alone): a qcow2 overlay on `rootdisk`
        (read-only, shared by every trial) when the workload needs the full image, and an
        ext4 image of its `workspace_src` (of `workspace_disk_mib`) when it has one or a
        size. Both VM drivers give the guest the same disks, found by their serials."""
        out: list[Disk] = []
        size = workspace_disk_mib(spec, self.opts.start)
        if not needs_full_image(spec.workload) and not spec.workspace_src and size is None:
            return out
        async with sub("disks"):
            if needs_full_image(spec.workload):
                assert rootdisk is not None  # guest_for asked for it
                ov = d("root.qcow2")
                await overlay(shutil.which("qemu-img") or "qemu-img", rootdisk, ov, self.host)
                out.append((ov, "qcow2", ROOT_SERIAL))
            if spec.workspace_src or size is not None:
                ws = d("ws.ext4")
                await asyncio.to_thread(make_workspace_disk, spec.workspace_src, ws, size)
                out.append((ws, "raw", WS_SERIAL))
        return out

    def size_facts(self) -> dict[str, Any]:
        """The facts both VM drivers state alike: the accelerator, the start, the size."""
        return {
            "accel": self.accel,
            "accel_reason": self.accel_reason,
            "start": self.opts.start,
            "vcpus": self.opts.vcpus,
            "memory_mib": self.opts.memory_mib,
        }

    async def check_workloads(self, workloads: list[Workload]) -> list[Problem]:
        problems = workload_problems(workloads, self.opts.start)
        if problems or self.opts.start != "restore" or self.snapshot is not None:
            return problems
        err = await self.make_snapshot()
        if err:
            problems.append(
                Problem(f"could not save a booted guest: {err}", f"see {self.snapshot_log}")
            )
        return problems

    async def make_snapshot(self) -> str | None:
        """Boot one guest, save it to a file (`save_snapshot`); None when done, else why."""
        spec = EnvSpec(
            Cell("local", self.name, "t0", "shell"), Workload("t0", ()), Limits(), label="snap"
        )
        self._snap_dir = TrialDir(self.host, names.vm(runlock.owner(), "snapshot"))
        path = self._snap_dir("guest.state")
        env = self.environment(spec)
        assert isinstance(env, VmEnvironment)
        env.restore = False
        try:
            await asyncio.wait_for(env.create(), SETUP_TIMEOUT_S)
            await asyncio.wait_for(env.ready(), SNAPSHOT_READY_S)
            why = await self.save_snapshot(env, path)
            if why is None:
                self.snapshot = path
            return why
        except (PhaseFailure, TimeoutError, OSError) as exc:
            return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        finally:
            await env.teardown()

    def register_snapshot(self) -> None:
        """The snapshot was made before the run's reaper started (`check_workloads`):
        register its directory with the reaper at the first restore, once."""
        if not self._snap_registered and self._snap_dir is not None:
            self.host.track("path", self._snap_dir.path)
            self._snap_registered = True

    def forget_snapshot(self) -> None:
        if self._snap_dir is not None:
            self._snap_dir.remove()
            self._snap_dir = None
            self.snapshot = None

    def end_cleanup(self, dirs: list[str], live: Any, spared: int) -> None:
        """A cleanup's last steps, after its driver ended the guests: the listed trial
        directories (`dirs`) of runs not `live` removed, the spared counted with
        `spared` guests (model/runlock.py), and this driver's snapshot removed."""
        spared += remove_dead_dirs(dirs, live)
        runlock.note_spared(spared)
        self.forget_snapshot()

    async def save_snapshot(self, env: Environment, path: str) -> str | None:
        """Save the booted guest `env` to `path`; None when done, else why not. Raises
        PhaseFailure, TimeoutError or OSError as its calls do."""
        raise NotImplementedError

    def limits_fact(self) -> str:
        """The facts' `limits`: what each of rtax's limits is in a guest."""
        return (
            "cpus, memory_mib: the vCPUs and RAM (at the defaults: the options, up to "
            "them); pids: the guest kernel's own; "
            "workspace_mib: "
            + (
                "the workspace's disk image, of that size"
                if self.opts.start == "boot"
                else "not applied (a restored guest has no disk: its workspace is in its RAM)"
            )
        )
