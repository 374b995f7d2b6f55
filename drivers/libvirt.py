"""`libvirt`: a transient q35 domain per trial through libvirt-python (`qemu:///system`).

- create: `create.disks` (as microvm: qcow2 overlay on the root disk, workspace
  image), `create.define` (`createXML` with START_PAUSED: a transient domain, so a
  destroy also undefines it), `create.connect` (the serial console's and the agent's
  unix sockets, which libvirt binds); with `start = "restore"`, `create.restore`
  (`restoreFlags` of a guest saved once by `check_workloads`, paused) replaces define.
- ready: `resume`, then `ready.firmware_kernel` (SeaBIOS + kernel, until `/init`
  prints its mark on the serial console) and `ready.agent` (the hello); after a
  restore only `ready.agent` (a ping).
- action: the guest agent over virtio-serial, as microvm.
- teardown: `destroy` (the domain disappears with it), the trial directory removed.

libvirt-python blocks, so every call runs in a worker thread. A lost connection to
libvirtd is `SubstrateLost`; then teardown kills the domain's QEMU itself (pid from
libvirt's pid file) so nothing is left running. QEMU runs as root without
relabelling (`seclabel` static `+0:+0`), so the guest files can stay in rtax's cache
and concurrent domains never chown a shared backing file. The domain's QEMU is
registered with the reaper by its process group, and the metadata element
`<rtax:run>` carries the run id for `cleanup`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from xml.sax.saxutils import escape

from rtax_tui.drivers.base import DaemonNeed, Environment, Problem, SubTimer
from rtax_tui.drivers.toolkit.vmdriver import SETUP_TIMEOUT_S, Disk, VmDriver, VmEnvironment
from rtax_tui.drivers.toolkit.vmguest import (
    CMDLINE,
    AgentChannel,
    SerialWatch,
    TrialDir,
    VmOptions,
    connect_unix,
    join_budget,
    trial_dirs,
)
from rtax_tui.drivers.toolkit.vmimage import GuestFiles, guest_files

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, Step, SubstrateLost
from rtax_tui.model.waits import waiting_on

DEFAULT_URI = "qemu:///system"
NS = "https://rtax.dev/libvirt/1"
PID_DIR = "/run/libvirt/qemu"
SNAP_LABEL = "snap"
T = TypeVar("T")


def _libvirt() -> Any:
    import libvirt

    return libvirt


def _lost(exc: BaseException, conn: Any) -> bool:
    lv = _libvirt()
    if not isinstance(exc, lv.libvirtError):
        return isinstance(exc, (ConnectionError, OSError))
    code = exc.get_error_code()
    if code in (lv.VIR_ERR_NO_CONNECT, lv.VIR_ERR_SYSTEM_ERROR, lv.VIR_ERR_RPC):
        return True
    try:
        return conn is None or conn.isAlive() != 1
    except Exception:
        return True


def domain_xml(
    name: str,
    label: str,
    accel: str,
    vcpus: int,
    memory_mib: int,
    guest: GuestFiles,
    d: TrialDir,
    disks: list[Disk],
    cmdline: str,
    emulator: str,
) -> str:
    disk_xml = "".join(
        f"<disk type='file' device='disk'><driver name='qemu' type='{fmt}' cache='unsafe'/>"
        f"<source file='{escape(path)}'/><target dev='vd{chr(ord('a') + i)}' bus='virtio'/>"
        f"<serial>{serial}</serial></disk>"
        for i, (path, fmt, serial) in enumerate(disks)
    )
    return f"""<domain type='{"kvm" if accel == "kvm" else "qemu"}'>
  <name>{escape(name)}</name>
  <metadata><rtax:run xmlns:rtax='{NS}'>{escape(label)}</rtax:run></metadata>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{escape(guest.kernel)}</kernel>
    <initrd>{escape(guest.initramfs)}</initrd>
    <cmdline>{escape(cmdline)}</cmdline>
  </os>
  <features><acpi/></features>
  {"<cpu mode='host-passthrough'/>" if accel == "kvm" else ""}
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>{escape(emulator)}</emulator>
    {disk_xml}
    <serial type='unix'><source mode='bind' path='{escape(d("serial.sock"))}'/>
      <target port='0'/></serial>
    <channel type='unix'><source mode='bind' path='{escape(d("agent.sock"))}'/>
      <target type='virtio' name='rtax.agent'/></channel>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>
