"""The console's safety, keys and help, driven by keys (Textual's pilot): saving a
profile never overwrites a shipped one, what runs write is ignored by git, `q` leaves
any screen, the help puts rtax's keys first in lines that fit, checked items carry a
glyph, focus shows in the shape of a frame, the palette's Screenshot saves."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rtax_tui.analysis.history import profile_beside, recording_path
from rtax_tui.engine.profile import load_profile
from rtax_tui.engine.profile_toml import profiles_dir, saved_profile_path, saved_profiles_dir
from rtax_tui.model.spec import RtaxError
from rtax_tui.render.plots import plot_view
from rtax_tui.ui.app import SCREENSHOTS, RtaxApp
from rtax_tui.ui.choicelists import CHECKED
from rtax_tui.ui.history import HistoryScreen
from rtax_tui.ui.launcher import LauncherScreen
from rtax_tui.ui.modals import TEXTUAL, Confirm, HelpScreen
from rtax_tui.ui.profilelist import profile_sources
from tests.screentext import widget_lines
from tests.uiasync import aio, own_workdir, until


def _until(cond, timeout: float = 30.0):
    return until(cond, timeout)


ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "recordings" / "examples"
SIZE = (120, 40)
FRAMELESS = ("", "none", "hidden")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory and user config, the history its own and the examples."""
    return own_workdir(tmp_path, monkeypatch, EXAMPLES, home=True)


# -- saving a profile -----------------------------------------------------------------------


