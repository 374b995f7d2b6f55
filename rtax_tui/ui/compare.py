"""Two recordings side by side: per cell and phase, medians, b − a with its interval.

What `rtax compare` flags is flagged here too: a row whose two cells ran other programs
(≠, `programs_differ`) and a row with a cell whose figures may be unstable (⚠,
`unstable`), each marked beside its cell and said in full, in `rtax compare`'s words,
under the table."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from rtax_tui.model.events import one_line
from rtax_tui.render.noise_render import ROUGH_NOTE
from rtax_tui.render.plaintext import styled
from rtax_tui.render.reporting import compare_figures, rough_pair
from rtax_tui.ui.fit import FitFooter
from rtax_tui.ui.widgets import DIFFER, UNSTABLE


class CompareScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "back", "back", show=False,
                tooltip="back (or quit when it is the only screen)"),
    ]  # fmt: skip

    def __init__(self, path_a: str, path_b: str) -> None:
        super().__init__()
        self.path_a, self.path_b = path_a, path_b

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="τ")
        with Vertical(id="main"):
            # a file's name is its writer's text: one line each, escapes shown
            head = f"a: {one_line(self.path_a)}\nb: {one_line(self.path_b)}"
            yield Static(styled(head), id="cmp-head")
            yield DataTable(id="cmp")
            yield Static(id="cmp-empty")
            yield Static("reading both recordings…", id="cmp-note")
            yield Static(id="cmp-flags")
        yield Static(id="too-small")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = "rtax compare"
        self.sub_title = "b − a, 95% interval; Holm-corrected, same under 5% or 0.5ms"
        t = self.query_one("#cmp", DataTable)
        t.cursor_type = "row"
        t.zebra_stripes = True
        self.query_one("#cmp-empty", Static).display = False
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT, judge, parse_min_effect
        from rtax_tui.analysis.pairing import cell_fields
        from rtax_tui.analysis.report import compare_reports
        from rtax_tui.model.recording import read_recording
        from rtax_tui.render.noise_render import compare_unstable_lines
        from rtax_tui.render.reporting import compare_programs_lines

        try:
            a, b = read_recording(self.path_a), read_recording(self.path_b)
            # a rerun that changed one thing (the channel, a driver) still lines up: the
            # pairing rule of `rtax compare --changed` (one function), and its verdicts
            min_effect = parse_min_effect(DEFAULT_MIN_EFFECT)
            cmp = compare_reports(a, b, changed=True, min_effect=min_effect)
            judge(cmp, min_effect)
            flags = [(DIFFER, line) for line in compare_programs_lines(cmp)]
            flags += [(UNSTABLE, line) for line in compare_unstable_lines(cmp)]
        except Exception as exc:  # a bad file: say which and why, stay usable
            self.app.call_from_thread(self._error, str(exc))
            return
        if not cmp["rows"]:
            why = no_pair_text(cmp, cell_fields(a.events), cell_fields(b.events))
            self.app.call_from_thread(self._nothing, why)
            return
        self.app.call_from_thread(self._show, cmp, flags)

    def _nothing(self, why: Text) -> None:
        """No pair: the reason where the table would be (an empty table with it only on
        the status line read as "no difference"), as `rtax compare` refuses the pair."""
        self.query_one("#cmp", DataTable).display = False
        empty = self.query_one("#cmp-empty", Static)
        empty.update(why)
        empty.display = True
        self.query_one("#cmp-note", Static).update(styled(("nothing compared", "bold red")))

    def _error(self, text: str) -> None:
        self.query_one("#cmp-note", Static).update(styled((f"cannot compare: {text}", "red")))

    def _show(self, cmp: dict[str, Any], flags: list[tuple[str, str]]) -> None:
        t = self.query_one("#cmp", DataTable)
        names = [row_name(r, cmp) for r in cmp["rows"]]
        # fixed widths, known before the first row: auto widths left the first row drawn
        # at the headers' widths
        cell_w = max([len("cell"), *(len(n) for n in names)])
        shown = _columns_that_fit(cell_w, self.size.width)
        for col, w in shown:
            t.add_column(col, key=col, width=w)
        keys = [c for c, _ in shown]
        for r, name in zip(cmp["rows"], names, strict=True):
            # the figures of `rtax compare`, in its one style (units, no exponent, ~)
            f = compare_figures(r)
            style = {"faster": "bold green", "slower": "bold red"}.get(f["b is"], "")
            values: dict[str, Any] = {
                "cell": name,
                "phase": styled(f["phase"]),
                "a P50": f["a P50"],
                "b P50": f["b P50"],
                "b − a": f["diff"],
                "b is": Text(f["b is"], style=style),
                "b/a": f["ratio"],
                "95% CI": Text(f["95% CI"]),
                "p Holm": f["p Holm"],
            }
            t.add_row(*(values[k] for k in keys))
        note = f"run a {cmp['a']}, run b {cmp['b']}: {len(cmp['rows'])} rows; {PAIRING}"
        left = [c for c, _ in COLUMNS if c not in keys]
        if left:  # never a column cut half-way: the ones that do not fit, named
            note += f"; {', '.join(left)}: in a wider terminal or `rtax compare`"
        if any(rough_pair(r) for r in cmp["rows"]):
            note += f"; {ROUGH_NOTE}"
        self.query_one("#cmp-note", Static).update(styled(note))
        lines = [styled((glyph + " ", GLYPH_STYLE[glyph]), line) for glyph, line in flags]
        flagged = self.query_one("#cmp-flags", Static)
        flagged.update(Text("\n").join(lines))
        flagged.display = bool(lines)

    def action_back(self) -> None:
        self.dismiss()


# The table's columns in the order drawn, with their widths ("cell": its longest name).
COLUMNS = (("cell", 0), ("phase", 13), ("a P50", 8), ("b P50", 8), ("b − a", 9), ("b is", 7),
           ("b/a", 6), ("95% CI", 19), ("p Holm", 6))  # fmt: skip
# Which go first where the terminal is narrow: the answer, then its interval, then the rest
PRIORITY = ("cell", "phase", "a P50", "b P50", "b − a", "b is", "95% CI", "b/a", "p Holm")
PADDING = 2  # a DataTable column's padding, one each side
SCROLLBAR = 2


def _columns_that_fit(cell_w: int, width: int) -> list[tuple[str, int]]:
    """The columns drawn at a terminal `width`, in COLUMNS' order: by PRIORITY while they
    fit whole (the first six always: without them there is no answer), so that no column
    is cut at the edge and scrolled to."""
    widths = {c: (cell_w if c == "cell" else w) for c, w in COLUMNS}
    room = width - SCROLLBAR
    keep: set[str] = set()
    for i, col in enumerate(PRIORITY):
        need = widths[col] + PADDING
        if i < 6 or need <= room:
            keep.add(col)
            room -= need
    return [(c, widths[c]) for c, _ in COLUMNS if c in keep]


GLYPH_STYLE = {UNSTABLE: "bold yellow", DIFFER: "bold magenta"}
PAIRING = "cells paired as `rtax compare --changed` pairs them"
CELLS_SHOWN = 6  # of each run, in the reason there is no pair


def no_pair_text(
    cmp: dict[str, Any], a: dict[str, tuple[str, ...]], b: dict[str, tuple[str, ...]]
) -> Text:
    """Why two runs give no row, in `rtax compare`'s words, with each run's cells (a
    recording's text: escapes visible, one line each)."""

    def cells(run: str, got: dict[str, tuple[str, ...]]) -> Text:
        names = [one_line(c) for c in list(got)[:CELLS_SHOWN]]
        more = f" … {len(got) - CELLS_SHOWN} more" if len(got) > CELLS_SHOWN else ""
        return styled((f"  {run}: ", "bold"), ", ".join(names) or "no trial", more)

    head = styled(
        ("No cell with samples in both runs: nothing to compare.", "bold red"),
        "\nCells pair when they have the same host, driver, workload, channel and mode, "
        "or differ in one of host, driver, channel or mode (a rerun that changed one "
        "thing); never across workloads, which run other programs, image modes or "
        "arrival patterns.",
    )
    return Text("\n").join([head, cells(f"a ({cmp['a']})", a), cells(f"b ({cmp['b']})", b)])


def row_name(r: dict[str, Any], cmp: dict[str, Any]) -> Text:
    """A row's cell (`A` or `A → B`, a recording's label: text, never markup) with the
    flags of `rtax compare`: ≠ its cells' programs differ, ⚠ one of them may be unstable
    (`unstable` names the cell of run a or b)."""
    name = styled(r["cell"])
    cell = str(r["cell"])
    shaky = any(
        cell == u["cell"]
        or (u["run"] == "a" and cell.startswith(f"{u['cell']} → "))
        or (u["run"] == "b" and cell.endswith(f" → {u['cell']}"))
        for u in cmp.get("unstable") or ()
    )
    for glyph, on in ((UNSTABLE, shaky), (DIFFER, bool(r.get("programs_differ")))):
        if on:
            name.append(" ")
            name.append(glyph, style=GLYPH_STYLE[glyph])
    return name
