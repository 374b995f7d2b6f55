"""libvirtd killed (SIGKILL) while a libvirt VM runs a step, in a run beside `local` trials.

The run goes on and ends with `run_end` completed; the VM whose libvirtd went away is
ended by rtax itself (its QEMU, by PID: libvirtd cannot destroy it any more) and its trial
fails with the reason; the libvirt trials after it fail `substrate_lost` without trying;
the local trials are unharmed. The test starts libvirtd again whatever happens; then
nothing of the run is left: no QEMU, no domain, no VM directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.leftovers import leftovers
from tests.services import Daemon, DaemonError
from tests.vmtools import ensure_guest

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="killing libvirtd needs root"),
    pytest.mark.usefixtures("vm_guest"),
]

PROFILE = """\
[run]
trials = 3
warmup = 0
concurrency = 1
drivers = ["local", "libvirt"]
workloads = ["w"]
channels = ["exec"]
[timeouts]
ready = 240
[drivers_options.libvirt]
accel = "tcg"
[workloads.w]
steps = [{ argv = ["true"] }, { argv = ["sleep", "8"] }, { argv = ["true"] }]
"""


def test_libvirtd_killed_while_a_vm_runs(tmp_path: Path, libvirtd: Daemon) -> None:
    ensure_guest()
    pid = libvirtd.pidfiles[-1].pid()
    if pid is None:
        pytest.skip("libvirtd answers, but not the one scripts/start-libvirtd started")
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stderr: list[bytes] = []
    threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True).start()
    events: list[dict] = []
    driver_of: dict[int, str] = {}
    killed: int | None = None
    victim: int | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            events.append(ev)
            if ev["type"] == "trial_start":
                driver_of[ev["trial"]] = ev["driver"]
            # the VM has started its 8 s step: kill libvirtd under it
            elif (
                ev["type"] == "action"
                and ev["i"] == 0
                and driver_of[ev["trial"]] == "libvirt"
                and killed is None
            ):
                os.kill(pid, signal.SIGKILL)
                killed, victim = pid, ev["trial"]
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        restarted: str | None = None
        if killed is not None:
            deadline = time.monotonic() + 30
            while os.path.exists(f"/proc/{killed}") and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                libvirtd.restart(killed)
            except DaemonError as exc:
                restarted = str(exc)
    assert restarted is None, restarted
    assert rc == 0, b"".join(stderr).decode()[-3000:]
    assert killed is not None and victim is not None, "no libvirt trial reached its steps"
    assert events[-1]["type"] == "run_end" and events[-1]["status"] == "completed"
    ends = {e["trial"]: e for e in events if e["type"] == "trial_end"}
    assert len(ends) == 6
    hit = ends[victim]
    assert not hit["ok"] and hit["error"]["kind"] == "substrate_lost", hit
    later = [e for t, e in ends.items() if driver_of[t] == "libvirt" and t > victim]
    assert all(not e["ok"] and e["error"]["kind"] == "substrate_lost" for e in later), later
    local = [e for t, e in ends.items() if driver_of[t] == "local"]
    assert local and all(e["ok"] for e in local)
    run_id = events[0]["run_id"]
    deadline = time.monotonic() + 60
    left = leftovers(run_id, vms=True)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(run_id, vms=True)
    assert left == []
