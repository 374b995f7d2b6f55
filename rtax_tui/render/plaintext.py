"""Text from outside rtax, drawn as text: no markup read, no control character sent.

A trial's error, a command's stderr, a recording's labels, a trajectory's commands: a
model under training wrote them, or could have. Drawn as Rich or Textual markup,
`[link=...]` becomes a hyperlink and `[ @click=...]` an action of the console; sent as
they are, `ESC ] 52` writes the terminal's clipboard. `styled` builds a line of such
strings and rtax's own styles as `Text` spans, so nothing in the strings is read as
markup, and shows every control character as `\\xNN` (`model.events.visible`). Consoles
that print reports read no markup at all (`reporting.out_console`).
"""

from __future__ import annotations

from rich.text import Text

from rtax_tui.model.events import visible


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and (text, style) pairs, each shown as it is."""
    return Text.assemble(
        *((visible(p), "") if isinstance(p, str) else (visible(p[0]), p[1]) for p in parts)
    )
