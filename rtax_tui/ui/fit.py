"""What every screen does to fit its terminal, from 80×24 up: a footer that drops its
padding when narrow, and titles cut to the room they have (a whole shorter one rather
than a long one cut in the middle, as `create  P50 12ms  P95 13.…` was)."""

from __future__ import annotations

from collections.abc import Sequence

from textual import events
from textual.widgets import Footer

COMPACT_UNDER = 140  # columns: under this the footer's keys lose their padding


class FitFooter(Footer):
    """Textual's footer, compact (no padding around each key) under COMPACT_UNDER
    columns, so that the keys of a screen and the app's `n`/`h` fit at 100."""

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_UNDER


def fit_title(candidates: Sequence[str], room: int) -> str:
    """The first of `candidates` (longest first) no longer than `room`, else the last
    one cut to it."""
    for c in candidates:
        if len(c) <= room:
            return c
    last = candidates[-1] if candidates else ""
    return last[: max(0, room)]


def border_room(outer_width: int) -> int:
    """The characters a border title has in a widget `outer_width` wide (`╭─ ` and ` ─╮`
    around it)."""
    return max(0, outer_width - 6)
