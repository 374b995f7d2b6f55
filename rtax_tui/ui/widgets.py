"""The console's widgets: each draws from `LiveState` when the screen's timer says so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from rtax_tui.analysis.noise_report import FEW
from rtax_tui.model.fidelity import FIDELITY_MIN
from rtax_tui.model.fold import SizeFold
from rtax_tui.render.noise_render import ROUGH
from rtax_tui.render.plaintext import styled
from rtax_tui.render.tables import fmt_interval, fmt_time
from rtax_tui.ui.livestate import LiveState

TABLE_PHASES = ("create", "ready", "action", "teardown", "total")
SHORT = {"teardown": "tdown"}
MARK = {"waiting": ("·", "dim"), "working": ("◐", "yellow"), "arrived": ("●", "green"),
        "done": ("●", "green"), "failed": ("✗", "bold red")}  # fmt: skip


UNSTABLE = "⚠"  # beside a cell whose figures may be unstable (analysis.noise_report)
DIFFER = "≠"  # beside a cell whose programs differ from a compared cell's (model.programs)
PRECISION_STYLE = {"precise": "green", "wide": "yellow", "failing": "bold red"}


@dataclass(frozen=True)
class Col:
    """A column of the cells table: its key, its two-line header, its width, and its
    rank: the columns of lower ranks are kept first when the terminal is narrow."""

    key: str
    label: str
    width: int
    rank: int


FIG = 8  # a figure: `~0.235ms`, `~12.6ms`
PHASE_COLS = tuple(
    Col(f"{p}{q}", f"{SHORT.get(p, p)}\nP{q}", FIG, {50: 3, 95: 6, 99: 10}[q])
    for p in TABLE_PHASES[:-1]
    for q in (50, 95, 99)
)
# in the order they are shown: the counts, the total (the figure that matters most)
# with what a wide terminal has room for, then the phases
COLUMNS = (
    Col("n", "\nn", 3, 1),
    Col("fail", "\nfail", 4, 2),
    Col("inv", "\ninv", 3, 5),
    Col("total50", "total\nP50", FIG, 0),
    Col("total95", "total\nP95", FIG, 0),
    Col("total99", "total\nP99", FIG, 7),
    Col("totalci", "total P50\n95% interval", 17, 8),
    Col("outliers", "out-\nliers", 5, 9),
    *PHASE_COLS,
    Col("precision", "\nprecision", 14, 0),  # a precision run: the verdict
)
PAD = 2  # a DataTable column's padding, one each side
CELL_MIN = 16  # the cell's name gets at least this when the terminal is narrow


def fit_columns(width: int, name_w: int, precision: bool) -> tuple[int, list[Col]]:
    """The cell column's width and the columns shown in a table `width` wide: whole
    ranks, lowest first, while they fit (a rank that does not is skipped, a later
    smaller one may still fit); the cell's name gets what the ranks up to the phases'
    P50 leave, up to its longest name."""
    cols = [c for c in COLUMNS if precision or c.key != "precision"]
    core = sum(c.width + PAD for c in cols if c.rank <= 3)
    cell_w = max(4, min(name_w, max(CELL_MIN, width - core - PAD)))
    room = width - cell_w - PAD
    keep: set[str] = set()
    for rank in sorted({c.rank for c in cols}):
        group = [c for c in cols if c.rank == rank]
        need = sum(c.width + PAD for c in group)
        if need <= room:
            keep.update(c.key for c in group)
            room -= need
    return cell_w, [c for c in cols if c.key in keep]


class CellTable(DataTable[str | Text]):
    """One row per cell: counts, then the total's P50 and P95 and each phase's, rows
    appearing as cells do; the columns fit the terminal (`fit_columns`): on a narrow one
    the phases show their P50 (`v`: their P95 instead), on a wide one the total's P99,
    its median's 95% interval and its outliers come in.

    A cell's name carries the report's marks: ⚠ its figures may be unstable, ≠ its
    programs differ from a compared cell's (the reasons are on the selected line); a
    figure from fewer than 10 samples reads `~` as in the report; a precision run adds
    each cell's verdict at the latest check and how far its interval reaches."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.header_height = 2
        self.phase_q = 50  # the phases' figure when only one of P50/P95 fits
        self._layout: tuple[int, tuple[str, ...]] = (0, ())
        self._cols: list[str] = []
        self._shown: dict[str, tuple[object, ...]] = {}
        self._name_w = len("cell")
        self._restore_row = -1

    def _relayout(self, state: LiveState, names: dict[str, Text]) -> None:
        """The columns again when the width, the longest name or `phase_q` asks for
        others (every row is drawn again: rare, on a resize)."""
        width = self.size.width or self.app.size.width
        name_w = max([len("cell"), *(len(n) for n in names.values())])
        cell_w, cols = fit_columns(width, name_w, state.is_precision)
        keys = [c.key for c in cols]
        if not any(k.endswith("95") and k != "total95" for k in keys):  # P50 or P95
            keys = [k[:-2] + str(self.phase_q) if k[:-2] in TABLE_PHASES[:-1] else k for k in keys]
        layout = (cell_w, tuple(keys))
        if layout == self._layout:
            return
        row = self.cursor_row
        self.clear(columns=True)
        self._shown = {}
        self._layout = layout
        self._cols = keys
        self.add_column(Text("\ncell"), key="cell", width=cell_w)
        labels = {c.key: c for c in COLUMNS}
        for k in keys:
            c = labels.get(k) or next(p for p in PHASE_COLS if p.key == k)
            self.add_column(Text(c.label), key=k, width=c.width)
        self._restore_row = row

    def toggle_phase_figure(self) -> None:
        """The phases' P95 instead of their P50 (or back) when only one fits."""
        self.phase_q = 95 if self.phase_q == 50 else 50
        self._layout = (0, ())

    def update_from(self, state: LiveState) -> None:
        exact = state.status is not None
        names = {}
        for cid, cs in state.cells.items():
            noise = state.stability(cid, exact=exact)
            marks = cell_marks(bool(noise and noise["unstable"]), bool(state.programs_differ(cid)))
            names[cid] = _cell_name(cid, cs.fidelity(), marks)
        self._restore_row = -1
        self._relayout(state, names)
        for cid in state.cells:
            vals = [self._value(col, state, cid) for col in self._cols]
            name = names[cid]
            key = (str(name), *(str(v) for v in vals))
            if cid not in self._shown:
                self.add_row(name, *vals, key=cid)
            elif self._shown[cid] != key:
                if str(name) != self._shown[cid][0]:
                    self.update_cell(cid, "cell", name)
                old = self._shown[cid][1:]
                for col, v, o in zip(self._cols, vals, old, strict=True):
                    if str(v) != o:
                        self.update_cell(cid, col, v)
            self._shown[cid] = key
        if self._restore_row > 0 and self.row_count:
            self.move_cursor(row=min(self._restore_row, self.row_count - 1))

    def _value(self, col: str, state: LiveState, cid: str) -> str | Text:
        """What column `col` shows for cell `cid`."""
        cs = state.cells[cid]
        exact = state.status is not None
        if col == "n":
            return str(cs.n)
        if col == "fail":
            return Text(str(cs.failed), style="bold red" if cs.failed else "")
        if col == "inv":
            return Text(str(cs.invalid), style="yellow" if cs.invalid else "")
        if col == "precision":
            return precision_text(state.precision_of(cid))
        phase, q = (col[:-2], col[-2:]) if col != "outliers" else ("total", "out")
        ps = cs.phases[phase]
        mark = ROUGH if 0 < ps.n < FEW else ""
        if q in ("50", "95"):
            p50, p95 = ps.percentiles_ms(exact=exact)
            return mark + fmt_time(p50 if q == "50" else p95)
        tail = ps.tail(exact=exact)
        if tail is None:
            return "-"
        if q == "99":
            return mark + fmt_time(tail.p99_ms)
        if q == "ci":
            return mark + fmt_interval(tail.ci_lo_ms, tail.ci_hi_ms)
        return Text(str(tail.outliers), style="yellow" if tail.outliers else "")

    def reset(self) -> None:
        """No rows (a replay starting again)."""
        self.clear()
        self._shown = {}

    def move_selection(self, delta: int) -> None:
        """Select the cell `delta` rows on, round the end."""
        if self.row_count:
            self.move_cursor(row=(self.cursor_row + delta) % self.row_count)

    def fit_height(self, most: int) -> None:
        """As tall as its rows and header, up to `most` lines (+1 for the horizontal
        scrollbar when its columns are wider than it)."""
        bar = 1 if self.virtual_size.width > self.size.width > 0 else 0
        rows = min(self.row_count + self.header_height + bar, most)
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows

    @property
    def selected_cell(self) -> str | None:
        if self.row_count == 0:
            return None
        row = min(max(self.cursor_row, 0), self.row_count - 1)
        return str(self.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value)


