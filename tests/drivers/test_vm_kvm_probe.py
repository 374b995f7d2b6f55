"""`rtax doctor` does not trust /dev/kvm: it boots a KVM guest under a short timeout."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from rtax_tui.drivers.toolkit.vmguest import probe_kvm

from rtax_tui.hosts.local import LocalHost
from tests.vmtools import ensure_guest

pytestmark = [
    pytest.mark.skipif(
        not os.path.exists("/dev/kvm"), reason="no /dev/kvm on this machine (the probe says so)"
    ),
    pytest.mark.usefixtures("vm_guest"),  # conftest: the guest built
]


def test_a_kvm_guest_that_hangs_is_reported_not_usable_and_killed(tmp_path):
    ensure_guest()
    fake = tmp_path / "qemu-hangs"  # stands for a KVM guest that never gets past firmware
    marker = f"rtax-probe-{os.getpid()}"
    fake.write_text(f"#!/bin/sh\nexec -a {marker} sleep 600\n")
    fake.chmod(0o755)
    t = time.monotonic()
    ok, why = asyncio.run(probe_kvm(LocalHost(), str(fake), timeout=3))
    assert not ok and why.startswith("KVM present but not usable"), why
    assert time.monotonic() - t < 15
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left.strip() == ""


def test_doctor_names_the_kvm_verdict():
    ensure_guest()
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "doctor"], capture_output=True, text=True, timeout=300
    )
    line = [x for x in res.stdout.splitlines() if x.startswith("KVM: ")]
    assert len(line) == 1, res.stdout + res.stderr
    verdict = line[0][len("KVM: ") :]
    assert verdict.startswith(("usable", "KVM present but not usable")), verdict


def test_the_verdict_is_kept_until_reboot_and_a_new_qemu_probes_again(tmp_path, monkeypatch):
    """A host whose KVM guests hang made every `rtax doctor` and every `accel = "auto"` run
    wait the probe's 20 s: the verdict is kept (drivers/toolkit/bootcache.py) for the same
    QEMU, kernel and guest; another QEMU binary is probed again."""
    from rtax_tui.drivers.toolkit import bootcache, vmguest

    ensure_guest()
    monkeypatch.setattr(bootcache, "BASE", str(tmp_path / "run"))
    monkeypatch.delenv(bootcache.FRESH_ENV, raising=False)
    starts = tmp_path / "starts"
    fake = tmp_path / "qemu-hangs"
    fake.write_text(f"#!/bin/sh\necho x >>{starts}\nexec sleep 600\n")
    fake.chmod(0o755)

    def verdict() -> tuple[bool, str]:
        monkeypatch.setattr(vmguest, "_kvm_verdict", None)  # as a new process
        return asyncio.run(vmguest.kvm_verdict(LocalHost(), str(fake), timeout=2))

    ok, why = verdict()
    assert not ok and why.startswith("KVM present but not usable"), why
    assert starts.read_text().count("x") == 1
    ok, kept = verdict()
    assert not ok and kept == why + bootcache.KEPT_NOTE
    assert starts.read_text().count("x") == 1  # no second boot
    fake.write_text(fake.read_text() + "# another build\n")  # another size and time
    verdict()
    assert starts.read_text().count("x") == 2
