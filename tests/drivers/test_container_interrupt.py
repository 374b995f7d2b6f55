"""Stopping `rtax run` in the middle of a docker run: SIGINT, SIGKILL, and a missing image.

Every test starts `python -m rtax_tui run` on a profile of its own and asserts only
about the containers labelled with that run's id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers.docker import LABEL_KEY, DockerDriver  # noqa: E402

from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.recording import read_recording  # noqa: E402

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images


def rtax(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, timeout=timeout
    )


def containers_of(run_id: str) -> list[str]:
    c = docker.DockerClient(base_url=DockerDriver(LocalHost(), {}).socket, timeout=30)
    try:
        found = c.containers.list(all=True, filters={"label": f"{LABEL_KEY}={run_id}"})
        return [x.name for x in found]
    finally:
        c.close()


def _run_id(out: Path) -> str:
    return read_recording(out).header["run_id"]


def _wait_for_trials(path: Path, n: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b'"trial_end"') >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} trials in {path}")


def _hanging(marker: str) -> bool:
    """The container's `sleep` (a host process too, in the container's PID namespace):
    a process whose whole command line is the marker. Not any that contains it: every
    quick trial's `sh -c` holds it too, and matched it for a moment (a flaky failure)."""
    return subprocess.run(["pgrep", "-f", f"^{marker}$"], capture_output=True).stdout != b""


def _start_hanging_run(tmp_path: Path, channel: str) -> tuple[subprocess.Popen, Path, Path, str]:
    """A docker run whose trials are quick until FLAG is in the workload's files: the
    workspace of every later container has it, and its action hangs in `sleep`."""
    files = tmp_path / "files"
    files.mkdir()
    marker = f"sleep {100000 + int.from_bytes(os.urandom(3), 'big') % 800000}"
    step = f"[ -e /workspace/FLAG ] && exec {marker}; true"
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 500\nwarmup = 1\ndrivers = ["docker"]\nworkloads = ["w"]\n'
        f'channels = ["{channel}"]\n'
        f'[workloads.w]\nfiles = "{files}"\nsteps = [{{argv = ["sh", "-c", "{step}"]}}]\n'
    )
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_trials(out, 5)
        (files / "FLAG").touch()
        deadline = time.monotonic() + 90
        while not _hanging(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _hanging(marker):
            errors = [
                e["error"]
                for e in read_recording(out).events
                if e["type"] == "trial_end" and e["error"]
            ]
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(
                f"the hanging action never started; trial errors {errors[-3:]}; "
                f"rtax said: {err.decode()[-2000:]}"
            )
    except BaseException:
        proc.kill()
        proc.communicate()
        if out.exists():
            rtax("cleanup", "--run", _run_id(out))
        raise
    return proc, out, files, marker


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_sigint_mid_docker_run_keeps_finished_trials_and_leaves_no_container(tmp_path, channel):
    proc, out, _, marker = _start_hanging_run(tmp_path, channel)
    run_id = _run_id(out)
    assert containers_of(run_id)  # the hanging trial's container
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err.decode()
    rec = read_recording(out)
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    starts = [e for e in rec.events if e["type"] == "trial_start"]
    assert len(ends) >= 5 and all(e["ok"] for e in ends[:5])
    assert rec.end["status"] == "interrupted" and rec.end["trials"] == len(ends)
    assert len(starts) == len(ends)
    assert ends[-1]["error"]["kind"] == "interrupted"
    assert containers_of(run_id) == []
    assert not _hanging(marker)


def test_sigkill_leaves_no_container_the_reaper_removes_them(tmp_path):
    """rtax killed with SIGKILL mid-action: its reaper (registered with the engine's
    socket and the run label before the first container existed) removes the run's
    containers, and with them the hanging process; cleanup then finds nothing."""
    proc, out, _, marker = _start_hanging_run(tmp_path, "exec")
    run_id = _run_id(out)
    assert containers_of(run_id)  # the hanging one, at least
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    rec = read_recording(out)
    assert rec.end is None
    deadline = time.monotonic() + 30
    while (containers_of(run_id) or _hanging(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert containers_of(run_id) == []
    assert not _hanging(marker)
    res = rtax("cleanup", "--run", run_id)
    assert res.returncode == 0, res.stderr.decode()
    assert "docker: removed" not in res.stdout.decode()


def test_a_missing_image_fails_before_any_trial(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 3\nwarmup = 0\ndrivers = ["docker"]\nworkloads = ["w"]\n'
        '[drivers_options.docker]\nimage = "rtax/nope:1"\n'
        '[workloads.w]\nsteps = [{argv = ["true"]}]\n'
    )
    out = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "-o", str(out))
    err = res.stderr.decode()
    assert res.returncode == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "rtax/nope:1" in lines[0] and "rtax images build" in lines[0], err
    if out.exists():  # no trial was started
        assert b'"trial_start"' not in out.read_bytes()
