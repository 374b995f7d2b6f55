"""Two recordings side by side: per cell and phase, medians, b − a with its interval."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from rtax_tui.render.plaintext import styled
from rtax_tui.ui.histogram import fmt_ms


class CompareScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "back", "back")]

    def __init__(self, path_a: str, path_b: str) -> None:
        super().__init__()
        self.path_a, self.path_b = path_a, path_b

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="τ")
        with Vertical(id="main"):
            yield Static(styled(f"a: {self.path_a}\nb: {self.path_b}"), id="cmp-head")
            yield DataTable(id="cmp")
            yield Static("reading both recordings…", id="cmp-note")
        yield Static(id="too-small")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "rtax compare"
        self.sub_title = "b − a, 95% bootstrap interval; verdicts Holm-corrected, 5% and 0.5ms"
        t = self.query_one("#cmp", DataTable)
        t.cursor_type = "row"
        t.zebra_stripes = True
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT, judge, parse_min_effect
        from rtax_tui.analysis.report import compare_reports
        from rtax_tui.model.recording import read_recording

        try:
            a, b = read_recording(self.path_a), read_recording(self.path_b)
            # a rerun that changed one thing (the channel, a driver) still lines up: the
            # pairing rule of `rtax compare --changed` (one function), and its verdicts
            min_effect = parse_min_effect(DEFAULT_MIN_EFFECT)
            cmp = compare_reports(a, b, changed=True, min_effect=min_effect)
            judge(cmp, min_effect)
        except Exception as exc:  # a bad file: say which and why, stay usable
            self.app.call_from_thread(self._error, str(exc))
            return
        self.app.call_from_thread(self._show, cmp)

    def _error(self, text: str) -> None:
        self.query_one("#cmp-note", Static).update(styled((f"cannot compare: {text}", "red")))

    def _show(self, cmp: dict[str, Any]) -> None:
        t = self.query_one("#cmp", DataTable)
        # fixed widths, known before the first row: auto widths left the first row drawn
        # at the headers' widths
        cell_w = max([len("cell"), *(len(r["cell"]) for r in cmp["rows"])])
        for col, w in (("cell", cell_w), ("phase", 13), ("a P50", 8), ("b P50", 8),
                       ("b − a", 10), ("95% CI", 20), ("b/a", 5), ("p Holm", 7),
                       ("b is", 8)):  # fmt: skip
            t.add_column(col, key=col, width=w)
        for r in cmp["rows"]:
            lo, hi = r["ci95_ms"]
            verdict = r["verdict"]
            style = {"faster": "bold green", "slower": "bold red"}.get(verdict, "")
            ratio = r["ratio"]
            t.add_row(
                styled(r["cell"]),  # a recording's label: text, never markup
                styled(r["phase"]),
                fmt_ms(r["a_p50_ms"]),
                fmt_ms(r["b_p50_ms"]),
                f"{r['diff_ms']:+.3f}ms",
                Text(f"[{lo:+.3f}, {hi:+.3f}]"),
                "-" if ratio is None else f"{ratio:.2f}",
                f"{r['p_holm']:.3f}",
                Text(verdict, style=style),
            )
        note = f"run a {cmp['a']}, run b {cmp['b']}: {len(cmp['rows'])} rows"
        if not cmp["rows"]:
            note = (
                "no cell is in both recordings (cells match by host/driver/workload/channel, "
                "or differ in one of them)"
            )
        self.query_one("#cmp-note", Static).update(styled(note))

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.exit()
