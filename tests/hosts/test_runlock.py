"""Run locks (model/runlock.py): a live process's labels are seen by cleanups, a dead
one's (kill -9 included) are not; the shell reading (any host) agrees with Python's;
the workspace cleanup spares a live run's workspaces."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtax_tui.model import runlock

HOLDER = """
import sys, time
from rtax_tui.model import runlock
for label in sys.argv[1:]:
    runlock.hold(label)
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("RTAX_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def _holder(*labels: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *labels], stdout=subprocess.PIPE, env=os.environ.copy()
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"held\n"
    return proc


def _live_sh() -> tuple[set[str], int]:
    argv = ["sh", "-c", runlock.script(runlock.LIVE_SH)]
    res = subprocess.run(argv, capture_output=True, check=True)
    return runlock._parse(res.stdout.decode())


def test_a_live_lock_is_seen_and_a_killed_one_is_not(isolated: Path) -> None:
    proc = _holder("run-a", "probe x")
    try:
        assert runlock.live_runs() == [{"run-a", "probe_x"}]
        assert _live_sh() == ({"run-a", "probe_x"}, 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert runlock.live_runs() == []
    assert _live_sh() == (set(), 0)
    assert os.listdir(os.environ["RTAX_RUNS_DIR"]) == []  # the dead lock's file is gone


def test_the_lock_file_goes_with_a_normal_exit(isolated: Path) -> None:
    code = "from rtax_tui.model import runlock; runlock.hold('r1')"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert os.listdir(os.environ["RTAX_RUNS_DIR"]) == []


def test_workspace_cleanup_spares_the_live_run(isolated: Path) -> None:
    from rtax_tui.drivers.toolkit.workspace import workspace_cleanup

    from rtax_tui.hosts import LocalHost

    live = isolated / "rtax-ws-20261201T000000Z-aaaaaa-x1"
    dead = isolated / "rtax-ws-20261201T000000Z-bbbbbb-x2"
    live.mkdir()
    dead.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"], cwd=dead)  # a process left in the dead one
    proc = _holder("20261201T000000Z-aaaaaa")
    try:
        runlock.take_spared()
        n = asyncio.run(workspace_cleanup(LocalHost(), "rtax-ws-"))
        assert (n, runlock.take_spared()) == (1, 1)
        assert live.exists() and not dead.exists()
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    deadline = time.monotonic() + 5
    while runlock.live_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asyncio.run(workspace_cleanup(LocalHost(), "rtax-ws-")) == 1
    assert not live.exists()


def test_vm_cleanup_spares_a_live_run_s_directories(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """microvm's cleanup (libvirt's does the same with its directories and domains)."""
    import tempfile

    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts import LocalHost

    monkeypatch.setattr(tempfile, "tempdir", str(isolated))
    live = isolated / "rtax-vm-rtax-20261201T000000Z-aaaaaa-0011-x"
    dead = isolated / "rtax-vm-rtax-20261201T000000Z-bbbbbb-0022-y"
    live.mkdir()
    dead.mkdir()
    proc = _holder("20261201T000000Z-aaaaaa")
    try:
        runlock.take_spared()
        # a label both share: no other QEMU on the machine is concerned
        asyncio.run(get_driver("microvm", LocalHost(), {}).cleanup("20261201T000000Z"))
        assert runlock.take_spared() == 1
        assert live.exists() and not dead.exists()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.usefixtures("docker_engine")  # conftest: dockerd answering, rtax's images
def test_container_cleanup_spares_a_live_run_s_containers(isolated: Path) -> None:
    """docker's cleanup (podman's is the same code): by the `rtax.run` label, only this
    test's two labels, so no other run's containers are concerned."""
    import docker
    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts import LocalHost

    live, dead = f"lock-live-{os.getpid()}", f"lock-dead-{os.getpid()}"
    api = docker.APIClient(base_url="unix:///var/run/docker.sock", timeout=60)
    image = next(t for i in api.images() for t in i.get("RepoTags") or () if "busybox" in t)
    made = [
        api.create_container(image, ["true"], labels={"rtax.run": x})["Id"] for x in (live, dead)
    ]
    proc = _holder(live)
    try:
        drv = get_driver("docker", LocalHost(), {})
        runlock.take_spared()
        assert asyncio.run(drv.cleanup(dead)) == 1
        assert asyncio.run(drv.cleanup(live)) == 0 and runlock.take_spared() == 1
        left = {c["Id"] for c in api.containers(all=True, filters={"label": "rtax.run"})}
        assert made[0] in left and made[1] not in left
    finally:
        proc.kill()
        proc.wait()
        for c in made:
            try:
                api.remove_container(c, force=True)
            except docker.errors.NotFound:
                pass
        api.close()


def test_as_another_process_sees_its_own_locks_live(isolated: Path) -> None:
    """What a separate `rtax cleanup` sees (the probe's `cleanup_spares_live`): its own
    labels are spared only inside `as_another_process`."""
    code = """
import subprocess
from rtax_tui.model import runlock
runlock.hold("mine")
sh = lambda: runlock._parse(subprocess.run(["sh", "-c", runlock.script(runlock.LIVE_SH)],
                            capture_output=True, check=True).stdout.decode())
print(runlock.live_labels(), sh()[0])
with runlock.as_another_process():
    print(runlock.live_labels(), sh()[0])
print(runlock.live_labels())
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.splitlines() == ["set() set()", "{'mine'} {'mine'}", "set()"]