def cell_marks(unstable: bool, differ: bool) -> list[tuple[str, str]]:
    """The marks after a cell's name, each a glyph and its colour."""
    out = []
    if unstable:
        out.append((UNSTABLE, "bold yellow"))
    if differ:
        out.append((DIFFER, "bold magenta"))
    return out


def precision_text(got: tuple[str, float | None] | None) -> Text:
    """A cell's verdict at the latest precision check and its interval's reach
    (`precise ±3.2%`); `-` before the first check."""
    if got is None:
        return Text("-", style="dim")
    verdict, within = got
    reach = "" if within is None else f" ±{within * 100:.1f}%"
    return styled((verdict + reach, PRECISION_STYLE.get(verdict, "")))


def _cell_name(cid: str, fidelity: float | None, marks: Sequence[tuple[str, str]] = ()) -> Text:
    """A cell's name; a replay's with its fidelity so far beside it, in red and marked
    under FIDELITY_MIN (its figures are not representative of the agent's work); then
    the cell's marks (`cell_marks`)."""
    if fidelity is None:
        name = styled(cid)  # a recording's label: text, never markup
    elif fidelity < FIDELITY_MIN:
        name = styled((f"{cid} fid {100 * fidelity:.0f}% !", "bold red"))
    else:
        name = styled(f"{cid} fid {100 * fidelity:.0f}%")
    for glyph, style in marks:
        name.append(" ")
        name.append(glyph, style=style)
    return name


