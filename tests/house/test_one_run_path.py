"""One run path (issue 37, item 1): `rtax probe` and `rtax cleanup` open the engine's
session as `rtax run` does (engine/runner.py `opened`), so a probe's recording begins
with a run's header and clock, and both work under the reaper: a `kill -9` at any
moment leaves none of what they started. Real `rtax` processes, the `local` and `stage`
drivers, no daemon; each test in a temporary directory of its own (TMPDIR, the runs
directory, the cache)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rtax_tui.model.recording import read_recording


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    runs = tmp_path / "runs"
    tmp.mkdir(exist_ok=True)
    runs.mkdir(exist_ok=True)
    return {
        **os.environ,
        "TMPDIR": str(tmp),
        "RTAX_RUNS_DIR": str(runs),
        "RTAX_CACHE": str(tmp_path / "cache"),
        **more,
    }


def _rtax(*args: str) -> list[str]:
    return [sys.executable, "-m", "rtax_tui", *args]


def _until(what: Callable[[], object], timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(why)
        time.sleep(0.05)


def _procs() -> dict[int, tuple[int, bytes, bytes]]:
    """Every process: pid -> (parent pid, command line, environment)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except (OSError, ValueError, IndexError):
            continue
        out[int(name)] = (ppid, cmd, env)
    return out


def _reaper_of(pid: int) -> list[int]:
    """The reaper processes (hosts/reaper.py) that process `pid` started."""
    return [p for p, (pp, cmd, _) in _procs().items() if pp == pid and b"hosts.reaper" in cmd]


def _started_by(tmp_path: Path) -> list[int]:
    """Processes that inherited this test's TMPDIR (the rtax it started, and theirs)."""
    mark = f"TMPDIR={tmp_path / 'tmp'}".encode()
    return [p for p, (_, _, env) in _procs().items() if mark in env.split(b"\0")]


def _loops_on(root: Path) -> list[str]:
    """The loop devices attached to a file below `root` (the probe's block sentinel)."""
    out = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            name = backing.read_text().strip()
        except OSError:
            continue
        if name.startswith(f"{root}/"):
            out.append(f"{backing.parts[3]}: {name}")
    return out


def test_a_probe_is_a_run_of_the_engine_and_a_kill_9_leaves_nothing(tmp_path: Path) -> None:
    """The probe's recording begins with the header a run's has (the same fields, the
    same host facts, each driver's facts, boundary and integrity, as `rtax run`'s), on
    the run's clock; its reaper runs beside it, so killed half-way it leaves nothing."""
    env = _env(tmp_path)
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local", "stage"]\nworkloads = ["w"]\n'
        'channels = ["exec"]\n[workloads.w]\nsteps = [{argv = ["true"]}]\n'
    )
    ran = tmp_path / "run.jsonl"
    res = subprocess.run(
        _rtax("run", str(prof), "--headless", "-o", str(ran), "--quiet"),
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode()
    run_head = read_recording(ran).header

    probed = tmp_path / "probe.jsonl"
    proc = subprocess.Popen(
        _rtax("probe", "--driver", "local,stage", "--channel", "exec", "-o", str(probed)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def probing() -> bool:  # the header and a first check: the probe is under way
            return probed.exists() and probed.read_bytes().count(b"\n") >= 3

        _until(probing, 120, "the probe recorded no check")
        reapers = _reaper_of(proc.pid)
        assert len(reapers) == 1, "no reaper beside the probe"
        assert set(_started_by(tmp_path)) > {proc.pid}  # it has started processes
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL

    rec = read_recording(probed)
    head = rec.header
    assert set(head) == set(run_head)
    assert head["run_id"] != run_head["run_id"]
    assert head["profile"]["drivers"] == ["local", "stage"]
    assert head["profile"]["workloads"] == [] and head["profile"]["trials"] == 0
    assert head["limits"] == {"cpus": 1, "memory_mib": 256, "pids": 128, "workspace_mib": 64}
    host, run_host = head["hosts"]["local"], run_head["hosts"]["local"]
    assert set(host) == set(run_host)
    assert set(host["drivers"]) == set(run_host["drivers"]) == {"local", "stage"}
    for d in ("local", "stage"):
        assert set(host["drivers"][d]) == set(run_host["drivers"][d]), d
        assert host["drivers"][d]["integrity"] == run_host["drivers"][d]["integrity"]
    # one clock: the header's t_ns first, every event's after it, in order
    stamps = [head["t_ns"]] + [e["t_ns"] for e in rec.events]
    assert stamps == sorted(stamps) and all(e["type"] == "probe" for e in rec.events)

    # killed half-way: its reaper ends what it started and removes what it planted
    _until(lambda: not _reaper_of(proc.pid) and not _started_by(tmp_path), 60, "left running")
    assert list((tmp_path / "tmp").iterdir()) == []
    assert _loops_on(tmp_path) == []  # the block device sentinel's (root only) too


FAKE_FLOCK = """#!/bin/sh
# a flock(1) that never answers: the cleanup's look at the run locks hangs here
exec sleep {marker}
"""


def test_a_cleanup_killed_half_way_leaves_nothing_it_started(tmp_path: Path) -> None:
    """`rtax cleanup` runs under the reaper: killed with kill -9 while a driver's cleanup
    script is running, none of the processes it started is left."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = f"3600.{os.getpid()}{time.monotonic_ns() % 1000000}"
    flock = bin_dir / "flock"
    flock.write_text(FAKE_FLOCK.format(marker=marker))
    flock.chmod(0o755)
    env = _env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "runs" / "another.lock").write_text("someone\n")  # one lock to look at

    def hanging() -> list[int]:
        return [p for p, (_, cmd, _) in _procs().items() if cmd == f"sleep\0{marker}\0".encode()]

    proc = subprocess.Popen(
        _rtax("cleanup", "--driver", "local", "--driver", "stage"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(hanging, 60, "the cleanup's script never reached flock")
        assert len(_reaper_of(proc.pid)) == 1, "no reaper beside the cleanup"
    finally:
        proc.kill()
        proc.wait(30)
    _until(lambda: not hanging(), 30, "the cleanup's script outlived it")
    _until(lambda: not _started_by(tmp_path), 30, "the cleanup left processes")
