"""Faults during a run that are not a driver's: the recording's disk fills up, the terminal
goes away (SIGHUP), a service manager stops rtax (SIGTERM).

Each is a real `python -m rtax_tui run` on the stage sandbox; each checks what README's
fault table promises: the run stops or goes on as it says, every line already recorded reads
back, and nothing of the run is left on the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model.events import Emitter, SinkError
from rtax_tui.model.recording import RecordingWriteError, RecordingWriter, read_recording
from tests.leftovers import leftovers

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
stage_only = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")


def _profile(tmp_path: Path, steps: str, trials: int) -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ndrivers = ["stage"]\nworkloads = ["w"]\nchannels = ["exec", "shell"]\n'
        f"trials = {trials}\nwarmup = 0\nconcurrency = 2\n"
        f"[workloads.w]\nsteps = [{steps}]\n"
    )
    return prof


def _rtax(*args: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **kw,  # type: ignore[call-overload]
    )


def _gone(run_id: str, within_s: float = 30) -> list[str]:
    deadline = time.monotonic() + within_s
    left = leftovers(run_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftovers(run_id)
    return left


# -- the recording's disk fills up ----------------------------------------------------------


def test_a_writer_cuts_a_failed_line_back_and_takes_nothing_more(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = RecordingWriter.open(path)
    w.write({"type": "run", "n": 1})
    full = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 - every write: ENOSPC
    good = w._stream
    w._stream = full  # the same writer, its disk now full
    with pytest.raises(RecordingWriteError) as info:
        w.write({"type": "x", "pad": "y" * 100})
    assert "No space left on device" in str(info.value) and info.value.lines == 1
    w._stream = good
    w.write({"type": "after"})  # a failed writer takes nothing more
    w.close()
    full.close()
    assert path.read_bytes() == b'{"type":"run","n":1}\n'


def test_the_emitter_drops_a_failed_sink_and_feeds_the_others() -> None:
    seen: list[str] = []
    told: list[str] = []

    def broken(ev: dict[str, object]) -> None:
        raise SinkError("disk full")

    emit = Emitter([broken, lambda ev: seen.append(str(ev["type"]))])
    emit.on_failure = lambda exc: told.append(str(exc))
    emit({"type": "a"})
    emit({"type": "b"})
    assert seen == ["a", "b"] and told == ["disk full"] and len(emit.sinks) == 1


@stage_only
def test_a_full_disk_stops_the_run_and_keeps_every_complete_line(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "rtaxfull", str(disk)], check=True)
    try:
        prof = _profile(tmp_path, '{argv = ["true"]}, {argv = ["true"]}', trials=200)
        out = disk / "r.jsonl"
        proc = _rtax("run", str(prof), "--headless", "-o", str(out))
        _, err = proc.communicate(timeout=300)
        text = err.decode()
        assert proc.returncode == 1, text[-2000:]
        assert "Traceback" not in text
        last = text.strip().splitlines()[-1]
        assert last.startswith(f"rtax: error: {out}: cannot write the recording (No space left")
        raw = out.read_bytes()
        assert raw.endswith(b"\n")  # cut back to its last complete line
        rec = read_recording(out)
        assert not rec.torn_tail and rec.end is None  # the end did not fit: no run_end
        ended = [e for e in rec.events if e["type"] == "trial_end"]
        assert ended, "the disk held some trials"
        assert _gone(rec.header["run_id"]) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- signals ---------------------------------------------------------------------------


@stage_only
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_sighup_and_sigterm_stop_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    tag = f"rtaxhup{os.getpid()}{sig.name}"
    prof = _profile(
        tmp_path, f'{{argv = ["true"]}}, {{argv = ["sh", "-c", "sleep 60; : {tag}"]}}', trials=4
    )
    out = tmp_path / "r.jsonl"
    proc = _rtax("run", str(prof), "--headless", "-o", str(out))
    deadline = time.monotonic() + 60
    while not (out.exists() and b'"i":0' in out.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the first action recorded: trials are running their second step
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err.decode()[-2000:]
    rec = read_recording(out)
    assert rec.end is not None and rec.end["status"] == "interrupted"
    assert any(e["type"] == "action" and e["i"] == 0 for e in rec.events)
    assert _gone(rec.header["run_id"]) == []
