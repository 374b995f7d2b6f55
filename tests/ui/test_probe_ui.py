"""The console's boundary view (`b`): a probe recording's matrix, or a run's header."""

from __future__ import annotations

from pathlib import Path

import orjson

from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.recording import RecordingWriter
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.modals import BoundaryPanel, HelpScreen
from rtax_tui.ui.monitor import MonitorScreen
from tests.screentext import widget_lines
from tests.uiasync import aio, until

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
SIZE = (120, 40)


def _probe_recording(path: Path) -> None:
    w = RecordingWriter.open(path)
    head = {"type": "run", "t_ns": 0, "format": "rtax/1", "run_id": "p", "started_at": "x"}
    w.write({**head, "seed": 0, "argv": ["rtax", "probe"], "profile": {}, "hosts": {}})
    t = 1
    for driver, result in (("local", "breached"), ("docker", "blocked")):
        for channel in ("exec", "shell"):
            for check in sorted(ALL_CHECKS):
                r = result
                if result == "blocked" and check in ("fresh_env", "workspace_persists"):
                    r = "held"
                if driver == "docker" and channel == "shell" and check == "root_home":
                    r = "breached"  # one channel breaching makes the cell breached
                ev = {"type": "probe", "t_ns": t, "host": "local", "driver": driver}
                w.write({**ev, "channel": channel, "check": check, "result": r, "evidence": "e"})
                t += 1
    w.write({"type": "run_end", "t_ns": t, "status": "completed", "trials": 0})
    w.close()


def _cell(panel: BoundaryPanel, check: str, col: str) -> str:
    from textual.widgets import DataTable

    return str(panel.query_one("#bounds", DataTable).get_cell(check, col))


@aio
async def test_b_draws_the_matrix_of_a_probe_recording(tmp_path) -> None:
    rec = tmp_path / "probe.jsonl"
    _probe_recording(rec)
    app = RtaxApp(replay_screen(str(rec), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MonitorScreen)
        await until(lambda: scr.ended)
        await pilot.press("b")
        await until(lambda: isinstance(app.screen, BoundaryPanel))
        panel = app.screen
        assert list(panel.columns) == ["local", "docker"]
        assert _cell(panel, "tmp_sentinel", "local") == "breached"
        assert _cell(panel, "tmp_sentinel", "docker") == "blocked"
        assert _cell(panel, "root_home", "docker") == "breached"
        assert _cell(panel, "fresh_env", "docker") == "held"
        await pilot.press("escape")
        await until(lambda: isinstance(app.screen, MonitorScreen))
        await pilot.press("q")


@aio
async def test_b_on_a_run_shows_the_boundaries_its_header_carries(tmp_path) -> None:
    lines = (EXAMPLES / "t0-local-stage.jsonl").read_bytes().splitlines()
    header = orjson.loads(lines[0])
    drivers = header["hosts"]["local"].setdefault("drivers", {})
    drivers.setdefault("local", {})["boundary"] = {
        "probed_at": "2026-01-02T03:04:05.000+00:00",
        "channels": ["exec", "shell"],
        "checks": {c: "breached" for c in ALL_CHECKS},
    }
    drivers.setdefault("stage", {})["boundary"] = {"status": "not probed"}
    rec = tmp_path / "run.jsonl"
    rec.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]) + b"\n")
    app = RtaxApp(replay_screen(str(rec), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.press("b")
        await until(lambda: isinstance(app.screen, BoundaryPanel))
        panel = app.screen
        assert _cell(panel, "proc_sys", "local") == "breached"
        assert _cell(panel, "proc_sys", "stage") == "-"
        note = str(panel.query_one("#bounds-note").render())
        assert "probed 2026-01-02" in note and "stage: not probed" in note
        await pilot.press("b")  # the same key closes it
        await until(lambda: isinstance(app.screen, MonitorScreen))
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, HelpScreen))
        assert "boundaries" in " ".join(widget_lines(app, app.screen.query_one("#dialog")))
        await pilot.press("escape")
        await pilot.press("q")


@aio
async def test_b_on_an_old_recording_says_there_is_nothing() -> None:
    app = RtaxApp(replay_screen(str(EXAMPLES / "t0-local-stage.jsonl"), None))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await until(lambda: scr.ended)
        await pilot.press("b")
        await until(lambda: isinstance(app.screen, BoundaryPanel))
        assert app.screen.columns == {}
        texts = " ".join(str(s.render()) for s in app.screen.query("Static"))
        assert "No boundary in this recording" in texts
        await pilot.press("escape")
        await pilot.press("q")
