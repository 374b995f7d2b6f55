"""A histogram drawn with block characters from log-spaced bin counts.

Drawing costs O(bins + width), never O(samples): the counts come binned from
`LiveState`. The x axis is log (bins as they are) or linear (bins placed by their
centre); P50 and P95 are marked under the bars, other cells' medians with `·`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from rtax_tui.ui.livestate import BIN_LO_NS, BINS_PER_DECADE, N_BINS, bin_edges_ns

EIGHTHS = " ▁▂▃▄▅▆▇█"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1:
        return f"{ms * 1000:.0f}µs" if ms < 0.01 else f"{ms:.3f}ms"
    if ms < 1000:
        return f"{ms:.3g}ms" if ms < 100 else f"{ms:.0f}ms"
    return f"{ms / 1000:.3g}s"


def _pos_of_ns(ns: float) -> float:
    """Fractional bin position of a value on the log axis."""
    if ns <= BIN_LO_NS:
        return 0.0
    return math.log10(ns / BIN_LO_NS) * BINS_PER_DECADE


class Layout:
    """Maps values to columns for one drawing, on a log or linear axis."""

    def __init__(self, counts: Sequence[int], marks_ns: Sequence[float], width: int, log: bool):
        nz = [i for i, c in enumerate(counts) if c]
        pos = [_pos_of_ns(v) for v in marks_ns]
        lo_b = min([*nz, *(int(p) for p in pos)], default=0)
        hi_b = max([*nz, *(int(p) for p in pos)], default=0) + 1
        self.lo_b = max(0, lo_b - 1)
        self.hi_b = min(N_BINS, hi_b + 1)
        self.width = max(1, width)
        self.log = log
        self.vmin = bin_edges_ns(self.lo_b)[0]
        self.vmax = bin_edges_ns(self.hi_b - 1)[1]

    def col_of_ns(self, ns: float) -> int:
        if self.log:  # the column of the value's bin, as the bars are drawn
            frac = (min(int(_pos_of_ns(ns)), N_BINS - 1) + 0.5 - self.lo_b) / (
                self.hi_b - self.lo_b
            )
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


def draw(
    counts: Sequence[int],
    width: int,
    height: int,
    *,
    p50_ms: float | None,
    p95_ms: float | None,
    others_ms: Sequence[float] = (),
    log: bool = True,
) -> Text:
    """The histogram as `height` lines of `width` cells: bars, a marker row, an axis row."""
    width = max(10, width)
    bars_h = max(1, height - 2)
    if not any(counts):
        return Text("no samples yet".center(width), style="dim")
    marks = [m * 1e6 for m in (p50_ms, p95_ms, *others_ms) if m is not None]
    lay = Layout(counts, marks, width, log)
    cols = lay.columns(counts)
    top = max(cols) or 1
    levels = [round(c / top * bars_h * 8) if c else 0 for c in cols]
    levels = [max(1, lv) if c else 0 for lv, c in zip(levels, cols, strict=True)]
    p50c = lay.col_of_ns(p50_ms * 1e6) if p50_ms is not None else None
    p95c = lay.col_of_ns(p95_ms * 1e6) if p95_ms is not None else None
    out = Text(no_wrap=True, overflow="crop")
    for row in range(bars_h, 0, -1):
        base = (row - 1) * 8
        line = "".join(EIGHTHS[min(8, max(0, lv - base))] for lv in levels)
        for i, ch in enumerate(line):
            style = "bold green" if i == p50c else "yellow" if i == p95c else "cyan"
            out.append(ch, style=style)
        out.append("\n")
    marker = [" "] * width
    for m in others_ms:
        marker[lay.col_of_ns(m * 1e6)] = "·"
    if p95c is not None:
        marker[p95c] = "▲"
    if p50c is not None:
        marker[p50c] = "▲"
    for i, ch in enumerate(marker):
        style = "bold green" if i == p50c else "yellow" if i == p95c else "magenta"
        out.append(ch, style=style if ch != " " else "")
    out.append("\n")
    left, right = fmt_ms(lay.vmin / 1e6), fmt_ms(lay.vmax / 1e6)
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
        self.log_axis = True

    def set_data(
        self,
        counts: Sequence[int],
        p50_ms: float | None,
        p95_ms: float | None,
        others_ms: Sequence[float],
        log: bool,
    ) -> None:
        self.counts = list(counts)
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
        )
