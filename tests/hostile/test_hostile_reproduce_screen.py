"""The console's reproduce screen attacked (docs/boundaries.md, "The console's reproduce
screen: what was tried"): a crafted study's experiment id naming a path, a planted
symlink at --live's temporary name, the running recording a FIFO, /dev/zero, a symlink
or one endless line, a live file not as reproduce writes it, and the console killed
mid-study (the study must not go on alone)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rtax_tui.analysis.studies import load_study
from rtax_tui.commands.reproduce import _write_live
from rtax_tui.model.spec import RtaxError
from rtax_tui.ui.app import RtaxApp
from rtax_tui.ui.reproduce import READ_AT_MOST, ReproduceScreen
from tests.procs import dead
from tests.ui.test_ui_reproduce import _rows, _session, _study
from tests.uiasync import aio, until

END = b'{"type":"trial_end","trial":1}\n'
OTHER = b'{"type":"trial_start","trial":1}\n'

CRAFTED_ID = """\
title = "crafted"
source = "a crafted study"

[experiments.{eid}]
what = "escapes its directory"
profile = "t0"
drivers = ["local"]
quick = {{ trials = 1, warmup = 0 }}

[[tables]]
id = "t"
title = "t"
conditions = "none"
"""


@pytest.mark.parametrize("eid", ['"../escaped"', '"/tmp/escaped"', '"a/b"', '".hidden"',
                                 '"x\\u001b]52;c;b3du\\u0007"', '""'])  # fmt: skip
def test_an_experiment_id_naming_a_path_is_refused(tmp_path: Path, eid: str) -> None:
    """The id names the experiment's recording, `DIR/ID.jsonl`: `../x` or `/tmp/x` wrote
    it (and the console then read it) outside the study's directory."""
    path = tmp_path / "crafted.toml"
    path.write_text(CRAFTED_ID.format(eid=eid))
    with pytest.raises(RtaxError) as err:
        load_study(str(path))
    assert "experiments:" in str(err.value) and "\x1b" not in str(err.value)


def test_lives_temporary_is_never_a_planted_symlink(tmp_path: Path) -> None:
    """`--live DIR/F`'s temporary was `DIR/.F.tmp`, written through whatever was there:
    in a directory another user can write (`--live /tmp/x.json`) a symlink planted there
    had rtax overwrite the file it points to."""
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    live = tmp_path / "live.json"
    (tmp_path / ".live.json.tmp").symlink_to(victim)
    _write_live(live, {"tables": []})
    assert victim.read_text() == "keep me"
    assert json.loads(live.read_text()) == {"tables": []}
    assert not live.is_symlink() and live.stat().st_mode & 0o077 == 0
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".live.json.tmp", "live.json", "victim"]  # its own temporary gone


def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(fn(*args)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "blocked"
    return got[0]


def test_a_fifo_dev_zero_or_symlink_as_the_recording_neither_blocks_nor_is_read(
    tmp_path: Path,
) -> None:
    """The count is read on the console's only thread: a FIFO at the recording's path
    blocked it (the console frozen) at open; /dev/zero was read 4 MB at a time, 10 times
    a second, forever; a symlink led the reading anywhere."""
    scr = ReproduceScreen("pvisor")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert _in_thread(scr._trials_ended, str(fifo)) == 0
    assert _in_thread(scr._trials_ended, "/dev/zero") == 0
    real = tmp_path / "real.jsonl"
    real.write_bytes(END * 3)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert _in_thread(scr._trials_ended, str(link)) == 0
    assert _in_thread(scr._trials_ended, str(real)) == 3
    assert _in_thread(scr._trials_ended, "bad\0path") == 0  # a NUL in it: no ValueError


def test_a_line_longer_than_a_read_does_not_stop_the_count(tmp_path: Path) -> None:
    """A recording line longer than one read (4 MB, a step's huge output) was read again
    from its start at every tick and nothing after it was ever counted."""
    scr = ReproduceScreen("pvisor")
    rec = tmp_path / "rec.jsonl"
    rec.write_bytes(END + OTHER[:-2] + b"x" * (READ_AT_MOST * 2 + 17) + b'"}\n' + END + END)
    for _ in range(6):
        n = scr._trials_ended(str(rec))
    assert n == 3
    with rec.open("ab") as f:
        f.write(OTHER + END)
    assert scr._trials_ended(str(rec)) == 4


class _Idle(ReproduceScreen):
    """The screen without a study: its process sleeps; the live file is the test's."""

    def argv(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]


CRAFTED_LIVE = [
    {"tables": [{"rows": 5}], "running": {"recording": "x"}},
    {"tables": [1, "[@click=app.quit]"], "running": None},
    {"tables": [{"rows": [{"ours": "running"}]}], "running": {"recording": 7}},
    {"tables": [{"title": "[@click=app.quit]", "rows": [{"label": {"deep": [[[]]]}}]}]},
]


@aio
async def test_a_live_file_not_as_reproduce_writes_it_is_one_line_not_the_console_lost() -> None:
    """A live file whose tables are not reproduce's (rows not a list, a row not a dict, a
    cell of the wrong type) raised in the timer's redraw: the whole console ended."""
    scr = _Idle("pvisor")
    app = RtaxApp(scr)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(lambda: scr.running)
        for i, doc in enumerate(CRAFTED_LIVE):
            tmp = scr.live.with_name(f"t{i}")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, scr.live)
            await until(lambda: "cannot be drawn" in scr.news)
            await pilot.pause(0.3)
            assert app.is_running and app.screen is scr
            scr.news = ""
        scr.live.write_text('{"tables": [], "x": NaN}')  # not JSON: the tables before kept
        await pilot.pause(0.3)
        assert app.is_running
        await pilot.press("q")
        await until(lambda: scr.returncode is not None)


