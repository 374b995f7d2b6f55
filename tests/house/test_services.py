"""The session fixtures' daemons (tests/services.py): started only when absent, stopped
only if started here, by PID; asked for only by the tests that need an engine."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import services
from tests.services import Daemon, DaemonError, PidFile, alive

ROOT = Path(__file__).resolve().parents[2]
MARK = f"rtax-fake-daemon-{os.getpid()}"

# A start script double: idempotent like scripts/start-*, it starts a process in its own
# session (named MARK), writes its pid file, waits until it runs, then "answers" (the
# ready file).
FAKE_START = f"""#!/usr/bin/env bash
set -eu
if [ -e "$READY" ] && [ -s "$PIDFILE" ] && grep -q {MARK} "/proc/$(cat "$PIDFILE")/cmdline"; then
  exit 0  # answering (a zombie's cmdline is empty)
fi
[ -z "${{FAIL:-}}" ] || {{ echo "cannot start" >&2; exit 1; }}
setsid bash -c 'exec -a {MARK} sleep 300' </dev/null >/dev/null 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
# like the real scripts, return once it "answers": here, once it is the sleep named MARK.
# (Waiting only for MARK in its cmdline returned while setsid or bash -c, whose arguments
# hold MARK, were still exec'ing: a cmdline read mid-exec is empty, and the Daemon then
# missed the PID it had started; CI saw it once under load.)
until [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] \
  && grep -q {MARK} "/proc/$pid/cmdline" 2>/dev/null; do sleep 0.01; done
