"""What the two VM drivers (libvirt, microvm) share as drivers: the boundary they state,
their options, the accelerator they resolve, the snapshot a `start = "restore"` run
boots once and saves before its first trial, and the facts' words on limits.

The guest, its agent and its trial directories are `vmguest`'s; how a booted guest is
saved differs (libvirt's `save`, QEMU's migration to a file), so each driver gives only
that step (`save_snapshot`), and what its log is called when saving fails.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, ImageRecipe, Problem
from rtax_tui.drivers.toolkit.images import vm_guest_images
from rtax_tui.drivers.toolkit.vmguest import (
    TrialDir,
    parse_options,
    resolve_accel,
    vm_integrity,
    workload_problems,
)

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.spec import Cell, EnvSpec, Limits, PhaseFailure, Workload

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
    # the driver's options beyond VmOptions' (`parse_options`)
    extra_options: tuple[str, ...] = ("append",)
    # where to look when saving the booted guest failed (a Problem's hint)
    snapshot_log = "the driver's log"

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        parse_options(cls.name, options, cls.extra_options)

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.opts = parse_options(self.name, options, self.extra_options)
        self.append = str(options.get("append", ""))  # a string: parse_options
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
        env.restore = False  # type: ignore[attr-defined]  # both VM environments have it
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
