"""`kill -9` of rtax during a pooled run leaves nothing: the pool's ready environments,
the ones being created or reset in the background, and the ones trials hold are all
registered with the reaper as a cold trial's are (they are made by the same driver code).

Only rtax is killed here (no daemon): see tests/hosts/test_kill9.py for the cold runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from rtax_tui.hosts import reaper
from rtax_tui.hosts.cgroups import Cgroup
from tests.leftovers import leftovers

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
pytestmark = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")


def _run_and_kill(tmp_path: Path, drivers: list[str], after_s: float) -> tuple[str, bytes]:
    prof = tmp_path / f"p{after_s}.toml"
    prof.write_text(
        f"[run]\ntrials = 40\nwarmup = 0\nconcurrency = 3\ndrivers = {drivers!r}\n".replace(
            "'", '"'
        )
        + 'workloads = ["t0"]\nchannels = ["exec", "shell"]\nmodes = ["pool", "cold"]\n'
        '[pool]\nsize = 3\nreset = "clean"\n'
        "[drivers_options.docker]\nread_only = true\n"
    )
    out = tmp_path / f"r{after_s}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and b"\n" in out.read_bytes()):
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                raise AssertionError(f"no header: {err}")
            time.sleep(0.02)
        time.sleep(after_s)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    data = out.read_bytes()
    return str(orjson.loads(data.split(b"\n", 1)[0])["run_id"]), data


@pytest.mark.parametrize("after_s", [0.0, 0.5, 2.5])
def test_kill_9_of_a_pooled_stage_and_docker_run_leaves_nothing(tmp_path, after_s, request):
    request.getfixturevalue("docker_engine")
    drivers = ["stage", "docker"]
    run_id, data = _run_and_kill(tmp_path, drivers, after_s)
    if after_s >= 2.5:  # the pools really were at work when rtax died
        assert b'"type":"pool"' in data
    # the reaper's own bound: a cgroup slow to empty gets its long wait, then the paths
    # their second pass (a loaded machine took more than 30 s)
    deadline = time.monotonic() + reaper.CGROUP_FIRST_S + reaper.CGROUP_WAIT_S + 15
    left = leftovers(run_id, vms=False, engines=True, monitors=False)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftovers(run_id, vms=False, engines=True, monitors=False)
    assert left == [], left
