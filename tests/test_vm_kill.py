"""`kill -9` of rtax while VMs run: the reaper ends their QEMU and removes their files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.test_vm_libvirt import domains
from tests.vmtools import ensure_guest, nothing_left


@pytest.mark.usefixtures("libvirtd", "vm_guest")  # conftest: libvirtd answering, the guest
def test_kill_9_leaves_no_qemu_domain_or_file(tmp_path):
    ensure_guest()
    prof = tmp_path / "p.toml"
    prof.write_text(
        """
[run]
trials = 2
warmup = 0
concurrency = 2
drivers = ["libvirt", "microvm"]
workloads = ["t0"]
channels = ["shell"]
[timeouts]
ready = 120
[drivers_options.libvirt]
accel = "tcg"
[drivers_options.microvm]
accel = "tcg"
"""
    )
    rec = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
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
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert run_id is not None
    assert nothing_left(run_id, wait_s=15) == ([], [])
    deadline = time.monotonic() + 15
    while domains(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert domains(run_id) == []
