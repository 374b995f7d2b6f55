"""The engine as a child subreaper (hosts/subreaper.py): an adopted orphan is reaped by
this process and leaves no zombie; a child the process spawned itself is never reaped by
it, so its owner's exit status is the child's own (a stolen one reads as 0 in Popen,
255 in asyncio) under heavy orphan churn, on every spawn path; off, the kernel says so."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtax_tui.hosts import spawn, subreaper
from rtax_tui.hosts.local import LocalHost

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def on() -> Iterator[None]:
    assert subreaper.enable()
    try:
        yield
    finally:
        subreaper.disable()


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def _orphan(sleep: str) -> int:
    """A grandchild whose parent (sh) has exited: its pid (sh already waited for)."""
    p = subprocess.Popen(["sh", "-c", f"sleep {sleep} & echo $!"], stdout=subprocess.PIPE, env=ENV)
    assert p.stdout is not None
    pid = int(p.stdout.readline())
    p.stdout.close()
    assert p.wait() == 0
    return pid


def _gone(pid: int, within_s: float) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if _state(pid) is None:
            return True
        time.sleep(0.005)
    return False


def test_an_orphan_is_adopted_and_reaped(on: None) -> None:
    assert subreaper.is_subreaper()
    before = subreaper.reaped()
    pid = _orphan("0.3")
    assert _ppid(pid) == os.getpid()  # adopted by this process, not by PID 1
    assert _gone(pid, 5), f"orphan {pid} left as {_state(pid)}"
    assert subreaper.reaped() > before


def test_an_orphan_behind_an_unreaped_child_of_ours_is_reaped(on: None) -> None:
    """waitid(P_ALL) shows the first zombie only: one of ours that its owner leaves for
    a while must neither be taken nor hide an orphan that dies after it."""
    mine = subprocess.Popen(["sh", "-c", "exit 7"], env=ENV)
    while _state(mine.pid) != "Z":
        time.sleep(0.001)
    pid = _orphan("0.05")
    assert _gone(pid, 5), f"orphan {pid} left as {_state(pid)} behind {mine.pid}"
    assert _state(mine.pid) == "Z"  # still there for its owner
    assert mine.wait() == 7


def test_a_spawn_in_flight_holds_off_unknown_zombies(on: None) -> None:
    """Between fork and registration a child is unknown: while a spawn is announced no
    unknown zombie is reaped (this one is made with the unwrapped posix_spawn)."""
    raw = getattr(os.posix_spawn, "__wrapped__", os.posix_spawn)
    counted = subreaper.spawning()
    pid = -1
    try:
        pid = raw("/bin/sh", ["sh", "-c", "exit 5"], dict(ENV))
        while _state(pid) != "Z":
            time.sleep(0.001)
        time.sleep(0.3)  # the thread backs off 100 ms at most: it has looked by now
        assert _state(pid) == "Z"
    finally:
        subreaper.spawned(pid if pid > 0 else None, counted)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 5


def test_a_reaped_pid_is_forgotten_however_its_number_is_reused(on: None) -> None:
    p = subprocess.Popen(["true"])
    assert p.pid in subreaper._ours
    assert p.wait() == 0
    with subreaper._lock:
        assert not subreaper._is_ours(p.pid)  # its pidfd says the process is gone
    assert p.pid not in subreaper._ours


def _churn(stop: threading.Event, made: list[int]) -> None:
    """Orphans, as fast as it can: each sh leaves three children behind."""
    while not stop.is_set():
        subprocess.run(["sh", "-c", "true & true & sleep 0.001 & exit 0"], env=ENV, check=True)
        made[0] += 3


async def _own_children(rounds: int) -> list[tuple[str, int, int]]:
    """Children of this process on every spawn path, exiting with 0 and 7: (path,
    expected, got)."""
    host = LocalHost()
    seen: list[tuple[str, int, int]] = []
    for i in range(rounds):
        rc = 7 if i % 2 else 0
        cmd = ["sh", "-c", f"exit {rc}"]
        proc = await asyncio.create_subprocess_exec(*cmd, env=ENV)
        # bounded: a child stolen from uvloop is never seen to exit (a hang, not a status)
        seen.append(("asyncio", rc, await asyncio.wait_for(proc.wait(), 60)))
        done = await asyncio.to_thread(subprocess.run, cmd)  # from another thread
        seen.append(("popen", rc, done.returncode))
        res = await host.run(cmd, merge_stderr=True, env=ENV)  # rtax's posix_spawn path
        seen.append(("spawn" if spawn.available() else "popen+pidfd", rc, res.returncode))
        pid = os.fork()
        if pid == 0:
            os._exit(rc)
        seen.append(("fork", rc, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))
        pids = [os.posix_spawn("/bin/sh", cmd, ENV) for _ in range(2)]
        for pid in pids:
            seen.append(("posix_spawn", rc, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))
    return seen


@pytest.mark.parametrize("how", ["exec", "shell"])
def test_a_child_uvloop_forks_itself_is_known_as_ours(on: None, how: str) -> None:
    """libuv forks in C, past the wrapped primitives, and waits for its child by pid:
    unregistered, it was the thread's to reap, and `proc.wait()` then never returned."""
    uvloop = pytest.importorskip("uvloop")

    async def run() -> tuple[bool, int]:
        if how == "exec":
            proc = await asyncio.create_subprocess_exec("sh", "-c", "sleep 0.3; exit 3", env=ENV)
        else:
            proc = await asyncio.create_subprocess_shell("sleep 0.3; exit 3", env=ENV)
        known = proc.pid in subreaper._ours
        return known, await asyncio.wait_for(proc.wait(), 30)

    assert uvloop.run(run()) == (True, 3)


