"""A histogram drawn with block characters from log-spaced bin counts.

Drawing costs O(bins + width), never O(samples): the counts come binned from
`LiveState`. The x axis is log (bins as they are) or linear (bins placed by their
centre), over the selected cell's own range; P50 and P95 are marked under the bars,
other cells' medians with `·` where they fall on the axis and `◂`/`▸` at its edge
when they fall off it. Under STRIP_UNDER samples each is a dot (a strip plot): with a
handful, every non-empty bin of a histogram was drawn full height.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from rtax_tui.render.tables import fmt_time
from rtax_tui.ui.livestate import BIN_LO_NS, BINS_PER_DECADE, N_BINS, bin_edges_ns

EIGHTHS = " ▁▂▃▄▅▆▇█"


def _pos_of_ns(ns: float) -> float:
    """Fractional bin position of a value on the log axis."""
    if ns <= BIN_LO_NS:
        return 0.0
    return math.log10(ns / BIN_LO_NS) * BINS_PER_DECADE


STRIP_UNDER = 20  # samples: fewer are drawn one dot each (bars of 3 samples mislead)
DOT = "●"
BELOW, ABOVE = "◂", "▸"  # another cell's median off the axis, on that side
OTHER = "·"  # another cell's median on the axis


class Layout:
    """Maps values to columns for one drawing, on a log or linear axis spanning the
    selected cell's own samples (its bins), whatever the other cells' range."""

    def __init__(self, counts: Sequence[int], width: int, log: bool):
        nz = [i for i, c in enumerate(counts) if c]
        self.lo_b = max(0, min(nz, default=0) - 1)
        self.hi_b = min(N_BINS, max(nz, default=0) + 2)
        self.width = max(1, width)
        self.log = log
        self.vmin = bin_edges_ns(self.lo_b)[0]
        self.vmax = bin_edges_ns(self.hi_b - 1)[1]

    def side_of_ns(self, ns: float) -> int:
        """-1 below the axis, 1 above it, 0 on it."""
        return -1 if ns < self.vmin else 1 if ns > self.vmax else 0

    def col_of_ns(self, ns: float) -> int:
        if self.log:  # the column of the value's bin, as the bars are drawn
            frac = (min(int(_pos_of_ns(ns)), N_BINS - 1) + 0.5 - self.lo_b) / (
                self.hi_b - self.lo_b
            )
        else:
            frac = (ns - self.vmin) / (self.vmax - self.vmin)
        return min(self.width - 1, max(0, int(frac * self.width)))

    def col_exact(self, ns: float) -> int:
        """The column of the value itself (a dot of the strip plot), not its bin's."""
        if self.log:
            frac = (_pos_of_ns(ns) - self.lo_b) / (self.hi_b - self.lo_b)
        else:
            frac = (ns - self.vmin) / (self.vmax - self.vmin)
        return min(self.width - 1, max(0, int(frac * self.width)))

    def columns(self, counts: Sequence[int]) -> list[int]:
        cols = [0] * self.width
        if self.log:
            span = self.hi_b - self.lo_b
            for c in range(self.width):
                b0 = self.lo_b + (c * span) // self.width
                b1 = max(b0 + 1, self.lo_b + ((c + 1) * span) // self.width)
                cols[c] = sum(counts[b0:b1])
        else:
            for b in range(self.lo_b, self.hi_b):
                if counts[b]:
                    lo, hi = bin_edges_ns(b)
                    cols[self.col_of_ns((lo + hi) / 2)] += counts[b]
        return cols


def _bars(cols: list[int], rows: int) -> list[str]:
    """Block bars, top row first, scaled to the tallest column (eighths of a row)."""
    top = max(cols) or 1
    levels = [max(1, round(c / top * rows * 8)) if c else 0 for c in cols]
    return [
        "".join(EIGHTHS[min(8, max(0, lv - (row - 1) * 8))] for lv in levels)
        for row in range(rows, 0, -1)
    ]


def _dots(samples_ns: Sequence[float], lay: Layout, rows: int) -> list[str]:
    """A dot plot: each sample a dot in its own column, stacked where they meet (a
    column with more than `rows` shows its count on top)."""
    per = [0] * lay.width
    for v in samples_ns:
        per[lay.col_exact(v)] += 1
    out = []
    for row in range(rows, 0, -1):
        line = []
        for n in per:
            if n > rows and row == rows:
                line.append(str(n) if n < 10 else "+")
            else:
                line.append(DOT if n >= row else " ")
        out.append("".join(line))
    return out


def draw(
    counts: Sequence[int],
    width: int,
    height: int,
    *,
    p50_ms: float | None,
    p95_ms: float | None,
    others_ms: Sequence[float] = (),
    log: bool = True,
    samples_ns: Sequence[float] = (),
) -> Text:
    """The histogram as `height` lines of `width` cells: bars (a dot per sample when
    `samples_ns` holds under STRIP_UNDER), a marker row, an axis row. The axis spans
    this cell's samples; the other cells' medians are marked `·` where they fall on it,
    `◂`/`▸` at its edge when they fall off it."""
    width = max(10, width)
    rows = max(1, height - 2)
    if not any(counts):
        return Text("no samples yet".center(width), style="dim")
    lay = Layout(counts, width, log)
    strip = 0 < len(samples_ns) < STRIP_UNDER
    lines = _dots(samples_ns, lay, rows) if strip else _bars(lay.columns(counts), rows)
    p50c = lay.col_of_ns(p50_ms * 1e6) if p50_ms is not None else None
    p95c = lay.col_of_ns(p95_ms * 1e6) if p95_ms is not None else None
    if strip:
        p50c = lay.col_exact(p50_ms * 1e6) if p50_ms is not None else None
        p95c = lay.col_exact(p95_ms * 1e6) if p95_ms is not None else None
    out = Text(no_wrap=True, overflow="crop")
    for line in lines:
        for i, ch in enumerate(line):
            style = "bold green" if i == p50c else "yellow" if i == p95c else "cyan"
            out.append(ch, style=style)
        out.append("\n")
    marker = [" "] * width
    for m in others_ms:
        side = lay.side_of_ns(m * 1e6)
        col = 0 if side < 0 else width - 1 if side > 0 else lay.col_of_ns(m * 1e6)
        glyph = BELOW if side < 0 else ABOVE if side > 0 else OTHER
        if marker[col] in (" ", OTHER):  # an edge mark wins over a dot
            marker[col] = glyph
    if p95c is not None:
        marker[p95c] = "▲"
    if p50c is not None:
        marker[p50c] = "▲"
    for i, ch in enumerate(marker):
        style = "bold green" if i == p50c else "yellow" if i == p95c else "magenta"
        out.append(ch, style=style if ch != " " else "")
    out.append("\n")
    left, right = fmt_time(lay.vmin / 1e6), fmt_time(lay.vmax / 1e6)
    mid = f"{'log' if log else 'lin'}"
    gap = max(1, width - len(left) - len(right) - len(mid))
    axis = left + " " * (gap // 2) + mid + " " * (gap - gap // 2) + right
    out.append(axis[:width], style="dim")
    return out


class Histogram(Widget):
    """One phase of the selected cell; the screen sets its data and calls `refresh`."""

    DEFAULT_CSS = """
    Histogram { height: 1fr; min-height: 4; }
    """

    def __init__(self, phase: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.phase = phase
        self.counts: Sequence[int] = ()
        self.p50_ms: float | None = None
        self.p95_ms: float | None = None
        self.others_ms: Sequence[float] = ()
        self.samples_ns: Sequence[float] = ()
        self.log_axis = True

    def set_data(
        self,
        counts: Sequence[int],
        p50_ms: float | None,
        p95_ms: float | None,
        others_ms: Sequence[float],
        log: bool,
        samples_ns: Sequence[float] = (),
    ) -> None:
        """`samples_ns`: the cell's samples when they are few (a dot each), else ()."""
        self.counts = list(counts)
        self.samples_ns = list(samples_ns)
        self.p50_ms, self.p95_ms = p50_ms, p95_ms
        self.others_ms = list(others_ms)
        self.log_axis = log
        self.refresh()

    def render(self) -> Text:
        return draw(
            self.counts,
            self.content_size.width,
            self.content_size.height,
            p50_ms=self.p50_ms,
            p95_ms=self.p95_ms,
            others_ms=self.others_ms,
            log=self.log_axis,
            samples_ns=self.samples_ns,
        )
