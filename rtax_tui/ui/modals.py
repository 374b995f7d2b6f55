"""Small screens over the monitor: help, picking a recording, the project panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Input, Label, Static

from rtax_tui.analysis.history import RunSummary, display_path, history, paired_cells, summarize
from rtax_tui.model.events import one_line, visible
from rtax_tui.model.recording import Recording
from rtax_tui.render.noise_render import ROUGH_NOTE
from rtax_tui.render.plaintext import styled
from rtax_tui.render.reporting import project_figures, project_rough

LEGEND = (
    "Histograms: the selected cell's samples in log-spaced bins; ▲ green P50, ▲ yellow P95, "
    "· other cells' medians. Statistics count only measured trials that ended ok and valid, "
    "as `rtax report` does."
)


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below, generated from its bindings (and the app's): rtax's
    own first, grouped by where they work, then Textual's generic ones; each key in a
    column of its own, its text wrapped beside it."""

    # a modal screen hides the app's bindings: `q` closes it here, as it leaves a screen
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def __init__(
        self, title: str, sections: list[tuple[str, list[tuple[str, str]]]], legend: str = ""
    ) -> None:
        super().__init__()
        self.title_text = title
        self.sections = sections
        self.legend = legend

    def compose(self) -> ComposeResult:
        width = max([8, *(len(k) for _, rows in self.sections for k, _ in rows)])
        with Vertical(id="dialog", classes="help"):
            yield Label(self.title_text, classes="title")
            with VerticalScroll(id="help-keys"):
                for heading, rows in self.sections:
                    yield Static(heading, classes="help-heading")
                    grid = Table.grid(padding=(0, 2))
                    grid.add_column(justify="right", no_wrap=True, min_width=width)
                    grid.add_column(ratio=1, overflow="fold")
                    for key, what in rows:  # Text: a tooltip's `[pool]` is not markup
                        grid.add_row(Text(visible(key), style="bold"), Text(visible(what)))
                    yield Static(grid)
            if self.legend:
                yield Static(self.legend, classes="legend")
            yield Static("[dim]escape: close · q: back · ctrl+p: every action by name[/dim]")


TEXTUAL = "Textual's, in lists, tables and fields"


def key_name(screen: Screen[Any], binding: Binding) -> str:
    """A key as the docs write it: `ctrl+s`, `enter`, `escape` (Textual shows `^s`, `⏎`)."""
    shown = binding.key_display or screen.app.get_key_display(binding)
    shown = {"⏎": "enter", "esc": "escape"}.get(shown, shown)
    return f"ctrl+{shown[1:]}" if shown.startswith("^") and len(shown) > 1 else shown


def _rtax_actions(node: object) -> set[str]:
    """The actions bound by rtax's own classes of `node` (not Textual's bases)."""
    return {
        b.action
        for cls in type(node).__mro__
        if cls.__module__.startswith("rtax_tui.")
        for b in cls.__dict__.get("BINDINGS", [])
        if isinstance(b, Binding)
    }


def help_sections(screen: Screen[Any], name: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, [(keys, what they do)]) for every binding active on `screen`: this
    screen's own (rtax's), then every screen's (the app's), then Textual's generic
    ones; the text is the binding's tooltip, or its description, in lower case."""
    own = {id(screen): _rtax_actions(screen), id(screen.app): _rtax_actions(screen.app)}
    groups: dict[str, dict[tuple[str, str], list[str]]] = {
        f"{name} keys": {},
        "every screen": {},
        TEXTUAL: {},
    }
    for ab in screen.active_bindings.values():
        b = ab.binding
        if not ab.enabled or b.system:
            continue
        if b.action in own.get(id(ab.node), ()):
            heading = f"{name} keys" if ab.node is screen else "every screen"
        else:
            heading = TEXTUAL
        what = (b.tooltip or b.description or b.action).rstrip(".")
        if heading == TEXTUAL:  # Textual's are titles ("Scroll Left"), rtax's sentences
            what = what.lower()
        groups[heading].setdefault((b.action, what), []).append(key_name(screen, b))
    return [
        (heading, [(" / ".join(dict.fromkeys(keys)), what) for (_, what), keys in rows.items()])
        for heading, rows in groups.items()
        if rows
    ]


def show_help(screen: Screen[Any]) -> None:
    mode = getattr(screen, "mode", "") or type(screen).__name__.removesuffix("Screen").lower()
    legend = LEGEND if hasattr(screen, "state") else ""
    screen.app.push_screen(
        HelpScreen(f"rtax console: {mode} keys", help_sections(screen, mode), legend)
    )


