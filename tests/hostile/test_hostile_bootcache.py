"""Verdicts kept until reboot (drivers/toolkit/bootcache.py), attacked as a workload and
as a forged verdict would (docs/boundaries.md, "Verdicts kept until reboot, the reaper's
order, the probe's cleanup").

- A workload of each driver that isolates looks for /run/rtax to read or plant a
  verdict: it has no /run/rtax of the host's (stage and gVisor have no /run at all;
  a container's and a guest's are their own), and the host's verdicts are unchanged.
- A kept KVM verdict that a guest booted was recorded as `accel_reason` "KVM probe
  booted", as if a guest had booted in this process: a forged or stale one did not show.
  Its reason now says it was found at an earlier start, as a kept "no" already did.
- Another user, in a /run/rtax that others may write (made under umask 000), renamed a
  verdict kept for another key (an older QEMU that booted) onto the current key's name:
  it was read as this host's. A directory that is not ours alone is now neither read
  nor written.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.toolkit import bootcache, vmguest

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload
from tests.services import usable_driver
from tests.vmtools import ensure_guest

LABEL = f"pyboot{os.getpid()}{os.urandom(2).hex()}"
ROOT = os.geteuid() == 0

# What a workload that read bootcache.py tries: read the verdicts, plant one under every
# name a verdict has and as the writer's temporary, and a link where the writer makes it.
PLANT = (
    "cat /run/rtax/.kvm-*.json /run/rtax/.gvisor-platform-*.json 2>/dev/null"
    " && echo READ; mkdir -p /run/rtax 2>/dev/null;"
    " for k in kvm gvisor-platform; do for f in $(ls /run/rtax/.$k-*.json 2>/dev/null)"
    ' /run/rtax/.$k-0.json /run/rtax/.$k-x.tmp; do echo \'{"ok": true, "why": "",'
    ' "platform": "kvm", "reason": "forged"}\' >"$f" 2>/dev/null; done; done;'
    " ln -s /etc/shadow /run/rtax/.kvm-l.tmp 2>/dev/null; echo done"
)


def _verdicts() -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(glob.glob(os.path.join(bootcache.BASE, ".*"))):
        st = os.lstat(p)
        with open(p, "rb") as f:
            out[p] = (st.st_ino, st.st_mtime_ns, f.read())
    return out


def _usable(driver: str, request: pytest.FixtureRequest) -> Any:
    """The driver, what it needs up and its check passed (tests/services.py), or a skip."""
    if not ROOT:
        pytest.skip("these drivers need root here")
    return usable_driver(driver, request)


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    for d in ("docker", "podman", "gvisor", "stage", "microvm", "libvirt"):
        try:
            asyncio.run(get_driver(d, LocalHost(), {}).cleanup(LABEL))
        except Exception:
            pass


@pytest.mark.parametrize(
    ("driver", "channel"),
    [(d, c) for d in ("stage", "gvisor", "docker", "podman") for c in ("exec", "shell")]
    + [("microvm", "exec"), ("libvirt", "exec")],  # a guest's /run is its own: one channel
)
def test_a_workload_neither_reads_nor_plants_a_kept_verdict(request, driver, channel):
    drv = _usable(driver, request)
    step = Step(("sh", "-c", PLANT))
    before = _verdicts()

    async def run() -> bytes:
        env: Any = drv.environment(
            EnvSpec(
                cell=Cell("local", driver, "t", channel),
                workload=Workload("t", (step,)),
                limits=Limits(cpus=1, memory_mib=256, pids=128, workspace_mib=64),
                label=LABEL,
            )
        )
        await env.create()
        try:
            await env.ready()
            return (await env.action(step, 60)).output
        finally:
            await env.teardown()

    out = asyncio.run(run()).decode(errors="replace")
    assert "done" in out, out
    assert "READ" not in out, out
    assert _verdicts() == before  # nothing read, replaced, added or linked on the host


def test_a_kept_kvm_boot_is_recorded_as_kept_not_as_a_boot(tmp_path: Path, monkeypatch) -> None:
    """A verdict file that says a guest booted (forged by root, or stale since): the run's
    `accel_reason` and `rtax doctor`'s line say it was found at an earlier start."""
    if not os.path.exists("/dev/kvm") or shutil.which("qemu-system-x86_64") is None:
        pytest.skip("no /dev/kvm or QEMU: the KVM verdict is never kept here")
    ensure_guest()
    monkeypatch.setattr(bootcache, "BASE", str(tmp_path / "run"))
    monkeypatch.delenv(bootcache.FRESH_ENV, raising=False)
    opts = vmguest.VmOptions()
    key = vmguest._kvm_key(opts.qemu, vmguest.KVM_PROBE_TIMEOUT_S)
    assert key is not None
    bootcache.write("kvm", key, {"ok": True, "why": ""})

    monkeypatch.setattr(vmguest, "_kvm_verdict", None)  # as a new process
    accel, why = asyncio.run(vmguest.resolve_accel(LocalHost(), opts))
    assert accel == "kvm"
    assert why == "KVM probe booted" + bootcache.KEPT_NOTE, why
    monkeypatch.setattr(vmguest, "_kvm_verdict", None)
    line = asyncio.run(vmguest.kvm_status(LocalHost()))
    assert line.startswith("usable") and line.endswith(bootcache.KEPT_NOTE), line


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is under a 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix="rtax-bootcache-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_a_verdict_renamed_in_by_another_user_is_not_read(reachable: Path, monkeypatch) -> None:
    if not ROOT or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to act as another user")
    base = reachable / "run"
    base.mkdir()
    monkeypatch.setattr(bootcache, "BASE", str(base))
    monkeypatch.delenv(bootcache.FRESH_ENV, raising=False)
    older, current = {"qemu": "an older build"}, {"qemu": "this build"}
    bootcache.write("kvm", older, {"ok": True, "why": ""})
    assert bootcache.read("kvm", older) == {"ok": True, "why": ""}
    base.chmod(0o777)  # as runlock's makedirs (or an SSH host's mkdir -p) under umask 000
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    src, dst = bootcache._path("kvm", older), bootcache._path("kvm", current)
    subprocess.run([*nobody, "mv", src, dst], check=True)
    assert os.path.exists(dst)
    assert bootcache.read("kvm", current) is None
    bootcache.write("kvm", current, {"ok": False, "why": "x"})  # nor written there
    assert sorted(os.listdir(base)) == [os.path.basename(dst)]
