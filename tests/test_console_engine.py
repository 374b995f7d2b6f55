"""The engine as the console runs it: events on stdout, a kept file, commands on stdin."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from rtax_tui.core.recording import read_recording


def _profile(tmp_path: Path, trials: int = 100_000) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(
        f'[run]\ntrials = {trials}\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["t0"]\n'
        'channels = ["shell"]\n'
    )
    return p


def _start(tmp_path: Path, record: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(_profile(tmp_path)), "--headless",
         "-o", "-", "--record", str(record), "--control", "--quiet"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _read_until(proc: subprocess.Popen, pred, timeout: float = 60) -> list[dict]:
    evs = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        evs.append(orjson.loads(line))
        if pred(evs):
            return evs
    raise AssertionError(f"stream ended or timed out after {len(evs)} events")


def _ends(evs: list[dict]) -> int:
    return sum(1 for e in evs if e["type"] == "trial_end")


def test_pause_resume_stop_over_stdin_and_the_file_matches_the_stream(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    proc = _start(tmp_path, record)
    try:
        evs = _read_until(proc, lambda e: _ends(e) >= 10)
        proc.stdin.write(b"pause\n")
        proc.stdin.flush()
        time.sleep(1.0)  # the trial in flight finishes; none starts after it
        os.set_blocking(proc.stdout.fileno(), False)
        time.sleep(0.5)
        chunk = proc.stdout.read() or b""
        os.set_blocking(proc.stdout.fileno(), True)
        evs += [orjson.loads(x) for x in chunk.splitlines()]
        starts_paused = sum(1 for e in evs if e["type"] == "trial_start")
        time.sleep(1.0)
        os.set_blocking(proc.stdout.fileno(), False)
        late = proc.stdout.read() or b""
        os.set_blocking(proc.stdout.fileno(), True)
        assert late == b"", "events kept coming while paused"
        proc.stdin.write(b"resume\n")
        proc.stdin.flush()
        evs += _read_until(proc, lambda e: _ends(e) >= 10)
        assert sum(1 for e in evs if e["type"] == "trial_start") > starts_paused
        proc.stdin.write(b"stop\n")
        proc.stdin.flush()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    evs += [orjson.loads(x) for x in rest.splitlines()]
    assert proc.returncode == 130, err
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "interrupted"
    kept = read_recording(record)
    assert [kept.header, *kept.events] == evs  # the same events, in the same order
    assert b"rtax" not in rest  # --quiet: no report on the stream


def test_end_of_input_stops_the_run(tmp_path: Path) -> None:
    """A console that dies closes the engine's stdin: the run ends and tears down."""
    record = tmp_path / "r.jsonl"
    proc = _start(tmp_path, record)
    try:
        _read_until(proc, lambda e: _ends(e) >= 3)
        proc.stdin.close()
        proc.stdout.read()
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert read_recording(record).end["status"] == "interrupted"


def test_record_without_a_stream_is_refused(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(_profile(tmp_path, 1)), "--headless",
         "-o", str(tmp_path / "a.jsonl"), "--record", str(tmp_path / "b.jsonl")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "rtax: error: --record needs -o - (it names the file kept beside the stream)"
    )


def test_replay_of_a_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"run","t_ns":0}\n')
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "replay", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and str(bad) in res.stderr and "1" in res.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "replay", str(tmp_path / "nope.jsonl")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr


def test_replay_without_a_terminal_points_to_report() -> None:
    ex = Path(__file__).resolve().parents[1] / "recordings/examples/t0-local-stage.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "replay", str(ex)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 2 and "rtax report" in res.stderr
