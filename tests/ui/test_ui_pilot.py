"""The console driven by keys (Textual's pilot): replay, run, compare, project, help."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from rtax_tui.analysis.report import build_report, project_report
from rtax_tui.model.recording import read_recording
from rtax_tui.render.tables import fmt_num
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.feeds import engine_argv
from rtax_tui.ui.histogram import Histogram
from rtax_tui.ui.modals import HelpScreen, ProjectPanel
from rtax_tui.ui.monitor import MonitorScreen
from tests.consolerecs import (
    OTHER,
    SHAKY,
    STEADY,
    header,
    marked_run,
    noise,
    programs,
    trials,
    write,
)
from tests.procs import dead
from tests.screentext import widget_lines
from tests.uiasync import aio, until

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
T0 = EXAMPLES / "t0-local-stage.jsonl"
T2 = EXAMPLES / "t2-local-stage.jsonl"
SIZE = (120, 40)


def _text(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


@aio
async def test_replay_keys_select_cells_toggle_axis_and_finish() -> None:
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MonitorScreen)
        await until(lambda: scr.ended)
        await pilot.pause(0.2)
        first = _text(scr, "#selected")
        assert "local/local/t0/exec" in first
        await pilot.press("s")
        await pilot.pause(0.15)
        assert "local/local/t0/shell" in _text(scr, "#selected")
        await pilot.press("S", "S")
        await pilot.pause(0.15)
        assert "local/stage/t0/shell" in _text(scr, "#selected")  # wraps around
        hist = scr.query_one("#h-action", Histogram)
        assert hist.log_axis and "log" in str(hist.render())
        await pilot.press("l")
        await pilot.pause(0.15)
        assert not hist.log_axis and "lin" in str(hist.render())
        assert "trials 36/36" in _text(scr, "#progress") and "completed" in _text(scr, "#progress")
        assert "end" in _text(scr, "#position")
        await pilot.press("q")
    assert app.return_code == 0


@aio
async def test_replay_pause_step_speed_and_restart() -> None:
    app = RtaxApp(replay_screen(str(T2), 1.0))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        feed = scr.replay
        assert feed is not None and feed.speed == 1.0
        await until(lambda: scr.state.ended >= 1)
        await pilot.press("space")
        await pilot.pause(0.1)
        assert feed.paused
        pos = feed.pos
        await pilot.pause(0.5)
        assert feed.pos == pos  # paused: nothing more is played
        ended = scr.state.ended
        await pilot.press("full_stop")
        await pilot.pause(0.1)
        assert scr.state.ended == ended + 1  # one step: up to the next trial's end
        assert feed.events[feed.pos - 1]["type"] == "trial_end" and feed.paused
        for key, speed in (("2", 2.0), ("0", 10.0), ("1", 1.0)):
            await pilot.press(key)
            assert feed.speed == speed
        await pilot.press("m", "space")  # as fast as possible, resumed
        await until(lambda: scr.ended)
        assert scr.state.status == "completed"
        n_events = len(scr.events)
        assert n_events == len(feed.events)
        await pilot.press("r")  # restart from the beginning
        await pilot.pause(0.05)
        assert scr.replay is not feed and len(scr.events) < n_events
        await pilot.press("q")


@aio
async def test_project_panel_recomputes_when_its_inputs_change() -> None:
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.press("p")
        await pilot.pause(0.3)
        panel = app.screen
        assert isinstance(panel, ProjectPanel)
        table = panel.query_one("#proj")
        await until(lambda: table.row_count == 4)
        want = project_report(read_recording(T0), 1_000_000, 150)
        rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(4)}
        for c in want["cells"]:
            assert rows[c["cell"]][2] == fmt_num(c["worker_hours"])
        steps = panel.query_one("#s")
        steps.value = "10"
        await pilot.pause(0.5)
        want10 = project_report(read_recording(T0), 1_000_000, 10)
        await until(
            lambda: str(table.get_row_at(0)[2]) == fmt_num(want10["cells"][0]["worker_hours"])
        )
        steps.value = "ten"
        await pilot.pause(0.2)
        assert "whole numbers" in str(panel.query_one("#proj-note").render())
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.screen is scr
        await pilot.press("q")


def _slower_copy(src: Path, dst: Path, cell: str, factor: int) -> None:
    """`src` with every duration of `cell`'s trials multiplied by `factor`."""
    trials: set[int] = set()
    out = []
    for line in src.read_bytes().splitlines():
        ev = orjson.loads(line)
        if ev["type"] == "trial_start" and ev["cell"] == cell:
            trials.add(ev["trial"])
        if ev.get("trial") in trials and "dur_ns" in ev:
            ev["dur_ns"] *= factor
        out.append(orjson.dumps(ev))
    dst.write_bytes(b"\n".join(out) + b"\n")


