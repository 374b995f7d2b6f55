"""The console says what it knows and no more (issue 39, "Honesty"): the launcher's
estimate says which cells it leaves out and why, a replay's time left is its
recording's, compare pairs as `rtax compare` does, an n/a is no broken promise, and
every figure carries its unit in one style."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from textual.widgets import DataTable, Static

from rtax_tui.analysis.history import Estimate
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.modals import PickRecording
from rtax_tui.ui.monitor import MonitorScreen
from tests.screentext import screen_lines, widget_lines
from tests.uiasync import aio, own_workdir, until

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
T0 = EXAMPLES / "t0-local-stage.jsonl"
MIXED = EXAMPLES / "t0-stage-docker-libvirt-microvm.jsonl"  # 118 s, its first trial in 0.09 s
SIZE = (120, 40)


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
        await until(lambda: scr.state.ended >= 1)
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
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    return own_workdir(tmp_path, monkeypatch, shipped)


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
        await until(lambda: empty.display)
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
    evil = _variant(T0, rec / "evil\x1b]52;c;QUJD\x07\nx.jsonl", profile="p\x1b[2Jwned")
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.press("c")
        await until(lambda: isinstance(app.screen, PickRecording))
        picker = app.screen
        note = picker.query_one("#picks-note", Static)
        await until(lambda: "recordings share" in str(note.render()))
        await pilot.pause(0.1)
        assert sorted(Path(p).name for p in picker.offered) == sorted(["again.jsonl", evil.name])
        lines = widget_lines(app, picker.query_one("#picks", DataTable))
        row = next(ln for ln in lines if "again.jsonl" in ln)
        assert "t0again" in row and "4 of 4" in row and "2026-11-29 20:13" in row, row
        said = "\n".join(lines + widget_lines(app, note))
        assert "mine.jsonl" not in said and "1 more share no cell: not listed" in said, said
        assert "\\x1b]52" in said and "p\\x1b[2Jwned" in said  # shown, not sent
        assert not any("\x1b" in ln or "\x07" in ln for ln in screen_lines(app))
        names = [Path(p).name for p in picker.offered]
        picker.query_one("#picks", DataTable).move_cursor(row=names.index(evil.name))
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, CompareScreen))
        assert Path(app.screen.path_b).name == evil.name
        await until(lambda: app.screen.query_one("#cmp", DataTable).row_count > 0)
        head = widget_lines(app, app.screen.query_one("#cmp-head"))
        # one line, escapes shown: the name's newline began a third line, cut off
        assert head[1].startswith("b: ") and head[1].endswith("\\x07\\x0ax.jsonl"), head
        assert not any("\x1b" in ln or "\x07" in ln for ln in screen_lines(app))


# -- numbers in one style -------------------------------------------------------------------

TIME = r"[+-]?\d[\d,]*(?:\.\d+)?(?:ns|µs|ms|s)"  # a time with its unit
EXPONENT = re.compile(r"\d[eE][+-]?\d")


def test_one_helper_formats_every_time_with_its_unit_and_no_exponent() -> None:
    """Project printed `0.000168` and `6.2e-05` (seconds), compare `-2.5e-04` beside
    `0.0631`; the console had its own fmt_ms beside the reports'."""
    from rtax_tui.render import tables
    from rtax_tui.ui import histogram

    cases = {0.000168: "168ns", 0.0631: "63.1µs", 0.168: "168µs", 3.44: "3.44ms",
             21.8: "21.8ms", 355.0: "355ms", 1234.5: "1.23s", 0.0: "0ms"}  # fmt: skip
    for ms, want in cases.items():
        assert tables.fmt_time(ms) == want
    assert tables.fmt_time(26.418, signed=True) == "+26.4ms"
    assert tables.fmt_time(-0.00025, signed=True) == "-250ns"
    assert tables.fmt_interval(11.609, 40.066, signed=True) == "[+11.6ms, +40.1ms]"
    assert tables.fmt_seconds(6.2e-05) == "62.0µs"
    assert tables.fmt_ms(-2.5e-04) == "-0.00025" and tables.fmt_num(6.2e-05) == "0.000062"
    assert not hasattr(histogram, "fmt_ms")  # one helper: the console's copy is gone
    # a crafted recording's figures (inf, nan) are shown as written, never a crash
    assert tables.fmt_time(float("inf")) == "infms" and tables.fmt_ms(float("nan")) == "nan"
    # a history step (the console's history and `rtax history`): `0.168 -> 0.2 ms` was
    # bare numbers with a trailing unit, `+0.032ms` beside them
    from rtax_tui.render.history_render import step_line

    step = {"phase": "create", "diff_ms": 0.032, "diff_pct": 19.0, "run": 1,
            "started_at": "2026-12-06T00:00:00Z", "run_id": "r2", "before_ms": 0.168,
            "after_ms": 0.2}  # fmt: skip
    want = ": ▲ +19% +32.0µs at run 2 (2026-12-06 00:00:00, r2): 168µs -> 200µs"
    assert step_line({"cell": "c"}, step).endswith(want)