@aio
async def test_ctrl_s_never_overwrites_a_shipped_profile_and_asks_over_a_saved_one(here) -> None:
    """In a checkout, ./profiles holds the shipped profiles (tracked by git): ctrl+s on t0
    wrote over profiles/t0.toml without a word. It goes to the user's own place; over a
    profile saved there before, only after a yes."""
    shipped = here / "profiles" / "t0.toml"
    shipped.parent.mkdir()
    shutil.copy(profiles_dir() / "t0.toml", shipped)
    before = shipped.read_bytes()
    saved = saved_profiles_dir() / "t0.toml"
    assert saved.is_relative_to(here / "config")
    app = RtaxApp(LauncherScreen(shipped, check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        scr.query_one("#run-trials").value = "7"
        await pilot.press("ctrl+s")
        await _until(saved.exists)
        assert shipped.read_bytes() == before
        assert load_profile(saved).trials == 7
        assert ("saved", "t0") in [(g, lb) for g, lb, _ in profile_sources()]

        scr.query_one("#run-trials").value = "9"
        await pilot.press("ctrl+s")
        await _until(lambda: isinstance(app.screen, Confirm))
        await pilot.press("n")  # no: kept as it was
        await _until(lambda: app.screen is scr)
        assert load_profile(saved).trials == 7
        await pilot.press("ctrl+s")
        await _until(lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        await _until(lambda: load_profile(saved).trials == 9)
        assert app.screen is scr and shipped.read_bytes() == before


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "", "x" * 101])
def test_a_saved_profiles_name_is_one_plain_file_name(here, name) -> None:
    with pytest.raises(RtaxError, match="a saved profile is named"):
        saved_profile_path(name)
    assert saved_profile_path("t0-mine_2.x").parent == saved_profiles_dir()


def test_what_the_console_writes_into_the_tree_is_ignored_by_git(tmp_path) -> None:
    """The files a console run leaves under ./recordings (the recording, the profile
    beside it, a plot, a screenshot, a killed write's .part) are not offered to git;
    the shipped examples are."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    rec = recording_path("t0")
    plot = plot_view.__defaults__[0]  # the plots' folder (`g`)
    written = [
        rec,
        profile_beside(rec),
        Path(plot) / "t0-local-stage-distributions.svg",
        SCREENSHOTS / "rtax_2026-01-01T00_00_00.svg",
        rec.parent / f".{rec.name}.abc123.part",
    ]
    res = subprocess.run(
        ["git", "check-ignore", "--no-index", "-v", *map(str, written)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    ignored = {line.split("\t")[-1] for line in res.stdout.splitlines()}
    assert ignored == {str(p) for p in written}, res.stdout
    shipped = [str(p.relative_to(ROOT)) for p in EXAMPLES.rglob("*.jsonl")]
    res = subprocess.run(
        ["git", "check-ignore", "--no-index", *shipped], cwd=ROOT, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert res.stdout == "" and shipped


# -- q ----------------------------------------------------------------------------------------


@aio
async def test_q_goes_back_from_any_screen_and_quits_from_the_first(here) -> None:
    app = RtaxApp(LauncherScreen(check=False))
    async with app.run_test(size=SIZE) as pilot:
        first = app.screen
        field = first.query_one("#add-host")
        field.focus()
        await pilot.press("q")  # in a field, q is typed
        await pilot.pause(0.1)
        assert field.value == "q" and app.screen is first
        first.query_one("#drivers").focus()
        await pilot.press("h")
        await _until(lambda: isinstance(app.screen, HistoryScreen))
        await pilot.press("question_mark")
        await _until(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("q")  # the help
        await _until(lambda: isinstance(app.screen, HistoryScreen))
        await pilot.press("q")  # the history
        await _until(lambda: app.screen is first)
        await pilot.press("q")  # the launcher, the first: the console ends
        await _until(lambda: not app.is_running)
    assert app.return_code == 0


# -- help ------------------------------------------------------------------------------------


@aio
async def test_help_shows_rtaxs_keys_first_by_screen_in_one_style_in_lines_that_fit(here) -> None:
    app = RtaxApp(HistoryScreen())
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.press("question_mark")
        await _until(lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause(0.3)
        lines = widget_lines(app, app.screen.query_one("#dialog"))
        text = "\n".join(lines)

        def at(what: str) -> int:
            found = [i for i, ln in enumerate(lines) if what in ln]
            assert found, f"{what!r} not in the help:\n{text}"
            return found[0]

        # rtax's keys of this screen, then every screen's, then Textual's
        assert at("history keys") < at("replay the highlighted run") < at("every screen")
        assert at("every screen") < at("the launcher: choose") < at(TEXTUAL)
        assert at(TEXTUAL) < at("cursor up") and at(TEXTUAL) < at("quit the app")
        assert at("back to the screen before") < at(TEXTUAL)  # q, the app's
        # one style: keys as the docs write them, descriptions in lower case
        assert "^" not in text and "Cursor" not in text and "ctrl+q" in text
        # a long line wraps beside its key (right-aligned in a column), not to the left edge
        col = lines[at("replay the highlighted run")].index("replay the highlighted run")
        apart = {lines[0].strip(), "history keys", "every screen", TEXTUAL}
        for ln in lines:
            if ln.strip() and ln.strip() not in apart and not ln.startswith("escape: close"):
                assert ln[col - 2 : col] == "  " and ln[col].strip(), ln
        assert max(len(ln) for ln in lines) <= app.screen.query_one("#dialog").content_size.width


# -- what the launcher shows --------------------------------------------------------------------


@aio
async def test_checked_items_carry_a_glyph_not_only_a_colour(here) -> None:
    prof = here / "one.toml"
    prof.write_text('[run]\ndrivers = ["local"]\nworkloads = ["t1"]\nchannels = ["exec"]\n')
    app = RtaxApp(LauncherScreen(prof, check=False))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        rows = [ln for ln in widget_lines(app, app.screen.query_one("#workloads")) if ln]
        marks = {ln.split()[-1]: ln for ln in rows}
        assert CHECKED in marks["t1"] and "X" not in marks["t1"]
        for name in ("t0", "t2"):
            assert CHECKED not in marks[name] and "X" not in marks[name]
        await pilot.press("tab", "home", "space")  # the workloads list: t0 toggled on
        await pilot.pause(0.2)
        rows = [ln for ln in widget_lines(app, app.screen.query_one("#workloads")) if ln]
        assert CHECKED in {ln.split()[-1]: ln for ln in rows}["t0"]


@aio
async def test_focus_shows_as_a_double_frame_on_every_stop(here) -> None:
    """Tab through the launcher and the history: at each stop, the focused widget's frame
    (its own border, or its box's) is the one double frame on the screen."""

    def frame(w):
        while w is not None and w.styles.border_top[0] in FRAMELESS:
            w = w.parent
        return w

    for first in (LauncherScreen(check=False), HistoryScreen()):
        app = RtaxApp(first)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            seen: list[object] = []
            while app.screen.focused not in seen:
                focused = app.screen.focused
                seen.append(focused)
                double = [w for w in app.screen.query("*") if w.styles.border_top[0] == "double"]
                assert double == [frame(focused)], (focused, double)
                await pilot.press("tab")
                await pilot.pause(0.05)
            assert len(seen) >= (10 if isinstance(first, LauncherScreen) else 2)


# -- the command palette's Screenshot ---------------------------------------------------------


@aio
async def test_the_palettes_screenshot_saves_under_recordings(here) -> None:
    """It failed (Textual saves to ~/Downloads, which need not exist), saying only that."""
    app = RtaxApp(LauncherScreen(check=False))
    async with app.run_test(size=SIZE) as pilot:
        (shot,) = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
        shot.callback()
        await _until(lambda: SCREENSHOTS.is_dir() and any(SCREENSHOTS.glob("*.svg")))
        await pilot.pause(0.1)
        (svg,) = SCREENSHOTS.glob("*.svg")
        assert "launcher" in svg.read_text()
        notes = [n.message for n in app._notifications]
        assert any(str(SCREENSHOTS) in m and "screenshot" in m for m in notes), notes
