"""The run history: every recording under ./recordings (and the examples), one a line.

From here a run is opened (replayed), compared with another, shown as its report,
or run again with changes: the launcher opens filled in with its profile, and once
the new run ends the compare screen opens against the one it came from. The lines
come from `analysis.history` (the recording reader and the one trial fold), read in a
thread so a large recording never stalls the keys.

Beside each run, the steps `rtax history` finds at it: per profile, its runs' P50s run
after run through `analysis.trends` (the same rule, read in the same thread, each file
once per version), and where a cell's phase stepped, ▲ up or ▼ down with its size; the
highlighted run's steps are said in full under the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Header, Input, Label, Static
from textual.widgets.data_table import ColumnKey

from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT, parse_min_effect
from rtax_tui.analysis.history import RunSummary, display_path, fmt_duration, history
from rtax_tui.analysis.trends import newest, run_figures, steps_by_recording, trends
from rtax_tui.render.history_render import DOWN, UP, step_line
from rtax_tui.render.plaintext import styled
from rtax_tui.ui.fit import FitFooter
from rtax_tui.ui.navigation import OpenCompare, OpenReplay

STATUS_STYLE = {"completed": "green", "interrupted": "yellow", "failed": "red"}


# the last, the recording's path, gets what the others leave (`on_resize`)
COLUMNS = (("", 1), ("date", 16), ("profile", 13), ("cells", 5), ("trials", 6),
           ("failed", 6), ("status", 11), ("duration", 8), ("steps here", 14),
           ("recording", 60))  # fmt: skip


class HistoryScreen(Screen[None]):
    """`h` from any screen."""

    BINDINGS = [
        Binding("enter,o", "open", "replay", tooltip="replay the highlighted run"),
        Binding("space", "mark", "mark", tooltip="mark a run (two marked: c compares them)"),
        Binding("c", "compare", "compare",
                tooltip="compare the two marked runs (or the marked one and the highlighted)"),
        Binding("r", "report", "report", tooltip="the highlighted run's report (rtax report)"),
        Binding("e", "rerun", "rerun",
                tooltip="the launcher filled in from this run; afterwards, the comparison"),
        Binding("slash", "filter", "filter",
                tooltip="filter by text (date, profile, cell, status)"),
        Binding("escape", "back", "back", show=False,
                tooltip="back (or quit when it is the only screen); in the filter: to the runs"),
    ]  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunSummary] = []
        self.shown: list[RunSummary] = []
        self.marked: list[str] = []
        # per recording, the steps `rtax history` finds at it (None: not read yet)
        self.steps: dict[str, list[dict[str, Any]]] | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="τ")
        with Vertical(id="main"):
            yield Input(placeholder="/ filter: profile, date, cell, status…", id="filter")
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            yield Static(id="run-steps")
            yield Static("reading the recordings…", id="runs-note")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = "rtax history"
        self.sub_title = "./recordings and the examples"
        t = self.query_one("#runs", DataTable)
        for col, w in COLUMNS:
            t.add_column(col, key=col or "mark", width=w)
        t.focus()
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        runs = history()
        self.app.call_from_thread(self._loaded, runs)
        self.app.call_from_thread(self._stepped, profile_steps(runs))

    def _loaded(self, runs: list[RunSummary]) -> None:
        self.runs = runs
        self._draw()

    def _stepped(self, steps: dict[str, list[dict[str, Any]]]) -> None:
        self.steps = steps
        self._draw()

    def _draw(self) -> None:
        words = self.query_one("#filter", Input).value.lower().split()
        self.shown = [r for r in self.runs if all(w in r.text for w in words)]
        t = self.query_one("#runs", DataTable)
        row = t.cursor_row
        t.clear()
        for r in self.shown:
            t.add_row(*self._row(r), key=r.path)
        if self.shown:
            t.move_cursor(row=min(row, len(self.shown) - 1))
        note = f"{len(self.shown)} of {len(self.runs)} runs"
        if self.marked:
            note += f"; marked: {', '.join(Path(p).name for p in self.marked)}"
        self.query_one("#runs-note", Static).update(
            styled(
                note + "  ·  enter open · space mark · c compare · r report · e rerun · / filter"
            )
        )
        self._draw_steps()

    def _draw_steps(self) -> None:
        """The highlighted run's steps, a line each, as `rtax history` says them."""
        r = self.current()
        got = (self.steps or {}).get(r.path, []) if r is not None else []
        lines = [
            styled((step["cell"] + " ", "bold"), step_line_of(step)) for step in got[:STEP_LINES]
        ]
        if len(got) > STEP_LINES:
            lines.append(styled((f"… {len(got) - STEP_LINES} more: rtax history", "dim")))
        if r is not None:
            lines.insert(0, styled((display_path(r.path), "dim")))
        said = self.query_one("#run-steps", Static)
        said.update(Text("\n").join(lines))
        said.display = bool(lines)

    def on_resize(self) -> None:
        """The recording's column gets the width the others leave (at 100 columns,
        none: the highlighted one's path is said under the table)."""
        t = self.query_one("#runs", DataTable)
        fixed = sum(w + 2 for _, w in COLUMNS[:-1])
        t.columns[ColumnKey("recording")].width = max(10, self.size.width - fixed - 3)
        t.refresh()

    def _row(self, r: RunSummary) -> list[str | Text]:
        date = r.started_at[:16].replace("T", " ")
        status = Text(r.status, style=STATUS_STYLE.get(r.status, "dim"))
        return [
            "●" if r.path in self.marked else " ",
            date,
            Text(r.profile),  # Text: a name or a reason is shown as it is, not as markup
            str(len(r.cells)),
            str(r.trials),
            str(r.failed),
            status,
            fmt_duration(r.duration_s) if r.duration_s else "-",
            steps_cell(None if self.steps is None else self.steps.get(r.path, [])),
            Text(display_path(r.path) if r.error is None else f"{r.path}: {r.error}"),
        ]

    @on(DataTable.RowHighlighted, "#runs")
    def _highlighted(self) -> None:
        self._draw_steps()

    @on(Input.Changed, "#filter")
    def _filter(self) -> None:
        self._draw()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#runs", DataTable).focus()

    def current(self) -> RunSummary | None:
        t = self.query_one("#runs", DataTable)
        if not self.shown or t.cursor_row < 0:
            return None
        return self.shown[min(t.cursor_row, len(self.shown) - 1)]

    # -- actions ---------------------------------------------------------------------
    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_open(self) -> None:
        if isinstance(self.focused, Input):
            self.query_one("#runs", DataTable).focus()
            return
        r = self.current()
        if r is not None:
            self.post_message(OpenReplay(r.path))

    @on(DataTable.RowSelected)
    def _selected(self) -> None:
        self.action_open()

    def action_mark(self) -> None:
        r = self.current()
        if r is None:
            return
        if r.path in self.marked:
            self.marked.remove(r.path)
        else:
            self.marked = [*self.marked[-1:], r.path]  # the last two marked
        self._draw()

    def action_compare(self) -> None:
        r = self.current()
        pair = list(self.marked)
        if len(pair) == 1 and r is not None and r.path != pair[0]:
            pair.append(r.path)
        if len(pair) != 2:
            self.notify("mark two runs with space (or one, then highlight the other)")
            return
        self.post_message(OpenCompare(pair[0], pair[1]))

    def action_report(self) -> None:
        r = self.current()
        if r is not None:
            self.app.push_screen(ReportPanel(r.path))

    def action_rerun(self) -> None:
        r = self.current()
        if r is None:
            return
        from rtax_tui.ui.launcher import launcher_for_recording

        try:
            screen = launcher_for_recording(r.path, ssh_flags=getattr(self.app, "ssh_flags", []))
        except Exception as exc:
            self.notify(f"cannot rerun {r.path}: {exc}", severity="error")
            return
        self.app.push_screen(screen)

    def action_back(self) -> None:
        if isinstance(self.focused, Input):
            self.query_one("#runs", DataTable).focus()
            return
        self.dismiss()


