"""Run locks end to end (issue 19, item 7): `rtax cleanup` in the middle of two live
runs (stage and local) takes nothing of theirs, and both finish with every trial ok;
a run killed with kill -9 (its reaper too) is then cleaned by `rtax cleanup`.

Everything is kept apart from other rtax runs on the machine: its own temporary
directory (workspaces), runs directory (locks) and cgroup root, and the cleanups are
limited to the stage and local drivers.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rtax_tui.hosts import cgroups
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model.recording import read_recording

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
pytestmark = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")

CLEAN = ("cleanup", "--driver", "stage", "--driver", "local")


class Box:
    """The isolated places: env for rtax, and what to look at."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.tmp = base / "tmp"
        self.tmp.mkdir()
        self.cg_root = f"rtaxlock{os.getpid()}"
        self.env = os.environ | {
            "TMPDIR": str(self.tmp),
            "RTAX_RUNS_DIR": str(base / "runs"),
            "RTAX_CGROUP_ROOT": self.cg_root,
        }

    def rtax(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "rtax_tui", *args],
            capture_output=True,
            env=self.env,
            timeout=timeout,
        )

    def start(self, name: str, trials: int, step: str) -> tuple[subprocess.Popen[bytes], Path]:
        prof = self.base / f"{name}.toml"
        prof.write_text(
            f"[run]\ntrials = {trials}\nwarmup = 0\nconcurrency = 2\n"
            'drivers = ["stage", "local"]\nworkloads = ["w"]\nchannels = ["exec", "shell"]\n'
            f"[workloads.w]\nsteps = [{step}]\n"
        )
        out = self.base / f"{name}.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        return proc, out

    def cgroups(self, label: str = "") -> list[str]:
        pat = f"/sys/fs/cgroup/*/{self.cg_root}/env-{label}*"
        return glob.glob(pat) + glob.glob(f"/sys/fs/cgroup/{self.cg_root}/env-{label}*")

    def workspaces(self, label: str = "") -> list[str]:
        return glob.glob(str(self.tmp / f"rtax-ws-{label}*"))


@pytest.fixture
def box() -> Iterator[Box]:
    base = Path(tempfile.mkdtemp(prefix="runlocktest-"))
    os.chmod(base, 0o755)
    b = Box(base)
    try:
        yield b
    finally:
        cgroups.cleanup(f"{b.cg_root}/")  # only this test's root
        shutil.rmtree(base, ignore_errors=True)


def _trials(out: Path) -> list[dict[str, object]]:
    if not out.exists():
        return []
    evs = [orjson.loads(x) for x in out.read_bytes().split(b"\n") if x.strip()]
    return [e for e in evs if e.get("type") == "trial_end"]


def _run_id(out: Path) -> str:
    return str(orjson.loads(out.read_bytes().split(b"\n", 1)[0])["run_id"])


def _wait(cond, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_cleanup_between_two_live_runs_takes_nothing_of_theirs(box: Box) -> None:
    step = '{argv = ["sh", "-c", "sleep 0.4; echo hi"], expect_out = "hi"}'
    a, out_a = box.start("a", 10, step)
    b, out_b = box.start("b", 10, step)
    try:
        _wait(lambda: len(_trials(out_a)) >= 2 and len(_trials(out_b)) >= 2, "trials")
        # a dead run's leftovers, as a crash leaves them
        dead_ws = box.tmp / "rtax-ws-20200101T000000Z-dead00-abc"
        dead_ws.mkdir()
        dead_cg = Cgroup.create("env-20200101T000000Z-dead00-1234", parent=box.cg_root)
        # the live runs' own, there while the cleanup runs
        id_a, id_b = _run_id(out_a), _run_id(out_b)
        # an environment of each is alive at some moment (between two trials a run has
        # none: on a loaded machine a single look can fall in that gap)
        _wait(lambda: box.cgroups(id_a) and box.workspaces(id_b), "live environments")
        refused = box.rtax("cleanup", "--run", id_a)
        assert refused.returncode == 2
        assert refused.stderr.decode().strip().count("\n") == 0
        assert f"run {id_a} is still running" in refused.stderr.decode()
        res = box.rtax(*CLEAN)
        assert res.returncode == 0, res.stderr
        text = res.stdout.decode()
        assert "spared" in text, text
        assert not dead_ws.exists() and not dead_cg.exists()
        a.wait(timeout=300)
        b.wait(timeout=300)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in ((a, out_a), (b, out_b)):
        err = p.stderr.read().decode()[-2000:] if p.stderr else ""
        assert p.returncode == 0, err
        rec = read_recording(out)
        assert rec.end is not None and rec.end["status"] == "completed", err
        ends = [e for e in rec.events if e["type"] == "trial_end"]
        assert len(ends) == 40 and all(e["ok"] for e in ends), [e for e in ends if not e["ok"]]
    # nothing of theirs is left, and no lock is
    assert box.workspaces() == [] and box.cgroups() == []
    assert os.listdir(box.base / "runs") == []


def _reaper_of(pid: int) -> int:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"rtax_tui.hosts.reaper" in cmd:
            return int(name)
    raise AssertionError(f"no reaper under {pid}")


def test_a_run_killed_with_kill_9_is_cleaned_by_cleanup(box: Box) -> None:
    proc, out = box.start("k", 40, '{argv = ["sleep", "30"]}')
    try:
        _wait(lambda: out.exists() and b'"trial_start"' in out.read_bytes(), "a trial")
        run_id = _run_id(out)
        _wait(lambda: bool(box.cgroups(run_id)) and bool(box.workspaces(run_id)), "its things")
        os.kill(_reaper_of(proc.pid), signal.SIGKILL)  # nothing reaps: leftovers stay
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert box.cgroups(run_id) and box.workspaces(run_id)  # left, as after a crash
    res = box.rtax("cleanup", "--run", run_id)  # its lock is free: not refused
    assert res.returncode == 0, res.stderr
    assert box.workspaces(run_id) == [] and box.cgroups(run_id) == []
    res = box.rtax(*CLEAN)
    assert res.returncode == 0 and "spared" not in res.stdout.decode()
    assert box.workspaces() == [] and box.cgroups() == []
    assert os.listdir(box.base / "runs") == []  # the dead lock's file went too