@aio
async def test_compare_screen_says_b_is_slower(tmp_path: Path) -> None:
    slow = tmp_path / "slow.jsonl"
    _slower_copy(T0, slow, "local/stage/t0/exec", 3)
    app = RtaxApp(CompareScreen(str(T0), str(slow)))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        table = scr.query_one("#cmp")
        await until(lambda: table.row_count > 0)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        by = {(r[0], r[1]): r for r in rows}
        col = [str(c.label) for c in table.ordered_columns].index
        # b is 3x slower: beyond the practical threshold, significant after Holm
        assert by[("local/stage/t0/exec", "total")][col("b is")] == "slower"
        assert by[("local/stage/t0/exec", "total")][col("b/a")] == "3.00×"
        assert by[("local/local/t0/exec", "total")][col("b is")] == "same"  # untouched cell
        assert by[("local/local/t0/exec", "total")][col("b − a")] == "0ms"
        await pilot.press("q")
    assert app.return_code == 0


@aio
async def test_help_opens_and_closes() -> None:
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        assert "speed" in " ".join(widget_lines(app, app.screen.query_one("#dialog")))
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert isinstance(app.screen, MonitorScreen)
        await pilot.press("q")


@aio
async def test_a_small_terminal_gets_a_message_not_a_crash() -> None:
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=(60, 16)) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.pause(0.2)
        assert scr.has_class("too-small")
        assert "needs at least 80×24" in _text(scr, "#too-small")
        assert not scr.query_one("#main").display
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert not scr.has_class("too-small") and scr.query_one("#main").display
        await pilot.press("q")
    assert app.return_code == 0


def _profile(tmp_path: Path, trials: int) -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(
        f'[run]\nseed = 3\ntrials = {trials}\nwarmup = 0\ndrivers = ["local"]\n'
        'workloads = ["t0"]\nchannels = ["shell"]\n'
    )
    return prof


def _live_app(tmp_path: Path) -> tuple[RtaxApp, MonitorScreen, Path]:
    """The console on a real engine running a long T0 (local, shell) profile."""
    record = tmp_path / "live.jsonl"
    argv = engine_argv(str(_profile(tmp_path, 100_000)), [], str(record))
    scr = MonitorScreen("run", engine_argv=argv, record_path=str(record), title="t")
    return RtaxApp(scr), scr, record


@aio
async def test_run_screen_pauses_resumes_and_stops_a_real_engine(tmp_path: Path) -> None:
    app, scr, record = _live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: scr.state.ended >= 20, 60)
        engine = scr.engine
        assert engine is not None and engine.running
        pid = engine.proc.pid
        await pilot.press("space")
        await pilot.pause(0.5)  # trials in flight finish
        paused_at = scr.state.ended
        await pilot.pause(0.6)
        assert scr.state.ended == paused_at, "trials kept starting while paused"
        await pilot.press("space")
        await until(lambda: scr.state.ended > paused_at + 10)
        await pilot.press("x")
        await until(lambda: scr.ended, 60)
        assert scr.returncode == 130 and scr.state.status == "interrupted"
        assert "interrupted" in _text(scr, "#progress")
        await pilot.press("q")
    assert app.return_code == 130
    assert dead(pid)
    rec = read_recording(record)  # the file the engine kept is complete and says why it ended
    assert rec.end is not None and rec.end["status"] == "interrupted"
    rep = build_report(rec)
    assert rep["cells"][0]["n"] == scr.state.cells["local/local/t0/shell"].n


