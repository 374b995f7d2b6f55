"""The console at 100×30, 200×50 and 250×70: nothing that matters is cut.

Each screen is drawn from the example recordings and read back as the terminal shows
it (the compositor's text); a title or a figure cut to fit ends in `…` or is missing.
With RTAX_DOCS_SVG=1 the run, capacity, replay, compare, launcher and history pictures are
written to docs/
(`docs/console-*-WxH.svg`, referenced from docs/console.md)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from rtax_tui.model.recording import read_recording
from rtax_tui.ui.app import RtaxApp, replay_screen
from rtax_tui.ui.choicelists import CHECKED, UNCHECKED
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.histogram import ABOVE, BELOW, DOT, OTHER, draw
from rtax_tui.ui.livestate import PhaseSamples
from rtax_tui.ui.monitor import MonitorScreen

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "recordings" / "examples"
SIZES = [(100, 30), (200, 50), (250, 70)]
DRIVERS = ["docker", "gvisor", "libvirt", "local", "microvm", "podman", "stage", "swerex"]
PODMAN = "no Podman API socket at /run/rtax-podman/podman.sock → bash scripts/start-podman"


def _screen_text(app) -> str:
    w, h = app.size
    con = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, record=True,
                  legacy_windows=False, safe_box=False)  # fmt: skip
    con.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return con.export_text()


def _shot(app, name: str, size: tuple[int, int]) -> None:
    if os.environ.get("RTAX_DOCS_SVG"):
        app.save_screenshot(f"console-{name}-{size[0]}x{size[1]}.svg", path=str(ROOT / "docs"))


async def _drawn(app, size, ready, name: str | None = None) -> str:
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await pilot.pause(0.3)
        for _ in range(100):  # the footer's keys (drawn again once it turned compact)
            if "h history" in [ln for ln in _screen_text(app).splitlines() if ln.strip()][-1]:
                break
            await pilot.pause(0.05)
        if name:
            _shot(app, name, size)
        return _screen_text(app)


async def _monitor_ready(pilot) -> None:
    scr = pilot.app.screen
    while not scr.ended:
        await pilot.pause(0.05)
    await scr.wait_idle()
    scr.redraw(force=True)
    await pilot.pause(0.2)
    scr.redraw(force=True)


def _finished(name: str) -> RtaxApp:
    rec = read_recording(EXAMPLES / name)
    return RtaxApp(MonitorScreen("run", recording=rec, title=f"run {name}"))


def _cut_titles(text: str) -> list[str]:
    """Lines with a border title or a header cut short (`…`)."""
    placeholders = ("key = value, …", "cell, status…")  # an input's hint, whole
    return [ln for ln in text.splitlines() if "…" in ln and not any(p in ln for p in placeholders)]


def _footer_whole(text: str) -> None:
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert "h history" in last and "^p palette" in last, last


def _monitor_checks(text: str, cells: list[str]) -> None:
    heads = "\n".join(text.splitlines()[1:3])
    assert "total" in heads and "P50" in heads and "P95" in heads, heads
    for cell in cells:
        assert cell in text, cell
    for phase in ("create", "ready", "action", "teardown", "total"):
        assert f"╭─ {phase} " in text, phase
    assert "▲ P50" in text and "another cell's P50" in text  # the marks, on screen
    assert not _cut_titles(text), _cut_titles(text)
    _footer_whole(text)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_run_screen_fits(size) -> None:
    name = "t0-stage-docker-libvirt-microvm.jsonl"
    text = asyncio.run(_drawn(_finished(name), size, _monitor_ready, "run"))
    rec = read_recording(EXAMPLES / name)
    cells = sorted({str(e["cell"]) for e in rec.events if e.get("type") == "trial_start"})
    _monitor_checks(text, cells)
    if size[0] >= 200:  # room for more of the total: P99, the interval, the outliers
        assert "P99" in text and "95% interval" in text and "liers" in text


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_capacity_screen_fits(size) -> None:
    app = _finished("capacity-local-stage.jsonl")
    text = asyncio.run(_drawn(app, size, _monitor_ready, "capacity"))
    _monitor_checks(text, ["local/local/capacity/exec", "local/stage/capacity/exec"])
    assert "capacity barrier" in text


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_replay_screen_fits(size) -> None:
    app = RtaxApp(replay_screen(str(EXAMPLES / "t0-local-stage.jsonl"), None))
    text = asyncio.run(_drawn(app, size, _monitor_ready, "replay"))
    _monitor_checks(text, ["local/local/t0/exec", "local/stage/t0/shell"])
    assert "0.43s / 0.43s  end" in text  # the replay's time label, whole


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_compare_screen_fits(size, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    a = "recordings/examples/t0-local-stage.jsonl"

    async def ready(pilot) -> None:
        table = pilot.app.screen.query_one("#cmp")
        while table.row_count == 0:
            await pilot.pause(0.05)

    text = asyncio.run(_drawn(RtaxApp(CompareScreen(a, a)), size, ready, "compare"))
    for head in ("a P50", "b P50", "b − a", "b is", "95% CI"):
        assert head in text, head
    rows = [ln for ln in text.splitlines() if ln.lstrip().startswith("local/")]
    assert rows and all("]" in ln for ln in rows if "[" in ln), rows  # no interval cut
    if size[0] >= 200:
        assert "b/a" in text and "p Holm" in text
    else:  # what did not fit whole is named, not cut at the edge
        assert "b/a, p Holm: in a wider terminal" in text.replace("\n", " ")
    assert "same under 5% or 0.5ms" in text  # the sub-title, whole
    assert not _cut_titles(text), _cut_titles(text)
    _footer_whole(text)


def _workbench(monkeypatch, tmp_path) -> None:
    from rtax_tui.analysis import history

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("t0-local-stage", "t2-local-stage", "capacity-local-stage"):
        shutil.copy(EXAMPLES / f"{name}.jsonl", shipped)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(history, "SHIPPED", shipped)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_launcher_fits(size, monkeypatch, tmp_path) -> None:
    from rtax_tui.engine.profile import profiles_dir
    from rtax_tui.ui.launcher import LauncherScreen

    _workbench(monkeypatch, tmp_path)
    scr = LauncherScreen(profiles_dir() / "t0.toml", check=False)

    async def ready(pilot) -> None:
        scr.drivers = list(DRIVERS)  # doctor's answer for 8 drivers, one not working
        scr.status = {("local", d): "" for d in DRIVERS}
        scr.status[("local", "podman")] = PODMAN
        scr._refill_drivers()
        scr._draw_doctor()
        while scr.runs is None:
            await pilot.pause(0.05)

    text = asyncio.run(_drawn(RtaxApp(scr), size, ready, "launcher"))
    for title in ("profiles ⏎ load", "drivers ✓ ok ✗ see below", "workloads", "channels",
                  "hosts", "options", "run: t0"):  # fmt: skip
        assert title in text, title
    for drv in DRIVERS:  # every driver in the list, with its mark
        box = re.compile(rf"▐[{CHECKED}{UNCHECKED}]▌ {drv} (.*)")  # its box, then its row
        rows = [m[1] for ln in text.splitlines() if (m := box.search(ln))]
        assert any("✓" in r or "✗" in r for r in rows), (drv, rows)  # the doctor's mark
    assert "docker gvisor libvirt local microvm stage swerex" in text  # the doctor's rows
    assert "scripts/start-podman" in text  # a reason's fix, whole
    for ch in ("exec", "shell"):
        assert re.search(rf"▐[{CHECKED}{UNCHECKED}]▌ {ch}", text), ch
    for profile in ("capacity-pvisor", "trajectory"):  # a name on one line
        assert f"  {profile} " in text
    assert not _cut_titles(text), _cut_titles(text)
    _footer_whole(text)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_history_fits(size, monkeypatch, tmp_path) -> None:
    from rtax_tui.ui.history import HistoryScreen

    _workbench(monkeypatch, tmp_path)
    scr = HistoryScreen()
    highlighted = []

    async def ready(pilot) -> None:
        while not scr.runs or scr.steps is None:
            await pilot.pause(0.05)
        highlighted.append(scr.current())

    text = asyncio.run(_drawn(RtaxApp(scr), size, ready, "history"))
    for head in ("date", "profile", "trials", "failed", "status", "duration", "steps here"):
        assert head in text, head
    from rtax_tui.analysis.history import display_path

    assert highlighted[0] is not None and display_path(highlighted[0].path) in text  # whole
    assert not _cut_titles(text), _cut_titles(text)
    _footer_whole(text)


# -- the histograms ---------------------------------------------------------------------
def _phase(values_ms: list[float]) -> PhaseSamples:
    ps = PhaseSamples()
    for v in values_ms:
        ps.add(int(v * 1e6))
    return ps


def _axis(text: str) -> str:
    return str(text).splitlines()[-1]


def test_a_fast_cell_is_drawn_on_its_own_range_with_the_others_medians_at_the_edge() -> None:
    fast = _phase([4.0 + 0.05 * i for i in range(40)])  # 4-6 ms; another cell: 355 ms
    p50, p95 = fast.percentiles_ms()
    out = draw(fast.counts, 60, 8, p50_ms=p50, p95_ms=p95, others_ms=[355.0, 0.01, 4.1])
    axis = _axis(out)
    assert axis.startswith("3.") and axis.endswith("ms") and "355" not in axis, axis
    marks = str(out).splitlines()[-2]
    assert marks[-1] == ABOVE and marks[0] == BELOW and OTHER in marks  # 4.1 ms falls on it
    bars = str(out).splitlines()[:-2]
    width = max(i for ln in bars for i, ch in enumerate(ln) if ch != " ") - min(
        i for ln in bars for i, ch in enumerate(ln) if ch != " "
    )
    assert width > 30  # the cell spreads over the box, not a few columns of it


def test_few_samples_are_dots_not_full_height_bars() -> None:
    few = _phase([10.0, 12.0, 30.0])
    p50, p95 = few.percentiles_ms()
    out = str(draw(few.counts, 40, 8, p50_ms=p50, p95_ms=p95, samples_ns=few.samples.tolist()))
    rows = out.splitlines()[:-2]
    assert out.count(DOT) == 3 and "█" not in out
    assert all(DOT not in ln for ln in rows[:-1])  # one each: on the bottom row only
    many = _phase([10.0 + i for i in range(30)])
    p50, p95 = many.percentiles_ms()
    assert DOT not in str(draw(many.counts, 40, 8, p50_ms=p50, p95_ms=p95))
