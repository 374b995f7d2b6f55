"""The real program in a real terminal: tmux runs `rtax replay`, we read the screen."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import dead

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "recordings/examples/t0-local-stage.jsonl"

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (scripts/bootstrap installs it)"
)


# pytest exports COLUMNS=80 and LINES=24; a program in tmux would believe them
# (shutil.get_terminal_size reads them first) instead of its terminal's real size.
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", sock, *args], capture_output=True, text=True, check=True, timeout=30, env=ENV
    ).stdout


def _wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_replay_in_a_real_terminal_draws_cells_and_histograms_then_quits(tmp_path) -> None:
    sock = f"rtax-test-{os.getpid()}"
    rc_file = tmp_path / "rc"
    cmd = (
        f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m rtax_tui replay "
        f"{EXAMPLE} --speed max; echo $? > {shlex.quote(str(rc_file))}; sleep 30"
    )
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "120", "-y", "40", cmd)
    try:
        pane_pid = int(_tmux(sock, "list-panes", "-t", "t", "-F", "#{pane_pid}").strip())

        def screen() -> str:
            return _tmux(sock, "capture-pane", "-t", "t", "-p")

        def finished() -> str | None:
            s = screen()
            return s if "run completed" in s else None

        text = _wait_for(finished, 60, "the replay's end")
        for cell in ("local/local/t0/exec", "local/stage/t0/shell"):
            assert cell in text
        assert "╭─ action" in text and "█" in text and "▲" in text  # a drawn histogram
        assert "P50" in text and "trials 36/36" in text
        kids = subprocess.run(
            ["pgrep", "-P", str(pane_pid)], capture_output=True, text=True
        ).stdout.split()
        rtax_pids = [int(p) for p in kids if "rtax_tui" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(rtax_pids) == 1
        _tmux(sock, "send-keys", "-t", "t", "q")
        _wait_for(rc_file.exists, 30, "rtax to exit")
        assert rc_file.read_text().strip() == "0"
        assert dead(rtax_pids[0])
        # the terminal is given back: no alternate screen left, a shell prompt state
        assert "run completed" not in screen()
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def test_rtax_home_in_a_real_terminal_runs_what_the_launcher_shows(tmp_path) -> None:
    """`rtax home PROFILE`: the launcher, enter runs it, the recording and the profile
    beside it are written in ./recordings; q back to the launcher, escape quits."""
    sock = f"rtax-test-home-{os.getpid()}"
    rc_file = tmp_path / "rc"
    prof = tmp_path / "tiny.toml"
    prof.write_text(
        '[run]\ntrials = 3\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["t0"]\n'
        'channels = ["exec"]\n'
    )
    cmd = (
        f"cd {shlex.quote(str(tmp_path))} && PYTHONPATH={shlex.quote(str(ROOT))} "
        f"{shlex.quote(sys.executable)} -m rtax_tui home tiny.toml; "
        f"echo $? > {shlex.quote(str(rc_file))}; sleep 30"
    )
    _tmux(sock, "new-session", "-d", "-s", "t", "-x", "120", "-y", "40", cmd)
    try:

        def screen() -> str:
            return _tmux(sock, "capture-pane", "-t", "t", "-p")

        def showing(*what: str) -> str | None:
            text = screen()
            return text if all(w in text for w in what) else None

        # (a capture can catch the first frame half drawn: wait for all of it)
        _wait_for(lambda: showing("plan: 1 cells, 3 trials", "run: tiny", "host (rtax doctor)"),
                  60, "the launcher")  # fmt: skip
        _tmux(sock, "send-keys", "-t", "t", "Enter")
        text = _wait_for(lambda: showing("run completed"), 120, "the run's end")
        assert "local/local/t0/exec" in text and "trials 3/3" in text
        recs = sorted((tmp_path / "recordings").iterdir())
        assert [p.suffix for p in recs] == [".jsonl", ".toml"]
        assert f"rtax run {Path('recordings') / recs[1].name}" in recs[1].read_text()
        _tmux(sock, "send-keys", "-t", "t", "q")
        _wait_for(lambda: "rtax launcher" in screen(), 30, "back in the launcher")
        _tmux(sock, "send-keys", "-t", "t", "Escape")
        _wait_for(rc_file.exists, 60, "rtax to exit")
        assert rc_file.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
