"""The run and replay screens: one screen, fed by the engine's pipe or by a recording.

The feed updates `LiveState`'s plain aggregates as events come; a timer draws the
screen's parts from them at about 10 Hz, whatever the event rate. The parts are widgets
of their own modules (`CellTable`, `HistogramPanel`, the lines of `statuslines`), read
through the typed properties below; what to open next is the app's (`navigation`)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header

from rtax_tui.model.recording import Recording, read_recording
from rtax_tui.ui.feeds import EngineFeed, ReplayFeed
from rtax_tui.ui.fit import FitFooter
from rtax_tui.ui.histpanel import HistogramPanel
from rtax_tui.ui.livestate import LiveState
from rtax_tui.ui.navigation import OpenCompare, OpenReplay
from rtax_tui.ui.statuslines import (
    MIN_SIZE,
    PositionLine,
    ProgressLine,
    SelectedLine,
    TooSmallNote,
    engine_note,
)
from rtax_tui.ui.widgets import CellTable

REFRESH_S = 0.1  # about 10 Hz, whatever the event rate
FREEZE_EVERY = 20_000
SPEEDS: dict[str, float | None] = {"1": 1.0, "2": 2.0, "0": 10.0, "m": None}


class FeedEnded(Message):
    """The engine exited, or the replay reached the end."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__()
        self.returncode = returncode


