"""The console says what it knows and no more (issue 39, "Honesty"): the launcher's
estimate says which cells it leaves out and why, a replay's time left is its
recording's, compare pairs as `rtax compare` does, an n/a is no broken promise, and
every figure carries its unit in one style."""

from __future__ import annotations

import asyncio
import functools
import re
from pathlib import Path

from rtax_tui.analysis.history import Estimate
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.monitor import MonitorScreen
from tests.screentext import widget_lines

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
