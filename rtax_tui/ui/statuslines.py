"""The monitor's one-line widgets: the selected cell, the run's progress, a replay's
position, and what shows instead of everything on a terminal too small."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from rtax_tui.analysis.noise_report import FEW
from rtax_tui.render.noise_render import ROUGH_NOTE
from rtax_tui.render.plaintext import styled
from rtax_tui.ui.feeds import EngineFeed, ReplayFeed
from rtax_tui.ui.histogram import ABOVE, BELOW, DOT, OTHER, STRIP_UNDER
from rtax_tui.ui.histpanel import HIST_PHASES
from rtax_tui.ui.livestate import LiveState
from rtax_tui.ui.widgets import (
    DIFFER,
    TABLE_PHASES,
    UNSTABLE,
    position_text,
    precision_text,
    progress_text,
)

MIN_SIZE = (80, 24)


class SelectedLine(Static):
    """Which cell the histograms show, and the keys to choose another; then what the
    report would say of its figures: why they may be unstable, which programs differ
    from a compared cell's, its precision verdict, and what `~` means."""

    def show(self, cell: str | None, st: LiveState | None = None) -> None:
        if not cell:
            self.update("")
            return
        text = styled(f"selected: {cell}  (s/S or arrows: other cell, l: lin/log)\n")
        text.append_text(legend(st is not None and few_samples(st, cell)))
        for line in [] if st is None else cell_notes(st, cell):
            text.append("\n")
            text.append_text(line)
        self.update(text)


def few_samples(st: LiveState, cell: str) -> bool:
    """Whether a histogram of the cell is drawn as dots (fewer than STRIP_UNDER)."""
    cs = st.cells.get(cell)
    return cs is not None and any(0 < cs.phases[p].n < STRIP_UNDER for p in HIST_PHASES)


def legend(dots: bool) -> Text:
    """What the histograms' marks mean, on screen (not only in `?`)."""
    t = Text("marks: ")
    t.append("▲", style="bold green")
    t.append(" P50  ")
    t.append("▲", style="yellow")
    t.append(" P95  ")
    t.append(OTHER, style="magenta")
    t.append(" another cell's P50 (")
    t.append(f"{BELOW} {ABOVE}", style="magenta")
    t.append(": off this cell's axis)")
    if dots:
        t.append(f"  {DOT}", style="cyan")
        t.append(" one sample")
    return t


def cell_notes(st: LiveState, cell: str) -> list[Text]:
    """The selected cell's notes, a line each (text from the recording never read as
    markup: `styled`)."""
    out = []
    noise = st.stability(cell, exact=st.status is not None)
    if noise and noise["unstable"]:
        out.append(
            styled((f"{UNSTABLE} may be unstable: ", "bold yellow"), "; ".join(noise["reasons"]))
        )
    for other, diffs in st.programs_differ(cell):
        out.append(
            styled((f"{DIFFER} programs differ from {other}: ", "bold magenta"), "; ".join(diffs))
        )
    got = st.precision_of(cell)
    if got is not None:
        cs = st.cells.get(cell)
        target = f"±{(st.precision_target or 0.0) * 100:g}%"
        line = styled(f"precision {target} after round {st.precision_round}: ")
        line.append_text(precision_text(got))
        if cs is not None:  # the trials the verdict is worked out from (precision_of)
            line.append_text(styled(f", n {cs.phases['total'].n} of {cs.n}"))
        if st.precision_end is not None:
            line.append_text(styled(f"; rounds ended: {st.precision_end}"))
        out.append(line)
    cs = st.cells.get(cell)
    if cs is not None and any(0 < cs.phases[p].n < FEW for p in TABLE_PHASES):
        out.append(styled((ROUGH_NOTE, "dim")))
    return out


class ProgressLine(Static):
    """Trials done of planned, failures, in flight, elapsed and left; `extra`: the
    engine's state (paused, stopping, its exit or its last words)."""

    def show(self, st: LiveState, extra: str, replay: ReplayFeed | None = None) -> None:
        """A replay's time left is the rest of its recording (the position line's
        figures) at its speed: the trial rate of its first second said `~20s left`
        beside `0.95s / 118.43s`."""
        left = st.eta_s() if replay is None else replay_left_s(replay)
        self.update(progress_text(st, extra, left))


def replay_left_s(feed: ReplayFeed) -> float | None:
    """Seconds until a replay ends at its speed; None at max speed (no clock) or at
    the end."""
    if feed.speed is None or feed.done:
        return None
    return max(0, feed.end_t_ns - feed.t_ns) / 1e9 / feed.speed


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
        self.update(
            position_text(feed.t_ns, feed.end_t_ns, self.content_size.width or width, label)
        )


class TooSmallNote(Static):
    """Shown instead of the screen (by the screen's class `too-small`)."""

    def show(self, width: int, height: int) -> None:
        self.update(
            f"The terminal is {width}×{height}; rtax's console needs at least "
            f"{MIN_SIZE[0]}×{MIN_SIZE[1]}.\nEnlarge the window, or press q to quit."
        )
