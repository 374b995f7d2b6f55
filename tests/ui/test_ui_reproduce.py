"""The reproduce screen (`R`): a study's tables filling as `rtax reproduce` runs it, drawn
from the same rows as its report.json, hostile text drawn as text, and `q` mid-study
leaving no process behind and the recorded part kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rtax_tui.ui.app import RtaxApp
from rtax_tui.ui.reproduce import PickStudy, ReproduceScreen
from tests.procs import dead
from tests.screentext import screen_lines
from tests.uiasync import aio, until

SIZE = (200, 50)
HOSTILE_LABEL = "[@click=app.quit]cell[/] \\u001b]0;owned\\u0007"
HOSTILE_WHY = "[bold red]loud[/] \\u001b[2J reason"

STUDY = """\
title = "tiny live"
source = "a test's own study"

[experiments.first]
what = "T0 on local, a few trials"
profile = "t0"
drivers = ["local"]
channels = ["exec"]
quick = {{ trials = 3, warmup = 0 }}
full = {{ trials = 3, warmup = 0 }}
differs = ["a test"]

[experiments.second]
what = "T0 on local, more trials"
profile = "t0"
drivers = ["local"]
channels = ["exec"]
quick = {{ trials = {second}, warmup = 0 }}
full = {{ trials = {second}, warmup = 0 }}
differs = ["a test"]

[experiments.later]
what = "a row not reproduced"
kind = "pending"
why = "{why}"

[[tables]]
id = "t"
title = "live"
conditions = "N = 60"

[[rows]]
table = "t"
label = "first completion"
experiment = "first"
driver = "local"
figure = "total"
published = 1.0
unit = "s"
n = 60

[[rows]]
table = "t"
label = "second ready"
experiment = "second"
driver = "local"
figure = "ready"
published = 2.0
n = 60

[[rows]]
table = "t"
label = "{label}"
experiment = "later"
figure = "pending"
published = 183.7
"""


def _study(tmp_path: Path, second: int) -> Path:
    path = tmp_path / "tinylive.toml"
    path.write_text(STUDY.format(second=second, why=HOSTILE_WHY, label=HOSTILE_LABEL))
    return path


def _rows(doc: dict | None) -> dict[str, dict]:
    return {r["label"]: r for t in (doc or {}).get("tables", []) for r in t["rows"]}


def _session(sid: int) -> list[int]:
    """The processes of session `sid` still alive (zombies are not)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(d))
    return out


@aio
async def test_r_opens_the_study_picker_and_escape_leaves_it() -> None:
    from rtax_tui.ui.launcher import LauncherScreen

    app = RtaxApp(LauncherScreen())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "reproduce (R)" in titles  # the command palette's entry
        await pilot.press("R")
        await until(lambda: isinstance(app.screen, PickStudy))
        text = "\n".join(screen_lines(app))
        assert "pvisor --size quick" in text and "paper --size full" in text
        await pilot.press("escape")
        await until(lambda: isinstance(app.screen, LauncherScreen))


@pytest.mark.slow
@aio
async def test_the_tables_fill_live_and_end_as_report_json(tmp_path) -> None:
    study = _study(tmp_path, second=150)
    scr = ReproduceScreen(str(study), "quick", ["local"], root=str(tmp_path / "out"))
    app = RtaxApp(scr)
    seen_running: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        # the rows are there before any experiment ends, each waiting or running
        await until(lambda: scr.doc is not None, timeout=30)

        # while the second experiment runs: the first's row is ours already, the second's
        # counts its trials, on the screen
        def filling() -> bool:
            shown = _rows(scr.shown_doc())
            ours = shown.get("second ready", {}).get("ours_text", "")
            if ours.startswith("running: ") and not ours.startswith("running: 0 "):
                seen_running.append(ours)
                return "n=3" in shown["first completion"]["ours_text"]
            return False

        await until(filling, timeout=60)
        await pilot.pause(0.3)
        drawn = "\n".join(screen_lines(app))
        assert "running: " in drawn and " of 150 trials" in drawn
        assert scr.returncode is None  # seen before the study ended
        await until(lambda: scr.returncode is not None, timeout=90)
        assert scr.returncode == 0
        await until(lambda: (scr.doc or {}).get("state") == "done")
        await pilot.pause(0.3)
        (out,) = (tmp_path / "out").iterdir()
        report = json.loads((out / "report.json").read_text())
        final = scr.shown_doc()
        assert final is not None
        assert final["tables"] == report["tables"]
        second = _rows(final)["second ready"]
        assert second["ours"]["status"] == "measured" and second["ours"]["n"] == 150
        drawn = "\n".join(screen_lines(app))
        assert "n=150" in drawn and "running: " not in drawn
        assert "done" in drawn
    assert seen_running


@aio
async def test_hostile_labels_and_reasons_are_drawn_as_text(tmp_path) -> None:
    # the study's only run experiment is left out: the tables are whole at once
    study = _study(tmp_path, second=1)
    scr = ReproduceScreen(str(study), "quick", ["none-such"], root=str(tmp_path / "out"))
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: scr.returncode is not None, timeout=60)
        await until(lambda: "reason" in "\n".join(screen_lines(app)))
        await pilot.pause(0.2)
        drawn = "\n".join(screen_lines(app))
        assert "[@click=app.quit]cell[/] \\x1b]0;owned\\x07" in drawn
        assert "[bold red]loud[/] \\x1b[2J reason" in drawn
        assert "\x1b" not in drawn and "\x07" not in drawn
        assert app.is_running  # the label's click never ran


@pytest.mark.slow
@aio
async def test_q_mid_study_stops_it_leaves_no_process_and_keeps_what_ran(tmp_path) -> None:
    study = _study(tmp_path, second=3000)
    scr = ReproduceScreen(str(study), "quick", ["local"], root=str(tmp_path / "out"))
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE) as pilot:

        def running() -> bool:
            ours = _rows(scr.shown_doc()).get("second ready", {}).get("ours_text", "")
            return ours.startswith("running: ") and not ours.startswith("running: 0 ")

        await until(running, timeout=60)
        assert scr.proc is not None
        pid = scr.proc.pid
        assert _session(pid)
        await pilot.press("q")
        await until(lambda: scr.returncode is not None, timeout=90)
    assert dead(pid)
    assert _session(pid) == []
    assert scr.returncode == 130
    (out,) = (tmp_path / "out").iterdir()
    report = json.loads((out / "report.json").read_text())
    assert report["not_run"] == {"second": "interrupted"}
    rows = _rows(report)
    assert rows["first completion"]["ours"]["n"] == 3
    assert (out / "second.jsonl").exists()  # the trials that ended are kept


@pytest.mark.slow
@aio
async def test_the_console_closing_mid_study_ends_after_the_study(tmp_path) -> None:
    """Not by `q`: the app told to exit (its window closed) still stops the study and
    waits for it before it ends."""
    study = _study(tmp_path, second=3000)
    scr = ReproduceScreen(str(study), "quick", ["local"], root=str(tmp_path / "out"))
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE):

        def running() -> bool:
            ours = _rows(scr.shown_doc()).get("second ready", {}).get("ours_text", "")
            return ours.startswith("running: ") and not ours.startswith("running: 0 ")

        await until(running, timeout=60)
        assert scr.proc is not None
        pid = scr.proc.pid
        app.exit()
    assert _session(pid) == [] and scr.returncode == 130
    (out,) = (tmp_path / "out").iterdir()
    assert json.loads((out / "report.json").read_text())["not_run"] == {"second": "interrupted"}
