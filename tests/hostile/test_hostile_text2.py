"""Text a trial (or a crafted input) controls, reaching a terminal or xterm.js anyway.

`model.events.visible` makes control characters visible in every *event* where it enters
rtax. These cases are text that never becomes an event, or that becomes an escape
sequence only after `visible` ran (markup that Rich or Textual turns into one):

- `rtax traj inspect` prints a trajectory's commands as they are: an agent's trajectory
  (which the model under training wrote) holding `ESC ] 2 ; ... ESC \\` retitles the
  user's terminal, and OSC 52 sets its clipboard;
- `rtax report` prints a recording's header fields (`unreachable`, `drivers_left_out`)
  as Rich markup: no control character is needed, Rich writes the OSC 8 hyperlink (text
  saying one thing, linking elsewhere) and the concealed text itself;
- the console's `WorkLine` (driver checks, image builds, asset preparation: each line a
  command prints on stdout or stderr) escapes with `rich.markup.escape`, which does not
  escape Textual's markup: `[ @click=...]` (a space first) becomes a clickable action,
  `[ link=...]` a link; and it shows the line's control characters as they are;
- the compare screen's DataTable takes the cell names of two recordings as markup
  (`str` cells are `Text.from_markup`): a crafted recording's cell name is restyled or
  hidden (`[conceal]`) on screen (display trickery, lesser).

Each test fails while the attack gets through.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINI = (
    ROOT / "tests" / "data" / "trajectories" / "mini-swe-agent" / "astropy__astropy-12907.traj.json"
)
T0 = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"


def _sync(fn):  # as tests/ui/test_ui_pilot.py: no pytest-asyncio here
    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return run


OSC_TITLE = "\\u001b]2;PWNED\\u001b\\\\"  # as JSON text: ESC ] 2 ; PWNED ESC \


def test_traj_inspect_prints_no_escape_sequence_of_a_trajectory(tmp_path: Path) -> None:
    """A trajectory's command holding an OSC sequence reaches stdout raw."""
    raw = MINI.read_text().replace("cd /testbed && find", OSC_TITLE + "cd /testbed && find")
    evil = tmp_path / "evil.traj.json"
    evil.write_text(raw)
    out = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "traj", "inspect", str(evil)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert b"PWNED" in out.stdout  # the command was shown
    assert b"\x1b]2;PWNED" not in out.stdout, "a trajectory retitled the terminal"


def test_report_makes_no_hyperlink_of_a_recordings_markup(tmp_path: Path) -> None:
    """Markup in a recording's header: `rtax report` (on a terminal) writes an OSC 8
    hyperlink and concealed text, though the recording holds no control character."""
    lines = T0.read_bytes().split(b"\n")
    lines[0] = lines[0].replace(
        b'"clocksource":"tsc"',
        b'"clocksource":"tsc","unreachable":"[link=http://evil.example/]see the log[/link]",'
        b'"drivers_left_out":{"docker":"[conceal]HIDDEN[/conceal]ok"}',
    )
    rec = tmp_path / "markup.jsonl"
    rec.write_bytes(b"\n".join(lines))
    out = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(rec)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FORCE_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert b"left out" in text
    assert b"\x1b]8;" not in text, "a recording's markup became a hyperlink"
    assert b"\x1b[8m" not in text, "a recording's markup concealed text"


def _workline_app():
    from textual.app import App, ComposeResult

    from rtax_tui.ui.tasks import WorkLine

    class Host(App[None]):
        pwned = False

        def compose(self) -> ComposeResult:
            yield WorkLine(id="work")

        def action_pwned(self) -> None:
            self.pwned = True

    return Host()


@_sync
async def test_workline_markup_from_a_command_is_not_an_action() -> None:
    """A line a command printed (e.g. docker's build output, a remote's doctor reason)
    as `[ @click=app.pwned]...`: `rich.markup.escape` leaves it, Textual's markup makes
    it a clickable action (in the real console, e.g. `screen.start` or `app.quit`)."""
    from rtax_tui.ui.tasks import WorkLine

    app = _workline_app()
    async with app.run_test(size=(100, 5)) as pilot:
        work = app.query_one("#work", WorkLine)
        work.start("building the images")
        work.finish("[ @click=app.pwned]click here for the log", ok=False)
        await pilot.pause()
        await pilot.click("#work", offset=(6, 0))
        await pilot.pause()
        assert not app.pwned, "a command's output ran an action of the console"


@_sync
async def test_workline_shows_no_control_character_of_a_command() -> None:
    """A command's stderr line holding OSC 52 (set xterm.js's clipboard) goes on screen
    as it is: `stream_command` and `WorkLine` never make it visible."""
    from rtax_tui.ui.tasks import WorkLine, stream_command

    got: list[str] = []
    script = "import sys; sys.stderr.write('step: \\x1b]52;c;cm0gLXJmIH4K\\x1b\\\\ done\\n')"
    await stream_command([sys.executable, "-c", script], None, got.append)
    app = _workline_app()
    async with app.run_test(size=(100, 5)) as pilot:
        work = app.query_one("#work", WorkLine)
        work.start("checking drivers")
        work.news(got[-1])
        await pilot.pause()
        shown = "".join(s.text for s in work.render_lines(work.region.reset_offset))
        assert "\x1b" not in shown, "a command's escape sequence reaches the screen"


@_sync
async def test_compare_table_takes_no_markup_from_a_recording(tmp_path: Path) -> None:
    """Two crafted recordings whose cell is `[conceal]...`: the compare screen shows the
    recording's name as it is (a `str` given to DataTable is read as markup: the text
    would be hidden, restyled, the tag gone). A display-only finding, lesser."""
    from textual.app import App
    from textual.widgets import DataTable
    from textual.widgets._data_table import default_cell_formatter

    from rtax_tui.ui.compare import CompareScreen

    evil = b"[conceal]local/local/t0/exec[/conceal]local/stage/t0/exec"
    paths = []
    for name in ("a.jsonl", "b.jsonl"):
        p = tmp_path / name
        p.write_bytes(T0.read_bytes().replace(b"local/local/t0/exec", evil))
        paths.append(str(p))
    app: App[None] = App()
    async with app.run_test(size=(200, 40)) as pilot:
        await app.push_screen(CompareScreen(*paths))
        table = app.screen.query_one("#cmp", DataTable)
        for _ in range(100):
            if table.row_count:
                break
            await pilot.pause(0.05)
        # each name as DataTable draws it (a `str` is read as markup there)
        drawn = [default_cell_formatter(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert drawn, "the compare screen showed no row"
        assert evil.decode() in {t.plain for t in drawn}, [t.plain for t in drawn]
        assert all(not t.spans for t in drawn), drawn