def test_own_children_keep_their_exit_status_under_orphan_churn(on: None) -> None:
    stop = threading.Event()
    made = [0]
    before = subreaper.reaped()
    churners = [threading.Thread(target=_churn, args=(stop, made)) for _ in range(2)]
    for t in churners:
        t.start()
    try:
        seen = asyncio.run(_own_children(150))
    finally:
        stop.set()
        for t in churners:
            t.join()
    wrong = [s for s in seen if s[1] != s[2]]
    assert not wrong, f"{len(wrong)} of {len(seen)} statuses forged: {wrong[:10]}"
    # the churn was real: this process adopted and reaped orphans all along
    time.sleep(0.2)
    assert made[0] > 0 and subreaper.reaped() - before >= made[0] // 2


def test_disabled_by_the_environment(tmp_path: Path) -> None:
    code = (
        "from rtax_tui.hosts import subreaper; import json; "
        "print(json.dumps([subreaper.enable_from_env(), subreaper.is_subreaper()]))"
    )
    for value, want in (("0", [False, False]), ("1", [True, True])):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=os.environ | {subreaper.ENV: value},
            capture_output=True,
            check=True,
        ).stdout
        assert json.loads(out) == want


def test_disable_turns_it_off(on: None) -> None:
    assert subreaper.is_subreaper()
    subreaper.disable()
    assert not subreaper.is_subreaper()
    pid = _orphan("0.01")
    assert _ppid(pid) != os.getpid()  # no longer adopted here


def test_a_run_records_whether_its_engine_was_one(tmp_path: Path) -> None:
    """The header's host facts say it, so a recording's teardowns can be read for it."""
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["w"]\n'
        '[workloads.w]\nsteps = [{argv = ["true"]}]\n'
    )
    for value, want in (("0", False), ("1", True)):
        out = tmp_path / f"r{value}.jsonl"
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(out)],
            env=os.environ | {subreaper.ENV: value},
            capture_output=True,
            check=True,
        )
        header = json.loads(out.read_text().splitlines()[0])
        assert header["hosts"]["local"]["subreaper"] is want