class Log(Message):
    """A line of the engine's stderr (asset downloads, errors before the first trial)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class MonitorScreen(Screen[int]):
    BINDINGS = [
        Binding("space", "toggle_pause", "pause",
                tooltip="a run: no new trial starts, those in flight finish; a replay: playback"),
        Binding("x", "stop", "stop",
                tooltip="stop the run: tear down what runs, keep the recording"),
        # Off the footer (it must fit 120 columns with the app's n/h): in ? help and ^p.
        Binding("s", "next_cell", "next cell", show=False,
                tooltip="select the next cell (or arrows)"),
        Binding("S", "prev_cell", "prev cell", show=False,
                tooltip="select the previous cell (or arrows)"),
        Binding("v", "phase_figure", "P50/P95", show=False,
                tooltip="table: the phases' P95 instead of their P50 (when only one fits)"),
        Binding("l", "toggle_log", "lin/log", show=False,
                tooltip="histograms: log or linear time axis"),
        Binding("1", "speed('1')", "1x", show=False, tooltip="speed: the recorded pace"),
        Binding("2", "speed('2')", "2x", show=False, tooltip="speed: 2×"),
        Binding("0", "speed('0')", "10x", show=False, tooltip="speed: 10×"),
        Binding("m", "speed('m')", "max", show=False, tooltip="speed: as fast as possible"),
        Binding(".", "step", "step", show=False,
                tooltip="step: play up to the next trial's end, then pause"),
        Binding("r", "replay", "replay",
                tooltip="replay this recording (a run: once it ended; a replay: restart)"),
        Binding("c", "compare", "compare", tooltip="compare this recording with another"),
        Binding("p", "project", "project",
                tooltip="project worker-hours (N trajectories × S steps)"),
        Binding("b", "boundary", "boundaries", show=False,
                tooltip="boundaries: what each driver keeps out (its last `rtax probe`)"),
        Binding("g", "plot", "plot", show=False,
                tooltip="plot: write this view's figure to recordings/plots/ (SVG)"),
        Binding("question_mark", "help", "help", tooltip="these keys"),
    ]  # fmt: skip

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that mean nothing in this mode are left out of the footer, the help
        and the command palette."""
        if action in ("speed", "step"):
            return self.mode == "replay"
        if action == "stop":
            return self.mode == "run"
        return True

    def __init__(
        self,
        mode: str,
        *,
        recording: Recording | None = None,
        record_path: str | None = None,
        engine_argv: list[str] | None = None,
        speed: float | None = 1.0,
        title: str = "",
    ) -> None:
        super().__init__()
        self.mode = mode  # "run" or "replay"
        self.state = LiveState()
        self.events: list[dict[str, Any]] = []
        self.recording = recording
        self.record_path = record_path
        self.engine_argv = engine_argv
        self.start_speed = speed
        self.title_text = title
        self.engine: EngineFeed | None = None
        self.replay: ReplayFeed | None = None
        self.log_lines: deque[str] = deque(maxlen=200)
        self.log_axis = True
        self.drawn_version = -1
        self.frame_times: deque[float] = deque(maxlen=600)  # for bench/console_bench.py
        self.ended = False
        self.returncode: int | None = None
        self.quitting = False
        self._last_event_at = time.monotonic()
        # a rerun from the history: the compare screen opens against this once it ends
        self.compare_with: str | None = None

    # -- the parts --------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="τ")
        with Vertical(id="main"):
            yield CellTable(id="cells")
            yield SelectedLine(id="selected")
            yield HistogramPanel(id="hists")
            yield ProgressLine(id="progress")
            yield PositionLine(id="position")
        yield TooSmallNote(id="too-small")
        yield FitFooter()

    @property
    def cells(self) -> CellTable:
        return self.query_one(CellTable)

    @property
    def panel(self) -> HistogramPanel:
        return self.query_one(HistogramPanel)

    @property
    def selected_line(self) -> SelectedLine:
        return self.query_one(SelectedLine)

    @property
    def progress_line(self) -> ProgressLine:
        return self.query_one(ProgressLine)

    @property
    def position_line(self) -> PositionLine:
        return self.query_one(PositionLine)

    def on_mount(self) -> None:
        self.title = "rtax"
        self.sub_title = self.title_text
        self.position_line.display = self.mode == "replay"
        self.set_interval(REFRESH_S, self.redraw)
        self.on_resize()
        if self.mode == "replay":
            self.start_replay()
        elif self.engine_argv is None and self.recording is not None:
            # a finished run drawn from its recording (snapshots, and `rtax replay --end`)
            for ev in (self.recording.header, *self.recording.events):
                self.ingest(ev)
            self.post_message(FeedEnded(0))
        else:
            # after the first frame: the console's own start-up must not overlap the
            # engine's first trials on a small machine
            self.call_after_refresh(
                lambda: self.run_worker(self._run_engine(), name="engine", exclusive=False)
            )

    # -- feeds ------------------------------------------------------------------
    def ingest(self, ev: dict[str, Any]) -> None:
        self.events.append(ev)
        self.state.ingest(ev)
        if len(self.events) % FREEZE_EVERY == 0:
            # events live as long as the screen: keep the cyclic GC from rescanning them
            # (a full collection over 10^5 dicts stalls key presses by 100 ms)
            gc.freeze()
        if self.mode == "run":
            self._last_event_at = time.monotonic()

    def _estimate_now(self) -> None:
        """Between events the countdowns and elapsed time still move (display only)."""
        st = self.state
        if self.ended or st.status is not None:
            st.now_ns = None
        elif self.replay is not None:
            feed = self.replay
            st.now_ns = feed.t_ns if feed.paused else min(int(feed._clock_ns()), feed.end_t_ns)
        elif st.header is not None:
            since = time.monotonic() - self._last_event_at
            st.now_ns = st.last_t_ns + int(since * 1e9)

    def start_replay(self) -> None:
        assert self.recording is not None
        self.state = LiveState()
        self.events = []
        self.drawn_version = -1
        self.ended = False
        self.cells.reset()
        self.replay = ReplayFeed(self.recording, self.ingest, self.start_speed)
        self.run_worker(self._run_replay(self.replay), name="replay", exclusive=True, group="feed")

    async def _run_replay(self, feed: ReplayFeed) -> None:
        await feed.run()
        self.post_message(FeedEnded(0))

    async def _run_engine(self) -> None:
        assert self.engine_argv is not None

        def log(line: str) -> None:
            self.post_message(Log(line))

        self.engine = EngineFeed(self.engine_argv, self.ingest, log)
        try:
            rc = await self.engine.run()
        except OSError as exc:
            self.post_message(Log(f"cannot start the engine: {exc}"))
            rc = 1
        self.post_message(FeedEnded(rc))

    @on(FeedEnded)
    def _feed_ended(self, msg: FeedEnded) -> None:
        self.ended = True
        self.returncode = msg.returncode
        self.redraw(force=True)
        if self.mode == "run":
            if self.state.header is None and msg.returncode:
                self.notify(
                    "the run did not start: " + (self.log_lines[-1] if self.log_lines else "?"),
                    severity="error",
                    timeout=30,
                )
            elif self.record_path:
                self.notify(f"recording: {self.record_path}  (r: replay, c: compare)")
                if self.compare_with and not self.quitting:
                    self.post_message(OpenCompare(self.compare_with, self.record_path))
            if self.quitting:  # `q` came while the engine was still going: now leave
                self.dismiss(msg.returncode or 0)

    @on(Log)
    def _log(self, msg: Log) -> None:
        self.log_lines.append(msg.text)

    # -- drawing ------------------------------------------------------------------
    def on_resize(self) -> None:
        """Too small a terminal: a note instead of the screen (its class `too-small`).
        Otherwise drawn again once laid out at the new size: the histograms' titles and the
        position line are made for their width (an ended run is not drawn again by itself)."""
        w, h = self.app.size
        small = w < MIN_SIZE[0] or h < MIN_SIZE[1]
        self.set_class(small, "too-small")
        if small:
            self.query_one(TooSmallNote).show(w, h)
        else:
            self.call_after_refresh(self.redraw, True)

    def redraw(self, force: bool = False) -> None:
        st = self.state
        self._estimate_now()
        if not force and st.version == self.drawn_version and self.ended:
            return
        self.frame_times.append(time.monotonic())
        self.drawn_version = st.version
        with self.app.batch_update():
            table = self.cells
            table.update_from(st)
            # as tall as its rows, up to 40% of the screen: the histograms get the rest
            table.fit_height(max(4, int(self.size.height * 0.4)))
            cell = table.selected_cell
            self.panel.draw(st, cell, self.log_axis)
            self.selected_line.show(cell, st)
            extra = (
                engine_note(self.engine, self.ended, self.returncode, st, self.log_lines)
                if self.mode == "run"
                else ""
            )
            self.progress_line.show(st, extra, self.replay)
            if self.replay is not None:
                self.position_line.show(self.replay, self.size.width)

    @on(CellTable.RowHighlighted)
    def _row(self) -> None:
        self.redraw(force=True)

    # -- actions --------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        if self.replay is not None:
            if self.replay.paused:
                self.replay.resume()
            else:
                self.replay.pause()
        elif self.engine is not None and self.engine.running:
            if self.engine.paused:
                self.engine.resume()
                self.notify("resumed")
            else:
                self.engine.pause()
                self.notify("paused: trials in flight finish, no new one starts")
        self.redraw(force=True)

    def action_stop(self) -> None:
        if self.engine is not None and self.engine.running and not self.engine.stopping:
            self.engine.stop()
            self.notify("stopping: trials in flight are torn down; the recording is kept")
        self.redraw(force=True)

    def action_next_cell(self) -> None:
        self.cells.move_selection(1)

    def action_prev_cell(self) -> None:
        self.cells.move_selection(-1)

    def action_phase_figure(self) -> None:
        self.cells.toggle_phase_figure()
        self.redraw(force=True)

    def action_toggle_log(self) -> None:
        self.log_axis = not self.log_axis
        self.redraw(force=True)

    def action_speed(self, key: str) -> None:
        if self.replay is not None:
            self.replay.set_speed(SPEEDS[key])
            self.redraw(force=True)

    def action_step(self) -> None:
        if self.replay is not None:
            self.replay.step()
            self.redraw(force=True)

    def recording_file(self) -> str | None:
        """The recording this screen shows (a run: once the engine wrote it)."""
        if self.mode == "replay":
            return self.recording.path if self.recording else None
        return self.record_path

    def action_replay(self) -> None:
        if self.mode == "replay":
            self.start_replay()
            return
        if not self.ended:
            self.notify("the run is still going: stop it (x) or wait, then replay", timeout=4)
            return
        path = self.record_path
        if not path or not Path(path).exists():
            self.notify("no recording was written", severity="error")
            return
        self.post_message(OpenReplay(path))

    def action_compare(self) -> None:
        path = self.recording_file()
        if not path or not Path(path).exists():
            self.notify("no recording to compare yet", severity="error")
            return
        from rtax_tui.ui.modals import PickRecording

        def chosen(other: str | None) -> None:
            if other:
                self.post_message(OpenCompare(path, other))

        self.app.push_screen(PickRecording(exclude=path), chosen)

    def action_project(self) -> None:
        if self.state.header is None:
            self.notify("nothing recorded yet", severity="warning")
            return
        from rtax_tui.ui.modals import ProjectPanel

        rec = Recording(self.recording_file() or "-", self.state.header, list(self.events[1:]))
        self.app.push_screen(ProjectPanel(rec))

    def action_boundary(self) -> None:
        if self.state.header is None:
            self.notify("nothing recorded yet", severity="warning")
            return
        from rtax_tui.ui.modals import BoundaryPanel

        self.app.push_screen(BoundaryPanel(self.state.header, self.events[1:]))

    def action_plot(self) -> None:
        """`g`: the figure of what this screen shows (`rtax_tui.render.plots.kind_for`), drawn
        in a thread (matplotlib takes a moment) from the events so far."""
        if self.state.header is None:
            self.notify("nothing recorded yet", severity="warning")
            return
        rec = Recording(self.recording_file() or "console", self.state.header, self.events[1:])

        def draw() -> None:
            from rtax_tui.render.plots import plot_view

            try:
                path = plot_view(rec)
            except Exception as exc:  # a figure is a convenience: say why, keep running
                self.app.call_from_thread(self.notify, f"no plot: {exc}", severity="error")
                return
            self.app.call_from_thread(self.notify, f"plot: {path}")

        self.run_worker(draw, thread=True, group="plot", name="plot")

    def action_help(self) -> None:
        from rtax_tui.ui.modals import show_help

        show_help(self)

    async def action_back(self) -> None:
        """`q` (the app's): leave this screen, back to the one before (the launcher), or
        out of rtax where this screen is the first. A running run is stopped and torn
        down first, then the screen leaves by itself; so does a run whose end is shown
        while its engine is still exiting (`q` there once quit rtax altogether)."""
        if self.engine is not None and self.engine.running:
            if self.quitting:
                return
            self.quitting = True
            if self.state.status is None:  # (else it has ended and is only exiting)
                self.notify("stopping the run: tearing down, then back…")
                self.run_worker(self.engine.shutdown(), group="shutdown")
            return
        if self.replay is not None:
            self.workers.cancel_group(self, "feed")
        self.dismiss((self.returncode or 0) if self.mode == "run" else 0)

    async def wait_idle(self) -> None:  # used by tests and the bench
        while not self.ended:
            await asyncio.sleep(0.02)


def a_run_is_going(screens: Iterable[Screen[Any]]) -> bool:
    """Whether one of `screens` runs the engine (two runs at once would each disturb
    the other's figures)."""
    return any(
        isinstance(s, MonitorScreen) and s.engine is not None and s.engine.running for s in screens
    )


def load_replay(path: str) -> Recording:
    return read_recording(path)


def replay_screen(path: str, speed: float | None = 1.0) -> MonitorScreen:
    rec = read_recording(path)  # a bad file fails here, before the terminal is taken
    gc.freeze()  # the recording stays for the app's life: no GC pass should rescan it
    prof = (rec.header.get("profile") or {}).get("name", "?")
    return MonitorScreen(
        "replay", recording=rec, speed=speed, title=f"replay {Path(path).name} ({prof})"
    )


def open_replay(app: App[Any], path: str) -> None:
    try:
        screen = replay_screen(path)
    except Exception as exc:
        app.notify(f"cannot replay {path}: {exc}", severity="error")
        return
    app.push_screen(screen)