@pytest.mark.slow
def test_the_console_killed_mid_study_stops_the_study_and_keeps_what_ran(tmp_path: Path) -> None:
    """The console SIGKILLed: the study (its own session, so no ^C of the terminal reaches
    it) went on alone for as long as it lasted, then died of EPIPE at its next progress
    line, before report.json. Now its stdin is the console's: its end stops the study
    as ^C does."""
    study = _study(tmp_path, second=3000)
    live = tmp_path / "live.json"
    scr = ReproduceScreen(str(study), "quick", ["local"], root=str(tmp_path / "out"))
    assert "--control" in scr.argv()
    argv = [sys.executable, "-m", "rtax_tui", "reproduce", str(study), "--driver", "local",
            "--root", str(tmp_path / "out"), "--live", str(live), "--control"]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                doc = json.loads(live.read_text())
            except (OSError, ValueError):
                doc = None
            if doc and (doc.get("running") or {}).get("experiment") == "second":
                rec = Path(doc["running"]["recording"])
                if rec.exists() and b"trial_end" in rec.read_bytes():
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("the study never ran its second experiment")
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.close()  # what the console's death does to both pipes
        proc.stderr.close()
        assert proc.wait(90) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert dead(proc.pid) and _session(proc.pid) == []
    (out,) = (tmp_path / "out").iterdir()
    report = json.loads((out / "report.json").read_text())
    assert report["not_run"] == {"second": "interrupted"}
    assert _rows(report)["first completion"]["ours"]["n"] == 3


@aio
async def test_a_second_study_is_refused_while_one_runs_below() -> None:
    """R was refused on the reproduce screen itself, but `n` (the launcher) above it and
    then R started a second study beside the first: each measured under the other."""
    from rtax_tui.ui.launcher import LauncherScreen
    from rtax_tui.ui.reproduce import PickStudy

    scr = _Idle("pvisor")
    app = RtaxApp(scr)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(lambda: scr.running)
        await pilot.press("n")
        await until(lambda: isinstance(app.screen, LauncherScreen))
        await pilot.press("R")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, PickStudy)
        assert any("already running" in str(n.message) for n in app._notifications)


WATCHER = (
    "import sys, time\n"
    "from rtax_tui.commands.reproduce import _CONSOLE, _stop_when_stdin_ends\n"
    "_stop_when_stdin_ends()\n"
    # the runs arm late (the watcher has long seen the end): its ^C waits for them
    "time.sleep(float(sys.argv[1]))\n"
    "try:\n    _CONSOLE.arm()\n    time.sleep(3)\n    _CONSOLE.disarm()\n"
    "except KeyboardInterrupt:\n    raise SystemExit(130)\n"
)


@pytest.mark.parametrize("arm_after", ["0", "0.5"], ids=["armed-at-once", "armed-late"])
@pytest.mark.parametrize(
    ("said", "rc"),
    [(b"", 130), (b"stop\n", 0), (b"x" * 70_000, 130)],
    ids=["end", "stop-then-end", "endless"],
)
def test_the_end_of_stdin_interrupts_once_unless_the_console_stopped_it_itself(
    said: bytes, rc: int, arm_after: str
) -> None:
    """`q` (a `stop` line, then ^C), then the console killed within the stop's grace: the
    end of stdin sent a second ^C, which can end rtax reproduce before its report.json.
    After `stop` its end sends none; without, it sends one; endless input is its end.
    An end before the runs are armed (stdin already ended at the start) is raised when
    they arm, inside the `try` that writes report.json, not as a ^C that killed rtax
    reproduce before it (rc -2)."""
    proc = subprocess.run(
        [sys.executable, "-c", WATCHER, arm_after],
        input=said,
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
        # as a console started in a shell's background (no job control) would start it:
        # SIGINT ignored, which the watcher's ^C must not be
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.returncode == rc, proc.stderr


def test_a_screen_made_and_never_shown_leaves_no_directory(tmp_path: Path, monkeypatch) -> None:
    """Its live file's directory was made when the screen was built: every screen built
    and never shown (a test's, one refused) left an empty `rtax-reproduce-*` behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scr = ReproduceScreen("pvisor")
    assert scr._trials_ended(str(tmp_path / "none.jsonl")) == 0
    del scr
    assert list(tmp_path.iterdir()) == []
