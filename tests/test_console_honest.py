"""The console says what it knows and no more (issue 39, "Honesty"): the launcher's
estimate says which cells it leaves out and why, a replay's time left is its
recording's, compare pairs as `rtax compare` does, an n/a is no broken promise, and
every figure carries its unit in one style."""

from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from textual.widgets import DataTable, Static

from rtax_tui.analysis import history as core_history
from rtax_tui.analysis.history import Estimate
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.modals import PickRecording
from rtax_tui.ui.monitor import MonitorScreen
from tests.screentext import screen_lines, widget_lines

EXAMPLES = Path(__file__).resolve().parents[1] / "recordings" / "examples"
T0 = EXAMPLES / "t0-local-stage.jsonl"
MIXED = EXAMPLES / "t0-stage-docker-libvirt-microvm.jsonl"  # 118 s, its first trial in 0.09 s
SIZE = (120, 40)


def aio(fn):
    """Run an async test in its own event loop (no pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def _until(cond, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def test_the_estimate_says_cells_without_an_earlier_timing_not_never_run() -> None:
    """A cell missing from the recordings here may have run elsewhere or long ago: the
    plan said `(+ 1 of 6 cells never run)`."""
    est = Estimate(12.0, ("a", "b", "c", "d", "e"), ("f",))
    assert est.text() == "≈ 12s (not counting 1 of 6 cells: no earlier timing)", est.text()
    assert "never run" not in est.text()


@aio
async def test_a_replays_time_left_is_the_rest_of_its_recording() -> None:
    """At 1×, paused after a trial: `~Ns left` is the position line's end minus its
    position (it said `~20s left` beside `0.95s / 118.43s`, from the trial rate)."""
    app = RtaxApp(replay_screen(str(MIXED), 1.0))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MonitorScreen) and scr.replay is not None
        await _until(lambda: scr.state.ended >= 1)
        await pilot.press("space")
        await pilot.pause(0.3)
        progress = " ".join(widget_lines(app, scr.query_one("#progress")))
        position = " ".join(widget_lines(app, scr.query_one("#position")))
        now, end = (float(x) for x in re.findall(r"([\d.]+)s / ([\d.]+)s", position)[0])
        left = re.search(r"~(\d+)s left", progress)
        assert left is not None, progress
        assert abs(int(left[1]) - (end - now)) <= 1, (progress, position)
        await pilot.press("q")


# -- compare: one rule everywhere --------------------------------------------------------


def _variant(src: Path, dest: Path, workload: str | None = None, profile: str = "") -> Path:
    """A copy of a recording; with `workload`, its t0 cells renamed to run that one (a
    `local/mine` beside `local/t0`); with `profile`, the header's profile renamed."""
    out = []
    for raw in src.read_bytes().splitlines():
        ev = orjson.loads(raw)
        if workload and "cell" in ev:
            ev["cell"] = ev["cell"].replace("/t0/", f"/{workload}/")
            ev["workload"] = workload
        if profile and ev.get("type") == "run":
            ev["profile"]["name"] = profile
        out.append(orjson.dumps(ev))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"\n".join(out) + b"\n")
    return dest


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of its own; no shipped examples (the picker lists only ours)."""
    monkeypatch.chdir(tmp_path)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(core_history, "SHIPPED", shipped)
    return tmp_path


@aio
async def test_compare_refuses_what_rtax_compare_refuses_and_says_why_in_the_table(here) -> None:
    """`local/t0` against `local/mine` (`true` against another program): `rtax compare`
    refuses them, with or without --changed; the console's compare showed an empty table
    with the reason on the status line only. Now no table: the reason and both runs'
    cells where the table would be."""
    mine = _variant(T0, here / "mine.jsonl", workload="mine")
    for extra in ([], ["--changed"]):
        cli = subprocess.run(
            [sys.executable, "-m", "rtax_tui", "compare", str(T0), str(mine), *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cli.returncode != 0 and "no cell with samples in common" in cli.stderr
    app = RtaxApp(CompareScreen(str(T0), str(mine)))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        empty = scr.query_one("#cmp-empty", Static)
        await _until(lambda: empty.display)
        await pilot.pause(0.1)
        assert not scr.query_one("#cmp", DataTable).display
        said = "\n".join(widget_lines(app, empty))
        assert "No cell with samples in both runs" in said, said
        assert "never across workloads" in said
        assert "local/local/t0/exec" in said and "local/local/mine/exec" in said
        await pilot.press("q")


@aio
async def test_the_picker_offers_only_recordings_compare_pairs_with_profile_time_and_cells(
    here,
) -> None:
    """The picker listed every file under ./recordings by bare name, `local/mine` too.
    Now: only recordings with a cell the compare pairs, each with its start, profile and
    cells paired; the others counted. A recording's name and profile are its writer's
    text: an escape sequence in either is shown, never sent to the terminal."""
    rec = here / "recordings"
    _variant(T0, rec / "again.jsonl", profile="t0again")
    _variant(T0, rec / "mine.jsonl", workload="mine")
    evil = _variant(T0, rec / "evil\x1b]52;c;QUJD\x07.jsonl", profile="p\x1b[2Jwned")
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await _until(lambda: scr.ended)
        await pilot.press("c")
        await _until(lambda: isinstance(app.screen, PickRecording))
        picker = app.screen
        note = picker.query_one("#picks-note", Static)
        await _until(lambda: "recordings share" in str(note.render()))
        await pilot.pause(0.1)
        assert sorted(Path(p).name for p in picker.offered) == sorted(["again.jsonl", evil.name])
        lines = widget_lines(app, picker.query_one("#picks", DataTable))
        row = next(ln for ln in lines if "again.jsonl" in ln)
        assert "t0again" in row and "4 of 4" in row and "2026-11-29 20:13" in row, row
        said = "\n".join(lines + widget_lines(app, note))
        assert "mine.jsonl" not in said and "1 more share no cell: not listed" in said, said
        assert "\\x1b]52" in said and "p\\x1b[2Jwned" in said  # shown, not sent
        assert not any("\x1b" in ln or "\x07" in ln for ln in screen_lines(app))
        await pilot.press("enter")
        await _until(lambda: isinstance(app.screen, CompareScreen))
        assert app.screen.path_b in picker.offered
