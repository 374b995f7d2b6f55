"""The engine as the console runs it: events on stdout, a kept file, commands on stdin."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from rtax_tui.model.recording import read_recording


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


class _Lines:
    """The engine's stdout read by a thread, one parsed event at a time."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.q: queue.Queue = queue.Queue()
        self.t = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        self.t.start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.q.put(orjson.loads(line))
        self.q.put(None)

    def until(self, pred, timeout: float = 60) -> list[dict]:
        evs: list[dict] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ev = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if ev is None:
                break
            evs.append(ev)
            if pred(evs):
                return evs
        raise AssertionError(f"stream ended or timed out after {len(evs)} events")

    def drain(self, quiet_s: float) -> list[dict]:
        """Everything that arrives until none of the run's own events has come for
        `quiet_s`: the noise sampler's (hosts/noise.py, about 1 Hz) are the machine's,
        measured while the run is paused too, and do not count as the run going on."""
        evs: list[dict] = []
        quiet_until = time.monotonic() + quiet_s
        while True:
            try:
                ev = self.q.get(timeout=max(0.0, quiet_until - time.monotonic()))
            except queue.Empty:
                return evs
            if ev is None:
                return evs
            evs.append(ev)
            if ev["type"] != "noise":
                quiet_until = time.monotonic() + quiet_s

    def rest(self) -> list[dict]:
        self.t.join(60)
        return self.drain(0.01)


def _ends(evs: list[dict]) -> int:
    return sum(1 for e in evs if e["type"] == "trial_end")


def test_pause_resume_stop_over_stdin_and_the_file_matches_the_stream(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    proc = _start(tmp_path, record)
    lines = _Lines(proc)
    try:
        evs = lines.until(lambda e: _ends(e) >= 10)
        proc.stdin.write(b"pause\n")
        proc.stdin.flush()
        evs += lines.drain(1.0)  # the trial in flight finishes; none starts after it
        starts_paused = sum(1 for e in evs if e["type"] == "trial_start")
        assert _ends(evs) == starts_paused  # nothing left in flight
        paused = lines.drain(1.0)
        evs += paused  # the machine's samples: the file has them too
        assert [e for e in paused if e["type"] != "noise"] == [], "events kept coming while paused"
        proc.stdin.write(b"resume\n")
        proc.stdin.flush()
        evs += lines.until(lambda e: _ends(e) >= 10)
        assert sum(1 for e in evs if e["type"] == "trial_start") > starts_paused
        proc.stdin.write(b"stop\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 130
        evs += lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "interrupted"
    kept = read_recording(record)
    assert [kept.header, *kept.events] == evs  # the same events, in the same order
    assert b"rtax" not in proc.stderr.read()  # --quiet: no report


def test_end_of_input_stops_the_run(tmp_path: Path) -> None:
    """A console that dies closes the engine's stdin: the run ends and tears down."""
    record = tmp_path / "r.jsonl"
    proc = _start(tmp_path, record)
    try:
        lines = _Lines(proc)
        lines.until(lambda e: _ends(e) >= 3)
        proc.stdin.close()
        lines.rest()
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
    ex = Path(__file__).resolve().parents[2] / "recordings/examples/t0-local-stage.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "replay", str(ex)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 2 and "rtax report" in res.stderr
