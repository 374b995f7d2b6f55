"""`kill -9` of rtax while VMs run: the reaper ends their QEMU and removes their files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.drivers.test_vm_libvirt import domains
from tests.vmtools import BOTH_VMS_PROFILE, cli_started, ensure_guest, nothing_left


@pytest.mark.usefixtures("libvirtd", "vm_guest")  # conftest: libvirtd answering, the guest
def test_kill_9_leaves_no_qemu_domain_or_file(tmp_path):
    ensure_guest()
    profile = BOTH_VMS_PROFILE.format(concurrency=2, ready=120)
    cli = cli_started(profile, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with cli as (proc, rec):
        deadline = time.monotonic() + 120
        created: set[str] = set()
        run_id = None
        drivers: dict[int, str] = {}
        while time.monotonic() < deadline and len(created) < 2:
            time.sleep(0.1)
            if not rec.exists():
                continue
            for line in rec.read_text().splitlines():
                e = json.loads(line)
                if e["type"] == "run":
                    run_id = e["run_id"]
                elif e["type"] == "trial_start":
                    drivers[e["trial"]] = e["driver"]
                elif e["type"] == "phase" and e["name"] == "create" and e["ok"]:
                    created.add(drivers[e["trial"]])
        assert created == {"libvirt", "microvm"}, created
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert run_id is not None
    assert nothing_left(run_id, wait_s=15) == ([], [])
    deadline = time.monotonic() + 15
    while domains(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert domains(run_id) == []