STEP_LINES = 4  # the highlighted run's steps said in full; more: `rtax history`


def profile_steps(runs: list[RunSummary]) -> dict[str, list[dict[str, Any]]]:
    """Per recording, the steps `rtax history` finds at it (`analysis.trends`, its
    default phases and minimum effect), each profile's readable runs read together."""
    by_profile: dict[str, list[tuple[str, str]]] = {}
    for r in runs:
        if r.error is None:
            by_profile.setdefault(r.profile, []).append((r.started_at, r.path))
    min_effect = parse_min_effect(DEFAULT_MIN_EFFECT)
    out: dict[str, list[dict[str, Any]]] = {}
    for pairs in by_profile.values():
        if len(pairs) < 2:
            continue
        figures = []
        for path in newest(pairs):
            try:
                figures.append(run_figures(path))
            except Exception:  # changed or damaged since it was listed: left out
                continue
        series = trends(figures, rel=min_effect.rel, abs_ms=min_effect.abs_ms)
        out.update(steps_by_recording(series))
    return out


def steps_cell(steps: list[dict[str, Any]] | None) -> Text:
    """A run's steps in its row: the largest (▲ up red, ▼ down green, its size and
    phase), then how many more; `…` while they are read."""
    if steps is None:
        return Text("…", style="dim")
    if not steps:
        return Text("")
    big = max(steps, key=lambda s: abs(s["diff_pct"] or 0.0))
    pct = "" if big["diff_pct"] is None else f"{big['diff_pct']:+.0f}% "
    up = big["diff_ms"] > 0
    t = Text(f"{UP if up else DOWN}{pct}{big['phase']}", style="bold red" if up else "bold green")
    if len(steps) > 1:
        t.append(f" +{len(steps) - 1}", style="dim")
    return t


def step_line_of(step: dict[str, Any]) -> str:
    """A step as `rtax history` says it, without its cell (said before it)."""
    line = step_line({"cell": ""}, step)
    return line.lstrip()


class ReportPanel(ModalScreen[None]):
    """`rtax report FILE` in a dialog: the same document, drawn by the same code."""

    BINDINGS = [Binding("escape,q,r", "dismiss", "close")]

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="report"):
            yield Label(styled(f"report: {self.path}"), classes="title")
            with VerticalScroll(id="report-body"):
                yield Static("reading…", id="report")
            yield Static("[dim]escape: close[/dim]")

    def on_mount(self) -> None:
        self.render_report(max(60, int(self.app.size.width * 0.96) - 10))

    @work(thread=True, exclusive=True)
    def render_report(self, width: int) -> None:
        from rtax_tui.analysis.report import build_report
        from rtax_tui.model.recording import read_recording
        from rtax_tui.render.reporting import print_report, text_console

        try:
            report = build_report(read_recording(self.path))
        except Exception as exc:
            self.app.call_from_thread(self._show, Text(f"cannot report: {exc}", style="red"))
            return
        console = text_console(width)
        print_report(report, console)
        text = Text.from_ansi(console.export_text(styles=True))
        self.app.call_from_thread(self._show, text)

    def _show(self, text: Text) -> None:
        self.query_one("#report", Static).update(text)