class Confirm(ModalScreen[bool]):
    """A yes/no question over the screen: `y` dismisses it with True, `n`, `q` or
    escape with False (the caller acts in the callback `push_screen` was given)."""

    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape,q", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(styled(self.question), classes="title")
            yield Static("[b]y[/b] yes · [b]n[/b] / escape no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PickRecording(ModalScreen[str | None]):
    """The recordings this one can be compared with: those with a cell the compare
    screen pairs with one of its own (`history.paired_cells`, the rule of `rtax compare
    --changed`), newest first, each with its start, profile and cells; the others are
    counted, not offered (a picker of every file offered `local/t0` against
    `local/mine`, which compare refuses). Read in a thread: many recordings never stall
    the keys. A recording's name and profile are its writer's text: shown on one line,
    escapes visible."""

    BINDINGS = [Binding("escape,q", "cancel", "cancel")]

    def __init__(self, exclude: str | None = None) -> None:
        super().__init__()
        self.exclude = exclude
        self.offered: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="wide"):
            yield Label("Compare with which recording? (enter: choose, escape: cancel)")
            yield DataTable(id="picks", cursor_type="row", zebra_stripes=True)
            yield Static("reading the recordings…", id="picks-note", classes="legend")

    def on_mount(self) -> None:
        t = self.query_one("#picks", DataTable)
        for col, w in PICK_COLUMNS:
            t.add_column(col, key=col, width=w)
        t.focus()
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        me = summarize(self.exclude) if self.exclude else None
        runs = [r for r in history() if r.error is None and not _same_file(r.path, self.exclude)]
        offers = [(r, _pair_count(me, r)) for r in runs]
        shown = [(r, n) for r, n in offers if n]
        self.app.call_from_thread(self._show, shown, len(runs) - len(shown), me)

    def _show(
        self, shown: list[tuple[RunSummary, int]], hidden: int, me: RunSummary | None
    ) -> None:
        t = self.query_one("#picks", DataTable)
        self.offered = [r.path for r, _ in shown]
        for r, n in shown:
            t.add_row(*_pick_row(r, n), key=r.path)
        note = self.query_one("#picks-note", Static)
        rule = "paired: its cells the compare pairs with this run's, as `rtax compare --changed`"
        if me is not None and not me.cell_trial_ns:
            note.update(Text("this run has no trial that ended yet: nothing to compare"))
        elif not shown:
            note.update(Text(f"no other recording shares a cell with this one ({rule})"))
        else:
            tail = f"; {hidden} more share no cell: not listed" if hidden else ""
            note.update(Text(f"{len(shown)} recordings share a cell with this one ({rule}){tail}"))

    @on(DataTable.RowSelected, "#picks")
    def _chosen(self, ev: DataTable.RowSelected) -> None:
        self.dismiss(str(ev.row_key.value))

    def action_cancel(self) -> None:
        self.dismiss(None)


# the recording's path gets the rest of the wide dialog's 94 columns of content
PICK_COLUMNS = (("started", 16), ("profile", 12), ("paired", 7), ("recording", 50))


def _same_file(path: str, other: str | None) -> bool:
    try:
        return other is not None and Path(path).resolve() == Path(other).resolve()
    except OSError:
        return False


def _pair_count(me: RunSummary | None, other: RunSummary) -> int:
    """Cells of `other` the compare would pair with `me`'s (all its timed cells when
    there is no `me`)."""
    if me is None:
        return len(other.cell_trial_ns)
    return len(paired_cells(me, other))


def _pick_row(r: RunSummary, paired: int) -> list[Text]:
    """A recording as the picker lists it: when it started, its profile, `paired/all`
    cells and its path, each one line with escapes visible."""
    started = r.started_at[:16].replace("T", " ")
    return [
        Text(one_line(started)),
        Text(one_line(r.profile)),
        Text(f"{paired} of {len(r.cells)}"),
        Text(one_line(display_path(r.path))),
    ]


