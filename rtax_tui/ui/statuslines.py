"""The monitor's one-line widgets: the selected cell, the run's progress, a replay's
position, and what shows instead of everything on a terminal too small."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import Static

from rtax_tui.render.plaintext import styled
from rtax_tui.ui.feeds import EngineFeed, ReplayFeed
from rtax_tui.ui.livestate import LiveState
from rtax_tui.ui.widgets import position_text, progress_text

MIN_SIZE = (80, 24)


class SelectedLine(Static):
    """Which cell the histograms show, and the keys to choose another."""

    def show(self, cell: str | None) -> None:
        sel = f"selected: {cell}  (s/S or arrows: other cell, l: lin/log)" if cell else ""
        self.update(styled(sel))


class ProgressLine(Static):
    """Trials done of planned, failures, in flight, elapsed and left; `extra`: the
    engine's state (paused, stopping, its exit or its last words)."""

    def show(self, st: LiveState, extra: str) -> None:
        self.update(progress_text(st, extra))


def engine_note(
    engine: EngineFeed | None,
    ended: bool,
    returncode: int | None,
    st: LiveState,
    log_lines: Sequence[str],
) -> str:
    """A run's engine on the progress line: its exit when not a plain end or a stop,
    stopping, paused, or its last words before the run's header came."""
    if ended:
        return f"engine exited ({returncode})" if returncode not in (0, 130) else ""
    if engine is not None and engine.stopping:
        return "stopping: tearing down"
    if engine is not None and engine.paused:
        return "paused"
    if st.header is None and log_lines:
        return log_lines[-1][:80]
    return ""


class PositionLine(Static):
    """A replay's position in its recording, and its speed."""

    def show(self, feed: ReplayFeed, width: int) -> None:
        speed = "max" if feed.speed is None else f"{feed.speed:g}×"
        label = f"{'paused' if feed.paused else 'playing'} {speed}"
        if feed.done:
            label = "end"
        self.update(position_text(feed.t_ns, feed.end_t_ns, width, label))


class TooSmallNote(Static):
    """Shown instead of the screen (by the screen's class `too-small`)."""

    def show(self, width: int, height: int) -> None:
        self.update(
            f"The terminal is {width}×{height}; rtax's console needs at least "
            f"{MIN_SIZE[0]}×{MIN_SIZE[1]}.\nEnlarge the window, or press q to quit."
        )
