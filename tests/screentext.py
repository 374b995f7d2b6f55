"""What a console screen shows, as text: for tests that read the screen as a user would
(what is drawn, where), not a widget's attributes."""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App
from textual.widget import Widget


def screen_lines(app: App[object]) -> list[str]:
    """Every row of the screen as drawn (the screens below a modal included), as
    Textual's own screenshot renders it."""
    width, height = app.size
    con = Console(
        width=width, height=height, file=io.StringIO(), record=True, force_terminal=True,
        color_system="truecolor", legacy_windows=False,
    )  # fmt: skip
    con.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return con.export_text().splitlines()


def widget_lines(app: App[object], widget: Widget) -> list[str]:
    """The rows of `widget`'s content area as drawn on the screen."""
    r = widget.content_region
    rows = screen_lines(app)
    return [rows[y][r.x : r.right].rstrip() for y in range(r.y, min(r.bottom, len(rows)))]