DENSE_OVER = 64  # a batch larger than this is drawn as counts per state, not marks
DENSITY_WIDTH = 40


def density_bar(counts: dict[str, int], size: int, width: int = DENSITY_WIDTH) -> Text:
    """A large batch at a glance: one bar split in proportion to the states' counts, then
    each state's count (a thousand marks would not fit, nor be read)."""
    t = Text()
    order = ("done", "arrived", "working", "failed", "waiting")
    cols = {k: round(width * counts.get(k, 0) / size) if size else 0 for k in order}
    for k in order:
        ch, style = MARK[k]
        t.append(ch * cols[k], style=style)
    t.append("\n")
    for k in ("waiting", "working", "arrived", "failed"):
        ch, style = MARK[k]
        n = counts.get(k, 0) + (counts.get("done", 0) if k == "arrived" else 0)
        t.append(f"{ch} {k} {n}  ", style=style)
    t.append("\n")
    return t


class BarrierView(Static):
    """The current capacity batch: a mark per environment (counts per state when the
    batch is large), its deadline countdown, and per cell and size the batches so far."""

    def update_from(self, state: LiveState) -> None:
        b = state.batch
        if b is None:
            self.update(Text("capacity: no batch yet", style="dim"))
            return
        t = Text()
        t.append(f"batch {b.batch}  {b.cell}  N={b.size}\n", style="bold")
        marks = state.batch_marks()
        counts = {k: 0 for k in MARK}
        for m in marks:
            counts[m] = counts.get(m, 0) + 1
        if b.size > DENSE_OVER:
            t.append_text(density_bar(counts, b.size))
        else:
            for m in marks:
                ch, style = MARK.get(m, ("?", ""))
                t.append(ch + " ", style=style)
            t.append("\n")
        t.append(
            f"arrived {counts['arrived'] + counts['done']}/{b.size}  "
            f"working {counts['working']}  failed {counts['failed']}\n"
        )
        if b.released:
            t.append(
                f"released: {b.released}\n", style="green" if b.released == "all_arrived" else "red"
            )
        elif b.deadline_s is not None:
            left = b.deadline_s - (state.clock_ns() - b.start_t_ns) / 1e9
            t.append(f"deadline in {max(0.0, left):.1f}s\n", style="yellow")
        per = state.batches_per_cell()
        for cs in state.cells.values():
            name = f"{cs.driver}/{cs.workload}/{cs.channel}"
            cap = cs.capacity
            if len(cap.sizes) <= 1:
                t.append(f"{name}: passed {cap.passed_batches}/{cap.batches}")
                t.append(f" of {per}" if per else "")
                for ss in cap.sizes.values():
                    t.append(f", arrived {ss.arrived}/{ss.tasks}{_peak(ss)}")
                t.append("\n")
                continue
            t.append(f"{name}:\n")
            for size in sorted(cap.sizes):
                ss = cap.sizes[size]
                t.append(
                    f"  N={size}: passed {ss.passed}/{ss.batches}"
                    f", arrived {ss.arrived}/{ss.tasks}{_peak(ss)}\n",
                    style="" if ss.passed == ss.batches else "red",
                )
        self.update(t)


