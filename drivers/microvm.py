"""`microvm`: QEMU's `microvm` machine launched directly (no libvirt), driven over QMP.

- create: `create.disks` (a qcow2 overlay on the read-only root disk and an ext4
  image of the workload's files, when the workload needs them), `create.launch`
  (QEMU started paused with `-S`, its QMP, serial and agent sockets connected), and
  with `start = "restore"` `create.load` (the saved VM streamed in with
  `migrate-incoming`).
- ready: QMP `cont`, then `ready.firmware_kernel` (until `/init` prints its mark on
  the serial console) and `ready.agent` (until the agent's hello); after a restore,
  only `ready.agent` (a ping round trip: the agent was already serving).
- action: through the agent over virtio-serial: channel `shell` runs the command in
  the agent's own shell (the guest's root), `exec` in a fresh `sh -c` process of uid
  1000 that the root agent waits for (`Driver.integrity`: vmguest.VM_INTEGRITY).
- teardown: SIGKILL to QEMU's process group, the trial's directory removed.

QEMU is spawned through the host, so it is in the reaper's process groups; the
trial directory is registered as a path. The unix sockets make this driver
local-only.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import time
from typing import Any

from rtax_tui.drivers.base import Environment, Problem, SubTimer
from rtax_tui.drivers.toolkit import delivery
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.vmdriver import SETUP_TIMEOUT_S, VmDriver, VmEnvironment
from rtax_tui.drivers.toolkit.vmguest import (
    CMDLINE,
    TCG_MICROVM_ARGS,
    AgentChannel,
    Qmp,
    SerialWatch,
    TrialDir,
    budget_procs,
    connect_unix,
    microvm_argv,
    trial_dirs,
)
from rtax_tui.drivers.toolkit.vmimage import guest_files

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, Step, Workload


class MicrovmEnvironment(VmEnvironment):
    def __init__(self, driver: MicrovmDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.d = driver
        self.proc: asyncio.subprocess.Process | None = None
        self.qmp: Qmp | None = None
        # image modes (drivers.toolkit.delivery): what the root disk's overlay is made on
        # (the host's disk, a pulled copy, or QEMU's http driver on the content server)
        self.base: str | None = None
        self.img = delivery.TrialImage()

    async def deliver_image(self) -> None:
        """The root disk by `spec.image`: the guest's own (cached), a whole copy pulled from
        the content server (pull, holes kept), or read from it by QEMU as the guest reads
        (lazy: its http block driver under the trial's qcow2 overlay). A workload that
        boots from the initramfs alone (T0) has no root disk: nothing is delivered."""
        if not needs_full_image(self.spec.workload):
            self.img.got(delivery.Delivered(str(self.spec.image), "", 0))
            return
        local = self.d.guest_for(self.spec.workload).rootdisk
        served = self.d.served.get(str(local))
        if local is None or served is None:
            raise PhaseFailure(ErrorKind.IMAGE_MISSING, "the VM root disk was not prepared")
        self.base = await self.img.deliver_file(self.spec, local, served)

    def image_report(self) -> dict[str, Any] | None:
        return self.img.report()

    def _alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def _why_dead(self) -> str:
        log = ""
        if self.dir is not None:
            try:
                with open(self.dir("qemu.log"), errors="replace") as f:
                    log = f.read()[-300:].strip()
            except OSError:
                pass
        serial = self.serial.tail(300) if self.serial else ""
        return f"QEMU exited (rc {self.proc.returncode if self.proc else None}): {log} {serial}"

    async def _guard(self, coro: Any) -> Any:
        """`coro`, unless QEMU dies first."""
        assert self.proc is not None
        work = asyncio.ensure_future(coro)
        died = asyncio.ensure_future(self.proc.wait())
        try:
            done, _ = await asyncio.wait({work, died}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            died.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work in done:
            return work.result()
        raise PhaseFailure(ErrorKind.VM_DIED, self._why_dead())

    async def create(self) -> None:
        guest = self.d.guest_for(self.spec.workload)
        self.dir = TrialDir(self.d.host, self.name)
        rootdisk = self.base or guest.rootdisk
        disks = await self.d.disks(self.spec, self.dir, self.sub, rootdisk)
        argv = microvm_argv(
            self.d.opts.qemu,
            self.dir,
            guest.kernel,
            guest.initramfs,
            self.d.accel,
            self.d.vcpus_for(self.spec),
            self.d.memory_for(self.spec),
            disks,
            incoming=self.restore,
            name=self.name,
            cmdline=self.d.cmdline(),
        )
        async with self.sub("launch"):
            with open(self.dir("qemu.log"), "wb") as log:
                self.proc = await self.d.host.spawn(
                    argv,
                    stdout=log.fileno(),
                    stderr=log.fileno(),
                    cgroup_procs=budget_procs(self.d.host, self.spec),  # joined before exec
                )
            self.qmp = await Qmp.connect(self.dir("qmp.sock"), self._alive)
            r, w = await connect_unix(self.dir("serial.sock"), 10, self._alive)
            self.serial = SerialWatch(r, w)
            r, w = await connect_unix(self.dir("agent.sock"), 10, self._alive)
            self.agent = AgentChannel(r, w)
        if self.restore:
            self.d.register_snapshot()
            async with self.sub("load"):
                await self._guard(self._load(self.d.snapshot))

    async def _load(self, path: str | None) -> None:
        assert self.qmp is not None
        if path is None:
            raise PhaseFailure(ErrorKind.NO_SNAPSHOT, "start = restore, and no snapshot was made")
        await self.qmp.cmd("migrate-incoming", uri=f"exec:cat {shlex.quote(path)}")
        while True:
            st = await self.qmp.cmd("query-status")
            if st.get("status") != "inmigrate":
                break
            await asyncio.sleep(0.002)
        mig = await self.qmp.cmd("query-migrate")
        if mig.get("status") not in (None, "completed"):
            raise PhaseFailure(ErrorKind.RESTORE_FAILED, f"migration {mig.get('status')}: {mig}")

    async def ready(self) -> None:
        assert self.qmp is not None
        await self._guard(self.qmp.cmd("cont"))
        await self.wait_guest(self._guard)

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        return await self.agent_step(step, self._guard)

    async def reset_snapshot(self) -> None:
        """A pooled guest back to the saved snapshot (start = restore): this QEMU ends,
        a new one loads the snapshot over fresh overlays; the guest's memory, disks and
        processes are the snapshot's, nothing of the last trial's."""
        if not self.restore:
            raise PhaseFailure(
                ErrorKind.RESET_UNSUPPORTED, "microvm: snapshot reset needs start = restore"
            )
        await self.teardown()
        await self.create()
        await self.ready()

    async def teardown(self) -> None:
        for part in (self.agent, self.serial, self.qmp):
            if part is not None:
                part.close()
        self.agent = self.serial = self.qmp = None
        if self.proc is not None:
            await self.d.host.kill(self.proc)
            await self.proc.wait()
            self.d.host.release(self.proc)
            self.proc = None
        if self.dir is not None:
            await asyncio.to_thread(self.dir.remove)
            self.dir = None
        await self.img.release()  # after QEMU: nothing reads the disk now


class MicrovmDriver(VmDriver):
    name = "microvm"
    leaves = frozenset({"monitors"})
    image_modes = ("cached", "pull", "lazy")  # the root disk (drivers.toolkit.delivery)
    snapshot_log = "qemu.log"

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.served: dict[str, str] = {}  # a root disk -> its served copy (image modes)

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        out["snapshot"] = (
            None if self.opts.start == "restore" else "needs start = restore (a saved guest)"
        )
        return out

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return MicrovmEnvironment(self, spec, sub)

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """Each root disk the workloads boot on, served by the run's content server."""
        for w in workloads:
            disk = self.guest_for(w).rootdisk if needs_full_image(w) else None
            if disk is not None and str(disk) not in self.served:
                self.served[str(disk)] = await delivery.current().serve_file(str(disk))

    def cmdline(self) -> str:
        """The guest kernel's command line; option `append` adds to it."""
        tcg = TCG_MICROVM_ARGS if self.accel == "tcg" else ""
        return " ".join(x for x in (CMDLINE, tcg, self.append) if x)

    async def check(self) -> list[Problem]:
        if getattr(self.host, "name", "local") != "local":
            return [Problem("microvm talks to QEMU over local unix sockets", "use host local")]
        if shutil.which(self.opts.qemu) is None and not os.path.isfile(self.opts.qemu):
            return [Problem(f"{self.opts.qemu} not found", "apt-get install qemu-system-x86")]
        if shutil.which("qemu-img") is None:
            return [Problem("qemu-img not found", "apt-get install qemu-utils")]
        if guest_files() is None:
            return [Problem("the VM guest is not built", "rtax images build --driver vm")]
        if self.opts.accel == "kvm" and not os.path.exists("/dev/kvm"):
            return [Problem("accel = kvm, and there is no /dev/kvm", 'set accel = "tcg"')]
        await self.resolve_accel()
        return []

    async def save_snapshot(self, env: Environment, path: str) -> str | None:
        """Stop the guest and migrate it to a file (QMP `migrate` to `exec:cat`)."""
        assert isinstance(env, MicrovmEnvironment) and env.qmp is not None
        await env.qmp.cmd("stop")
        await env.qmp.cmd("migrate", uri=f"exec:cat > {shlex.quote(path)}")
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            st = (await env.qmp.cmd("query-migrate")).get("status")
            if st == "completed":
                return None
            if st in ("failed", "cancelled") or time.monotonic() > deadline:
                return f"migration to a file ended {st}"
            await asyncio.sleep(0.01)

    async def facts(self) -> dict[str, Any]:
        await self.resolve_accel()
        g = guest_files()
        res = await self.host.run([self.opts.qemu, "--version"], timeout=10)
        return {
            "qemu": res.stdout.decode(errors="replace").splitlines()[0] if res.stdout else None,
            "machine": "microvm",
            **self.size_facts(),
            "guest_kernel": g.kver if g else None,
            "channel": "virtio-serial",
            "limits": self.limits_fact(),
        }

    async def cleanup(self, label: str | None = None) -> int:
        """Kill QEMU processes named `rtax-<label>-*` (or any `rtax-*`), remove their dirs;
        a live run's (model/runlock.py) are spared."""
        prefix = names.vm_prefix(label)
        dirs = trial_dirs(label)
        procs = []
        for pid, argv in _qemu_processes():
            try:
                name = argv[argv.index("-name") + 1]
            except (ValueError, IndexError):
                continue
            if name.startswith(prefix):  # libvirt's QEMUs are `guest=NAME,...`: not ours
                procs.append((pid, name))
        live = await runlock.live_labels_on(self.host)  # after the listing: see runlock
        n = spared = 0
        for pid, name in procs:
            if names.belongs(name, live, names.vm_prefix):
                spared += 1
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        self.end_cleanup(dirs, live, spared)
        return n


def _qemu_processes() -> list[tuple[int, list[str]]]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith("qemu-system"):
            out.append((int(entry), argv))
    return out