@aio
async def test_quitting_during_a_run_stops_the_engine_and_keeps_the_recording(tmp_path) -> None:
    app, scr, record = _live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: scr.state.ended >= 5, 60)
        pid = scr.engine.proc.pid
        await pilot.press("q")
        await until(lambda: not scr.engine.running, 60)
        await pilot.pause(0.2)
    assert dead(pid)
    assert read_recording(record).end["status"] == "interrupted"


class _ExitingEngine:
    """A stand-in for an engine that has written its end and is still exiting."""

    running, stopping, paused = True, False, False
    shutdowns = 0

    async def shutdown(self) -> None:
        self.shutdowns += 1


@aio
async def test_q_after_the_run_ended_but_before_its_engine_exited_goes_back(tmp_path) -> None:
    """The run's end is shown as soon as the engine writes it; the engine then still
    closes its hosts. A `q` in that window once quit rtax altogether (the launcher's
    test in tmux caught it under load): it waits for the engine and goes back."""
    from textual.screen import Screen

    from rtax_tui.ui.monitor import FeedEnded

    first: Screen[int] = Screen()
    app = RtaxApp(first)
    scr = MonitorScreen("run", engine_argv=["true"], record_path=str(tmp_path / "r.jsonl"))
    scr._run_engine = _no_engine  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await app.push_screen(scr)
        engine = _ExitingEngine()
        scr.engine = engine  # type: ignore[assignment]
        scr.state.status = "completed"
        await pilot.press("q")
        await pilot.pause(0.2)
        assert app.screen is scr and engine.shutdowns == 0  # nothing to stop: it ended
        engine.running = False
        scr.post_message(FeedEnded(0))
        await until(lambda: app.screen is first, 10)
        assert app.is_running  # back, not out of rtax
        assert scr.returncode == 0


async def _no_engine() -> None:
    return None


@aio
async def test_a_run_that_cannot_start_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\ndrivers = ["nonesuch"]\n')
    record = tmp_path / "never.jsonl"
    scr = MonitorScreen(
        "run", engine_argv=engine_argv(str(bad), [], str(record)), record_path=str(record)
    )
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: scr.ended, 60)
        assert scr.returncode == 2 and scr.state.header is None
        assert any("nonesuch" in line for line in scr.log_lines)
        assert "engine exited (2)" in _text(scr, "#progress")
        await pilot.press("q")
    assert app.return_code == 2
    assert not record.exists()


def test_engine_argv_runs_headless_with_a_control_channel() -> None:
    argv = engine_argv("p.toml", ["--trials", "3"], "r.jsonl")
    assert argv[:4] == [sys.executable, "-m", "rtax_tui", "run"]
    i = argv.index("-o")
    assert argv[i + 1] == "-" and "--control" in argv and "--headless" in argv
    assert argv[argv.index("--record") + 1] == "r.jsonl"


def _rows(table) -> dict[str, list[str]]:
    """The cell table's rows by their key (the cell id), each cell as shown."""
    return {
        str(row.key.value): [str(c) for c in table.get_row(row.key)] for row in table.ordered_rows
    }


