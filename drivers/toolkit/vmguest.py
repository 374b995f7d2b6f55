"""The host's side of the VM guest, shared by `libvirt` and `microvm`.

- `AgentChannel`: the framed protocol of the guest agent (drivers/toolkit/vmimage.py)
  over the unix socket behind the virtio-serial port.
- `SerialWatch`: reads the serial console's socket in the background, so QEMU never
  blocks on it, and says when `/init` started (`RTAX-INIT`): the end of
  `ready.firmware_kernel`.
- `Qmp`: the little of QMP the microvm driver uses.
- `TrialDir`: the per-trial directory (sockets, overlays, logs), registered with the
  reaper so a `kill -9` of rtax leaves no files.
- options shared by both drivers (`accel`, `vcpus`, `memory_mib`, `start`), checked
  with one-line errors, and the KVM probe: `/dev/kvm` existing proves nothing here
  (KVM guests hang on these hosts), so `auto` boots a guest with KVM under a short
  timeout and falls back to TCG when it does not say hello.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.base import Problem
from rtax_tui.drivers.toolkit import bootcache
from rtax_tui.drivers.toolkit.needs import needs_full_image
from rtax_tui.drivers.toolkit.shellframe import read_frame
from rtax_tui.drivers.toolkit.vmimage import HELLO, INIT_MARK

from rtax_tui.hosts import Host, names
from rtax_tui.model import spec as model
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import (
    ActionResult,
    EnvSpec,
    OutputSink,
    PhaseFailure,
    Step,
    Workload,
)

# Why the shell channel's results are not stated to hold (Driver.integrity): its steps run
# in the guest agent's own shell, as the guest's root, and that agent reports every
# status. On exec they hold: each step is a process of uid/gid 1000 (no supplementary
# group, no_new_privs, yama ptrace_scope 1) that the root agent waits for itself, its
# output captured in a file under /run/rtax (root's, mode 700), the port closed to it.
VM_INTEGRITY = (
    "shell: each step runs in the guest agent's own shell, as the guest's root, and that "
    "agent reports every status: a step can rewrite or replace it"
)
OVERLAY_TIMEOUT_S = 60.0  # qemu-img create of an overlay
ACCELS = ("auto", "tcg", "kvm")
STARTS = ("boot", "restore")
KVM_PROBE_TIMEOUT_S = 20.0
CONNECT_TIMEOUT_S = 10.0
CMDLINE = "console=ttyS0 quiet panic=-1"
# microvm under TCG hangs 2 boots in 3 without a given TSC frequency (BACKENDS.md); under
# KVM the guest calibrates the real TSC, which a fixed value would get wrong
TCG_MICROVM_ARGS = "tsc_early_khz=2000000"


def workspace_disk_mib(spec: Any, start: str) -> int | None:
    """The size of the workspace disk a booted guest gets: `workspace_mib`, or None
    (unlimited; and with start = "restore", whose saved guest has no disk, the
    workspace is in the guest's RAM: bounded by its memory, not by workspace_mib)."""
    from rtax_tui.drivers.toolkit.workspace import workspace_mib

    return workspace_mib(spec) if start == "boot" else None


def vm_integrity(channel: str) -> str | None:
    """`Driver.integrity` of both VM drivers: None on exec (see VM_INTEGRITY)."""
    return VM_INTEGRITY if channel == "shell" else None


def trial_dirs(label: str | None) -> list[str]:
    """The trial directories (`TrialDir`) of run `label`, or of every run: what a
    cleanup lists before it asks which runs are live (model/runlock.py)."""
    pat = names.vm_dirs_prefix(label) + "*"
    return glob.glob(os.path.join(tempfile.gettempdir(), pat))


def remove_dead_dirs(dirs: list[str], live: Any) -> int:
    """Remove the VM directories whose run holds no live lock (model/runlock.py); returns
    how many were spared as a live run's."""

    spared = 0
    for d in dirs:
        if names.belongs(os.path.basename(d), live, names.vm_dirs_prefix):
            spared += 1
        else:
            shutil.rmtree(d, ignore_errors=True)
    return spared


# -- options -------------------------------------------------------------------


def _program_error(value: str) -> str | None:
    return None if value else "expected a program's name or path"


@dataclass(frozen=True)
class VmOptions:
    """`[drivers_options.libvirt]` / `[drivers_options.microvm]`; the profile's `[limits]`
    cpus and memory_mib override vcpus and memory_mib (the default limits only cap them)."""

    accel: str = option(
        Key(
            (str,),
            "auto",
            "the accelerator; `auto` boots a KVM guest under "
            "a timeout first, else TCG, and records why",
            choices=ACCELS,
        )
    )
    vcpus: int = option(Key((int,), 1, "the guest's CPUs", (1, 64)))
    memory_mib: int = option(Key((int,), 512, "the guest's memory, MiB", (128, 65536)))
    start: str = option(
        Key(
            (str,),
            "boot",
            "`boot` each guest, or `restore` one booted and "
            "saved before the trials (T0-style workloads)",
            choices=STARTS,
        )
    )
    qemu: str = option(Key((str,), "qemu-system-x86_64", "the QEMU binary", check=_program_error))
    append: str = option(Key((str,), "", "more kernel arguments"))


# -- the per-trial directory -----------------------------------------------------


class TrialDir:
    """A directory under the temp dir for one VM's sockets, overlays and logs."""

    def __init__(self, host: Host, name: str) -> None:
        self.host = host
        self.path = tempfile.mkdtemp(prefix=names.vm_dir_prefix(name))
        os.chmod(self.path, 0o755)
        host.track("path", self.path)

    def __call__(self, name: str) -> str:
        return os.path.join(self.path, name)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self.host.untrack("path", self.path)


async def connect_unix(path: str, timeout: float, alive: Any = None) -> tuple[Any, Any]:
    """Connect to a unix socket that QEMU (or libvirt) is about to create."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.open_unix_connection(path, limit=model.READ_LIMIT)
        except (FileNotFoundError, ConnectionRefusedError):
            if alive is not None and not alive():
                raise PhaseFailure(
                    ErrorKind.VM_DIED, f"QEMU exited before {path} appeared"
                ) from None
            if time.monotonic() > deadline:
                raise PhaseFailure(
                    ErrorKind.VM_ERROR, f"no socket {path} after {timeout:g} s"
                ) from None
            await asyncio.sleep(0.005)


# -- the agent -------------------------------------------------------------------


class AgentChannel:
    """Framed requests to the guest agent; one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r = reader
        self.w = writer
        self._id = 0
        self._lock = asyncio.Lock()
        self.broken = False
        self.mark = b"__RTAX_" + os.urandom(8).hex().encode() + b"__"

    async def _line(self) -> bytes:
        line = await self.r.readline()
        if not line:
            self.broken = True
            raise PhaseFailure(ErrorKind.AGENT_LOST, "the guest agent's channel closed")
        return line

    async def hello(self) -> None:
        """Until the agent says it serves (after boot)."""
        while True:
            if (await self._line()).startswith(HELLO.encode()):
                return

    async def ping(self) -> None:
        """A round trip (after a restore, when the agent is already serving); lines sent
        before it (a hello from a re-opened port) are dropped with its empty output."""
        await self._request(b"P", "")

    async def run(self, step: Step, fresh_process: bool) -> ActionResult:
        if self.broken:
            raise PhaseFailure(ErrorKind.AGENT_LOST, "an earlier action left the agent unusable")
        return await self._request(b"E" if fresh_process else b"S", shlex.join(step.argv))

    async def _request(self, op: bytes, cmd: str) -> ActionResult:
        async with self._lock:
            self._id += 1
            rid = str(self._id).encode()
            lines = cmd.split("\n") if cmd else []
            head = b"%s %s %d %s\n" % (op, rid, len(lines), self.mark)
            body = "".join(line + "\n" for line in lines).encode()
            out, trailer = OutputSink(), OutputSink(4096)
            try:
                self.w.write(head + body)
                await self.w.drain()
                # however long the output, held bounded (issue 19: OUTPUT_LIMIT kept)
                await read_frame(self.r, b"\n" + self.mark + b" ", out)
                await read_frame(self.r, b"\n", trailer)
                words = trailer.kept().split()
            except asyncio.IncompleteReadError as exc:
                self.broken = True
                raise PhaseFailure(
                    ErrorKind.AGENT_LOST, "the guest agent's channel closed"
                ) from exc
            except (ConnectionError, BrokenPipeError) as exc:
                self.broken = True
                raise PhaseFailure(
                    ErrorKind.AGENT_LOST, f"the guest agent's channel broke: {exc}"
                ) from exc
            except BaseException:
                self.broken = True  # cancelled (timeout) mid-answer: the stream is out of step
                raise
            if len(words) != 3 or words[0] != rid:
                self.broken = True
                raise PhaseFailure(
                    ErrorKind.AGENT_ERROR, f"unexpected trailer {words!r} for {rid!r}"
                )
            return ActionResult(
                rc=int(words[1]), output=out.kept(), remote_ns=int(words[2]), dropped=out.dropped
            )

    def close(self) -> None:
        self.w.transport.abort()


class SerialWatch:
    """Drains the serial console socket; `init` is set when /init printed its mark."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.init = asyncio.Event()
        self.closed = asyncio.Event()
        self.log = bytearray()
        self._w = writer
        self._task = asyncio.ensure_future(self._drain(reader))

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        mark = INIT_MARK.encode()
        while True:
            try:
                data = await reader.read(1 << 16)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                self.closed.set()
                return
            if len(self.log) < 1 << 20:
                self.log += data
            if not self.init.is_set() and mark in self.log:
                self.init.set()

    async def wait_init(self) -> None:
        """Until /init's mark; PhaseFailure when the console closes first (the VM died)."""
        if self.init.is_set():
            return
        waits = [asyncio.ensure_future(e.wait()) for e in (self.init, self.closed)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if not self.init.is_set():
            raise PhaseFailure(ErrorKind.VM_DIED, f"the serial console closed: {self.tail(300)}")

    def tail(self, n: int = 400) -> str:
        return self.log[-n:].decode(errors="replace")

    def close(self) -> None:
        self._task.cancel()
        self._w.transport.abort()


# -- QMP -------------------------------------------------------------------------


class Qmp:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r = reader
        self.w = writer

    @classmethod
    async def connect(cls, path: str, alive: Any = None) -> Qmp:
        r, w = await connect_unix(path, CONNECT_TIMEOUT_S, alive)
        q = cls(r, w)
        await q._read()  # the greeting
        await q.cmd("qmp_capabilities")
        return q

    async def _read(self) -> dict[str, Any]:
        line = await self.r.readline()
        if not line:
            raise PhaseFailure(ErrorKind.VM_DIED, "QEMU closed its QMP socket")
        msg: dict[str, Any] = json.loads(line)
        return msg

    async def cmd(self, name: str, **args: Any) -> Any:
        msg: dict[str, Any] = {"execute": name}
        if args:
            msg["arguments"] = args
        self.w.write(json.dumps(msg).encode() + b"\n")
        await self.w.drain()
        while True:
            ans = await self._read()
            if "return" in ans:
                return ans["return"]
            if "error" in ans:
                raise PhaseFailure(ErrorKind.QMP_ERROR, f"{name}: {ans['error'].get('desc')}")

    def close(self) -> None:
        self.w.transport.abort()


# -- the KVM probe ---------------------------------------------------------------

_kvm_verdict: tuple[bool, str] | None = None


async def probe_kvm(
    host: Host, qemu: str = "qemu-system-x86_64", timeout: float = KVM_PROBE_TIMEOUT_S
) -> tuple[bool, str]:
    """Boot the guest with KVM (microvm, no libvirt) and wait `timeout` for its hello.

    (True, "") when KVM works; else (False, why). Checked for real: on a host whose
    KVM opens but hangs every guest, the guest never says hello."""
    from rtax_tui.drivers.toolkit.vmimage import guest_files

    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    guest = guest_files()
    if guest is None:
        return False, "no guest built to probe with (rtax images build --driver vm)"
    from rtax_tui.model import runlock

    d = TrialDir(host, names.vm(runlock.owner(), "kvmprobe"))  # a live run's: spared
    proc = None
    try:
        argv = microvm_argv(
            qemu,
            d,
            guest.kernel,
            guest.initramfs,
            "kvm",
            1,
            256,
            [],
            incoming=False,
            cmdline=CMDLINE,
        )
        argv.remove("-S")
        log = open(d("qemu.log"), "wb")
        proc = await host.spawn(argv, stdout=log.fileno(), stderr=log.fileno())
        log.close()
        try:
            async with asyncio.timeout(timeout):
                r, w = await connect_unix(d("agent.sock"), timeout, lambda: proc.returncode is None)
                ch = AgentChannel(r, w)
                await ch.hello()
                ch.close()
            return True, ""
        except TimeoutError:
            return (
                False,
                f"KVM present but not usable: a KVM guest did not boot within {timeout:g} s",
            )
        except (PhaseFailure, OSError) as exc:  # e.g. the guest died: its socket reset
            # in words (no `[Errno 104]`): the reason is shown by doctor and recorded
            why = exc.message if isinstance(exc, PhaseFailure) else _os_words(exc)
            with open(d("qemu.log"), errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            tail = lines[-1][-200:] if lines else ""  # QEMU's last word
            return False, f"KVM present but not usable: {why} {tail}".strip()
    finally:
        if proc is not None:
            await host.kill(proc)
            await proc.wait()
            host.release(proc)
        d.remove()


def _os_words(exc: OSError) -> str:
    """An OSError as words: `the guest's socket: Connection reset by peer`."""
    if isinstance(exc, ConnectionError):
        return f"the guest's socket: {exc.strerror or type(exc).__name__}"
    return exc.strerror or type(exc).__name__


def _kvm_key(qemu: str, timeout: float) -> dict[str, Any] | None:
    """What the KVM probe's verdict depends on (toolkit/bootcache.py keeps it until the
    machine reboots): QEMU's binary, the kernel, /dev/kvm, the guest's kernel and
    initramfs, the timeout. None where the probe answers at once (no /dev/kvm, no guest)."""
    from rtax_tui.drivers.toolkit.vmimage import guest_files

    guest = guest_files() if os.path.exists("/dev/kvm") else None
    exe = qemu if os.path.isabs(qemu) else shutil.which(qemu)
    if guest is None or exe is None:
        return None
    return {
        "v": 2,  # the verdict's wording (2: an OSError in words, not its repr)
        "qemu": bootcache.file_key(exe),
        "kernel": os.uname().release,
        "dev": os.stat("/dev/kvm").st_rdev,
        "guest": [bootcache.file_key(guest.kernel), bootcache.file_key(guest.initramfs)],
        "timeout": timeout,
    }


async def kvm_verdict(
    host: Host, qemu: str = "qemu-system-x86_64", timeout: float = KVM_PROBE_TIMEOUT_S
) -> tuple[bool, str]:
    """`probe_kvm`'s verdict, found once a process and kept until the machine reboots: on
    a host whose KVM guests hang, every `rtax doctor` and every run with `accel = "auto"`
    waited the probe's whole timeout (20 s) before."""
    global _kvm_verdict
    if _kvm_verdict is not None:
        return _kvm_verdict
    key = _kvm_key(qemu, timeout)
    kept = bootcache.read("kvm", key) if key is not None else None
    if kept is not None and isinstance(kept.get("ok"), bool) and isinstance(kept.get("why"), str):
        # the note also on a kept "booted" (its why is empty): the recording's accel_reason
        # says no guest booted in this process
        _kvm_verdict = kept["ok"], kept["why"] + bootcache.KEPT_NOTE
        return _kvm_verdict
    _kvm_verdict = await probe_kvm(host, qemu, timeout)
    if key is not None:
        bootcache.write("kvm", key, {"ok": _kvm_verdict[0], "why": _kvm_verdict[1]})
    return _kvm_verdict


async def kvm_status(host: Host) -> str:
    """One line for `rtax doctor`: whether a KVM guest boots here (`kvm_verdict`)."""
    ok, why = await kvm_verdict(host)
    return f"usable (a KVM guest booted){why}" if ok else why


async def resolve_accel(host: Host, opts: VmOptions) -> tuple[str, str]:
    """(accelerator to use, why), once per process for `auto` (`kvm_verdict`)."""
    if opts.accel != "auto":
        return opts.accel, "set in drivers_options"
    ok, why = await kvm_verdict(host, opts.qemu)
    return ("kvm", f"KVM probe booted{why}") if ok else ("tcg", why)


# -- QEMU command lines ------------------------------------------------------------


def accel_args(accel: str) -> list[str]:
    return ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg"]


def microvm_argv(
    qemu: str,
    d: TrialDir,
    kernel: str,
    initrd: str,
    accel: str,
    vcpus: int,
    memory_mib: int,
    disks: list[tuple[str, str, str]],
    *,
    incoming: bool,
    name: str = "rtax",
    cmdline: str = f"{CMDLINE} {TCG_MICROVM_ARGS}",
) -> list[str]:
    """`disks`: (path, format, serial). Starts paused (-S): `cont` begins the boot."""
    argv = [qemu, "-name", name, "-M", "microvm", *accel_args(accel)]
    argv += ["-m", str(memory_mib), "-smp", str(vcpus), "-nodefaults", "-no-user-config"]
    argv += ["-display", "none", "-no-reboot", "-S"]
    argv += ["-qmp", f"unix:{d('qmp.sock')},server=on,wait=off"]
    argv += ["-chardev", f"socket,id=ser,path={d('serial.sock')},server=on,wait=off"]
    argv += ["-serial", "chardev:ser", "-device", "virtio-serial-device"]
    argv += ["-chardev", f"socket,id=agent,path={d('agent.sock')},server=on,wait=off"]
    argv += ["-device", "virtserialport,chardev=agent,name=rtax.agent"]
    for i, (path, fmt, serial) in enumerate(disks):
        argv += ["-drive", f"id=d{i},file={path},format={fmt},if=none,cache=unsafe"]
        argv += ["-device", f"virtio-blk-device,drive=d{i},serial={serial}"]
    argv += ["-kernel", kernel, "-initrd", initrd, "-append", cmdline]
    if incoming:
        argv += ["-incoming", "defer"]
    return argv


def budget_procs(host: Host, spec: EnvSpec) -> list[str]:
    """The `cgroup.procs` files of the capacity batch's budget cgroup, or none: QEMU runs
    inside the budget, so the guest's memory and CPU count against it like any
    other substrate's."""
    if not spec.cgroup_parent:
        return []
    procs: list[str] = host.cgroup_procs(spec.cgroup_parent)
    return procs


def join_budget(host: Host, spec: EnvSpec, pid: int | None) -> None:
    """Move a running QEMU (all its threads) into the batch's budget cgroup. What it
    had touched before (its start-up, and the kernel and initramfs loaded into the
    paused guest's RAM) stays charged where it was: v1 no longer moves charges."""
    procs = budget_procs(host, spec)
    if not procs:
        return
    if pid is None:
        raise PhaseFailure(ErrorKind.CGROUP_FAILED, "no QEMU pid to put into the batch's budget")
    for f in procs:
        try:
            with open(f, "w") as fh:
                fh.write(str(pid))
        except OSError as exc:
            raise PhaseFailure(
                ErrorKind.CGROUP_FAILED, f"cannot move QEMU {pid} into {f}: {exc}"
            ) from exc


def workload_problems(workloads: list[Workload], start: str) -> list[Problem]:
    """What keeps these workloads off a VM (both VM drivers say the same)."""

    from rtax_tui.drivers.toolkit.vmimage import guest_files

    problems = []
    for w in workloads:
        if w.needs_assets and not w.files:  # t2: clones from paths on the host
            problems.append(
                Problem(
                    f"workload {w.name} reads rtax's assets at host paths, which a VM does not see",
                    "run it on local, stage, docker or podman",
                )
            )
        if needs_full_image(w) and guest_files(need_root=True) is None:
            problems.append(
                Problem(f"workload {w.name} needs the root disk", "rtax images build --driver vm")
            )
        if start == "restore" and (needs_full_image(w) or w.files):
            problems.append(
                Problem(
                    f'start = "restore" restores a guest without disks; {w.name} needs some',
                    'use start = "boot" for it, or the t0 workload',
                )
            )
    return problems


async def overlay(qemu_img: str, base: str, dest: str, host: Host) -> None:
    """A qcow2 overlay on `base` (raw, never written)."""
    argv = [qemu_img, "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", dest]
    res = await host.run(argv, timeout=OVERLAY_TIMEOUT_S)
    if res.returncode != 0:
        raise PhaseFailure(
            ErrorKind.VM_ERROR, f"qemu-img create failed: {res.stderr.decode()[-300:]}"
        )
