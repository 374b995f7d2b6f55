"""Snapshots of the console's screens drawn from the example recordings.

Nothing on these screens reads a clock: positions and elapsed times come from the
recordings' own `t_ns`, so the pictures are the same on every machine. After an
intended change of the layout: `pytest tests/ui/test_ui_snapshots.py --snapshot-update`,
then look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

from rtax_tui.model.recording import read_recording
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.monitor import MonitorScreen

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
SIZE = (120, 40)


async def _settle(pilot) -> None:
    scr = pilot.app.screen
    if isinstance(scr, MonitorScreen):
        await scr.wait_idle()
    else:
        table = scr.query_one("#cmp")
        while table.row_count == 0:
            await pilot.pause(0.05)
    await pilot.pause(0.3)


def _finished_run(name: str) -> RtaxApp:
    path = EXAMPLES / name
    rec = read_recording(path)
    return RtaxApp(MonitorScreen("run", recording=rec, title=f"run {path.name}"))


def test_run_screen(snap_compare) -> None:
    assert snap_compare(
        _finished_run("t2-local-stage.jsonl"), terminal_size=SIZE, run_before=_settle
    )


def test_replay_screen_on_the_second_cell(snap_compare) -> None:
    app = RtaxApp(replay_screen(str(EXAMPLES / "t0-local-stage.jsonl"), None))

    async def before(pilot) -> None:
        await _settle(pilot)
        await pilot.press("s", "s")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_capacity_screen(snap_compare) -> None:
    assert snap_compare(
        _finished_run("capacity-local-stage.jsonl"), terminal_size=SIZE, run_before=_settle
    )


def test_compare_screen(snap_compare, monkeypatch) -> None:
    monkeypatch.chdir(EXAMPLES.parents[1])  # relative names: the same picture in any clone
    a = "recordings/examples/t0-local-stage.jsonl"
    assert snap_compare(RtaxApp(CompareScreen(a, a)), terminal_size=SIZE, run_before=_settle)


def _workbench_here(monkeypatch, tmp_path) -> None:
    """An empty working directory; the history: three of the examples (a fixed set, so
    that a new example recording does not change these pictures)."""
    import shutil

    from rtax_tui.analysis import history

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no saved profiles
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("t0-local-stage", "t2-local-stage", "capacity-local-stage"):
        shutil.copy(EXAMPLES / f"{name}.jsonl", shipped)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(history, "SHIPPED", shipped)


def test_launcher(snap_compare, monkeypatch, tmp_path) -> None:
    from rtax_tui.engine.profile import profiles_dir
    from rtax_tui.ui.launcher import LauncherScreen

    _workbench_here(monkeypatch, tmp_path)
    scr = LauncherScreen(profiles_dir() / "t0.toml", check=False)

    async def before(pilot) -> None:
        # what `rtax doctor --format json` answers, fed here: the picture must not depend
        # on which engines this machine runs
        scr.drivers = ["docker", "libvirt", "local", "microvm", "podman", "stage"]
        scr.status = {("local", d): "" for d in scr.drivers}
        scr.status[("local", "podman")] = (
            "no Podman API socket at /run/rtax-podman/podman.sock → bash scripts/start-podman"
        )
        scr._refill_drivers()
        scr._draw_doctor()
        while scr.runs is None:
            await pilot.pause(0.05)
        await pilot.pause(0.3)

    assert snap_compare(RtaxApp(scr), terminal_size=SIZE, run_before=before)


def test_history(snap_compare, monkeypatch, tmp_path) -> None:
    from rtax_tui.ui.history import HistoryScreen

    _workbench_here(monkeypatch, tmp_path)
    scr = HistoryScreen()

    async def before(pilot) -> None:
        while not scr.runs:
            await pilot.pause(0.05)
        await pilot.press("down", "space")
        await pilot.pause(0.3)

    assert snap_compare(RtaxApp(scr), terminal_size=SIZE, run_before=before)