@aio
async def test_replay_marks_unstable_cells_programs_rough_figures_and_precision(
    tmp_path: Path,
) -> None:
    path = marked_run(tmp_path / "marks.jsonl")
    app = RtaxApp(replay_screen(str(path), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.pause(0.2)
        table = scr.query_one("#cells")
        heads = [str(c.label) for c in table.ordered_columns]
        rows = _rows(table)
        # the markup in a cell's name is shown as it is, with the mark after it
        assert rows[SHAKY][0] == f"{SHAKY} ⚠"
        assert rows[STEADY][0] == f"{STEADY} ≠" and rows[OTHER][0] == f"{OTHER} ≠"
        # five samples: rough, as the report marks them; twenty: not
        create = heads.index("create\nP50")
        total95 = heads.index("total\nP95")
        assert rows[OTHER][create].startswith("~") and rows[OTHER][total95].startswith("~")
        assert not rows[STEADY][create].startswith("~")
        prec = heads.index("\nprecision")
        # the verdicts the report works out from the trials (not the events' own say)
        want = {c["cell"]: c for c in build_report(read_recording(path))["precision"]["cells"]}

        def shown(cell: str) -> str:
            c = want[cell]
            return c["verdict"] + (f" ±{c['within'] * 100:.1f}%" if c["within"] is not None else "")

        assert want[STEADY]["verdict"] == "precise" and want[SHAKY]["verdict"] == "wide"
        assert rows[STEADY][prec] == shown(STEADY) and rows[SHAKY][prec] == shown(SHAKY)
        # the selected cell's reasons, in the report's words
        await pilot.press("s")
        await pilot.pause(0.2)
        sel = _text(scr, "#selected")
        assert f"selected: {SHAKY}" in sel
        assert "⚠ may be unstable: load 4.0 on 2 cores during 55% of this cell's trials" in sel
        assert f"precision ±5% after round 1: {shown(SHAKY)}, n 20 of 20" in sel
        await pilot.press("s")
        await pilot.pause(0.2)
        sel = _text(scr, "#selected")
        assert f"≠ programs differ from {STEADY}: python3 /usr/bin/python3 vs " in sel
        assert "~: fewer than 10 samples" in sel
        await pilot.press("q")


@aio
async def test_a_precision_run_shows_each_cells_verdict_as_the_engine_checks(
    tmp_path: Path,
) -> None:
    record = tmp_path / "prec.jsonl"
    argv = engine_argv(
        str(_profile(tmp_path, 10)), ["--precision", "50%", "--max-trials", "30"], str(record)
    )
    scr = MonitorScreen("run", engine_argv=argv, record_path=str(record), title="t")
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: scr.ended, 120)
        await pilot.pause(0.2)
        assert scr.returncode == 0, list(scr.log_lines)
        table = scr.query_one("#cells")
        heads = [str(c.label) for c in table.ordered_columns]
        (row,) = _rows(table).values()
        want = build_report(read_recording(record))["precision"]
        (cell,) = want["cells"]
        reach = f" ±{cell['within'] * 100:.1f}%" if cell["within"] is not None else ""
        assert row[heads.index("\nprecision")] == cell["verdict"] + reach
        assert f"after round {want['rounds']}" in _text(scr, "#selected")
        await pilot.press("q")


@aio
async def test_compare_screen_flags_programs_that_differ_and_unstable_cells(
    tmp_path: Path,
) -> None:
    cells = {STEADY: [100.0] * 20, SHAKY: [100.0] * 20}
    a = write(tmp_path / "a.jsonl", [header({"name": "p"}), *trials(cells),
                                     programs(STEADY, "/usr/bin/python3")])  # fmt: skip
    b = write(tmp_path / "b.jsonl", [
        header({"name": "p"}, "2026-12-01T01:00:00+00:00"), *trials(cells),
        programs(STEADY, "/root/.pyenv/shims/python3"),
        noise(2.0), noise(3.0), noise(4.0), noise(5.0, load1=4.0, swap_in=12, swap_out=3),
    ])  # fmt: skip
    app = RtaxApp(CompareScreen(str(a), str(b)))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        table = scr.query_one("#cmp")
        await until(lambda: table.row_count > 0)
        names = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert names == {f"{STEADY} ≠", f"{SHAKY} ⚠"}  # markup shown as it is
        flags = _text(scr, "#cmp-flags")
        assert (
            f"≠ {STEADY} vs {STEADY}: programs differ: python3 /usr/bin/python3 vs "
            "/root/.pyenv/shims/python3" in flags
        )
        assert f"⚠ b (run-2026-12-01T01:00:00+00:00): {SHAKY}: may be unstable: load 4.0" in flags
        await pilot.press("q")