def _rtax(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_project_and_compare_print_units_and_mark_intervals_from_few_samples() -> None:
    """8 samples a cell: every interval marked `~` and the caption says why; every time
    with its unit, no exponent, no 6-decimal seconds."""
    proj = _rtax("project", str(T0))
    assert not EXPONENT.search(proj) and "0.000168" not in proj, proj
    row = next(ln for ln in proj.splitlines() if "local/local/t0/exec" in ln)
    cells = [c.strip() for c in row.split("│")[2:7]]  # create, ready, action, teardown, per traj
    assert all(re.fullmatch(TIME, c) for c in cells), cells
    assert "~[" in row and "fewer than 10 samples" in " ".join(proj.split())
    cmp = _rtax("compare", str(T0), str(MIXED))
    assert not EXPONENT.search(cmp), cmp
    row = next(ln for ln in cmp.splitlines() if "local/stage/t0/exec" in ln and "total" in ln)
    a, b, diff, ci = (c.strip() for c in row.split("│")[3:7])
    assert all(re.fullmatch(TIME, c) for c in (a, b, diff)), row
    assert re.fullmatch(rf"~\[{TIME}, {TIME}\]", ci), ci


@aio
async def test_the_console_compare_shows_each_figure_with_its_unit(tmp_path: Path) -> None:
    """It mixed `+26.418ms` with `[+11.609, +40.066]` (no unit): now the compare
    screen's figures are `rtax compare`'s, a unit on each, a rough interval marked."""
    app = RtaxApp(CompareScreen(str(T0), str(MIXED)))
    async with app.run_test(size=(200, 50)) as pilot:
        table = app.screen.query_one("#cmp", DataTable)
        await until(lambda: table.row_count > 0)
        await pilot.pause(0.1)
        heads = [str(c.label) for c in table.ordered_columns]
        for i in range(table.row_count):
            row = dict(zip(heads, (str(c) for c in table.get_row_at(i)), strict=True))
            for col in ("a P50", "b P50", "b − a"):
                assert re.fullmatch(TIME, row[col]), (col, row)
            assert re.fullmatch(rf"~?\[{TIME}, {TIME}\]", row["95% CI"]), row
        note = str(app.screen.query_one("#cmp-note", Static).render())
        assert "fewer than 10 samples" in note
        assert not any(EXPONENT.search(ln) for ln in screen_lines(app))
        await pilot.press("q")


# -- keys ------------------------------------------------------------------------------------


@aio
async def test_q_leaves_every_screen_the_replay_opens(here) -> None:
    """`q` from the picker, the project and boundary panels, the compare screen and the
    history's report: each back to the screen before; then from the replay, the end."""
    from rtax_tui.ui.history import HistoryScreen, ReportPanel
    from rtax_tui.ui.modals import BoundaryPanel, ProjectPanel

    _variant(T0, here / "recordings" / "again.jsonl")
    app = RtaxApp(replay_screen(str(T0), None))
    async with app.run_test(size=SIZE) as pilot:
        replay = app.screen
        await until(lambda: replay.ended)
        for key, cls in (("c", PickRecording), ("p", ProjectPanel), ("b", BoundaryPanel)):
            await pilot.press(key)
            await until(lambda cls=cls: isinstance(app.screen, cls))
            await pilot.pause(0.2)
            if cls is ProjectPanel:  # its field (focused) still takes digits; q leaves
                await pilot.press("end", "5")
                assert app.focused is not None and app.focused.value.endswith("5")
            await pilot.press("q")
            await until(lambda: app.screen is replay)
        await pilot.press("c")
        await until(lambda: isinstance(app.screen, PickRecording))
        await until(lambda: bool(app.screen.offered))
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, CompareScreen))
        await pilot.press("q")
        await until(lambda: app.screen is replay)
        await pilot.press("h")
        await until(lambda: isinstance(app.screen, HistoryScreen))
        await until(lambda: app.screen.query_one("#runs", DataTable).row_count > 0)
        await pilot.press("r")
        await until(lambda: isinstance(app.screen, ReportPanel))
        await pilot.press("q")
        await until(lambda: isinstance(app.screen, HistoryScreen))
        await pilot.press("q")
        await until(lambda: app.screen is replay)
        await pilot.press("q")
        await until(lambda: not app.is_running)
    assert app.return_code == 0


@aio
async def test_the_run_tables_figures_carry_their_units_and_the_interval_its_brackets() -> None:
    """The cell table's interval was `lo–hi` beside compare's `[lo, hi]`: one style."""
    app = RtaxApp(replay_screen(str(MIXED), None))
    async with app.run_test(size=(250, 70)) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.pause(0.2)
        table = scr.cells
        keys = [str(c.key.value) for c in table.ordered_columns]
        assert "totalci" in keys and "total50" in keys
        for i in range(table.row_count):
            row = dict(zip(keys, (str(c) for c in table.get_row_at(i)), strict=True))
            assert re.fullmatch(rf"~?{TIME}", row["total50"]), row
            assert re.fullmatch(rf"~?\[{TIME}, {TIME}\]", row["totalci"]), row
        await pilot.press("q")


@aio
async def test_the_launchers_plan_says_which_cells_it_could_not_time(here) -> None:
    """T0 on exec (the launcher's plan: local and stage), local's cell alone in an
    earlier recording here: the plan said `(+ 1 of 2 cells never run)`; stage's may
    have run anywhere, it was only not timed here."""
    from rtax_tui.ui.launcher import LauncherScreen, planned_trials

    out = [
        raw
        for raw in T0.read_bytes().splitlines()
        if orjson.loads(raw).get("cell", "local/local/t0/exec") == "local/local/t0/exec"
    ]
    (here / "recordings").mkdir()
    (here / "recordings" / "exec-only.jsonl").write_bytes(b"\n".join(out) + b"\n")
    app = RtaxApp(LauncherScreen("t0", check=False))
    async with app.run_test(size=SIZE) as pilot:
        plan = app.screen.query_one("#plan", Static)
        await until(lambda: "cells" in str(plan.render()))
        said = " ".join(" ".join(widget_lines(app, plan)).split())
        assert list(planned_trials(app.screen.data, app.screen.host_names)) == [
            "local/local/t0/exec",
            "local/stage/t0/exec",
        ]
        assert "(not counting 1 of 2 cells: no earlier timing)" in said, said
        await pilot.press("escape")
