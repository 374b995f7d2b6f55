"""A container engine killed (SIGKILL) in the middle of a run of `local` trials and trials
on that engine: dockerd, or podman's API service.

The run must complete and its recording end with `run_end`; the engine's trials in
flight and after the kill fail with `substrate_lost` (the later ones at once, without
trying: the engine re-checks a lost driver at most every 5 s); the local trials go on
unharmed. The test restarts the daemon (scripts/start-dockerd, scripts/start-podman)
whatever happens, then `rtax cleanup` must leave no labelled container behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers import docker as docker_driver  # noqa: E402
from rtax_tui.drivers import podman as podman_driver  # noqa: E402
from rtax_tui.drivers.toolkit import images  # noqa: E402

from tests.services import Daemon, DaemonError  # noqa: E402

LABEL_KEY = docker_driver.LABEL_KEY
# driver -> (its daemon's session fixture, its engine fixture, its API socket, process mark)
ENGINES = {
    "docker": ("dockerd", "docker_engine", docker_driver.DEFAULT_SOCKET, "dockerd"),
    "podman": ("podman_service", "podman_engine", podman_driver.DEFAULT_SOCKET, "podman"),
}
KILL_AFTER = 6  # docker trials finished before the kill
TRIALS = 40

PROFILE = """\
description = "{driver}'s daemon killed mid-run"

[run]
seed = 7
trials = {trials}
warmup = 0
concurrency = 2
drivers = ["local", "{driver}"]
workloads = ["t0"]
channels = ["exec"]

[timeouts]
create = 30
ready = 30
action = 30
teardown = 30
"""


def _daemon_pid(daemon: Daemon, name: str) -> int | None:
    pid = daemon.pidfiles[-1].pid()
    if pid is not None:
        return pid
    if name != "dockerd":  # podman's service is ours to find by its pid file only
        return None
    res = subprocess.run(
        ["pgrep", "-o", "-x", "dockerd", "--ns", str(os.getpid()), "--nslist", "mnt"],
        capture_output=True,
        text=True,
    )
    return int(res.stdout.split()[0]) if res.returncode == 0 and res.stdout.strip() else None


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until the killed daemon's process is gone: while its threads still exit, it
    looks to start-dockerd like a daemon that is starting."""
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)


def _ours(socket: str) -> list[str]:
    c = docker.DockerClient(base_url=socket, version="auto", timeout=30)
    try:
        return [x.name for x in c.containers.list(all=True, filters={"label": LABEL_KEY})]
    finally:
        c.close()


@pytest.mark.parametrize("driver", sorted(ENGINES))
def test_engine_killed_mid_run(tmp_path, request, driver):
    fixture, engine, socket, mark = ENGINES[driver]
    if os.geteuid() != 0:
        pytest.skip("killing and restarting a daemon needs root")
    request.getfixturevalue(engine)  # conftest: the daemon answering, the images
    daemon: Daemon = request.getfixturevalue(fixture)
    if _daemon_pid(daemon, mark) is None:
        pytest.skip(f"{daemon.name} answers, but no process of it is seen here to kill")
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    images.build_busybox_image(driver)
    prof = tmp_path / "faults.toml"
    prof.write_text(PROFILE.format(driver=driver, trials=TRIALS))
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
            elif ev["type"] == "trial_end" and trial_driver[ev["trial"]] == driver:
                docker_done += 1
                if docker_done == KILL_AFTER and killed_at is None:
                    pid = _daemon_pid(daemon, mark)
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
            daemon.restart(killed_pid)
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
    docker_after = [e for d, e in after if d == driver]
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
    while _ours(socket) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(socket) == []