touch "$READY"
"""


def fake(tmp_path: Path, **env: str) -> Daemon:
    script = tmp_path / "start-fake"
    script.write_text(FAKE_START)
    pidfile, ready = tmp_path / "fake.pid", tmp_path / "ready"

    def answers() -> str | None:
        pf = PidFile(str(pidfile), MARK.encode())
        return None if ready.exists() and pf.pid() is not None else "the fake is not running"

    return Daemon(
        name="fake",
        script=script,
        programs=("bash",),
        install="-",
        pidfiles=(PidFile(str(pidfile), MARK.encode()),),
        answers=answers,
        env={"PIDFILE": str(pidfile), "READY": str(ready), **env},
        needs_root=False,
    )


def _pid(tmp_path: Path) -> int:
    return int((tmp_path / "fake.pid").read_text())


def _end(pid: int) -> None:
    """End a process this test started outside the Daemon (cleanup of the test's own)."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_absent_is_started_then_stopped_by_its_pid(tmp_path):
    d = fake(tmp_path)
    assert d.answers() is not None
    d.ensure()
    pid = _pid(tmp_path)
    assert d.answers() is None and d.started == [pid] and alive(pid)
    d.ensure()  # answering now: nothing more is started
    assert d.started == [pid]
    assert d.stop() == [pid]
    assert not alive(pid) and d.started == []


def test_one_already_running_is_used_and_left_running(tmp_path):
    d = fake(tmp_path)
    subprocess.run(["bash", str(d.script)], env={**os.environ, **d.env}, check=True)
    theirs = _pid(tmp_path)
    try:
        d.ensure()
        assert d.started == []
        assert d.stop() == []
        assert alive(theirs)
    finally:
        _end(theirs)


def test_a_stale_pid_file_is_not_mistaken_for_ours_or_theirs(tmp_path):
    d = fake(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "fake.pid").write_text(f"{dead.pid}\n")
    d.ensure()
    assert d.started == [_pid(tmp_path)] != [dead.pid]
    d.stop()


def test_a_script_that_fails_is_an_error_and_starts_nothing(tmp_path):
    d = fake(tmp_path, FAIL="1")
    with pytest.raises(DaemonError, match="cannot start"):
        d.ensure()
    assert d.started == []


def test_a_restart_after_a_kill_is_ours_only_if_the_killed_one_was(tmp_path):
    d = fake(tmp_path)
    d.ensure()
    first = _pid(tmp_path)
    _end(first)
    d.restart(first)
    second = _pid(tmp_path)
    assert second != first and d.started == [second]
    assert d.stop() == [second] and not alive(second)
    # someone else's daemon, killed by a test and started again: still not ours
    subprocess.run(["bash", str(d.script)], env={**os.environ, **d.env}, check=True)
    theirs = _pid(tmp_path)
    _end(theirs)
    d.restart(theirs)
    replacement = _pid(tmp_path)
    try:
        assert d.started == [] and alive(replacement)
    finally:
        _end(replacement)


def test_a_missing_program_is_a_reason_to_skip():
    d = Daemon(
        name="x",
        script=ROOT / "scripts" / "start-dockerd",
        programs=("rtax-no-such-program",),
        install="apt-get install x",
        pidfiles=(),
        answers=lambda: "down",
    )
    assert d.cannot_run() == "rtax-no-such-program not installed (apt-get install x)"


def test_the_real_podman_service_on_a_socket_of_its_own(tmp_path):
    """scripts/start-podman, moved to a fresh socket (RTAX_PODMAN_*): started because
    absent, ended by its PID; a service already on the default socket is untouched."""
    if shutil.which("podman") is None or os.geteuid() != 0:
        pytest.skip("needs podman and root")
    env = {
        "RTAX_PODMAN_SOCK": str(tmp_path / "podman.sock"),
        "RTAX_PODMAN_PIDFILE": str(tmp_path / "podman.pid"),
        "RTAX_PODMAN_LOG": str(tmp_path / "podman.log"),
        "RTAX_PODMAN_CONF": str(tmp_path / "ulimits.conf"),
    }
    default = PidFile("/run/rtax-podman.pid", b"system service").pid()
    d = services.podman_service(env)
    assert d.answers() is not None
    try:
        d.ensure()
        assert d.answers() is None and len(d.started) == 1
        pid = d.started[0]
        assert str(tmp_path / "podman.sock").encode() in services.cmdline(pid)
    finally:
        ended = d.stop()
    assert ended == [pid] and not alive(pid)
    if default is not None:
        assert alive(default)


def _plan(*files: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--setup-plan", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout


def test_only_engine_tests_ask_for_a_daemon():
    unit = _plan("tests/analysis/test_stats.py", "tests/engine/test_plan.py")
    for name in ("dockerd", "podman_service", "libvirtd", "vm_guest"):
        assert name not in unit
    engine = _plan(
        "tests/drivers/test_docker.py",
        "tests/drivers/test_podman.py",
        "tests/drivers/test_vm_libvirt.py",
    )
    for name in ("dockerd", "podman_service", "libvirtd", "vm_guest"):
        assert f"SETUP    S {name}" in engine, name


def test_strays_the_daemon_leaves_end_with_it_only_if_they_came_while_it_ran(tmp_path):
    """dockerd's containerd shims outlive it: those that appeared while this session's
    daemon ran are ended by stop(); an older one (someone else's) is left alone."""
    stray_mark = f"rtax-fake-stray-{os.getpid()}"

    def strays() -> set[int]:
        return services.processes_with(stray_mark.encode())

    def start_stray() -> int:
        p = subprocess.Popen(
            ["bash", "-c", f"exec -a {stray_mark} sleep 300"],
            stdin=subprocess.DEVNULL,
            # its own session, as a shim's; not the setsid program, which forks (and so
            # gives another PID than Popen's) when the caller leads its process group
            start_new_session=True,
        )
        # until it shows as a stray (bash has exec'd it under its mark): a stray not yet
        # seen when the daemon starts counts as the daemon's (a loaded fast tier's
        # rehearsal killed the older one so, its bash slower than a 5 s wait)
        deadline = time.monotonic() + 60
        while p.pid not in strays() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.pid in strays(), "the stray never showed its mark"
        return p.pid

    older = start_stray()
    d = fake(tmp_path)
    d.strays = strays
    try:
        d.ensure()
        newer = start_stray()  # as a shim started for a container of this daemon
        d.stop()
        deadline = time.monotonic() + 5
        while alive(newer) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(newer) and alive(older)
    finally:
        for pid in strays():
            _end(pid)