def _peak(ss: SizeFold) -> str:
    if ss.mem_peak_bytes is None:
        return ""
    kills = f", {ss.oom_kills} OOM kills" if ss.oom_kills else ""
    return f", peak {ss.mem_peak_bytes / (1 << 20):.0f} MiB{kills}"


class FailureLog(Static):
    """The latest failures with their phase and reason (newest last)."""

    def update_from(self, state: LiveState, lines: int = 50) -> None:
        if not state.failures:
            self.update(Text("no failures", style="dim"))
            return
        t = Text()
        for f in state.failures[-lines:]:
            t.append(f"{f.t_ns / 1e9:8.2f}s ", style="dim")
            t.append(f"#{f.trial} {f.cell} ", style="bold")
            t.append(f"{f.phase}/{f.kind}", style="red")
            t.append(f": {f.message}\n")
        self.update(t)


def progress_text(state: LiveState, extra: str = "", left_s: float | None = None) -> Text:
    """Trials done, failures, in flight, the run's clock and `left_s` (what the screen
    knows is left: a live run's estimate from its trials, a replay's rest of the
    recording at its speed; None says nothing)."""
    t = Text()
    done, planned = state.ended, state.planned
    t.append(f"trials {done}/{planned or '?'}", style="bold")
    failed = sum(c.failed for c in state.cells.values())
    t.append(f"  failed {failed}", style="bold red" if failed else "")
    t.append(f"  in flight {state.in_flight}  elapsed {state.elapsed_s():.1f}s")
    if left_s is not None:
        t.append(f"  ~{left_s:.0f}s left")
    if state.status is not None:
        t.append(
            f"  run {state.status}", style="green" if state.status == "completed" else "yellow"
        )
    if extra:
        t.append(f"  {extra}", style="italic")
    return t


def position_text(pos_t_ns: int, end_t_ns: int, width: int, label: str) -> Text:
    """A replay's position bar, its time and its label in `width` columns: the bar
    gets what the time and the label leave (at least 10)."""
    frac = 0.0 if end_t_ns <= 0 else min(1.0, pos_t_ns / end_t_ns)
    tail = f" {pos_t_ns / 1e9:.2f}s / {end_t_ns / 1e9:.2f}s  {label}"
    bar_w = max(10, width - len(tail) - 1)
    filled = int(frac * bar_w)
    t = Text(no_wrap=True, overflow="crop")
    t.append("█" * filled, style="green")
    t.append("░" * (bar_w - filled), style="dim")
    t.append(tail)
    return t