class WholeNumber(Input):
    """A field of whole numbers that claims only the keys it can type: an Input claims
    every printable key, so `q` in the project panel's field was swallowed (nothing
    typed, the panel stayed) where every other screen leaves."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character is not None and (character.isdigit() or character in "+-")


class ProjectPanel(ModalScreen[None]):
    """Worker-hours per cell for N trajectories of S steps; inputs editable in place."""

    # its fields take whole numbers only (`WholeNumber`): `q` leaves from them too,
    # before the field sees it (priority)
    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("q", "dismiss", "close", priority=True),
    ]

    def __init__(self, rec: Recording, trajectories: int = 1_000_000, steps: int = 150) -> None:
        super().__init__()
        self.rec = rec
        self.trajectories = trajectories
        self.steps = steps

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="wide"):
            yield Label("Project: worker-hours = N × (create + ready + teardown + S × action)")
            with Horizontal(id="inputs"):
                yield Label("trajectories N ")
                yield WholeNumber(str(self.trajectories), id="n", type="integer")
                yield Label("  steps S ")
                yield WholeNumber(str(self.steps), id="s", type="integer")
            yield DataTable(id="proj")
            yield Static("", id="proj-note")
            yield Static(PROJECT_LEGEND, id="proj-legend", classes="legend")

    def on_mount(self) -> None:
        t = self.query_one("#proj", DataTable)
        cells = {e["cell"] for e in self.rec.events if e.get("type") == "trial_start"}
        cell_w = max([4, *(len(c) for c in cells)])
        for col, w in (("cell", cell_w), ("per traj", 10), ("worker-hours", 14), ("95% CI", 24)):
            t.add_column(col, key=col, width=w)  # fixed: auto widths drew row 1 too narrow
        self.compute(self.trajectories, self.steps)

    @on(Input.Changed)
    def _changed(self, ev: Input.Changed) -> None:
        try:
            n = int(self.query_one("#n", Input).value)
            s = int(self.query_one("#s", Input).value)
        except ValueError:
            self.query_one("#proj-note", Static).update("N and S must be whole numbers")
            return
        if n < 1 or s < 1:
            self.query_one("#proj-note", Static).update("N and S must be at least 1")
            return
        self.query_one("#proj-note", Static).update("")
        self.compute(n, s)

    @work(thread=True, exclusive=True)
    def compute(self, n: int, s: int) -> None:
        from rtax_tui.analysis.report import project_report

        proj = project_report(self.rec, n, s)
        self.app.call_from_thread(self._show, proj)

    def _show(self, proj: dict[str, Any]) -> None:
        t = self.query_one("#proj", DataTable)
        t.clear()
        for c in proj["cells"]:  # the figures of `rtax project`, in its one style
            f = project_figures(c)
            t.add_row(styled(c["cell"]), f["per traj"], f["worker-h"], f["95% CI"])
        rough = any(project_rough(c) for c in proj["cells"])
        self.query_one("#proj-legend", Static).update(
            PROJECT_LEGEND + (ROUGH_LINE if rough else "")
        )


PROJECT_LEGEND = (
    "medians of this recording's measured trials; worker-hours and its 95% interval in "
    "hours; escape: close"
)
ROUGH_LINE = "\n" + ROUGH_NOTE


RESULT_STYLES = {"blocked": "green", "held": "green", "breached": "bold red", "n/a": "dim"}


class BoundaryPanel(ModalScreen[None]):
    """The driver × check matrix beside the cost figures: a `rtax probe` recording's own
    results, or, for a run, the last probe of each driver that its header carries."""

    BINDINGS = [Binding("escape,b,q", "dismiss", "close")]

    def __init__(self, header: dict[str, Any] | None, events: list[dict[str, Any]]) -> None:
        super().__init__()
        from rtax_tui.model.probedoc import matrix

        self.columns = matrix(header, events)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="wide"):
            yield Label("Boundaries: what each driver keeps out (rtax probe)", classes="title")
            if not self.columns:
                yield Static(
                    "No boundary in this recording: `rtax probe` measures them, and later "
                    "runs record the last result of each driver."
                )
            else:
                yield DataTable(id="bounds", cursor_type="row", zebra_stripes=False)
                notes = [f"{k}: {c['note']}" for k, c in self.columns.items()]
                yield Static(styled("\n".join(notes)), id="bounds-note", classes="legend")
            yield Static(
                "[dim]green: blocked / held (kept out); red: breached; dim: n/a; "
                "-: not probed. escape: close[/dim]"
            )

    def on_mount(self) -> None:
        if not self.columns:
            return
        from rtax_tui.model.checks import CHECKS

        t = self.query_one("#bounds", DataTable)
        t.add_column("check", key="check")
        for key in self.columns:
            t.add_column(key, key=key)
        for check in CHECKS:
            row: list[Any] = [check.name]
            for col in self.columns.values():
                result = col["checks"].get(check.name)
                row.append(Text(result or "-", style=RESULT_STYLES.get(result or "", "dim")))
            t.add_row(*row, key=check.name)