</domain>"""


def qemu_pid(name: str) -> int | None:
    try:
        with open(os.path.join(PID_DIR, f"{name}.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class LibvirtEnvironment(VmEnvironment):
    def __init__(self, driver: LibvirtDriver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.d = driver
        self.dom: Any = None
        self.pid: int | None = None
        self.pgid: int | None = None
        self._create: asyncio.Future[Any] | None = None

    def xml(self, guest: GuestFiles, disks: list[Disk]) -> str:
        assert self.dir is not None
        return domain_xml(
            self.name,
            self.spec.label,
            self.d.accel,
            self.d.vcpus_for(self.spec),
            self.d.memory_for(self.spec),
            guest,
            self.dir,
            disks,
            self.d.cmdline(),
            self.d.emulator(),
        )

    async def create(self) -> None:
        guest = self.d.guest_for(self.spec.workload)
        if self.restore and self.d.snap_name is not None:
            # libvirt restores a saved domain under its own name only: one at a time
            self.name = self.d.snap_name
        self.dir = TrialDir(self.d.host, self.name)
        disks = await self.d.disks(self.spec, self.dir, self.sub, guest.rootdisk)
        if self.restore:
            async with self.sub("restore"):
                await self._start(self.d.restore_domain, self.spec.label, self.dir)
        else:
            async with self.sub("define"):
                xml = self.xml(guest, disks)
                await self._start(self.d.create_paused, xml)
        async with self.sub("connect"):
            r, w = await connect_unix(self.dir("serial.sock"), 10)
            self.serial = SerialWatch(r, w)
            r, w = await connect_unix(self.dir("agent.sock"), 10)
            self.agent = AgentChannel(r, w)

    async def _start(self, fn: Callable[..., Any], *args: Any) -> None:
        # shielded: a create cancelled mid-call still yields its domain, which teardown destroys
        self._create = asyncio.ensure_future(self.d.call("starting the domain", fn, *args))
        self.dom = await asyncio.shield(self._create)
        self.pid = qemu_pid(self.name)
        self.pgid = _own_group(self.pid) if self.pid is not None else None
        if self.pgid is not None:
            self.d.host.track("pgid", str(self.pgid))
        # libvirtd starts QEMU in its own cgroups; a capacity batch's budget takes it
        # while the guest is still paused, before the guest touches its memory
        join_budget(self.d.host, self.spec, self.pid)

    async def ready(self) -> None:
        assert self.agent is not None and self.serial is not None
        await self.d.call("resume", self.dom.resume)
        await self.wait_guest()

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        return await self.agent_step(step)

    async def teardown(self) -> None:
        for part in (self.agent, self.serial):
            if part is not None:
                part.close()
        self.agent = self.serial = None
        if self._create is not None and not self._create.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._create), SETUP_TIMEOUT_S)
            except BaseException:
                pass
        if self._create is not None and self.dom is None and self._create.done():
            if not self._create.cancelled() and self._create.exception() is None:
                self.dom = self._create.result()
                self.pid = qemu_pid(self.name)
                self.pgid = None
        err: PhaseFailure | None = None
        if self.dom is not None:
            try:
                await self.d.call("destroy", self.dom.destroy, lookup_gone_ok=True)
            except PhaseFailure as exc:
                err = exc
            self.dom = None
        if self.pid is not None:
            if err is not None:  # libvirtd is gone, its QEMU is not: end it ourselves
                _kill(self.pid)
            if self.pgid is not None:
                self.d.host.untrack("pgid", str(self.pgid))
            self.pid = self.pgid = None
        if self.dir is not None:
            await asyncio.to_thread(self.dir.remove)
            self.dir = None
        if err is not None:
            raise err


def _own_group(pid: int) -> int | None:
    """QEMU's process group when it leads its own session (libvirt forks it with setsid,
    then the intermediate process exits): killing that group ends QEMU and nothing else."""
    try:
        pgid = os.getpgid(pid)
        return pgid if os.getsid(pid) == pgid and pgid != os.getpgid(0) else None
    except ProcessLookupError:
        return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.01)


@dataclass(frozen=True)
class LibvirtOptions(VmOptions):
    """`[drivers_options.libvirt]`: a VM's options (`vmguest.VmOptions`), and libvirt's URI."""

    uri: str = option(Key((str,), DEFAULT_URI, "the libvirt connection's URI"))


class LibvirtDriver(VmDriver):
    name = "libvirt"
    daemon: ClassVar[DaemonNeed] = DaemonNeed("libvirtd", "bash scripts/start-libvirtd")
    leaves = frozenset({"domains", "monitors"})
    options_type = LibvirtOptions
    opts: LibvirtOptions
    snapshot_log = "libvirtd's log"

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        out = super().pool_resets(channel)
        out["snapshot"] = (
            "libvirt restores a saved domain under its own name, one at a time: a pool "
            "holds several (use microvm with start = restore)"
        )
        return out

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.uri = self.opts.uri
        self.conn: Any = None
        self._snap_xml: str | None = None
        self.snap_name: str | None = None
        self._snap_path = ""

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return LibvirtEnvironment(self, spec, sub)

    def cmdline(self) -> str:
        return f"{CMDLINE} {self.append}".strip()

    def emulator(self) -> str:
        return shutil.which(self.opts.qemu) or self.opts.qemu

    # -- libvirt calls -----------------------------------------------------------

    def _connect(self) -> Any:
        lv = _libvirt()
        lv.registerErrorHandler(lambda _ctx, _err: None, None)  # errors are raised, not printed
        return lv.open(self.uri)

    async def connection(self) -> Any:
        if self.conn is None:
            try:
                with waiting_on(f"libvirtd (connecting to {self.uri})"):
                    conn = await asyncio.to_thread(self._connect)
            except Exception as exc:
                raise SubstrateLost(f"cannot connect to libvirtd at {self.uri}: {exc}") from exc
            if self.conn is None:
                self.conn = conn
        return self.conn

    async def call(
        self, what: str, fn: Callable[..., T], *args: Any, lookup_gone_ok: bool = False
    ) -> T:
        conn = await self.connection()
        try:
            with waiting_on(f"libvirtd ({what})"):
                return await asyncio.to_thread(fn, *args)
        except Exception as exc:
            lv = _libvirt()
            if lookup_gone_ok and isinstance(exc, lv.libvirtError):
                if exc.get_error_code() in (lv.VIR_ERR_NO_DOMAIN, lv.VIR_ERR_OPERATION_INVALID):
                    return None  # type: ignore[return-value]
            if _lost(exc, conn):
                self.conn = None
                raise SubstrateLost(f"libvirtd went away during {what}: {exc}") from exc
            raise PhaseFailure(ErrorKind.LIBVIRT_ERROR, f"{what}: {exc}") from exc

    def create_paused(self, xml: str) -> Any:
        return self.conn.createXML(xml, _libvirt().VIR_DOMAIN_START_PAUSED)

    def restore_domain(self, label: str, d: TrialDir) -> Any:
        """Restore the saved domain, paused, with this trial's sockets and run id."""
        if self.snapshot is None or self._snap_xml is None or self.snap_name is None:
            raise PhaseFailure(ErrorKind.NO_SNAPSHOT, "start = restore, and no snapshot was made")
        self.register_snapshot()  # the run's reaper is up by now
        xml = self._snap_xml.replace(self._snap_path, d.path)
        xml = xml.replace(f">{SNAP_LABEL}</rtax:run>", f">{escape(label)}</rtax:run>")
        self.conn.restoreFlags(self.snapshot, xml, _libvirt().VIR_DOMAIN_SAVE_PAUSED)
        return self.conn.lookupByName(self.snap_name)

    # -- checks ------------------------------------------------------------------

    def daemon_call(self) -> tuple[str, str, Callable[[], Awaitable[object]]] | None:
        # What libvirtd works out for every domain it defines: a libvirtd that re-probes
        # QEMU on each call (seen: 4 s a call) makes every create wait that long.
        async def caps() -> object:
            conn = await self.connection()
            return await self.call(
                "domain capabilities", conn.getDomainCapabilities, self.emulator(), None, None, None
            )

        return "libvirtd", "domain capabilities", caps

    async def check(self) -> list[Problem]:
        try:
            _libvirt()
        except ImportError:
            return [
                Problem(
                    "libvirt-python is not installed",
                    "apt-get install libvirt-dev pkg-config; pip install libvirt-python",
                )
            ]
        if guest_files() is None:
            return [Problem("the VM guest is not built", "rtax images build --driver vm")]
        try:
            conn = await asyncio.wait_for(self.connection(), 60)
            await asyncio.wait_for(asyncio.to_thread(conn.getLibVersion), 30)
        except (PhaseFailure, TimeoutError, Exception) as exc:
            self.conn = None
            msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            return [Problem(f"libvirtd does not answer on {self.uri}: {msg}", self.daemon.start)]
        await self.resolve_accel()
        return []

    async def save_snapshot(self, env: Environment, path: str) -> str | None:
        """`save` the booted domain to a file (the domain is gone after), and keep the
        XML stored with it, which `restoreFlags` compares to."""
        assert isinstance(env, LibvirtEnvironment) and env.dir is not None
        self.snap_name, self._snap_path = env.name, env.dir.path
        await self.call("save", env.dom.save, path)
        env.dom = None  # saved domains are gone
        conn = await self.connection()
        self._snap_xml = await self.call("XML", conn.saveImageGetXMLDesc, path, 0)  # migratable
        return None

    async def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "uri": self.uri,
            "machine": "q35",
            **self.size_facts(),
            "channel": "virtio-serial",
            "limits": self.limits_fact(),
        }
        g = guest_files()
        facts["guest_kernel"] = g.kver if g else None
        try:
            conn = await self.connection()
            lib = await asyncio.to_thread(conn.getLibVersion)
            hv = await asyncio.to_thread(conn.getVersion)
            facts["libvirt"] = f"{lib // 1000000}.{lib // 1000 % 1000}.{lib % 1000}"
            facts["qemu"] = f"{hv // 1000000}.{hv // 1000 % 1000}.{hv % 1000}"
        except Exception as exc:
            facts["error"] = str(exc)
        return facts

    async def cleanup(self, label: str | None = None) -> int:
        """Destroy domains named `rtax-*` whose `<rtax:run>` is `label` (or any), and
        remove their directories; a live run's (model/runlock.py) are spared."""
        dirs = trial_dirs(label)
        try:
            conn = await asyncio.wait_for(self.connection(), 60)
            doms = await asyncio.to_thread(conn.listAllDomains, 0)
        except Exception:
            doms = []
        live = await runlock.live_labels_on(self.host)  # after the listing: see runlock
        spared = 0
        lv: Any = _libvirt() if doms else None
        n = 0
        for dom in doms:
            try:
                name = dom.name()
                if not name.startswith(names.SANDBOX):
                    continue
                run = dom.metadata(lv.VIR_DOMAIN_METADATA_ELEMENT, NS, 0)
                if label is not None and f">{escape(label)}<" not in run:
                    continue
                if names.belongs(name, live, names.vm_prefix):
                    spared += 1
                    continue
                await asyncio.to_thread(dom.destroy)
                n += 1
            except Exception:
                continue
        self.end_cleanup(dirs, live, spared)
        return n
