"""The monitor's panel under the cells table: a histogram per phase of the selected
cell, the capacity barrier (capacity runs) and the failures."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, Vertical

from rtax_tui.render.tables import fmt_time
from rtax_tui.ui.fit import border_room, fit_title
from rtax_tui.ui.histogram import STRIP_UNDER, Histogram
from rtax_tui.ui.livestate import LiveState
from rtax_tui.ui.widgets import BarrierView, FailureLog

HIST_PHASES = ("create", "ready", "action", "teardown", "total")


def hist_title(phase: str, p50: float | None, p95: float | None, n: int, width: int) -> str:
    """A histogram's title, whole in its box `width` wide: the longest that fits of
    phase, P50, P95 and n (`create P50 12ms P95 13.7ms n=2` down to `create`)."""
    a, b = fmt_time(p50), fmt_time(p95)
    return fit_title(
        (
            f"{phase}  P50 {a}  P95 {b}  n={n}",
            f"{phase} P50 {a} P95 {b} n={n}",
            f"{phase} P50 {a} P95 {b}",
            f"{phase} {a} / {b}",
            phase,
        ),
        border_room(width) if width else 1_000,
    )


class HistogramPanel(Grid):
    """Drawn from `LiveState` when the screen's timer says so (`draw`)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hists = {p: Histogram(p, id=f"h-{p}", classes="hist") for p in HIST_PHASES}
        self.barrier = BarrierView(id="barrier", classes="side")
        self.failures = FailureLog(id="failures", classes="side")

    def compose(self) -> ComposeResult:
        yield from self.hists.values()
        with Vertical(id="side"):
            yield self.barrier
            yield self.failures

    def on_mount(self) -> None:
        for p, h in self.hists.items():
            h.border_title = p
        self.barrier.display = False
        self.barrier.border_title = "capacity barrier"
        self.failures.border_title = "failures"

    def draw(self, st: LiveState, cell: str | None, log_axis: bool) -> None:
        """The histograms of `cell` (empty when none is selected), the barrier once the
        run is a capacity run, the failures so far."""
        cs = st.cells.get(cell) if cell else None
        for p, h in self.hists.items():
            if cs is None:
                h.set_data((), None, None, (), log_axis)
                h.border_title = p
                continue
            ps = cs.phases[p]
            p50, p95 = ps.percentiles_ms(exact=st.status is not None)
            others = [v for c, v in st.medians_ms(p).items() if c != cell]
            few = ps.samples.tolist() if 0 < ps.n < STRIP_UNDER else ()
            h.set_data(ps.counts, p50, p95, others, log_axis, few)
            h.border_title = hist_title(p, p50, p95, ps.n, h.outer_size.width)
        if st.is_capacity:
            self.barrier.display = True
            self.barrier.update_from(st)
        self.failures.update_from(st)
