"""The console's widgets: each draws from `LiveState` when the screen's timer says so."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from rtax_tui.analysis.noise_report import FEW
from rtax_tui.model.fidelity import FIDELITY_MIN
from rtax_tui.model.fold import SizeFold
from rtax_tui.render.noise_render import ROUGH
from rtax_tui.render.plaintext import styled
from rtax_tui.ui.histogram import fmt_ms
from rtax_tui.ui.livestate import LiveState

TABLE_PHASES = ("create", "ready", "action", "teardown", "total")
SHORT = {"teardown": "tdown"}
MARK = {"waiting": ("·", "dim"), "working": ("◐", "yellow"), "arrived": ("●", "green"),
        "done": ("●", "green"), "failed": ("✗", "bold red")}  # fmt: skip


UNSTABLE = "⚠"  # beside a cell whose figures may be unstable (analysis.noise_report)
DIFFER = "≠"  # beside a cell whose programs differ from a compared cell's (model.programs)
PRECISION_STYLE = {"precise": "green", "wide": "yellow", "failing": "bold red"}


class CellTable(DataTable[str | Text]):
    """One row per cell: counts, then P50/P95 of each phase; rows appear as cells do.

    A cell's name carries the report's marks: ⚠ its figures may be unstable, ≠ its
    programs differ from a compared cell's (the reasons are on the selected line); a
    figure from fewer than 10 samples reads `~` as in the report; a precision run adds
    each cell's verdict at the latest check and how far its interval reaches."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_column("cell", key="cell", width=20)
        for k in ("n", "fail", "inv"):
            self.add_column(k, key=k, width=4)

        for p in TABLE_PHASES:  # fixed widths: live updates never make columns jump
            self.add_column(f"{SHORT.get(p, p)} P50", key=f"{p}50", width=10)
            self.add_column("P95", key=f"{p}95", width=8)
        self._cols = ["n", "fail", "inv"] + [f"{p}{q}" for p in TABLE_PHASES for q in (50, 95)]
        self._shown: dict[str, tuple[object, ...]] = {}

    def update_from(self, state: LiveState) -> None:
        exact = state.status is not None
        if state.is_precision and "precision" not in self._cols:
            self.add_column("precision", key="precision", width=14, default="")
            self._cols.append("precision")
            self._shown = {cid: (*shown, "") for cid, shown in self._shown.items()}
        for cid, cs in state.cells.items():
            vals: list[str | Text] = [
                str(cs.n),
                Text(str(cs.failed), style="bold red" if cs.failed else ""),
                Text(str(cs.invalid), style="yellow" if cs.invalid else ""),
            ]
            for p in TABLE_PHASES:
                ps = cs.phases[p]
                p50, p95 = ps.percentiles_ms(exact=exact)
                mark = ROUGH if 0 < ps.n < FEW else ""
                vals += [mark + fmt_ms(p50), mark + fmt_ms(p95)]
            if "precision" in self._cols:
                vals.append(precision_text(state.precision_of(cid)))
            noise = state.stability(cid, exact=exact)
            marks = cell_marks(bool(noise and noise["unstable"]), bool(state.programs_differ(cid)))
            name = _cell_name(cid, cs.fidelity(), marks)
            key = (str(name), *(str(v) for v in vals))
            if cid not in self._shown:
                self._fit(name)
                self.add_row(name, *vals, key=cid)
            elif self._shown[cid] != key:
                if str(name) != self._shown[cid][0]:
                    self._fit(name)
                    self.update_cell(cid, "cell", name)
                old = self._shown[cid][1:]
                for col, v, o in zip(self._cols, vals, old, strict=True):
                    if str(v) != o:
                        self.update_cell(cid, col, v)
            self._shown[cid] = key

    def reset(self) -> None:
        """No rows (a replay starting again)."""
        self.clear()
        self._shown = {}

    def move_selection(self, delta: int) -> None:
        """Select the cell `delta` rows on, round the end."""
        if self.row_count:
            self.move_cursor(row=(self.cursor_row + delta) % self.row_count)

    def fit_height(self, most: int) -> None:
        """As tall as its rows, up to `most` lines (+1 the header, +1 the horizontal
        scrollbar of narrow terminals)."""
        rows = min(self.row_count + 2, most)
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows

    def _fit(self, name: str | Text) -> None:
        """Widen the cell column for a long name (ssh hosts, a fidelity) before it shows."""
        col = self.columns[ColumnKey("cell")]
        if len(name) > col.width:
            col.width = len(name)
            self._require_update_dimensions = True

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


def progress_text(state: LiveState, extra: str = "") -> Text:
    t = Text()
    done, planned = state.ended, state.planned
    t.append(f"trials {done}/{planned or '?'}", style="bold")
    failed = sum(c.failed for c in state.cells.values())
    t.append(f"  failed {failed}", style="bold red" if failed else "")
    t.append(f"  in flight {state.in_flight}  elapsed {state.elapsed_s():.1f}s")
    eta = state.eta_s()
    if eta is not None:
        t.append(f"  ~{eta:.0f}s left")
    if state.status is not None:
        t.append(
            f"  run {state.status}", style="green" if state.status == "completed" else "yellow"
        )
    if extra:
        t.append(f"  {extra}", style="italic")
    return t


def position_text(pos_t_ns: int, end_t_ns: int, width: int, label: str) -> Text:
    frac = 0.0 if end_t_ns <= 0 else min(1.0, pos_t_ns / end_t_ns)
    bar_w = max(10, width - len(label) - 24)
    filled = int(frac * bar_w)
    t = Text()
    t.append("█" * filled, style="green")
    t.append("░" * (bar_w - filled), style="dim")
    t.append(f" {pos_t_ns / 1e9:7.2f}s / {end_t_ns / 1e9:.2f}s  {label}")
    return t
