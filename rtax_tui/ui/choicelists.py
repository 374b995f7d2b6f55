"""The launcher's lists of what to run: drivers, workloads, channels, and the options
of the highlighted driver (its `[drivers_options.NAME]`, edited inline)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.segment import Segment
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Input, SelectionList

from rtax_tui.engine.profile_toml import inline
from rtax_tui.render.plaintext import styled

CHECKED, UNCHECKED = "✓", " "


class CheckList(SelectionList[str]):
    """A selection list whose checked items carry `✓` in their box and unchecked ones a
    blank: Textual draws an `X` in both, told apart only by colour (unreadable on a
    monochrome terminal or in a text capture)."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        index = self.scroll_offset.y + y
        segments = list(line)
        if index >= self.option_count or len(segments) < 4:
            return line  # below the last option: no box on this line
        value = self.get_option_at_index(index).value
        glyph = CHECKED if value in self.selected else UNCHECKED
        box = segments[1]  # the box's inside (Textual's ToggleButton.BUTTON_INNER)
        segments[1] = Segment(glyph, box.style, box.control)
        return Strip(segments, line.cell_length)


def fill_list(
    sl: SelectionList[str],
    choices: list[str],
    chosen: list[str],
    label: Callable[[str], Text] = styled,
) -> None:
    """A selection list's options again: `choices` in order, `chosen` ones selected."""
    sl.clear_options()
    sl.add_options([(label(c), c, c in chosen) for c in choices])


class ChoiceLists(Vertical):
    """Three selection lists and the driver options field; a move to another driver
    posts `ChoiceLists.DriverHighlighted` (the field then shows that driver's)."""

    class DriverHighlighted(Message):
        """Another driver is highlighted in the drivers list."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.drivers = CheckList(id="drivers")
        self.workloads = CheckList(id="workloads")
        self.channels = CheckList(id="channels")
        self.options = Input(id="driver-opts", placeholder="options: key = value, …")

    def compose(self) -> ComposeResult:
        yield self.drivers
        yield self.workloads
        yield self.channels
        yield self.options

    def on_mount(self) -> None:
        self.drivers.border_title = "drivers ✓ ok ✗ see below"
        self.workloads.border_title = "workloads"
        self.channels.border_title = "channels"

    @property
    def highlighted_driver(self) -> str | None:
        sl = self.drivers
        if sl.highlighted is None or sl.highlighted >= sl.option_count:
            return None
        return str(sl.get_option_at_index(sl.highlighted).value)

    def show_options(self, driver: str, body: Mapping[str, Any]) -> None:
        """The options field on `driver`'s table."""
        self.options.value = inline(body)
        self.options.border_title = f"{driver} options"

    @on(SelectionList.SelectionHighlighted)
    def _highlighted(self, ev: SelectionList.SelectionHighlighted[str]) -> None:
        ev.stop()
        if ev.selection_list is self.drivers:
            self.post_message(self.DriverHighlighted())
