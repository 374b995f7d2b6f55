"""A slow substrate daemon, for real: dockerd or libvirtd stopped with SIGSTOP (it holds
its sockets and answers nothing, as a daemon stuck re-probing QEMU does) for a while.

- `rtax doctor`'s timing of one cheap call (`time_daemon`) names it slow;
- a trial whose create waits on it fails `create_timeout` with a message that names the
  daemon call it was still waiting on and for how long.

The daemon is always continued (SIGCONT) before the test ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rtax_tui.model.recording import read_recording
from tests import services
from tests.leftovers import leftovers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="stopping a daemon needs root")

# driver -> (the daemon's session fixture, the fixtures it runs on, its process's mark)
DAEMONS = {
    "docker": ("dockerd", ("docker_engine",), b"dockerd"),
    "libvirt": ("libvirtd", ("libvirtd", "vm_guest"), b"libvirtd"),
}


def _pid(daemon: services.Daemon, mark: bytes) -> int:
    for pf in reversed(daemon.pidfiles):
        pid = pf.pid()
        if pid is not None and mark in services.cmdline(pid):
            return pid
    res = subprocess.run(
        ["pgrep", "-o", "-x", mark.decode(), "--ns", str(os.getpid()), "--nslist", "mnt"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"no {mark.decode()} process is seen here to stop")
    return int(res.stdout.split()[0])


@contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _daemon(request: pytest.FixtureRequest, driver: str) -> int:
    name, needs, mark = DAEMONS[driver]
    for f in needs:
        request.getfixturevalue(f)
    return _pid(request.getfixturevalue(name), mark)


@pytest.mark.parametrize("driver", sorted(DAEMONS))
def test_doctor_names_a_daemon_that_answers_slowly(
    request: pytest.FixtureRequest, driver: str
) -> None:
    from rtax_tui.drivers import get_driver

    from rtax_tui.commands.doctor import SLOW_DAEMON_S, slow_note, time_daemon
    from rtax_tui.hosts import LocalHost

    pid = _daemon(request, driver)

    async def main() -> tuple[tuple[str, float | None] | None, tuple[str, float | None] | None]:
        drv = get_driver(driver, LocalHost())
        assert await drv.check() == [], "the driver should be usable before the test"
        await time_daemon(drv)  # a daemon just started answers its first call slowly
        fast = await time_daemon(drv)
        loop = asyncio.get_running_loop()
        os.kill(pid, signal.SIGSTOP)
        loop.call_later(SLOW_DAEMON_S + 0.5, os.kill, pid, signal.SIGCONT)
        try:
            slow = await time_daemon(drv)
        finally:
            os.kill(pid, signal.SIGCONT)
        return fast, slow

    fast, slow = asyncio.run(main())
    assert fast is not None and fast[1] is not None and slow_note(fast) is None, fast
    assert slow is not None and slow[1] is not None and slow[1] >= SLOW_DAEMON_S + 0.4, slow
    note = slow_note(slow)
    assert note is not None and note.startswith(f"{slow[0]} took ")


@pytest.mark.parametrize("driver", sorted(DAEMONS))
def test_a_create_that_waits_on_a_stopped_daemon_names_it(
    request: pytest.FixtureRequest, tmp_path: Path, driver: str
) -> None:
    pid = _daemon(request, driver)
    prof = tmp_path / "p.toml"
    prof.write_text(
        f'[run]\ndrivers = ["{driver}"]\nworkloads = ["t0"]\nchannels = ["exec"]\n'
        "trials = 2\nwarmup = 0\nconcurrency = 1\n"
        "[timeouts]\ncreate = 3\nready = 240\nteardown = 120\n"
        + ('[drivers_options.libvirt]\naccel = "tcg"\n' if driver == "libvirt" else "")
    )
    rec = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(rec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not (rec.exists() and b"\n" in rec.read_bytes()):  # the header: checks done
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.005)
        with _stopped(pid):
            time.sleep(4)  # past the create timeout (3 s): the create waits on the daemon
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    r = read_recording(rec)
    ends = [e for e in r.events if e["type"] == "trial_end"]
    timed_out = [e for e in ends if not e["ok"] and e["error"]["kind"] == "create_timeout"]
    assert timed_out, [e.get("error") for e in ends]
    daemon = "libvirtd (" if driver == "libvirt" else "the engine's API ("
    msg = timed_out[0]["error"]["message"]
    assert msg.startswith("create did not finish within 3 s: ") and daemon in msg, msg
    deadline = time.monotonic() + 60
    left = leftovers(r.header["run_id"], vms=driver == "libvirt", engines=driver == "docker")
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(r.header["run_id"], vms=driver == "libvirt", engines=driver == "docker")
    assert left == []
