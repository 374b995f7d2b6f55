"""dockerd killed (SIGKILL) in the middle of a run of `local` and `docker` trials.

The run must complete and its recording end with `run_end`; the docker trials in
flight and after the kill fail with `substrate_lost` (the later ones at once, without
trying: the engine re-checks a lost driver at most every 5 s); the local trials go on
unharmed. The test restarts dockerd (scripts/start-dockerd) whatever happens,
then `rtax cleanup` must leave no labelled container behind.
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

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers.docker import DEFAULT_SOCKET, LABEL_KEY  # noqa: E402

from rtax_tui.core import images  # noqa: E402
from tests.services import DaemonError  # noqa: E402

PIDFILE = os.environ.get("RTAX_DOCKERD_PIDFILE", "/run/rtax-dockerd.pid")
KILL_AFTER = 6  # docker trials finished before the kill
TRIALS = 40

PROFILE = f"""\
description = "dockerd killed mid-run"

[run]
seed = 7
trials = {TRIALS}
warmup = 0
concurrency = 2
drivers = ["local", "docker"]
workloads = ["t0"]
channels = ["exec"]

[timeouts]
create = 30
ready = 30
action = 30
teardown = 30
"""


def _dockerd_pid() -> int | None:
    try:
        pid = int(Path(PIDFILE).read_text().strip())
        if "dockerd" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return pid
    except (OSError, ValueError):
        pass
    res = subprocess.run(["pgrep", "-o", "-x", "dockerd"], capture_output=True, text=True)
    return int(res.stdout.split()[0]) if res.returncode == 0 and res.stdout.strip() else None


pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until the killed daemon's process is gone: while its threads still exit, it
    looks to start-dockerd like a daemon that is starting."""
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)


def _ours() -> list[str]:
    c = docker.DockerClient(base_url=DEFAULT_SOCKET, version="auto", timeout=30)
    try:
        return [x.name for x in c.containers.list(all=True, filters={"label": LABEL_KEY})]
    finally:
        c.close()


def test_dockerd_killed_mid_run(tmp_path, dockerd):
    if os.geteuid() != 0:
        pytest.skip("killing and restarting dockerd needs root")
    if _dockerd_pid() is None:
        pytest.skip("dockerd answers, but no dockerd process is seen here to kill")
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    images.build_busybox_image("docker")
    prof = tmp_path / "faults.toml"
    prof.write_text(PROFILE)
    cmd = [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", "-"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    events: list[dict] = []
    stderr: list[bytes] = []
    threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True).start()
    killed_at: int | None = None  # index in `events` of the first event after the kill
    killed_pid: int | None = None
    trial_driver: dict[int, str] = {}
    try:
        docker_done = 0
        for line in proc.stdout:
            ev = json.loads(line)
            events.append(ev)
            if ev["type"] == "trial_start":
                trial_driver[ev["trial"]] = ev["driver"]
            elif ev["type"] == "trial_end" and trial_driver[ev["trial"]] == "docker":
                docker_done += 1
                if docker_done == KILL_AFTER and killed_at is None:
                    pid = _dockerd_pid()
                    assert pid is not None
                    os.kill(pid, signal.SIGKILL)
                    killed_pid = pid
                    killed_at = len(events)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if killed_pid is not None:  # a dying dockerd would be mistaken for one starting
            _wait_gone(killed_pid)
        restarted: str | None = None
        try:  # the session's to stop at its end if the killed one was
            dockerd.restart(killed_pid)
        except DaemonError as exc:
            restarted = str(exc)
    assert restarted is None, restarted
    assert rc == 0, b"".join(stderr).decode()[-3000:]
    assert killed_at is not None, "the run ended before enough docker trials finished"

    # The recording is complete.
    assert events[0]["type"] == "run" and events[-1]["type"] == "run_end"
    assert events[-1]["status"] == "completed" and events[-1]["trials"] == 2 * TRIALS
    ends = {e["trial"]: (i, e) for i, e in enumerate(events) if e["type"] == "trial_end"}
    assert len(ends) == 2 * TRIALS

    before = [e for i, e in ends.values() if i < killed_at]
    after = [(trial_driver[e["trial"]], e) for i, e in ends.values() if i >= killed_at]
    assert all(e["ok"] for e in before)
    # docker: every trial ending after the kill (in flight or later) lost its substrate
    docker_after = [e for d, e in after if d == "docker"]
    assert len(docker_after) >= TRIALS - KILL_AFTER - 1
    assert all(not e["ok"] and e["error"]["kind"] == "substrate_lost" for e in docker_after)
    # ... and most of them never tried: they failed at once, in the create phase
    fast = [e for e in docker_after if "not attempted" in e["error"]["message"]]
    assert len(fast) >= len(docker_after) - 3
    assert all(e["error"]["phase"] == "create" for e in fast)
    for e in fast:
        creates = [
            p
            for p in events
            if p["type"] == "phase" and p["trial"] == e["trial"] and p["name"] == "create"
        ]
        assert len(creates) == 1 and creates[0]["ok"] is False
        assert creates[0]["dur_ns"] < 2e9
    # local: unharmed
    local_after = [e for d, e in after if d == "local"]
    assert local_after and all(e["ok"] and e["valid"] for e in local_after)

    # The daemon is back: cleanup removes what the killed trials left.
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "cleanup"], capture_output=True, timeout=120
    )
    assert res.returncode == 0, res.stderr.decode()
    deadline = time.monotonic() + 10
    while _ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours() == []
